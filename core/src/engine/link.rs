//! A link: one connection (or datagram association) to a peer, with its
//! handshake, its reader and its write queue.
//!
//! A link is opened by the driver (connected, or accepted from a peer),
//! handshakes (`Handshaking`), carries its peer's packets once the engine
//! opens it (`Open`), and ends (`Closing`) with a CLOSE that says why, or
//! quietly, until the driver reports it closed. Its deadlines are the
//! handshake's: a timeout, and over datagrams the repetition of its
//! packets. Everything about the peer it carries is the peer's.

use crate::btl::{LostReason, MemSlice, RejectCode, Tag};
use crate::endpoint::{EndpointId, ProcName};
use crate::pool::Fragment;
use crate::time::{Duration, Instant};
use crate::wire::{
    AckRepr, CloseReason, CloseRepr, ControlRepr, CookieRepr, HelloAckRepr, HelloRepr, Limits,
    NotifyRepr, PutRepr, Seal,
};

use super::config::EngineConfig;
use super::framing::Framing;
use super::handshake::{Handshake, HandshakePacket, LocalHello};
use super::mover::StreamReader;
use super::outbox::Outbox;
use super::packet::ControlFrame;
use super::timers::{Deadlines, Timers};
use super::{LinkEnd, Source};

/// Where a link is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LinkState {
    /// Exchanging HELLOs.
    Handshaking,
    /// Carrying its peer's packets.
    Open,
    /// Writing its last bytes (a CLOSE, or what was begun), then to be
    /// closed by the driver.
    Closing,
}

/// The frame being read, as its header and fixed fields decoded: where
/// its payload goes, or the packet without payload that the link itself
/// acts on (the handshake, a CLOSE, a cookie), an acknowledgement, or a
/// numbered control packet for the peer.
#[derive(Debug)]
pub enum Receiving {
    /// Nothing (between frames, or a frame without payload to keep).
    None,
    /// A SEND's payload, into a receive fragment.
    Send {
        /// The message's tag.
        tag: Tag,
        /// Its sequence number.
        seq: u64,
        /// The fragment it lands in.
        frag: Fragment,
        /// Bytes in so far.
        have: usize,
        /// Its length.
        len: usize,
    },
    /// A SEND whose payload waits for a receive fragment.
    WaitingFragment {
        /// The message's tag.
        tag: Tag,
        /// Its sequence number.
        seq: u64,
        /// Its length.
        len: usize,
    },
    /// A PUT's data, into registered memory, or dropped with the code it
    /// is refused with.
    Put {
        /// The packet's fixed fields.
        put: PutRepr,
        /// Its sequence number.
        seq: u64,
        /// Where it lands, or why not.
        dst: Result<MemSlice, RejectCode>,
        /// Bytes in so far.
        have: u64,
    },
    /// A put's notice waiting for a place in the event queue.
    WaitingEventRoom {
        /// Its sequence number.
        seq: u64,
        /// The notice.
        notify: NotifyRepr,
    },
    /// A SEND or PUT received before: its payload is dropped unread, and
    /// the peer is owed an acknowledgement (it evidently missed one).
    Duplicate,
    /// The peer's HELLO.
    Hello(HelloRepr),
    /// The peer's answer to this side's HELLO.
    HelloAck(HelloAckRepr),
    /// An acknowledgement.
    Ack(AckRepr),
    /// The peer ends the link.
    Close {
        /// Why.
        reason: CloseReason,
    },
    /// Over datagrams, the server asks this side to show it receives at
    /// its address (see [`CookieRepr`]).
    Cookie(CookieRepr),
    /// A reliable control packet: delivered in order, acknowledged.
    Control {
        /// Its sequence number.
        seq: u64,
        /// The packet.
        packet: ControlRepr,
    },
}

/// A link's deadlines.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LinkTimer {
    /// The handshake did not finish in time.
    Handshake,
    /// The handshake's packets go again (over datagrams).
    HelloRepeat,
    /// The claim that the peer started again is weighed ([`Doubt`]).
    Doubt,
}

/// A claim, not yet believed, that the peer's process started again (a
/// HELLO with another epoch than the live peer's): the peer was asked for
/// an acknowledgement at `since`, and one heard from it by `until` shows
/// its old start alive, and the claim false.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Doubt {
    /// When the peer was asked.
    pub since: Instant,
    /// When the claim is weighed.
    pub until: Instant,
}

