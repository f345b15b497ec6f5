//! The measurements the `btl` command runs between two processes, over any
//! BTL: ping-pong latency, windowed bandwidth (as osu_bw) and the message
//! rate of small messages.
//!
//! One process leads ([`lead`]), the other answers ([`answer`]); both run
//! the same loop, so over the `self` BTL one module plays both. A message
//! larger than the BTL's `max_send_size` goes as several sends; each send
//! carries the whole message's length in an 8-byte header, so the receiver
//! knows when a message is complete. Data is sent from registered memory,
//! in place where the BTL can.

use std::time::{Duration, Instant};

use btl_core::btl::{Access, Btl, BtlError, Event, MemHandle, MemSlice, Tag};
use btl_core::desc::{DescFlags, Order};
use btl_core::endpoint::EndpointId;

/// A ping: answer with a message of the same length.
const PING: Tag = Tag(0xF0);
/// The answer to a ping.
const PONG: Tag = Tag(0xF1);
/// A bandwidth or rate message: counted, not answered one by one.
const STREAM: Tag = Tag(0xF2);
/// A window of stream messages arrived.
const WINDOW_ACK: Tag = Tag(0xF3);
/// The lead is done: the answering side stops.
const DONE: Tag = Tag(0xF4);
/// Header of every benchmark send: the message's total length (8 bytes)
/// and the sender's window (4 bytes; a server learns it from its client),
/// then 4 bytes of zeros.
const HEADER: usize = 16;
/// How long a step may wait for the peer before the run fails.
pub const STALL: Duration = Duration::from_secs(30);

/// Which measurement.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Test {
    /// Round trips of one message each way; reports one-way latency.
    PingPong,
    /// Windows of messages one way, one acknowledgement per window.
    Bandwidth,
    /// As bandwidth, for small messages sent with `sendi`: messages/s.
    Rate,
}

/// How the waiting side moves the BTL forward.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Waiting {
    /// Call `progress` in a loop (lowest latency, a core busy).
    Poll,
    /// Spin briefly, then block in the poller (kind to shared cores).
    Block,
}

/// What to measure.
#[derive(Debug, Clone)]
pub struct Plan {
    /// The measurement.
    pub test: Test,
    /// Message sizes, in order.
    pub sizes: Vec<usize>,
    /// Untimed iterations first, per size.
    pub warmup: u32,
    /// Timed iterations per size.
    pub iters: u32,
    /// Messages per window (bandwidth and rate).
    pub window: u32,
}

impl Plan {
    /// Bytes one size's timed iterations move at most: large messages get
    /// fewer iterations than `iters`, at least 10.
    pub const BUDGET: usize = 256 << 20;

    /// Timed and warm-up iterations for messages of `size`.
    pub fn iterations(&self, size: usize) -> (u32, u32) {
        let per_iter = match self.test {
            Test::PingPong => 2 * size,
            Test::Bandwidth | Test::Rate => size * self.window as usize,
        }
        .max(1);
        let cap = (Self::BUDGET / per_iter).clamp(10, u32::MAX as usize) as u32;
        let iters = self.iters.min(cap);
        (iters, self.warmup.min((iters / 10).max(2)))
    }
}

/// The result for one size.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Row {
    /// Message size in bytes.
    pub size: usize,
    /// Timed iterations.
    pub iters: u32,
    /// Median one-way latency in µs (ping-pong) or time per message
    /// (bandwidth, rate).
    pub median_us: f64,
    /// 99th percentile, as `median_us`.
    pub p99_us: f64,
    /// Payload bandwidth, MiB/s.
    pub mib_per_s: f64,
    /// Messages per second.
    pub msgs_per_s: f64,
}

/// A BTL the benchmark can drive: it moves itself forward as told.
pub trait Driven: Btl<'static> {
    /// Moves the BTL forward once, waiting a little if `waiting` says so.
    fn step(&mut self, waiting: Waiting);
}

impl<'r, const REGS: usize, const QUEUE: usize> Driven
    for btl_core::loopback::Loopback<'r, 'static, REGS, QUEUE>
{
    fn step(&mut self, _waiting: Waiting) {
        self.progress();
    }
}

impl<T: crate::module::Transport> Driven for crate::module::Module<T> {
    fn step(&mut self, waiting: Waiting) {
        match waiting {
            Waiting::Poll => {
                self.progress();
            }
            Waiting::Block => {
                let _ = self.wait(Duration::from_millis(10));
            }
        }
    }
}

