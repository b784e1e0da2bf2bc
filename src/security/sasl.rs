//! SASL mechanisms: being written.
