//! Movers, after Motr's sock transport: the reader that turns a byte stream
//! into packets, reading each header into scratch space and each payload
//! straight into its target, and the frame pieces the writer hands out.

use crate::wire::{
    CHECKSUM_LEN, Crc32c, Flags, HEADER_LEN, Header, HeaderRepr, Limits, MAX_PREFIX_LEN,
    MAX_TRAILER_LEN, PacketType, WireError,
};

/// Where a packet's payload goes, chosen by the engine once it has seen the
/// header and the fixed fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PayloadTarget {
    /// No payload, or one to read and drop (a refused PUT).
    Discard,
    /// The engine's receive target; `len` bytes.
    Engine,
}

/// What the reader has for the engine.
#[derive(Debug, PartialEq, Eq)]
pub enum ReadStep {
    /// More bytes are needed.
    NeedMore,
    /// Header and fixed fields are in: the engine must choose the payload
    /// target with [`StreamReader::set_target`].
    Prefix {
        /// The header.
        header: HeaderRepr,
    },
    /// `len` payload bytes at the front of the input go to the target.
    Payload {
        /// How many of the input bytes are payload for the target.
        len: usize,
    },
    /// The frame is complete (CRC trailer checked, if any; a seal is the
    /// datagram reader's to check, before the frame is read).
    Done {
        /// The header.
        header: HeaderRepr,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Prefix,
    AwaitTarget,
    Payload,
    Trailer,
}

/// The stream reader of one link.
#[derive(Debug)]
pub struct StreamReader {
    limits: Limits,
    scratch: [u8; MAX_PREFIX_LEN],
    have: usize,
    need: usize,
    header: Option<HeaderRepr>,
    state: State,
    payload_left: u64,
    target: PayloadTarget,
    trailer: [u8; MAX_TRAILER_LEN],
    trailer_have: usize,
    crc: Crc32c,
    /// Check trailers; off for a frame checked whole already (a datagram).
    verify: bool,
}

impl StreamReader {
    /// A reader accepting bodies up to `limits`.
    pub fn new(limits: Limits) -> Self {
        StreamReader {
            limits,
            scratch: [0; MAX_PREFIX_LEN],
            have: 0,
            need: HEADER_LEN,
            header: None,
            state: State::Prefix,
            payload_left: 0,
            target: PayloadTarget::Discard,
            trailer: [0; MAX_TRAILER_LEN],
            trailer_have: 0,
            crc: Crc32c::new(),
            verify: true,
        }
    }

    /// A reader for one frame whose checksum has been checked already (a
    /// whole datagram): it skips the trailer instead of summing the
    /// payload a second time.
    pub fn for_checked_frame(limits: Limits) -> Self {
        StreamReader {
            verify: false,
            ..Self::new(limits)
        }
    }

    /// Whether the current frame's bytes go through the checksum.
    fn sums(&self) -> bool {
        self.verify
            && self
                .header
                .is_some_and(|h| h.flags.contains(Flags::CHECKSUM))
    }

    /// The fixed body fields of the current frame (valid after
    /// [`ReadStep::Prefix`]).
    pub fn fixed(&self) -> &[u8] {
        self.scratch.get(HEADER_LEN..self.have).unwrap_or(&[])
    }

    /// Payload bytes of the current frame still to come.
    pub fn payload_left(&self) -> u64 {
        self.payload_left
    }

    /// Whether payload bytes for the engine's target are due next: the
    /// target is chosen and some of its bytes are still to come.
    pub fn in_payload(&self) -> bool {
        self.state == State::Payload
            && self.target == PayloadTarget::Engine
            && self.payload_left > 0
    }

    /// Chooses where the payload goes (after [`ReadStep::Prefix`]).
    pub fn set_target(&mut self, target: PayloadTarget) {
        if self.state == State::AwaitTarget {
            self.target = target;
            self.state = State::Payload;
        }
    }

    /// The target chosen for the current payload.
    pub fn target(&self) -> PayloadTarget {
        self.target
    }

