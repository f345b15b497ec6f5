//! Two processes on loopback. The server answers requests from a progress
//! thread; three clients (threads of the other process, a module each)
//! send a thousand tagged requests each, 256 outstanding at a time, and
//! the first then puts 4 MiB into a buffer the server lent it, which the
//! server checks byte for byte.
//!
//! Run it with `cargo run -p btl-std --example request_reply`.

use std::collections::{HashMap, VecDeque};
use std::error::Error;
use std::path::Path;
use std::process::Command;
use std::sync::mpsc;
use std::time::Duration;

use btl_std::{
    Access, Btl, BtlError, EndpointId, ErrorEvent, Event, ModuleBuilder, ProcName, ProgressThread,
    RemoteKey, Tag,
};

const SERVER: ProcName = ProcName::new(1, 0);
const CLIENTS: u32 = 3;
const REQUEST: Tag = Tag(0x80);
const REPLY: Tag = Tag(0x81);
const KEY: Tag = Tag(0x82);
const CHECKED: Tag = Tag(0x83);
const REQUESTS: u32 = 1000;
/// Requests a client keeps outstanding: more than the module holds for
/// one peer, so the server keeps the replies it has no room for.
const WINDOW: u32 = 256;
const BULK: usize = 4 << 20;
const TIMEOUT: Duration = Duration::from_secs(20);

type Result<T = ()> = std::result::Result<T, Box<dyn Error>>;

