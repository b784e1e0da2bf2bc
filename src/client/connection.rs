//! One connection to a Kafka broker, pipelined: many requests in flight, matched to their
//! responses by correlation id, as Kafka's clients do (`max.in.flight.requests.per.connection`
//! is the callers' business). At connect it asks ApiVersions, and each request is then sent at
//! the highest version both sides speak.
//!
//! A client configured for TLS (`security.protocol` SSL or SASL_SSL) does the TLS handshake
//! right after the TCP connect, within the same connect timeout, and everything else goes over
//! the TLS stream. A handshake the certificates fail (the broker's not signed by a trusted CA
//! or not for the host connected to, this client's refused by the broker) is a configuration
//! error naming the key to change ([`Error::Config`], not retriable: a retry would fail the
//! same way); a handshake cut short by the network is [`Error::Connect`], retried. With
//! TLS 1.3 the broker judges the client's certificate after the client has finished its
//! handshake, so its refusal (an alert) arrives at the first read: it fails the connect as well.
//!
//! A client configured for SASL (`security.protocol` SASL_PLAINTEXT or SASL_SSL) authenticates
//! right after ApiVersions, before anything else is sent, as Kafka's `SaslClientAuthenticator`
//! does:
//! ```text
//! ApiVersions
//! SaslHandshake v1 (mechanism)      UNSUPPORTED_SASL_MECHANISM names the broker's mechanisms
//! SaslAuthenticate (auth_bytes)     one per message of the mechanism (PLAIN: 1, SCRAM: 2),
//!   ...                             until the client's exchange completes
//! ```
//! A refusal (SASL_AUTHENTICATION_FAILED with the broker's message) fails the connect; the
//! broker closes the socket after it. Callers treat it as no retry mends
//! ([`Error::is_authentication`]).
//!
//! Two tasks own the socket: a writer drains a queue of encoded frames (several per write when
//! they pile up), a reader hands each response to its waiter. Both are generic over the
//! stream's halves: a plaintext connection keeps tokio's owned TCP halves (no lock between
//! them), a TLS one the halves of `tokio::io::split`. Sending is cancel-safe: a frame is
//! queued whole or not at all. When the socket fails every waiter gets the error and the
//! connection reports itself closed; callers open a new one.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::{Buf, BufMut, Bytes, BytesMut};
use kafka_protocol::messages::{
    ApiKey, ApiVersionsRequest, ApiVersionsResponse, RequestHeader, ResponseHeader,
    SaslAuthenticateRequest, SaslHandshakeRequest,
};
use kafka_protocol::protocol::{Decodable, Encodable, HeaderVersion, Request, StrBytes};
use rustls::pki_types::{DnsName, ServerName};
use rustls::{AlertDescription, CertificateError};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;
use tokio_rustls::TlsConnector;
use tokio_rustls::client::TlsStream;

use super::config::{ClientConfig, CommonConfig, SaslSettings, TlsSettings};
use super::error::{Error, Result, io_reason};
use crate::protocol::errors;

/// The largest response this client accepts.
const RESPONSE_BYTES_MAX: usize = 100 << 20;
/// Frames queued for the writer before senders wait.
const WRITE_QUEUE_FRAMES: usize = 256;
/// The most SaslAuthenticate requests one authentication sends (PLAIN needs 1, SCRAM 2), so a
/// broker that keeps answering cannot keep a connect going.
const SASL_AUTHENTICATE_ROUNDS_MAX: usize = 4;
/// The share of a SASL session's lifetime (KIP-368's `session_lifetime_ms`) after which the
/// connection counts as closed, so callers open a new one before the broker ends this one
/// (Kafka's clients re-authenticate between 85% and 95% of it; Sluice does not re-authenticate,
/// it reconnects).
const SESSION_LIFETIME_USED_PERCENT: u32 = 85;
/// How long a connect whose first request failed on a TLS stream waits for the reader to
/// take in what the broker sent before it closed: a TLS 1.3 broker's refusal of the client's
/// certificate is an alert that may come after the write that found the socket closed.
const TLS_REFUSAL_WAIT: Duration = Duration::from_millis(500);

type Waiter = oneshot::Sender<Result<Bytes>>;

#[derive(Default)]
struct Pending {
    addr: String,
    next_correlation_id: i32,
    waiters: HashMap<i32, Waiter>,
    /// When each awaited request was queued.
    sent_at: HashMap<i32, Instant>,
    /// Why the connection ended, once it has.
    closed: Option<String>,
    /// The broker's refusal of the TLS handshake, when that ended it: what every waiter gets
    /// instead of a retriable disconnection.
    refusal: Option<Error>,
}

/// A connection to one broker. Cheap to share (`Arc`): every method takes `&self`.
pub struct Connection {
    addr: String,
    client_id: String,
    timeout: Duration,
    frames: mpsc::Sender<BytesMut>,
    pending: Arc<Mutex<Pending>>,
    /// The broker's version range per API key, from ApiVersions.
    versions: HashMap<i16, (i16, i16)>,
    /// When the SASL session is near its end (the broker gave it a lifetime): from then on
    /// the connection reports itself closed.
    session_ends: Option<Instant>,
    tasks: [JoinHandle<()>; 2],
}

impl Drop for Connection {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}

impl std::fmt::Debug for Connection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Connection")
            .field("addr", &self.addr)
            .finish()
    }
}

impl Connection {
    /// Connects to `addr` (`host:port`) and asks its API versions. `timeout` bounds the
    /// connect and, from then on, each request.
    pub async fn connect(addr: &str, timeout: Duration) -> Result<Connection> {
        Connection::connect_as(addr, "sluice", timeout, timeout).await
    }

    /// [`Connection::connect`] with a `client.id` and separate connect and request timeouts.
    /// Plaintext, and does not authenticate: for a TLS or SASL listener use
    /// [`Connection::connect_with`].
    pub async fn connect_as(
        addr: &str,
        client_id: &str,
        connect_timeout: Duration,
        request_timeout: Duration,
    ) -> Result<Connection> {
        Connection::establish(
            addr,
            client_id,
            connect_timeout,
            request_timeout,
            None,
            None,
        )
        .await
    }

    /// Connects to `addr` with a client's settings: `client.id`, `request.timeout.ms`,
    /// `socket.connection.setup.timeout.ms` and security (`security.protocol`, `ssl.*`,
    /// `sasl.*`), encrypting and authenticating when they say so. `bootstrap.servers` is not
    /// read. Fails with [`Error::Config`] for an invalid setting, and for a TLS handshake the
    /// certificates fail.
    pub async fn connect_with(addr: &str, config: &ClientConfig) -> Result<Connection> {
        let config = CommonConfig::without_servers(config)?;
        Connection::open(addr, &config, config.request_timeout).await
    }

    /// Connects to `addr` as a client with `config` does (its `client.id`, connect timeout,
    /// TLS and SASL settings), with `request_timeout` for each request.
    pub(crate) async fn open(
        addr: &str,
        config: &CommonConfig,
        request_timeout: Duration,
    ) -> Result<Connection> {
        Connection::establish(
            addr,
            &config.client_id,
            config.connect_timeout,
            request_timeout,
            config.sasl.as_ref(),
            config.tls.as_ref(),
        )
        .await
    }

