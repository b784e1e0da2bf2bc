//! SaslHandshake and SaslAuthenticate as their handlers see them: only from a client that
//! needs no authentication (a PLAINTEXT listener) or has already authenticated, since the
//! connection's session answers them while a client authenticates (`server::session`). Both
//! are then out of place: ILLEGAL_SASL_STATE, as Kafka's `KafkaApis` answers (re-authentication,
//! KIP-368, is not served).

use kafka_protocol::messages::{
    SaslAuthenticateRequest, SaslAuthenticateResponse, SaslHandshakeRequest, SaslHandshakeResponse,
};

use super::str_bytes;
use crate::protocol::errors::KafkaError;

pub const HANDSHAKE_VERSIONS: (i16, i16) = (0, 1);
pub const AUTHENTICATE_VERSIONS: (i16, i16) = (0, 2);

pub fn handshake(_request: SaslHandshakeRequest) -> SaslHandshakeResponse {
    SaslHandshakeResponse::default().with_error_code(KafkaError::IllegalSaslState.code())
}

pub fn authenticate(_request: SaslAuthenticateRequest) -> SaslAuthenticateResponse {
    SaslAuthenticateResponse::default()
        .with_error_code(KafkaError::IllegalSaslState.code())
        .with_error_message(Some(str_bytes(
            "SaslAuthenticate outside a SASL handshake: this connection needs no (more) \
             authentication",
        )))
}
