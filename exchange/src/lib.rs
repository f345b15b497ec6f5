//! `btl-exchange`: one conversation between two processes that checks, byte
//! for byte, that a peer speaks btl: messages both ways, a put with a
//! notice into the peer's memory, and a get from it. It runs over any
//! [`Btl`], allocates nothing and needs no operating system, so the same
//! conversation runs on a board (over smoltcp), in a Linux process (over
//! btl-std's sockets) and between the two.
//!
//! Each side registers one region of `2 × bulk` bytes and hands its
//! handle to an [`Exchange`] with its [`Role`]. The region's first half
//! receives the peer's put; the second half is what the peer gets. The
//! lead sends its region's key first and the follower answers with its
//! own, so that only the lead opens a connection (the follower may start
//! first and wait). Then:
//!
//! ```text
//!   lead                                  follow
//!   PING × PINGS (sizes 1 B .. 1400 B) ─▶
//!                                      ◀─ PONG, the same bytes
//!   put_notify: lead's pattern into
//!   follow's first half               ─▶ PutArrived: checks the pattern
//!                                      ◀─ VERDICT (1: intact)
//!   get: follow's second half into
//!   lead's second half; checks the
//!   follow's pattern
//!   DONE                              ─▶ done
//! ```
//!
//! Both directions are checked by running it twice with the roles swapped
//! (a new [`Exchange`] each time, over the same modules).

#![no_std]

use btl_core::btl::{Btl, BtlError, Event, LostReason, MemHandle, OpId, RemoteKey, Tag};
use btl_core::endpoint::EndpointId;

/// The job key both sides of an interop run hold (the engines check it in
/// their handshake).
pub const JOB_KEY: &[u8] = b"btl interop job key";

/// A region's key, sent first by both sides.
pub const KEY: Tag = Tag(0x90);
/// A message the follower answers.
pub const PING: Tag = Tag(0x91);
/// The answer: the same bytes.
pub const PONG: Tag = Tag(0x92);
/// The follower's word on the put: `[1]` when every byte was as expected.
pub const VERDICT: Tag = Tag(0x93);
/// The end of the conversation.
pub const DONE: Tag = Tag(0x94);

/// Messages the lead sends.
pub const PINGS: u32 = 64;
/// Pings in flight at the most.
const WINDOW: u32 = 8;
/// Sizes the pings take in turn: all fit one UDP datagram on Ethernet.
const PING_SIZES: [usize; 6] = [1, 7, 64, 200, 1000, MAX_PING];
/// The largest ping.
const MAX_PING: usize = 1400;

/// Which part a side plays.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// Sends the pings, puts and gets.
    Lead,
    /// Answers.
    Follow,
}

/// Byte `i` of what `role` puts in its region for the other side to
/// check.
pub fn pattern(role: Role, i: usize) -> u8 {
    match role {
        Role::Lead => (i.wrapping_mul(7).wrapping_add(1) % 251) as u8,
        Role::Follow => (i.wrapping_mul(13).wrapping_add(5) % 253) as u8,
    }
}

/// Byte `j` of ping `n`.
fn ping_byte(n: u32, j: usize) -> u8 {
    (n as usize).wrapping_mul(31).wrapping_add(j) as u8
}

/// Why a conversation failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExchangeError {
    /// The BTL refused or failed an operation.
    Btl(BtlError),
    /// The region is not registered, or shorter than `2 × bulk`.
    Region,
    /// A pong's bytes differ from its ping's.
    Pong(u32),
    /// The follower found the put's bytes changed.
    PutCorrupted,
    /// The bytes the lead got differ from the follower's pattern, at this
    /// offset.
    GetCorrupted(usize),
    /// The peer sent what this step does not expect.
    Unexpected(Tag),
}

impl From<BtlError> for ExchangeError {
    fn from(e: BtlError) -> Self {
        ExchangeError::Btl(e)
    }
}

/// Where a conversation stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Step {
    /// Waiting for the peer's key (the lead also for room to send pings).
    Keys,
    /// The lead's pings are out; pongs come back.
    Pings,
    /// The lead's put is out; its completion and the verdict come.
    Put { completed: bool, verdict: bool },
    /// The lead's get is out.
    Get,
    /// Over.
    Done,
}

/// What a side sends next: an answer, a verdict or the end.
#[derive(Clone, Copy)]
struct Outgoing {
    tag: Tag,
    len: usize,
    data: [u8; MAX_PING],
}

impl Outgoing {
    fn new(tag: Tag, bytes: &[u8]) -> Self {
        let mut data = [0; MAX_PING];
        let len = bytes.len().min(MAX_PING);
        data[..len].copy_from_slice(&bytes[..len]);
        Outgoing { tag, len, data }
    }
}

