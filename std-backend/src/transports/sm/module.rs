//! The shared-memory module: [`SharedMemory`] over the segments of this
//! process and its same-host peers, which it joins, watches and lets go.

use std::os::fd::OwnedFd;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::AtomicU32;
use std::time::{Duration, Instant};

use btl_core::btl::{Access, Btl, BtlError, LostReason, MemHandle, RegisterError, Undelivered};
use btl_core::endpoint::{EndpointId, ProcName, Reachability};
use btl_core::pool::{FragmentPoolsConfig, PoolCell};
use btl_core::ring::Bell;
use btl_core::sm::{AttachError, CrossCopy, SharedMemory, Transfers};

use super::SmConfig;
use super::segment::{Claimant, Segment, SegmentError, host_identity, running};
use crate::bootstrap::{Bootstrap, BootstrapError, Card, SegmentContact};
use crate::driver::heap::{Buffer, Heap};

/// Same-host peers one module joins over its life, and slots in its
/// segment: a peer that restarts takes another.
pub const SM_PEERS: usize = 256;
const REGS: usize = 16;
const OPS: usize = 64;
const EVENTS: usize = 2 * SM_PEERS;

/// How often `progress` looks whether the peers' processes still run: a
/// peer killed is lost within this of the next progress.
pub const WATCH_EVERY: Duration = Duration::from_millis(10);
/// Progress calls between two looks at the clock.
const CLOCK_EVERY: u32 = 64;

type Core<M> = SharedMemory<'static, Pin<Box<[PoolCell]>>, M, SM_PEERS, REGS, OPS, EVENTS>;