    /// Consumes from `input` and says what happened; `used` is set to the
    /// number of bytes consumed. Payload bytes are not consumed here: the
    /// engine copies them to the target and calls [`consume_payload`].
    ///
    /// [`consume_payload`]: Self::consume_payload
    pub fn step(&mut self, input: &[u8], used: &mut usize) -> Result<ReadStep, WireError> {
        *used = 0;
        match self.state {
            State::Prefix => {
                let take = (self.need - self.have).min(input.len());
                self.scratch[self.have..self.have + take].copy_from_slice(&input[..take]);
                self.have += take;
                *used = take;
                if self.have < self.need {
                    return Ok(ReadStep::NeedMore);
                }
                if self.header.is_none() {
                    let header = HeaderRepr::parse(
                        &Header::new_checked(&self.scratch[..HEADER_LEN])?,
                        &self.limits,
                    )?;
                    self.header = Some(header);
                    self.need = HEADER_LEN + header.packet_type.fixed_body_len();
                    if self.have < self.need {
                        return Ok(ReadStep::NeedMore);
                    }
                }
                let header = self.header.ok_or(WireError::HeaderMismatch)?;
                // The checksum runs only over frames that carry a trailer:
                // without one it would cost every payload byte for nothing.
                self.crc = Crc32c::new();
                if self.sums() {
                    self.crc.update(&self.scratch[..self.have]);
                }
                let fixed = header.packet_type.fixed_body_len() as u64;
                self.payload_left = header.body_len.saturating_sub(fixed);
                if has_payload(header.packet_type) {
                    self.state = State::AwaitTarget;
                    Ok(ReadStep::Prefix { header })
                } else {
                    self.target = PayloadTarget::Discard;
                    self.state = State::Payload;
                    Ok(ReadStep::Prefix { header })
                }
            }
            State::AwaitTarget => Ok(ReadStep::NeedMore),
            State::Payload => {
                if self.payload_left > 0 {
                    let len = usize::try_from(self.payload_left)
                        .unwrap_or(usize::MAX)
                        .min(input.len());
                    return Ok(if len == 0 {
                        ReadStep::NeedMore
                    } else {
                        ReadStep::Payload { len }
                    });
                }
                let header = self.header.ok_or(WireError::HeaderMismatch)?;
                if header.trailer_len() == 0 {
                    return Ok(self.finish());
                }
                self.state = State::Trailer;
                self.step(input, used)
            }
            State::Trailer => {
                let header = self.header.ok_or(WireError::HeaderMismatch)?;
                let len = header.trailer_len().min(MAX_TRAILER_LEN);
                let take = (len - self.trailer_have).min(input.len());
                self.trailer[self.trailer_have..self.trailer_have + take]
                    .copy_from_slice(&input[..take]);
                self.trailer_have += take;
                *used = take;
                if self.trailer_have < len {
                    return Ok(ReadStep::NeedMore);
                }
                let crc = core::mem::take(&mut self.crc);
                if self.sums()
                    && let Some(trailer) = self.trailer.first_chunk::<CHECKSUM_LEN>()
                {
                    crc.check(*trailer)?;
                }
                Ok(self.finish())
            }
        }
    }

    /// Accounts for `bytes`, the next payload bytes, which the engine has
    /// copied to the target (or dropped).
    pub fn consume_payload(&mut self, bytes: &[u8]) {
        if self.sums() {
            self.crc.update(bytes);
        }
        self.payload_left = self.payload_left.saturating_sub(bytes.len() as u64);
    }

    fn finish(&mut self) -> ReadStep {
        let header = self.header.take();
        self.have = 0;
        self.need = HEADER_LEN;
        self.state = State::Prefix;
        self.trailer_have = 0;
        self.payload_left = 0;
        self.target = PayloadTarget::Discard;
        match header {
            Some(header) => ReadStep::Done { header },
            None => ReadStep::NeedMore,
        }
    }
}

fn has_payload(t: PacketType) -> bool {
    matches!(t, PacketType::Send | PacketType::Put)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::{AckRepr, Flags, PacketRepr, emit};

    /// An ACK frame with a CRC trailer, its last byte flipped.
    fn damaged_ack() -> ([u8; 64], usize) {
        let packet = PacketRepr::Ack(AckRepr { sack: 5 });
        let header = HeaderRepr {
            flags: Flags::CHECKSUM,
            ..HeaderRepr::new(&packet)
        };
        let mut frame = [0u8; 64];
        let len = emit(&header, &packet, &mut frame).expect("an ACK frame");
        frame[len - 1] ^= 1;
        (frame, len)
    }

    fn read(mut reader: StreamReader, frame: &[u8]) -> Result<ReadStep, WireError> {
        let mut at = 0;
        loop {
            let mut used = 0;
            let step = reader.step(&frame[at..], &mut used)?;
            at += used;
            if matches!(step, ReadStep::Done { .. }) || at == frame.len() && used == 0 {
                return Ok(step);
            }
        }
    }

    /// A stream reader checks the trailer; one for a frame already checked
    /// whole (a datagram) reads past it without summing again.
    #[test]
    fn only_a_reader_for_unchecked_frames_verifies_the_trailer() {
        let (frame, len) = damaged_ack();
        let limits = Limits::new(1 << 16);
        assert!(matches!(
            read(StreamReader::new(limits), &frame[..len]),
            Err(WireError::ChecksumMismatch { .. })
        ));
        assert!(matches!(
            read(StreamReader::for_checked_frame(limits), &frame[..len]),
            Ok(ReadStep::Done { .. })
        ));
    }
}
