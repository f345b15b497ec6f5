//! The real provider on whatever this machine has.
//!
//! Without a device, or without RDMA in the kernel, the tests check how
//! that is reported. With one, they check that every device listed opens
//! and answers, and run two queue pairs of one context, connected to each
//! other, through a send, an RDMA write with immediate data and an RDMA
//! read at offsets of zero-based regions.

use std::time::{Duration, Instant};

use super::*;
use crate::provider::{
    AckTimeout, LinkLayer, PortAddr, PortState, QpCaps, RemoteAddr, RnrTimer, SendOp, Sge, ToInit,
    ToRtr, ToRts, WcStatus,
};

#[test]
fn devices_are_listed_or_their_absence_explained() {
    match devices() {
        Err(VerbsError::NoDevice(reason)) => assert!(!reason.is_empty()),
        Err(other) => panic!("devices(): {other}"),
        Ok(list) => {
            assert!(!list.is_empty(), "an empty list is NoDevice");
            for attr in list {
                let hca = RdmaProvider::open(Some(&attr.name)).expect("a listed device opens");
                assert_eq!(hca.device(), attr);
                assert!(attr.ports >= 1);
                let port = hca.port(1).expect("port 1 answers");
                assert!(port.max_msg_size > 0);
                assert_eq!(hca.port(0), Err(VerbsError::Unknown("port")));
            }
        }
    }
}

#[test]
fn an_unknown_device_is_refused() {
    match RdmaProvider::open(Some("no-such-device")) {
        Err(VerbsError::NoDevice(reason)) => assert!(!reason.is_empty()),
        other => panic!("opening no-such-device: {other:?}"),
    }
}

#[test]
fn the_first_device_is_the_default() {
    match (devices(), RdmaProvider::open(None)) {
        (Err(VerbsError::NoDevice(a)), Err(VerbsError::NoDevice(b))) => assert_eq!(a, b),
        (Ok(list), Ok(hca)) => assert_eq!(hca.device(), list[0]),
        (list, hca) => panic!("devices(): {list:?}, open(None): {hca:?}"),
    }
}

#[test]
fn verbs_errors_are_errno_values() {
    assert_eq!(errno_result(0), Ok(()));
    assert_eq!(errno_result(22), Err(VerbsError::Os(22)));
    assert_eq!(errno_result(-12), Err(VerbsError::Os(12)));
}

#[test]
fn requests_with_too_many_entries_stop_the_post() {
    assert_eq!(fitting(2, [1, 2, 0]), 3);
    assert_eq!(fitting(2, [1, 3, 0]), 1);
    assert_eq!(fitting(2, [3]), 0);
    assert_eq!(fitting(2, []), 0);
}

/// Completions of `cq` until `n` have come, or 5 s have passed.
fn wait(hca: &mut RdmaProvider, cq: Cq, n: usize) -> Vec<WorkCompletion> {
    let blank = WorkCompletion::default();
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut got = Vec::new();
    while got.len() < n && Instant::now() < deadline {
        let mut batch = [blank; 8];
        let k = hca.poll_cq(cq, &mut batch).expect("the queue polls");
        got.extend_from_slice(&batch[..k]);
    }
    got
}

