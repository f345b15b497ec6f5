//! Transfer machines end to end: a Motr-style
//! [`TransferMachine`] on each side, driven
//! the way an application drives one next to other users of its BTL (poll
//! the BTL, `offer` each event, `run`), over every backend. Messages fill
//! MSG_RECV buffers byte for byte; bulk data moves both ways through
//! descriptors shipped in messages; cancels, timeouts and `stop` end every
//! buffer exactly once while the other buffers carry on.
//!
//! Each side's machine has its own tag, as two processes' machines usually
//! do. Where both sides are one BTL ([`Capabilities::same_btl`]) the two
//! machines share it and `offer` must route every event to the machine it
//! belongs to. An event that neither takes fails the test, and so does a
//! completion that no add is owed.
//!
//! [`Capabilities::same_btl`]: crate::world::Capabilities::same_btl

use std::collections::HashMap;

use btl_core::btl::{Access, Btl, Event, MemSlice, Tag};
use btl_core::endpoint::ProcName;
use btl_core::time::{Duration, Instant};
use btl_core::xfer::{
    BufferId, Completion, NetBufDesc, Passive, Queue, Stats, TmAddr, TmState, TransferMachine,
    XferError, XferEvent,
};

use crate::data::{fill_pattern, pattern};
use crate::track::in_use;
use crate::world::{Memory, Side, World};

/// Buffers each machine can register.
const BUFS: usize = 16;
/// Message events a machine holds before it stops taking messages.
const EVENTS: usize = 8;
/// Largest message payload a machine receives.
const MSG: usize = 8 << 10;

/// The machine of each side.
type Tm = TransferMachine<BUFS, EVENTS, MSG>;

/// The machines' tags, A's then B's: different, so that both machines can
/// share one BTL and a reply must find its way by the sender's address.
const TAGS: [Tag; 2] = [Tag(0x60), Tag(0x7F)];
/// The process names the machines write in their descriptors. The harness
/// does not name its processes, and nothing but this suite reads the field.
const NAMES: [ProcName; 2] = [ProcName::new(0x7E57, 0), ProcName::new(0x7E57, 1)];
/// Bytes the machine's message header adds in front of a payload.
const MSG_HEADER: usize = 12;
/// What every registered byte holds until something writes it.
const GUARD: u8 = 0xEE;
/// Guard bytes around each buffer in its region: a page, so buffers stay
/// aligned for any BTL's put and get alignment up to that.
const GUARD_LEN: usize = 4096;
/// Most BTL events one side may produce in a round before it is a flood.
const DRAIN_LIMIT: usize = 1 << 16;

fn ix(side: Side) -> usize {
    side as usize
}

/// The machine of `side` as the other side addresses it.
fn addr_of(world: &dyn World, side: Side) -> TmAddr {
    TmAddr {
        endpoint: world.peer(side.other()),
        tag: TAGS[ix(side)],
    }
}

/// A buffer registered with the machine of `side`: a slice of a region of
/// that side's BTL with guard bytes on both sides.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Buf {
    side: Side,
    id: BufferId,
    mem: MemSlice,
}

/// A message as a machine reported it: where it landed and who sent it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Arrival {
    /// Position of the `Received` event in its side's log.
    at: usize,
    offset: u64,
    len: u64,
    from: TmAddr,
}

/// The buffer's bytes.
fn read(world: &mut dyn World, buf: Buf) -> Vec<u8> {
    let at = buf.mem.offset as usize;
    world.btl(buf.side).region(buf.mem.handle).expect("region")[at..at + buf.mem.len as usize]
        .to_vec()
}

/// Writes `bytes` at the start of the buffer.
fn write(world: &mut dyn World, buf: Buf, bytes: &[u8]) {
    assert!(bytes.len() as u64 <= buf.mem.len, "{buf:?} is too small");
    let at = buf.mem.offset as usize;
    world
        .btl(buf.side)
        .region_mut(buf.mem.handle)
        .expect("region")[at..at + bytes.len()]
        .copy_from_slice(bytes);
}

/// Fills the whole buffer with [`GUARD`].
fn clear(world: &mut dyn World, buf: Buf) {
    write(world, buf, &vec![GUARD; buf.mem.len as usize]);
}

/// Fails unless the guard bytes around the buffer are untouched.
fn assert_guards(world: &mut dyn World, buf: Buf) {
    let (start, end) = (
        buf.mem.offset as usize,
        (buf.mem.offset + buf.mem.len) as usize,
    );
    let region = world.btl(buf.side).region(buf.mem.handle).expect("region");
    assert!(
        region[start - GUARD_LEN..start]
            .iter()
            .chain(&region[end..end + GUARD_LEN])
            .all(|&b| b == GUARD),
        "something wrote around {buf:?}"
    );
}

/// The time one round of [`Machines`] moves their clock on.
const ROUND: Duration = Duration::from_nanos(1);

/// Both sides' machines, the clock they run on, and everything they said.
///
/// Every successful add is recorded as owed one completion, and every
/// completion polled pays one; a completion nobody is owed, or a message
/// into a buffer that is not queued, fails the test at once.
struct Machines {
    tms: [Box<Tm>; 2],
    same_btl: bool,
    max_rounds: u32,
    linger_rounds: u32,
    /// The caller's clock passed to `run`: one unit per round.
    now: Instant,
    /// Each side's events as polled, with the clock when they were.
    log: [Vec<(Instant, XferEvent)>; 2],
    /// Adds not yet completed, per buffer.
    open: HashMap<(Side, BufferId), u32>,
}

impl Machines {
    /// Both machines, started (one round), their state events checked.
    fn new(world: &mut dyn World) -> Self {
        let caps = world.capabilities();
        let machine = |side: Side| {
            let mut tm = Box::new(Tm::new(NAMES[ix(side)], TAGS[ix(side)]).expect("an xfer tag"));
            tm.start().expect("start");
            tm
        };
        let mut m = Machines {
            tms: [machine(Side::A), machine(Side::B)],
            same_btl: caps.same_btl,
            max_rounds: caps.max_rounds,
            linger_rounds: caps.linger_rounds,
            now: Instant::ZERO,
            log: [Vec::new(), Vec::new()],
            open: HashMap::new(),
        };
        m.step(world);
        for side in Side::BOTH {
            assert_eq!(m.tm(side).state(), TmState::Started, "side {side:?}");
            assert_eq!(
                m.states(side),
                [TmState::Starting, TmState::Started],
                "side {side:?}"
            );
        }
        m
    }