    async fn establish(
        addr: &str,
        client_id: &str,
        connect_timeout: Duration,
        request_timeout: Duration,
        sasl: Option<&SaslSettings>,
        tls: Option<&TlsSettings>,
    ) -> Result<Connection> {
        let what = if tls.is_some() {
            "no connection and TLS handshake"
        } else {
            "no connection"
        };
        let stream = tokio::time::timeout(connect_timeout, open_stream(addr, tls))
            .await
            .map_err(|_| Error::Connect {
                addr: addr.to_owned(),
                reason: format!("{what} within {connect_timeout:?}"),
            })??;
        let pending = Arc::new(Mutex::new(Pending {
            addr: addr.to_owned(),
            ..Pending::default()
        }));
        let (frames, queue) = mpsc::channel(WRITE_QUEUE_FRAMES);
        let tasks = match stream {
            Stream::Plain(stream) => {
                let (read, write) = stream.into_split();
                [
                    tokio::spawn(write_frames(write, queue, pending.clone())),
                    tokio::spawn(read_responses(read, pending.clone(), None)),
                ]
            }
            Stream::Tls(stream) => {
                let (read, write) = tokio::io::split(*stream);
                [
                    tokio::spawn(write_frames(write, queue, pending.clone())),
                    tokio::spawn(read_responses(read, pending.clone(), tls.cloned())),
                ]
            }
        };
        let mut connection = Connection {
            addr: addr.to_owned(),
            client_id: client_id.to_owned(),
            timeout: request_timeout,
            frames,
            pending,
            versions: HashMap::new(),
            session_ends: None,
            tasks,
        };
        connection.versions = match connection.api_versions().await {
            Ok(versions) => versions,
            Err(error) if tls.is_some() => return Err(connection.tls_refusal_or(error).await),
            Err(error) => return Err(error),
        };
        if let Some(sasl) = sasl {
            connection.authenticate(sasl).await?;
        }
        Ok(connection)
    }

    /// The `host:port` this connection went to.
    pub fn addr(&self) -> &str {
        &self.addr
    }

    /// Whether the socket has failed or closed, or its SASL session nears the end of the
    /// lifetime the broker gave it: a new connection is needed.
    pub fn is_closed(&self) -> bool {
        if self.session_ends.is_some_and(|end| Instant::now() >= end) {
            return true;
        }
        self.pending
            .lock()
            .map_or(true, |pending| pending.closed.is_some())
    }

    /// Requests sent on this connection whose answers have not come.
    pub fn in_flight(&self) -> usize {
        self.pending
            .lock()
            .map_or(usize::MAX, |pending| pending.waiters.len())
    }

    /// How long the oldest request still awaiting its answer has waited.
    pub fn oldest_in_flight(&self) -> Option<Duration> {
        let pending = self.pending.lock().ok()?;
        pending.sent_at.values().min().map(Instant::elapsed)
    }

    /// Ends the connection: every request awaiting an answer fails now as disconnected,
    /// naming `reason` (its caller retries elsewhere, as after a broken connection).
    pub fn abandon(&self, reason: String) {
        fail_all(&self.pending, reason);
        for task in &self.tasks {
            task.abort();
        }
    }

    /// The broker's version range for `api_key`, if it serves it.
    pub fn broker_versions(&self, api_key: ApiKey) -> Option<(i16, i16)> {
        self.versions.get(&(api_key as i16)).copied()
    }

    /// Sends `request` at the highest version both sides speak and waits for its response.
    pub async fn send<R: Request>(&self, request: &R) -> Result<R::Response> {
        self.send_at_most(request, R::VERSIONS.max).await
    }

    /// [`Connection::send`] at a version no higher than `max_version` (for requests whose
    /// newer versions need fields the caller does not fill, such as topic ids).
    pub async fn send_at_most<R: Request>(
        &self,
        request: &R,
        max_version: i16,
    ) -> Result<R::Response> {
        self.queue(request, max_version).await?.wait().await
    }

    /// Sends `request` and waits only until it is written: for requests the broker does not
    /// answer (Produce with acks=0).
    pub async fn send_without_response<R: Request>(
        &self,
        request: &R,
        max_version: i16,
    ) -> Result<()> {
        let version = self.version_for::<R>(max_version)?;
        let (frame, _) = self.frame(R::KEY, version, R::header_version(version), request, false)?;
        self.frames
            .send(frame)
            .await
            .map_err(|_| self.closed_error())
    }

    /// The version to send `R` at: the highest both speak, at most `max_version`.
    pub fn version_for<R: Request>(&self, max_version: i16) -> Result<i16> {
        let ours = (R::VERSIONS.min, R::VERSIONS.max.min(max_version));
        let unsupported = |theirs: String| Error::UnsupportedVersion {
            api: ApiKey::try_from(R::KEY).map_or(format!("API {}", R::KEY), |k| format!("{k:?}")),
            addr: self.addr.clone(),
            broker_versions: theirs,
            client_versions: format!("{}..{}", ours.0, ours.1),
        };
        let Some(&(min, max)) = self.versions.get(&R::KEY) else {
            return Err(unsupported("none".into()));
        };
        let version = max.min(ours.1);
        if version < min.max(ours.0) {
            return Err(unsupported(format!("{min}..{max}")));
        }
        Ok(version)
    }

    /// Sends one request at an explicit `version` and decodes its response.
    pub async fn call<Req: Encodable, Resp: Decodable>(
        &self,
        api_key: ApiKey,
        version: i16,
        request: &Req,
    ) -> Result<Resp> {
        self.queue_versioned(
            api_key as i16,
            version,
            api_key.request_header_version(version),
            api_key.response_header_version(version),
            request,
        )
        .await?
        .wait()
        .await
    }

    /// Queues `request` (at the highest version both speak, at most `max_version`) and
    /// returns once it is queued: requests queued one after another on a connection reach
    /// the broker in that order (as a producer's sequences must), while their responses are
    /// awaited apart.
    pub async fn queue<R: Request>(
        &self,
        request: &R,
        max_version: i16,
    ) -> Result<PendingResponse<R::Response>> {
        let version = self.version_for::<R>(max_version)?;
        self.queue_versioned(
            R::KEY,
            version,
            R::header_version(version),
            R::Response::header_version(version),
            request,
        )
        .await
    }

    async fn queue_versioned<Req: Encodable, Resp: Decodable>(
        &self,
        api_key: i16,
        version: i16,
        request_header_version: i16,
        response_header_version: i16,
        request: &Req,
    ) -> Result<PendingResponse<Resp>> {
        let (frame, waiter) =
            self.frame(api_key, version, request_header_version, request, true)?;
        let waiter = waiter.ok_or_else(|| self.closed_error())?;
        if self.frames.send(frame).await.is_err() {
            return Err(self.closed_error());
        }
        Ok(PendingResponse {
            waiter,
            api_key,
            version,
            response_header_version,
            addr: self.addr.clone(),
            timeout: self.timeout,
            pending: self.pending.clone(),
            response: std::marker::PhantomData,
        })
    }