#[test]
fn two_queue_pairs_of_one_context_move_bytes_at_offsets() {
    let Ok(mut hca) = RdmaProvider::open(None) else {
        // No device: nothing to run on (the tests above check the refusal).
        return;
    };
    let port = hca.port(1).expect("port 1");
    if port.state != PortState::Active {
        return;
    }
    let pd = hca.alloc_pd().expect("pd");
    let cq = hca.create_cq(64).expect("cq");
    let caps = QpCaps {
        max_send_wr: 8,
        max_recv_wr: 8,
        max_send_sge: 1,
        max_recv_sge: 1,
    };
    let init = QpInit {
        send_cq: cq,
        recv_cq: cq,
        srq: None,
        caps,
    };
    let a = hca.create_qp(pd, &init).expect("qp a");
    let b = hca.create_qp(pd, &init).expect("qp b");
    assert_eq!(hca.qp_state(a), Ok(QpState::Reset));
    let dest = PortAddr {
        lid: port.lid,
        gid: (port.link_layer == LinkLayer::Ethernet).then_some(port.gid),
    };
    let remote = Access::REMOTE_WRITE | Access::REMOTE_READ;
    for (me, peer) in [(a, b), (b, a)] {
        let steps = [
            Transition::Init(ToInit {
                port: 1,
                access: remote,
            }),
            Transition::Rtr(ToRtr {
                dest,
                dest_qp: peer,
                rq_psn: peer.0 & 0xffff,
                path_mtu: port.active_mtu,
                max_dest_rd_atomic: 1,
                min_rnr_timer: RnrTimer(12),
            }),
            Transition::Rts(ToRts {
                sq_psn: me.0 & 0xffff,
                timeout: AckTimeout(14),
                retry_cnt: 3,
                rnr_retry: 3,
                max_rd_atomic: 1,
            }),
        ];
        for step in &steps {
            hca.modify_qp(me, step).expect("transition");
        }
        assert_eq!(hca.qp_state(me), Ok(QpState::Rts));
    }
    assert!(matches!(
        hca.modify_qp(a, &steps_init()),
        Err(VerbsError::BadTransition { .. })
    ));

    // Odd lengths: the buffers are unlikely to start on a page boundary,
    // and must move for a zero-based registration.
    let src: Vec<u8> = (0..=255).cycle().take(3001).collect();
    let expected = src.clone();
    let src = hca.reg_mr(pd, src, Access::LOCAL_WRITE).expect("src");
    let dst = hca
        .reg_mr(pd, vec![0; 5003], Access::LOCAL_WRITE | remote)
        .expect("dst");
    let sge = |mr: &Mr, offset, len| {
        [Sge {
            lkey: mr.lkey,
            offset,
            len,
        }]
    };

    // A send into a receive posted at an offset.
    hca.post_recv(
        b,
        &[RecvWr {
            wr_id: 10,
            sg: &sge(&dst, 1000, 64),
        }],
    )
    .expect("recv");
    hca.post_send(
        a,
        &[SendWr {
            wr_id: 11,
            op: SendOp::Send,
            sg: &sge(&src, 1, 64),
            signaled: true,
        }],
    )
    .expect("send");
    let wcs = wait(&mut hca, cq, 2);
    assert_eq!(wcs.len(), 2, "{wcs:?}");
    assert!(wcs.iter().all(|wc| wc.status.is_success()), "{wcs:?}");
    let recv = wcs.iter().find(|wc| wc.wr_id == 10).expect("the receive");
    assert_eq!(
        (recv.opcode, recv.byte_len, recv.qp),
        (WcOpcode::Recv, 64, b)
    );

    // An RDMA write with immediate data, at an offset of the peer's region.
    hca.post_recv(b, &[RecvWr { wr_id: 20, sg: &[] }])
        .expect("recv for the immediate");
    let at = RemoteAddr {
        rkey: dst.rkey,
        offset: 2000,
    };
    hca.post_send(
        a,
        &[SendWr {
            wr_id: 21,
            op: SendOp::RdmaWriteWithImm(at, 0xfeed_f00d),
            sg: &sge(&src, 0, 3001),
            signaled: true,
        }],
    )
    .expect("write");
    let wcs = wait(&mut hca, cq, 2);
    assert_eq!(wcs.len(), 2, "{wcs:?}");
    let imm = wcs.iter().find(|wc| wc.wr_id == 20).expect("the immediate");
    assert_eq!(
        (imm.status, imm.opcode, imm.imm),
        (
            WcStatus::Success,
            WcOpcode::RecvRdmaWithImm,
            Some(0xfeed_f00d)
        )
    );
    hca.with_mr(dst.lkey, |bytes| {
        assert_eq!(&bytes[1000..1064], &expected[1..65]);
        assert_eq!(&bytes[2000..5001], &expected[..]);
        assert!(bytes[..1000].iter().all(|&b| b == 0));
    })
    .expect("dst");

    // An RDMA read back from the peer's region, into an offset of ours.
    hca.with_mr_mut(src.lkey, |bytes| bytes.fill(0))
        .expect("src");
    hca.post_send(
        a,
        &[SendWr {
            wr_id: 30,
            op: SendOp::RdmaRead(RemoteAddr {
                rkey: dst.rkey,
                offset: 2010,
            }),
            sg: &sge(&src, 5, 100),
            signaled: true,
        }],
    )
    .expect("read");
    let wcs = wait(&mut hca, cq, 1);
    assert_eq!(wcs.len(), 1, "{wcs:?}");
    assert_eq!(
        (wcs[0].status, wcs[0].opcode, wcs[0].byte_len),
        (WcStatus::Success, WcOpcode::RdmaRead, 100)
    );
    let back = hca.dereg_mr(src.lkey).expect("dereg src");
    assert_eq!(&back[5..105], &expected[10..110]);

    // A dead key: the peer refuses, and the queue pairs fail.
    let stale = RemoteAddr {
        rkey: src.rkey,
        offset: 0,
    };
    let keep = hca
        .reg_mr(pd, vec![0; 64], Access::LOCAL_WRITE)
        .expect("mr");
    hca.post_send(
        a,
        &[SendWr {
            wr_id: 40,
            op: SendOp::RdmaWrite(stale),
            sg: &sge(&keep, 0, 8),
            signaled: false,
        }],
    )
    .expect("write to a dead key");
    let wcs = wait(&mut hca, cq, 1);
    assert_eq!(wcs.len(), 1, "{wcs:?}");
    assert_eq!(
        (wcs[0].wr_id, wcs[0].status, wcs[0].opcode),
        (40, WcStatus::RemoteAccess, WcOpcode::RdmaWrite)
    );
    assert_eq!(hca.qp_state(a), Ok(QpState::Err));

    assert_eq!(
        hca.dealloc_pd(pd),
        Err(VerbsError::Busy("protection domain"))
    );
    assert_eq!(
        hca.destroy_cq(cq),
        Err(VerbsError::Busy("completion queue"))
    );
    hca.destroy_qp(a).expect("destroy a");
    hca.destroy_qp(b).expect("destroy b");
    hca.dereg_mr(dst.lkey).expect("dereg dst");
    hca.dereg_mr(keep.lkey).expect("dereg keep");
    hca.destroy_cq(cq).expect("destroy cq");
    hca.dealloc_pd(pd).expect("dealloc pd");
}

fn steps_init() -> Transition {
    Transition::Init(ToInit {
        port: 1,
        access: Access::empty(),
    })
}