    fn tm(&mut self, side: Side) -> &mut Tm {
        &mut self.tms[ix(side)]
    }

    fn stats(&self, side: Side) -> Stats {
        *self.tms[ix(side)].stats()
    }

    /// The sides whose BTLs are distinct objects.
    fn btls(&self) -> &'static [Side] {
        if self.same_btl {
            &[Side::A]
        } else {
            &Side::BOTH
        }
    }

    /// The machines that use the BTL of `side`.
    fn machines_on(&self, side: Side) -> &'static [Side] {
        match (self.same_btl, side) {
            (true, _) => &Side::BOTH,
            (false, Side::A) => &[Side::A],
            (false, Side::B) => &[Side::B],
        }
    }

    /// Registers one region at `side` holding a buffer of each length (in
    /// that order, guard bytes around each), every byte [`GUARD`] or, with
    /// a seed, the `i`-th buffer the pattern of `seed + i`.
    fn buffers(
        &mut self,
        world: &mut dyn World,
        side: Side,
        lens: &[usize],
        access: Access,
        seed: Option<u64>,
    ) -> Vec<Buf> {
        let total = GUARD_LEN + lens.iter().map(|n| n + GUARD_LEN).sum::<usize>();
        let mut region = vec![GUARD; total];
        let mut at = GUARD_LEN;
        let mut slices = Vec::new();
        for (i, &len) in lens.iter().enumerate() {
            if let Some(seed) = seed {
                fill_pattern(&mut region[at..at + len], seed + i as u64);
            }
            slices.push((at as u64, len as u64));
            at += len + GUARD_LEN;
        }
        let btl = world.btl(side);
        let handle = btl.register_mem(region, access).expect("register_mem");
        slices
            .into_iter()
            .map(|(offset, len)| {
                let mem = MemSlice {
                    handle,
                    offset,
                    len,
                };
                let id = self.tms[ix(side)]
                    .register_buffer(btl, mem)
                    .expect("register_buffer");
                Buf { side, id, mem }
            })
            .collect()
    }

    /// One buffer in a region of its own.
    fn buffer(
        &mut self,
        world: &mut dyn World,
        side: Side,
        len: usize,
        access: Access,
        seed: Option<u64>,
    ) -> Buf {
        self.buffers(world, side, &[len], access, seed)[0]
    }

    /// Adds `buf` with `add`, which must succeed; the add is owed one
    /// completion.
    fn add<T>(
        &mut self,
        buf: Buf,
        add: impl FnOnce(&mut Tm, BufferId) -> Result<T, XferError>,
    ) -> T {
        let out = add(&mut self.tms[ix(buf.side)], buf.id)
            .unwrap_or_else(|e| panic!("adding {buf:?}: {e}"));
        *self.open.entry((buf.side, buf.id)).or_default() += 1;
        out
    }

    /// Deletes a queued buffer and takes the events that follow.
    fn del(&mut self, buf: Buf) {
        self.tm(buf.side)
            .del(buf.id)
            .unwrap_or_else(|e| panic!("del of {buf:?}: {e}"));
        self.poll(buf.side);
    }

    /// Stops the machine of `side` and takes the events that follow.
    fn stop(&mut self, side: Side) {
        self.tm(side).stop().expect("stop");
        self.poll(side);
    }

    /// One round: every machine runs (issuing what was added), the world
    /// moves bytes, and each BTL's events are offered to its machines, each
    /// machine running and being polled after every one.
    fn step(&mut self, world: &mut dyn World) {
        self.now += ROUND;
        for &side in self.btls() {
            self.run_machines(world.btl(side), side);
        }
        world.progress();
        for &side in self.btls() {
            let btl = world.btl(side);
            let mut taken = 0;
            while let Some(event) = btl.poll_event() {
                if let Some(foreign) = self.offer(side, event) {
                    panic!("side {side:?}: an event no transfer machine takes: {foreign:?}");
                }
                self.run_machines(btl, side);
                taken += 1;
                assert!(
                    taken < DRAIN_LIMIT,
                    "side {side:?}: more than {DRAIN_LIMIT} events in one round"
                );
            }
        }
    }

    /// Runs the machine of `side` at the current clock without taking any
    /// BTL event, and takes its events.
    fn run_only(&mut self, world: &mut dyn World, side: Side) {
        let now = self.now;
        self.tms[ix(side)].run(world.btl(side), now);
        self.poll(side);
    }

    /// Offers an event of the BTL of `side` to the machines using it; what
    /// none takes is given back.
    fn offer<'a>(&mut self, side: Side, event: Event<'a>) -> Option<Event<'a>> {
        if self.same_btl {
            let [a, b] = &mut self.tms;
            a.offer(event).and_then(|e| b.offer(e))
        } else {
            self.tms[ix(side)].offer(event)
        }
    }

    fn run_machines(&mut self, btl: &mut dyn Btl<Memory = Memory>, side: Side) {
        for &machine in self.machines_on(side) {
            self.tms[ix(machine)].run(btl, self.now);
            self.poll(machine);
        }
    }

    /// Takes every event of the machine of `side`, checking it against what
    /// is owed.
    fn poll(&mut self, side: Side) {
        while let Some(event) = self.tms[ix(side)].poll_event() {
            match event {
                XferEvent::Completed(c) => {
                    let open = self.open.entry((side, c.buffer)).or_default();
                    assert!(
                        *open > 0,
                        "side {side:?}: a completion no add is owed (a second one?): {c:?}"
                    );
                    *open -= 1;
                }
                XferEvent::Received { buffer, .. } => assert!(
                    self.open.get(&(side, buffer)).is_some_and(|&n| n > 0),
                    "side {side:?}: a message landed in {buffer:?}, which is not queued"
                ),
                XferEvent::StateChanged { .. } | XferEvent::Dropped { .. } => {}
            }
            self.log[ix(side)].push((self.now, event));
        }
    }

    /// Runs rounds until `done` holds; fails after `max_rounds`, naming
    /// `what`.
    fn run_until(&mut self, world: &mut dyn World, what: &str, done: impl Fn(&Self) -> bool) {
        for _ in 0..self.max_rounds {
            if done(self) {
                return;
            }
            self.step(world);
        }
        assert!(
            done(self),
            "{what}: not done after {} rounds; {}",
            self.max_rounds,
            self.describe()
        );
    }

    /// The adds still open and each machine's state and counters, for
    /// failure messages.
    fn describe(&self) -> String {
        let open: Vec<_> = self.open.iter().filter(|(_, n)| **n > 0).collect();
        let machines: Vec<_> = Side::BOTH
            .iter()
            .map(|&s| format!("{s:?}: {}, {:?}", self.tms[ix(s)].state(), self.stats(s)))
            .collect();
        format!("open adds {open:?}; {}", machines.join("; "))
    }

    /// Runs until nothing is owed, then lingers and fails if any buffer
    /// completes or receives anything more.
    fn settle(&mut self, world: &mut dyn World) {
        self.run_until(world, "every add completes", |m| {
            m.open.values().all(|&n| n == 0)
        });
        self.linger(world);
    }

    /// Runs `linger_rounds` (at least two) more rounds, during which no
    /// buffer may complete or receive anything.
    fn linger(&mut self, world: &mut dyn World) {
        let marks = [self.log[0].len(), self.log[1].len()];
        for _ in 0..self.linger_rounds.max(2) {
            self.step(world);
        }
        for side in Side::BOTH {
            let late: Vec<_> = self.log[ix(side)][marks[ix(side)]..]
                .iter()
                .filter(|(_, e)| matches!(e, XferEvent::Completed(_) | XferEvent::Received { .. }))
                .collect();
            assert!(
                late.is_empty(),
                "side {side:?}: events after settling: {late:?}"
            );
        }
    }

    fn is_open(&self, buf: Buf) -> bool {
        self.open.get(&(buf.side, buf.id)).is_some_and(|&n| n > 0)
    }

    /// Every completion of `buf` so far, with the clock when it was polled.
    fn completions(&self, buf: Buf) -> Vec<(Instant, Completion)> {
        self.log[ix(buf.side)]
            .iter()
            .filter_map(|&(now, e)| match e {
                XferEvent::Completed(c) if c.buffer == buf.id => Some((now, c)),
                _ => None,
            })
            .collect()
    }

    /// Queue and result of every completion of `buf` so far.
    fn results(&self, buf: Buf) -> Vec<(Queue, Result<u64, XferError>)> {
        self.completions(buf)
            .into_iter()
            .map(|(_, c)| (c.queue, c.result))
            .collect()
    }

    /// The last completion of `buf`, which must have come.
    fn last(&self, buf: Buf) -> (Queue, Result<u64, XferError>) {
        *self
            .results(buf)
            .last()
            .unwrap_or_else(|| panic!("{buf:?} never completed"))
    }

    /// Every message `buf` received so far.
    fn arrivals(&self, buf: Buf) -> Vec<Arrival> {
        self.log[ix(buf.side)]
            .iter()
            .enumerate()
            .filter_map(|(at, &(_, e))| match e {
                XferEvent::Received {
                    buffer,
                    offset,
                    len,
                    from,
                } if buffer == buf.id => Some(Arrival {
                    at,
                    offset,
                    len,
                    from,
                }),
                _ => None,
            })
            .collect()
    }

    /// Position in its side's log of the last completion of `buf`.
    fn completed_at(&self, buf: Buf) -> usize {
        self.log[ix(buf.side)]
            .iter()
            .rposition(|(_, e)| matches!(e, XferEvent::Completed(c) if c.buffer == buf.id))
            .unwrap_or_else(|| panic!("{buf:?} never completed"))
    }

    /// Every state the machine of `side` reported, in order.
    fn states(&self, side: Side) -> Vec<TmState> {
        self.log[ix(side)]
            .iter()
            .filter_map(|(_, e)| match e {
                XferEvent::StateChanged { state, .. } => Some(*state),
                _ => None,
            })
            .collect()
    }

    /// Messages the machine of `side` reported lost.
    fn dropped(&self, side: Side) -> u32 {
        self.log[ix(side)]
            .iter()
            .map(|(_, e)| match e {
                XferEvent::Dropped { count } => *count,
                _ => 0,
            })
            .sum()
    }

    /// Fails unless both machines saw only good messages, lost none, and
    /// had no stale completion or foreign event.
    fn assert_clean(&self) {
        for side in Side::BOTH {
            let s = self.stats(side);
            assert_eq!(
                (
                    s.dropped_messages,
                    s.bad_messages,
                    s.stale,
                    s.foreign_events
                ),
                (0, 0, 0, 0),
                "side {side:?}: dropped, bad, stale, foreign"
            );
        }
    }
}

