//! Reliable-connected queue pairs: their states, the attributes each
//! transition takes, and the timers those attributes encode.
//!
//! A queue pair starts in `Reset` and is brought up in three steps, each
//! with the attributes of that step only:
//!
//! | from | to | what it needs |
//! | --- | --- | --- |
//! | `Reset` | `Init` | port, what peers may do to this side ([`ToInit`]) |
//! | `Init` | `Rtr` | the peer's QP number, address and first PSN, path MTU, RNR timer ([`ToRtr`]) |
//! | `Rtr` | `Rts` | this side's first PSN, ACK timeout, retry counts ([`ToRts`]) |
//!
//! Any state may go to `Err` (every outstanding work request then
//! completes with a flush status) or back to `Reset` (they are dropped).

use btl_core::time::Duration;

use super::device::{Access, Cq, Gid, Mtu, QpNum, Srq};

/// A queue pair's state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QpState {
    /// Just created, or reset: nothing may be posted.
    Reset,
    /// Receives may be posted; nothing arrives yet.
    Init,
    /// Ready to receive: the peer is known, its packets are taken.
    Rtr,
    /// Ready to send.
    Rts,
    /// Failed: every work request, outstanding or posted now, completes
    /// with a flush status.
    Err,
}

/// How many work requests and scatter/gather entries a queue pair holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QpCaps {
    /// Send work requests outstanding at once.
    pub max_send_wr: u32,
    /// Receive work requests posted at once (unused with a shared receive
    /// queue).
    pub max_recv_wr: u32,
    /// Scatter/gather entries per send work request.
    pub max_send_sge: u32,
    /// Scatter/gather entries per receive work request.
    pub max_recv_sge: u32,
}

/// What a reliable-connected queue pair is created with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QpInit {
    /// Where its send work requests complete.
    pub send_cq: Cq,
    /// Where its receive work requests complete.
    pub recv_cq: Cq,
    /// Its receives come from this shared queue instead of its own.
    pub srq: Option<Srq>,
    /// Its queues' sizes.
    pub caps: QpCaps,
}

/// `Reset` → `Init`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ToInit {
    /// The port it uses, from 1.
    pub port: u8,
    /// What the peer's RDMA operations may do here (`REMOTE_WRITE`,
    /// `REMOTE_READ`), on top of what each region allows.
    pub access: Access,
}

/// How to reach a peer's port: by LID on InfiniBand, by GID on RoCE.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PortAddr {
    /// The peer port's LID (InfiniBand).
    pub lid: u16,
    /// The peer port's GID; required on RoCE, routes across subnets on
    /// InfiniBand.
    pub gid: Option<Gid>,
}

/// `Init` → `Rtr`: what this side knows of its peer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ToRtr {
    /// The peer's port.
    pub dest: PortAddr,
    /// The peer's queue pair.
    pub dest_qp: QpNum,
    /// The first PSN the peer sends with (its `sq_psn`).
    pub rq_psn: u32,
    /// The path MTU: at most both ports' active MTU.
    pub path_mtu: Mtu,
    /// RDMA reads the peer may have outstanding here at once.
    pub max_dest_rd_atomic: u8,
    /// How long the peer waits before it sends again when no receive was
    /// posted here.
    pub min_rnr_timer: RnrTimer,
}

/// `Rtr` → `Rts`: how this side sends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ToRts {
    /// The first PSN this side sends with.
    pub sq_psn: u32,
    /// How long a request waits for its acknowledgement before it goes
    /// again.
    pub timeout: AckTimeout,
    /// How many times a request goes again for want of an
    /// acknowledgement (0 to 7) before it fails with `RetryExceeded`.
    pub retry_cnt: u8,
    /// How many times a send goes again after the peer had no receive
    /// posted (0 to 6; 7: without end) before it fails with
    /// `RnrRetryExceeded`.
    pub rnr_retry: u8,
    /// RDMA reads this side has outstanding at once.
    pub max_rd_atomic: u8,
}