/// Why a run failed.
#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    /// The BTL refused an operation.
    #[error("{what}: {error:?}")]
    Btl {
        /// What was being done.
        what: &'static str,
        /// Why it failed.
        error: BtlError,
    },
    /// The peer went quiet.
    #[error("no answer from the peer within {0:?}")]
    Stalled(Duration),
}

fn btl_err(what: &'static str) -> impl Fn(BtlError) -> BenchError {
    move |error| BenchError::Btl { what, error }
}

/// A message received: its tag and whether it completed a message.
struct Arrival {
    tag: Tag,
    from: EndpointId,
    /// The sender's window, from the header.
    window: u32,
    complete: Option<usize>,
}

/// Both sides' state: the registered source of sends and what has
/// arrived of the current message.
struct Side {
    source: MemHandle,
    /// The same bytes as `source`, for `sendi`, which copies.
    copy: Vec<u8>,
    have: usize,
    /// Messages completed per tag: PONG, STREAM, WINDOW_ACK, DONE.
    counted: [u64; 4],
    /// Stream messages per acknowledgement, and how many were acknowledged.
    window: u32,
    acked: u64,
    /// Replies owed (to, tag, length), sent in order.
    replies: std::collections::VecDeque<(EndpointId, Tag, usize)>,
    /// This side answers whoever comes (a peer's loss is not its end).
    serving: bool,
}