    /// Encodes a frame; registers a waiter for its response when `answered`.
    fn frame<Req: Encodable>(
        &self,
        api_key: i16,
        version: i16,
        header_version: i16,
        request: &Req,
        answered: bool,
    ) -> Result<(BytesMut, Option<oneshot::Receiver<Result<Bytes>>>)> {
        let mut pending = self.pending.lock().map_err(|_| self.closed_error())?;
        if pending.closed.is_some() {
            return Err(self.closed_error_locked(&pending));
        }
        let correlation_id = pending.next_correlation_id;
        pending.next_correlation_id = correlation_id.wrapping_add(1);
        let header = RequestHeader::default()
            .with_request_api_key(api_key)
            .with_request_api_version(version)
            .with_correlation_id(correlation_id)
            .with_client_id(Some(StrBytes::from_string(self.client_id.clone())));
        let mut frame = BytesMut::with_capacity(64);
        frame.put_i32(0);
        header
            .encode(&mut frame, header_version)
            .map_err(protocol)?;
        request.encode(&mut frame, version).map_err(protocol)?;
        let size = i32::try_from(frame.len() - 4)
            .map_err(|_| Error::Protocol(format!("request of {} bytes", frame.len())))?;
        frame[..4].copy_from_slice(&size.to_be_bytes());
        let waiter = answered.then(|| {
            let (tx, rx) = oneshot::channel();
            pending.waiters.insert(correlation_id, tx);
            pending.sent_at.insert(correlation_id, Instant::now());
            rx
        });
        Ok((frame, waiter))
    }

    async fn api_versions(&self) -> Result<HashMap<i16, (i16, i16)>> {
        let request = ApiVersionsRequest::default()
            .with_client_software_name(StrBytes::from_static_str("sluice-rust"))
            .with_client_software_version(StrBytes::from_static_str(env!("CARGO_PKG_VERSION")));
        // v3 first; a broker that does not speak it answers in v0's format (as Kafka does).
        let mut response = self
            .call::<_, ApiVersionsResponse>(ApiKey::ApiVersions, 3, &request)
            .await;
        let retry_v0 = match &response {
            Ok(r) => r.error_code == errors::UNSUPPORTED_VERSION,
            Err(Error::Protocol(_)) => true,
            Err(_) => false,
        };
        if retry_v0 {
            response = self
                .call::<_, ApiVersionsResponse>(ApiKey::ApiVersions, 0, &request)
                .await;
        }
        let response = response?;
        if let Some(error) = Error::kafka(
            response.error_code,
            format!("ApiVersions from {}", self.addr),
            None,
        ) {
            return Err(error);
        }
        Ok(response
            .api_keys
            .iter()
            .map(|k| (k.api_key, (k.min_version, k.max_version)))
            .collect())
    }

    /// SASL after ApiVersions (see the module's opening). Every failure the broker or the
    /// mechanism reports is a Kafka error naming the mechanism, the user and the broker:
    /// SASL_AUTHENTICATION_FAILED with the broker's message, UNSUPPORTED_SASL_MECHANISM with
    /// the mechanisms it enables, ILLEGAL_SASL_STATE from a listener that does not
    /// authenticate.
    async fn authenticate(&mut self, sasl: &SaslSettings) -> Result<()> {
        let context = format!(
            "SASL {} authentication as {} to {}",
            sasl.mechanism, sasl.username, self.addr
        );
        // v1: the exchange goes on in SaslAuthenticate requests. (v0 would switch the
        // connection to raw tokens, which this client does not speak.)
        if self.version_for::<SaslHandshakeRequest>(1)? != 1 {
            return Err(Error::UnsupportedVersion {
                api: "SaslHandshake".into(),
                addr: self.addr.clone(),
                broker_versions: self
                    .broker_versions(ApiKey::SaslHandshake)
                    .map_or("none".into(), |(min, max)| format!("{min}..{max}")),
                client_versions: "1..1".into(),
            });
        }
        let handshake = SaslHandshakeRequest::default()
            .with_mechanism(StrBytes::from_static_str(sasl.mechanism.name()));
        let response = self.send_at_most(&handshake, 1).await?;
        match response.error_code {
            errors::NONE => {}
            errors::UNSUPPORTED_SASL_MECHANISM => {
                let enabled: Vec<&str> = response.mechanisms.iter().map(|m| m.as_str()).collect();
                let message = format!(
                    "the broker enables {}; set sasl.mechanism to one of them",
                    if enabled.is_empty() {
                        "no mechanism".to_owned()
                    } else {
                        enabled.join(", ")
                    }
                );
                return Err(Error::from_code(
                    response.error_code,
                    context,
                    Some(&message),
                ));
            }
            code => return Err(Error::from_code(code, context, None)),
        }
        let refused = |message: String| {
            Error::from_code(
                errors::SASL_AUTHENTICATION_FAILED,
                context.clone(),
                Some(&message),
            )
        };
        let mut client = sasl.client().map_err(|error| refused(error.to_string()))?;
        let mut token = client.first_message();
        for _ in 0..SASL_AUTHENTICATE_ROUNDS_MAX {
            let request = SaslAuthenticateRequest::default().with_auth_bytes(Bytes::from(token));
            let response = self.send_at_most(&request, 2).await?;
            if let Some(error) = Error::kafka(
                response.error_code,
                context.clone(),
                response.error_message.as_deref(),
            ) {
                return Err(error);
            }
            match client.step(&response.auth_bytes) {
                Ok(Some(next)) => token = next,
                Ok(None) => {
                    self.session_ends = session_end(response.session_lifetime_ms);
                    tracing::debug!(%context, "authenticated");
                    return Ok(());
                }
                Err(error) => return Err(refused(error.to_string())),
            }
        }
        Err(refused(format!(
            "the exchange did not complete within {SASL_AUTHENTICATE_ROUNDS_MAX} SaslAuthenticate requests"
        )))
    }

    /// `error`, the failure of the first request on a TLS stream, or the broker's refusal of
    /// the handshake if that is what ended the stream: the reader is given a moment to take
    /// in an alert that came after the socket failed for the writer.
    async fn tls_refusal_or(&mut self, error: Error) -> Error {
        let reader = &mut self.tasks[1];
        let _ = tokio::time::timeout(TLS_REFUSAL_WAIT, reader).await;
        self.pending
            .lock()
            .ok()
            .and_then(|pending| pending.refusal.clone())
            .unwrap_or(error)
    }

    fn closed_error(&self) -> Error {
        match self.pending.lock() {
            Ok(pending) => self.closed_error_locked(&pending),
            Err(_) => Error::Closed,
        }
    }

    fn closed_error_locked(&self, pending: &Pending) -> Error {
        if let Some(refusal) = &pending.refusal {
            return refusal.clone();
        }
        Error::Disconnected {
            addr: self.addr.clone(),
            reason: pending
                .closed
                .clone()
                .unwrap_or_else(|| "closed".to_owned()),
        }
    }
}

/// A queued request's response, to await.
pub struct PendingResponse<Resp> {
    waiter: oneshot::Receiver<Result<Bytes>>,
    api_key: i16,
    version: i16,
    response_header_version: i16,
    addr: String,
    timeout: Duration,
    pending: Arc<Mutex<Pending>>,
    response: std::marker::PhantomData<fn() -> Resp>,
}