/// A state change and the attributes it takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transition {
    /// `Reset` → `Init`.
    Init(ToInit),
    /// `Init` → `Rtr`.
    Rtr(ToRtr),
    /// `Rtr` → `Rts`.
    Rts(ToRts),
    /// Any → `Err`.
    Err,
    /// Any → `Reset`.
    Reset,
}

impl Transition {
    /// The state it leads to.
    pub const fn target(&self) -> QpState {
        match self {
            Transition::Init(_) => QpState::Init,
            Transition::Rtr(_) => QpState::Rtr,
            Transition::Rts(_) => QpState::Rts,
            Transition::Err => QpState::Err,
            Transition::Reset => QpState::Reset,
        }
    }

    /// Whether a queue pair in `from` may take it.
    pub const fn allowed_from(&self, from: QpState) -> bool {
        matches!(
            (from, self),
            (QpState::Reset, Transition::Init(_))
                | (QpState::Init, Transition::Rtr(_))
                | (QpState::Rtr, Transition::Rts(_))
                | (_, Transition::Err)
                | (_, Transition::Reset)
        )
    }
}

/// The RNR NAK timer, as the 5-bit code verbs take: how long a sender
/// waits before it tries a send again that found no receive posted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RnrTimer(pub u8);

/// The InfiniBand specification's RNR timer values in microseconds, by
/// code (code 0 is the longest, 655.36 ms).
const RNR_MICROS: [u64; 32] = [
    655_360, 10, 20, 30, 40, 60, 80, 120, 160, 240, 320, 480, 640, 960, 1_280, 1_920, 2_560, 3_840,
    5_120, 7_680, 10_240, 15_360, 20_480, 30_720, 40_960, 61_440, 81_920, 122_880, 163_840,
    245_760, 327_680, 491_520,
];

impl RnrTimer {
    /// The wait the code stands for (codes above 31 are read modulo 32,
    /// as the field has 5 bits).
    pub const fn duration(self) -> Duration {
        Duration::from_micros(RNR_MICROS[(self.0 & 31) as usize])
    }
}

/// The local ACK timeout, as the 5-bit exponent verbs take: 4.096 µs ×
/// 2^code; 0 waits without end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AckTimeout(pub u8);

impl AckTimeout {
    /// The wait the code stands for; `None` for 0 (no timeout).
    pub const fn duration(self) -> Option<Duration> {
        match self.0 & 31 {
            0 => None,
            code => Some(Duration::from_nanos(4_096u64 << code)),
        }
    }
}

/// Most retries a count holds (retry and RNR retry counts are 3 bits).
pub const MAX_RETRY: u8 = 7;

/// An RNR retry count that never runs out.
pub const RNR_RETRY_FOREVER: u8 = 7;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transitions_follow_the_ladder() {
        let init = Transition::Init(ToInit {
            port: 1,
            access: Access::empty(),
        });
        assert!(init.allowed_from(QpState::Reset));
        assert!(!init.allowed_from(QpState::Init));
        assert!(!init.allowed_from(QpState::Err));
        assert!(Transition::Err.allowed_from(QpState::Rts));
        assert!(Transition::Reset.allowed_from(QpState::Err));
        assert_eq!(init.target(), QpState::Init);
    }

    #[test]
    fn timers_decode_as_the_specification_says() {
        assert_eq!(RnrTimer(0).duration(), Duration::from_micros(655_360));
        assert_eq!(RnrTimer(1).duration(), Duration::from_micros(10));
        assert_eq!(RnrTimer(12).duration(), Duration::from_micros(640));
        assert_eq!(RnrTimer(31).duration(), Duration::from_micros(491_520));
        assert_eq!(AckTimeout(0).duration(), None);
        assert_eq!(AckTimeout(1).duration(), Some(Duration::from_nanos(8_192)));
        // 14 is the usual choice: about 67 ms.
        assert_eq!(
            AckTimeout(14).duration(),
            Some(Duration::from_nanos(67_108_864))
        );
    }
}
