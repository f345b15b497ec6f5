//! A link's write queue: control frames it keeps itself, the latest
//! acknowledgement, and the sequence numbers of its peer's retained
//! packets, whose bytes stay with the peer until they are written.
//!
//! Over a stream a write may take part of what it was offered; the frame
//! it stopped in is written on first at the next transmit: a retained
//! packet partly written is *pinned* ([`Written`]), and its peer keeps it
//! until the link reports it written even if the peer acknowledges it
//! meanwhile. Over datagrams each transmit is one frame, sent whole or
//! dropped.
//!
//! A frame's CRC32C trailer is taken here, over the bytes as they go out:
//! a payload in registered memory may change while its packet waits, or
//! between two parts of a write (a put landing in the bytes a get's reply
//! reads), and the peer must get a trailer that matches what it read. The
//! part of a pinned frame already written is summed as the driver reports
//! it ([`Outbox::handle_written`]); the engine and the user change
//! registered memory only on this thread, between a write and its report.

use heapless::Deque;

use super::framing::Framing;
use super::packet::{ControlFrame, MAX_SEGMENTS, Outgoing, Registered, Segments, push_skipping};
use crate::pool::PoolsRef;
use crate::wire::{CHECKSUM_LEN, Crc32c};

/// Control frames a link keeps at once: its HELLO, its HELLO_ACK (twice
/// over datagrams, when repeated) and a CLOSE.
const CONTROL_FRAMES: usize = 4;

/// What a link asks of its peer to write the peer's packets.
pub(crate) trait Retained {
    /// The retained packet `seq`, if the peer still has it (not yet
    /// acknowledged, or acknowledged while a link writes it).
    fn retained(&self, seq: u64) -> Option<&Outgoing>;

    /// A number that changes whenever a packet stops being retained, if
    /// the peer keeps one: while it stays the same, what a link's queue
    /// holds is still retained and need not be looked at again.
    fn let_go(&self) -> Option<u64> {
        None
    }
}

/// A frame being written.
#[derive(Debug, Clone)]
enum Frame {
    Control(ControlFrame),
    Reliable(u64),
}

/// What a write did to the peer's packets.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Written {
    /// A retained packet that was pinned and is now written whole: the
    /// peer may let it go.
    pub(crate) unpinned: Option<u64>,
    /// A retained packet now partly written: the peer keeps it as it is
    /// until its last byte is written.
    pub(crate) pinned: Option<u64>,
}

/// The write queue of one link whose peer has a window of `W`.
#[derive(Debug)]
pub struct Outbox<const W: usize> {
    /// The frame whose first bytes went out (over datagrams: the frame
    /// last offered), and how many of them.
    writing: Option<Frame>,
    written: usize,
    /// The CRC32C of the bytes of `writing` written so far, up to the end
    /// of its payload.
    summed: Crc32c,
    /// The CRC32C trailers of the frames a transmit offers, in order.
    crcs: [[u8; CHECKSUM_LEN]; MAX_SEGMENTS],
    control: Deque<ControlFrame, CONTROL_FRAMES>,
    ack: Option<ControlFrame>,
    reliable: Deque<u64, W>,
    /// The peer's [`Retained::let_go`] when the queue last held only
    /// packets it retained.
    checked: Option<u64>,
    /// The highest sequence number ever queued here (0: none): a packet
    /// numbered above it, as every new one is, waits in no queue, and
    /// [`holds`](Self::holds) says so without a walk.
    newest: u64,
}

impl<const W: usize> Default for Outbox<W> {
    fn default() -> Self {
        Self::new()
    }
}

impl<const W: usize> Outbox<W> {
    /// An empty queue.
    pub(crate) fn new() -> Self {
        Outbox {
            writing: None,
            written: 0,
            summed: Crc32c::new(),
            crcs: [[0; CHECKSUM_LEN]; MAX_SEGMENTS],
            control: Deque::new(),
            ack: None,
            reliable: Deque::new(),
            checked: None,
            newest: 0,
        }
    }

    /// Queues a control frame; false if the queue is full.
    pub(crate) fn push_control(&mut self, frame: ControlFrame) -> bool {
        self.control.push_back(frame).is_ok()
    }

