//! Sequence numbers, acknowledgements and retransmission: the reliability
//! layer under every reliable packet (SEND, PUT, GET, CLOSE, REJECT).
//!
//! Each direction of a peer numbers its reliable packets 1, 2, 3, ... in a
//! 64-bit space that never wraps (the last usable number is
//! `u64::MAX - 1`; a sender that reaches it must reconnect). The receiver
//! acknowledges with an [`Ack`]: `cumulative` is the next sequence number it
//! expects (every one below has arrived) and bit `i` of `sack` says that
//! `cumulative + 1 + i` has arrived too.
//!
//! - [`SendWindow`] keeps each packet until it is acknowledged, hands it
//!   back exactly once when it is, picks what to retransmit, and offers
//!   round-trip samples under Karn's rule. Over a stream it frees packets
//!   as the peer acknowledges them and resends the rest after a reconnect.
//! - [`RecvWindow`] drops duplicates, holds packets that arrive early and
//!   delivers in sequence order. It owns the held packets, so a packet is
//!   marked as received exactly when it is held: one that is refused or
//!   never offered is neither acknowledged nor delivered, and one that is
//!   held is delivered once, in order.
//!
//! Both cover at most `W <= 64` sequence numbers, so their bookkeeping is
//! one 64-bit mask and every operation is O(1) or O(W). The sender's window
//! must not be larger than the peer's receive window, or packets it sends
//! at the end of its window may fall outside the receiver's.
//!
//! Sequence numbers and acknowledgements come from the wire and are
//! untrusted: any value is classified or refused without panicking, and an
//! acknowledgement of a number never sent is reported as [`AckBeyondSent`]
//! without releasing anything.

use core::fmt;

use crate::time::{Duration, Instant};

#[cfg(test)]
mod tests;

/// The first sequence number of a fresh window.
pub const FIRST_SEQ: u64 = 1;

/// An acknowledgement, as carried in packet headers and ACK packets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Ack {
    /// The next sequence number the receiver expects: all below it arrived.
    pub cumulative: u64,
    /// Bit `i` set: sequence number `cumulative + 1 + i` arrived.
    pub sack: u64,
}

/// The low `n` bits set (all of them for `n >= 64`).
fn low_bits(n: u64) -> u64 {
    match 1u64.checked_shl(u32::try_from(n).unwrap_or(u32::MAX)) {
        Some(bit) => bit - 1,
        None => u64::MAX,
    }
}

/// `mask << by`, dropping bits shifted out (0 for `by >= 64`).
fn shl(mask: u64, by: u64) -> u64 {
    u32::try_from(by)
        .ok()
        .and_then(|by| mask.checked_shl(by))
        .unwrap_or(0)
}

/// `mask >> by`, 0 for `by >= 64`.
fn shr(mask: u64, by: u64) -> u64 {
    u32::try_from(by)
        .ok()
        .and_then(|by| mask.checked_shr(by))
        .unwrap_or(0)
}

/// Ring index of `seq` in a window of `W` slots: numbers less than `W`
/// apart never share a slot.
fn slot_of<const W: usize>(seq: u64) -> usize {
    // The remainder is below W, so it fits usize.
    (seq % W as u64) as usize
}

/// Checked at compile time by every constructor.
const fn check_window(w: usize) {
    assert!(
        w >= 1 && w <= 64,
        "a window covers 1 to 64 sequence numbers"
    );
}

// ---------------------------------------------------------------- receiver

/// How a [`RecvWindow`] would take a sequence number.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Arrival {
    /// The next expected one: deliverable now.
    InOrder,
    /// Ahead of a gap but inside the window: held until the gap fills.
    Early,
    /// Already received (or below the window): drop the packet but
    /// acknowledge again, since the sender evidently missed the ack.
    Duplicate,
    /// Beyond the window (or the end of the sequence space): drop it
    /// without acknowledging; a correct sender never sends it.
    OutsideWindow,
}

/// A packet a [`RecvWindow`] did not take, handed back to the caller.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refused<T> {
    /// See [`Arrival::Duplicate`].
    Duplicate(T),
    /// See [`Arrival::OutsideWindow`].
    OutsideWindow(T),
}

impl<T> Refused<T> {
    /// The packet, for the caller to free.
    pub fn into_item(self) -> T {
        match self {
            Refused::Duplicate(item) | Refused::OutsideWindow(item) => item,
        }
    }