impl<Resp: Decodable> PendingResponse<Resp> {
    /// The response, within the connection's request timeout.
    pub async fn wait(self) -> Result<Resp> {
        let closed = |pending: &Arc<Mutex<Pending>>, addr: &str| Error::Disconnected {
            addr: addr.to_owned(),
            reason: pending
                .lock()
                .ok()
                .and_then(|p| p.closed.clone())
                .unwrap_or_else(|| "closed".to_owned()),
        };
        let mut body = match tokio::time::timeout(self.timeout, self.waiter).await {
            Ok(Ok(body)) => body?,
            Ok(Err(_)) => return Err(closed(&self.pending, &self.addr)),
            Err(_) => {
                let api = ApiKey::try_from(self.api_key)
                    .map_or(format!("API {}", self.api_key), |k| format!("{k:?}"));
                // As Kafka's clients do: a broker that let a request time out (paused, cut
                // off) is disconnected, so the requests queued behind it fail now rather than
                // each waiting out its own timeout, and the next call connects afresh. This
                // request's own waiter goes with the rest.
                fail_all(
                    &self.pending,
                    format!("{api} got no answer within {:?}", self.timeout),
                );
                return Err(Error::Timeout {
                    what: format!("{api} to {}", self.addr),
                    after: self.timeout,
                });
            }
        };
        ResponseHeader::decode(&mut body, self.response_header_version).map_err(protocol)?;
        Resp::decode(&mut body, self.version).map_err(protocol)
    }
}

/// When a SASL session of `lifetime_ms` (0: no limit) should be given up, leaving time to
/// connect again before the broker ends it.
fn session_end(lifetime_ms: i64) -> Option<Instant> {
    let lifetime = Duration::from_millis(u64::try_from(lifetime_ms).ok().filter(|&ms| ms > 0)?);
    Instant::now().checked_add(lifetime * SESSION_LIFETIME_USED_PERCENT / 100)
}

fn protocol(e: impl std::fmt::Display) -> Error {
    Error::Protocol(e.to_string())
}

/// A connected socket, before it is split between the writer and the reader.
enum Stream {
    Plain(TcpStream),
    /// Boxed: a TLS stream carries rustls's buffers, a plain one a descriptor.
    Tls(Box<TlsStream<TcpStream>>),
}

/// Connects to `addr` and, for TLS, does the handshake, the broker's certificate checked
/// against the host of `addr` (an IP address as one, anything else as a DNS name).
async fn open_stream(addr: &str, tls: Option<&TlsSettings>) -> Result<Stream> {
    let connect_error = |reason: String| Error::Connect {
        addr: addr.to_owned(),
        reason,
    };
    // The name is checked before a socket is opened for it.
    let server_name = tls.map(|_| server_name(addr)).transpose()?;
    let stream = TcpStream::connect(addr)
        .await
        .map_err(|e| connect_error(io_reason(&e)))?;
    stream
        .set_nodelay(true)
        .map_err(|e| connect_error(io_reason(&e)))?;
    let (Some(tls), Some(server_name)) = (tls, server_name) else {
        return Ok(Stream::Plain(stream));
    };
    match TlsConnector::from(tls.config.clone())
        .connect(server_name, stream)
        .await
    {
        Ok(stream) => Ok(Stream::Tls(Box::new(stream))),
        Err(error) => Err(tls_refusal(addr, tls, &error).unwrap_or_else(|| {
            connect_error(format!(
                "the TLS handshake failed: {} (is the port a TLS listener, SSL or SASL_SSL?)",
                io_reason(&error)
            ))
        })),
    }
}

/// The name the broker's certificate must hold: the host of `host:port` (`[v6]:port` too).
fn server_name(addr: &str) -> Result<ServerName<'static>> {
    let host = addr.rsplit_once(':').map_or(addr, |(host, _)| host);
    let host = host
        .strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(host);
    if let Ok(ip) = host.parse::<std::net::IpAddr>() {
        return Ok(ServerName::IpAddress(ip.into()));
    }
    DnsName::try_from(host.to_owned())
        .map(ServerName::DnsName)
        .map_err(|_| Error::Config {
            key: "bootstrap.servers".into(),
            reason: format!(
                "{host:?} (of {addr}) is neither a DNS name nor an IP address: a TLS client \
                 cannot check the broker's certificate against it"
            ),
        })
}

/// The certificate problem a failed TLS exchange with `addr` reports, as a configuration
/// error naming the key to change; `None` when the failure is not one (the network, a peer
/// that is not a TLS listener), which callers retry.
fn tls_refusal(addr: &str, tls: &TlsSettings, error: &std::io::Error) -> Option<Error> {
    let tls_error = error.get_ref()?.downcast_ref::<rustls::Error>()?;
    let keystore_key = tls.keystore_key.unwrap_or("ssl.keystore.location");
    let (key, advice) = match tls_error {
        rustls::Error::InvalidCertificate(
            CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
        ) => (
            "ssl.endpoint.identification.algorithm",
            "connect by a name the broker's certificate holds (bootstrap.servers, the broker's \
             advertised.listeners), or set ssl.endpoint.identification.algorithm= (empty) to \
             check that a trusted CA signed it but not the name"
                .to_owned(),
        ),
        rustls::Error::InvalidCertificate(
            CertificateError::UnknownIssuer | CertificateError::BadSignature,
        ) => (
            tls.truststore_key,
            format!(
                "the broker's certificate is not signed by a CA in {}: set it to the CA \
                 certificates that signed the brokers' certificates",
                tls.truststore_key
            ),
        ),
        rustls::Error::InvalidCertificate(_) | rustls::Error::NoCertificatesPresented => (
            tls.truststore_key,
            "the broker's certificate cannot be trusted: renew it (or check this machine's \
             clock)"
                .to_owned(),
        ),
        rustls::Error::AlertReceived(alert) if refuses_client_certificate(*alert) => (
            keystore_key,
            match tls.keystore_key {
                None => "the broker asks for a client certificate (ssl.client.auth) and this \
                         client has none: set ssl.keystore.location (a PEM file with the key \
                         and the certificate chain), or ssl.keystore.certificate.chain and \
                         ssl.keystore.key"
                    .to_owned(),
                Some(key) => format!(
                    "the broker refused the certificate in {key}: it must be signed by a CA \
                     in the listener's ssl.truststore, valid now, and usable for client \
                     authentication"
                ),
            },
        ),
        // What a broker says for a missing certificate in TLS 1.2 (Java's), and for a
        // handshake it cannot agree to.
        rustls::Error::AlertReceived(AlertDescription::HandshakeFailure)
            if tls.keystore_key.is_none() =>
        {
            (
                keystore_key,
                "the broker may require a client certificate (ssl.client.auth), which this \
                 client has none of: set ssl.keystore.location (a PEM file with the key and the \
                 certificate chain); or it shares no TLS version or cipher suite with this \
                 client (the SDK offers TLSv1.2 and TLSv1.3)"
                    .to_owned(),
            )
        }
        rustls::Error::AlertReceived(AlertDescription::InternalError) => return None,
        rustls::Error::AlertReceived(_) | rustls::Error::PeerIncompatible(_) => (
            "security.protocol",
            "the broker and this client agree on no TLS version or cipher suite (the SDK \
             offers TLSv1.2 and TLSv1.3)"
                .to_owned(),
        ),
        _ => return None,
    };
    Some(Error::Config {
        key: key.to_owned(),
        reason: format!("the TLS handshake with {addr} failed: {tls_error}; {advice}"),
    })
}

/// Whether a TLS alert from the broker says it refused this client's certificate (or its
/// lack of one).
fn refuses_client_certificate(alert: AlertDescription) -> bool {
    matches!(
        alert,
        AlertDescription::CertificateRequired
            | AlertDescription::BadCertificate
            | AlertDescription::UnsupportedCertificate
            | AlertDescription::CertificateRevoked
            | AlertDescription::CertificateExpired
            | AlertDescription::CertificateUnknown
            | AlertDescription::UnknownCA
            | AlertDescription::AccessDenied
    )
}