    /// Queues an acknowledgement, in place of one queued and not begun
    /// (the newer says more).
    pub(crate) fn set_ack(&mut self, frame: ControlFrame) {
        self.ack = Some(frame);
    }

    /// Queues retained packet `seq` of `peer`. Packets the peer let go
    /// since they were queued make room first: the queue holds a window's
    /// worth, and every packet the peer retains fits.
    pub(crate) fn enqueue<P: Retained>(&mut self, seq: u64, peer: &P) {
        if self.reliable.is_full() {
            self.forget_released(peer);
        }
        let queued = self.reliable.push_back(seq);
        debug_assert!(queued.is_ok(), "a window's packets fit the queue");
        self.newest = self.newest.max(seq);
    }

    /// Drops the packets `peer` no longer retains (acknowledged since they
    /// were queued, by way of another link or before their turn came).
    fn forget_released<P: Retained>(&mut self, peer: &P) {
        let let_go = peer.let_go();
        if let_go.is_some() && let_go == self.checked {
            return;
        }
        self.checked = let_go;
        for _ in 0..self.reliable.len() {
            if let Some(seq) = self.reliable.pop_front()
                && peer.retained(seq).is_some()
            {
                let _ = self.reliable.push_back(seq);
            }
        }
    }

    /// Whether retained packet `seq` waits here, or is being written.
    pub(crate) fn holds(&self, seq: u64) -> bool {
        matches!(self.writing, Some(Frame::Reliable(s)) if s == seq)
            || (seq <= self.newest && self.reliable.iter().any(|&s| s == seq))
    }

    /// Whether nothing waits to be written.
    pub(crate) fn is_empty(&self) -> bool {
        self.writing.is_none()
            && self.control.is_empty()
            && self.ack.is_none()
            && self.reliable.is_empty()
    }

    /// Whether a frame is partly written: nothing else may follow before
    /// its last byte.
    pub(crate) fn is_mid_frame(&self) -> bool {
        self.writing.is_some() && self.written > 0
    }

    /// Drops everything queued; returns the retained packet that was
    /// pinned, if any (its peer may let it go).
    pub(crate) fn clear(&mut self) -> Option<u64> {
        let pinned = match self.writing.take() {
            Some(Frame::Reliable(seq)) if self.written > 0 => Some(seq),
            _ => None,
        };
        self.written = 0;
        self.summed = Crc32c::new();
        self.control.clear();
        self.ack = None;
        self.reliable.clear();
        pinned
    }