    /// Whether the refusal calls for an acknowledgement.
    pub fn should_ack(&self) -> bool {
        matches!(self, Refused::Duplicate(_))
    }
}

impl<T> fmt::Display for Refused<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Refused::Duplicate(_) => f.write_str("duplicate packet"),
            Refused::OutsideWindow(_) => f.write_str("packet outside the receive window"),
        }
    }
}

impl<T: fmt::Debug> core::error::Error for Refused<T> {}

/// The receiving side of one peer's reliable packets: duplicate
/// suppression, reordering and acknowledgement, for up to `W` (1..=64)
/// sequence numbers from the next expected one.
///
/// `T` is what the engine keeps of a packet until it is delivered: the
/// packet itself, a fragment holding it, or a marker when the payload has
/// already been placed (a bulk packet written at its offset).
#[derive(Debug)]
pub struct RecvWindow<T, const W: usize> {
    /// Next sequence number to deliver.
    expected: u64,
    /// Bit `k`: `expected + k` is held in its slot.
    held: u64,
    slots: [Option<T>; W],
}

impl<T, const W: usize> Default for RecvWindow<T, W> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T, const W: usize> RecvWindow<T, W> {
    /// An empty window expecting [`FIRST_SEQ`].
    pub const fn new() -> Self {
        Self::starting_at(FIRST_SEQ)
    }

    /// An empty window expecting `expected` (0 counts as 1), for a peer
    /// whose numbering does not start fresh.
    pub const fn starting_at(expected: u64) -> Self {
        const { check_window(W) };
        RecvWindow {
            expected: if expected == 0 { FIRST_SEQ } else { expected },
            held: 0,
            slots: [const { None }; W],
        }
    }

    /// How [`receive`](Self::receive) would take `seq`, without taking it:
    /// lets the engine decide whether to keep an early packet at all.
    pub fn classify(&self, seq: u64) -> Arrival {
        let Some(ahead) = seq.checked_sub(self.expected) else {
            return Arrival::Duplicate;
        };
        // u64::MAX is never used: delivering it would push `expected` past
        // the end of the space.
        if ahead >= W as u64 || seq == u64::MAX {
            Arrival::OutsideWindow
        } else if self.held & (1 << ahead) != 0 {
            Arrival::Duplicate
        } else if ahead == 0 {
            Arrival::InOrder
        } else {
            Arrival::Early
        }
    }

    /// Takes packet `seq`, which from now on counts as received. Returns how
    /// many packets are ready for [`pop`](Self::pop) in order (0 if it
    /// arrived early), or hands the packet back if it is a duplicate or
    /// outside the window.
    pub fn receive(&mut self, seq: u64, item: T) -> Result<usize, Refused<T>> {
        match self.classify(seq) {
            Arrival::Duplicate => Err(Refused::Duplicate(item)),
            Arrival::OutsideWindow => Err(Refused::OutsideWindow(item)),
            Arrival::InOrder | Arrival::Early => {
                // In the window: 0 <= ahead < W <= 64.
                let ahead = seq - self.expected;
                self.slots[slot_of::<W>(seq)] = Some(item);
                self.held |= 1 << ahead;
                Ok(self.ready())
            }
        }
    }

    /// The next packet in sequence order, if it has arrived; each received
    /// packet comes out here exactly once.
    pub fn pop(&mut self) -> Option<(u64, T)> {
        if self.held & 1 == 0 {
            return None;
        }
        let seq = self.expected;
        let item = self.slots[slot_of::<W>(seq)].take()?;
        self.held >>= 1;
        // A held number is at most u64::MAX - 1.
        self.expected = seq + 1;
        Some((seq, item))
    }

