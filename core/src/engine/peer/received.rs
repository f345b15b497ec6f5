//! What one peer has sent this side: its reliable packets in a receive
//! window until they can be delivered in order, and the acknowledgement
//! to give for them, which stops short of a refused PUT packet until the
//! peer has its REJECT.
//!
//! The peer acts on what is delivered ([`Peer::on_packet`]); this part
//! keeps the window's rules and the one rule that ties acknowledgements to
//! refusals: over a lossy network an acknowledgement must never overtake
//! a lost REJECT and complete the refused put as a success.
//!
//! [`Peer::on_packet`]: super::Peer::on_packet

use heapless::Vec;

use crate::btl::{RejectCode, Tag};
use crate::pool::Fragment;
use crate::wire::ControlRepr;

use super::super::window::{Ack, Arrival, RecvWindow};

/// A reliable packet the window holds until delivery in order.
#[derive(Debug)]
pub enum Held {
    /// A message, in its receive fragment.
    Send {
        /// Its tag.
        tag: Tag,
        /// Where its bytes are.
        frag: Fragment,
        /// How many.
        len: usize,
    },
    /// A PUT packet, written where it landed.
    Put {
        /// The transfer.
        xfer_id: u64,
        /// Bytes it carried.
        len: u64,
    },
    /// A PUT whose target was refused: answered once per transfer.
    Refused {
        /// The transfer.
        xfer_id: u64,
        /// Why.
        code: RejectCode,
    },
    /// A numbered control packet (a NOTIFY's event place is kept).
    Control(ControlRepr),
}

/// What came from one peer, in a window of `W`.
#[derive(Debug)]
pub struct Received<const W: usize> {
    window: RecvWindow<Held, W>,
    /// The sequence numbers of refused PUT packets whose REJECT the peer
    /// may not have yet: acknowledgements stop short of the lowest until
    /// the REJECTs are acknowledged.
    refused: Vec<u64, W>,
    /// The last transfer of the peer's whose PUT was refused and answered.
    last_rejected: Option<u64>,
}

impl<const W: usize> Default for Received<W> {
    fn default() -> Self {
        Received {
            window: RecvWindow::new(),
            refused: Vec::new(),
            last_rejected: None,
        }
    }
}

impl<const W: usize> Received<W> {
    /// Packets held past a gap.
    pub fn held(&self) -> usize {
        self.window.held()
    }

    /// Whether a packet numbered `seq` may claim an event place now: one
    /// delivered at once always may; one to be held past a gap only while
    /// fewer than `share` are held so (worked out only then).
    pub fn may_hold(&self, seq: u64, share: impl FnOnce() -> usize) -> bool {
        seq == self.window.expected() || self.window.held() < share()
    }

    /// Whether a packet numbered `seq` came before (or lies beyond the
    /// window): its payload is not read again.
    pub fn is_duplicate(&self, seq: u64) -> bool {
        matches!(
            self.window.classify(seq),
            Arrival::Duplicate | Arrival::OutsideWindow
        )
    }

    /// Takes packet `seq`: held until it can be delivered, or handed back
    /// (a duplicate, or beyond the window) for what it holds to be let go.
    pub fn receive(&mut self, seq: u64, item: Held) -> Result<(), Held> {
        let refused = matches!(item, Held::Refused { .. });
        self.window
            .receive(seq, item)
            .map_err(|refused| refused.into_item())?;
        if refused {
            // A window holds at most W packets, so W numbers fit; were the
            // list full, its lowest still holds the others back.
            let _ = self.refused.push(seq);
        }
        Ok(())
    }

    /// The next packet to deliver, in order.
    pub fn pop(&mut self) -> Option<Held> {
        self.window.pop().map(|(_, item)| item)
    }

    /// Hands every packet held past a gap to `f`: the peer is lost.
    pub fn drain(&mut self, mut f: impl FnMut(Held)) {
        self.window.drain_held(|_, item| f(item));
    }

    /// Whether transfer `xfer_id` is to be answered with a REJECT: the
    /// first refused packet of a transfer is, the rest are not.
    pub fn reject_once(&mut self, xfer_id: u64) -> bool {
        let first = self.last_rejected != Some(xfer_id);
        self.last_rejected = Some(xfer_id);
        first
    }

