//! A TLS listener's settings: the types live with the TLS code (`security::tls::settings`),
//! which the SDK builds without the broker's config.

pub use crate::security::tls::settings::*;