/// What a link does when a HELLO or HELLO_ACK arrives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Handshaken {
    /// The handshake moved on (or a repetition was answered or dropped).
    Continue,
    /// The peer's process started again from the same address: the link
    /// of its old start ends quietly.
    PeerRestarted,
}

/// What ending a link leaves for others to release.
#[derive(Debug, Default)]
pub struct Dropped {
    /// A receive fragment a SEND was arriving in.
    pub fragment: Option<Fragment>,
    /// An event place kept for a notice that was arriving.
    pub event_place: bool,
    /// A retained packet of the peer that was partly written.
    pub unpinned: Option<u64>,
}

/// One connection, with its peer's window of `W` packets.
#[derive(Debug)]
pub struct Link<const W: usize> {
    peer: Option<EndpointId>,
    /// Which of the peer's links this is: asked for by this side, or named
    /// by the peer's HELLO.
    index: u8,
    state: LinkState,
    handshake: Handshake,
    reader: StreamReader,
    receiving: Receiving,
    outbox: Outbox<W>,
    opened_at: Instant,
    /// When the handshake packets last went out.
    hello_sent_at: Instant,
    /// How often they went out again (over datagrams): each repetition
    /// waits twice as long as the one before.
    hello_repeats: u8,
    /// Why the link is closing and whether the peer said so, once it is.
    end: Option<(CloseReason, bool)>,
    /// Where a link the peer opened comes from; `None` for one this side
    /// opened. What the handshake budget counts.
    source: Option<Source>,
    /// Whether any byte has come: a silent stranger is the first to go
    /// when the handshake budget is short.
    heard: bool,
    /// Links made before this one: the order of age.
    serial: u32,
    /// Whether the driver has been asked to close it.
    close_asked: bool,
    /// Why this side gave its peer up, if that is what ends it.
    peer_lost: Option<LostReason>,
    /// The keys its datagrams are sealed with, once open between keyed
    /// processes: kept here, so that its CLOSE bears the seal even after
    /// its peer was given up.
    seal: Option<Seal>,
    /// A restart of the peer it carries (or claims) not yet believed.
    doubt: Option<Doubt>,
}

