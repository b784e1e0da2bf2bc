//! Kafka's security model: the SASL mechanisms (`sasl`: PLAIN and SCRAM-SHA-256/512, server
//! and client sides, and Kafka's JAAS config values), access control (`acl`: ACL bindings,
//! filters and the decision of Kafka's `StandardAuthorizer`), both without I/O, and TLS (`tls`:
//! PEM stores read from files, rustls servers and clients, certificate principals). The
//! broker's connections, the metadata quorum and the SDK use them.

pub mod acl;
pub mod sasl;
#[cfg(feature = "tls")]
pub mod tls;
