//! The async face against the polling module, and against a tokio
//! `TcpStream` written the obvious way: two processes on loopback, each
//! pinned to its own core, the faces interleaved in every round.
//!
//! `cargo bench -p btl-tokio --bench async_face [-- --rounds N --quick]`
//! (`--face polling|async|tcpstream` measures one face alone, to profile
//! it).
//!
//! Measured for each face: the one-way latency of a ping-pong (median of
//! its round trips, halved) from 1 B to the module's largest send
//! (256 KiB over TCP), the bandwidth of windows of messages from 64 KiB
//! up, and of puts from 1 to 4 MiB (a stream's writes for `TcpStream`),
//! and the rate of 8-byte messages in windows of 64. Each window ends when
//! the receiving program has taken all of it and said so. The table gives
//! the median of the rounds, and each face's ratio to the polling module.

use std::future::Future;
use std::io;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use btl_std::{Access, Btl, BtlError, EndpointId, Event, ModuleBuilder, ProcName, RemoteKey, Tag};
use btl_tokio::{Receiver, RemoteSlice, TcpEndpoint};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Sizes of the ping-pong.
const LATENCY_SIZES: &[usize] = &[1, 8, 64, 1024, 4096, 16 << 10, 64 << 10, 256 << 10];
/// Sizes of windows of messages.
const SEND_BW_SIZES: &[usize] = &[64 << 10, 256 << 10];
/// Sizes of windows of puts.
const PUT_BW_SIZES: &[usize] = &[1 << 20, 4 << 20];
/// Messages in flight in a bandwidth window.
const WINDOW: usize = 16;
/// Messages in flight in a rate window.
const RATE_WINDOW: usize = 64;

const PING: Tag = Tag(0x90);
const SINK: Tag = Tag(0x91);
const WINDOW_END: Tag = Tag(0x92);
const KEY: Tag = Tag(0x93);
const DONE: Tag = Tag(0x94);

const LEADER_CPU: usize = 0;
const FOLLOWER_CPU: usize = 1;
const PATIENCE: Duration = Duration::from_secs(30);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Face {
    /// btl-std's module, busy-polled by its caller.
    Polling,
    /// btl-tokio's endpoint on a current-thread runtime.
    Async,
    /// A tokio `TcpStream`: `write_all`, then `read_exact`.
    Stream,
}

impl Face {
    const ALL: [Face; 3] = [Face::Polling, Face::Async, Face::Stream];

    fn name(self) -> &'static str {
        match self {
            Face::Polling => "polling",
            Face::Async => "async",
            Face::Stream => "tcpstream",
        }
    }

    fn parse(s: &str) -> Face {
        Face::ALL
            .into_iter()
            .find(|f| f.name() == s)
            .expect("a face's name")
    }
}

/// What one run of a face measured.
#[derive(Debug, Default, Clone)]
struct Figures {
    /// (size, one-way latency in µs)
    latency: Vec<(usize, f64)>,
    /// (size, GB/s)
    bandwidth: Vec<(usize, f64)>,
    /// million messages a second
    rate: f64,
}

/// What the run is given: how much to measure.
#[derive(Debug, Clone, Copy)]
struct Budget {
    quick: bool,
}

impl Budget {
    fn pingpongs(self, size: usize) -> usize {
        let n = ((32 << 20) / size.max(1)).clamp(100, 5000);
        if self.quick { n / 10 } else { n }
    }

    fn windows(self, size: usize) -> usize {
        let n = ((512 << 20) / (size * WINDOW)).clamp(8, 200);
        if self.quick { n.div_ceil(8) } else { n }
    }

    fn rate_windows(self) -> usize {
        if self.quick { 300 } else { 3000 }
    }
}