/// Ends the connection: every waiter gets the broker's TLS refusal when that ended it, else
/// a disconnection naming `reason` (the first reason given is kept).
fn fail_all(pending: &Mutex<Pending>, reason: String) {
    let Ok(mut pending) = pending.lock() else {
        return;
    };
    pending.closed.get_or_insert(reason);
    let reason = pending.closed.clone().unwrap_or_default();
    let addr = pending.addr.clone();
    let refusal = pending.refusal.clone();
    pending.sent_at.clear();
    for (_, waiter) in pending.waiters.drain() {
        let _ = waiter.send(Err(refusal.clone().unwrap_or_else(|| {
            Error::Disconnected {
                addr: addr.clone(),
                reason: reason.clone(),
            }
        })));
    }
}

async fn write_frames<W: AsyncWrite + Unpin>(
    mut socket: W,
    mut queue: mpsc::Receiver<BytesMut>,
    pending: Arc<Mutex<Pending>>,
) {
    let mut out = BytesMut::new();
    while let Some(frame) = queue.recv().await {
        out.unsplit(frame);
        // Frames that piled up while the last write ran go out in one write.
        while out.len() < 1 << 20 {
            match queue.try_recv() {
                Ok(frame) => out.extend_from_slice(&frame),
                Err(_) => break,
            }
        }
        // A TLS stream may keep encrypted bytes in rustls's buffer until flushed; flushing a
        // TCP half costs nothing.
        if let Err(e) = socket.write_all(&out).await {
            fail_all(&pending, io_reason(&e));
            return;
        }
        if let Err(e) = socket.flush().await {
            fail_all(&pending, io_reason(&e));
            return;
        }
        out.clear();
    }
}

/// Hands each response to its waiter until the stream ends. `tls` (for a TLS stream) lets a
/// broker's refusal of the handshake, which TLS 1.3 delivers at the first read, be told
/// from a lost connection.
async fn read_responses<R: AsyncRead + Unpin>(
    mut socket: R,
    pending: Arc<Mutex<Pending>>,
    tls: Option<TlsSettings>,
) {
    let reason = loop {
        let size = match socket.read_i32().await {
            Ok(size) => size,
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => {
                break "the broker closed the connection".to_owned();
            }
            Err(e) => {
                let refusal = tls.as_ref().and_then(|tls| {
                    let addr = pending.lock().map(|p| p.addr.clone()).ok()?;
                    tls_refusal(&addr, tls, &e)
                });
                if let (Some(refusal), Ok(mut pending)) = (refusal, pending.lock()) {
                    pending.refusal = Some(refusal);
                }
                break io_reason(&e);
            }
        };
        if size < 4 || size as usize > RESPONSE_BYTES_MAX {
            break format!("response size {size} is outside 4..={RESPONSE_BYTES_MAX}");
        }
        // Read into fresh capacity (no zero-filling), as the bytes arrive.
        let size = size as usize;
        let mut body = BytesMut::with_capacity(size);
        let mut failed = None;
        while body.len() < size {
            let want = size - body.len();
            match socket.read_buf(&mut (&mut body).limit(want)).await {
                Ok(0) => {
                    failed = Some("the broker closed the connection mid-response".to_owned());
                    break;
                }
                Ok(_) => {}
                Err(e) => {
                    failed = Some(io_reason(&e));
                    break;
                }
            }
        }
        if let Some(reason) = failed {
            break reason;
        }
        let body = body.freeze();
        let correlation_id = (&body[..4]).get_i32();
        let waiter = match pending.lock() {
            Ok(mut pending) => {
                pending.sent_at.remove(&correlation_id);
                pending.waiters.remove(&correlation_id)
            }
            Err(_) => break "poisoned".to_owned(),
        };
        // A response nobody waits for any more (its request timed out) is dropped.
        if let Some(waiter) = waiter {
            let _ = waiter.send(Ok(body));
        }
    };
    fail_all(&pending, reason);
}

/// A broker that answers ApiVersions and then nothing, as a paused one does once connected.
#[cfg(test)]
pub(crate) mod silent_broker {
    use kafka_protocol::messages::ApiVersionsResponse;
    use kafka_protocol::messages::api_versions_response::ApiVersion;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use super::*;

    /// Listens on a loopback port and returns its `host:port`; each connection is answered
    /// its ApiVersions (Metadata v0-12) and left unanswered from then on.
    pub(crate) async fn start() -> String {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("addr").to_string();
        tokio::spawn(async move {
            while let Ok((mut socket, _)) = listener.accept().await {
                tokio::spawn(async move {
                    let mut answered = false;
                    loop {
                        let Ok(size) = socket.read_i32().await else {
                            return;
                        };
                        let mut body = vec![0; size.clamp(0, 1 << 20) as usize];
                        if socket.read_exact(&mut body).await.is_err() {
                            return;
                        }
                        if answered {
                            continue;
                        }
                        answered = true;
                        let version = i16::from_be_bytes([body[2], body[3]]);
                        let response = ApiVersionsResponse::default().with_api_keys(vec![
                            ApiVersion::default()
                                .with_api_key(ApiKey::Metadata as i16)
                                .with_min_version(0)
                                .with_max_version(12),
                        ]);
                        let mut out = BytesMut::new();
                        out.put_slice(&body[4..8]);
                        response.encode(&mut out, version).expect("encode");
                        let mut frame = (out.len() as i32).to_be_bytes().to_vec();
                        frame.extend_from_slice(&out);
                        if socket.write_all(&frame).await.is_err() {
                            return;
                        }
                    }
                });
            }
        });
        addr
    }
}

/// A broker on a SASL listener, authenticating with Sluice's own server side of the
/// mechanisms (user `alice`, password `alice-secret`, for PLAIN and both SCRAMs; for
/// OAUTHBEARER any token whose claims name `alice`, unchecked otherwise): it answers
/// ApiVersions, SaslHandshake and SaslAuthenticate, closes after a refusal or at any other
/// request before authentication as Kafka's does, and answers Metadata (no brokers, no
/// topics) once authenticated. Counts the connections it accepted.
#[cfg(test)]
pub(crate) mod sasl_broker {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use kafka_protocol::messages::api_versions_response::ApiVersion;
    use kafka_protocol::messages::{
        MetadataResponse, SaslAuthenticateResponse, SaslHandshakeResponse,
    };
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use super::*;
    use crate::security::sasl::{
        BearerToken, CredentialStore, Exchange, Mechanism, SaslServer, ScramCredential,
        TokenRejection,
    };

    struct Users;