    /// Pops every packet that is ready, in order. Stopping early is fine:
    /// the rest stay ready for the next call.
    pub fn deliver(&mut self) -> Deliver<'_, T, W> {
        Deliver { window: self }
    }

    /// The acknowledgement to send now. Held packets count as received
    /// whether or not they have been popped: they can no longer be lost.
    pub fn ack(&self) -> Ack {
        let run = u64::from(self.held.trailing_ones());
        Ack {
            // The run ends at a held number + 1 <= u64::MAX.
            cumulative: self.expected + run,
            sack: shr(self.held, run + 1),
        }
    }

    /// The next sequence number to deliver.
    pub fn expected(&self) -> u64 {
        self.expected
    }

    /// Packets held (received, not yet popped).
    pub fn held(&self) -> usize {
        self.held.count_ones() as usize
    }

    /// Packets ready to pop in order.
    pub fn ready(&self) -> usize {
        self.held.trailing_ones() as usize
    }

    /// Hands every held packet to `f`, in sequence order, and forgets it,
    /// when the peer is lost and nothing more will be delivered. The window
    /// is left empty, expecting the first number that had not arrived in
    /// order.
    pub fn drain_held(&mut self, mut f: impl FnMut(u64, T)) {
        let mut held = self.held;
        while held != 0 {
            let ahead = u64::from(held.trailing_zeros());
            held &= held - 1;
            let seq = self.expected + ahead;
            if let Some(item) = self.slots[slot_of::<W>(seq)].take() {
                f(seq, item);
            }
        }
        // Keep acknowledging what was received, but hold nothing.
        let run = u64::from(self.held.trailing_ones());
        self.expected += run;
        self.held = 0;
    }
}

/// Iterator of [`RecvWindow::deliver`]: ready packets in sequence order.
#[derive(Debug)]
pub struct Deliver<'a, T, const W: usize> {
    window: &'a mut RecvWindow<T, W>,
}

impl<T, const W: usize> Iterator for Deliver<'_, T, W> {
    type Item = (u64, T);

    fn next(&mut self) -> Option<(u64, T)> {
        self.window.pop()
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let ready = self.window.ready();
        (ready, Some(ready))
    }
}

// ------------------------------------------------------------------ sender

/// Why [`SendWindow::push`] did not take a packet; the packet comes back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PushError<T> {
    /// `W` sequence numbers are in flight: wait for acknowledgements (the
    /// engine's back-pressure).
    Full(T),
    /// The sequence space is used up (after `u64::MAX - 1`); only a new
    /// connection with fresh numbering can go on.
    SeqExhausted(T),
}

impl<T> PushError<T> {
    /// The packet, for the caller to queue or free.
    pub fn into_item(self) -> T {
        match self {
            PushError::Full(item) | PushError::SeqExhausted(item) => item,
        }
    }
}

impl<T> fmt::Display for PushError<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PushError::Full(_) => f.write_str("send window full"),
            PushError::SeqExhausted(_) => f.write_str("sequence numbers exhausted"),
        }
    }
}

impl<T: fmt::Debug> core::error::Error for PushError<T> {}

/// An acknowledgement of sequence numbers that were never sent: the peer
/// is broken or hostile. Nothing was released.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AckBeyondSent {
    /// The offending acknowledgement.
    pub ack: Ack,
    /// The next sequence number this side would have sent.
    pub next_seq: u64,
}

impl fmt::Display for AckBeyondSent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "acknowledgement (cumulative {}, sack {:#x}) covers packets never sent (next is {})",
            self.ack.cumulative, self.ack.sack, self.next_seq
        )
    }
}

impl core::error::Error for AckBeyondSent {}

/// What an accepted acknowledgement did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Acked {
    /// Packets released by it (0 for a stale or repeated ack).
    pub released: usize,
    /// Round-trip time measured on the newest packet it released, if that
    /// one was transmitted only once (Karn's rule).
    pub rtt: Option<Duration>,
}

/// A retained packet picked for transmission again.
#[derive(Debug)]
pub struct Resend<'a, T> {
    /// Its sequence number.
    pub seq: u64,
    /// Transmissions so far, this one included.
    pub transmits: u32,
    /// The retained packet.
    pub item: &'a mut T,
}

#[derive(Debug)]
struct Sent<T> {
    item: T,
    first_sent: Instant,
    last_sent: Instant,
    transmits: u32,
}

impl<T> Sent<T> {
    fn resend(&mut self, seq: u64, now: Instant) -> Resend<'_, T> {
        self.last_sent = now;
        self.transmits = self.transmits.saturating_add(1);
        Resend {
            seq,
            transmits: self.transmits,
            item: &mut self.item,
        }
    }
}

/// Number of later packets acknowledged selectively before one still
/// missing is presumed lost (the duplicate-ack threshold of TCP).
pub const FAST_RETRANSMIT_THRESHOLD: u32 = 3;