impl<const W: usize> Link<W> {
    /// A link opened at `now` to `expected` (a connection this side made,
    /// for peer `peer`) or accepted from `source` (its peer learned from
    /// its HELLO), announcing `local`.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        local: &LocalHello,
        expected: Option<ProcName>,
        peer: Option<EndpointId>,
        source: Option<Source>,
        limits: Limits,
        now: Instant,
        serial: u32,
    ) -> Self {
        Link {
            peer,
            index: u8::try_from(local.link_index).unwrap_or(0),
            state: LinkState::Handshaking,
            handshake: Handshake::new(local, expected),
            reader: StreamReader::new(limits),
            receiving: Receiving::None,
            outbox: Outbox::new(),
            opened_at: now,
            hello_sent_at: now,
            hello_repeats: 0,
            end: None,
            source,
            heard: false,
            serial,
            close_asked: false,
            peer_lost: None,
            seal: None,
            doubt: None,
        }
    }

    /// The peer it carries, once known.
    pub fn peer(&self) -> Option<EndpointId> {
        self.peer
    }

    /// The restart it doubts, if any.
    pub fn doubt(&self) -> Option<Doubt> {
        self.doubt
    }

    /// Doubts a restart of its peer (see [`Doubt`]), unless it does
    /// already; `None` ends the doubt.
    pub fn set_doubt(&mut self, doubt: Option<Doubt>) {
        self.doubt = match doubt {
            Some(d) => Some(self.doubt.unwrap_or(d)),
            None => None,
        };
    }

    /// Detaches the link from its peer (the peer is lost, for `lost` if
    /// this side gave it up, or forgotten).
    pub fn forget_peer(&mut self, lost: Option<LostReason>) {
        self.peer = None;
        self.peer_lost = lost;
    }

    /// Which of its peer's links it is.
    pub fn index(&self) -> u8 {
        self.index
    }

    /// Where it is in its life.
    pub fn state(&self) -> LinkState {
        self.state
    }

    /// Whether it carries its peer's packets.
    pub fn is_open(&self) -> bool {
        self.state == LinkState::Open
    }

    /// Whether it is still in its handshake.
    pub fn is_handshaking(&self) -> bool {
        self.state == LinkState::Handshaking
    }

    /// Where a link the peer opened comes from.
    pub fn source(&self) -> Option<Source> {
        self.source
    }

    /// Whether any byte has come.
    pub fn heard(&self) -> bool {
        self.heard
    }

    /// Notes that bytes came.
    pub fn mark_heard(&mut self) {
        self.heard = true;
    }

    /// When it was opened, and its place in the order of age.
    pub fn age(&self) -> (Instant, u32) {
        (self.opened_at, self.serial)
    }

    /// Its handshake.
    pub fn handshake(&self) -> &Handshake {
        &self.handshake
    }

    /// The reader and what it is receiving into.
    pub fn reader_mut(&mut self) -> (&mut StreamReader, &mut Receiving) {
        (&mut self.reader, &mut self.receiving)
    }

    /// Starts reading a new datagram: a fresh reader for one frame whose
    /// checksum the caller checked.
    pub fn read_datagram(&mut self, limits: Limits) -> Dropped {
        self.reader = StreamReader::for_checked_frame(limits);
        self.stop_receiving()
    }

    /// Drops the frame being received: what it holds is for the caller to
    /// release.
    fn stop_receiving(&mut self) -> Dropped {
        let mut dropped = Dropped::default();
        match core::mem::replace(&mut self.receiving, Receiving::None) {
            Receiving::Send { frag, .. } => dropped.fragment = Some(frag),
            Receiving::Control {
                packet: ControlRepr::Notify(_),
                ..
            } => dropped.event_place = true,
            _ => {}
        }
        dropped
    }

    /// The write queue.
    pub(crate) fn outbox(&mut self) -> &mut Outbox<W> {
        &mut self.outbox
    }

    /// Whether retained packet `seq` waits on this link (or is being
    /// written).
    pub fn holds(&self, seq: u64) -> bool {
        self.outbox.holds(seq)
    }

    /// Queues the handshake packets that are due; `key` proves this side
    /// holds the job key.
    pub fn queue_handshake(&mut self, key: Option<&[u8]>) {
        while let Some(packet) = self.handshake.poll_send(key) {
            let frame = match packet {
                HandshakePacket::Hello(h) => ControlFrame::hello(h),
                HandshakePacket::HelloAck(a) => ControlFrame::hello_ack(a),
            };
            let _ = self.outbox.push_control(frame);
        }
    }

    /// The peer's HELLO. Over a lossy transport handshake packets are
    /// repeated until they get through: a HELLO seen before means the peer
    /// still waits for this side's HELLO_ACK, and one of another start of
    /// the same process means that process started again from the old
    /// one's address (or someone claims so: the engine doubts it). Any
    /// other HELLO from the peer's address is not the peer's, and changes
    /// nothing.
    pub fn on_hello<F: Framing>(
        &mut self,
        hello: HelloRepr,
        key: Option<&[u8]>,
    ) -> Result<Handshaken, CloseReason> {
        if F::LOSSY
            && let Some(old) = self.handshake.peer()
        {
            if *old == hello {
                self.handshake.repeat_ack();
                self.queue_handshake(key);
                return Ok(Handshaken::Continue);
            }
            if (old.job, old.rank) == (hello.job, hello.rank) && old.epoch != hello.epoch {
                return Ok(Handshaken::PeerRestarted);
            }
            return Ok(Handshaken::Continue);
        }
        self.handshake
            .on_hello(hello)
            .map_err(|e| e.close_reason())?;
        self.queue_handshake(key);
        Ok(Handshaken::Continue)
    }

    /// The server's COOKIE, over datagrams: a link this side opened that
    /// has not heard the server's HELLO yet sends the cookie back, then its
    /// HELLO again, at once. Anywhere else it changes nothing (a late or
    /// forged one).
    pub fn on_cookie(&mut self, cookie: CookieRepr, key: Option<&[u8]>) {
        if self.source.is_some() || !self.is_handshaking() || self.handshake.peer().is_some() {
            return;
        }
        let _ = self.outbox.push_control(ControlFrame::cookie(cookie));
        self.handshake.repeat();
        self.queue_handshake(key);
    }

    /// The peer's HELLO_ACK; over a lossy transport a repetition (or one
    /// before the peer's HELLO) is dropped.
    pub fn on_hello_ack<F: Framing>(
        &mut self,
        ack: &HelloAckRepr,
        key: Option<&[u8]>,
    ) -> Result<(), CloseReason> {
        if F::LOSSY && (self.handshake.is_verified() || self.handshake.peer().is_none()) {
            return Ok(());
        }
        self.handshake
            .on_hello_ack(ack, key)
            .map_err(|e| e.close_reason())?;
        self.queue_handshake(key);
        Ok(())
    }

    /// Opens the link for `peer`, as its link `index`, its datagrams
    /// sealed with `seal` if the handshake derived one.
    pub fn open(&mut self, peer: EndpointId, index: u8, seal: Option<Seal>) {
        self.peer = Some(peer);
        self.index = index;
        self.state = LinkState::Open;
        self.seal = seal;
    }

    /// Ends the link for `reason`, a CLOSE going out first: unless a frame
    /// is partly written (a CLOSE after part of a frame would be read as
    /// the rest of it, into a peer's memory for a PUT), then it just
    /// closes. Nothing if it is closing already. The CLOSE bears the
    /// link's seal, if it has one.
    pub fn fail(&mut self, reason: CloseReason) -> Option<Dropped> {
        if self.state == LinkState::Closing {
            return None;
        }
        let mid_frame = self.outbox.is_mid_frame();
        let dropped = self.end(reason, false);
        if !mid_frame {
            let _ = self.outbox.push_control(ControlFrame::close(
                CloseRepr { reason },
                self.seal.as_ref(),
            ));
        }
        Some(dropped)
    }

    /// Ends the link without a CLOSE: the peer closed it (`by_peer`), or
    /// nobody is left to read one (a peer process that started again, a
    /// stream that stopped carrying anything).
    pub fn end(&mut self, reason: CloseReason, by_peer: bool) -> Dropped {
        self.state = LinkState::Closing;
        self.end = Some((reason, by_peer));
        self.closed_now()
    }

    /// What is left when the driver reports the link closed.
    pub fn closed(mut self) -> Dropped {
        self.closed_now()
    }

    fn closed_now(&mut self) -> Dropped {
        let unpinned = self.outbox.clear();
        Dropped {
            unpinned,
            ..self.stop_receiving()
        }
    }

    /// Why the link is closing, once it is.
    pub fn link_end(&self) -> Option<LinkEnd> {
        let (reason, by_peer) = self.end?;
        Some(LinkEnd {
            reason,
            by_peer,
            verified: self.handshake.is_verified(),
            lost: self.peer_lost,
        })
    }

    /// Whether the driver should close the link now (its last bytes are
    /// written); true once.
    pub fn poll_close(&mut self) -> bool {
        let due = self.state == LinkState::Closing && self.outbox.is_empty() && !self.close_asked;
        self.close_asked |= due;
        due
    }

    /// Whether it has a close for the driver (see
    /// [`poll_close`](Self::poll_close)) or will once its last bytes are
    /// written.
    pub fn is_closing(&self) -> bool {
        self.state == LinkState::Closing && !self.close_asked
    }

    /// Its deadlines: the handshake's timeout and, with `framing` lossy,
    /// the repetition of its packets.
    pub fn timers<F: Framing>(&self, framing: &F, config: &EngineConfig) -> Timers<LinkTimer, 3> {
        let mut t = Timers::new();
        self.deadlines(framing, config, &mut t);
        t
    }

    /// Its deadlines, into `t`: the table [`timers`](Self::timers) acts
    /// on, or only their earliest, which the engine's `poll_timeout` asks.
    pub fn deadlines<F: Framing>(
        &self,
        framing: &F,
        config: &EngineConfig,
        t: &mut impl Deadlines<LinkTimer>,
    ) {
        t.set(LinkTimer::Doubt, self.doubt.map(|d| d.until));
        if self.state == LinkState::Handshaking {
            t.set(
                LinkTimer::Handshake,
                Some(self.opened_at + config.handshake_timeout),
            );
            t.set(
                LinkTimer::HelloRepeat,
                framing.hello_repeat(config).map(|after: Duration| {
                    self.hello_sent_at + backoff(after, self.hello_repeats, config)
                }),
            );
        }
    }

    /// Sends the handshake's packets again at `now` (over datagrams).
    pub fn repeat_hello(&mut self, now: Instant, key: Option<&[u8]>) {
        self.hello_sent_at = now;
        self.hello_repeats = self.hello_repeats.saturating_add(1);
        self.handshake.repeat();
        self.queue_handshake(key);
    }
}

/// How long the handshake's `repeats`th repetition waits after the one
/// before: `first`, doubled each time up to the largest retransmission
/// timeout, as TCP repeats a SYN. A peer that never answers (a forged
/// source) is sent a handful of HELLOs before the handshake times out, not
/// one every initial timeout.
fn backoff(first: Duration, repeats: u8, config: &EngineConfig) -> Duration {
    let max = config.rtt.normalized().max_rto;
    let doubled = first.saturating_mul(1u64 << repeats.min(32));
    doubled.min(max)
}

#[cfg(test)]
mod tests;
