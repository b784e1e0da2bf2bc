//! Access control lists: being written.
