//! Queue pair states and transitions as verbs take them: which attributes
//! each transition sets, and the mask naming them.

use ibverbs_sys as sys;
use sys::ibv_qp_attr_mask as Mask;

use crate::provider::{Access, MAX_RETRY, QpState, Transition, VerbsError};

use super::device::{gid_to_raw, mtu_to_raw};

/// PSNs and queue pair numbers are 24 bits on the wire.
const WIRE_24: u32 = 0x00FF_FFFF;

/// Hops a packet to a peer addressed by GID may take.
const HOP_LIMIT: u8 = 64;

/// The access flags verbs take for `access`.
pub(super) fn access_flags(access: Access) -> sys::ibv_access_flags {
    let mut flags = sys::ibv_access_flags(0);
    for (ours, theirs) in [
        (
            Access::LOCAL_WRITE,
            sys::ibv_access_flags::IBV_ACCESS_LOCAL_WRITE,
        ),
        (
            Access::REMOTE_WRITE,
            sys::ibv_access_flags::IBV_ACCESS_REMOTE_WRITE,
        ),
        (
            Access::REMOTE_READ,
            sys::ibv_access_flags::IBV_ACCESS_REMOTE_READ,
        ),
    ] {
        if access.contains(ours) {
            flags |= theirs;
        }
    }
    flags
}

/// A state as verbs code it.
pub(super) fn state_to_raw(state: QpState) -> sys::ibv_qp_state::Type {
    use sys::ibv_qp_state::*;
    match state {
        QpState::Reset => IBV_QPS_RESET,
        QpState::Init => IBV_QPS_INIT,
        QpState::Rtr => IBV_QPS_RTR,
        QpState::Rts => IBV_QPS_RTS,
        QpState::Err => IBV_QPS_ERR,
    }
}

/// A state verbs report, if it is one a reliable-connected queue pair of
/// this crate can be in. `SqError` is for unreliable transports only and
/// counts as `Err`; `SqDrain`, which only a transition this crate never
/// asks for leads to, and `Unknown` have no counterpart.
pub(super) fn state_from_raw(raw: sys::ibv_qp_state::Type) -> Option<QpState> {
    use sys::ibv_qp_state::*;
    Some(match raw {
        IBV_QPS_RESET => QpState::Reset,
        IBV_QPS_INIT => QpState::Init,
        IBV_QPS_RTR => QpState::Rtr,
        IBV_QPS_RTS => QpState::Rts,
        IBV_QPS_ERR | IBV_QPS_SQE => QpState::Err,
        _ => return None,
    })
}

/// What the soft HCA refuses of a transition, whatever the queue pair's
/// state, refused here too before the hardware sees it.
pub(super) fn check(to: &Transition) -> Result<(), VerbsError> {
    match to {
        Transition::Init(a) if a.access.contains(Access::LOCAL_WRITE) => {
            Err(VerbsError::Invalid("a queue pair's access is remote only"))
        }
        Transition::Rts(a) if a.retry_cnt > MAX_RETRY || a.rnr_retry > MAX_RETRY => {
            Err(VerbsError::Invalid("retry counts are 3 bits"))
        }
        _ => Ok(()),
    }
}