/// The sending side of one peer's reliable packets: numbering, retention
/// until acknowledged, retransmission, for up to `W` (1..=64) sequence
/// numbers in flight.
///
/// `T` is what the engine retains to send a packet again: a descriptor or
/// fragment, or the description of a bulk packet. Every pushed item comes
/// back exactly once, through [`on_ack`](Self::on_ack) or
/// [`drain`](Self::drain). Times are the driver's clock.
#[derive(Debug)]
pub struct SendWindow<T, const W: usize> {
    /// Oldest retained sequence number, `next` when nothing is retained.
    base: u64,
    /// Sequence number of the next push.
    next: u64,
    /// Bit `k`: `base + k` is retained; bit 0 is set unless empty.
    present: u64,
    slots: [Option<Sent<T>>; W],
    /// Retained packets transmitted more than once, at least (a resend of
    /// everything counts every packet, taken or not): while none is, and
    /// pushes came in time order, the oldest transmission is `base`'s, and
    /// the retransmission timer is found without a walk over the window.
    resent: usize,
    /// When the latest push was made.
    last_push: Instant,
    /// Whether every retained packet was pushed no earlier than the one
    /// before it (the engine's clock never goes back; a caller's may).
    pushed_in_order: bool,
}

impl<T, const W: usize> Default for SendWindow<T, W> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T, const W: usize> SendWindow<T, W> {
    /// An empty window whose first packet gets [`FIRST_SEQ`].
    pub const fn new() -> Self {
        Self::starting_at(FIRST_SEQ)
    }

    /// An empty window whose first packet gets `next` (0 counts as 1).
    pub const fn starting_at(next: u64) -> Self {
        const { check_window(W) };
        let next = if next == 0 { FIRST_SEQ } else { next };
        SendWindow {
            base: next,
            next,
            present: 0,
            slots: [const { None }; W],
            resent: 0,
            last_push: Instant::ZERO,
            pushed_in_order: true,
        }
    }

    /// Numbers `item`, sent (or about to be) at `now`, and retains it until
    /// acknowledged. Hands it back when `W` numbers are in flight or the
    /// sequence space is used up.
    pub fn push(&mut self, item: T, now: Instant) -> Result<u64, PushError<T>> {
        if self.next == u64::MAX {
            return Err(PushError::SeqExhausted(item));
        }
        let offset = self.next - self.base;
        if offset >= W as u64 {
            return Err(PushError::Full(item));
        }
        let seq = self.next;
        if now < self.last_push {
            self.pushed_in_order = false;
        }
        self.last_push = now;
        self.slots[slot_of::<W>(seq)] = Some(Sent {
            item,
            first_sent: now,
            last_sent: now,
            transmits: 1,
        });
        self.present |= 1 << offset;
        self.next = seq + 1;
        Ok(seq)
    }

    /// Applies an acknowledgement received at `now`: hands every packet it
    /// covers that is still retained to `acked`, in sequence order (those
    /// below `cumulative`, then those in `sack`), and forgets it. Stale and
    /// repeated acknowledgements release nothing. One that covers a number
    /// not yet sent is refused whole.
    pub fn on_ack(
        &mut self,
        ack: Ack,
        now: Instant,
        mut acked: impl FnMut(u64, T),
    ) -> Result<Acked, AckBeyondSent> {
        let release = self.covered(ack)? & self.present;
        let mut newest = None;
        let mut bits = release;
        while bits != 0 {
            let offset = u64::from(bits.trailing_zeros());
            bits &= bits - 1;
            let seq = self.base + offset;
            if let Some(sent) = self.slots[slot_of::<W>(seq)].take() {
                if sent.transmits > 1 {
                    self.resent = self.resent.saturating_sub(1);
                }
                newest = Some((sent.transmits, sent.first_sent));
                acked(seq, sent.item);
            }
        }
        self.present &= !release;
        self.advance_base();
        Ok(Acked {
            released: release.count_ones() as usize,
            rtt: match newest {
                Some((1, sent)) => Some(now - sent),
                _ => None,
            },
        })
    }