fn pin(cpu: usize) {
    let mut set = rustix::thread::CpuSet::new();
    set.set(cpu);
    // Unpinned on a machine without that core: still measured.
    let _ = rustix::thread::sched_setaffinity(None, &set);
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    if let Some(i) = args.iter().position(|a| a == "--follower") {
        let face = Face::parse(&args[i + 1]);
        let dir = PathBuf::from(&args[i + 2]);
        let port: u16 = args[i + 3].parse()?;
        let budget = Budget {
            quick: args[i + 4] == "quick",
        };
        pin(FOLLOWER_CPU);
        return follower(face, &dir, port, budget);
    }
    let rounds = args
        .iter()
        .position(|a| a == "--rounds")
        .and_then(|i| args.get(i + 1))
        .map_or(Ok(3), |n| n.parse())?;
    let budget = Budget {
        quick: args.iter().any(|a| a == "--quick"),
    };
    // `cargo test --benches` runs it with no `--bench`: one quick round.
    let (rounds, budget) = if args.iter().any(|a| a == "--bench") {
        (rounds, budget)
    } else {
        (1, Budget { quick: true })
    };
    // `--face NAME` measures that face alone (to profile it).
    let faces: Vec<Face> = match args.iter().position(|a| a == "--face") {
        Some(i) => vec![Face::parse(args.get(i + 1).ok_or("--face NAME")?)],
        None => Face::ALL.to_vec(),
    };
    pin(LEADER_CPU);
    let mut all: Vec<(Face, Figures)> = Vec::new();
    for round in 0..rounds {
        for &face in &faces {
            let figures = leader(face, budget, round)?;
            eprintln!("round {round} {}: {figures:?}", face.name());
            all.push((face, figures));
        }
    }
    if faces.len() == Face::ALL.len() {
        report(&all);
    }
    Ok(())
}