    fn unix_ms() -> u64 {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |since| since.as_millis() as u64)
    }

    impl CredentialStore for Users {
        fn plain_password(&self, username: &str) -> Option<Vec<u8>> {
            (username == "alice").then(|| b"alice-secret".to_vec())
        }

        fn scram_credential(
            &self,
            mechanism: Mechanism,
            username: &str,
        ) -> Option<ScramCredential> {
            (username == "alice").then(|| {
                ScramCredential::derive(mechanism, b"alice-secret", b"alice-salt", 4096)
                    .expect("credential")
            })
        }

        /// A token whose claims (its second part) name `alice` as `sub`, for a minute.
        fn validate_bearer_token(
            &self,
            token: &str,
            now_ms: u64,
        ) -> std::result::Result<BearerToken, TokenRejection> {
            use base64::Engine;
            let claims = token
                .split('.')
                .nth(1)
                .and_then(|part| {
                    base64::engine::general_purpose::URL_SAFE_NO_PAD
                        .decode(part)
                        .ok()
                })
                .unwrap_or_default();
            if String::from_utf8_lossy(&claims).contains(r#""sub":"alice""#) {
                Ok(BearerToken {
                    principal: "alice".into(),
                    expires_at_ms: now_ms + 60_000,
                })
            } else {
                Err(TokenRejection::invalid_token("not alice".into()))
            }
        }
    }

    /// Listens on a loopback port enabling `enabled`; a completed authentication is given
    /// `session_lifetime_ms`. Returns its `host:port` and its count of connections.
    pub(crate) async fn start(
        enabled: &'static [Mechanism],
        session_lifetime_ms: i64,
    ) -> (String, Arc<AtomicUsize>) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("addr").to_string();
        let accepted = Arc::new(AtomicUsize::new(0));
        let counter = accepted.clone();
        tokio::spawn(async move {
            while let Ok((socket, _)) = listener.accept().await {
                counter.fetch_add(1, Ordering::SeqCst);
                tokio::spawn(serve(socket, enabled, session_lifetime_ms));
            }
        });
        (addr, accepted)
    }

    async fn serve(mut socket: TcpStream, enabled: &'static [Mechanism], session_lifetime_ms: i64) {
        let mut server: Option<SaslServer> = None;
        let mut authenticated = false;
        loop {
            let Ok(size) = socket.read_i32().await else {
                return;
            };
            let mut body = vec![0; size.clamp(0, 1 << 20) as usize];
            if socket.read_exact(&mut body).await.is_err() {
                return;
            }
            let mut body = Bytes::from(body);
            let api_key = ApiKey::try_from(i16::from_be_bytes([body[0], body[1]])).expect("key");
            let version = i16::from_be_bytes([body[2], body[3]]);
            let header = RequestHeader::decode(&mut body, api_key.request_header_version(version))
                .expect("header");
            let mut out = BytesMut::new();
            ResponseHeader::default()
                .with_correlation_id(header.correlation_id)
                .encode(&mut out, api_key.response_header_version(version))
                .expect("encode");
            let mut close = false;
            match api_key {
                ApiKey::ApiVersions => {
                    let versions = [
                        (ApiKey::ApiVersions, 0, 3),
                        (ApiKey::SaslHandshake, 0, 1),
                        (ApiKey::SaslAuthenticate, 0, 2),
                        (ApiKey::Metadata, 0, 12),
                    ];
                    ApiVersionsResponse::default()
                        .with_api_keys(
                            versions
                                .iter()
                                .map(|&(key, min, max)| {
                                    ApiVersion::default()
                                        .with_api_key(key as i16)
                                        .with_min_version(min)
                                        .with_max_version(max)
                                })
                                .collect(),
                        )
                        .encode(&mut out, version)
                        .expect("encode");
                }
                ApiKey::SaslHandshake => {
                    let request = SaslHandshakeRequest::decode(&mut body, version).expect("decode");
                    let mut response = SaslHandshakeResponse::default().with_mechanisms(
                        enabled
                            .iter()
                            .map(|m| StrBytes::from_static_str(m.name()))
                            .collect(),
                    );
                    match Mechanism::from_name(request.mechanism.as_str())
                        .filter(|m| enabled.contains(m))
                    {
                        Some(mechanism) => server = Some(SaslServer::new(mechanism)),
                        None => {
                            response.error_code = errors::UNSUPPORTED_SASL_MECHANISM;
                            close = true;
                        }
                    }
                    response.encode(&mut out, version).expect("encode");
                }
                ApiKey::SaslAuthenticate => {
                    let request =
                        SaslAuthenticateRequest::decode(&mut body, version).expect("decode");
                    let Some(exchange) = server.as_mut() else {
                        return;
                    };
                    let mut response = SaslAuthenticateResponse::default();
                    match exchange.step(&request.auth_bytes, &Users, unix_ms()) {
                        Ok(Exchange::Continue(challenge)) => response.auth_bytes = challenge.into(),
                        Ok(Exchange::Done { response: last, .. }) => {
                            response.auth_bytes = last.into();
                            response.session_lifetime_ms = session_lifetime_ms;
                            authenticated = true;
                        }
                        Err(error) => {
                            response.error_code = errors::SASL_AUTHENTICATION_FAILED;
                            response.error_message = Some(StrBytes::from_string(
                                error.response_message(exchange.mechanism()),
                            ));
                            close = true;
                        }
                    }
                    response.encode(&mut out, version).expect("encode");
                }
                ApiKey::Metadata if authenticated => {
                    MetadataResponse::default()
                        .encode(&mut out, version)
                        .expect("encode");
                }
                // Anything else before authentication: closed, as Kafka's broker does.
                _ => return,
            }
            let mut frame = (out.len() as i32).to_be_bytes().to_vec();
            frame.extend_from_slice(&out);
            if socket.write_all(&frame).await.is_err() || close {
                return;
            }
        }
    }
}

/// A broker on a TLS listener, made with the broker's own server side (`ServerTls`) and the
/// fixtures of `security::tls` (its testdata README: `server.pem` names localhost and
/// 127.0.0.1, `other-server.pem` is signed by an unrelated CA, `client.pem` is alice's signed
/// by `ca.pem`, which the broker trusts). It answers ApiVersions and Metadata (no brokers, no
/// topics) on each connection whose handshake completed.
#[cfg(test)]
pub(crate) mod tls_broker {
    use std::path::PathBuf;

    use kafka_protocol::messages::MetadataResponse;
    use kafka_protocol::messages::api_versions_response::ApiVersion;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use super::*;
    use crate::security::tls::ServerTls;
    pub(crate) use crate::security::tls::settings::{ClientAuth, TlsVersion};
    use crate::security::tls::settings::{KeyStore, PemSource};

    /// TLS 1.2 and 1.3, the broker's default.
    pub(crate) const BOTH: &[TlsVersion] = &[TlsVersion::Tls12, TlsVersion::Tls13];
    /// TLS 1.2 alone: the broker judges the client's certificate within the handshake.
    pub(crate) const TLS12: &[TlsVersion] = &[TlsVersion::Tls12];

    pub(crate) fn fixture(name: &str) -> String {
        PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("src/security/tls/testdata")
            .join(name)
            .to_string_lossy()
            .into_owned()
    }

    /// Listens on `host` (any loopback address) with `keystore`, asking for client
    /// certificates as `client_auth` says. Returns its `host:port`.
    pub(crate) async fn start(
        host: &str,
        keystore: &str,
        client_auth: ClientAuth,
        protocols: &[TlsVersion],
    ) -> String {
        let server = ServerTls::load(&crate::security::tls::settings::TlsSettings {
            keystore: KeyStore::file(fixture(keystore)),
            truststore: Some(PemSource::File(fixture("ca.pem").into())),
            client_auth,
            protocols: protocols.to_vec(),
            principal_mapping_rules: "DEFAULT".to_owned(),
        })
        .expect("server TLS");
        let listener = tokio::net::TcpListener::bind((host, 0))
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("addr").to_string();
        let acceptor = server.acceptor();
        tokio::spawn(async move {
            while let Ok((socket, _)) = listener.accept().await {
                let acceptor = acceptor.clone();
                tokio::spawn(async move {
                    if let Ok(stream) = acceptor.accept(socket).await {
                        serve(stream).await;
                    }
                });
            }
        });
        addr
    }