/// What an event asks of this side, beyond an answer (which it leaves
/// in `pending`).
enum Action {
    Nothing,
    /// The peer's put landed in this slice of the region: check it.
    CheckPut {
        offset: u64,
        len: u64,
    },
    /// The get landed: check it.
    CheckGet,
}

/// One side of the conversation.
pub struct Exchange {
    role: Role,
    peer: EndpointId,
    region: MemHandle,
    bulk: u64,
    theirs: Option<RemoteKey>,
    key_sent: bool,
    step: Step,
    sent: u32,
    answered: u32,
    op: Option<OpId>,
    /// An answer the BTL had no room for yet: no event is taken until it
    /// is sent, which holds the peer back.
    pending: Option<Outgoing>,
}

impl Exchange {
    /// `role`'s side towards `peer`, over `region` (registered with remote
    /// read and write, `2 × bulk` bytes). Writes this side's pattern where
    /// the peer will get it from and clears where the peer's data lands.
    pub fn new<B: Btl + ?Sized>(
        btl: &mut B,
        role: Role,
        peer: EndpointId,
        region: MemHandle,
        bulk: u64,
    ) -> Result<Self, ExchangeError> {
        let half = usize::try_from(bulk).map_err(|_| ExchangeError::Region)?;
        let bytes = btl.region_mut(region).map_err(|_| ExchangeError::Region)?;
        let (first, second) = bytes
            .get_mut(..2 * half)
            .ok_or(ExchangeError::Region)?
            .split_at_mut(half);
        // The lead puts from its first half and gets into its second; the
        // follower receives the put in its first half and is got from its
        // second.
        let (source, landing) = match role {
            Role::Lead => (first, second),
            Role::Follow => (second, first),
        };
        for (i, b) in source.iter_mut().enumerate() {
            *b = pattern(role, i);
        }
        landing.fill(0);
        Ok(Exchange {
            role,
            peer,
            region,
            bulk,
            theirs: None,
            key_sent: false,
            step: Step::Keys,
            sent: 0,
            answered: 0,
            op: None,
            pending: None,
        })
    }

    /// Whether the conversation is over, on this side.
    pub fn is_done(&self) -> bool {
        self.step == Step::Done && self.pending.is_none()
    }

    /// Moves the conversation on: takes this side's events and starts
    /// what they allow. Call it after each progress of the BTL until
    /// [`is_done`](Self::is_done); the caller bounds the time.
    pub fn poll<B: Btl + ?Sized>(&mut self, btl: &mut B) -> Result<(), ExchangeError> {
        // The lead speaks first; the follower answers its key with its
        // own, so that it never opens a connection itself: it may be
        // started before the lead listens.
        if self.role == Role::Lead
            && !self.key_sent
            && sent(
                btl,
                self.peer,
                &Outgoing::new(KEY, &self.region.remote_key().to_bytes()),
            )?
        {
            self.key_sent = true;
        }
        loop {
            if let Some(out) = self.pending {
                if !sent(btl, self.peer, &out)? {
                    break;
                }
                self.pending = None;
            }
            if self.step == Step::Done {
                // What comes next is for the next conversation.
                break;
            }
            let Some(event) = btl.poll_event() else {
                break;
            };
            match self.on_event(event)? {
                Action::Nothing => {}
                Action::CheckPut { offset, len } => {
                    let intact = self.check(btl, offset, len, Role::Lead).is_none();
                    self.pending = Some(Outgoing::new(VERDICT, &[u8::from(intact)]));
                }
                Action::CheckGet => {
                    if let Some(at) = self.check(btl, self.bulk, self.bulk, Role::Follow) {
                        return Err(ExchangeError::GetCorrupted(at));
                    }
                    self.pending = Some(Outgoing::new(DONE, &[]));
                    self.step = Step::Done;
                }
            }
        }
        self.start(btl)
    }

    /// Where `len` bytes of the region from `offset` first differ from
    /// `role`'s pattern, if they do.
    fn check<B: Btl + ?Sized>(&self, btl: &B, offset: u64, len: u64, role: Role) -> Option<usize> {
        let bytes = btl.region(self.region).ok()?;
        let from = usize::try_from(offset).ok()?;
        let to = from.checked_add(usize::try_from(len).ok()?)?;
        let Some(bytes) = bytes.get(from..to) else {
            return Some(0);
        };
        bytes
            .iter()
            .enumerate()
            .position(|(i, &b)| b != pattern(role, i))
    }

