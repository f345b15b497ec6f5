//! The reliable control packets: GET, REJECT, DONE, NOTIFY, KEY and
//! KEY_INFO. Each is numbered, acknowledged and delivered in order like a
//! SEND, but carries only its fixed fields (see each type's file for its
//! layout):
//!
//! | type | value | body | says |
//! |---|---|---|---|
//! | GET | 5 | [`GetRepr`], 64 bytes | put one of your registrations somewhere |
//! | REJECT | 8 | [`RejectRepr`], 16 bytes | your transfer is refused, and why |
//! | DONE | 9 | [`DoneRepr`], 8 bytes | the get you asked for a third process landed |
//! | NOTIFY | 10 | [`NotifyRepr`], 40 bytes | a put of mine landed in your memory |
//! | KEY | 11 | [`KeyRepr`], 8 bytes | what does this registration key name? |
//! | KEY_INFO | 12 | [`KeyInfoRepr`], 40 bytes | what one of my keys names |
//!
//! An engine decodes one into a [`ControlRepr`] as its fixed fields come
//! in, holds that value in its receive window until its turn, and acts on
//! it; it sends one from the same type. The type is the whole control
//! packet from the wire to the code that acts on it.

use super::packet::{chunk, exact};
use super::{
    DoneRepr, GetRepr, KeyInfoRepr, KeyRepr, NotifyRepr, PacketType, RejectRepr, WireError,
};

/// A reliable packet without payload, decoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(any(test, feature = "arbitrary"), derive(arbitrary::Arbitrary))]
pub enum ControlRepr {
    /// GET: asks the peer to put one of its registrations somewhere.
    Get(GetRepr),
    /// REJECT: refuses one of the peer's transfers.
    Reject(RejectRepr),
    /// DONE: a get the peer asked for on behalf of a third process has
    /// landed.
    Done(DoneRepr),
    /// NOTIFY: a put of the sender's has landed in the receiver's memory.
    Notify(NotifyRepr),
    /// KEY: asks what one of the receiver's registration keys names.
    Key(KeyRepr),
    /// KEY_INFO: what one of the sender's keys names.
    KeyInfo(KeyInfoRepr),
}

impl ControlRepr {
    /// The type the header must carry.
    pub fn packet_type(&self) -> PacketType {
        match self {
            Self::Get(_) => PacketType::Get,
            Self::Reject(_) => PacketType::Reject,
            Self::Done(_) => PacketType::Done,
            Self::Notify(_) => PacketType::Notify,
            Self::Key(_) => PacketType::Key,
            Self::KeyInfo(_) => PacketType::KeyInfo,
        }
    }

    /// Decodes the body of a packet of `packet_type`, exactly `body.len()`
    /// bytes long; `Ok(None)` for a type that is not a control packet.
    pub fn parse(packet_type: PacketType, body: &[u8]) -> Result<Option<Self>, WireError> {
        let bad_length = WireError::BadLength {
            packet_type,
            len: body.len() as u64,
        };
        Ok(Some(match packet_type {
            PacketType::Get => Self::Get(GetRepr::parse(exact(body, bad_length)?)?),
            PacketType::Reject => Self::Reject(RejectRepr::parse(exact(body, bad_length)?)?),
            PacketType::Done => Self::Done(DoneRepr::parse(exact(body, bad_length)?)),
            PacketType::Notify => Self::Notify(NotifyRepr::parse(exact(body, bad_length)?)),
            PacketType::Key => Self::Key(KeyRepr::parse(exact(body, bad_length)?)),
            PacketType::KeyInfo => Self::KeyInfo(KeyInfoRepr::parse(exact(body, bad_length)?)?),
            PacketType::Hello
            | PacketType::HelloAck
            | PacketType::Send
            | PacketType::Put
            | PacketType::Ack
            | PacketType::Close
            | PacketType::Cookie => return Ok(None),
        }))
    }

    /// Writes the body at the start of `buf` and returns its length.
    pub fn emit(&self, buf: &mut [u8]) -> Result<usize, WireError> {
        match self {
            Self::Get(r) => r.emit(chunk(buf)?),
            Self::Reject(r) => r.emit(chunk(buf)?),
            Self::Done(r) => r.emit(chunk(buf)?),
            Self::Notify(r) => r.emit(chunk(buf)?),
            Self::Key(r) => r.emit(chunk(buf)?),
            Self::KeyInfo(r) => r.emit(chunk(buf)?),
        }
        Ok(self.packet_type().fixed_body_len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The module's table, as the code has it.
    #[test]
    fn types_and_lengths_are_those_of_the_table() {
        let table = [
            (PacketType::Get, 5, 64),
            (PacketType::Reject, 8, 16),
            (PacketType::Done, 9, 8),
            (PacketType::Notify, 10, 40),
            (PacketType::Key, 11, 8),
            (PacketType::KeyInfo, 12, 40),
        ];
        for (t, value, len) in table {
            assert_eq!((t as u8, t.fixed_body_len()), (value, len), "{t:?}");
            let body = [0u8; 64];
            let parsed = ControlRepr::parse(t, &body[..len]);
            assert!(!matches!(parsed, Ok(None)), "{t:?} is a control packet");
            assert!(
                ControlRepr::parse(t, &body[..len - 1]).is_err(),
                "{t:?} short"
            );
        }
    }

    #[test]
    fn other_types_are_not_control_packets() {
        for t in [
            PacketType::Hello,
            PacketType::HelloAck,
            PacketType::Send,
            PacketType::Put,
            PacketType::Ack,
            PacketType::Close,
            PacketType::Cookie,
        ] {
            assert_eq!(ControlRepr::parse(t, &[]), Ok(None), "{t:?}");
        }
    }

    #[test]
    fn a_packet_comes_back_as_it_was_written() {
        let done = ControlRepr::Done(DoneRepr { xfer_id: 0x1003 });
        let mut body = [0u8; 8];
        assert_eq!(done.emit(&mut body), Ok(8));
        assert_eq!(ControlRepr::parse(PacketType::Done, &body), Ok(Some(done)));
        assert!(matches!(
            done.emit(&mut [0u8; 7]),
            Err(WireError::BufferTooSmall { needed: 8, have: 7 })
        ));
    }
}
