//! Kafka's security model: the SASL mechanisms (`sasl`: PLAIN, SCRAM-SHA-256/512 and
//! OAUTHBEARER, server and client sides, and Kafka's JAAS config values) and access control
//! (`acl`: ACL bindings, filters and the decision of Kafka's `StandardAuthorizer`), both
//! without I/O; the broker's OAUTHBEARER validators (`oauth`: unsecured tokens, JWTs checked
//! against a JWKS file) and TLS (`tls`: PEM stores read from files, rustls servers and
//! clients, certificate principals). The broker's connections, the metadata quorum and the
//! SDK use them.

pub mod acl;
#[cfg(feature = "oauth")]
pub mod oauth;
pub mod sasl;
#[cfg(feature = "tls")]
pub mod tls;