/// A message length the machine never sends with `sendi` (past the
/// staging area or the eager limit), so the BTL gets a descriptor
/// referencing the buffer.
fn descriptor_len(world: &mut dyn World) -> usize {
    let attrs = super::a_to_b(world);
    let len = (MSG + 1).min(attrs.eager_limit.saturating_sub(MSG_HEADER) + 1);
    assert!(
        len + MSG_HEADER <= attrs.max_send_size,
        "max_send_size {} leaves no room for a descriptor-only message",
        attrs.max_send_size
    );
    len
}

/// Fails unless every pool of every BTL has all its fragments back.
fn assert_pools_idle(world: &mut dyn World, m: &Machines) {
    for &side in m.btls() {
        let busy: Vec<_> = in_use(world, side)
            .into_iter()
            .filter(|&(_, n)| n > 0)
            .collect();
        assert!(busy.is_empty(), "side {side:?}: fragments in use: {busy:?}");
    }
}

/// Checks the messages one MSG_RECV buffer took: `count` of them, packed
/// from offset 0 in arrival order, each from A's machine and equal to the
/// payload of that length in `sent`; the buffer completed once, after them,
/// with their total; nothing written past it. Returns the lengths taken.
fn check_receive_buffer(
    world: &mut dyn World,
    m: &Machines,
    buf: Buf,
    count: usize,
    sent: &[Vec<u8>],
) -> Vec<u64> {
    let arrivals = m.arrivals(buf);
    assert_eq!(arrivals.len(), count, "messages into {buf:?}");
    let bytes = read(world, buf);
    let from = addr_of(world, Side::A);
    let mut used = 0;
    for a in &arrivals {
        assert_eq!(a.offset, used, "messages are packed in arrival order");
        assert_eq!(a.from, from, "the sender's address");
        let got = &bytes[used as usize..(used + a.len) as usize];
        assert!(
            sent.iter().any(|s| s.as_slice() == got),
            "a message of {} bytes at {used} of {buf:?} is none of those sent",
            a.len
        );
        used += a.len;
    }
    assert!(
        bytes[used as usize..].iter().all(|&b| b == GUARD),
        "{buf:?} was written past its messages"
    );
    assert_guards(world, buf);
    assert_eq!(m.results(buf), [(Queue::MsgRecv, Ok(used))], "{buf:?}");
    assert!(
        arrivals.iter().all(|a| a.at < m.completed_at(buf)),
        "{buf:?} completed before its last message"
    );
    arrivals.iter().map(|a| a.len).collect()
}

