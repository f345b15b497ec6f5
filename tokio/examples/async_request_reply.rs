//! The request/reply program of btl-std's example, written for a tokio
//! service with nothing but the async [`Endpoint`](btl_tokio::Endpoint):
//! two processes on loopback. The server answers tagged requests from one
//! task; three clients (tasks of the other process, an endpoint each) send
//! a thousand requests each, 256 outstanding at a time, and the first then
//! puts 4 MiB into a buffer the server lent it, which the server checks
//! byte for byte once the put's notice arrives.
//!
//! Run it with `cargo run -p btl-tokio --example async_request_reply` (a
//! name of its own: the examples of a workspace share one directory).

use std::error::Error;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::time::Duration;

use btl_tokio::{
    Access, Bytes, Message, ModuleBuilder, PeerEvent, ProcName, RemoteKey, Tag, TcpEndpoint,
};
use tokio::task::JoinSet;
use tokio::time::timeout;

const SERVER: ProcName = ProcName::new(1, 0);
const CLIENTS: u32 = 3;
const REQUEST: Tag = Tag(0x80);
const REPLY: Tag = Tag(0x81);
const KEY: Tag = Tag(0x82);
const CHECKED: Tag = Tag(0x83);
const REQUESTS: u32 = 1000;
/// Requests a client keeps outstanding: more than the module holds for
/// one peer, so the server's replies wait for room.
const WINDOW: u32 = 256;
const BULK: usize = 4 << 20;
/// The longest any one wait may take before the program gives up.
const TIMEOUT: Duration = Duration::from_secs(20);

/// Errors of every kind, movable between tasks.
type Result<T = ()> = std::result::Result<T, Box<dyn Error + Send + Sync>>;

#[tokio::main]
async fn main() -> Result {
    if let [_, serve, dir] = &std::env::args().collect::<Vec<_>>()[..]
        && serve == "serve"
    {
        return server(Path::new(dir))
            .await
            .map_err(|e| format!("the server: {e}").into());
    }
    let dir = std::env::temp_dir().join(format!("btl-tokio-example-{}", std::process::id()));
    let server = Server(
        std::process::Command::new(std::env::current_exe()?)
            .arg("serve")
            .arg(&dir)
            .spawn()?,
    );
    let clients: Vec<_> = (1..=CLIENTS)
        .map(|rank| tokio::spawn(client(dir.clone(), ProcName::new(1, rank))))
        .collect();
    let mut failed = Vec::new();
    for (rank, c) in (1..).zip(clients) {
        if let Err(e) = c.await.unwrap_or_else(|e| Err(e.into())) {
            failed.push(format!("client {rank}: {e}"));
        }
    }
    let status = timeout(TIMEOUT, server.exit()).await;
    let _ = std::fs::remove_dir_all(&dir);
    if !failed.is_empty() {
        return Err(failed.join("; ").into());
    }
    let status = status.map_err(|_| "the server did not end")??;
    if !status.success() {
        return Err(format!("the server failed: {status}").into());
    }
    println!(
        "{} requests answered, {WINDOW} outstanding per client; {} MiB put and checked",
        CLIENTS * REQUESTS,
        BULK >> 20
    );
    Ok(())
}

/// The server's process, killed if this one gives up on it.
struct Server(std::process::Child);

