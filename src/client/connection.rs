//! One connection to a Kafka broker, pipelined: many requests in flight, matched to their
//! responses by correlation id, as Kafka's clients do (`max.in.flight.requests.per.connection`
//! is the callers' business). At connect it asks ApiVersions, and each request is then sent at
//! the highest version both sides speak.
//!
//! Two tasks own the socket: a writer drains a queue of encoded frames (several per write when
//! they pile up), a reader hands each response to its waiter. Sending is cancel-safe: a frame is
//! queued whole or not at all. When the socket fails every waiter gets the error and the
//! connection reports itself closed; callers open a new one.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::{Buf, BufMut, Bytes, BytesMut};
use kafka_protocol::messages::{
    ApiKey, ApiVersionsRequest, ApiVersionsResponse, RequestHeader, ResponseHeader,
};
use kafka_protocol::protocol::{Decodable, Encodable, HeaderVersion, Request, StrBytes};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;

use super::error::{Error, Result, io_reason};
use crate::protocol::errors;

/// The largest response this client accepts.
const RESPONSE_BYTES_MAX: usize = 100 << 20;
/// Frames queued for the writer before senders wait.
const WRITE_QUEUE_FRAMES: usize = 256;

type Waiter = oneshot::Sender<Result<Bytes>>;

#[derive(Default)]
struct Pending {
    addr: String,
    next_correlation_id: i32,
    waiters: HashMap<i32, Waiter>,
    /// Why the connection ended, once it has.
    closed: Option<String>,
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
    pub async fn connect_as(
        addr: &str,
        client_id: &str,
        connect_timeout: Duration,
        request_timeout: Duration,
    ) -> Result<Connection> {
        let connect_error = |reason: String| Error::Connect {
            addr: addr.to_owned(),
            reason,
        };
        let stream = tokio::time::timeout(connect_timeout, TcpStream::connect(addr))
            .await
            .map_err(|_| connect_error(format!("no connection within {connect_timeout:?}")))?
            .map_err(|e| connect_error(io_reason(&e)))?;
        stream
            .set_nodelay(true)
            .map_err(|e| connect_error(io_reason(&e)))?;
        let (read, write) = stream.into_split();
        let pending = Arc::new(Mutex::new(Pending {
            addr: addr.to_owned(),
            ..Pending::default()
        }));
        let (frames, queue) = mpsc::channel(WRITE_QUEUE_FRAMES);
        let tasks = [
            tokio::spawn(write_frames(write, queue, pending.clone())),
            tokio::spawn(read_responses(read, pending.clone())),
        ];
        let mut connection = Connection {
            addr: addr.to_owned(),
            client_id: client_id.to_owned(),
            timeout: request_timeout,
            frames,
            pending,
            versions: HashMap::new(),
            tasks,
        };
        connection.versions = connection.api_versions().await?;
        Ok(connection)
    }

    /// The `host:port` this connection went to.
    pub fn addr(&self) -> &str {
        &self.addr
    }

    /// Whether the socket has failed or closed (a new connection is needed).
    pub fn is_closed(&self) -> bool {
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

    fn closed_error(&self) -> Error {
        match self.pending.lock() {
            Ok(pending) => self.closed_error_locked(&pending),
            Err(_) => Error::Closed,
        }
    }

    fn closed_error_locked(&self, pending: &Pending) -> Error {
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

fn protocol(e: impl std::fmt::Display) -> Error {
    Error::Protocol(e.to_string())
}

fn fail_all(pending: &Mutex<Pending>, reason: String) {
    let Ok(mut pending) = pending.lock() else {
        return;
    };
    pending.closed.get_or_insert(reason);
    let reason = pending.closed.clone().unwrap_or_default();
    let addr = pending.addr.clone();
    for (_, waiter) in pending.waiters.drain() {
        let _ = waiter.send(Err(Error::Disconnected {
            addr: addr.clone(),
            reason: reason.clone(),
        }));
    }
}

async fn write_frames(
    mut socket: OwnedWriteHalf,
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
        if let Err(e) = socket.write_all(&out).await {
            fail_all(&pending, io_reason(&e));
            return;
        }
        out.clear();
    }
}

async fn read_responses(mut socket: OwnedReadHalf, pending: Arc<Mutex<Pending>>) {
    let reason = loop {
        let size = match socket.read_i32().await {
            Ok(size) => size,
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => {
                break "the broker closed the connection".to_owned();
            }
            Err(e) => break io_reason(&e),
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
            Ok(mut pending) => pending.waiters.remove(&correlation_id),
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
}