    /// Whether transfer `xfer_id` was refused (its notice makes no event).
    pub fn was_refused(&self, xfer_id: u64) -> bool {
        self.last_rejected == Some(xfer_id)
    }

    /// The acknowledgement to give: what arrived, stopped short of a
    /// refused PUT packet while its REJECT may not have reached the peer.
    /// `rejects_in_flight` says whether a REJECT is still to be sent, or
    /// sent and not acknowledged, which holds back every refused packet;
    /// without one, only those still waiting past a gap (their REJECT is
    /// yet to be made) hold it back. It is asked only while a refused
    /// packet is remembered.
    pub fn ack(&mut self, rejects_in_flight: impl FnOnce() -> bool) -> Ack {
        let arrived = self.window.ack();
        if self.refused.is_empty() {
            return arrived;
        }
        if !rejects_in_flight() {
            let expected = self.window.expected();
            self.refused.retain(|&seq| seq >= expected);
        }
        let Some(&lowest) = self.refused.iter().min() else {
            return arrived;
        };
        if lowest <= arrived.cumulative {
            return Ack {
                cumulative: lowest,
                sack: 0,
            };
        }
        // Sack bit i names cumulative + 1 + i: the bits from the refused
        // packet on are cleared.
        let below = lowest - arrived.cumulative - 1;
        let mask = if below >= 64 {
            u64::MAX
        } else {
            (1u64 << below) - 1
        };
        Ack {
            cumulative: arrived.cumulative,
            sack: arrived.sack & mask,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    type R = Received<8>;

    fn put(xfer_id: u64) -> Held {
        Held::Put { xfer_id, len: 8 }
    }

    fn refused(xfer_id: u64) -> Held {
        Held::Refused {
            xfer_id,
            code: RejectCode::BadHandle,
        }
    }

    fn ack(cumulative: u64, sack: u64) -> Ack {
        Ack { cumulative, sack }
    }

    #[test]
    fn packets_are_delivered_in_order_and_a_duplicate_is_handed_back() {
        let mut r = R::default();
        r.receive(2, put(2)).expect("held past the gap");
        assert_eq!(r.held(), 1);
        assert!(r.pop().is_none(), "1 is missing");
        assert!(!r.is_duplicate(1) && r.is_duplicate(2 + 64));
        assert!(r.may_hold(1, || 0), "the next one always may");
        assert!(!r.may_hold(3, || 1), "a share of 1 is taken");
        r.receive(1, put(1)).expect("the gap");
        let order: heapless::Vec<u64, 4> = core::iter::from_fn(|| match r.pop()? {
            Held::Put { xfer_id, .. } => Some(xfer_id),
            _ => None,
        })
        .collect();
        assert_eq!(order.as_slice(), [1, 2]);
        assert!(r.is_duplicate(1));
        assert!(matches!(
            r.receive(1, put(1)),
            Err(Held::Put { xfer_id: 1, .. })
        ));
        assert_eq!(
            r.ack(|| panic!("asked only while a refusal is remembered")),
            ack(3, 0)
        );
    }

    #[test]
    fn a_refused_packet_holds_the_acknowledgement_back_while_its_reject_is_in_flight() {
        let mut r = R::default();
        r.receive(1, put(1)).expect("new");
        r.receive(2, refused(7)).expect("new");
        r.receive(4, put(1)).expect("past a gap");
        while r.pop().is_some() {}
        assert_eq!(
            r.ack(|| true),
            ack(2, 0),
            "stops short of 2 while its REJECT may be lost"
        );
        assert_eq!(r.ack(|| false), ack(3, 0b1), "the REJECT reached the peer");
        // Refused past a gap: the bits from it on are cleared.
        let mut r = R::default();
        r.receive(2, put(1)).expect("new");
        r.receive(3, refused(7)).expect("new");
        r.receive(4, put(1)).expect("new");
        assert_eq!(r.ack(|| false), ack(1, 0b1), "3 is not yet delivered");
        assert_eq!(r.ack(|| true), ack(1, 0b1));
    }

    #[test]
    fn a_transfer_is_rejected_once() {
        let mut r = R::default();
        assert!(!r.was_refused(7));
        assert!(r.reject_once(7));
        assert!(!r.reject_once(7));
        assert!(r.was_refused(7));
        assert!(r.reject_once(8));
        assert!(!r.was_refused(7));
    }
}