impl Server {
    /// Its exit status, once it exits.
    async fn exit(mut self) -> std::io::Result<std::process::ExitStatus> {
        loop {
            if let Some(status) = self.0.try_wait()? {
                return Ok(status);
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if matches!(self.0.try_wait(), Ok(None)) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}

/// Byte `i` of what the client puts.
fn pattern(i: usize) -> u8 {
    (i % 251) as u8
}

/// `op`, given up after [`TIMEOUT`].
async fn bounded<T, E>(op: impl Future<Output = std::result::Result<T, E>>) -> Result<T>
where
    E: Error + Send + Sync + 'static,
{
    Ok(timeout(TIMEOUT, op).await??)
}

/// What `next` (an inbox's `recv`) delivers, waited for up to
/// [`TIMEOUT`]; an error if the endpoint stopped first.
async fn within<X>(next: impl Future<Output = Option<X>>) -> Result<X> {
    Ok(timeout(TIMEOUT, next)
        .await?
        .ok_or("the endpoint stopped")?)
}

// ANCHOR: server
/// Answers every client until each has left, then closes.
async fn server(dir: &Path) -> Result {
    let endpoint = TcpEndpoint::tcp(ModuleBuilder::new(SERVER).shared_dir(dir).on_loopback())?;
    // The endpoint keeps the buffer until it is reclaimed.
    let lent = endpoint.lend(vec![0u8; BULK], Access::REMOTE_WRITE)?;
    let mut requests = endpoint.receiver(REQUEST..=CHECKED, 64)?;
    let mut arrivals = endpoint.arrivals(1);
    let mut peers = endpoint.peer_events(CLIENTS as usize);
    // Each reply is a task of its own: it waits for room to its client
    // and for the client's acknowledgement while this loop goes on.
    let mut replies = JoinSet::new();
    let mut left = 0;
    while left < CLIENTS {
        tokio::select! {
            Some(m) = requests.recv() => {
                // A reply goes to the sender, `m.from`.
                let (tag, reply) = match m.tag {
                    REQUEST => (REPLY, m.data),
                    KEY => (KEY, Bytes::copy_from_slice(&lent.remote_key().to_bytes())),
                    // Not a request: nothing to answer.
                    _ => continue,
                };
                replies.spawn(endpoint.send(m.from, tag, reply));
            }
            // The client's put has landed. Its bytes are copied out of the
            // lent buffer and checked outside `with_lent`, which holds the
            // driver back while it runs.
            Some(put) = arrivals.recv() => {
                let (offset, len) = (put.slice.offset as usize, put.slice.len as usize);
                let landed = endpoint.with_lent(&lent, |b| b[offset..offset + len].to_vec())?;
                let intact = len == BULK && landed.iter().enumerate().all(|(i, &x)| x == pattern(i));
                replies.spawn(endpoint.send(put.from, CHECKED, [u8::from(intact)]));
            }
            // Each client says goodbye once it has all it asked for.
            Some(event) = peers.recv() => match event {
                PeerEvent::Left(_) => left += 1,
                PeerEvent::Lost(client, why) => {
                    return Err(format!("client {client:?} was lost: {why}").into());
                }
            },
            Some(sent) = replies.join_next() => sent??,
            // Nothing for that long: the clients are gone without a word.
            () = tokio::time::sleep(TIMEOUT) => return Err("no client spoke for 20 s".into()),
        }
    }
    while let Some(sent) = timeout(TIMEOUT, replies.join_next()).await? {
        sent??;
    }
    // No client reaches the buffer any more: it is the server's again.
    bounded(endpoint.reclaim(lent)).await?;
    // Waits until every reply is acknowledged, then says goodbye.
    bounded(endpoint.close()).await
}
// ANCHOR_END: server

/// The bytes of the message `next` (an inbox's `recv`) delivers, which
/// must have `tag`.
async fn expect(next: impl Future<Output = Option<Message>>, tag: Tag) -> Result<Bytes> {
    let m = within(next).await?;
    if m.tag != tag {
        return Err(format!("tag {:#x} where {:#x} was expected", m.tag.0, tag.0).into());
    }
    Ok(m.data)
}

// ANCHOR: client
/// Client `me`: a thousand requests, `WINDOW` outstanding; the first
/// client then puts `BULK` bytes into the server's buffer.
async fn client(dir: PathBuf, me: ProcName) -> Result {
    let endpoint = TcpEndpoint::tcp(ModuleBuilder::new(me).shared_dir(&dir).on_loopback())?;
    // Room for a window of replies: the server's sends wait beyond it.
    let mut replies = endpoint.receiver(REQUEST..=CHECKED, WINDOW as usize)?;
    let server = endpoint.reach(SERVER, TIMEOUT).await?;
    // A send completes once the server acknowledged it: the window's
    // sends are tasks of their own while this one reads the replies.
    let mut sends = JoinSet::new();
    let (mut sent, mut answered, mut sum) = (0u32, 0u32, 0u64);
    while answered < REQUESTS {
        while sent < REQUESTS && sent - answered < WINDOW {
            sends.spawn(endpoint.send(server, REQUEST, sent.to_le_bytes()));
            sent += 1;
        }
        tokio::select! {
            Some(acked) = sends.join_next() => acked??,
            reply = expect(replies.recv(), REPLY) => {
                let n = u32::from_le_bytes(reply?[..].try_into().map_err(|_| "a short reply")?);
                (answered, sum) = (answered + 1, sum + u64::from(n));
            }
        }
    }
    while let Some(acked) = timeout(TIMEOUT, sends.join_next()).await? {
        acked??;
    }
    if sum != u64::from(REQUESTS) * u64::from(REQUESTS - 1) / 2 {
        return Err("the replies do not answer the requests".into());
    }
    // ANCHOR_END: client
    if me.rank != 1 {
        return bounded(endpoint.close()).await;
    }
    // ANCHOR: put
    // 4 MiB into the server's buffer, named by the key it sends.
    bounded(endpoint.send(server, KEY, [])).await?;
    let key = expect(replies.recv(), KEY).await?;
    let key = RemoteKey::from_bytes(&key).ok_or("a key is 8 bytes")?;
    let data: Vec<u8> = (0..BULK).map(pattern).collect();
    let remote = key.slice(0, BULK as u64);
    // The buffer comes back once the bytes are in the server's memory.
    bounded(endpoint.put_notify(server, data, remote, 0)).await?;
    if expect(replies.recv(), CHECKED).await?[..] != [1] {
        return Err("the server found the put's bytes changed".into());
    }
    // ANCHOR_END: put
    // ANCHOR: close
    // Waits until the server acknowledged everything, then says goodbye:
    // the server's `peer_events` tell it this client left.
    bounded(endpoint.close()).await
    // ANCHOR_END: close
}
