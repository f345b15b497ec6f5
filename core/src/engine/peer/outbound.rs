//! What one peer is owed by this side: packets sent and retained until the
//! peer acknowledges them (the send window), answers owed to its
//! transfers, messages and gets queued for credit or window room, the
//! retained packets to put on a link again, and those a link is still
//! writing.
//!
//! The peer decides what goes next and when ([`Peer::poll_packet`]); this
//! part keeps the queues' rules: a packet is marked to go again once, a
//! packet the peer acknowledged while a link still writes it completes
//! only when the link is done with its bytes, and a loss fails everything
//! once, each where it lies.
//!
//! [`Peer::poll_packet`]: super::Peer::poll_packet

use heapless::{Deque, Vec};

use crate::btl::MemHandle;
use crate::desc::Descriptor;
use crate::time::{Duration, Instant};
use crate::wire::{ControlRepr, GetRepr};

use super::super::MAX_PEER_LINKS;
use super::super::packet::{Answer, Outgoing, Queued};
use super::super::window::{Ack, AckBeyondSent, Acked, SendWindow};

/// What [`Outbound::clear`] hands back of a lost peer's packets.
#[derive(Debug)]
pub enum Released {
    /// Acknowledged while a link still wrote it: it reached the peer.
    Acknowledged(Outgoing),
    /// Sent and not acknowledged: it fails.
    Unacknowledged(Outgoing),
    /// A message still queued: it fails.
    Unsent(Descriptor),
}

/// This side's packets for one peer, in a window of `W`.
#[derive(Debug)]
pub struct Outbound<const W: usize> {
    /// Sent and retained until acknowledged.
    pub(super) window: SendWindow<Outgoing, W>,
    /// Messages and gets waiting for credit or window room.
    pub(super) queue: Deque<Queued, W>,
    /// Answers owed to the peer: they go before anything queued.
    pub(super) answers: Deque<Answer, W>,
    /// Retained packets to put on a link again (lost, or on a link gone).
    resend: Deque<u64, W>,
    /// Retained packets partly written on a link, and those of them the
    /// peer has acknowledged since: kept until their last byte is written.
    pinned: Vec<(u64, Option<Outgoing>), MAX_PEER_LINKS>,
    /// Messages held: queued, or in the window (sent and not
    /// acknowledged). Counted as they come and go, since every send asks
    /// ([`holds_sends`](Self::holds_sends)) and counting them there walked
    /// the queue and the window: a tenth of a datagram sender's time.
    sends: usize,
    /// Packets let go so far (acknowledged, done being written, or
    /// failed): a link's queue of sequence numbers is looked over for
    /// those no longer retained only when this moved.
    let_go: u64,
}

impl<const W: usize> Default for Outbound<W> {
    fn default() -> Self {
        Outbound {
            window: SendWindow::new(),
            queue: Deque::new(),
            answers: Deque::new(),
            resend: Deque::new(),
            pinned: Vec::new(),
            sends: 0,
            let_go: 0,
        }
    }
}

impl<const W: usize> Outbound<W> {
    /// Packets not yet acknowledged, sends and gets queued, answers owed.
    pub fn len(&self) -> usize {
        self.window.len() + self.queue.len() + self.answers.len()
    }

    /// Whether nothing at all is owed.
    pub fn is_empty(&self) -> bool {
        self.window.is_empty() && self.queue.is_empty() && self.answers.is_empty()
    }

    /// The sequence number below which lies everything sent, owed or
    /// queued so far: answers and queued packets are numbered, in that
    /// order, before anything sent later.
    pub fn mark(&self) -> u64 {
        self.window.next_seq() + (self.answers.len() + self.queue.len()) as u64
    }

    /// Whether everything numbered below `mark` is acknowledged.
    pub fn acknowledged_below(&self, mark: u64) -> bool {
        let first_unacked = self
            .window
            .oldest_unacked()
            .unwrap_or_else(|| self.window.next_seq());
        first_unacked >= mark
    }

    /// Whether a packet retained, being written or queued reads
    /// registration `handle`.
    pub fn reads(&self, handle: MemHandle) -> bool {
        self.window.iter().any(|(_, out)| out.reads(handle))
            || self
                .pinned
                .iter()
                .flat_map(|(_, o)| o)
                .any(|o| o.reads(handle))
            || self.queue.iter().any(|q| match q {
                Queued::Send(desc) => desc.referenced().is_some_and(|r| r.handle == handle),
                Queued::Get(_) => false,
            })
    }