impl Side {
    fn new<B: Btl<'static>>(btl: &mut B, max_size: usize, window: u32) -> Result<Self, BenchError> {
        let (source, copy) = Self::source(btl, max_size)?;
        Ok(Side {
            source,
            copy,
            have: 0,
            counted: [0; 4],
            window: window.max(1),
            acked: 0,
            replies: std::collections::VecDeque::new(),
            serving: false,
        })
    }

    /// A registered send buffer of `len` bytes (a process keeps it until
    /// it exits) and a copy of its bytes.
    fn source<B: Btl<'static>>(
        btl: &mut B,
        len: usize,
    ) -> Result<(MemHandle, Vec<u8>), BenchError> {
        let copy: Vec<u8> = (0..len.max(1)).map(|i| i as u8).collect();
        let region: &'static mut [u8] = Box::leak(copy.clone().into_boxed_slice());
        let handle = btl
            .register_mem(region, Access::REMOTE_READ)
            .map_err(btl_err("registering the send buffer"))?;
        Ok((handle, copy))
    }

    /// Sends a message of `len` bytes with `tag`, in as many sends as the
    /// BTL's largest takes, stepping while the BTL has no room.
    fn send<B: Driven>(
        &mut self,
        btl: &mut B,
        to: EndpointId,
        tag: Tag,
        len: usize,
        waiting: Waiting,
    ) -> Result<(), BenchError> {
        if len > self.copy.len() {
            // An answer larger than any message so far: a larger buffer.
            let (source, copy) = Self::source(btl, len.next_power_of_two())?;
            let _ = btl.deregister_mem(self.source);
            (self.source, self.copy) = (source, copy);
        }
        let max = btl.attributes().max_send_size.saturating_sub(HEADER).max(1);
        let mut header = [0u8; HEADER];
        header[..8].copy_from_slice(&(len as u64).to_be_bytes());
        header[8..12].copy_from_slice(&self.window.to_be_bytes());
        let mut sent = 0;
        let start = Instant::now();
        loop {
            let chunk = (len - sent).min(max);
            let flags = DescFlags::BTL_OWNERSHIP;
            let small = chunk + HEADER <= btl.attributes().eager_limit;
            let immediate = if small {
                let payload = &self.copy[sent..sent + chunk];
                btl.sendi(to, &header, payload, tag, Order(0), flags)
            } else {
                Err(BtlError::TooLarge {
                    len: chunk as u64,
                    max: 0,
                })
            };
            // Larger than sendi takes here: a descriptor.
            let result = if !matches!(immediate, Err(BtlError::TooLarge { .. })) {
                immediate
            } else {
                let data = MemSlice {
                    handle: self.source,
                    offset: sent as u64,
                    len: chunk as u64,
                };
                match btl.prepare_src_registered(to, data, HEADER, Order(0), flags) {
                    Ok(mut desc) => {
                        if let Ok(h) = desc.header_mut(btl.pools()) {
                            h.copy_from_slice(&header);
                        }
                        btl.send(to, desc, tag).map(|_| ()).map_err(|e| {
                            let _ = btl.free(e.desc);
                            e.error
                        })
                    }
                    Err(e) => Err(e),
                }
            };
            match result {
                Ok(()) => {
                    sent += chunk;
                    if sent >= len {
                        return Ok(());
                    }
                }
                Err(BtlError::OutOfResource) => {
                    if start.elapsed() > STALL {
                        return Err(BenchError::Stalled(STALL));
                    }
                    btl.step(waiting);
                    // Take what arrives meanwhile (answered later), or both
                    // sides could wait for each other's room.
                    while let Some(a) = self.take(btl)? {
                        self.on_arrival(a);
                    }
                }
                Err(e) => {
                    return Err(BenchError::Btl {
                        what: "sending",
                        error: e,
                    });
                }
            }
        }
    }

    /// The next event, if any: a received piece of a message, counted.
    fn take<B: Btl<'static>>(&mut self, btl: &mut B) -> Result<Option<Arrival>, BenchError> {
        loop {
            let Some(ev) = btl.poll_event() else {
                return Ok(None);
            };
            match ev {
                Event::Received(m) => {
                    let field = |r: std::ops::Range<usize>| {
                        m.data.get(r).map_or(0, |b| {
                            b.iter().fold(0u64, |acc, &x| acc << 8 | u64::from(x))
                        })
                    };
                    let total = field(0..8) as usize;
                    let window = field(8..12) as u32;
                    self.have += m.data.len().saturating_sub(HEADER);
                    let complete = (self.have >= total).then(|| {
                        self.have = 0;
                        total
                    });
                    return Ok(Some(Arrival {
                        tag: m.tag,
                        from: m.from,
                        window,
                        complete,
                    }));
                }
                // The lead has one peer, and its loss ends the run. A server
                // outlives its clients: one that left is no error.
                Event::Error(e) if self.serving => {
                    tracing::info!("a peer is gone: {:?} ({:?})", e.endpoint, e.error);
                }
                Event::Error(e) => {
                    return Err(BenchError::Btl {
                        what: "the peer",
                        error: e.error,
                    });
                }
                Event::SendComplete { desc, result, .. } => {
                    if let Some(d) = desc {
                        let _ = btl.free(d);
                    }
                    result.map_err(btl_err("a send"))?;
                }
                _ => {}
            }
        }
    }

    /// What a side does with an arrival: count it, and owe an echo for a
    /// ping and an acknowledgement for each window of stream messages.
    /// Replies are only queued here; [`reply`](Self::reply) sends them, so
    /// that a send waiting for room, which takes arrivals meanwhile, never
    /// sends from within itself.
    fn on_arrival(&mut self, a: Arrival) {
        let Some(len) = a.complete else {
            return;
        };
        match a.tag {
            PING => self.replies.push_back((a.from, PONG, len)),
            PONG => self.counted[0] += 1,
            STREAM => {
                // The sender's window decides when to acknowledge.
                self.window = a.window.max(1);
                self.counted[1] += 1;
                if self.counted[1] >= self.acked + u64::from(self.window) {
                    self.acked += u64::from(self.window);
                    self.replies.push_back((a.from, WINDOW_ACK, 0));
                }
            }
            WINDOW_ACK => self.counted[2] += 1,
            DONE => self.counted[3] += 1,
            _ => {}
        }
    }

    /// Sends the replies owed, in order (more may be owed meanwhile).
    fn reply<B: Driven>(&mut self, btl: &mut B, waiting: Waiting) -> Result<(), BenchError> {
        while let Some((to, tag, len)) = self.replies.pop_front() {
            self.send(btl, to, tag, len, waiting)?;
        }
        Ok(())
    }

    /// Steps until `counted[k]` reaches `n`, answering what arrives.
    fn until<B: Driven>(
        &mut self,
        btl: &mut B,
        k: usize,
        n: u64,
        waiting: Waiting,
    ) -> Result<(), BenchError> {
        self.until_within(btl, k, n, waiting, STALL)
    }

    /// As [`until`](Self::until), failing after `stall` without an arrival.
    fn until_within<B: Driven>(
        &mut self,
        btl: &mut B,
        k: usize,
        n: u64,
        waiting: Waiting,
        stall: Duration,
    ) -> Result<(), BenchError> {
        let mut last = Instant::now();
        let mut idle: u32 = 0;
        while self.counted[k] < n {
            let mut moved = false;
            while let Some(a) = self.take(btl)? {
                moved = true;
                self.on_arrival(a);
            }
            self.reply(btl, waiting)?;
            // The clock is read only now and then: this loop is what a
            // latency measurement spins in.
            idle = if moved { 0 } else { idle + 1 };
            if idle == 0 || idle % 4096 == 0 {
                if idle == 0 {
                    last = Instant::now();
                } else if last.elapsed() > stall {
                    return Err(BenchError::Stalled(stall));
                }
            }
            if self.counted[k] < n {
                btl.step(waiting);
            }
        }
        Ok(())
    }
}