/// A sends messages of every size around the paths a message can take
/// (empty; `sendi` and just past it; just past the eager limit; the
/// machine's largest) at once into two MSG_RECV buffers of B: the first
/// completes after its `max_messages`, the second takes the rest. Then
/// three equal messages fill a third buffer until less than its
/// `min_receive_size` is left, and B replies to the address a message came
/// from. Every message arrives once, byte for byte, reported with its
/// sender; every add completes once with its byte count.
pub fn messages_fill_receive_buffers_once_each(world: &mut dyn World) {
    let mut m = Machines::new(world);
    let attrs = super::a_to_b(world);
    let eager = attrs.eager_limit;
    let sendi = world.capabilities().sendi_max.min(eager);
    let mut sizes: Vec<usize> = [
        0,
        1,
        sendi.saturating_sub(MSG_HEADER),
        sendi.saturating_sub(MSG_HEADER) + 1,
        eager.saturating_sub(MSG_HEADER) + 1,
        MSG,
    ]
    .into_iter()
    .filter(|&n| n <= MSG && n + MSG_HEADER <= attrs.max_send_size)
    .collect();
    sizes.sort_unstable();
    sizes.dedup();
    let sent: Vec<Vec<u8>> = (0..sizes.len())
        .map(|i| pattern(100 + i as u64, sizes[i]))
        .collect();
    let total: usize = sizes.iter().sum();

    let first_max = sizes.len() / 2;
    let second_max = sizes.len() - first_max;
    let recv = m.buffers(world, Side::B, &[total, total], Access::empty(), None);
    let (r1, r2) = (recv[0], recv[1]);
    m.add(r1, |tm, id| tm.add_msg_recv(id, 1, first_max as u32, None));
    m.add(r2, |tm, id| tm.add_msg_recv(id, 1, second_max as u32, None));
    let sends = m.buffers(world, Side::A, &sizes, Access::empty(), Some(100));
    let to_b = addr_of(world, Side::B);
    for (&s, &len) in sends.iter().zip(&sizes) {
        m.add(s, |tm, id| tm.add_msg_send(id, to_b, len as u64, None));
    }
    m.settle(world);

    for (&s, &len) in sends.iter().zip(&sizes) {
        assert_eq!(
            m.results(s),
            [(Queue::MsgSend, Ok(len as u64))],
            "send of {len}"
        );
    }
    let mut got = check_receive_buffer(world, &m, r1, first_max, &sent);
    got.extend(check_receive_buffer(world, &m, r2, second_max, &sent));
    got.sort_unstable();
    let expected: Vec<u64> = sizes.iter().map(|&n| n as u64).collect();
    assert_eq!(got, expected, "every size arrived exactly once");

    // min_receive_size: three messages of L leave L/2 < L of room.
    const L: usize = 100;
    let r3 = m.buffer(world, Side::B, 3 * L + L / 2, Access::empty(), None);
    m.add(r3, |tm, id| tm.add_msg_recv(id, L as u64, 100, None));
    let sends = m.buffers(world, Side::A, &[L; 3], Access::empty(), Some(200));
    for &s in &sends {
        m.add(s, |tm, id| tm.add_msg_send(id, to_b, L as u64, None));
    }
    m.settle(world);
    let sent: Vec<Vec<u8>> = (0..3).map(|i| pattern(200 + i, L)).collect();
    check_receive_buffer(world, &m, r3, 3, &sent);
    let bytes = read(world, r3);
    let mut contents: Vec<&[u8]> = bytes[..3 * L].chunks(L).collect();
    contents.sort_unstable();
    let mut expected: Vec<&[u8]> = sent.iter().map(Vec::as_slice).collect();
    expected.sort_unstable();
    assert_eq!(contents, expected, "each of the three messages once");

    // A reply goes back to the address the first message came from.
    let reply_to = m.arrivals(r1)[0].from;
    let ra = m.buffer(world, Side::A, 64, Access::empty(), None);
    let rs = m.buffer(world, Side::B, 50, Access::empty(), Some(300));
    m.add(ra, |tm, id| tm.add_msg_recv(id, 1, 1, None));
    m.add(rs, |tm, id| tm.add_msg_send(id, reply_to, 50, None));
    m.settle(world);
    let arrivals = m.arrivals(ra);
    assert_eq!(arrivals.len(), 1, "the reply");
    assert_eq!(
        arrivals[0].from,
        addr_of(world, Side::B),
        "the replier's address"
    );
    assert_eq!(read(world, ra)[..50], pattern(300, 50), "the reply's bytes");
    assert_eq!(m.results(ra), [(Queue::MsgRecv, Ok(50))]);
    assert_eq!(m.results(rs), [(Queue::MsgSend, Ok(50))]);

    m.assert_clean();
    assert_eq!(m.dropped(Side::A) + m.dropped(Side::B), 0);
    assert_pools_idle(world, &m);
}