/// Starts the follower of `face` and measures against it.
fn leader(face: Face, budget: Budget, round: usize) -> Result<Figures, Box<dyn std::error::Error>> {
    let dir = std::env::temp_dir().join(format!(
        "btl-async-face-{}-{round}-{}",
        std::process::id(),
        face.name()
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir)?;
    let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
    let port = listener.local_addr()?.port();
    let mut child = Command::new(std::env::current_exe()?)
        .args(["--follower", face.name()])
        .arg(&dir)
        .arg(port.to_string())
        .arg(if budget.quick { "quick" } else { "full" })
        .stdin(Stdio::null())
        .spawn()?;
    let figures = match face {
        Face::Polling => polling_leader(&dir, budget),
        Face::Async => runtime().block_on(async_leader(&dir, budget)),
        Face::Stream => runtime().block_on(stream_leader(listener, budget)),
    };
    let status = wait_bounded(&mut child)?;
    let _ = std::fs::remove_dir_all(&dir);
    let figures = figures?;
    if !status.success() {
        return Err(format!("the {} follower failed: {status}", face.name()).into());
    }
    Ok(figures)
}

fn wait_bounded(child: &mut Child) -> io::Result<std::process::ExitStatus> {
    let start = Instant::now();
    loop {
        if let Some(status) = child.try_wait()? {
            return Ok(status);
        }
        if start.elapsed() > PATIENCE {
            let _ = child.kill();
            return child.wait();
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime")
}

fn follower(
    face: Face,
    dir: &Path,
    port: u16,
    budget: Budget,
) -> Result<(), Box<dyn std::error::Error>> {
    match face {
        Face::Polling => polling_follower(dir),
        Face::Async => runtime().block_on(async_follower(dir)),
        Face::Stream => runtime().block_on(stream_follower(port, budget)),
    }
}

const LEADER: ProcName = ProcName::new(77, 0);
const FOLLOWER: ProcName = ProcName::new(77, 1);

fn builder(me: ProcName, dir: &Path) -> ModuleBuilder {
    ModuleBuilder::new(me)
        .shared_dir(dir)
        .on_loopback()
        .ignore_environment()
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn pattern(len: usize) -> Vec<u8> {
    (0..len).map(|i| (i % 251) as u8).collect()
}

// --- the polling module ---

/// Sends until the module takes it, progressing meanwhile.
fn send_polling(m: &mut btl_std::TcpModule, to: EndpointId, tag: Tag, data: &[u8]) {
    loop {
        match m.send_copy(to, tag, data) {
            Ok(()) => return,
            Err(BtlError::OutOfResource) => {
                m.progress();
                // Events are left for the caller's loop, but a full queue
                // must drain: the caller's waits take them.
            }
            Err(e) => panic!("send: {e}"),
        }
    }
}

/// Busy-polls until `take` takes an event.
fn wait_polling<R>(m: &mut btl_std::TcpModule, mut take: impl FnMut(Event<'_>) -> Option<R>) -> R {
    let start = Instant::now();
    loop {
        m.progress();
        while let Some(e) = m.poll_event() {
            if let Some(r) = take(e) {
                return r;
            }
        }
        assert!(start.elapsed() < PATIENCE, "nothing came");
    }
}

fn polling_leader(dir: &Path, budget: Budget) -> Result<Figures, Box<dyn std::error::Error>> {
    let mut m = builder(LEADER, dir).tcp()?;
    let peer = m.reach(FOLLOWER, PATIENCE)?;
    let key = wait_polling(&mut m, |e| match e {
        Event::Received(msg) if msg.tag == KEY => RemoteKey::from_bytes(msg.data),
        _ => None,
    });
    let mut figures = Figures::default();
    for &size in LATENCY_SIZES {
        let data = pattern(size);
        let mut rts = Vec::new();
        for _ in 0..budget.pingpongs(size) {
            let t = Instant::now();
            send_polling(&mut m, peer, PING, &data);
            wait_polling(&mut m, |e| {
                matches!(e, Event::Received(r) if r.tag == PING).then_some(())
            });
            rts.push(t.elapsed().as_secs_f64() * 1e6 / 2.0);
        }
        figures.latency.push((size, median(rts)));
    }
    for &size in SEND_BW_SIZES {
        let data = pattern(size);
        let windows = budget.windows(size);
        let t = Instant::now();
        for _ in 0..windows {
            for _ in 0..WINDOW {
                send_polling(&mut m, peer, SINK, &data);
            }
            send_polling(&mut m, peer, WINDOW_END, &[]);
            wait_polling(&mut m, |e| {
                matches!(e, Event::Received(r) if r.tag == WINDOW_END).then_some(())
            });
        }
        let bytes = (windows * WINDOW * size) as f64;
        figures
            .bandwidth
            .push((size, bytes / t.elapsed().as_secs_f64() / 1e9));
    }
    let max = *PUT_BW_SIZES.iter().max().unwrap_or(&0);
    let region = m.register_mem(pattern(max), Access::empty())?;
    for &size in PUT_BW_SIZES {
        let windows = budget.windows(size);
        let t = Instant::now();
        for _ in 0..windows {
            let mut posted = 0;
            let mut done = 0;
            while done < WINDOW {
                while posted < WINDOW {
                    let local = btl_std::MemSlice {
                        handle: region,
                        offset: 0,
                        len: size as u64,
                    };
                    let remote = RemoteSlice {
                        key,
                        offset: 0,
                        len: size as u64,
                    };
                    match m.put(peer, local, remote, 0) {
                        Ok(_) => posted += 1,
                        Err(BtlError::OutOfResource) => break,
                        Err(e) => panic!("put: {e}"),
                    }
                }
                wait_polling(&mut m, |e| match e {
                    Event::PutComplete { result, .. } => {
                        result.expect("a put");
                        Some(())
                    }
                    _ => None,
                });
                done += 1;
            }
        }
        let bytes = (windows * WINDOW * size) as f64;
        figures
            .bandwidth
            .push((size, bytes / t.elapsed().as_secs_f64() / 1e9));
    }
    let t = Instant::now();
    let windows = budget.rate_windows();
    for _ in 0..windows {
        for _ in 0..RATE_WINDOW {
            send_polling(&mut m, peer, SINK, &[7u8; 8]);
        }
        send_polling(&mut m, peer, WINDOW_END, &[]);
        wait_polling(&mut m, |e| {
            matches!(e, Event::Received(r) if r.tag == WINDOW_END).then_some(())
        });
    }
    figures.rate = (windows * RATE_WINDOW) as f64 / t.elapsed().as_secs_f64() / 1e6;
    send_polling(&mut m, peer, DONE, &[]);
    m.flush(PATIENCE)?;
    Ok(figures)
}

fn polling_follower(dir: &Path) -> Result<(), Box<dyn std::error::Error>> {
    let mut m = builder(FOLLOWER, dir).tcp()?;
    let lent = m.register_mem(vec![0u8; 4 << 20], Access::REMOTE_WRITE)?;
    let peer = m.reach(LEADER, PATIENCE)?;
    send_polling(&mut m, peer, KEY, &lent.remote_key().to_bytes());
    let mut echo = Vec::new();
    loop {
        let (tag, from) = wait_polling(&mut m, |e| match e {
            Event::Received(r) => {
                echo.clear();
                echo.extend_from_slice(r.data);
                Some((r.tag, r.from))
            }
            _ => None,
        });
        match tag {
            PING | WINDOW_END => send_polling(&mut m, from, tag, &echo),
            DONE => break,
            _ => {}
        }
    }
    m.flush(PATIENCE)?;
    Ok(())
}

// --- the async face ---

/// Awaits every future at once (each polled as it may progress), as a
/// service with many operations in flight does; their outputs in order.
async fn join_all<F: Future + Unpin>(mut futures: Vec<F>) -> Vec<F::Output> {
    let mut outputs: Vec<Option<F::Output>> = futures.iter().map(|_| None).collect();
    std::future::poll_fn(|cx| {
        let mut pending = false;
        for (f, out) in futures.iter_mut().zip(outputs.iter_mut()) {
            if out.is_none() {
                match std::pin::Pin::new(f).poll(cx) {
                    std::task::Poll::Ready(o) => *out = Some(o),
                    std::task::Poll::Pending => pending = true,
                }
            }
        }
        if pending {
            std::task::Poll::Pending
        } else {
            std::task::Poll::Ready(())
        }
    })
    .await;
    outputs.into_iter().flatten().collect()
}

async fn recv_tag(
    rx: &mut Receiver<btl_std::transports::tcp::Tcp<btl_tokio::TokioNet>>,
    tag: Tag,
) -> Vec<u8> {
    loop {
        let m = tokio::time::timeout(PATIENCE, rx.recv())
            .await
            .expect("nothing came")
            .expect("the endpoint ended");
        if m.tag == tag {
            return m.data.to_vec();
        }
    }
}

async fn async_leader(dir: &Path, budget: Budget) -> Result<Figures, Box<dyn std::error::Error>> {
    let ep = TcpEndpoint::tcp(builder(LEADER, dir))?;
    let mut rx = ep.receiver(PING..=DONE, 256)?;
    let peer = ep.reach(FOLLOWER, PATIENCE).await?;
    let key = RemoteKey::from_bytes(&recv_tag(&mut rx, KEY).await).ok_or("a key")?;
    let mut figures = Figures::default();
    for &size in LATENCY_SIZES {
        let data = pattern(size);
        let mut rts = Vec::new();
        for _ in 0..budget.pingpongs(size) {
            let t = Instant::now();
            ep.send(peer, PING, data.as_slice()).await?;
            recv_tag(&mut rx, PING).await;
            rts.push(t.elapsed().as_secs_f64() * 1e6 / 2.0);
        }
        figures.latency.push((size, median(rts)));
    }
    for &size in SEND_BW_SIZES {
        let data = pattern(size);
        let windows = budget.windows(size);
        let t = Instant::now();
        for _ in 0..windows {
            // Each send starts as it is called; the window ends when the
            // follower has read it all and said so.
            let sends: Vec<_> = (0..WINDOW)
                .map(|_| ep.send(peer, SINK, data.as_slice()))
                .collect();
            let end = ep.send(peer, WINDOW_END, &[][..]);
            recv_tag(&mut rx, WINDOW_END).await;
            for s in join_all(sends).await {
                s?;
            }
            end.await?;
        }
        let bytes = (windows * WINDOW * size) as f64;
        figures
            .bandwidth
            .push((size, bytes / t.elapsed().as_secs_f64() / 1e9));
    }
    for &size in PUT_BW_SIZES {
        // The window's buffers, handed to each put and back.
        let mut buffers: Vec<Vec<u8>> = (0..WINDOW).map(|_| pattern(size)).collect();
        let windows = budget.windows(size);
        let remote = RemoteSlice {
            key,
            offset: 0,
            len: size as u64,
        };
        let t = Instant::now();
        for _ in 0..windows {
            let puts = buffers.drain(..).map(|b| ep.put(peer, b, remote)).collect();
            for p in join_all(puts).await {
                buffers.push(p?);
            }
        }
        let bytes = (windows * WINDOW * size) as f64;
        figures
            .bandwidth
            .push((size, bytes / t.elapsed().as_secs_f64() / 1e9));
    }
    let t = Instant::now();
    let windows = budget.rate_windows();
    for _ in 0..windows {
        let sends: Vec<_> = (0..RATE_WINDOW)
            .map(|_| ep.send(peer, SINK, [7u8; 8]))
            .collect();
        let end = ep.send(peer, WINDOW_END, &[][..]);
        recv_tag(&mut rx, WINDOW_END).await;
        for s in join_all(sends).await {
            s?;
        }
        end.await?;
    }
    figures.rate = (windows * RATE_WINDOW) as f64 / t.elapsed().as_secs_f64() / 1e6;
    ep.send(peer, DONE, &[][..]).await?;
    ep.close().await?;
    Ok(figures)
}

async fn async_follower(dir: &Path) -> Result<(), Box<dyn std::error::Error>> {
    let ep = TcpEndpoint::tcp(builder(FOLLOWER, dir))?;
    let mut rx = ep.receiver(PING..=DONE, 256)?;
    let lent = ep.lend(vec![0u8; 4 << 20], Access::REMOTE_WRITE)?;
    let peer = ep.reach(LEADER, PATIENCE).await?;
    ep.send(peer, KEY, lent.remote_key().to_bytes()).await?;
    while let Some(m) = rx.recv().await {
        match m.tag {
            PING | WINDOW_END => ep.send(m.from, m.tag, m.data).await?,
            DONE => break,
            _ => {}
        }
    }
    ep.close().await?;
    Ok(())
}

// --- a tokio TcpStream ---

async fn stream_leader(
    listener: std::net::TcpListener,
    budget: Budget,
) -> Result<Figures, Box<dyn std::error::Error>> {
    listener.set_nonblocking(true)?;
    let listener = tokio::net::TcpListener::from_std(listener)?;
    let (mut s, _) = tokio::time::timeout(PATIENCE, listener.accept()).await??;
    s.set_nodelay(true)?;
    let mut figures = Figures::default();
    let mut buf = vec![0u8; 4 << 20];
    for &size in LATENCY_SIZES {
        let data = pattern(size);
        let mut rts = Vec::new();
        for _ in 0..budget.pingpongs(size) {
            let t = Instant::now();
            s.write_all(&data).await?;
            s.read_exact(&mut buf[..size]).await?;
            rts.push(t.elapsed().as_secs_f64() * 1e6 / 2.0);
        }
        figures.latency.push((size, median(rts)));
    }
    // The follower echoes a byte after each window of the size it was told.
    for &size in SEND_BW_SIZES.iter().chain(PUT_BW_SIZES) {
        let data = pattern(size);
        let windows = budget.windows(size);
        let t = Instant::now();
        for _ in 0..windows {
            for _ in 0..WINDOW {
                s.write_all(&data).await?;
            }
            s.read_exact(&mut buf[..1]).await?;
        }
        let bytes = (windows * WINDOW * size) as f64;
        figures
            .bandwidth
            .push((size, bytes / t.elapsed().as_secs_f64() / 1e9));
    }
    let t = Instant::now();
    let windows = budget.rate_windows();
    for _ in 0..windows {
        for _ in 0..RATE_WINDOW {
            s.write_all(&[7u8; 8]).await?;
        }
        s.read_exact(&mut buf[..1]).await?;
    }
    figures.rate = (windows * RATE_WINDOW) as f64 / t.elapsed().as_secs_f64() / 1e6;
    Ok(figures)
}

async fn stream_follower(port: u16, budget: Budget) -> Result<(), Box<dyn std::error::Error>> {
    let mut s = tokio::net::TcpStream::connect(("127.0.0.1", port)).await?;
    s.set_nodelay(true)?;
    let mut buf = vec![0u8; 4 << 20];
    // The leader's sequence, counted from the same budget.
    for &size in LATENCY_SIZES {
        for _ in 0..budget.pingpongs(size) {
            s.read_exact(&mut buf[..size]).await?;
            s.write_all(&buf[..size]).await?;
        }
    }
    for &size in SEND_BW_SIZES.iter().chain(PUT_BW_SIZES) {
        for _ in 0..budget.windows(size) {
            for _ in 0..WINDOW {
                s.read_exact(&mut buf[..size]).await?;
            }
            s.write_all(&[1]).await?;
        }
    }
    for _ in 0..budget.rate_windows() {
        for _ in 0..RATE_WINDOW {
            s.read_exact(&mut buf[..8]).await?;
        }
        s.write_all(&[1]).await?;
    }
    Ok(())
}

fn report(all: &[(Face, Figures)]) {
    let of = |face: Face| -> Vec<&Figures> {
        all.iter()
            .filter(|(f, _)| *f == face)
            .map(|(_, x)| x)
            .collect()
    };
    let med = |face: Face, pick: &dyn Fn(&Figures) -> f64| {
        median(of(face).iter().map(|f| pick(f)).collect())
    };
    println!("one-way latency, µs (median of rounds; ratio to polling)");
    println!(
        "{:>8} {:>10} {:>10} {:>10} {:>8} {:>8}",
        "size", "polling", "async", "tcpstream", "async/p", "stream/p"
    );
    for (i, &size) in LATENCY_SIZES.iter().enumerate() {
        let [p, a, s] = Face::ALL.map(|f| med(f, &|x: &Figures| x.latency[i].1));
        println!(
            "{size:>8} {p:>10.2} {a:>10.2} {s:>10.2} {:>8.2} {:>8.2}",
            a / p,
            s / p
        );
    }
    println!("bandwidth, GB/s");
    let sizes: Vec<usize> = SEND_BW_SIZES.iter().chain(PUT_BW_SIZES).copied().collect();
    for (i, &size) in sizes.iter().enumerate() {
        let [p, a, s] = Face::ALL.map(|f| med(f, &|x: &Figures| x.bandwidth[i].1));
        println!(
            "{size:>8} {p:>10.2} {a:>10.2} {s:>10.2} {:>8.2} {:>8.2}",
            a / p,
            s / p
        );
    }
    let [p, a, s] = Face::ALL.map(|f| med(f, &|x: &Figures| x.rate));
    println!("8 B rate, M msg/s");
    println!(
        "{:>8} {p:>10.3} {a:>10.3} {s:>10.3} {:>8.2} {:>8.2}",
        "",
        a / p,
        s / p
    );
}
