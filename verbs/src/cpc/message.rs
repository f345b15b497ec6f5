//! The messages of the `oob` connection pseudo-component, as they travel
//! over the side channel: 64 bytes, big-endian, every one the same size.
//!
//! ```text
//!  0  [u8;4]  magic        "BTLV"
//!  4  u8      version      1
//!  5  u8      kind         1 REQ, 2 REP, 3 RTU, 4 REJ
//!  6  u8      mtu          the sender's port MTU: 1 (256) to 5 (4096)
//!  7  u8      reason       REJ: 1 no resources, 2 incompatible, 3 closing; else 0
//!  8  u64     job          the sender's process
//! 16  u32     rank
//! 20  u32     attempt      the requester's connection attempt it belongs to
//! 24  u64     incarnation  the sender's incarnation (a restarted process has another)
//! 32  u32     qpn          the sender's queue pair (24 bits)
//! 36  u32     psn          the first PSN the sender sends with (24 bits)
//! 40  u16     lid          the sender's port LID (0 on RoCE)
//! 42  [u8;6]  reserved     0
//! 48  [u8;16] gid          the sender's port GID
//! ```
//!
//! A REQ opens an attempt: the requester's queue pair is in `Init` with
//! its receives posted. The REP answers it from a queue pair already in
//! `Rts`. The RTU (ready to use) says the requester is in `Rts` too: from
//! then on both sides know the other can take what they send. A REJ ends
//! an attempt.

use core::fmt;

use btl_core::endpoint::ProcName;
use btl_core::wire::field::{Fields, FieldsMut, check_reserved};

use crate::provider::{Gid, Mtu, QpNum};

/// The first bytes of every message.
pub const MAGIC: [u8; 4] = *b"BTLV";
/// The version this code speaks; a message of another is refused.
pub const VERSION: u8 = 1;
/// Every message's length.
pub const LEN: usize = 64;

const MAGIC_AT: usize = 0;
const VERSION_AT: usize = 4;
const KIND: usize = 5;
const MTU: usize = 6;
const REASON: usize = 7;
const JOB: usize = 8;
const RANK: usize = 16;
const ATTEMPT: usize = 20;
const INCARNATION: usize = 24;
const QPN: usize = 32;
const PSN: usize = 36;
const LID: usize = 40;
const RESERVED: usize = 42;
const GID: usize = 48;

/// Largest queue pair number and PSN: both are 24 bits.
const MAX_24: u32 = 0x00FF_FFFF;

/// What a message does in the handshake.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Opens an attempt.
    Request,
    /// Answers a REQ: the responder is in `Rts`.
    Reply,
    /// Ends the handshake: the requester is in `Rts`.
    ReadyToUse,
    /// Refuses a REQ.
    Reject(RejectReason),
}

/// Why a responder refused a REQ.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RejectReason {
    /// No room for another peer or queue pair.
    NoResources,
    /// The two ports cannot talk (InfiniBand and RoCE).
    Incompatible,
    /// The responder is shutting down.
    Closing,
}

impl RejectReason {
    const fn code(self) -> u8 {
        match self {
            RejectReason::NoResources => 1,
            RejectReason::Incompatible => 2,
            RejectReason::Closing => 3,
        }
    }

    const fn from_code(code: u8) -> Option<Self> {
        Some(match code {
            1 => RejectReason::NoResources,
            2 => RejectReason::Incompatible,
            3 => RejectReason::Closing,
            _ => return None,
        })
    }
}

impl fmt::Display for RejectReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            RejectReason::NoResources => "no resources",
            RejectReason::Incompatible => "incompatible ports",
            RejectReason::Closing => "shutting down",
        })
    }
}

/// What one side tells the other of its queue pair and port.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QpCard {
    /// The queue pair.
    pub qpn: QpNum,
    /// The first PSN it sends with.
    pub psn: u32,
    /// Its port's LID (0 on RoCE).
    pub lid: u16,
    /// Its port's GID.
    pub gid: Gid,
    /// Its port's active MTU: the path MTU is the smaller of the two.
    pub mtu: Mtu,
}

/// A decoded message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MessageRepr {
    /// Its part in the handshake.
    pub kind: Kind,
    /// The sender.
    pub from: ProcName,
    /// The requester's attempt it belongs to.
    pub attempt: u32,
    /// The sender's incarnation.
    pub incarnation: u64,
    /// The sender's queue pair and port.
    pub card: QpCard,
}