    /// What one event means for this side.
    fn on_event(&mut self, event: Event<'_>) -> Result<Action, ExchangeError> {
        match event {
            Event::Received(m) if m.from == self.peer => match m.tag {
                KEY => {
                    self.theirs = RemoteKey::from_bytes(m.data);
                    if self.role == Role::Follow {
                        let key = self.region.remote_key().to_bytes();
                        self.pending = Some(Outgoing::new(KEY, &key));
                    }
                    Ok(Action::Nothing)
                }
                PING if self.role == Role::Follow => {
                    self.pending = Some(Outgoing::new(PONG, m.data));
                    Ok(Action::Nothing)
                }
                PONG if self.role == Role::Lead && self.step == Step::Pings => {
                    let n = self.answered;
                    let size = PING_SIZES[n as usize % PING_SIZES.len()];
                    let intact = m.data.len() == size
                        && m.data
                            .iter()
                            .enumerate()
                            .all(|(j, &b)| b == ping_byte(n, j));
                    if !intact {
                        return Err(ExchangeError::Pong(n));
                    }
                    self.answered += 1;
                    Ok(Action::Nothing)
                }
                VERDICT if self.role == Role::Lead => {
                    if m.data != [1] {
                        return Err(ExchangeError::PutCorrupted);
                    }
                    if let Step::Put { completed, .. } = self.step {
                        self.step = Step::Put {
                            completed,
                            verdict: true,
                        };
                    }
                    Ok(Action::Nothing)
                }
                DONE if self.role == Role::Follow => {
                    self.step = Step::Done;
                    Ok(Action::Nothing)
                }
                tag => Err(ExchangeError::Unexpected(tag)),
            },
            Event::PutArrived { from, slice, .. }
                if from == self.peer && slice.handle == self.region =>
            {
                Ok(Action::CheckPut {
                    offset: slice.offset,
                    len: slice.len,
                })
            }
            Event::PutComplete { op, result, .. } if Some(op) == self.op => {
                result?;
                if let Step::Put { verdict, .. } = self.step {
                    self.step = Step::Put {
                        completed: true,
                        verdict,
                    };
                }
                Ok(Action::Nothing)
            }
            Event::GetComplete { op, result, .. } if Some(op) == self.op => {
                result?;
                self.op = None;
                Ok(Action::CheckGet)
            }
            Event::SendComplete { result, .. } => {
                result?;
                Ok(Action::Nothing)
            }
            Event::Error(e) => Err(e.error.into()),
            Event::PeerLeft { .. } => Err(BtlError::PeerLost(LostReason::Left).into()),
            _ => Ok(Action::Nothing),
        }
    }

    /// Starts what the lead's step allows.
    fn start<B: Btl + ?Sized>(&mut self, btl: &mut B) -> Result<(), ExchangeError> {
        let Some(theirs) = self.theirs else {
            return Ok(());
        };
        let bulk = self.bulk;
        match (self.role, self.step) {
            (Role::Lead, Step::Keys) => self.step = Step::Pings,
            (Role::Lead, Step::Pings) if self.answered == PINGS => {
                let local = self.region.slice(0, bulk);
                self.op = Some(btl.put_notify(self.peer, local, theirs.slice(0, bulk), 0, 0)?);
                self.step = Step::Put {
                    completed: false,
                    verdict: false,
                };
            }
            (
                Role::Lead,
                Step::Put {
                    completed: true,
                    verdict: true,
                },
            ) => {
                let local = self.region.slice(bulk, bulk);
                self.op = Some(btl.get(self.peer, local, theirs.slice(bulk, bulk), 0)?);
                self.step = Step::Get;
            }
            _ => {}
        }
        if self.role == Role::Lead && self.step == Step::Pings {
            while self.sent < PINGS && self.sent - self.answered < WINDOW {
                let size = PING_SIZES[self.sent as usize % PING_SIZES.len()];
                let mut data = [0; MAX_PING];
                for (j, b) in data[..size].iter_mut().enumerate() {
                    *b = ping_byte(self.sent, j);
                }
                if !sent(btl, self.peer, &Outgoing::new(PING, &data[..size]))? {
                    break;
                }
                self.sent += 1;
            }
        }
        Ok(())
    }
}

/// Sends `out` to `peer`: whether the BTL took it (`false`: no room now,
/// try again after progress).
fn sent<B: Btl + ?Sized>(
    btl: &mut B,
    peer: EndpointId,
    out: &Outgoing,
) -> Result<bool, ExchangeError> {
    match btl.send_copy(peer, out.tag, &out.data[..out.len]) {
        Ok(()) => Ok(true),
        Err(BtlError::OutOfResource) => Ok(false),
        Err(e) => Err(e.into()),
    }
}
