//! The Kafka listener: accepts connections and serves each one.
//!
//! A connection has a reader and a processor. The reader takes size-prefixed frames off the
//! socket (the size is checked against `socket.request.max.bytes` before any byte of the body
//! is buffered, and the body is buffered as it arrives, never by its claimed size) and queues at
//! most `queued.max.requests` of them. The processor answers them one at a time, in order, as
//! Kafka does: a client may pipeline requests, and a producer's pipelined batches are appended
//! in the order sent. A frame that cannot be parsed closes its connection, and only that one.
//!
//! On a TLS listener (SSL, SASL_SSL) the handshake comes first (bounded); the halves of the TLS
//! stream are then served the same way, segment ranges read into bounded buffers instead of
//! sent with sendfile.
//!
//! A client over one of its client quotas (`broker::client_quotas`) is answered at once, the
//! response saying how long to wait (`throttle_time_ms`), and its connection is then muted
//! for that long (KIP-219): the processor answers nothing and the reader takes nothing more
//! off the socket.
//!
//! With `thread.affinity` each connection is served by one network thread, pinned to a CPU,
//! for its whole life (`network`); without it, by the node's runtime.
//!
//! Shutdown (`Server::shutdown`): stop accepting, stop reading new requests, answer those
//! already read, then return.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use bytes::{BufMut, Bytes, BytesMut};
use kafka_protocol::messages::{ApiKey, ResponseKind};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch};
use tokio::task::JoinSet;

use crate::broker::Broker;
use crate::file_slice::FileSlice;
use crate::handler::{self, Answer, RequestContext};
use crate::metrics::{self, ApiLabel};
use crate::protocol::fetch_encode::Part;
use crate::protocol::{self, FrameError, errors};
use tokio::net::tcp::OwnedWriteHalf;

pub mod network;
pub mod quotas;
pub mod session;
use network::NetworkThreads;
use session::Session;

use crate::config::security::ListenerSecurity;

/// Limits of one listener (Kafka's keys).
#[derive(Debug, Clone)]
pub struct ListenerSettings {
    pub name: String,
    /// `socket.request.max.bytes`
    pub request_bytes_max: usize,
    /// `max.connections`
    pub connections_max: usize,
    /// `queued.max.requests`, per connection here.
    pub queued_requests_max: usize,
    /// `connections.max.idle.ms`
    pub idle_ms: u64,
    /// The listener's security protocol and SASL mechanisms.
    pub security: Arc<ListenerSecurity>,
    /// `sasl.server.max.receive.size`: the frame bound until a client authenticated.
    pub sasl_request_bytes_max: usize,
    /// SSL and SASL_SSL listeners: the certificates (reloaded when their files change) and how
    /// a client certificate names its principal.
    pub tls: Option<Arc<ListenerTls>>,
    /// `max.connections.per.ip`: shared by the broker's listeners.
    pub per_ip: Arc<quotas::PerIpConnections>,
    /// `max.connection.creation.rate`: the broker's (shared) and this listener's.
    pub creation_rates: Vec<Arc<quotas::CreationRate>>,
}

/// A TLS listener's server side.
pub struct ListenerTls {
    pub server: crate::security::tls::ServerTls,
    pub principals: crate::security::tls::PrincipalMapper,
}

impl std::fmt::Debug for ListenerTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ListenerTls")
    }
}

/// How long a client has to complete its TLS handshake.
const TLS_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// The most bytes of a segment read at once to be encrypted (TLS cannot use sendfile).
const TLS_FILE_CHUNK_BYTES: usize = 64 * 1024;

/// A frame's buffer is sized for its whole body when the body is at most this large (an
/// untouched allocation this size costs address space, not memory); a larger one grows as its
/// bytes arrive. Growing every frame from 64 KiB cost each megabyte-sized Produce four
/// reallocations, their copies and the page faults of fresh memory.
const FRAME_PREALLOCATED_BYTES_MAX: usize = 8 * 1024 * 1024;
/// The most bytes a larger frame's buffer grows by ahead of its bytes.
const READ_CHUNK_BYTES: usize = 1024 * 1024;

pub struct Server {
    shutdown: watch::Sender<bool>,
    accept_task: tokio::task::JoinHandle<()>,
    local_addr: SocketAddr,
}