/// Why bytes are not a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum MessageError {
    /// Not [`LEN`] bytes.
    #[error("a connection message is {LEN} bytes, not {0}")]
    Length(usize),
    /// Not a btl connection message.
    #[error("bad magic")]
    Magic,
    /// Another version.
    #[error("version {0}, not {VERSION}")]
    Version(u8),
    /// A field holds a value it may not.
    #[error("bad {0}")]
    Field(&'static str),
}

impl MessageRepr {
    /// Decodes a message; every field is checked.
    pub fn parse(bytes: &[u8]) -> Result<Self, MessageError> {
        let block: &[u8; LEN] = bytes
            .try_into()
            .map_err(|_| MessageError::Length(bytes.len()))?;
        let f = Fields(block);
        if f.bytes::<MAGIC_AT, 4>() != MAGIC {
            return Err(MessageError::Magic);
        }
        let version = f.u8::<VERSION_AT>();
        if version != VERSION {
            return Err(MessageError::Version(version));
        }
        let reason = f.u8::<REASON>();
        let kind = match f.u8::<KIND>() {
            1 => Kind::Request,
            2 => Kind::Reply,
            3 => Kind::ReadyToUse,
            4 => {
                Kind::Reject(RejectReason::from_code(reason).ok_or(MessageError::Field("reason"))?)
            }
            _ => return Err(MessageError::Field("kind")),
        };
        if !matches!(kind, Kind::Reject(_)) && reason != 0 {
            return Err(MessageError::Field("reason"));
        }
        check_reserved(&f.bytes::<RESERVED, 6>(), "reserved")
            .map_err(|_| MessageError::Field("reserved"))?;
        let mtu = match f.u8::<MTU>() {
            1 => Mtu::M256,
            2 => Mtu::M512,
            3 => Mtu::M1024,
            4 => Mtu::M2048,
            5 => Mtu::M4096,
            _ => return Err(MessageError::Field("mtu")),
        };
        let qpn = f.u32::<QPN>();
        let psn = f.u32::<PSN>();
        if qpn > MAX_24 {
            return Err(MessageError::Field("qpn"));
        }
        if psn > MAX_24 {
            return Err(MessageError::Field("psn"));
        }
        Ok(MessageRepr {
            kind,
            from: ProcName::new(f.u64::<JOB>(), f.u32::<RANK>()),
            attempt: f.u32::<ATTEMPT>(),
            incarnation: f.u64::<INCARNATION>(),
            card: QpCard {
                qpn: QpNum(qpn),
                psn,
                lid: f.u16::<LID>(),
                gid: Gid(f.bytes::<GID, 16>()),
                mtu,
            },
        })
    }

