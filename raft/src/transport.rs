//! How the quorum's gRPC travels: plain TCP (a PLAINTEXT controller listener, the default) or
//! mutual TLS (an SSL controller listener). The TLS configs come from the node, which loads
//! and reloads the certificates; this crate only runs the handshakes.
//!
//! - Serving: [`QuorumTls::server`] is asked per accepted connection, so a reloaded
//!   certificate is served from the next connection on. Each handshake runs in its own task,
//!   bounded in time, so a slow or silent client holds up nobody. The client's certificate
//!   reaches the services as a [`Peer`] in the request's extensions.
//! - Calling: every channel this process opens to a quorum listener (Raft RPCs between
//!   members, controller calls from brokers and the CLI) goes through [`connect`], which uses
//!   the client config set by [`set_client_tls`] (once per process: the node at start, the
//!   CLI from its --command-config).

use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::{Arc, RwLock};
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio_rustls::rustls;
use tonic::transport::server::Connected;
use tonic::transport::{Channel, Endpoint, Uri};

/// How long a TLS handshake on the quorum listener may take.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// Accepted connections waiting for the server to take them.
const ACCEPTED_QUEUE: usize = 64;

/// The TLS side of a quorum member's listener and of its calls to the other members.
#[derive(Clone)]
pub struct QuorumTls {
    /// The server config for a new connection (the current certificate; clients must present
    /// one the truststore vouches for).
    pub server: Arc<dyn Fn() -> Arc<rustls::ServerConfig> + Send + Sync>,
    /// The config this member connects to the others with (their CA, its own certificate).
    pub client: Arc<rustls::ClientConfig>,
}

impl std::fmt::Debug for QuorumTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("QuorumTls { .. }")
    }
}

/// Who made a request on the quorum listener: its address and, over TLS, the certificate it
/// presented (DER, the end entity's; verified against the truststore by the handshake).
#[derive(Debug, Clone, Default)]
pub struct Peer {
    pub addr: Option<SocketAddr>,
    pub certificate: Option<Arc<Vec<u8>>>,
}

impl Peer {
    /// The peer of a request: the TLS connection's, or only the address on plain TCP.
    pub fn of<T>(request: &tonic::Request<T>) -> Peer {
        if let Some(peer) = request.extensions().get::<Peer>() {
            return peer.clone();
        }
        Peer {
            addr: request.remote_addr(),
            certificate: None,
        }
    }
}

/// Decides whether a peer may send Raft RPCs (the node's authorizer: CLUSTER_ACTION).
pub type RaftGate = Arc<dyn Fn(&Peer) -> Result<(), String> + Send + Sync>;

static CLIENT_TLS: RwLock<Option<Arc<rustls::ClientConfig>>> = RwLock::new(None);

/// Sets how this process connects to quorum listeners: TLS with `config`, or plain TCP
/// (`None`, the default).
pub fn set_client_tls(config: Option<Arc<rustls::ClientConfig>>) {
    *CLIENT_TLS.write().unwrap_or_else(|p| p.into_inner()) = config;
}

fn client_tls() -> Option<Arc<rustls::ClientConfig>> {
    CLIENT_TLS.read().unwrap_or_else(|p| p.into_inner()).clone()
}

/// A channel to the quorum listener at `addr` (`host:port`), over TLS when the process was
/// set to (the certificate must name `host`).
pub(crate) async fn connect(
    addr: &str,
    connect_timeout: Duration,
    request_timeout: Option<Duration>,
) -> Result<Channel, tonic::transport::Error> {
    let mut endpoint = Endpoint::from_shared(format!("http://{addr}"))?
        .connect_timeout(connect_timeout)
        .tcp_nodelay(true);
    if let Some(timeout) = request_timeout {
        endpoint = endpoint.timeout(timeout);
    }
    let Some(tls) = client_tls() else {
        return endpoint.connect().await;
    };
    let connector = tokio_rustls::TlsConnector::from(tls);
    endpoint
        .connect_with_connector(tower::service_fn(move |uri: Uri| {
            let connector = connector.clone();
            async move {
                let host = uri.host().unwrap_or_default().to_owned();
                let port = uri.port_u16().unwrap_or(80);
                let server_name = rustls::pki_types::ServerName::try_from(host.clone())
                    .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e))?;
                let tcp = TcpStream::connect((host.as_str(), port)).await?;
                tcp.set_nodelay(true)?;
                let tls = connector.connect(server_name, tcp).await?;
                Ok::<_, std::io::Error>(hyper_util::rt::TokioIo::new(tls))
            }
        }))
        .await
}

/// The TLS connections accepted on `listener`, handshakes done, as tonic's server takes them.
pub(crate) fn tls_incoming(
    listener: TcpListener,
    tls: QuorumTls,
) -> tokio_stream::wrappers::ReceiverStream<Result<TlsIo, std::io::Error>> {
    let (accepted, incoming) = mpsc::channel(ACCEPTED_QUEUE);
    tokio::spawn(async move {
        loop {
            // The server gone (the member shut down), the listener closes with this task.
            let result = tokio::select! {
                _ = accepted.closed() => return,
                result = listener.accept() => result,
            };
            let (tcp, addr) = match result {
                Ok(accepted) => accepted,
                Err(error) => {
                    tracing::debug!(%error, "quorum listener accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            };
            let _ = tcp.set_nodelay(true);
            let acceptor = tokio_rustls::TlsAcceptor::from((tls.server)());
            let accepted = accepted.clone();
            tokio::spawn(async move {
                match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(tcp)).await {
                    Ok(Ok(stream)) => {
                        let certificate = stream
                            .get_ref()
                            .1
                            .peer_certificates()
                            .and_then(|chain| chain.first())
                            .map(|der| Arc::new(der.as_ref().to_vec()));
                        let peer = Peer {
                            addr: Some(addr),
                            certificate,
                        };
                        let _ = accepted.send(Ok(TlsIo { stream, peer })).await;
                    }
                    Ok(Err(error)) => {
                        tracing::warn!(%addr, %error, "quorum listener: TLS handshake refused")
                    }
                    Err(_) => tracing::warn!(%addr, "quorum listener: TLS handshake timed out"),
                }
            });
        }
    });
    tokio_stream::wrappers::ReceiverStream::new(incoming)
}

/// An accepted TLS connection and who is on the other end.
pub(crate) struct TlsIo {
    stream: tokio_rustls::server::TlsStream<TcpStream>,
    peer: Peer,
}

impl Connected for TlsIo {
    type ConnectInfo = Peer;

    fn connect_info(&self) -> Peer {
        self.peer.clone()
    }
}

impl AsyncRead for TlsIo {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.stream).poll_read(cx, buf)
    }
}

impl AsyncWrite for TlsIo {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.stream).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.stream).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }
}