/// The attributes `to` sets and the mask naming them, for a queue pair on
/// `port` (the port of its `Init` transition, or of `to` itself).
///
/// Timer codes are 5 bits and are taken modulo 32, as the soft HCA reads
/// them; PSNs and queue pair numbers are taken modulo 2^24.
pub(super) fn qp_attr(to: &Transition, port: u8) -> (sys::ibv_qp_attr, Mask) {
    let mut attr = sys::ibv_qp_attr {
        qp_state: state_to_raw(to.target()),
        ..Default::default()
    };
    let mask = match to {
        Transition::Init(a) => {
            attr.pkey_index = 0;
            attr.port_num = a.port;
            attr.qp_access_flags = access_flags(a.access).0;
            Mask::IBV_QP_STATE
                | Mask::IBV_QP_PKEY_INDEX
                | Mask::IBV_QP_PORT
                | Mask::IBV_QP_ACCESS_FLAGS
        }
        Transition::Rtr(a) => {
            attr.ah_attr.dlid = a.dest.lid;
            attr.ah_attr.port_num = port;
            if let Some(gid) = a.dest.gid {
                attr.ah_attr.is_global = 1;
                attr.ah_attr.grh.dgid = gid_to_raw(gid);
                attr.ah_attr.grh.sgid_index = 0;
                attr.ah_attr.grh.hop_limit = HOP_LIMIT;
            }
            attr.path_mtu = mtu_to_raw(a.path_mtu);
            attr.dest_qp_num = a.dest_qp.0 & WIRE_24;
            attr.rq_psn = a.rq_psn & WIRE_24;
            attr.max_dest_rd_atomic = a.max_dest_rd_atomic;
            attr.min_rnr_timer = a.min_rnr_timer.0 & 31;
            Mask::IBV_QP_STATE
                | Mask::IBV_QP_AV
                | Mask::IBV_QP_PATH_MTU
                | Mask::IBV_QP_DEST_QPN
                | Mask::IBV_QP_RQ_PSN
                | Mask::IBV_QP_MAX_DEST_RD_ATOMIC
                | Mask::IBV_QP_MIN_RNR_TIMER
        }
        Transition::Rts(a) => {
            attr.timeout = a.timeout.0 & 31;
            attr.retry_cnt = a.retry_cnt;
            attr.rnr_retry = a.rnr_retry;
            attr.sq_psn = a.sq_psn & WIRE_24;
            attr.max_rd_atomic = a.max_rd_atomic;
            Mask::IBV_QP_STATE
                | Mask::IBV_QP_TIMEOUT
                | Mask::IBV_QP_RETRY_CNT
                | Mask::IBV_QP_RNR_RETRY
                | Mask::IBV_QP_SQ_PSN
                | Mask::IBV_QP_MAX_QP_RD_ATOMIC
        }
        Transition::Err | Transition::Reset => Mask::IBV_QP_STATE,
    };
    (attr, mask)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::provider::{AckTimeout, Gid, Mtu, PortAddr, QpNum, RnrTimer, ToInit, ToRtr, ToRts};
    use sys::ibv_qp_state::*;

    fn rtr(gid: Option<Gid>) -> Transition {
        Transition::Rtr(ToRtr {
            dest: PortAddr { lid: 7, gid },
            dest_qp: QpNum(0x1234),
            rq_psn: 0x0100_0042,
            path_mtu: Mtu::M2048,
            max_dest_rd_atomic: 4,
            min_rnr_timer: RnrTimer(12),
        })
    }

    fn rts() -> Transition {
        Transition::Rts(ToRts {
            sq_psn: 99,
            timeout: AckTimeout(14),
            retry_cnt: 7,
            rnr_retry: 6,
            max_rd_atomic: 2,
        })
    }

    #[test]
    fn access_maps_bit_for_bit() {
        assert_eq!(access_flags(Access::empty()).0, 0);
        assert_eq!(access_flags(Access::LOCAL_WRITE).0, 1);
        assert_eq!(
            access_flags(Access::REMOTE_WRITE | Access::REMOTE_READ).0,
            2 | 4
        );
        assert_eq!(access_flags(Access::all()).0, 1 | 2 | 4);
    }

    #[test]
    fn states_go_to_verbs_and_back() {
        for state in [
            QpState::Reset,
            QpState::Init,
            QpState::Rtr,
            QpState::Rts,
            QpState::Err,
        ] {
            assert_eq!(state_from_raw(state_to_raw(state)), Some(state));
        }
        assert_eq!(state_from_raw(IBV_QPS_SQE), Some(QpState::Err));
        assert_eq!(state_from_raw(IBV_QPS_SQD), None);
        assert_eq!(state_from_raw(IBV_QPS_UNKNOWN), None);
    }

    #[test]
    fn init_sets_the_port_the_partition_and_the_access() {
        let to = Transition::Init(ToInit {
            port: 2,
            access: Access::REMOTE_WRITE,
        });
        let (attr, mask) = qp_attr(&to, 9);
        assert_eq!(mask.0, 1 | 8 | 16 | 32);
        assert_eq!(attr.qp_state, IBV_QPS_INIT);
        assert_eq!(attr.port_num, 2);
        assert_eq!(attr.pkey_index, 0);
        assert_eq!(attr.qp_access_flags, 2);
    }

    #[test]
    fn rtr_addresses_by_lid_or_by_gid() {
        let (attr, mask) = qp_attr(&rtr(None), 1);
        let want = Mask::IBV_QP_STATE
            | Mask::IBV_QP_AV
            | Mask::IBV_QP_PATH_MTU
            | Mask::IBV_QP_DEST_QPN
            | Mask::IBV_QP_RQ_PSN
            | Mask::IBV_QP_MAX_DEST_RD_ATOMIC
            | Mask::IBV_QP_MIN_RNR_TIMER;
        assert_eq!(mask, want);
        assert_eq!(attr.qp_state, IBV_QPS_RTR);
        assert_eq!(attr.ah_attr.dlid, 7);
        assert_eq!(attr.ah_attr.port_num, 1);
        assert_eq!(attr.ah_attr.is_global, 0);
        assert_eq!(attr.path_mtu, sys::IBV_MTU_2048);
        assert_eq!(attr.dest_qp_num, 0x1234);
        assert_eq!(attr.rq_psn, 0x42, "PSNs are 24 bits");
        assert_eq!(attr.max_dest_rd_atomic, 4);
        assert_eq!(attr.min_rnr_timer, 12);

        let gid = Gid([0xfe, 0x80, 0, 0, 0, 0, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8]);
        let (attr, mask) = qp_attr(&rtr(Some(gid)), 1);
        assert_eq!(mask, want);
        assert_eq!(attr.ah_attr.is_global, 1);
        assert_eq!(
            super::super::device::gid_from_raw(&attr.ah_attr.grh.dgid),
            gid
        );
        assert_eq!(attr.ah_attr.grh.sgid_index, 0);
        assert_eq!(attr.ah_attr.grh.hop_limit, HOP_LIMIT);
    }

    #[test]
    fn rts_sets_the_sender_side() {
        let (attr, mask) = qp_attr(&rts(), 1);
        assert_eq!(
            mask,
            Mask::IBV_QP_STATE
                | Mask::IBV_QP_TIMEOUT
                | Mask::IBV_QP_RETRY_CNT
                | Mask::IBV_QP_RNR_RETRY
                | Mask::IBV_QP_SQ_PSN
                | Mask::IBV_QP_MAX_QP_RD_ATOMIC
        );
        assert_eq!(attr.qp_state, IBV_QPS_RTS);
        assert_eq!(attr.timeout, 14);
        assert_eq!(attr.retry_cnt, 7);
        assert_eq!(attr.rnr_retry, 6);
        assert_eq!(attr.sq_psn, 99);
        assert_eq!(attr.max_rd_atomic, 2);
    }

    #[test]
    fn err_and_reset_set_the_state_only() {
        let (attr, mask) = qp_attr(&Transition::Err, 1);
        assert_eq!(mask, Mask::IBV_QP_STATE);
        assert_eq!(attr.qp_state, IBV_QPS_ERR);
        let (attr, mask) = qp_attr(&Transition::Reset, 1);
        assert_eq!(mask, Mask::IBV_QP_STATE);
        assert_eq!(attr.qp_state, IBV_QPS_RESET);
    }

    #[test]
    fn what_the_soft_hca_refuses_is_refused() {
        let local = Transition::Init(ToInit {
            port: 1,
            access: Access::LOCAL_WRITE,
        });
        assert!(matches!(check(&local), Err(VerbsError::Invalid(_))));
        let Transition::Rts(mut a) = rts() else {
            unreachable!()
        };
        assert_eq!(check(&Transition::Rts(a)), Ok(()));
        a.retry_cnt = 8;
        assert!(matches!(
            check(&Transition::Rts(a)),
            Err(VerbsError::Invalid(_))
        ));
        assert_eq!(check(&rtr(None)), Ok(()));
        assert_eq!(check(&Transition::Err), Ok(()));
    }
}