impl Server {
    /// Serves connections on `network`'s threads when given, else on the current runtime.
    pub fn start(
        listener: TcpListener,
        settings: ListenerSettings,
        broker: Arc<Broker>,
        network: Option<Arc<NetworkThreads>>,
    ) -> Server {
        let (shutdown, stop) = watch::channel(false);
        let local_addr = listener
            .local_addr()
            .unwrap_or_else(|_| SocketAddr::from(([0, 0, 0, 0], 0)));
        let accept_task = tokio::spawn(accept_loop(
            listener,
            Arc::new(settings),
            broker,
            network,
            stop,
        ));
        Server {
            shutdown,
            accept_task,
            local_addr,
        }
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// Stops accepting and reading; waits (up to `grace`) for requests already read.
    pub async fn shutdown(self, grace: Duration) {
        let _ = self.shutdown.send(true);
        if tokio::time::timeout(grace, self.accept_task).await.is_err() {
            tracing::warn!("connections still busy after the shutdown grace period");
        }
    }
}

async fn accept_loop(
    listener: TcpListener,
    settings: Arc<ListenerSettings>,
    broker: Arc<Broker>,
    network: Option<Arc<NetworkThreads>>,
    mut stop: watch::Receiver<bool>,
) {
    let open = Arc::new(AtomicUsize::new(0));
    let mut connections = JoinSet::new();
    loop {
        let accepted = tokio::select! {
            _ = stop.wait_for(|s| *s) => break,
            accepted = listener.accept() => accepted,
            Some(_) = connections.join_next(), if !connections.is_empty() => continue,
        };
        let (stream, peer) = match accepted {
            Ok(accepted) => accepted,
            Err(error) => {
                tracing::warn!(%error, "accept failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        // max.connection.creation.rate: a connection over the rate waits its turn, and so do
        // the accepts after it.
        let now = Instant::now();
        let wait = settings
            .creation_rates
            .iter()
            .map(|rate| rate.take(now))
            .max()
            .unwrap_or_default();
        if !wait.is_zero() {
            broker
                .metrics
                .connection_creation_throttled_ms
                .fetch_add(wait.as_millis() as u64, Ordering::Relaxed);
            tokio::select! {
                _ = stop.wait_for(|s| *s) => break,
                () = tokio::time::sleep(wait) => {}
            }
        }
        let ip_slot = match settings.per_ip.open(peer.ip()) {
            Ok(slot) => slot,
            Err(max) => {
                tracing::debug!(%peer, max, "max.connections.per.ip reached: closing new connection");
                broker
                    .metrics
                    .connections_refused_per_ip
                    .fetch_add(1, Ordering::Relaxed);
                drop(stream);
                continue;
            }
        };
        if open.load(Ordering::Relaxed) >= settings.connections_max {
            tracing::warn!(%peer, connections_max = settings.connections_max, "max.connections reached: closing new connection");
            broker
                .metrics
                .connections_refused
                .fetch_add(1, Ordering::Relaxed);
            drop(stream);
            continue;
        }
        let _ = stream.set_nodelay(true);
        let (thread, slot) = network
            .as_ref()
            .and_then(|threads| threads.assign())
            .unzip();
        let counted = OpenConnection::new(&open, &broker, slot);
        let settings = Arc::clone(&settings);
        let broker = Arc::clone(&broker);
        let stop = stop.clone();
        let serve = async move |stream: std::io::Result<TcpStream>| {
            let _counted = counted;
            let _ip_slot = ip_slot;
            let served = match stream {
                Ok(stream) => serve_connection(stream, peer, &settings, &broker, stop).await,
                Err(error) => Err(format!("handing over to a network thread: {error}")),
            };
            if let Err(reason) = served {
                tracing::debug!(%peer, %reason, "connection closed");
            }
        };
        match thread {
            Some(thread) => {
                // The socket moves to the network thread's own reactor.
                let stream = stream.into_std();
                connections.spawn_on(
                    async move { serve(stream.and_then(TcpStream::from_std)).await },
                    &thread,
                );
            }
            None => {
                connections.spawn(serve(Ok(stream)));
            }
        }
    }
    drop(listener);
    // Drain: each connection stops reading and answers what it has read.
    while connections.join_next().await.is_some() {}
}

/// Counts a connection as open, against `max.connections`, in `/metrics` and on its network
/// thread, until dropped: when its task ends, panics or is dropped.
struct OpenConnection {
    open: Arc<AtomicUsize>,
    broker: Arc<Broker>,
    _slot: Option<network::ConnectionSlot>,
}

impl OpenConnection {
    fn new(
        open: &Arc<AtomicUsize>,
        broker: &Arc<Broker>,
        slot: Option<network::ConnectionSlot>,
    ) -> OpenConnection {
        open.fetch_add(1, Ordering::Relaxed);
        broker.metrics.connections.fetch_add(1, Ordering::Relaxed);
        OpenConnection {
            open: Arc::clone(open),
            broker: Arc::clone(broker),
            _slot: slot,
        }
    }
}

impl Drop for OpenConnection {
    fn drop(&mut self) {
        self.open.fetch_sub(1, Ordering::Relaxed);
        self.broker
            .metrics
            .connections
            .fetch_sub(1, Ordering::Relaxed);
    }
}

/// A request frame as read, with when it arrived.
pub struct Frame {
    pub bytes: Bytes,
    pub received: Instant,
}

/// The writing side of a connection: a plain socket sends segment ranges with sendfile; a
/// TLS one encrypts them from bounded buffers.
enum Writer {
    Plain(OwnedWriteHalf),
    Tls(tokio::io::WriteHalf<tokio_rustls::server::TlsStream<TcpStream>>),
}

impl Writer {
    async fn write_parts(&mut self, parts: Vec<Part>) -> std::io::Result<()> {
        match self {
            Writer::Plain(writer) => write_parts(writer, parts).await,
            Writer::Tls(writer) => {
                for part in parts {
                    match part {
                        Part::Bytes(bytes) => writer.write_all(&bytes).await?,
                        Part::File(slice) => write_file_chunks(writer, &slice).await?,
                    }
                }
                writer.flush().await
            }
        }
    }

    async fn shutdown(&mut self) -> std::io::Result<()> {
        match self {
            Writer::Plain(writer) => writer.shutdown().await,
            Writer::Tls(writer) => writer.shutdown().await,
        }
    }
}

/// The content type of a TLS record carrying a handshake (a ClientHello opens with one).
const TLS_HANDSHAKE_RECORD: u8 = 0x16;

/// Whether the bytes waiting on `stream` are the controller's liveness probe (a plaintext
/// ApiVersions request naming [`PROBE_CLIENT_ID`]).
async fn is_liveness_probe(stream: &TcpStream) -> bool {
    let probe = crate::controller::service::PROBE_CLIENT_ID.as_bytes();
    let mut head = [0u8; 64];
    let Ok(Ok(read)) =
        tokio::time::timeout(Duration::from_millis(100), stream.peek(&mut head)).await
    else {
        return false;
    };
    head[..read]
        .windows(probe.len())
        .any(|window| window == probe)
}

/// A segment range through a writer that is not a socket (TLS): read in bounded chunks.
async fn write_file_chunks<W: tokio::io::AsyncWrite + Unpin>(
    writer: &mut W,
    slice: &FileSlice,
) -> std::io::Result<()> {
    use std::os::unix::fs::FileExt;
    let mut buffer = vec![0u8; TLS_FILE_CHUNK_BYTES.min(slice.len as usize)];
    let mut done = 0u64;
    while done < slice.len {
        let want = ((slice.len - done) as usize).min(buffer.len());
        let read = slice
            .file()
            .read_at(&mut buffer[..want], slice.position + done)?;
        if read == 0 {
            // The response's length is already on the wire: the connection cannot go on.
            return Err(std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                "segment truncated while being sent",
            ));
        }
        writer.write_all(&buffer[..read]).await?;
        done += read as u64;
    }
    Ok(())
}

/// Serves a connection: a TLS listener's first, after its handshake (the client's
/// certificate, if any, naming its principal on an SSL listener).
async fn serve_connection(
    stream: TcpStream,
    peer: SocketAddr,
    settings: &ListenerSettings,
    broker: &Arc<Broker>,
    stop: watch::Receiver<bool>,
) -> Result<(), String> {
    let Some(tls) = &settings.tls else {
        let (reader, writer) = stream.into_split();
        return serve_halves(
            reader,
            Writer::Plain(writer),
            None,
            peer,
            settings,
            broker,
            stop,
        )
        .await;
    };
    // A connection that never sends a byte is no failed handshake: the controller's liveness
    // watch holds one to every broker listener, and sends nothing. It is closed quietly.
    let mut first = [0u8; 1];
    match tokio::time::timeout(TLS_HANDSHAKE_TIMEOUT, stream.peek(&mut first)).await {
        Ok(Ok(1..)) => {}
        Ok(_) | Err(_) => {
            tracing::debug!(%peer, "TLS listener: connection closed before any byte");
            return Ok(());
        }
    }
    // The controller's liveness probe sends a plaintext ApiVersions request to every
    // listener: closing is answer enough, and no failed handshake.
    if first[0] != TLS_HANDSHAKE_RECORD && is_liveness_probe(&stream).await {
        tracing::debug!(%peer, "TLS listener: the controller's liveness probe, closed");
        return Ok(());
    }
    let accepted =
        tokio::time::timeout(TLS_HANDSHAKE_TIMEOUT, tls.server.acceptor().accept(stream))
            .await
            .map_err(|_| "TLS handshake timed out".to_owned())
            .and_then(|accepted| accepted.map_err(|e| format!("TLS handshake failed: {e}")));
    let accepted = match accepted {
        Ok(accepted) => accepted,
        Err(reason) => {
            broker
                .metrics
                .tls_handshake_failures
                .fetch_add(1, Ordering::Relaxed);
            return Err(reason);
        }
    };
    let principal = crate::security::tls::client_principal(accepted.get_ref().1, &tls.principals)
        .map_err(|e| {
            tracing::info!(%peer, error = %e, "client certificate refused by ssl.principal.mapping.rules");
            format!("client certificate: {e}")
        })?;
    let (reader, writer) = tokio::io::split(accepted);
    serve_halves(
        reader,
        Writer::Tls(writer),
        principal,
        peer,
        settings,
        broker,
        stop,
    )
    .await
}

async fn serve_halves<R: AsyncRead + Unpin + Send + 'static>(
    mut reader: R,
    mut writer: Writer,
    certificate_principal: Option<String>,
    peer: SocketAddr,
    settings: &ListenerSettings,
    broker: &Arc<Broker>,
    mut stop: watch::Receiver<bool>,
) -> Result<(), String> {
    let (queue, mut queued) = mpsc::channel::<Frame>(settings.queued_requests_max.max(1));
    let busy = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let idle = Duration::from_millis(settings.idle_ms);
    let read_busy = Arc::clone(&busy);
    let mut session = Session::new(Arc::clone(&settings.security));
    if let Some(principal) = certificate_principal {
        session.set_certificate_principal(principal);
    }
    // Until the client authenticated, frames are bounded by sasl.server.max.receive.size.
    let authenticated = Arc::new(std::sync::atomic::AtomicBool::new(
        session.is_authenticated(),
    ));
    let read_authenticated = Arc::clone(&authenticated);
    // Until when the connection is muted (milliseconds from `opened`, 0: never): its client
    // went over a client quota. The reader takes no frame off the socket meanwhile, and the
    // processor answers none.
    let opened = tokio::time::Instant::now();
    let muted = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let read_muted = Arc::clone(&muted);
    let mut mute_stop = stop.clone();
    let (request_bytes_max, sasl_request_bytes_max) = (
        settings.request_bytes_max,
        settings
            .sasl_request_bytes_max
            .min(settings.request_bytes_max),
    );
    // The reader is a task of its own. Were it a future joined with the processor in one
    // task, each frame it queued would wake its own task, and tokio answers a task that wakes
    // itself by waking a second worker thread to steal it: one needless cross-CPU wake per
    // request, which on a busy machine preempts whoever runs there (a librdkafka consumer's
    // fetch thread, measured: 3.5-4.1 M records/s instead of 4.6-5.5 M). A wake across
    // tasks goes to the waking worker's LIFO slot and wakes no one.
    let reader: tokio::task::JoinHandle<Result<(), String>> = tokio::spawn(async move {
        loop {
            let muted_ms = read_muted.load(Ordering::Acquire);
            let until = opened + Duration::from_millis(muted_ms);
            if muted_ms > 0 && until > tokio::time::Instant::now() {
                tokio::select! {
                    _ = stop.wait_for(|s| *s) => return Ok(()),
                    _ = queue.closed() => return Ok(()),
                    () = tokio::time::sleep_until(until) => {}
                }
            }
            let next = tokio::select! {
                _ = stop.wait_for(|s| *s) => return Ok(()),
                _ = queue.closed() => return Ok(()),
                // The bound is taken once the size is read, not now: the frame being read
                // may be the first after a login still being processed (its client sends it
                // once answered, and the answer is written after the session is marked
                // authenticated).
                next = read_frame(
                    &mut reader,
                    || {
                        if read_authenticated.load(Ordering::Acquire) {
                            (request_bytes_max, "socket.request.max.bytes")
                        } else {
                            (sasl_request_bytes_max, "sasl.server.max.receive.size")
                        }
                    },
                    idle,
                    &read_busy,
                ) => next,
            };
            match next? {
                Some(frame) => {
                    if queue.send(frame).await.is_err() {
                        return Ok(());
                    }
                }
                None => return Ok(()),
            }
        }
    });
    let listener_name = settings.name.clone();
    let processed = async {
        // Ends when the reader stops (its sender dropped) and every frame read is answered.
        while let Some(frame) = queued.recv().await {
            busy.store(true, Ordering::Relaxed);
            let answer = process_frame(broker, &listener_name, &mut session, peer, frame).await;
            authenticated.store(session.is_authenticated(), Ordering::Release);
            let result = match answer {
                Ok(Processed::Answer(parts)) => writer
                    .write_parts(parts)
                    .await
                    .map_err(|e| format!("write: {e}")),
                Ok(Processed::AnswerThenClose(parts, reason)) => {
                    match writer.write_parts(parts).await {
                        Ok(()) => Err(reason),
                        Err(e) => Err(format!("write: {e}")),
                    }
                }
                Ok(Processed::NoAnswer) => Ok(()),
                Ok(Processed::AnswerThenMute(parts, mute)) => {
                    let written = match parts {
                        Some(parts) => writer
                            .write_parts(parts)
                            .await
                            .map_err(|e| format!("write: {e}")),
                        None => Ok(()),
                    };
                    if written.is_ok() {
                        // KIP-219: muted after the response; still busy, so the idle limit
                        // does not close it meanwhile. A shutdown ends the mute.
                        let until = tokio::time::Instant::now() + mute;
                        let until_ms = until.duration_since(opened).as_millis() as u64;
                        muted.store(until_ms.max(1), Ordering::Release);
                        tokio::select! {
                            _ = mute_stop.wait_for(|s| *s) => {}
                            () = tokio::time::sleep_until(until) => {}
                        }
                    }
                    written
                }
                Err(error) => Err(error.to_string()),
            };
            busy.store(false, Ordering::Relaxed);
            if let Err(reason) = result {
                // Closing the queue stops the reader.
                queued.close();
                return Err(reason);
            }
        }
        let _ = writer.shutdown().await;
        Ok(())
    }
    .await;
    let read = reader
        .await
        .unwrap_or_else(|error| Err(format!("reader task: {error}")));
    processed.and(read)
}

/// Reads one frame; `None` at a clean end of stream (or idle timeout). `bound` gives the
/// largest frame and the key that sets it, asked once the size is read.
async fn read_frame<R: AsyncRead + Unpin>(
    reader: &mut R,
    bound: impl Fn() -> (usize, &'static str),
    idle: Duration,
    busy: &std::sync::atomic::AtomicBool,
) -> Result<Option<Frame>, String> {
    let mut size = [0u8; 4];
    loop {
        match tokio::time::timeout(idle, reader.read_exact(&mut size)).await {
            Ok(Ok(_)) => break,
            Ok(Err(e)) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(None),
            Ok(Err(e)) => return Err(format!("read: {e}")),
            // connections.max.idle.ms: nothing read and nothing being answered.
            Err(_) if !busy.load(Ordering::Relaxed) => {
                return Err("idle for connections.max.idle.ms".into());
            }
            Err(_) => continue,
        }
    }
    let received = Instant::now();
    let size = i32::from_be_bytes(size);
    let (request_bytes_max, key) = bound();
    if size < 0 || size as usize > request_bytes_max {
        return Err(format!(
            "frame size {size} is outside [0, {key}={request_bytes_max}]"
        ));
    }
    let size = size as usize;
    let mut body = BytesMut::with_capacity(size.min(FRAME_PREALLOCATED_BYTES_MAX));
    while body.len() < size {
        body.reserve((size - body.len()).min(READ_CHUNK_BYTES));
        let want = (size - body.len()).min(body.capacity() - body.len());
        let mut limited = (&mut body).limit(want);
        match reader.read_buf(&mut limited).await {
            Ok(0) => return Err(format!("end of stream inside a {size}-byte frame")),
            Ok(_) => {}
            Err(e) => return Err(format!("read: {e}")),
        }
    }
    Ok(Some(Frame {
        bytes: body.freeze(),
        received,
    }))
}

/// What a frame came to.
pub enum Processed {
    Answer(Vec<Part>),
    /// No response is due (acks=0).
    NoAnswer,
    /// Answer, then close (a failed SASL authentication), for this reason.
    AnswerThenClose(Vec<Part>, String),
    /// Answer (or nothing, for acks=0), then read nothing more from the connection for this
    /// long: its client went over a client quota (KIP-219 mutes the channel after the
    /// response, which says how long in `throttle_time_ms`).
    AnswerThenMute(Option<Vec<Part>>, Duration),
}

/// Answers one frame (a request without its size prefix), as a connection does: header and
/// body decoded, admitted by the session (SASL), dispatched, the response encoded. `Err` to
/// close the connection. Public for the request fuzzer (`sluice fuzz`).
pub async fn process_frame(
    broker: &Arc<Broker>,
    listener_name: &str,
    session: &mut Session,
    peer: SocketAddr,
    frame: Frame,
) -> Result<Processed, FrameError> {
    if session.expects_raw_token() {
        let token = session
            .raw_token(&frame.bytes, &broker.metrics, &broker.image())
            .map_err(FrameError::Close)?;
        let mut out = BytesMut::with_capacity(4 + token.len());
        out.put_i32(
            i32::try_from(token.len())
                .map_err(|_| FrameError::Close("a SASL token larger than a frame".into()))?,
        );
        out.extend_from_slice(&token);
        return Ok(Processed::Answer(vec![Part::Bytes(out.freeze())]));
    }
    let request_bytes = frame.bytes.len();
    let mut bytes = frame.bytes;
    let start = protocol::peek_start(&bytes)?;
    let api_key = ApiKey::try_from(start.api_key).map_err(|()| {
        broker
            .metrics
            .record_errors(ApiLabel::Unknown, [errors::INVALID_REQUEST]);
        FrameError::UnknownApiKey(start.api_key)
    })?;
    let supported = handler::supported_versions(api_key);
    let in_range = supported.is_some_and(|(min, max)| (min..=max).contains(&start.api_version));
    if !in_range {
        broker.metrics.record_unsupported(api_key);
        if api_key == ApiKey::ApiVersions {
            let fallback =
                protocol::api_versions_fallback(start.correlation_id, handler::SUPPORTED_APIS);
            return Ok(Processed::Answer(vec![Part::Bytes(fallback.freeze())]));
        }
        tracing::warn!(%peer, ?api_key, version = start.api_version, "unsupported API or version: closing the connection");
        return Err(FrameError::Undecodable {
            api_key,
            version: start.api_version,
            reason: "unsupported version".into(),
        });
    }
    let answered_by_session = session.admits(api_key, Instant::now()).map_err(|reason| {
        tracing::info!(%peer, %reason, "closing the connection");
        FrameError::Close(reason)
    })?;
    let undecodable = |_: &FrameError| {
        broker
            .metrics
            .record_errors(ApiLabel::of(api_key), [errors::INVALID_REQUEST]);
    };
    let header = protocol::decode_header(api_key, &mut bytes).inspect_err(undecodable)?;
    let request = protocol::decode_body(api_key, header.request_api_version, &mut bytes)
        .inspect_err(|error| {
            undecodable(error);
            tracing::warn!(%peer, %error, "undecodable request: closing the connection")
        })?;
    if answered_by_session {
        let (response, close) = match &request {
            kafka_protocol::messages::RequestKind::SaslHandshake(r) => {
                let (response, close) = session.handshake(r, header.request_api_version);
                (ResponseKind::SaslHandshake(response), close)
            }
            kafka_protocol::messages::RequestKind::SaslAuthenticate(r) => {
                let (response, close) = session.authenticate(r, &broker.metrics, &broker.image());
                (ResponseKind::SaslAuthenticate(response), close)
            }
            _ => return Err(FrameError::Close("not a SASL request".into())),
        };
        record_response_errors(broker, api_key, &response);
        let bytes = protocol::encode_response(
            api_key,
            header.request_api_version,
            header.correlation_id,
            &response,
        )?;
        broker
            .metrics
            .record_request(api_key, frame.received.elapsed(), bytes.len());
        let parts = vec![Part::Bytes(bytes.freeze())];
        return Ok(if close {
            Processed::AnswerThenClose(parts, format!("{api_key:?} failed"))
        } else {
            Processed::Answer(parts)
        });
    }
    let context = RequestContext {
        request_bytes,
        api_key,
        api_version: header.request_api_version,
        client_id: header.client_id.as_ref().map(|c| c.to_string()),
        listener_name: listener_name.to_owned(),
        principal: Arc::clone(session.principal()),
        access: broker
            .authorizer
            .access(Arc::clone(session.principal()), peer.ip()),
        peer,
        received: frame.received,
    };
    let (answer, mute) = handler::dispatch(broker, &context, request).await;
    let version = header.request_api_version;
    let encoded = match answer {
        Some(Answer::Message(response)) => {
            record_response_errors(broker, api_key, &response);
            protocol::encode_response(api_key, version, header.correlation_id, &response).map(
                |bytes| {
                    let len = bytes.len();
                    (vec![Part::Bytes(bytes.freeze())], len)
                },
            )
        }
        Some(Answer::Fetch(fetch)) => {
            let mut codes = Vec::new();
            metrics::errors::fetch_error_codes(&fetch, &mut |code| codes.push(code));
            broker.metrics.record_errors(ApiLabel::of(api_key), codes);
            protocol::fetch_encode::encode(version, header.correlation_id, &fetch)
        }
        Some(Answer::Close) => {
            tracing::debug!(%peer, "acks=0 produce failed: closing the connection");
            Err(FrameError::Close("an acks=0 produce failed".into()))
        }
        None => {
            broker
                .metrics
                .record_request(api_key, frame.received.elapsed(), 0);
            return Ok(if mute.is_zero() {
                Processed::NoAnswer
            } else {
                Processed::AnswerThenMute(None, mute)
            });
        }
    }
    .inspect_err(|error| {
        if !matches!(error, FrameError::Close(_)) {
            tracing::error!(%peer, %error, "response not encodable: closing the connection")
        }
    })?;
    broker
        .metrics
        .record_request(api_key, frame.received.elapsed(), encoded.1);
    Ok(if mute.is_zero() {
        Processed::Answer(encoded.0)
    } else {
        Processed::AnswerThenMute(Some(encoded.0), mute)
    })
}

/// Counts the errors a response carries (`sluice_request_errors_total`).
fn record_response_errors(broker: &Broker, api_key: ApiKey, response: &ResponseKind) {
    let mut codes = Vec::new();
    metrics::errors::response_error_codes(response, &mut |code| codes.push(code));
    broker.metrics.record_errors(ApiLabel::of(api_key), codes);
}

/// Writes a response's parts: bytes with `write_all`, file slices with `sendfile` (page cache
/// to socket, no copy through this process).
async fn write_parts(writer: &mut OwnedWriteHalf, parts: Vec<Part>) -> std::io::Result<()> {
    for part in parts {
        match part {
            Part::Bytes(bytes) => writer.write_all(&bytes).await?,
            Part::File(slice) => send_file(writer.as_ref(), &slice).await?,
        }
    }
    Ok(())
}

async fn send_file(stream: &TcpStream, slice: &FileSlice) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    let mut offset = i64::try_from(slice.position).map_err(std::io::Error::other)?;
    let mut remaining = usize::try_from(slice.len).map_err(std::io::Error::other)?;
    while remaining > 0 {
        stream.writable().await?;
        let sent = stream.try_io(tokio::io::Interest::WRITABLE, || {
            // SAFETY: both descriptors are open for the call; the kernel advances `offset`.
            let n = unsafe {
                libc::sendfile(
                    stream.as_raw_fd(),
                    slice.file().as_raw_fd(),
                    &mut offset,
                    remaining,
                )
            };
            if n < 0 {
                Err(std::io::Error::last_os_error())
            } else {
                Ok(n as usize)
            }
        });
        match sent {
            // The segment was truncated under the slice: the response's length is already
            // on the wire, so the connection cannot go on.
            Ok(0) => {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::UnexpectedEof,
                    "segment truncated while being sent",
                ));
            }
            Ok(n) => remaining -= n,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}