    /// Queues a message; it comes back when the queue is full.
    pub fn queue_send(&mut self, desc: Descriptor) -> Result<(), Descriptor> {
        self.queue
            .push_back(Queued::Send(desc))
            .map_err(|q| match q {
                Queued::Send(desc) => desc,
                Queued::Get(_) => unreachable!("a send was queued"),
            })?;
        self.sends += 1;
        Ok(())
    }

    /// Takes the message or GET at the head of the queue.
    pub fn pop_queued(&mut self) -> Option<Queued> {
        let queued = self.queue.pop_front()?;
        if matches!(queued, Queued::Send(_)) {
            self.sends = self.sends.saturating_sub(1);
        }
        Some(queued)
    }

    /// Numbers `out`, sent (or about to be) at `now`, in the send window;
    /// a packet the window refuses (full, or its numbers used up) goes to
    /// `refused`.
    pub fn push(
        &mut self,
        out: Outgoing,
        now: Instant,
        refused: impl FnOnce(Outgoing),
    ) -> Option<u64> {
        let is_send = matches!(out, Outgoing::Send { .. });
        match self.window.push(out, now) {
            Ok(seq) => {
                if is_send {
                    self.sends += 1;
                }
                Some(seq)
            }
            Err(e) => {
                refused(e.into_item());
                None
            }
        }
    }

    /// Queues a GET; false when the queue is full.
    pub fn queue_get(&mut self, get: GetRepr) -> bool {
        self.queue.push_back(Queued::Get(get)).is_ok()
    }

    /// Whether one more send or GET fits the queue.
    pub fn has_queue_room(&self) -> bool {
        !self.queue.is_full()
    }

    /// Owes the peer `answer`, unless the same transfer or key already
    /// waits for one; `Err` when more answers are owed than a window holds
    /// (a peer that asks faster than it takes answers).
    pub fn owe(&mut self, answer: Answer) -> Result<(), Answer> {
        if self.answers.iter().any(|a| a.answers_as(&answer)) {
            return Ok(());
        }
        self.answers.push_back(answer)
    }

    /// Whether `share` or more of this side's messages are held, queued or
    /// sent and not acknowledged (each with its fragment).
    pub fn holds_sends(&self, share: usize) -> bool {
        debug_assert_eq!(self.sends, self.count_sends(), "messages held");
        self.sends >= share
    }

    /// Messages queued or in the window, counted one by one: what
    /// [`sends`](Self::sends) keeps, for debug builds to check it.
    fn count_sends(&self) -> usize {
        let queued = self
            .queue
            .iter()
            .filter(|q| matches!(q, Queued::Send(_)))
            .count();
        let unacked = self
            .window
            .iter()
            .filter(|(_, out)| matches!(out, Outgoing::Send { .. }))
            .count();
        queued + unacked
    }

    /// Whether a REJECT is owed, or sent and not yet acknowledged: the
    /// packets it refused may not be acknowledged before it.
    pub fn rejects_in_flight(&self) -> bool {
        self.owes_reject()
            || self.window.iter().any(|(_, out)| {
                matches!(
                    out,
                    Outgoing::Control {
                        packet: ControlRepr::Reject(_),
                        ..
                    }
                )
            })
    }

    /// Whether a REJECT is owed and not yet sent.
    pub fn owes_reject(&self) -> bool {
        self.answers.iter().any(|a| matches!(a, Answer::Reject(_)))
    }

    /// Every retained packet is to go again, marked transmitted at `now`.
    pub fn resend_all(&mut self, now: Instant) {
        let Outbound { window, resend, .. } = self;
        for r in window.resend_all(now) {
            resend_once(resend, r.seq);
        }
    }

    /// Every retained packet unacknowledged for `rto` is to go again;
    /// whether there was one (a loss, for the round-trip estimate).
    pub fn resend_timed_out(&mut self, now: Instant, rto: Duration) -> bool {
        let mut lost = false;
        while let Some(r) = self.window.next_retransmit(now, rto) {
            let seq = r.seq;
            resend_once(&mut self.resend, seq);
            lost = true;
        }
        lost
    }

    /// The holes the peer's selective acknowledgements revealed are to go
    /// again at once.
    pub fn resend_holes(&mut self, now: Instant) {
        while let Some(r) = self.window.next_fast_retransmit(now) {
            let seq = r.seq;
            resend_once(&mut self.resend, seq);
        }
    }

    /// The next retained packet to go again, and whether it is a PUT
    /// packet (striped over the links); those acknowledged meanwhile are
    /// skipped.
    pub fn next_resend(&mut self) -> Option<(u64, bool)> {
        while let Some(seq) = self.resend.pop_front() {
            if let Some(out) = self.window.get(seq) {
                return Some((seq, matches!(out, Outgoing::Put { .. })));
            }
        }
        None
    }

