//! The accept loop: serves a router over HTTP/1.1 with the limits that keep one client from
//! holding the server — a cap on open connections, and timeouts on every phase of a connection.
//!
//! | phase | bound | what happens past it |
//! |---|---|---|
//! | idle keep-alive (nothing received since the last answer, or since accepting) | [`Limits::idle_timeout`] | the connection is closed |
//! | reading a request's head (from its first byte) | [`Limits::header_timeout`] | the connection is closed |
//! | reading a request's body (the gap between two chunks) | [`Limits::body_timeout`] | the handler's read fails: `400` |
//! | the whole request, body included, until the answer is ready | [`Limits::request_timeout`] | `408 Request Timeout` |
//! | open connections | [`Limits::max_connections`] | the oldest connection with no request in progress is closed to make room; when every one is busy, the new one is closed |
//!
//! Closing the oldest idle connection at the cap, rather than refusing new ones, is what keeps
//! `/health` answering while someone holds thousands of sockets open: a held socket that sends
//! nothing is idle, and the next real request takes its place. A request that is being read or
//! handled is never evicted; those are bounded by the body and request timeouts instead.
//!
//! axum's own `serve` sets none of these (hyper's header timeout needs a timer it does not
//! give), which is why this loop exists; it is small, and built from hyper's HTTP/1 connection,
//! hyper-util's tokio glue and two `tower-http` timeout layers.

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use axum::Router;
use axum::extract::ConnectInfo;
use axum::http::{Request, StatusCode};
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tower_service::Service;

/// The bounds a served connection lives within. See the module documentation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Limits {
    /// Most connections open at once.
    pub max_connections: usize,
    /// Longest wait for a request's head to be read whole.
    pub header_timeout: Duration,
    /// Longest an idle keep-alive connection is kept.
    pub idle_timeout: Duration,
    /// Longest gap between two chunks of a request body.
    pub body_timeout: Duration,
    /// Longest a request may take, body included, until its answer is ready.
    pub request_timeout: Duration,
}

impl Default for Limits {
    /// 1,000 connections (under the usual soft limit of 1,024 descriptors, with room for the
    /// store's files; raise both together); 10 s for a head, 15 s idle, 10 s between body chunks,
    /// 30 s per request. A 10 MB import over a slow link sends chunks far more often than every
    /// 10 s; a tracker's request takes milliseconds.
    fn default() -> Self {
        Limits {
            max_connections: 1000,
            header_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(15),
            body_timeout: Duration::from_secs(10),
            request_timeout: Duration::from_secs(30),
        }
    }
}

/// What the accept loop knows of one connection.
struct Conn {
    /// Requests being handled on it now.
    busy: AtomicUsize,
    /// When the first byte of a request's head came in since it last went idle, in milliseconds
    /// since the loop started; [`NOT_READING`] while nothing came.
    reading_since_ms: AtomicU64,
    /// When it last went idle, in milliseconds since the loop started.
    idle_since_ms: AtomicU64,
    /// Set to close it.
    close: tokio::sync::Notify,
}

const NOT_READING: u64 = u64::MAX;

impl Conn {
    fn is_idle(&self) -> bool {
        self.busy.load(Ordering::Acquire) == 0
    }

    /// Whether no request is in progress and the connection has waited too long: `idle` with
    /// nothing received, or `header` since the first byte of a head that is still incomplete.
    fn has_waited_too_long(&self, now_ms: u64, idle: Duration, header: Duration) -> bool {
        if !self.is_idle() {
            return false;
        }
        let (since, limit) = match self.reading_since_ms.load(Ordering::Acquire) {
            NOT_READING => (self.idle_since_ms.load(Ordering::Acquire), idle),
            since => (since, header),
        };
        Duration::from_millis(now_ms.saturating_sub(since)) >= limit
    }
}

/// The open connections, oldest first.
struct Registry {
    epoch: Instant,
    next_id: AtomicU64,
    open: Mutex<BTreeMap<u64, Arc<Conn>>>,
}

impl Registry {
    fn now_ms(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    /// Registers a new connection, closing the oldest idle one when `max` are open; `None`
    /// when every open connection is busy.
    fn admit(&self, max: usize) -> Option<(u64, Arc<Conn>)> {
        let mut open = store::sync::lock(&self.open);
        if open.len() >= max {
            let victim = open.iter().find(|(_, c)| c.is_idle()).map(|(id, _)| *id)?;
            if let Some(conn) = open.remove(&victim) {
                conn.close.notify_one();
            }
        }
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let conn = Arc::new(Conn {
            busy: AtomicUsize::new(0),
            reading_since_ms: AtomicU64::new(NOT_READING),
            idle_since_ms: AtomicU64::new(self.now_ms()),
            close: tokio::sync::Notify::new(),
        });
        open.insert(id, conn.clone());
        Some((id, conn))
    }

    fn remove(&self, id: u64) {
        store::sync::lock(&self.open).remove(&id);
    }
}

/// A TCP stream that tells its [`Conn`] when the first byte of a request arrives, so an idle
/// connection can be told from one in the middle of sending a request's head.
struct Watched {
    stream: TcpStream,
    conn: Arc<Conn>,
    registry: Arc<Registry>,
}

impl AsyncRead for Watched {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.stream).poll_read(cx, buf);
        if buf.filled().len() > before && self.conn.is_idle() {
            let now = self.registry.now_ms();
            let _ = self.conn.reading_since_ms.compare_exchange(NOT_READING, now, Ordering::AcqRel, Ordering::Acquire);
        }
        polled
    }
}

