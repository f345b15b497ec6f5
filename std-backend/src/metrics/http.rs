//! The HTTP endpoint Prometheus scrapes: `GET /metrics` on a thread of its
//! own, answered from the snapshots the serving thread offers. One request
//! per connection (`Connection: close`), every read and write bounded by a
//! timeout, so a slow or hostile client holds the thread a few seconds at
//! most and never reaches the module.

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::{Observed, Snapshot, render};

/// The content type of the answer: the OpenMetrics text format, which
/// Prometheus reads natively.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// How old a snapshot may grow while its module is served: offered this
/// often even when nobody scrapes, so an idle module's last figures are
/// recent.
const REFRESH: Duration = Duration::from_secs(1);
/// How long a scrape waits for the serving thread to offer a fresh
/// snapshot before it answers with the last one.
const FRESH_WAIT: Duration = Duration::from_millis(250);
/// Calls to [`MetricsServer::offer`] between two looks at the clock.
const CLOCK_EVERY: u32 = 64;
/// The largest request read; more is refused.
const MAX_REQUEST: usize = 8 * 1024;
/// How long a client may take to send its request or read the answer.
const CLIENT_TIMEOUT: Duration = Duration::from_secs(2);

/// What the serving thread and the HTTP thread share.
#[derive(Debug, Default)]
struct Exchange {
    /// A scrape waits for a fresh snapshot.
    wanted: AtomicBool,
    stop: AtomicBool,
    latest: Mutex<Published>,
    fresh: Condvar,
}

/// The snapshots last offered, and how many offers there have been.
#[derive(Debug, Default)]
struct Published {
    snapshots: Vec<Snapshot>,
    generation: u64,
}

impl Exchange {
    fn latest(&self) -> MutexGuard<'_, Published> {
        self.latest.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// A process's metrics endpoint: `GET /metrics` at [`local_addr`](Self::local_addr),
/// for as long as it lives. The thread that serves the modules calls
/// [`offer`](Self::offer) each turn of its loop; a call costs an atomic
/// load unless a scrape waits or the last snapshot is a second old.
#[derive(Debug)]
pub struct MetricsServer {
    exchange: Arc<Exchange>,
    addr: SocketAddr,
    thread: Option<JoinHandle<()>>,
    calls: u32,
    offered_at: Option<Instant>,
}

impl MetricsServer {
    /// Most peers per module with series of their own; the rest are
    /// summed under `peer="other"`.
    pub const fn peer_series() -> usize {
        64
    }

    /// Listens at `addr` (`127.0.0.1:9464`, or port 0 for any) and answers
    /// scrapes from a thread of its own. An address other than loopback
    /// makes the metrics readable to whoever reaches it: they name the
    /// job's processes and their traffic, no secrets.
    pub fn start(addr: impl ToSocketAddrs) -> io::Result<MetricsServer> {
        let listener = TcpListener::bind(addr)?;
        let addr = listener.local_addr()?;
        let exchange = Arc::new(Exchange::default());
        let shared = Arc::clone(&exchange);
        let thread = std::thread::Builder::new()
            .name("btl-metrics".into())
            .spawn(move || answer_scrapes(&listener, &shared))?;
        Ok(MetricsServer {
            exchange,
            addr,
            thread: Some(thread),
            calls: 0,
            offered_at: None,
        })
    }

    /// Where it listens.
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// Takes a snapshot of `source` if a scrape waits for one or the last
    /// is older than a second; otherwise returns at once.
    pub fn offer(&mut self, source: &impl Observed) {
        self.calls = self.calls.wrapping_add(1);
        let wanted = self.exchange.wanted.load(Ordering::Relaxed);
        if !wanted {
            if !self.calls.is_multiple_of(CLOCK_EVERY) && self.offered_at.is_some() {
                return;
            }
            if self.offered_at.is_some_and(|at| at.elapsed() < REFRESH) {
                return;
            }
        }
        self.publish(source);
    }

    /// Takes a snapshot of `source` now, for the next scrape.
    pub fn publish(&mut self, source: &impl Observed) {
        let mut snapshots = Vec::new();
        source.snapshots(&mut snapshots);
        self.offered_at = Some(Instant::now());
        let mut latest = self.exchange.latest();
        latest.snapshots = snapshots;
        latest.generation += 1;
        self.exchange.wanted.store(false, Ordering::Relaxed);
        self.exchange.fresh.notify_all();
    }
}

impl Drop for MetricsServer {
    fn drop(&mut self) {
        self.exchange.stop.store(true, Ordering::Relaxed);
        // Wakes the accept; the thread sees `stop` and ends.
        let _ = TcpStream::connect_timeout(&self.addr, Duration::from_secs(1));
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// The HTTP thread: one connection at a time, until told to stop.
fn answer_scrapes(listener: &TcpListener, exchange: &Exchange) {
    for conn in listener.incoming() {
        if exchange.stop.load(Ordering::Relaxed) {
            return;
        }
        let Ok(conn) = conn else { continue };
        if let Err(e) = answer(conn, exchange) {
            tracing::debug!("metrics: a scrape failed: {e}");
        }
    }
}

/// Reads one request from `conn` and answers it.
fn answer(mut conn: TcpStream, exchange: &Exchange) -> io::Result<()> {
    conn.set_read_timeout(Some(CLIENT_TIMEOUT))?;
    conn.set_write_timeout(Some(CLIENT_TIMEOUT))?;
    let mut request = Vec::with_capacity(512);
    let mut buf = [0u8; 1024];
    while !request.windows(4).any(|w| w == b"\r\n\r\n") {
        if request.len() > MAX_REQUEST {
            return respond(
                &mut conn,
                "431 Request Header Fields Too Large",
                "text/plain",
                b"",
            );
        }
        let n = conn.read(&mut buf)?;
        if n == 0 {
            return Ok(());
        }
        request.extend_from_slice(&buf[..n]);
    }
    let line = request.split(|&b| b == b'\r').next().unwrap_or_default();
    let mut words = line.split(|&b| b == b' ');
    let (method, path) = (
        words.next().unwrap_or_default(),
        words.next().unwrap_or_default(),
    );
    if method != b"GET" {
        return respond(
            &mut conn,
            "405 Method Not Allowed",
            "text/plain",
            b"GET only\n",
        );
    }
    if path != b"/metrics" {
        return respond(
            &mut conn,
            "404 Not Found",
            "text/plain",
            b"metrics are at /metrics\n",
        );
    }
    let body = render(&fresh_snapshots(exchange), MetricsServer::peer_series());
    respond(&mut conn, "200 OK", CONTENT_TYPE, body.as_bytes())
}

/// Asks the serving thread for a snapshot and waits a moment for it; the
/// freshest there is.
fn fresh_snapshots(exchange: &Exchange) -> Vec<Snapshot> {
    let latest = exchange.latest();
    let seen = latest.generation;
    exchange.wanted.store(true, Ordering::Relaxed);
    let (latest, _) = exchange
        .fresh
        .wait_timeout_while(latest, FRESH_WAIT, |p| p.generation == seen)
        .unwrap_or_else(|e| e.into_inner());
    latest.snapshots.clone()
}

fn respond(conn: &mut TcpStream, status: &str, content_type: &str, body: &[u8]) -> io::Result<()> {
    let head = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    conn.write_all(head.as_bytes())?;
    conn.write_all(body)?;
    conn.flush()
}
