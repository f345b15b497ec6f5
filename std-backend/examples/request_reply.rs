//! Two processes on loopback. The server answers requests from a progress
//! thread; the client sends a thousand tagged requests, then puts 4 MiB
//! into a buffer the server lent it, which the server checks byte for byte.
//!
//! Run it with `cargo run -p btl-std --example request_reply`.

use std::error::Error;
use std::path::Path;
use std::process::Command;
use std::sync::mpsc;
use std::time::Duration;

use btl_std::{
    Access, Btl, BtlError, Event, ModuleBuilder, ProcName, ProgressThread, RemoteKey, Tag,
};

const SERVER: ProcName = ProcName::new(1, 0);
const CLIENT: ProcName = ProcName::new(1, 1);
const REQUEST: Tag = Tag(0x80);
const REPLY: Tag = Tag(0x81);
const KEY: Tag = Tag(0x82);
const CHECKED: Tag = Tag(0x83);
const REQUESTS: u32 = 1000;
/// Requests the client keeps outstanding: the server never owes more.
const WINDOW: u32 = 16;
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
    let outcome = client(&dir);
    let status = server.wait()?;
    let _ = std::fs::remove_dir_all(&dir);
    outcome?;
    if !status.success() {
        return Err(format!("the server failed: {status}").into());
    }
    println!(
        "{REQUESTS} requests answered; {} MiB put and checked",
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
    let (checked, done) = mpsc::channel();
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
                let _ = checked.send(());
                (from, CHECKED, vec![u8::from(intact)])
            }
            _ => return,
        };
        if let Err(e) = served.with(|btl| btl.send_copy(reply.0, reply.1, &reply.2)) {
            eprintln!("server: a reply was refused: {e}");
        }
    })?;
    done.recv_timeout(TIMEOUT)?;
    // The last reply is acknowledged before the process ends; the thread
    // serves meanwhile, so a client still sending is taken from.
    thread.flush(TIMEOUT)?;
    thread.stop()?;
    Ok(())
}
// ANCHOR_END: server

// ANCHOR: client
fn client(dir: &Path) -> Result {
    let mut btl = ModuleBuilder::new(CLIENT)
        .shared_dir(dir)
        .on_loopback()
        .tcp()?;
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