/// The buffers one side uses in [`passive_and_active_bulk_move_both_ways`].
struct BulkSide {
    /// PASSIVE_BULK_RECV: the peer may write it.
    recv: Buf,
    /// PASSIVE_BULK_SEND: the peer may read it.
    send: Buf,
    /// ACTIVE_BULK_SEND and ACTIVE_BULK_RECV.
    active: Buf,
    /// Ships a descriptor to the peer.
    desc_out: Buf,
    /// Receives the peer's descriptor.
    desc_in: Buf,
}

/// One bulk transfer of `len` bytes between the `passive` side's buffer
/// on the `kind` queue and the other side's active buffer, the descriptor
/// shipped in a message; checks both completions and the bytes.
fn bulk_transfer(
    world: &mut dyn World,
    m: &mut Machines,
    bufs: &[BulkSide; 2],
    passive: Side,
    kind: Passive,
    len: u64,
    seed: u64,
) {
    let active = passive.other();
    let (p, a) = (&bufs[ix(passive)], &bufs[ix(active)]);
    let (pb, src, dst) = match kind {
        Passive::Recv => (p.recv, a.active, p.recv),
        Passive::Send => (p.send, p.send, a.active),
    };
    clear(world, dst);
    write(world, src, &pattern(seed, src.mem.len as usize));
    let peer = world.peer(passive);
    let desc = match kind {
        Passive::Recv => m.add(pb, |tm, id| tm.add_passive_recv(id, peer, None)),
        Passive::Send => m.add(pb, |tm, id| tm.add_passive_send(id, peer, len, None)),
    };
    let offered = match kind {
        Passive::Recv => pb.mem.len,
        Passive::Send => len,
    };
    assert_eq!(
        (desc.owner, desc.tag, desc.queue, desc.offset, desc.len),
        (
            NAMES[ix(passive)],
            TAGS[ix(passive)],
            kind,
            pb.mem.offset,
            offered
        ),
        "the descriptor names the buffer"
    );

    write(world, p.desc_out, &desc.to_bytes());
    let to = addr_of(world, active);
    m.add(a.desc_in, |tm, id| {
        tm.add_msg_recv(id, NetBufDesc::SIZE as u64, 1, None)
    });
    m.add(p.desc_out, |tm, id| {
        tm.add_msg_send(id, to, NetBufDesc::SIZE as u64, None)
    });
    m.run_until(world, "the descriptor arrives", |m| {
        !m.is_open(a.desc_in) && !m.is_open(p.desc_out)
    });
    let arrival = *m.arrivals(a.desc_in).last().expect("the descriptor");
    assert_eq!(arrival.from, addr_of(world, passive), "the owner's address");
    let at = arrival.offset as usize;
    let shipped = NetBufDesc::from_bytes(&read(world, a.desc_in)[at..at + arrival.len as usize])
        .expect("a descriptor");
    assert_eq!(shipped, desc, "the descriptor survives the trip");

    let (active_queue, peer) = (
        match kind {
            Passive::Recv => Queue::ActiveBulkSend,
            Passive::Send => Queue::ActiveBulkRecv,
        },
        arrival.from.endpoint,
    );
    match kind {
        Passive::Recv => m.add(a.active, |tm, id| {
            tm.add_active_send(id, peer, &shipped, len, None)
        }),
        Passive::Send => m.add(a.active, |tm, id| {
            tm.add_active_recv(id, peer, &shipped, None)
        }),
    }
    m.run_until(world, "both sides of the bulk transfer complete", |m| {
        !m.is_open(pb) && !m.is_open(a.active)
    });
    let what = format!("{kind:?} of {len} bytes, passive {passive:?}");
    assert_eq!(m.last(pb), (Queue::from(kind), Ok(len)), "{what}: passive");
    assert_eq!(m.last(a.active), (active_queue, Ok(len)), "{what}: active");
    let n = len as usize;
    let moved = read(world, dst);
    assert!(
        moved[..n] == pattern(seed, src.mem.len as usize)[..n],
        "{what}: content"
    );
    assert!(
        moved[n..].iter().all(|&b| b == GUARD),
        "{what}: written past the length"
    );
    assert_guards(world, dst);
}

/// Bulk data both ways and in both directions: B (then A) adds a
/// PASSIVE_BULK_RECV buffer and ships its descriptor in a message, and the
/// peer, at the address the message came from, writes into it with
/// ACTIVE_BULK_SEND; then a PASSIVE_BULK_SEND buffer is read with
/// ACTIVE_BULK_RECV. 1 byte, 4 KiB + 1 and 256 KiB + 5 (within the BTL's
/// limits and alignment), the passive receive buffer larger than what is
/// written: both sides complete once with the length, the bytes are
/// identical, and nothing past them is touched.
pub fn passive_and_active_bulk_move_both_ways(world: &mut dyn World) {
    let attrs = super::a_to_b(world);
    let align = u64::from(attrs.put_alignment.max(attrs.get_alignment).max(1));
    let cap = world
        .capabilities()
        .max_rdma_len
        .min(attrs.put_limit)
        .min(attrs.get_limit);
    let sizes: Vec<u64> = [1, 4097, (256 << 10) + 5]
        .into_iter()
        .map(|n: u64| n.next_multiple_of(align))
        .filter(|&n| n <= cap)
        .collect();
    let largest = *sizes.last().expect("a size within the BTL's limits") as usize;
    let room = largest + align as usize;

    let mut m = Machines::new(world);
    let bufs = Side::BOTH.map(|side| {
        let desc = m.buffers(world, side, &[NetBufDesc::SIZE; 2], Access::empty(), None);
        BulkSide {
            recv: m.buffer(world, side, room, Access::REMOTE_WRITE, None),
            send: m.buffer(world, side, room, Access::REMOTE_READ, None),
            active: m.buffer(world, side, room, Access::empty(), None),
            desc_out: desc[0],
            desc_in: desc[1],
        }
    });
    let mut seed = 400;
    for passive in [Side::B, Side::A] {
        for kind in [Passive::Recv, Passive::Send] {
            for &len in &sizes {
                seed += 1;
                bulk_transfer(world, &mut m, &bufs, passive, kind, len, seed);
            }
        }
    }
    m.settle(world);
    let total: u64 = sizes.iter().sum();
    for side in Side::BOTH {
        let s = m.stats(side);
        for q in Queue::ALL {
            let expected = match q {
                Queue::MsgRecv | Queue::MsgSend => 2 * sizes.len() as u64,
                _ => sizes.len() as u64,
            };
            assert_eq!(
                (s.queue(q).adds, s.queue(q).succeeded, s.queue(q).failed),
                (expected, expected, 0),
                "side {side:?}, {q}: adds, successes, failures"
            );
        }
        for q in [
            Queue::PassiveBulkRecv,
            Queue::PassiveBulkSend,
            Queue::ActiveBulkRecv,
            Queue::ActiveBulkSend,
        ] {
            assert_eq!(s.queue(q).bytes, total, "side {side:?}, {q}: bytes");
        }
    }
    m.assert_clean();
    assert_pools_idle(world, &m);
}

