//! Credits: how many SENDs each side may have in the other's receive
//! fragments at once.
//!
//! Each side announces an initial grant in its HELLO and, as the upper
//! layer frees received messages, the total it has given back since, in
//! every packet header (a running count, so a lost or repeated header never
//! miscounts). A sender spends one credit per new SEND; a receiver counts
//! the SENDs it takes and breaks the link of a peer that sends past its
//! grant. All counters wrap, and are compared by their difference.

/// Both directions of one peer's credits.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Credits {
    /// SENDs this side has sent.
    sent: u32,
    /// The peer's initial grant (its HELLO) and the newest total it has
    /// given back since.
    peer_initial: u32,
    peer_granted: u32,
    /// Credits this side has given back beyond its initial grant: fragments
    /// its upper layer freed.
    granted: u32,
    /// SENDs received from the peer, each once.
    received: u32,
}

impl Credits {
    /// The peer's initial grant, from its HELLO.
    pub fn open(&mut self, peer_initial: u32) {
        self.peer_initial = peer_initial;
    }

    /// Whether one more SEND may go.
    pub fn has_credit(&self) -> bool {
        let allowed = self.peer_initial.wrapping_add(self.peer_granted);
        (allowed.wrapping_sub(self.sent) as i32) > 0
    }

    /// A SEND went.
    pub fn spend(&mut self) {
        self.sent = self.sent.wrapping_add(1);
    }

    /// The total the peer has given back, from a packet header; an older
    /// total (a packet overtaken) changes nothing.
    pub fn on_grant(&mut self, total: u32) {
        if (total.wrapping_sub(self.peer_granted) as i32) > 0 {
            self.peer_granted = total;
        }
    }

    /// The upper layer freed a received message: one more credit goes back
    /// with the next header.
    pub fn give_back(&mut self) {
        self.granted = self.granted.wrapping_add(1);
    }

    /// The total this side has given back, for its headers.
    pub fn granted(&self) -> u32 {
        self.granted
    }

    /// One more SEND came from the peer; whether it is within what this
    /// side granted (`initial` and what it gave back since). A peer beyond
    /// it breaks the protocol.
    pub fn receive(&mut self, initial: u32) -> bool {
        self.received = self.received.wrapping_add(1);
        let allowed = initial.wrapping_add(self.granted);
        (self.received.wrapping_sub(allowed) as i32) <= 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sender_spends_its_grant_and_waits_for_more() {
        let mut c = Credits::default();
        c.open(2);
        assert!(c.has_credit());
        c.spend();
        c.spend();
        assert!(!c.has_credit(), "the initial grant is spent");
        c.on_grant(1);
        assert!(c.has_credit(), "one given back");
        c.on_grant(0);
        assert!(c.has_credit(), "an older total changes nothing");
        c.spend();
        assert!(!c.has_credit());
    }

    #[test]
    fn a_receiver_refuses_sends_beyond_its_grant() {
        let mut c = Credits::default();
        assert!(c.receive(2) && c.receive(2));
        assert!(!c.receive(2), "a third send with two granted");
        let mut c = Credits::default();
        assert!(c.receive(1));
        c.give_back();
        assert_eq!(c.granted(), 1);
        assert!(c.receive(1), "the freed fragment's credit");
    }

    #[test]
    fn counters_compare_across_the_wrap() {
        let mut c = Credits {
            sent: u32::MAX,
            peer_initial: u32::MAX,
            peer_granted: 0,
            granted: 0,
            received: 0,
        };
        assert!(!c.has_credit());
        c.on_grant(1);
        assert!(c.has_credit(), "u32::MAX + 1 wraps to 0, one above sent");
    }
}