    /// Encodes the message. A queue pair number or PSN wider than 24 bits
    /// is cut to 24.
    pub fn emit(&self) -> [u8; LEN] {
        let mut block = [0u8; LEN];
        let mut f = FieldsMut(&mut block);
        let (kind, reason) = match self.kind {
            Kind::Request => (1, 0),
            Kind::Reply => (2, 0),
            Kind::ReadyToUse => (3, 0),
            Kind::Reject(r) => (4, r.code()),
        };
        let mtu = match self.card.mtu {
            Mtu::M256 => 1,
            Mtu::M512 => 2,
            Mtu::M1024 => 3,
            Mtu::M2048 => 4,
            Mtu::M4096 => 5,
        };
        f.set_bytes::<MAGIC_AT, 4>(MAGIC);
        f.set_u8::<VERSION_AT>(VERSION);
        f.set_u8::<KIND>(kind);
        f.set_u8::<MTU>(mtu);
        f.set_u8::<REASON>(reason);
        f.set_u64::<JOB>(self.from.job);
        f.set_u32::<RANK>(self.from.rank);
        f.set_u32::<ATTEMPT>(self.attempt);
        f.set_u64::<INCARNATION>(self.incarnation);
        f.set_u32::<QPN>(self.card.qpn.0 & MAX_24);
        f.set_u32::<PSN>(self.card.psn & MAX_24);
        f.set_u16::<LID>(self.card.lid);
        f.set_bytes::<RESERVED, 6>([0; 6]);
        f.set_bytes::<GID, 16>(self.card.gid.0);
        block
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request() -> MessageRepr {
        MessageRepr {
            kind: Kind::Request,
            from: ProcName::new(0x0102_0304_0506_0708, 9),
            attempt: 3,
            incarnation: 0x1111_2222_3333_4444,
            card: QpCard {
                qpn: QpNum(0x00AB_CDEF),
                psn: 0x0012_3456,
                lid: 0x0042,
                gid: Gid([0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0, 2, 0xc9, 3, 0, 0, 0, 1]),
                mtu: Mtu::M4096,
            },
        }
    }

    /// The golden bytes of [`request`], field by field as the layout table
    /// says.
    const GOLDEN_REQUEST: [u8; LEN] = [
        b'B', b'T', b'L', b'V', 1, 1, 5, 0, // magic, version, kind, mtu, reason
        1, 2, 3, 4, 5, 6, 7, 8, // job
        0, 0, 0, 9, // rank
        0, 0, 0, 3, // attempt
        0x11, 0x11, 0x22, 0x22, 0x33, 0x33, 0x44, 0x44, // incarnation
        0, 0xAB, 0xCD, 0xEF, // qpn
        0, 0x12, 0x34, 0x56, // psn
        0, 0x42, 0, 0, 0, 0, 0, 0, // lid, reserved
        0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0, 2, 0xc9, 3, 0, 0, 0, 1, // gid
    ];

    #[test]
    fn a_request_matches_its_golden_bytes_both_ways() {
        assert_eq!(request().emit(), GOLDEN_REQUEST);
        assert_eq!(MessageRepr::parse(&GOLDEN_REQUEST), Ok(request()));
    }

    #[test]
    fn every_kind_round_trips() {
        for kind in [
            Kind::Request,
            Kind::Reply,
            Kind::ReadyToUse,
            Kind::Reject(RejectReason::NoResources),
            Kind::Reject(RejectReason::Incompatible),
            Kind::Reject(RejectReason::Closing),
        ] {
            let m = MessageRepr { kind, ..request() };
            assert_eq!(MessageRepr::parse(&m.emit()), Ok(m));
        }
    }

    #[test]
    fn bad_bytes_are_refused_field_by_field() {
        let good = GOLDEN_REQUEST;
        let with = |at: usize, value: u8| {
            let mut b = good;
            b[at] = value;
            MessageRepr::parse(&b)
        };
        assert_eq!(
            MessageRepr::parse(&good[..63]),
            Err(MessageError::Length(63))
        );
        assert_eq!(with(0, b'X'), Err(MessageError::Magic));
        assert_eq!(with(4, 2), Err(MessageError::Version(2)));
        assert_eq!(with(5, 0), Err(MessageError::Field("kind")));
        assert_eq!(with(5, 9), Err(MessageError::Field("kind")));
        assert_eq!(with(6, 6), Err(MessageError::Field("mtu")));
        assert_eq!(
            with(7, 1),
            Err(MessageError::Field("reason")),
            "a REQ has no reason"
        );
        assert_eq!(with(32, 1), Err(MessageError::Field("qpn")), "25 bits");
        assert_eq!(with(36, 1), Err(MessageError::Field("psn")));
        assert_eq!(with(43, 1), Err(MessageError::Field("reserved")));
        let mut reject = good;
        reject[5] = 4;
        assert_eq!(
            MessageRepr::parse(&reject),
            Err(MessageError::Field("reason"))
        );
        reject[7] = 4;
        assert_eq!(
            MessageRepr::parse(&reject),
            Err(MessageError::Field("reason"))
        );
        reject[7] = 2;
        assert_eq!(
            MessageRepr::parse(&reject).map(|m| m.kind),
            Ok(Kind::Reject(RejectReason::Incompatible))
        );
    }

    #[test]
    fn any_64_bytes_parse_or_fail_without_panicking() {
        // A cheap sweep: every byte position through every value.
        for at in 0..LEN {
            for value in 0..=255u8 {
                let mut b = GOLDEN_REQUEST;
                b[at] = value;
                if let Ok(m) = MessageRepr::parse(&b) {
                    assert_eq!(m.emit(), b, "what parses emits the same bytes");
                }
            }
        }
    }
}