/// Buffers of four queues are deleted before they could do anything, and
/// a MSG_SEND after the BTL took it: each completes once with `Cancelled`,
/// a second `del` is refused, a cancelled receive buffer takes no message
/// and a cancelled passive buffer no data, and a message added after them
/// arrives. The sent buffer stays `InFlight` until the BTL gives it back
/// (its late completion ignored), and the cancelled passive buffer, added
/// again, ignores the BULK_DONE of a transfer to its old descriptor and
/// completes only with the transfer to its new one.
pub fn deleted_buffers_complete_once_cancelled(world: &mut dyn World) {
    let mut m = Machines::new(world);
    let to_b = addr_of(world, Side::B);
    let (peer_a, peer_b) = (world.peer(Side::A), world.peer(Side::B));
    let recv = m.buffers(world, Side::B, &[256, 256], Access::empty(), None);
    let (r_del, r_live) = (recv[0], recv[1]);
    let p_del = m.buffer(world, Side::B, 1024, Access::REMOTE_WRITE, None);
    let sends = m.buffers(world, Side::A, &[100, 100], Access::empty(), Some(500));
    let (s_del, s_live) = (sends[0], sends[1]);
    let a_del = m.buffer(world, Side::A, 1024, Access::empty(), Some(502));

    // r_del is added first: a message would go into it if it were queued.
    m.add(r_del, |tm, id| tm.add_msg_recv(id, 1, 1, None));
    m.add(r_live, |tm, id| tm.add_msg_recv(id, 1, 1, None));
    let old = m.add(p_del, |tm, id| tm.add_passive_recv(id, peer_b, None));
    m.add(s_del, |tm, id| tm.add_msg_send(id, to_b, 100, None));
    m.add(a_del, |tm, id| {
        tm.add_active_send(id, peer_a, &old, 1024, None)
    });
    for (buf, queue) in [
        (r_del, Queue::MsgRecv),
        (p_del, Queue::PassiveBulkRecv),
        (s_del, Queue::MsgSend),
        (a_del, Queue::ActiveBulkSend),
    ] {
        m.del(buf);
        assert_eq!(
            m.results(buf),
            [(queue, Err(XferError::Cancelled))],
            "{buf:?}"
        );
        assert_eq!(
            m.tm(buf.side).del(buf.id),
            Err(XferError::NotQueued),
            "a second del of {buf:?}"
        );
    }
    m.add(s_live, |tm, id| tm.add_msg_send(id, to_b, 100, None));
    m.settle(world);
    assert_eq!(m.results(s_live), [(Queue::MsgSend, Ok(100))]);
    assert_eq!(m.results(r_live), [(Queue::MsgRecv, Ok(100))]);
    assert_eq!(
        read(world, r_live)[..100],
        pattern(501, 100),
        "the live message"
    );
    assert!(
        m.arrivals(r_del).is_empty(),
        "a cancelled buffer took a message"
    );
    assert!(
        read(world, p_del).iter().all(|&b| b == GUARD),
        "a cancelled active buffer moved data"
    );
    assert_guards(world, p_del);
    m.assert_clean();

    // A MSG_SEND cancelled after the BTL took it as a descriptor
    // referencing the buffer (unless the BTL finished it on the spot).
    let big = descriptor_len(world);
    let s_big = m.buffer(world, Side::A, big, Access::empty(), Some(503));
    m.add(s_big, |tm, id| tm.add_msg_send(id, to_b, big as u64, None));
    m.run_only(world, Side::A);
    if m.is_open(s_big) {
        m.del(s_big);
        assert_eq!(
            m.results(s_big),
            [(Queue::MsgSend, Err(XferError::Cancelled))]
        );
        assert_eq!(
            m.tm(Side::A).add_msg_send(s_big.id, to_b, 1, None),
            Err(XferError::InFlight),
            "the BTL still holds the cancelled send"
        );
    } else {
        assert_eq!(m.results(s_big), [(Queue::MsgSend, Ok(big as u64))]);
        assert_eq!(m.tm(Side::A).del(s_big.id), Err(XferError::NotQueued));
    }
    let stale = u64::from(m.results(s_big)[0].1.is_err());
    // It still arrives at B, which has no receive buffer queued for it.
    m.run_until(world, "the cancelled send comes back from the BTL", |m| {
        m.stats(Side::A).stale == stale && m.stats(Side::B).dropped_messages == 1
    });
    m.tm(Side::A)
        .deregister_buffer(s_big.id)
        .expect("idle once the BTL gave it back");
    assert_eq!(m.dropped(Side::B), 1, "the lost message is reported");

    // The cancelled passive buffer again: a transfer to its old descriptor
    // lands (the key is still registered) but does not complete it.
    let new = m.add(p_del, |tm, id| tm.add_passive_recv(id, peer_b, None));
    assert_ne!(new.cookie, old.cookie, "each add has its own cookie");
    m.add(a_del, |tm, id| {
        tm.add_active_send(id, peer_a, &old, 512, None)
    });
    m.run_until(world, "the transfer to the old descriptor", |m| {
        !m.is_open(a_del) && m.stats(Side::B).stale == 1
    });
    assert_eq!(m.last(a_del), (Queue::ActiveBulkSend, Ok(512)));
    assert!(
        m.is_open(p_del),
        "a BULK_DONE for an old add completed the new one"
    );
    m.add(a_del, |tm, id| {
        tm.add_active_send(id, peer_a, &new, 1024, None)
    });
    m.settle(world);
    assert_eq!(
        m.results(p_del),
        [
            (Queue::PassiveBulkRecv, Err(XferError::Cancelled)),
            (Queue::PassiveBulkRecv, Ok(1024)),
        ]
    );
    assert_eq!(
        read(world, p_del),
        pattern(502, 1024),
        "the new transfer's bytes"
    );
    assert_pools_idle(world, &m);
}

