//! The Rust client SDK (growing): today a Kafka protocol connection, which `sluice cluster
//! --bootstrap-server` uses. Builds without the broker (`default-features = false,
//! features = ["client"]`).

use std::time::Duration;

use bytes::{BufMut, Bytes, BytesMut};
use kafka_protocol::messages::{ApiKey, RequestHeader, ResponseHeader};
use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// The largest response this client accepts.
const RESPONSE_BYTES_MAX: usize = 100 << 20;

#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("connecting to {addr}: {reason} (is a broker listening there?)")]
    Connect {
        addr: String,
        reason: std::io::Error,
    },
    #[error("I/O: {0}")]
    Io(#[from] std::io::Error),
    #[error("protocol: {0}")]
    Protocol(String),
    #[error("no answer within {0:?}")]
    Timeout(Duration),
}

/// One connection to a Kafka broker; requests are sent one at a time.
pub struct Connection {
    stream: TcpStream,
    correlation_id: i32,
    client_id: String,
    timeout: Duration,
}

impl Connection {
    pub async fn connect(addr: &str, timeout: Duration) -> Result<Connection, ClientError> {
        let stream = tokio::time::timeout(timeout, TcpStream::connect(addr))
            .await
            .map_err(|_| ClientError::Timeout(timeout))?
            .map_err(|reason| ClientError::Connect {
                addr: addr.to_owned(),
                reason,
            })?;
        stream.set_nodelay(true)?;
        Ok(Connection {
            stream,
            correlation_id: 0,
            client_id: "sluice".to_owned(),
            timeout,
        })
    }

    /// Sends one request at `version` and decodes its response.
    pub async fn call<Req: Encodable, Resp: Decodable>(
        &mut self,
        api_key: ApiKey,
        version: i16,
        request: &Req,
    ) -> Result<Resp, ClientError> {
        let timeout = self.timeout;
        tokio::time::timeout(timeout, self.call_inner(api_key, version, request))
            .await
            .map_err(|_| ClientError::Timeout(timeout))?
    }

    async fn call_inner<Req: Encodable, Resp: Decodable>(
        &mut self,
        api_key: ApiKey,
        version: i16,
        request: &Req,
    ) -> Result<Resp, ClientError> {
        self.correlation_id = self.correlation_id.wrapping_add(1);
        fn protocol(e: impl std::fmt::Display) -> ClientError {
            ClientError::Protocol(e.to_string())
        }
        let header = RequestHeader::default()
            .with_request_api_key(api_key as i16)
            .with_request_api_version(version)
            .with_correlation_id(self.correlation_id)
            .with_client_id(Some(StrBytes::from_string(self.client_id.clone())));
        let mut frame = BytesMut::new();
        frame.extend_from_slice(&[0; 4]);
        header
            .encode(&mut frame, api_key.request_header_version(version))
            .map_err(protocol)?;
        request.encode(&mut frame, version).map_err(protocol)?;
        let size = (frame.len() - 4) as i32;
        frame[..4].copy_from_slice(&size.to_be_bytes());
        self.stream.write_all(&frame).await?;
        let size = self.stream.read_i32().await?;
        if size < 0 || size as usize > RESPONSE_BYTES_MAX {
            return Err(ClientError::Protocol(format!("response size {size}")));
        }
        // Read into fresh capacity (no zero-filling), as the bytes arrive.
        let size = size as usize;
        let mut body = BytesMut::with_capacity(size);
        while body.len() < size {
            let want = size - body.len();
            if self.stream.read_buf(&mut (&mut body).limit(want)).await? == 0 {
                return Err(ClientError::Protocol(
                    "connection closed mid-response".into(),
                ));
            }
        }
        let mut body: Bytes = body.freeze();
        let header = ResponseHeader::decode(&mut body, api_key.response_header_version(version))
            .map_err(protocol)?;
        if header.correlation_id != self.correlation_id {
            return Err(ClientError::Protocol(format!(
                "correlation id {} answers request {}",
                header.correlation_id, self.correlation_id
            )));
        }
        Resp::decode(&mut body, version).map_err(protocol)
    }
}