fn main() -> Result {
    if let [_, serve, dir] = &std::env::args().collect::<Vec<_>>()[..]
        && serve == "serve"
    {
        return server(Path::new(dir));
    }
    let dir = std::env::temp_dir().join(format!("btl-example-{}", std::process::id()));
    let mut server = Command::new(std::env::current_exe()?)
        .arg("serve")
        .arg(&dir)
        .spawn()?;
    let outcome = std::thread::scope(|scope| {
        let clients: Vec<_> = (1..=CLIENTS)
            .map(|rank| {
                let dir = &dir;
                scope.spawn(move || client(dir, ProcName::new(1, rank)).map_err(|e| e.to_string()))
            })
            .collect();
        clients
            .into_iter()
            .try_for_each(|c| c.join().unwrap_or_else(|_| Err("a client panicked".into())))
    });
    let status = server.wait()?;
    let _ = std::fs::remove_dir_all(&dir);
    outcome?;
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

/// Byte `i` of what the client puts.
fn pattern(i: usize) -> u8 {
    (i % 251) as u8
}

// ANCHOR: server
fn server(dir: &Path) -> Result {
    let mut module = ModuleBuilder::new(SERVER)
        .shared_dir(dir)
        .on_loopback()
        .tcp()?;
    // The module keeps the buffer until it is deregistered (or dropped).
    let lent = module.register_mem(vec![0u8; BULK], Access::REMOTE_WRITE)?;
    // Each client that leaves (or is lost) says so here.
    let (left, gone) = mpsc::channel();
    // Replies the module had no room for yet, per client, in order.
    let mut owed: HashMap<EndpointId, VecDeque<(Tag, Vec<u8>)>> = HashMap::new();
    let thread = ProgressThread::spawn(module, move |served, event| {
        let reply = match event {
            // A reply goes to the sender, `m.from`.
            Event::Received(m) if m.tag == REQUEST => (m.from, REPLY, m.data.to_vec()),
            Event::Received(m) if m.tag == KEY => {
                (m.from, KEY, lent.remote_key().to_bytes().to_vec())
            }
            // The client's put has landed: check it where it lies.
            Event::PutArrived { from, slice, .. } => {
                let intact = served.with(|btl| {
                    btl.region(slice.handle)
                        .is_ok_and(|b| b.iter().enumerate().all(|(i, &x)| x == pattern(i)))
                });
                (from, CHECKED, vec![u8::from(intact)])
            }
            // The module has room again for a client it refused: what it
            // is owed goes now.
            Event::Room { endpoint } => {
                return served.with(|btl| send_owed(btl, endpoint, &mut owed));
            }
            // A client gone is owed nothing more.
            Event::PeerLeft { endpoint }
            | Event::Error(ErrorEvent {
                endpoint: Some(endpoint),
                ..
            }) => {
                owed.remove(&endpoint);
                let _ = left.send(endpoint);
                return;
            }
            _ => return,
        };
        owed.entry(reply.0)
            .or_default()
            .push_back((reply.1, reply.2));
        served.with(|btl| send_owed(btl, reply.0, &mut owed));
    })?;
    // Served until every client has left: each leaves once it has all its
    // replies (and the first, its put checked).
    for _ in 0..CLIENTS {
        gone.recv_timeout(TIMEOUT)?;
    }
    thread.flush(TIMEOUT)?;
    thread.stop()?;
    Ok(())
}

/// Sends what `to` is owed, in order, until the module has no room
/// (`OutOfResource`: an `Event::Room` for `to` follows) or all is sent.
fn send_owed(
    btl: &mut impl Btl,
    to: EndpointId,
    owed: &mut HashMap<EndpointId, VecDeque<(Tag, Vec<u8>)>>,
) {
    let Some(queue) = owed.get_mut(&to) else {
        return;
    };
    while let Some((tag, data)) = queue.front() {
        match btl.send_copy(to, *tag, data) {
            Ok(()) => drop(queue.pop_front()),
            Err(BtlError::OutOfResource) => return,
            Err(e) => {
                // The client is lost (its Error event says so): nothing
                // more reaches it.
                eprintln!("server: a reply to {to:?} failed: {e}");
                owed.remove(&to);
                return;
            }
        }
    }
}
// ANCHOR_END: server

// ANCHOR: client
fn client(dir: &Path, me: ProcName) -> Result {
    let mut btl = ModuleBuilder::new(me).shared_dir(dir).on_loopback().tcp()?;
    let server = btl.reach(SERVER, TIMEOUT)?;
    let (mut sent, mut answered, mut sum) = (0u32, 0u32, 0u64);
    while answered < REQUESTS {
        // Backpressure: at most WINDOW outstanding, and OutOfResource
        // (the module has no room now) means: take replies first.
        while sent < REQUESTS && sent - answered < WINDOW {
            match btl.send_copy(server, REQUEST, &sent.to_le_bytes()) {
                Ok(()) => sent += 1,
                Err(BtlError::OutOfResource) => break,
                Err(e) => return Err(e.into()),
            }
        }
        let n = btl.wait_for(TIMEOUT, |e| match e {
            Event::Received(m) if m.tag == REPLY => {
                Some(u32::from_le_bytes(m.data.try_into().ok()?))
            }
            _ => None,
        })?;
        (answered, sum) = (answered + 1, sum + u64::from(n));
    }
    if sum != u64::from(REQUESTS) * u64::from(REQUESTS - 1) / 2 {
        return Err("the replies do not answer the requests".into());
    }
    // ANCHOR_END: client
    if me.rank != 1 {
        return Ok(());
    }
    // ANCHOR: put
    // 4 MiB into the server's buffer, named by the key it sends.
    btl.send_copy(server, KEY, &[])?;
    let key = btl.wait_for(TIMEOUT, |e| match e {
        Event::Received(m) if m.tag == KEY => RemoteKey::from_bytes(m.data),
        _ => None,
    })?;
    let data = btl.register_mem((0..BULK).map(pattern).collect(), Access::empty())?;
    let len = BULK as u64;
    btl.put_notify(server, data.slice(0, len), key.slice(0, len), 0, 0)?;
    let intact = btl.wait_for(TIMEOUT, |e| match e {
        Event::Received(m) if m.tag == CHECKED => Some(m.data == [1]),
        _ => None,
    })?;
    if !intact {
        return Err("the server found the put's bytes changed".into());
    }
    Ok(())
}
// ANCHOR_END: put