    /// A link started writing retained packet `seq` and has not finished.
    pub fn pin(&mut self, seq: u64) {
        if !self.pinned.iter().any(|(s, _)| *s == seq) {
            let _ = self.pinned.push((seq, None));
        }
    }

    /// A link is done with retained packet `seq` (written whole, or the
    /// link is gone): the packet, if the peer acknowledged it meanwhile,
    /// to complete now.
    pub fn unpin(&mut self, seq: u64) -> Option<Outgoing> {
        let i = self.pinned.iter().position(|(s, _)| *s == seq)?;
        let detached = self.pinned.swap_remove(i).1;
        if detached.is_some() {
            self.let_go += 1;
        }
        detached
    }

    /// A number that moves whenever a packet stops being retained
    /// ([`retained`](Self::retained) turns `None` for it).
    pub fn let_go(&self) -> u64 {
        self.let_go
    }

    /// Takes the peer's acknowledgement at `now`: each packet it releases
    /// goes to `acked`, unless a link still writes it (it completes when
    /// the link is done).
    pub fn on_ack(
        &mut self,
        ack: Ack,
        now: Instant,
        mut acked: impl FnMut(Outgoing),
    ) -> Result<Acked, AckBeyondSent> {
        let Outbound {
            window,
            pinned,
            sends,
            let_go,
            ..
        } = self;
        window.on_ack(ack, now, |seq, out| {
            if matches!(out, Outgoing::Send { .. }) {
                *sends = sends.saturating_sub(1);
            }
            match pinned.iter_mut().find(|(s, _)| *s == seq) {
                // Being written on a link: its bytes must stay until the
                // last one is written, for the stream's framing.
                Some((_, detached)) => *detached = Some(out),
                None => {
                    *let_go += 1;
                    acked(out);
                }
            }
        })
    }

    /// The peer is lost: everything goes to `release`, each once, as
    /// [`Released`] says; answers and resends are dropped.
    pub fn clear(&mut self, mut release: impl FnMut(Released)) {
        self.sends = 0;
        self.let_go += 1;
        self.resend.clear();
        self.answers.clear();
        for (_, detached) in self.pinned.drain(..) {
            if let Some(out) = detached {
                release(Released::Acknowledged(out));
            }
        }
        // Each packet is released where the window lets it go: collecting
        // them first would move a window's worth of packets.
        self.window
            .drain(|_, out| release(Released::Unacknowledged(out)));
        while let Some(q) = self.queue.pop_front() {
            if let Queued::Send(desc) = q {
                release(Released::Unsent(desc));
            }
        }
    }

    /// Retained packet `seq`: in the window, or acknowledged and still
    /// being written.
    pub fn retained(&self, seq: u64) -> Option<&Outgoing> {
        self.window.get(seq).or_else(|| {
            self.pinned
                .iter()
                .find(|(s, _)| *s == seq)
                .and_then(|(_, d)| d.as_ref())
        })
    }
}

/// Marks retained packet `seq` to go again, once however often it is
/// asked.
fn resend_once<const W: usize>(resend: &mut Deque<u64, W>, seq: u64) {
    if !resend.iter().any(|&s| s == seq) {
        let _ = resend.push_back(seq);
    }
}

#[cfg(test)]
mod tests {
    use std::vec::Vec as StdVec;

    use super::*;
    use crate::engine::testkit::{config, message, shared};
    use crate::wire::{DoneRepr, RejectCode, RejectRepr};

    type O = Outbound<8>;

    fn at(ms: u64) -> Instant {
        Instant::from_millis(ms)
    }

    /// A retained control packet that names `n`.
    fn done(n: u64) -> Outgoing {
        Outgoing::control(ControlRepr::Done(DoneRepr { xfer_id: n }))
    }

    fn named(out: &Outgoing) -> u64 {
        match out {
            Outgoing::Control {
                packet: ControlRepr::Done(d),
                ..
            } => d.xfer_id,
            other => panic!("{other:?}"),
        }
    }

    /// `n` packets sent at `now`: their sequence numbers.
    fn sent(o: &mut O, n: u64, now: Instant) -> StdVec<u64> {
        (0..n)
            .map(|i| o.window.push(done(i), now).expect("room"))
            .collect()
    }

    fn resends(o: &mut O) -> StdVec<u64> {
        core::iter::from_fn(|| o.next_resend().map(|(seq, _)| seq)).collect()
    }