    async fn serve(mut stream: tokio_rustls::server::TlsStream<TcpStream>) {
        loop {
            let Ok(size) = stream.read_i32().await else {
                return;
            };
            let mut body = vec![0; size.clamp(0, 1 << 20) as usize];
            if stream.read_exact(&mut body).await.is_err() {
                return;
            }
            let mut body = Bytes::from(body);
            let api_key = ApiKey::try_from(i16::from_be_bytes([body[0], body[1]])).expect("key");
            let version = i16::from_be_bytes([body[2], body[3]]);
            let header = RequestHeader::decode(&mut body, api_key.request_header_version(version))
                .expect("header");
            let mut out = BytesMut::new();
            ResponseHeader::default()
                .with_correlation_id(header.correlation_id)
                .encode(&mut out, api_key.response_header_version(version))
                .expect("encode");
            match api_key {
                ApiKey::ApiVersions => ApiVersionsResponse::default()
                    .with_api_keys(
                        [(ApiKey::ApiVersions, 3), (ApiKey::Metadata, 12)]
                            .iter()
                            .map(|&(key, max)| {
                                ApiVersion::default()
                                    .with_api_key(key as i16)
                                    .with_min_version(0)
                                    .with_max_version(max)
                            })
                            .collect(),
                    )
                    .encode(&mut out, version)
                    .expect("encode"),
                ApiKey::Metadata => MetadataResponse::default()
                    .encode(&mut out, version)
                    .expect("encode"),
                _ => return,
            }
            let mut frame = (out.len() as i32).to_be_bytes().to_vec();
            frame.extend_from_slice(&out);
            if stream.write_all(&frame).await.is_err() || stream.flush().await.is_err() {
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use kafka_protocol::messages::MetadataRequest;

    use super::*;

    #[tokio::test]
    async fn a_request_that_times_out_closes_the_connection_and_fails_those_behind_it() {
        let addr = silent_broker::start().await;
        let connection = Connection::connect(&addr, Duration::from_millis(300))
            .await
            .expect("connect");
        let request = MetadataRequest::default();
        let first = connection.queue(&request, 12).await.expect("queue");
        let second = connection.queue(&request, 12).await.expect("queue");
        assert_eq!(connection.in_flight(), 2);
        assert!(matches!(first.wait().await, Err(Error::Timeout { .. })));
        assert!(connection.is_closed(), "a timed-out request left it open");
        let started = std::time::Instant::now();
        let error = second
            .wait()
            .await
            .expect_err("answered by a silent broker");
        assert!(
            matches!(&error, Error::Disconnected { reason, .. } if reason.contains("no answer")),
            "{error:?}"
        );
        assert_eq!(error.to_string().matches(&addr).count(), 1, "{error}");
        assert!(started.elapsed() < Duration::from_millis(100));
        assert!(connection.queue(&request, 12).await.is_err());
    }

    use crate::security::sasl::Mechanism;

    fn sasl_config(mechanism: &str, password: &str) -> ClientConfig {
        let config = ClientConfig::default()
            .set("security.protocol", "SASL_PLAINTEXT")
            .set("sasl.mechanism", mechanism)
            .set("request.timeout.ms", "5000");
        if mechanism == "OAUTHBEARER" {
            // librdkafka's unsecured token, naming `password` (alice's is accepted).
            let principal = if password == "alice-secret" {
                "alice"
            } else {
                password
            };
            return config
                .set("enable.sasl.oauthbearer.unsecure.jwt", "true")
                .set("sasl.oauthbearer.config", format!("principal={principal}"));
        }
        config
            .set("sasl.username", "alice")
            .set("sasl.password", password)
    }

    #[tokio::test]
    async fn every_mechanism_authenticates_before_the_connection_is_handed_out() {
        let (addr, _) = sasl_broker::start(&Mechanism::ALL, 0).await;
        for mechanism in Mechanism::ALL {
            let connection =
                Connection::connect_with(&addr, &sasl_config(mechanism.name(), "alice-secret"))
                    .await
                    .unwrap_or_else(|error| panic!("{mechanism}: {error}"));
            assert!(!connection.is_closed());
            // The fake closes at a Metadata request before authentication: an answer proves
            // the exchange completed.
            connection
                .send_at_most(&MetadataRequest::default(), 12)
                .await
                .expect("answered after authenticating");
        }
    }

    #[tokio::test]
    async fn a_wrong_password_is_sasl_authentication_failed_with_the_brokers_message() {
        let (addr, _) = sasl_broker::start(&Mechanism::ALL, 0).await;
        let error = Connection::connect_with(&addr, &sasl_config("PLAIN", "wrong"))
            .await
            .expect_err("a wrong password");
        assert_eq!(error.code(), Some(errors::SASL_AUTHENTICATION_FAILED));
        assert!(error.is_authentication() && !error.is_retriable());
        let text = error.to_string();
        assert!(
            text.starts_with(&format!(
                "SASL_AUTHENTICATION_FAILED: SASL PLAIN authentication as alice to {addr}: \
                 Authentication failed: Invalid username or password"
            )),
            "{text}"
        );
        let error = Connection::connect_with(&addr, &sasl_config("SCRAM-SHA-256", "wrong"))
            .await
            .expect_err("a wrong password");
        assert_eq!(error.code(), Some(errors::SASL_AUTHENTICATION_FAILED));
        assert!(error.to_string().contains("SCRAM-SHA-256"), "{error}");
        // A refused token: the error challenge is acknowledged and the broker's failure
        // carries it.
        let error = Connection::connect_with(&addr, &sasl_config("OAUTHBEARER", "mallory"))
            .await
            .expect_err("a token naming mallory");
        assert_eq!(error.code(), Some(errors::SASL_AUTHENTICATION_FAILED));
        assert!(
            error.to_string().contains(&format!(
                "SASL OAUTHBEARER authentication as mallory to {addr}: {{\"status\":\"invalid_token\"}}"
            )),
            "{error}"
        );
        // Without SASL the listener answers ApiVersions, then closes at the first request:
        // a lost connection, which is all a client can tell.
        let plaintext = Connection::connect_with(&addr, &ClientConfig::default())
            .await
            .expect("ApiVersions is answered before authentication");
        let lost = plaintext
            .send_at_most(&MetadataRequest::default(), 12)
            .await
            .expect_err("Metadata before authentication");
        assert!(matches!(lost, Error::Disconnected { .. }), "{lost:?}");
    }

    #[tokio::test]
    async fn an_unsupported_mechanism_names_the_brokers_mechanisms() {
        let (addr, _) =
            sasl_broker::start(&[Mechanism::ScramSha256, Mechanism::ScramSha512], 0).await;
        let error = Connection::connect_with(&addr, &sasl_config("PLAIN", "alice-secret"))
            .await
            .expect_err("PLAIN is not enabled");
        assert_eq!(error.code(), Some(errors::UNSUPPORTED_SASL_MECHANISM));
        assert!(error.is_authentication());
        assert!(
            error
                .to_string()
                .contains("the broker enables SCRAM-SHA-256, SCRAM-SHA-512"),
            "{error}"
        );
    }

    #[tokio::test]
    async fn a_session_lifetime_retires_the_connection_before_the_broker_ends_it() {
        let (addr, _) = sasl_broker::start(&[Mechanism::Plain], 400).await;
        let connection = Connection::connect_with(&addr, &sasl_config("PLAIN", "alice-secret"))
            .await
            .expect("connect");
        assert!(!connection.is_closed());
        // 85% of 400 ms.
        tokio::time::sleep(Duration::from_millis(360)).await;
        assert!(connection.is_closed(), "a session past 85% of its lifetime");
        assert_eq!(session_end(0), None);
        assert_eq!(session_end(-1), None);
    }

    use tls_broker::{BOTH, ClientAuth, TLS12, fixture};

    /// A client's settings for SSL, trusting the test CA, with `extra`.
    fn tls_config(extra: &[(&str, &str)]) -> ClientConfig {
        let mut config = ClientConfig::default()
            .set("security.protocol", "SSL")
            .set("ssl.truststore.location", fixture("ca.pem"))
            .set("socket.connection.setup.timeout.ms", "5000")
            .set("request.timeout.ms", "5000");
        for (key, value) in extra {
            config.insert(key, *value);
        }
        config
    }

    /// The key and reason of a configuration error, asserting it is not retried and came
    /// fast (the handshake failed; nothing waited out a timeout).
    fn refusal(error: Error, started: Instant) -> (String, String) {
        assert!(!error.is_retriable(), "{error:?}");
        assert!(
            started.elapsed() < Duration::from_secs(2),
            "said after {:?}",
            started.elapsed()
        );
        match error {
            Error::Config { key, reason } => (key, reason),
            other => panic!("expected a configuration error, got {other:?}"),
        }
    }

    #[tokio::test]
    async fn requests_go_over_tls_to_a_broker_that_checks_the_client_certificate() {
        for protocols in [BOTH, TLS12] {
            let addr =
                tls_broker::start("127.0.0.1", "server.pem", ClientAuth::Required, protocols).await;
            let keystore = fixture("client.pem");
            let connection = Connection::connect_with(
                &addr,
                &tls_config(&[("ssl.keystore.location", &keystore)]),
            )
            .await
            .unwrap_or_else(|error| panic!("{protocols:?}: {error}"));
            // Several requests in flight at once, answered in order over the one stream.
            let request = MetadataRequest::default();
            let pending = [
                connection.queue(&request, 12).await.expect("queue"),
                connection.queue(&request, 12).await.expect("queue"),
            ];
            for response in pending {
                response.wait().await.expect("answered over TLS");
            }
            assert!(!connection.is_closed());
        }
    }

    #[tokio::test]
    async fn a_broker_signed_by_an_unknown_ca_is_refused_at_once_naming_the_truststore() {
        let addr = tls_broker::start("127.0.0.1", "other-server.pem", ClientAuth::None, BOTH).await;
        let started = Instant::now();
        let error = Connection::connect_with(&addr, &tls_config(&[]))
            .await
            .expect_err("an untrusted broker");
        let (key, reason) = refusal(error, started);
        assert_eq!(key, "ssl.truststore.location");
        assert!(
            reason.contains(&addr) && reason.contains("UnknownIssuer"),
            "{reason}"
        );
        // Not checking the name does not mean not checking the CA.
        let error = Connection::connect_with(
            &addr,
            &tls_config(&[("ssl.endpoint.identification.algorithm", "")]),
        )
        .await
        .expect_err("an untrusted broker");
        let (key, _) = refusal(error, started);
        assert_eq!(key, "ssl.truststore.location");
    }

    #[tokio::test]
    async fn a_host_the_certificate_does_not_name_is_refused_unless_identification_is_off() {
        // The certificate names localhost and 127.0.0.1; 127.0.0.2 is loopback too.
        let addr = tls_broker::start("127.0.0.2", "server.pem", ClientAuth::None, BOTH).await;
        let started = Instant::now();
        let error = Connection::connect_with(&addr, &tls_config(&[]))
            .await
            .expect_err("a name the certificate does not hold");
        let (key, reason) = refusal(error, started);
        assert_eq!(key, "ssl.endpoint.identification.algorithm");
        assert!(
            reason.contains("not valid for name") && reason.contains("127.0.0.2"),
            "{reason}"
        );
        let connection = Connection::connect_with(
            &addr,
            &tls_config(&[("ssl.endpoint.identification.algorithm", "")]),
        )
        .await
        .expect("the chain alone is checked");
        connection
            .send_at_most(&MetadataRequest::default(), 12)
            .await
            .expect("answered");
        // The DNS name the certificate holds is checked as one.
        let port = addr.rsplit_once(':').expect("port").1;
        let localhost = tls_broker::start("127.0.0.1", "server.pem", ClientAuth::None, BOTH).await;
        let localhost = localhost.replacen("127.0.0.1", "localhost", 1);
        assert_ne!(localhost.rsplit_once(':').expect("port").1, port);
        Connection::connect_with(&localhost, &tls_config(&[]))
            .await
            .expect("localhost is in the certificate");
    }

    #[tokio::test]
    async fn a_client_certificate_the_broker_refuses_is_said_at_once_naming_the_keystore() {
        // TLS 1.3 refuses after the client finished (at the first read), TLS 1.2 within the
        // handshake: both are said the same way.
        for protocols in [BOTH, TLS12] {
            let addr =
                tls_broker::start("127.0.0.1", "server.pem", ClientAuth::Required, protocols).await;
            let started = Instant::now();
            let error = Connection::connect_with(&addr, &tls_config(&[]))
                .await
                .expect_err("no client certificate");
            let (key, reason) = refusal(error, started);
            assert_eq!(key, "ssl.keystore.location", "{protocols:?}");
            assert!(
                reason.contains("asks for a client certificate"),
                "{protocols:?}: {reason}"
            );
            let other = fixture("other-client.pem");
            let started = Instant::now();
            let error =
                Connection::connect_with(&addr, &tls_config(&[("ssl.keystore.location", &other)]))
                    .await
                    .expect_err("a certificate from another CA");
            let (key, reason) = refusal(error, started);
            assert_eq!(key, "ssl.keystore.location", "{protocols:?}");
            assert!(
                reason.contains("refused the certificate in ssl.keystore.location"),
                "{protocols:?}: {reason}"
            );
        }
    }

    #[tokio::test]
    async fn a_tls_client_at_a_plaintext_port_is_a_retriable_connect_error() {
        let addr = silent_broker::start().await;
        let config = tls_config(&[("socket.connection.setup.timeout.ms", "300")]);
        let error = Connection::connect_with(&addr, &config)
            .await
            .expect_err("a plaintext port");
        assert!(
            matches!(&error, Error::Connect { reason, .. } if reason.contains("TLS handshake")),
            "{error:?}"
        );
        assert!(error.is_retriable());
    }

    #[test]
    fn the_server_name_is_the_host_an_ip_address_as_one() {
        let name = |addr: &str| server_name(addr).map(|name| name.to_str().into_owned());
        assert_eq!(name("127.0.0.1:9093").expect("ip"), "127.0.0.1");
        assert!(matches!(
            server_name("[::1]:9093").expect("v6"),
            ServerName::IpAddress(_)
        ));
        assert!(matches!(
            server_name("broker-1.example.com:9093").expect("dns"),
            ServerName::DnsName(_)
        ));
        assert!(matches!(
            server_name("bad_host!:9093"),
            Err(Error::Config { .. })
        ));
    }
}