/// A MSG_RECV buffer nobody sends to and a PASSIVE_BULK_RECV buffer whose
/// descriptor nobody uses complete once with `Timeout` when their deadline
/// comes, not before, while messages and a bulk transfer with later
/// deadlines complete in time and never time out afterwards. An add whose
/// deadline has passed is refused. An ACTIVE_BULK_SEND whose deadline
/// passes while the BTL holds its put completes with `Timeout` at once,
/// stays `InFlight` until the put's completion comes back (ignored), and
/// sends no BULK_DONE.
pub fn unmet_deadlines_complete_once_timed_out(world: &mut dyn World) {
    let mut m = Machines::new(world);
    let to_b = addr_of(world, Side::B);
    let (peer_a, peer_b) = (world.peer(Side::A), world.peer(Side::B));
    let deadline = m.now + 20 * ROUND;
    let later = deadline + 1_000_000 * ROUND;

    let r_t = m.buffer(world, Side::A, 64, Access::empty(), None);
    let p_t = m.buffer(world, Side::B, 256, Access::REMOTE_WRITE, None);
    m.add(r_t, |tm, id| tm.add_msg_recv(id, 1, 1, Some(deadline)));
    m.add(p_t, |tm, id| {
        tm.add_passive_recv(id, peer_b, Some(deadline))
    });

    let r_ok = m.buffer(world, Side::B, 300, Access::empty(), None);
    let p_ok = m.buffer(world, Side::B, 1024, Access::REMOTE_WRITE, None);
    let sends = m.buffers(world, Side::A, &[100; 3], Access::empty(), Some(600));
    let a_ok = m.buffer(world, Side::A, 1024, Access::empty(), Some(603));
    m.add(r_ok, |tm, id| tm.add_msg_recv(id, 1, 3, Some(later)));
    let desc = m.add(p_ok, |tm, id| tm.add_passive_recv(id, peer_b, Some(later)));
    m.add(a_ok, |tm, id| {
        tm.add_active_send(id, peer_a, &desc, 1024, Some(later))
    });
    for &s in &sends[..2] {
        m.add(s, |tm, id| tm.add_msg_send(id, to_b, 100, Some(later)));
    }
    m.run_until(world, "the deadlines pass", |m| {
        !m.is_open(r_t) && !m.is_open(p_t)
    });
    for (buf, queue) in [(r_t, Queue::MsgRecv), (p_t, Queue::PassiveBulkRecv)] {
        let done = m.completions(buf);
        assert_eq!(done.len(), 1, "{buf:?} completes once");
        let (at, c) = done[0];
        assert_eq!(
            (c.queue, c.result),
            (queue, Err(XferError::Timeout)),
            "{buf:?}"
        );
        assert_eq!(at, deadline, "{buf:?} times out when its deadline comes");
    }
    let now = m.now;
    assert_eq!(
        m.tm(Side::A).add_msg_recv(r_t.id, 1, 1, Some(now)),
        Err(XferError::Expired),
        "a deadline already passed"
    );
    // The others carry on, one more message after the timeouts.
    m.add(sends[2], |tm, id| {
        tm.add_msg_send(id, to_b, 100, Some(later))
    });
    m.settle(world);
    assert_eq!(m.results(r_ok), [(Queue::MsgRecv, Ok(300))]);
    assert_eq!(m.results(p_ok), [(Queue::PassiveBulkRecv, Ok(1024))]);
    assert_eq!(m.results(a_ok), [(Queue::ActiveBulkSend, Ok(1024))]);
    assert_eq!(read(world, p_ok), pattern(603, 1024), "the bulk bytes");
    let mut got: Vec<Vec<u8>> = read(world, r_ok).chunks(100).map(<[u8]>::to_vec).collect();
    got.sort_unstable();
    let mut sent: Vec<Vec<u8>> = (600..603).map(|s| pattern(s, 100)).collect();
    sent.sort_unstable();
    assert_eq!(got, sent, "the three messages");
    // Past the later deadline nothing completes again.
    m.now = later + ROUND;
    m.linger(world);
    m.assert_clean();

    // A put that outlives its buffer's deadline.
    let p_late = m.buffer(world, Side::B, 512, Access::REMOTE_WRITE, None);
    let a_late = m.buffer(world, Side::A, 512, Access::empty(), Some(604));
    let desc = m.add(p_late, |tm, id| tm.add_passive_recv(id, peer_b, None));
    let soon = m.now + ROUND;
    m.add(a_late, |tm, id| {
        tm.add_active_send(id, peer_a, &desc, 512, Some(soon))
    });
    m.run_only(world, Side::A); // issues the put
    m.now = soon;
    m.run_only(world, Side::A); // the deadline passes while the BTL holds it
    assert_eq!(
        m.results(a_late),
        [(Queue::ActiveBulkSend, Err(XferError::Timeout))]
    );
    assert_eq!(
        m.tm(Side::A).deregister_buffer(a_late.id),
        Err(XferError::InFlight),
        "the BTL still holds the put"
    );
    m.run_until(world, "the put's late completion", |m| {
        m.stats(Side::A).stale == 1
    });
    m.linger(world);
    assert!(m.is_open(p_late), "no BULK_DONE after a timeout");
    m.tm(Side::A)
        .deregister_buffer(a_late.id)
        .expect("idle once the put came back");
    m.del(p_late);
    assert_eq!(
        m.results(p_late),
        [(Queue::PassiveBulkRecv, Err(XferError::Cancelled))]
    );
    assert_pools_idle(world, &m);
}