    /// The offsets from `base` an acknowledgement covers, or why it is
    /// refused.
    fn covered(&self, ack: Ack) -> Result<u64, AckBeyondSent> {
        let Ack { cumulative, sack } = ack;
        let refuse = AckBeyondSent {
            ack,
            next_seq: self.next,
        };
        // Every number acknowledged must be below `next`: the cumulative
        // one means "all below", so it may equal `next`; sack bit i names
        // cumulative + 1 + i.
        let unsent_above = self.next.checked_sub(cumulative).ok_or(refuse)?;
        if sack & !low_bits(unsent_above.saturating_sub(1)) != 0 {
            return Err(refuse);
        }
        // Here base <= next and cumulative <= next, next - base <= W.
        let below = low_bits(cumulative.saturating_sub(self.base));
        let sacked = match cumulative.checked_sub(self.base) {
            Some(above) => shl(sack, above + 1),
            None => shr(sack, self.base - cumulative - 1),
        };
        Ok(below | sacked)
    }

    /// Moves `base` to the oldest retained number (or `next`).
    fn advance_base(&mut self) {
        if self.present == 0 {
            self.base = self.next;
            self.resent = 0;
            self.pushed_in_order = true;
        } else {
            let gap = self.present.trailing_zeros();
            self.present >>= gap;
            self.base += u64::from(gap);
        }
    }

