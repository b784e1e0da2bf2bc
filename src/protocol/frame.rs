//! The broker's side of the wire: request frames and headers in, response frames out.

use bytes::{Buf, BufMut, Bytes, BytesMut};

use super::errors;
use kafka_protocol::messages::{ApiKey, RequestHeader, RequestKind, ResponseHeader, ResponseKind};
use kafka_protocol::protocol::{Decodable, Encodable};

/// Why a frame cannot be answered: the connection is closed (as the Java broker does).
#[derive(Debug, thiserror::Error)]
pub enum FrameError {
    #[error("frame of {0} bytes is shorter than a request header")]
    TooShort(usize),
    #[error("unknown API key {0}")]
    UnknownApiKey(i16),
    #[error("{api_key:?} v{version} cannot be decoded: {reason}")]
    Undecodable {
        api_key: ApiKey,
        version: i16,
        reason: String,
    },
    #[error("closing the connection: {0}")]
    Close(String),
    #[error("encoding the {api_key:?} v{version} response: {reason}")]
    Encode {
        api_key: ApiKey,
        version: i16,
        reason: String,
    },
}

/// The fixed start of every request header (all versions): key, version, correlation id.
#[derive(Debug, Clone, Copy)]
pub struct RequestStart {
    pub api_key: i16,
    pub api_version: i16,
    pub correlation_id: i32,
}

/// Reads the first 8 bytes of a request frame without consuming it.
pub fn peek_start(frame: &[u8]) -> Result<RequestStart, FrameError> {
    if frame.len() < 8 {
        return Err(FrameError::TooShort(frame.len()));
    }
    let mut start = frame;
    Ok(RequestStart {
        api_key: start.get_i16(),
        api_version: start.get_i16(),
        correlation_id: start.get_i32(),
    })
}

/// Decodes the full header at the version the API key and version call for.
pub fn decode_header(api_key: ApiKey, frame: &mut Bytes) -> Result<RequestHeader, FrameError> {
    let version = peek_start(frame)?.api_version;
    let header_version = api_key.request_header_version(version);
    RequestHeader::decode(frame, header_version).map_err(|e| FrameError::Undecodable {
        api_key,
        version,
        reason: format!("header: {e}"),
    })
}

/// Decodes a request body (the header already consumed).
pub fn decode_body(
    api_key: ApiKey,
    version: i16,
    body: &mut Bytes,
) -> Result<RequestKind, FrameError> {
    RequestKind::decode(api_key, body, version).map_err(|e| FrameError::Undecodable {
        api_key,
        version,
        reason: e.to_string(),
    })
}

/// Encodes a response frame: the 4-byte size, the response header, the body.
pub fn encode_response(
    api_key: ApiKey,
    version: i16,
    correlation_id: i32,
    response: &ResponseKind,
) -> Result<BytesMut, FrameError> {
    let encode_error = |e: anyhow::Error| FrameError::Encode {
        api_key,
        version,
        reason: e.to_string(),
    };
    let header = ResponseHeader::default().with_correlation_id(correlation_id);
    let header_version = api_key.response_header_version(version);
    // Fetch responses carry the records: size the buffer once rather than grow (and copy) it.
    let body_hint = match response {
        ResponseKind::Fetch(fetch) => fetch.compute_size(version).unwrap_or(0),
        _ => 0,
    };
    let mut out = BytesMut::with_capacity(64 + body_hint.max(192));
    out.put_i32(0);
    header
        .encode(&mut out, header_version)
        .map_err(encode_error)?;
    response.encode(&mut out, version).map_err(encode_error)?;
    let size = i32::try_from(out.len() - 4).map_err(|e| encode_error(e.into()))?;
    out[..4].copy_from_slice(&size.to_be_bytes());
    Ok(out)
}

/// The answer to an ApiVersions request at a version we do not support: v0, with
/// UNSUPPORTED_VERSION and our versions, so the client can retry at one we do (KIP-511).
pub fn api_versions_fallback(correlation_id: i32, supported: &[(ApiKey, i16, i16)]) -> BytesMut {
    let mut body = BytesMut::new();
    body.put_i16(errors::UNSUPPORTED_VERSION);
    body.put_i32(supported.len() as i32);
    for (key, min, max) in supported {
        body.put_i16(*key as i16);
        body.put_i16(*min);
        body.put_i16(*max);
    }
    let mut out = BytesMut::with_capacity(8 + body.len());
    out.put_i32(4 + body.len() as i32);
    out.put_i32(correlation_id);
    out.put_slice(&body);
    out
}

/// 128 random bits (topic ids, group member ids), from the standard library's randomly
/// seeded hasher: unpredictable enough for ids, not for secrets.
pub fn random_u128() -> u128 {
    use std::hash::{BuildHasher, RandomState};
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let high = RandomState::new().hash_one(nanos) as u128;
    let low = RandomState::new().hash_one(nanos ^ 0x5a5a) as u128;
    (high << 64) | low
}