impl AsyncWrite for Watched {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<std::io::Result<usize>> {
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

/// Counts a request as in progress on its connection until dropped.
struct Busy {
    conn: Arc<Conn>,
    registry: Arc<Registry>,
}

impl Busy {
    fn enter(conn: &Arc<Conn>, registry: &Arc<Registry>) -> Busy {
        conn.busy.fetch_add(1, Ordering::AcqRel);
        Busy { conn: conn.clone(), registry: registry.clone() }
    }
}

impl Drop for Busy {
    fn drop(&mut self) {
        self.conn.reading_since_ms.store(NOT_READING, Ordering::Release);
        self.conn.idle_since_ms.store(self.registry.now_ms(), Ordering::Release);
        self.conn.busy.fetch_sub(1, Ordering::AcqRel);
    }
}

/// `app` with the body and whole-request timeouts of `limits`.
pub fn with_timeouts(app: Router, limits: &Limits) -> Router {
    app.layer(tower_http::timeout::RequestBodyTimeoutLayer::new(limits.body_timeout))
        .layer(tower_http::timeout::TimeoutLayer::with_status_code(StatusCode::REQUEST_TIMEOUT, limits.request_timeout))
}

/// Serves `app` on `listener` within `limits` until `signal` completes; then stops accepting,
/// lets the requests in progress finish (each within the request timeout) and returns. Handlers
/// see the peer's address as `ConnectInfo<SocketAddr>`.
pub async fn serve_limited(
    listener: TcpListener,
    app: Router,
    limits: Limits,
    signal: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let app = with_timeouts(app, &limits);
    let registry =
        Arc::new(Registry { epoch: Instant::now(), next_id: AtomicU64::new(0), open: Mutex::new(BTreeMap::new()) });
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let mut tasks = tokio::task::JoinSet::new();
    let mut builder = hyper::server::conn::http1::Builder::new();
    // hyper's own head timer starts when a connection begins to wait, idle or not; set past the
    // idle and head bounds together, it only backs up the watch below.
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(limits.idle_timeout + limits.header_timeout + Duration::from_secs(1))
        .keep_alive(true);
    let builder = Arc::new(builder);
    let mut refused_logged = Instant::now() - Duration::from_secs(60);
    tokio::pin!(signal);
    loop {
        let (stream, peer) = tokio::select! {
            () = &mut signal => break,
            accepted = listener.accept() => match accepted {
                Ok(pair) => pair,
                Err(e) => {
                    // Out of descriptors (or another passing error): wait rather than spin, as
                    // closing idle connections frees some.
                    tracing::warn!(error = %e, "accepting a connection failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        // Reap finished connection tasks, so the set holds only open ones.
        while tasks.try_join_next().is_some() {}
        let Some((id, conn)) = registry.admit(limits.max_connections) else {
            if refused_logged.elapsed() > Duration::from_secs(10) {
                tracing::warn!(max = limits.max_connections, "every connection is busy: refusing new ones");
                refused_logged = Instant::now();
            }
            drop(stream);
            continue;
        };
        let _ = stream.set_nodelay(true);
        let io = TokioIo::new(Watched { stream, conn: conn.clone(), registry: registry.clone() });
        let service = ConnService { app: app.clone(), peer, conn: conn.clone(), registry: registry.clone() };
        let builder = builder.clone();
        let registry = registry.clone();
        let mut stop = stop_rx.clone();
        let (idle_timeout, header_timeout) = (limits.idle_timeout, limits.header_timeout);
        let grace = limits.request_timeout + limits.header_timeout;
        tasks.spawn(async move {
            let connection = builder.serve_connection(io, service);
            tokio::pin!(connection);
            let tick = (idle_timeout.min(header_timeout) / 4).clamp(Duration::from_millis(50), Duration::from_secs(1));
            let mut ticks = tokio::time::interval(tick);
            ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            let mut stopping: Option<Instant> = None;
            loop {
                tokio::select! {
                    _ = connection.as_mut() => break,
                    () = conn.close.notified() => break,
                    _ = stop.changed(), if stopping.is_none() => {
                        connection.as_mut().graceful_shutdown();
                        stopping = Some(Instant::now());
                    }
                    _ = ticks.tick() => {
                        if stopping.is_some_and(|at| at.elapsed() > grace) {
                            break;
                        }
                        if conn.has_waited_too_long(registry.now_ms(), idle_timeout, header_timeout) {
                            break;
                        }
                    }
                }
            }
            registry.remove(id);
        });
    }
    drop(listener);
    let _ = stop_tx.send(true);
    while tasks.join_next().await.is_some() {}
    Ok(())
}

/// The router for one connection: adds the peer's address and counts the request as in progress.
#[derive(Clone)]
struct ConnService {
    app: Router,
    peer: SocketAddr,
    conn: Arc<Conn>,
    registry: Arc<Registry>,
}

impl hyper::service::Service<Request<Incoming>> for ConnService {
    type Response = axum::response::Response;
    type Error = Infallible;
    type Future = Pin<Box<dyn std::future::Future<Output = Result<Self::Response, Infallible>> + Send>>;

    fn call(&self, mut request: Request<Incoming>) -> Self::Future {
        request.extensions_mut().insert(ConnectInfo(self.peer));
        let busy = Busy::enter(&self.conn, &self.registry);
        let mut app = self.app.clone();
        Box::pin(async move {
            let response = app.call(request.map(axum::body::Body::new)).await;
            drop(busy);
            response
        })
    }
}