    /// The oldest retained packet whose last transmission is at least `rto`
    /// old (an `rto` of 0 counts as 1 ns), marked as transmitted again at
    /// `now`. Called until `None`, it yields each expired packet once.
    pub fn next_retransmit(&mut self, now: Instant, rto: Duration) -> Option<Resend<'_, T>> {
        let rto = rto.max(Duration::from_nanos(1));
        let (seq, _) = self.find(|_, sent| now - sent.last_sent >= rto)?;
        self.resend(seq, now)
    }

    /// The oldest retained packet, never retransmitted, that at least
    /// [`FAST_RETRANSMIT_THRESHOLD`] later packets have overtaken (released
    /// by selective acknowledgement): presumed lost without waiting for the
    /// timeout. Marked as transmitted again at `now`, so it is picked once.
    pub fn next_fast_retransmit(&mut self, now: Instant) -> Option<Resend<'_, T>> {
        // Offsets below `next` released by sack: the holes of the window.
        let holes = low_bits(self.next - self.base) & !self.present;
        let (seq, _) = self.find(|offset, sent| {
            sent.transmits == 1 && shr(holes, offset + 1).count_ones() >= FAST_RETRANSMIT_THRESHOLD
        })?;
        self.resend(seq, now)
    }

    /// Retained packet `seq`, marked as transmitted again at `now`.
    fn resend(&mut self, seq: u64, now: Instant) -> Option<Resend<'_, T>> {
        let sent = self.slots[slot_of::<W>(seq)].as_mut()?;
        if sent.transmits == 1 {
            self.resent += 1;
        }
        Some(sent.resend(seq, now))
    }

    /// The oldest retained packet satisfying `pred(offset, sent)`.
    fn find(&mut self, mut pred: impl FnMut(u64, &Sent<T>) -> bool) -> Option<(u64, &mut Sent<T>)> {
        let mut bits = self.present;
        let mut hit = None;
        while bits != 0 {
            let offset = u64::from(bits.trailing_zeros());
            bits &= bits - 1;
            let seq = self.base + offset;
            if let Some(sent) = &self.slots[slot_of::<W>(seq)]
                && pred(offset, sent)
            {
                hit = Some(seq);
                break;
            }
        }
        let seq = hit?;
        let sent = self.slots[slot_of::<W>(seq)].as_mut()?;
        Some((seq, sent))
    }

    /// The retained packet numbered `seq`, if it is still retained.
    pub fn get(&self, seq: u64) -> Option<&T> {
        let offset = seq.checked_sub(self.base)?;
        if offset >= W as u64 || self.present & (1 << offset) == 0 {
            return None;
        }
        self.slots[slot_of::<W>(seq)].as_ref().map(|s| &s.item)
    }

    /// How many times the retained packet numbered `seq` was picked to go
    /// out: more than once for a packet going again.
    pub fn transmits(&self, seq: u64) -> Option<u32> {
        let offset = seq.checked_sub(self.base)?;
        if offset >= W as u64 || self.present & (1 << offset) == 0 {
            return None;
        }
        self.slots[slot_of::<W>(seq)].as_ref().map(|s| s.transmits)
    }

    /// The retained packet numbered `seq`, writable (to refresh its header
    /// before it goes out again).
    pub fn get_mut(&mut self, seq: u64) -> Option<&mut T> {
        let offset = seq.checked_sub(self.base)?;
        if offset >= W as u64 || self.present & (1 << offset) == 0 {
            return None;
        }
        self.slots[slot_of::<W>(seq)].as_mut().map(|s| &mut s.item)
    }

    /// Every retained packet in sequence order, without marking anything.
    pub fn iter(&self) -> impl Iterator<Item = (u64, &T)> {
        let base = self.base;
        let (wrapped, first) = self.slots.split_at(slot_of::<W>(base));
        first
            .iter()
            .chain(wrapped.iter())
            .zip(0u64..)
            .filter_map(move |(slot, offset)| Some((base + offset, &slot.as_ref()?.item)))
    }

    /// Every retained packet in sequence order, each marked as transmitted
    /// again at `now` as it is yielded: what a reconnected stream resends.
    pub fn resend_all(&mut self, now: Instant) -> impl Iterator<Item = Resend<'_, T>> {
        self.resent = self.len();
        self.entries_mut()
            .map(move |(seq, sent)| sent.resend(seq, now))
    }

    /// The retained entries in sequence order: the ring from `base`'s slot.
    fn entries_mut(&mut self) -> impl Iterator<Item = (u64, &mut Sent<T>)> {
        let base = self.base;
        let (wrapped, first) = self.slots.split_at_mut(slot_of::<W>(base));
        first
            .iter_mut()
            .chain(wrapped.iter_mut())
            .zip(0u64..)
            // Retained entries lie within W of base and below `next`.
            .filter_map(move |(slot, offset)| Some((base + offset, slot.as_mut()?)))
    }

    /// Hands every retained packet to `f`, in sequence order, and forgets
    /// it: the peer is lost and they fail. Their numbers are not reused.
    pub fn drain(&mut self, mut f: impl FnMut(u64, T)) {
        let mut bits = self.present;
        while bits != 0 {
            let offset = u64::from(bits.trailing_zeros());
            bits &= bits - 1;
            let seq = self.base + offset;
            if let Some(sent) = self.slots[slot_of::<W>(seq)].take() {
                f(seq, sent.item);
            }
        }
        self.present = 0;
        self.base = self.next;
        self.resent = 0;
        self.pushed_in_order = true;
    }

    /// Packets retained (sent, not yet acknowledged).
    pub fn len(&self) -> usize {
        self.present.count_ones() as usize
    }

    /// Whether nothing awaits acknowledgement.
    pub fn is_empty(&self) -> bool {
        self.present == 0
    }

    /// Whether [`push`](Self::push) would refuse a packet now.
    pub fn is_full(&self) -> bool {
        self.next == u64::MAX || self.next - self.base >= W as u64
    }

    /// Sequence numbers from the oldest retained to the newest sent,
    /// holes included: what limits [`push`](Self::push), at most `W`.
    pub fn in_flight(&self) -> u64 {
        self.next - self.base
    }

    /// The number the next pushed packet gets.
    pub fn next_seq(&self) -> u64 {
        self.next
    }

    /// The oldest retained sequence number.
    pub fn oldest_unacked(&self) -> Option<u64> {
        (self.present != 0).then_some(self.base)
    }

    /// The earliest last transmission among retained packets: the
    /// retransmission timer runs from it.
    pub fn oldest_sent_at(&self) -> Option<Instant> {
        if self.present == 0 {
            return None;
        }
        if self.resent == 0 && self.pushed_in_order {
            let first = self.slots[slot_of::<W>(self.base)]
                .as_ref()
                .map(|sent| sent.last_sent);
            debug_assert_eq!(first, self.oldest_sent_scanned(), "oldest transmission");
            return first;
        }
        self.oldest_sent_scanned()
    }

    /// [`oldest_sent_at`](Self::oldest_sent_at) by a walk over every slot.
    fn oldest_sent_scanned(&self) -> Option<Instant> {
        self.slots.iter().flatten().map(|sent| sent.last_sent).min()
    }

    /// When [`next_retransmit`](Self::next_retransmit) with this `rto` will
    /// first yield a packet, if any is retained.
    pub fn retransmit_deadline(&self, rto: Duration) -> Option<Instant> {
        Some(self.oldest_sent_at()? + rto.max(Duration::from_nanos(1)))
    }
}