/// Runs `plan` against the answering process at `peer`; `on_row` sees each
/// size's result as it is done. Ends the answering side's loop.
pub fn lead<B: Driven>(
    btl: &mut B,
    peer: EndpointId,
    plan: &Plan,
    waiting: Waiting,
    mut on_row: impl FnMut(&Row),
) -> Result<Vec<Row>, BenchError> {
    let max = plan.sizes.iter().copied().max().unwrap_or(0);
    let mut side = Side::new(btl, max, plan.window)?;
    let mut rows = Vec::new();
    for &size in &plan.sizes {
        let (iters, warmup) = plan.iterations(size);
        let mut samples = Vec::with_capacity(iters as usize);
        let mut timed_from = Instant::now();
        for i in 0..warmup + iters {
            let t = Instant::now();
            match plan.test {
                Test::PingPong => {
                    let want = side.counted[0] + 1;
                    side.send(btl, peer, PING, size, waiting)?;
                    side.until(btl, 0, want, waiting)?;
                }
                Test::Bandwidth | Test::Rate => {
                    let want = side.counted[2] + 1;
                    for _ in 0..plan.window {
                        side.send(btl, peer, STREAM, size, waiting)?;
                    }
                    side.until(btl, 2, want, waiting)?;
                }
            }
            if i >= warmup {
                samples.push(t.elapsed());
            }
            if i + 1 == warmup {
                // The timed part starts after the warm-up.
                timed_from = Instant::now();
            }
        }
        let elapsed = timed_from.elapsed();
        rows.push(row(plan.test, plan.window, size, &mut samples, elapsed));
        on_row(rows.last().expect("just pushed"));
    }
    side.send(btl, peer, DONE, 0, waiting)?;
    // Let the DONE leave before the caller tears the module down.
    for _ in 0..100 {
        btl.step(Waiting::Poll);
    }
    Ok(rows)
}

/// Answers a leading process until it says it is done: echoes pings,
/// acknowledges every `window` stream messages. Fails when nothing arrives
/// for `patience`.
pub fn answer<B: Driven>(
    btl: &mut B,
    window: u32,
    waiting: Waiting,
    patience: Duration,
) -> Result<(), BenchError> {
    let mut side = Side::new(btl, 1, window)?;
    side.serving = true;
    side.until_within(btl, 3, 1, waiting, patience)?;
    for _ in 0..100 {
        btl.step(Waiting::Poll);
    }
    Ok(())
}

/// Median, 99th percentile and rates of one size's timed samples, which
/// took `elapsed` in all.
pub(crate) fn row(
    test: Test,
    window: u32,
    size: usize,
    samples: &mut [Duration],
    elapsed: Duration,
) -> Row {
    samples.sort_unstable();
    let pick = |q: f64| {
        if samples.is_empty() {
            return 0.0;
        }
        let i = ((samples.len() - 1) as f64 * q).round() as usize;
        samples[i].as_secs_f64() * 1e6
    };
    let iters = samples.len() as u32;
    let per_iter = match test {
        Test::PingPong => 2.0,
        Test::Bandwidth | Test::Rate => f64::from(window.max(1)),
    };
    let messages = match test {
        Test::PingPong => f64::from(iters),
        Test::Bandwidth | Test::Rate => f64::from(iters) * f64::from(window),
    };
    let timed = elapsed.as_secs_f64().max(1e-9);
    Row {
        size,
        iters,
        median_us: pick(0.5) / per_iter,
        p99_us: pick(0.99) / per_iter,
        mib_per_s: messages * size as f64 / timed / f64::from(1u32 << 20),
        msgs_per_s: messages / timed,
    }
}

/// Sizes from `min` to `max`, doubling (with `min` 0 taken as 1).
pub fn sizes(min: usize, max: usize) -> Vec<usize> {
    let mut out = Vec::new();
    let mut s = min.max(1);
    while s <= max {
        out.push(s);
        s = s.saturating_mul(2);
    }
    out
}