    #[test]
    fn a_packet_goes_again_once_however_often_it_is_marked() {
        let mut o = O::default();
        let seqs = sent(&mut o, 3, at(0));
        o.resend_all(at(1));
        o.resend_all(at(2));
        assert!(o.resend_timed_out(at(50), Duration::from_millis(10)));
        assert_eq!(resends(&mut o), seqs, "each once, in order");
        // One acknowledged meanwhile is not sent again.
        o.resend_all(at(60));
        let ack = Ack {
            cumulative: seqs[1],
            sack: 0,
        };
        let mut acked = StdVec::new();
        o.on_ack(ack, at(61), |out| acked.push(named(&out)))
            .expect("sent");
        assert_eq!(acked, [0]);
        assert_eq!(resends(&mut o), &seqs[1..]);
        assert!(
            !o.resend_timed_out(at(62), Duration::from_millis(10)),
            "just sent again"
        );
    }

    #[test]
    fn a_packet_acknowledged_while_a_link_writes_it_completes_when_the_link_is_done() {
        let mut o = O::default();
        let seqs = sent(&mut o, 2, at(0));
        o.pin(seqs[0]);
        o.pin(seqs[0]);
        let ack = Ack {
            cumulative: seqs[1] + 1,
            sack: 0,
        };
        let mut acked = StdVec::new();
        o.on_ack(ack, at(1), |out| acked.push(named(&out)))
            .expect("sent");
        assert_eq!(acked, [1], "the pinned one waits for its link");
        assert_eq!(o.retained(seqs[0]).map(named), Some(0), "its bytes stay");
        assert!(o.window.is_empty());
        assert_eq!(o.unpin(seqs[0]).as_ref().map(named), Some(0));
        assert!(o.unpin(seqs[0]).is_none(), "once");
        assert!(o.retained(seqs[0]).is_none());
        // One unpinned before any acknowledgement has nothing to complete.
        let late = sent(&mut o, 1, at(2))[0];
        o.pin(late);
        assert!(o.unpin(late).is_none());
        assert_eq!(o.retained(late).map(named), Some(0), "still in the window");
    }

    #[test]
    fn a_lost_peer_releases_everything_once_as_it_lay() {
        let mut sh = shared(config());
        let mut o = O::default();
        let seqs = sent(&mut o, 3, at(0));
        o.pin(seqs[0]);
        let ack = Ack {
            cumulative: seqs[0] + 1,
            sack: 0,
        };
        o.on_ack(ack, at(1), |_| panic!("pinned")).expect("sent");
        o.queue_send(message(&mut sh, 8, 1)).expect("room");
        assert!(o.queue_get(crate::wire::GetRepr {
            xfer_id: 9,
            src_handle: 1,
            src_offset: 0,
            len: 8,
            target_job: 0,
            target_rank: 0,
            dst_handle: 2,
            dst_offset: 0,
        }));
        o.owe(Answer::Done(DoneRepr { xfer_id: 4 })).expect("room");
        o.resend_all(at(2));
        assert_eq!(o.len(), 2 + 2 + 1);
        let mut seen = StdVec::new();
        o.clear(|r| match r {
            Released::Acknowledged(out) => seen.push(("acknowledged", named(&out))),
            Released::Unacknowledged(out) => seen.push(("unacknowledged", named(&out))),
            Released::Unsent(desc) => {
                seen.push(("unsent", u64::from(desc.tag().0)));
                desc.free(sh.pools()).expect("ours");
            }
        });
        assert_eq!(
            seen,
            [
                ("acknowledged", 0),
                ("unacknowledged", 1),
                ("unacknowledged", 2),
                ("unsent", 1)
            ]
        );
        assert!(o.is_empty() && o.next_resend().is_none());
        assert_eq!(o.len(), 0);
    }

    #[test]
    fn an_answer_is_owed_once_per_transfer_and_a_flood_of_them_is_refused() {
        let mut o = O::default();
        let reject = |xfer_id| {
            Answer::Reject(RejectRepr {
                xfer_id,
                code: RejectCode::Busy,
            })
        };
        o.owe(reject(1)).expect("room");
        o.owe(reject(1))
            .expect("the same transfer: no second answer");
        assert_eq!(o.answers.len(), 1);
        assert!(o.owes_reject() && o.rejects_in_flight());
        for x in 2..=8 {
            o.owe(reject(x)).expect("room");
        }
        assert!(o.owe(reject(9)).is_err(), "more than a window owed");
        // Numbers start at 1: the eight answers take 1 to 8.
        assert_eq!(o.mark(), 9, "numbered after what is sent and owed");
        assert!(!o.acknowledged_below(2), "owed, not sent");
        assert!(o.acknowledged_below(1), "nothing below the first number");
    }
}