/// B stops with a partly filled MSG_RECV buffer and two passive buffers
/// whose descriptors A holds: each completes once with `Cancelled`, while
/// A's transfers to them and a message to B still complete (B counts the
/// late BULK_DONEs as stale and drops the message). Then A stops with a
/// MSG_RECV buffer queued and a send and a put the BTL holds: each
/// completes once with `Cancelled` at once, and A is Stopped only after
/// the BTL gave both back. Each machine reports Stopping and Stopped once;
/// no add is accepted after `stop`; every buffer deregisters.
pub fn stop_completes_every_queued_buffer_once(world: &mut dyn World) {
    let mut m = Machines::new(world);
    let to_b = addr_of(world, Side::B);
    let (peer_a, peer_b) = (world.peer(Side::A), world.peer(Side::B));
    let big = descriptor_len(world);

    let r_b = m.buffer(world, Side::B, 300, Access::empty(), None);
    let pr = m.buffer(world, Side::B, 1024, Access::REMOTE_WRITE, None);
    let ps = m.buffer(world, Side::B, 1024, Access::REMOTE_READ, Some(700));
    let sends = m.buffers(world, Side::A, &[100, big], Access::empty(), Some(701));
    let (s_small, s_big) = (sends[0], sends[1]);
    let a_send = m.buffer(world, Side::A, 1024, Access::empty(), Some(703));
    let a_recv = m.buffer(world, Side::A, 1024, Access::empty(), None);
    let r_a = m.buffer(world, Side::A, 64, Access::empty(), None);

    // One message into B's buffer, which waits for two more.
    m.add(r_b, |tm, id| tm.add_msg_recv(id, 1, 3, None));
    m.add(s_small, |tm, id| tm.add_msg_send(id, to_b, 100, None));
    m.run_until(world, "the first message", |m| {
        !m.is_open(s_small) && m.arrivals(r_b).len() == 1
    });
    let d_recv = m.add(pr, |tm, id| tm.add_passive_recv(id, peer_b, None));
    let d_send = m.add(ps, |tm, id| tm.add_passive_send(id, peer_b, 1024, None));
    m.add(a_send, |tm, id| {
        tm.add_active_send(id, peer_a, &d_recv, 1024, None)
    });
    m.add(a_recv, |tm, id| {
        tm.add_active_recv(id, peer_a, &d_send, None)
    });
    m.add(s_big, |tm, id| tm.add_msg_send(id, to_b, big as u64, None));

    m.stop(Side::B);
    assert_eq!(m.tm(Side::B).state(), TmState::Stopping);
    for buf in [r_b, pr, ps] {
        assert_eq!(m.completions(buf).len(), 1, "{buf:?} completes at stop");
        assert_eq!(m.last(buf).1, Err(XferError::Cancelled), "{buf:?}");
    }
    assert_eq!(m.last(r_b).0, Queue::MsgRecv);
    assert_eq!(
        m.tm(Side::B).add_msg_recv(r_b.id, 1, 1, None),
        Err(XferError::State {
            call: "add_msg_recv",
            state: TmState::Stopping,
            needs: &[TmState::Started],
        })
    );
    m.run_until(world, "A's transfers to the stopped machine", |m| {
        !m.is_open(a_send)
            && !m.is_open(a_recv)
            && !m.is_open(s_big)
            && m.stats(Side::B).stale == 2
            && m.stats(Side::B).dropped_messages == 1
    });
    assert_eq!(m.results(a_send), [(Queue::ActiveBulkSend, Ok(1024))]);
    assert_eq!(m.results(a_recv), [(Queue::ActiveBulkRecv, Ok(1024))]);
    assert_eq!(m.results(s_big), [(Queue::MsgSend, Ok(big as u64))]);
    m.run_until(world, "B is stopped", |m| {
        m.tms[ix(Side::B)].state() == TmState::Stopped
    });

    // A stops with a receive buffer queued and a send and a put in the BTL.
    m.add(r_a, |tm, id| tm.add_msg_recv(id, 1, 1, None));
    m.add(s_big, |tm, id| tm.add_msg_send(id, to_b, big as u64, None));
    m.add(a_send, |tm, id| {
        tm.add_active_send(id, peer_a, &d_recv, 1024, None)
    });
    m.run_only(world, Side::A); // issues the send and the put
    // A BTL may finish a send on the spot; a put always ends in an event.
    let send_held = m.is_open(s_big);
    m.stop(Side::A);
    for (buf, adds) in [(r_a, 1), (s_big, 2), (a_send, 2)] {
        assert_eq!(m.completions(buf).len(), adds, "{buf:?} completes at stop");
    }
    assert_eq!(m.last(r_a), (Queue::MsgRecv, Err(XferError::Cancelled)));
    assert_eq!(
        m.last(a_send),
        (Queue::ActiveBulkSend, Err(XferError::Cancelled))
    );
    let sent = if send_held {
        Err(XferError::Cancelled)
    } else {
        Ok(big as u64)
    };
    assert_eq!(m.last(s_big), (Queue::MsgSend, sent));
    m.run_only(world, Side::A);
    assert_eq!(
        m.tm(Side::A).state(),
        TmState::Stopping,
        "stopped while the BTL still holds a send and a put"
    );
    assert_eq!(
        m.tm(Side::A).deregister_buffer(a_send.id),
        Err(XferError::InFlight)
    );
    m.run_until(world, "A is stopped", |m| {
        m.tms[ix(Side::A)].state() == TmState::Stopped
    });
    assert_eq!(
        m.stats(Side::A).stale,
        1 + u64::from(send_held),
        "the put's (and the held send's) late completions"
    );
    m.settle(world);

    for (side, buf) in [(Side::A, r_a), (Side::B, r_b)] {
        assert_eq!(
            m.states(side),
            [
                TmState::Starting,
                TmState::Started,
                TmState::Stopping,
                TmState::Stopped
            ],
            "side {side:?}"
        );
        assert_eq!(
            m.tm(side).add_msg_recv(buf.id, 1, 1, None),
            Err(XferError::State {
                call: "add_msg_recv",
                state: TmState::Stopped,
                needs: &[TmState::Started],
            }),
            "an add after stop"
        );
    }
    for buf in [r_b, pr, ps, s_small, s_big, a_send, a_recv, r_a] {
        m.tm(buf.side)
            .deregister_buffer(buf.id)
            .unwrap_or_else(|e| panic!("deregister {buf:?} after stop: {e}"));
    }
    assert_pools_idle(world, &m);
}