/// Why a shared-memory module could not be opened, or a peer joined.
#[derive(Debug, thiserror::Error)]
pub enum SmError {
    /// The segment could not be made or mapped.
    #[error(transparent)]
    Segment(#[from] SegmentError),
    /// The host cannot be told apart (no boot id, no `/dev/shm`).
    #[error("sm: this host's identity cannot be read ({0}): it needs Linux's /proc and /dev/shm")]
    Host(std::io::Error),
    /// The card could not be published or looked up.
    #[error("sm: {0}")]
    Bootstrap(#[from] BootstrapError),
    /// The pools could not be made.
    #[error("sm: fragment pools: {0:?}")]
    Pools(btl_core::pool::PoolError),
}

/// A shared-memory module of one process, reaching the processes of its
/// host that have one too ([`SmComponent`](super::SmComponent)).
///
/// The whole [`Btl`] contract holds over it: every operation completes
/// once, a peer that leaves is `PeerLeft`, one whose process ends without
/// a goodbye is lost as [`LostReason::Exited`] within [`WATCH_EVERY`] of
/// progress once what it wrote before has been read, one that breaks the
/// protocol as `ProtocolViolation`.
pub struct SmModule<M: Buffer = Vec<u8>> {
    /// First, so that it is dropped before the memory its rings lie in;
    /// boxed, as it holds a place for every peer (about 150 KB).
    core: Box<Core<M>>,
    /// The peers joined, by endpoint.
    joined: Vec<Joined>,
    /// Peers whose segment this side claimed a slot in, waiting for their
    /// claim in this one.
    half: Vec<Half>,
    /// What each slot of this process's segment is used for.
    slots: Vec<SlotUse>,
    /// The claim count of this segment last looked at.
    claims_seen: u32,
    mine: Segment,
    me: ProcName,
    card: Card,
    bootstrap: Arc<dyn Bootstrap>,
    config: SmConfig,
    polls: u32,
    next_watch: Instant,
    finalized: bool,
}

/// A peer joined: its segment, the slot of this segment it writes, and
/// its process, watched.
struct Joined {
    peer: Claimant,
    theirs: Segment,
    inbound: usize,
    /// Readable once the process has ended; `None` once let go.
    pidfd: Option<OwnedFd>,
}

/// A peer whose segment holds this side's claim, in slot `out`.
struct Half {
    peer: Claimant,
    theirs: Segment,
    out: usize,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum SlotUse {
    /// Free, or claimed by a peer not looked at yet.
    Open,
    /// The inbound ring of a joined peer.
    Joined,
    /// A claim that was refused, or a peer lost while its process runs:
    /// kept from reuse while that process could still write it.
    Shut,
}

impl<M: Buffer> SmModule<M> {
    /// Makes `me`'s segment, with a ring of `config.fifo_size` bytes per
    /// slot, and publishes it on `me`'s card.
    pub fn open(
        me: ProcName,
        config: SmConfig,
        pools: FragmentPoolsConfig,
        bootstrap: Arc<dyn Bootstrap>,
    ) -> Result<Self, SmError> {
        let host = host_identity().map_err(SmError::Host)?;
        let name = segment_name(me);
        let mine = Segment::create(&name, SM_PEERS, config.fifo_size / 4)?;
        let pools = Heap::<Vec<u8>>::pools(pools).map_err(SmError::Pools)?;
        let mut card = Card::new(me);
        card.segment = Some(SegmentContact {
            segment: name,
            host,
            pid: std::process::id(),
        });
        bootstrap.publish(&card)?;
        let mut core = Box::new(SharedMemory::new(pools));
        if config.single_copy_limit > 0 {
            core.set_one_copy_min(config.single_copy_limit as u64);
        }
        Ok(SmModule {
            core,
            joined: Vec::new(),
            half: Vec::new(),
            slots: vec![SlotUse::Open; mine.slots()],
            claims_seen: 0,
            mine,
            me,
            card,
            bootstrap,
            config,
            polls: 0,
            next_watch: Instant::now() + WATCH_EVERY,
            finalized: false,
        })
    }

    /// The card this module published.
    pub fn card(&self) -> &Card {
        &self.card
    }

    /// This process's segment.
    pub fn segment(&self) -> &Segment {
        &self.mine
    }

    /// Joins `proc` (as `add_procs` does, waiting up to `timeout`) and
    /// hands back its endpoint, or says why it cannot: not on this host,
    /// no segment, or it did not join back in time.
    pub fn reach(
        &mut self,
        proc: ProcName,
        timeout: Duration,
    ) -> Result<EndpointId, crate::ReachError> {
        let join = |reason: String| crate::ReachError::Join { proc, reason };
        if self.finalized {
            return Err(crate::ReachError::Btl {
                proc,
                error: BtlError::Finalized,
            });
        }
        if proc == self.me {
            return Err(join("it is this process: the self BTL reaches it".into()));
        }
        match self.join(proc, Instant::now() + timeout) {
            Ok(Some(_)) => btl_core::btl::add_proc(self.core.as_mut(), proc)
                .map_err(|error| crate::ReachError::Btl { proc, error })?
                .ok_or_else(|| join("it was lost meanwhile".into())),
            Ok(None) => Err(join(
                "it is not on this host, or has no shared-memory segment (its card has no sm line, or names another host)".into(),
            )),
            Err(reason) => Err(join(reason)),
        }
    }

    /// The peers joined now.
    pub fn joined(&self) -> usize {
        self.joined.len()
    }

    /// Whether a put or get under way reads or writes registration
    /// `handle` (its deregistration is refused until they end).
    pub fn region_in_use(&self, handle: MemHandle) -> bool {
        self.core.region_in_use(handle)
    }

    /// How this module's puts and gets have gone: through the rings, or
    /// in one copy by the peer (cross-memory attach).
    pub fn transfers(&self) -> Transfers {
        self.core.transfers()
    }

    /// The endpoint of `proc`, joining it first if it is not: its card
    /// looked up, a slot claimed in its segment, and its claim in this
    /// one waited for until `deadline`. `Ok(None)`: it is not on this
    /// host, or has no segment.
    fn join(&mut self, proc: ProcName, deadline: Instant) -> Result<Option<EndpointId>, String> {
        if proc == self.me {
            return Ok(None);
        }
        self.accept_claims();
        if let Some(ep) = self.endpoint_of(proc) {
            return Ok(Some(ep));
        }
        if !self.half.iter().any(|h| h.peer.proc == proc) {
            let card = self.live_card(proc, deadline)?;
            let Some(peer) = self.reachable(&card)? else {
                return Ok(None);
            };
            let half = self.claim_in(peer, &card)?;
            self.half.push(half);
        }
        loop {
            self.accept_claims();
            if let Some(ep) = self.endpoint_of(proc) {
                return Ok(Some(ep));
            }
            if Instant::now() >= deadline {
                return Err(format!(
                    "process {proc} did not join back within {:?}: it is to add this process, or to call progress (btl_sm_connect_timeout)",
                    self.config.connect_timeout
                ));
            }
            std::thread::sleep(Duration::from_micros(100));
        }
    }

    /// `proc`'s card, looked up again until the process it names runs: a
    /// process killed leaves its card behind until its next start
    /// replaces it.
    fn live_card(&self, proc: ProcName, deadline: Instant) -> Result<Card, String> {
        loop {
            let wait = deadline.saturating_duration_since(Instant::now());
            let card = self
                .bootstrap
                .lookup(proc, wait)
                .map_err(|e| e.to_string())?;
            match &card.segment {
                Some(s) if !running(s.pid) => {
                    if Instant::now() >= deadline {
                        return Err(format!(
                            "its card names process {}, which has ended, and no new start replaced it",
                            s.pid
                        ));
                    }
                    std::thread::sleep(Duration::from_millis(1));
                }
                _ => return Ok(card),
            }
        }
    }

    /// The live endpoint of `proc`, if joined.
    fn endpoint_of(&self, proc: ProcName) -> Option<EndpointId> {
        self.joined
            .iter()
            .enumerate()
            .rev()
            .map(|(i, j)| (EndpointId(i as u32), j))
            .find(|(ep, j)| j.peer.proc == proc && self.core.lost(*ep).is_none())
            .map(|(ep, _)| ep)
    }

    /// The peer `card` names, if it is on this host with a segment.
    fn reachable(&self, card: &Card) -> Result<Option<Claimant>, String> {
        let Some(contact) = &card.segment else {
            return Ok(None);
        };
        let host = self.card.segment.as_ref().map(|s| s.host.as_str());
        if host != Some(contact.host.as_str()) {
            return Ok(None);
        }
        Ok(Some(Claimant {
            proc: card.proc,
            pid: contact.pid,
            cross: false,
        }))
    }

    /// Maps `peer`'s segment and claims a slot there for this process.
    fn claim_in(&self, peer: Claimant, card: &Card) -> Result<Half, String> {
        let contact = card.segment.as_ref().ok_or("no segment on its card")?;
        let theirs = Segment::open(&contact.segment).map_err(|e| e.to_string())?;
        if theirs.maker() != peer.pid {
            return Err(format!(
                "its segment {} was made by process {}, not by process {} its card names: a stale card",
                contact.segment,
                theirs.maker(),
                peer.pid
            ));
        }
        let cross = self.config.single_copy_limit > 0 && self.may_copy_into(peer, &theirs);
        let me = Claimant {
            proc: self.me,
            pid: std::process::id(),
            cross,
        };
        let out = theirs.claim(me).ok_or_else(|| {
            format!(
                "its segment {} has no free slot (it has {SM_PEERS} peers)",
                contact.segment
            )
        })?;
        Ok(Half {
            peer: Claimant { cross, ..peer },
            theirs,
            out,
        })
    }

    /// Whether this process may copy straight into and out of `peer`'s
    /// memory: it reads the first word of the peer's own mapping of its
    /// segment, which must be the segment's magic. Says why not, once per
    /// peer, when the kernel refuses.
    fn may_copy_into(&self, peer: Claimant, theirs: &Segment) -> bool {
        let mut word = [0u8; 4];
        if cross_read(peer.pid, theirs.home_address(), &mut word) {
            return u32::from_le_bytes(word) == super::segment::MAGIC;
        }
        let error = std::io::Error::last_os_error();
        let yama = std::fs::read_to_string("/proc/sys/kernel/yama/ptrace_scope")
            .map(|s| format!("; kernel.yama.ptrace_scope is {}", s.trim()))
            .unwrap_or_default();
        tracing::info!(
            "sm {}: no cross-memory attach to process {} ({error}{yama}): its large puts and gets go through the rings, in two copies (a ptrace_scope of 0 allows it between processes of one user)",
            self.me,
            peer.proc
        );
        false
    }

    /// Looks at the claims in this segment when their count changed, and
    /// joins each new claimant: one this side claimed in already, or one
    /// that reached this process first (its card looked up, a slot claimed
    /// back). A claim by a peer already joined is a new start of it.
    fn accept_claims(&mut self) {
        let count = self.mine.claims();
        if count == self.claims_seen {
            return;
        }
        self.claims_seen = count;
        for slot in 0..self.slots.len() {
            if self.slots[slot] != SlotUse::Open {
                continue;
            }
            let Some(claim) = self.mine.claimant(slot) else {
                continue;
            };
            match self.accept(slot, claim) {
                Ok(()) => self.slots[slot] = SlotUse::Joined,
                Err(e) => {
                    tracing::warn!(
                        "sm {}: refused the claim of process {} (pid {}): {e}",
                        self.me,
                        claim.proc,
                        claim.pid
                    );
                    self.slots[slot] = SlotUse::Shut;
                }
            }
        }
    }

    fn accept(&mut self, slot: usize, claim: Claimant) -> Result<(), String> {
        if let Some(ep) = self.endpoint_of(claim.proc) {
            self.core.lose(ep, LostReason::Restarted);
            self.let_go(ep);
        }
        let half = match self.half.iter().position(|h| h.peer.proc == claim.proc) {
            Some(i) if self.half[i].peer.pid == claim.pid => self.half.swap_remove(i),
            stale => {
                // A claim made in an earlier start's segment waits for
                // nothing now.
                if let Some(i) = stale {
                    self.half.swap_remove(i);
                }
                let card = self
                    .bootstrap
                    .lookup(claim.proc, Duration::from_millis(100))
                    .map_err(|e| e.to_string())?;
                let peer = self
                    .reachable(&card)?
                    .ok_or("its card names no segment on this host")?;
                self.claim_in(peer, &card)?
            }
        };
        if half.peer.pid != claim.pid {
            return Err(format!(
                "its claim says process {}, its card {}",
                claim.pid, half.peer.pid
            ));
        }
        let words = |segment: &Segment, slot| {
            segment
                .ring_words_of(slot)
                .map(|w| w as *const [AtomicU32])
                .ok_or_else(|| "a slot without a ring".to_owned())
        };
        let (tx, rx) = (words(&half.theirs, half.out)?, words(&self.mine, slot)?);
        // SAFETY: both rings lie in mappings this module keeps until it
        // drops: `rx` in `mine`, `tx` in `half.theirs`, which moves into
        // `joined` below (moving a `Segment` does not move its mapping; a
        // lost peer's is vacated, never unmapped, before then). `core`,
        // which holds them, is the module's first field, so it is dropped
        // before either mapping.
        let (tx, rx) = unsafe { (&*tx, &*rx) };
        let ep = match self.core.attach(claim.proc, tx, rx) {
            Ok(ep) => ep,
            Err(AttachError::Full) => return Err(format!("this module has {SM_PEERS} peers")),
            Err(e) => return Err(format!("its rings cannot be used: {e:?}")),
        };
        debug_assert_eq!(ep.0 as usize, self.joined.len(), "endpoints in order");
        let (state, sequence) = half.theirs.bell_words();
        let (state, sequence) = (state as *const AtomicU32, sequence as *const AtomicU32);
        // SAFETY: as for the rings above: the words lie in `half.theirs`'s
        // mapping, kept until after `core`, which holds them, is dropped.
        let (state, sequence) = unsafe { (&*state, &*sequence) };
        self.core.set_bell(ep, Bell::new(state, sequence, wake));
        let cross = half.peer.cross.then_some(CrossCopy {
            process: claim.pid,
            read: cross_read,
            write: cross_write,
        });
        self.core.set_cross_copy(ep, cross, claim.cross);
        // A peer that joined first can be answered before it is added.
        let _ = btl_core::btl::add_proc(self.core.as_mut(), claim.proc);
        let pidfd = rustix::process::Pid::from_raw(claim.pid as i32).and_then(|pid| {
            rustix::process::pidfd_open(pid, rustix::process::PidfdFlags::NONBLOCK).ok()
        });
        self.joined.push(Joined {
            peer: claim,
            theirs: half.theirs,
            inbound: slot,
            pidfd,
        });
        Ok(())
    }

    /// Loses each peer whose process has ended, and lets go of every peer
    /// lost since the last look.
    fn watch(&mut self) {
        // A batch of pidfds at a time, on the stack: the watch runs every
        // `WATCH_EVERY` of a busy module's life and allocates nothing.
        const BATCH: usize = 64;
        let zero = rustix::event::Timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        let mut from = 0;
        while from < self.joined.len() {
            let mut ended: heapless::Vec<usize, BATCH> = heapless::Vec::new();
            {
                let mut watched: heapless::Vec<usize, BATCH> = heapless::Vec::new();
                let mut polled: heapless::Vec<rustix::event::PollFd<'_>, BATCH> =
                    heapless::Vec::new();
                while from < self.joined.len() && !watched.is_full() {
                    if let Some(fd) = self.joined[from].pidfd.as_ref() {
                        let _ = watched.push(from);
                        let _ = polled
                            .push(rustix::event::PollFd::new(fd, rustix::event::PollFlags::IN));
                    }
                    from += 1;
                }
                if !polled.is_empty()
                    && rustix::event::poll(&mut polled, Some(&zero)).is_ok_and(|n| n > 0)
                {
                    for (p, &i) in polled.iter().zip(&watched) {
                        if !p.revents().is_empty() {
                            let _ = ended.push(i);
                        }
                    }
                }
            }
            for &i in &ended {
                // What it wrote before it ended is read first: it is lost
                // at a later watch, once its ring is empty (or at its
                // goodbye, as having left).
                let ep = EndpointId(i as u32);
                if !self.core.unread(ep) {
                    self.core.lose(ep, LostReason::Exited);
                }
            }
        }
        for i in 0..self.joined.len() {
            if self.joined[i].pidfd.is_some() && self.core.lost(EndpointId(i as u32)).is_some() {
                self.let_go(EndpointId(i as u32));
            }
        }
    }

    /// Lets go of lost peer `ep`: its segment vacated, and its slot here
    /// reopened once its process cannot write it any more (it ended, or
    /// left).
    fn let_go(&mut self, ep: EndpointId) {
        let reason = self.core.lost(ep);
        let Some(j) = self.joined.get_mut(ep.0 as usize) else {
            return;
        };
        if j.pidfd.take().is_none() {
            return;
        }
        if let Err(e) = j.theirs.vacate() {
            tracing::warn!(
                "sm {}: letting go of {}: {e}",
                self.me,
                j.theirs.path().display()
            );
        }
        let done = matches!(reason, Some(LostReason::Exited | LostReason::Left));
        self.slots[j.inbound] = if done && self.mine.reopen(j.inbound).is_ok() {
            SlotUse::Open
        } else {
            SlotUse::Shut
        };
    }

    /// Every [`CLOCK_EVERY`] calls (or at once when `now`), joins peers
    /// that reached this process, and looks at the clock to watch the
    /// peers every [`WATCH_EVERY`]: the busy path of `progress` is one
    /// count.
    #[inline]
    fn housekeeping(&mut self, now: bool) {
        self.polls = self.polls.wrapping_add(1);
        if now || self.polls.is_multiple_of(CLOCK_EVERY) {
            self.accept_claims();
            let now = Instant::now();
            if now >= self.next_watch {
                self.next_watch = now + WATCH_EVERY;
                self.watch();
            }
        }
    }

    /// Moves the module forward until an event is ready or `timeout` has
    /// passed; how many events are ready. It polls for up to
    /// `SmConfig::spin` (50 µs), then sleeps until a peer pushes a record
    /// to it: the peers' pushes wake it (a futex on a word of its
    /// segment), and it wakes every [`WATCH_EVERY`] to watch the peers'
    /// processes. A module that never waits costs its peers nothing: they
    /// wake only one that has slept.
    pub fn wait(&mut self, timeout: Duration) -> usize {
        let start = Instant::now();
        let (state, sequence) = self.mine.bell_words();
        let (state, sequence) = (state as *const AtomicU32, sequence as *const AtomicU32);
        // SAFETY: the words lie in this module's own segment, mapped for
        // as long as `self` lives, and are only read and written as
        // atomics; the borrow of `self.mine` is given up so that `self`
        // can be moved forward meanwhile.
        let bell = Bell::new(unsafe { &*state }, unsafe { &*sequence }, wake);
        bell.awake();
        loop {
            let ready = self.progress();
            if ready > 0 {
                return ready;
            }
            let waited = start.elapsed();
            if waited >= timeout {
                return 0;
            }
            if waited < self.config.spin {
                std::hint::spin_loop();
                continue;
            }
            let seen = bell.going_to_sleep();
            let ready = self.progress();
            if ready > 0 {
                bell.awake();
                return ready;
            }
            let nap = (timeout - waited).min(WATCH_EVERY);
            let nap = rustix::thread::futex::Timespec {
                tv_sec: nap.as_secs() as i64,
                tv_nsec: i64::from(nap.subsec_nanos()),
            };
            let _ = rustix::thread::futex::wait(
                bell.sequence(),
                rustix::thread::futex::Flags::empty(),
                seen,
                Some(&nap),
            );
            bell.awake();
            self.housekeeping(true);
        }
    }

    /// Waits up to `timeout` for an event that `take` takes, handing it
    /// every event until then (as [`Module::wait_for`](crate::Module::wait_for)).
    pub fn wait_for<R>(
        &mut self,
        timeout: Duration,
        take: impl FnMut(btl_core::btl::Event<'_>) -> Option<R>,
    ) -> Result<R, crate::WaitError> {
        crate::driver::module::wait_for_event(self, timeout, take, |m, left| {
            m.wait(left);
            Ok(())
        })
    }
}

impl<M: Buffer> Btl for SmModule<M> {
    type Memory = M;

    btl_core::forward_btl_operations!(core);

    /// Joins each process of this host: its card looked up, and its claim
    /// in this segment waited for, up to `btl_sm_connect_timeout` in all.
    /// A process of another host, or without a segment, is unreachable
    /// here; one that does not join back in time too, with a warning.
    fn add_procs(
        &mut self,
        procs: &[ProcName],
        endpoints: &mut [Option<EndpointId>],
        reachable: &mut Reachability<'_>,
    ) -> Result<(), BtlError> {
        if self.finalized {
            return Err(BtlError::Finalized);
        }
        let deadline = Instant::now() + self.config.connect_timeout;
        for (i, (proc, ep)) in procs.iter().zip(endpoints.iter_mut()).enumerate() {
            *ep = None;
            match self.join(*proc, deadline) {
                Ok(Some(_)) => {
                    let one = btl_core::btl::add_proc(self.core.as_mut(), *proc)?;
                    if one.is_some() && reachable.set(i) {
                        *ep = one;
                    }
                }
                Ok(None) => {
                    tracing::debug!("sm {}: process {proc} is not on this host", self.me);
                }
                Err(e) => tracing::warn!("sm {}: process {proc} is not reachable: {e}", self.me),
            }
        }
        Ok(())
    }

    fn del_procs(&mut self, endpoints: &[EndpointId]) -> Result<(), BtlError> {
        self.core.del_procs(endpoints)
    }

    fn register_mem(&mut self, region: M, access: Access) -> Result<MemHandle, RegisterError<M>> {
        self.core.register_mem(region, access)
    }

    fn deregister_mem(&mut self, handle: MemHandle) -> Result<M, BtlError> {
        self.core.deregister_mem(handle)
    }

    /// Reads every peer's ring once, carries puts and gets on, joins peers
    /// that reached this process, and watches the peers' processes; no
    /// system call but the watch's, every [`WATCH_EVERY`].
    fn progress(&mut self) -> usize {
        self.housekeeping(false);
        self.core.progress()
    }

    /// Fails what is under way and says goodbye to every peer, waiting up
    /// to a second for a full ring to take it.
    fn finalize(&mut self) -> Undelivered {
        self.finalized = true;
        let undelivered = self.core.finalize();
        let start = Instant::now();
        while self.core.owes_goodbyes() && start.elapsed() < Duration::from_secs(1) {
            self.housekeeping(false);
            self.core.progress();
            std::thread::yield_now();
        }
        undelivered
    }
}

impl<M: Buffer> Drop for SmModule<M> {
    /// Finalizes a module dropped without it, so that its peers hear the
    /// goodbye, and takes its card back; the segment goes with the module.
    fn drop(&mut self) {
        let _ = self.finalize();
        let _ = self.bootstrap.withdraw(&self.card);
    }
}

impl<M: Buffer> std::fmt::Debug for SmModule<M> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SmModule")
            .field("me", &self.me)
            .field("segment", &self.mine.path())
            .field("joined", &self.joined.len())
            .field("half", &self.half.len())
            .finish()
    }
}

/// Copies `into.len()` bytes at `address` in process `pid` into `into`
/// (`process_vm_readv`); whether they all came.
fn cross_read(pid: u32, address: u64, into: &mut [u8]) -> bool {
    cross(
        pid,
        address,
        into.as_mut_ptr(),
        into.len(),
        libc::process_vm_readv,
    )
}

/// Copies `from` to `address` in process `pid` (`process_vm_writev`);
/// whether it all went. The kernel only reads `from`.
fn cross_write(pid: u32, address: u64, from: &[u8]) -> bool {
    cross(
        pid,
        address,
        from.as_ptr().cast_mut(),
        from.len(),
        libc::process_vm_writev,
    )
}

/// The signature `process_vm_readv` and `process_vm_writev` share.
type CrossCall = unsafe extern "C" fn(
    libc::pid_t,
    *const libc::iovec,
    libc::c_ulong,
    *const libc::iovec,
    libc::c_ulong,
    libc::c_ulong,
) -> libc::ssize_t;

/// Moves `len` bytes between `local` in this process and `address` in
/// process `pid` with `call`, as many calls as a partial copy takes;
/// whether they all moved.
fn cross(pid: u32, address: u64, local: *mut u8, len: usize, call: CrossCall) -> bool {
    let mut done = 0;
    while done < len {
        let here = libc::iovec {
            iov_base: local.wrapping_add(done).cast(),
            iov_len: len - done,
        };
        let there = libc::iovec {
            iov_base: address.wrapping_add(done as u64) as usize as *mut libc::c_void,
            iov_len: len - done,
        };
        // SAFETY: `here` is the rest of the `len` bytes at `local`, a
        // buffer the caller borrows for this call (mutably for a read,
        // which writes it; a write only reads it); `there` is only an
        // address in the other process, which the kernel checks (a wrong
        // one fails with EFAULT).
        let n = unsafe { call(pid as libc::pid_t, &here, 1, &there, 1, 0) };
        if n <= 0 {
            return false;
        }
        done += n as usize;
    }
    true
}

/// Wakes the process sleeping on `sequence`, a word of its segment (a
/// futex of memory shared between processes, so not a private one).
fn wake(sequence: &AtomicU32) {
    let _ = rustix::thread::futex::wake(sequence, rustix::thread::futex::Flags::empty(), 1);
}

/// The segment of process `me`: the user's, the job's and the rank's, so
/// that the next start of the same process finds what a crash left.
fn segment_name(me: ProcName) -> String {
    format!(
        "btl-{}-{}-{}",
        rustix::process::geteuid().as_raw(),
        me.job,
        me.rank
    )
}