    /// The next bytes to write: the rest of the frame begun, then control
    /// frames, the acknowledgement and retained packets, as many as the
    /// framing puts in one transmit. Packets the peer no longer retains
    /// (acknowledged since, by way of another link) are dropped unwritten.
    pub(crate) fn poll_transmit<'a, F: Framing, P: Retained>(
        &'a mut self,
        peer: Option<&'a P>,
        pools: PoolsRef<'a>,
        regs: &'a impl Registered,
    ) -> Option<Segments<'a>> {
        match peer {
            Some(peer) => self.forget_released(peer),
            None => {
                self.reliable.clear();
                self.checked = None;
            }
        }
        if F::FRAMES_PER_TRANSMIT == 1 {
            // The frame last offered, if the driver could not send it and
            // said nothing (its socket was full), is offered again, unless
            // the peer has let it go since: then the next one is.
            let let_go = |frame: &Option<Frame>| match frame {
                Some(Frame::Reliable(seq)) => peer.is_none_or(|p| p.retained(*seq).is_none()),
                _ => false,
            };
            if let_go(&self.writing) {
                self.writing = None;
            }
            if self.writing.is_none() {
                self.writing = self.pop_next();
                self.written = 0;
                self.summed = Crc32c::new();
            }
        }
        let mut out = Segments::new();
        let mut skip = self.written;
        let mut frames = 0;
        let Outbox {
            writing,
            written,
            summed,
            crcs,
            control,
            ack,
            reliable,
            ..
        } = self;
        let mut crcs = crcs.iter_mut();
        // `summed` holds the bytes of the frame begun written so far; a
        // frame not begun is summed whole.
        let mut add = |frame: FrameRef<'a>,
                       begun: Option<(&Crc32c, usize)>,
                       out: &mut Segments<'a>,
                       skip: &mut usize| match frame {
            FrameRef::Control(c) => push_skipping(out, c.as_bytes(), skip),
            FrameRef::Reliable(seq) => {
                let Some(packet) = peer.and_then(|p| p.retained(seq)) else {
                    return;
                };
                let Some(slot) = crcs.next() else {
                    return;
                };
                if packet.has_crc() {
                    let (mut crc, from) = begun.map_or((Crc32c::new(), 0), |(s, n)| (s.clone(), n));
                    packet.sum_body(pools, regs, &mut crc, from, usize::MAX);
                    *slot = crc.trailer();
                }
                let slot: &'a [u8; CHECKSUM_LEN] = slot;
                packet.segments(pools, regs, slot, out, skip);
            }
        };
        if let Some(frame) = writing {
            add(
                FrameRef::of(frame),
                Some((summed, *written)),
                &mut out,
                &mut skip,
            );
            frames += 1;
        }
        let queued = control
            .iter()
            .map(FrameRef::Control)
            .chain(ack.iter().map(FrameRef::Control))
            .chain(reliable.iter().map(|&s| FrameRef::Reliable(s)));
        for frame in queued {
            if frames >= F::FRAMES_PER_TRANSMIT || out.len() + 3 > MAX_SEGMENTS {
                break;
            }
            add(frame, None, &mut out, &mut skip);
            frames += 1;
        }
        (!out.is_empty()).then_some(out)
    }

    /// `n` bytes of what [`poll_transmit`](Self::poll_transmit) handed out
    /// were written (over datagrams: the datagram was sent or dropped,
    /// whatever `n`).
    pub(crate) fn handle_written<F: Framing, P: Retained>(
        &mut self,
        n: usize,
        peer: Option<&P>,
        pools: PoolsRef<'_>,
        regs: &impl Registered,
    ) -> Written {
        let mut done = Written::default();
        if F::FRAMES_PER_TRANSMIT == 1 {
            self.writing = None;
            self.written = 0;
            return done;
        }
        let len_of = |frame: &Frame| match frame {
            Frame::Control(c) => c.as_bytes().len(),
            Frame::Reliable(seq) => peer
                .and_then(|p| p.retained(*seq))
                .map_or(0, |packet| packet.wire_len(pools, regs)),
        };
        // The bytes of a pinned frame's payload as they went out, for the
        // trailer that follows them.
        let sum = |summed: &mut Crc32c, frame: &Frame, from: usize, to: usize| {
            if let Frame::Reliable(seq) = frame
                && let Some(packet) = peer.and_then(|p| p.retained(*seq))
                && packet.has_crc()
            {
                packet.sum_body(pools, regs, summed, from, to);
            }
        };
        let mut left = n;
        if let Some(frame) = &self.writing {
            let rest = len_of(frame).saturating_sub(self.written);
            if left < rest {
                sum(&mut self.summed, frame, self.written, self.written + left);
                self.written += left;
                return done;
            }
            left -= rest;
            if let Some(Frame::Reliable(seq)) = self.writing.take() {
                done.unpinned = Some(seq);
            }
            self.written = 0;
            self.summed = Crc32c::new();
        }
        while left > 0 {
            let Some(frame) = self.pop_next() else {
                break;
            };
            let len = len_of(&frame);
            if left < len {
                if let Frame::Reliable(seq) = frame {
                    done.pinned = Some(seq);
                }
                sum(&mut self.summed, &frame, 0, left);
                self.writing = Some(frame);
                self.written = left;
                break;
            }
            left -= len;
        }
        done
    }

    /// Takes the next frame queued, in transmit order.
    fn pop_next(&mut self) -> Option<Frame> {
        if let Some(c) = self.control.pop_front() {
            return Some(Frame::Control(c));
        }
        if let Some(a) = self.ack.take() {
            return Some(Frame::Control(a));
        }
        self.reliable.pop_front().map(Frame::Reliable)
    }
}

/// A frame as a transmit refers to it.
#[derive(Clone, Copy)]
enum FrameRef<'a> {
    Control(&'a ControlFrame),
    Reliable(u64),
}

impl<'a> FrameRef<'a> {
    fn of(frame: &'a Frame) -> Self {
        match frame {
            Frame::Control(c) => FrameRef::Control(c),
            Frame::Reliable(seq) => FrameRef::Reliable(*seq),
        }
    }
}

#[cfg(test)]
mod tests;
