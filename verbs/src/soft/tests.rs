//! The soft HCA against reliable-connected semantics, at explicit
//! instants of the fabric's clock.

use std::collections::BTreeMap;

use super::*;
use crate::provider::{
    AckTimeout, PortAddr, QpCaps, RNR_RETRY_FOREVER, RemoteAddr, Rkey, RnrTimer, SendOp, Sge,
    ToInit, ToRtr, ToRts,
};

/// Retries of a request without an acknowledgement, in these tests.
const RETRY: u8 = 2;
/// 4.096 µs × 2^10: about 4.2 ms.
const TIMEOUT: AckTimeout = AckTimeout(10);
/// 0.64 ms.
const RNR: RnrTimer = RnrTimer(12);

/// What one end is told of the other: its port, queue pair and first PSN.
type Card = (PortAddr, QpNum, u32);

/// One process's end: a context, a domain, one completion queue for both
/// queues, a queue pair and a 4 KiB region.
struct End {
    hca: SoftHca,
    pd: Pd,
    cq: Cq,
    qp: QpNum,
    mr: Mr,
}

impl End {
    fn open(fabric: &SoftFabric, device: &str, cq_entries: u32, access: Access) -> End {
        let mut hca = fabric.open(device).expect("device");
        let pd = hca.alloc_pd().expect("pd");
        let cq = hca.create_cq(cq_entries).expect("cq");
        let qp = hca
            .create_qp(
                pd,
                &QpInit {
                    send_cq: cq,
                    recv_cq: cq,
                    srq: None,
                    caps: QpCaps {
                        max_send_wr: 16,
                        max_recv_wr: 16,
                        max_send_sge: 2,
                        max_recv_sge: 2,
                    },
                },
            )
            .expect("qp");
        let mr = hca
            .reg_mr(pd, vec![0; 4096], Access::LOCAL_WRITE | access)
            .expect("mr");
        End {
            hca,
            pd,
            cq,
            qp,
            mr,
        }
    }

    /// What a connection manager would send the peer.
    fn card(&self) -> Card {
        let port = self.hca.port(1).expect("port 1");
        let gid = (port.link_layer == LinkLayer::Ethernet).then_some(port.gid);
        (
            PortAddr { lid: port.lid, gid },
            self.qp,
            (self.qp.0 * 7) & 0xFF_FFFF,
        )
    }

    fn init(&mut self, access: Access) {
        self.hca
            .modify_qp(self.qp, &Transition::Init(ToInit { port: 1, access }))
            .expect("init");
    }

    fn rtr(&mut self, peer: Card) {
        self.rtr_with(peer, |_| {});
    }

    /// `Rtr` towards `peer`, its attributes changed by `edit` first.
    fn rtr_with(&mut self, peer: Card, edit: impl FnOnce(&mut ToRtr)) {
        let mut rtr = ToRtr {
            dest: peer.0,
            dest_qp: peer.1,
            rq_psn: peer.2,
            path_mtu: self.hca.port(1).expect("port").active_mtu,
            max_dest_rd_atomic: 4,
            min_rnr_timer: RNR,
        };
        edit(&mut rtr);
        self.hca
            .modify_qp(self.qp, &Transition::Rtr(rtr))
            .expect("rtr");
    }

    fn rts(&mut self, rnr_retry: u8) {
        let psn = self.card().2;
        self.hca
            .modify_qp(
                self.qp,
                &Transition::Rts(ToRts {
                    sq_psn: psn,
                    timeout: TIMEOUT,
                    retry_cnt: RETRY,
                    rnr_retry,
                    max_rd_atomic: 4,
                }),
            )
            .expect("rts");
    }

    fn sge(&self, offset: u64, len: u32) -> Sge {
        Sge {
            lkey: self.mr.lkey,
            offset,
            len,
        }
    }

    fn remote(&self, offset: u64) -> RemoteAddr {
        RemoteAddr {
            rkey: self.mr.rkey,
            offset,
        }
    }

    fn write(&mut self, offset: usize, bytes: &[u8]) {
        self.hca
            .with_mr_mut(self.mr.lkey, |m| {
                m[offset..offset + bytes.len()].copy_from_slice(bytes)
            })
            .expect("own region");
    }

    fn read(&self, offset: usize, len: usize) -> Vec<u8> {
        self.hca
            .with_mr(self.mr.lkey, |m| m[offset..offset + len].to_vec())
            .expect("own region")
    }

    fn send(&mut self, wr_id: u64, op: SendOp, sg: &[Sge]) {
        self.hca
            .post_send(
                self.qp,
                &[SendWr {
                    wr_id,
                    op,
                    sg,
                    signaled: true,
                }],
            )
            .expect("post_send");
    }

    fn recv(&mut self, wr_id: u64, sg: &[Sge]) {
        self.hca
            .post_recv(self.qp, &[RecvWr { wr_id, sg }])
            .expect("post_recv");
    }

    fn poll(&mut self) -> Vec<WorkCompletion> {
        let mut out = [WorkCompletion::default(); 32];
        let n = self.hca.poll_cq(self.cq, &mut out).expect("cq");
        out[..n].to_vec()
    }

    fn state(&self) -> QpState {
        self.hca.qp_state(self.qp).expect("qp")
    }
}

/// Two ends on `device` (one host), connected and in `Rts`.
fn pair_on(fabric: &SoftFabric, a_dev: &str, b_dev: &str, access: Access) -> (End, End) {
    let mut a = End::open(fabric, a_dev, 64, access);
    let mut b = End::open(fabric, b_dev, 64, access);
    connect(&mut a, &mut b, access, 3);
    (a, b)
}

fn connect(a: &mut End, b: &mut End, access: Access, rnr_retry: u8) {
    a.init(access);
    b.init(access);
    let (ca, cb) = (a.card(), b.card());
    a.rtr(cb);
    b.rtr(ca);
    a.rts(rnr_retry);
    b.rts(rnr_retry);
}

fn pair() -> (SoftFabric, End, End) {
    let fabric = SoftFabric::with_device("soft0");
    let (a, b) = pair_on(
        &fabric,
        "soft0",
        "soft0",
        Access::REMOTE_WRITE | Access::REMOTE_READ,
    );
    (fabric, a, b)
}

/// Two ends on `a_dev` and `b_dev` brought up out of step: A is told what
/// `a_hears` makes of B's card (given A's own too), B what `b_hears` makes
/// of A's, and B's `Rtr` attributes go through `b_rtr`.
fn lopsided(
    fabric: &SoftFabric,
    (a_dev, b_dev): (&str, &str),
    access: Access,
    a_hears: impl FnOnce(Card, Card) -> Card,
    b_hears: impl FnOnce(Card) -> Card,
    b_rtr: impl FnOnce(&mut ToRtr),
) -> (End, End) {
    let mut a = End::open(fabric, a_dev, 64, access);
    let mut b = End::open(fabric, b_dev, 64, access);
    a.init(access);
    b.init(access);
    let (ca, cb) = (a.card(), b.card());
    a.rtr(a_hears(cb, ca));
    b.rtr_with(b_hears(ca), b_rtr);
    a.rts(3);
    b.rts(3);
    (a, b)
}

/// What an end hears when nothing is out of step.
fn told(theirs: Card, _mine: Card) -> Card {
    theirs
}

fn statuses(wcs: &[WorkCompletion]) -> Vec<(u64, WcStatus)> {
    wcs.iter().map(|wc| (wc.wr_id, wc.status)).collect()
}

#[test]
fn a_queue_pair_climbs_the_ladder_one_rung_at_a_time() {
    let fabric = SoftFabric::with_device("soft0");
    let mut a = End::open(&fabric, "soft0", 8, Access::empty());
    assert_eq!(a.state(), QpState::Reset);
    let rts = Transition::Rts(ToRts {
        sq_psn: 0,
        timeout: TIMEOUT,
        retry_cnt: 1,
        rnr_retry: 1,
        max_rd_atomic: 1,
    });
    assert_eq!(
        a.hca.modify_qp(a.qp, &rts),
        Err(VerbsError::BadTransition {
            qp: a.qp,
            from: QpState::Reset,
            to: QpState::Rts
        })
    );
    let sg = [a.sge(0, 8)];
    let refused = a.hca.post_recv(a.qp, &[RecvWr { wr_id: 1, sg: &sg }]);
    assert_eq!(refused.map_err(|e| e.index), Err(0), "no receive in Reset");
    a.init(Access::empty());
    a.recv(1, &sg);
    let send = a.hca.post_send(
        a.qp,
        &[SendWr {
            wr_id: 2,
            op: SendOp::Send,
            sg: &sg,
            signaled: true,
        }],
    );
    assert!(
        matches!(
            send,
            Err(PostError {
                index: 0,
                error: VerbsError::BadState {
                    state: QpState::Init,
                    ..
                }
            })
        ),
        "no send before Rts: {send:?}"
    );
    let too_big_mtu = Transition::Rtr(ToRtr {
        dest: PortAddr { lid: 1, gid: None },
        dest_qp: QpNum(5),
        rq_psn: 0,
        path_mtu: Mtu::M4096,
        max_dest_rd_atomic: 0,
        min_rnr_timer: RNR,
    });
    assert!(a.hca.modify_qp(a.qp, &too_big_mtu).is_ok());
    assert_eq!(a.state(), QpState::Rtr);
    assert!(a.hca.modify_qp(a.qp, &Transition::Reset).is_ok());
    assert_eq!(a.state(), QpState::Reset);
    assert!(
        a.poll().is_empty(),
        "a reset drops requests without completions"
    );
}

#[test]
fn messages_arrive_in_order_with_their_immediate_data() {
    let (_fabric, mut a, mut b) = pair();
    a.write(0, b"first");
    a.write(100, b"second!");
    for i in 0..2u64 {
        let sg = [b.sge(1000 * i, 64)];
        b.recv(10 + i, &sg);
    }
    a.send(1, SendOp::Send, &[a.sge(0, 5)]);
    a.send(
        2,
        SendOp::SendWithImm(0xfeed),
        &[a.sge(100, 3), a.sge(103, 4)],
    );
    assert_eq!(
        statuses(&a.poll()),
        [(1, WcStatus::Success), (2, WcStatus::Success)]
    );
    let got = b.poll();
    assert_eq!(
        statuses(&got),
        [(10, WcStatus::Success), (11, WcStatus::Success)]
    );
    assert_eq!(
        (got[0].byte_len, got[0].imm, got[0].opcode),
        (5, None, WcOpcode::Recv)
    );
    assert_eq!((got[1].byte_len, got[1].imm), (7, Some(0xfeed)));
    assert_eq!(got[1].qp, b.qp);
    assert_eq!(b.read(0, 5), b"first");
    assert_eq!(b.read(1000, 7), b"second!");
}

#[test]
fn an_unsignaled_send_completes_silently() {
    let (_fabric, mut a, mut b) = pair();
    b.recv(1, &[b.sge(0, 64)]);
    let sg = [a.sge(0, 8)];
    a.hca
        .post_send(
            a.qp,
            &[SendWr {
                wr_id: 9,
                op: SendOp::Send,
                sg: &sg,
                signaled: false,
            }],
        )
        .expect("posted");
    assert!(a.poll().is_empty());
    assert_eq!(statuses(&b.poll()), [(1, WcStatus::Success)]);
}

#[test]
fn a_send_without_a_receive_waits_for_the_rnr_timer_and_goes_again() {
    let (fabric, mut a, mut b) = pair();
    a.send(1, SendOp::Send, &[a.sge(0, 8)]);
    a.send(2, SendOp::Send, &[a.sge(0, 8)]);
    assert!(a.poll().is_empty(), "receiver not ready: the send waits");
    assert_eq!(fabric.next_deadline(), Some(fabric.now() + RNR.duration()));
    b.recv(7, &[b.sge(0, 8)]);
    assert!(b.poll().is_empty(), "not before the RNR timer");
    fabric.advance(RNR.duration());
    assert_eq!(statuses(&a.poll()), [(1, WcStatus::Success)]);
    assert_eq!(statuses(&b.poll()), [(7, WcStatus::Success)]);
    // The second waits behind the first, then for a receive of its own.
    b.recv(8, &[b.sge(0, 8)]);
    fabric.advance(RNR.duration());
    assert_eq!(statuses(&a.poll()), [(2, WcStatus::Success)]);
}

#[test]
fn rnr_retries_run_out_and_the_queue_pair_fails() {
    let (fabric, mut a, b) = pair();
    a.recv(50, &[a.sge(0, 8)]);
    a.send(1, SendOp::Send, &[a.sge(0, 8)]);
    a.send(2, SendOp::Send, &[a.sge(0, 8)]);
    // The first try and three retries: the third retry's NAK ends it.
    for _ in 0..2 {
        fabric.advance(RNR.duration());
        assert!(a.poll().is_empty());
    }
    fabric.advance(RNR.duration());
    assert_eq!(
        statuses(&a.poll()),
        [
            (1, WcStatus::RnrRetryExceeded),
            (2, WcStatus::Flushed),
            (50, WcStatus::Flushed)
        ]
    );
    assert_eq!(a.state(), QpState::Err);
    assert_eq!(b.state(), QpState::Rts, "the responder is not at fault");
    // Posting to a QP in Err completes at once, flushed.
    a.send(3, SendOp::Send, &[a.sge(0, 8)]);
    a.recv(51, &[a.sge(0, 8)]);
    assert_eq!(
        statuses(&a.poll()),
        [(3, WcStatus::Flushed), (51, WcStatus::Flushed)]
    );
}

#[test]
fn rnr_retry_seven_waits_without_end() {
    let fabric = SoftFabric::with_device("soft0");
    let mut a = End::open(&fabric, "soft0", 64, Access::empty());
    let mut b = End::open(&fabric, "soft0", 64, Access::empty());
    connect(&mut a, &mut b, Access::empty(), RNR_RETRY_FOREVER);
    a.send(1, SendOp::Send, &[a.sge(0, 8)]);
    for _ in 0..100 {
        fabric.advance(RNR.duration());
    }
    assert!(a.poll().is_empty());
    assert_eq!(a.state(), QpState::Rts);
    b.recv(2, &[b.sge(0, 8)]);
    fabric.advance(RNR.duration());
    assert_eq!(statuses(&a.poll()), [(1, WcStatus::Success)]);
}

/// Sends once on `a`, runs the clock through every retry, and returns
/// what `a` completed.
fn unanswered(fabric: &SoftFabric, a: &mut End) -> Vec<(u64, WcStatus)> {
    a.send(1, SendOp::Send, &[a.sge(0, 8)]);
    let timeout = TIMEOUT.duration().expect("a timeout");
    for _ in 0..RETRY {
        fabric.advance(timeout);
        assert!(a.poll().is_empty(), "still retrying");
    }
    fabric.advance(timeout);
    statuses(&a.poll())
}

#[test]
fn a_responder_out_of_step_never_acknowledges() {
    let fabric = SoftFabric::with_device("soft0");
    let one = ("soft0", "soft0");
    // The peer expects another PSN.
    let psn = |c: Card| (c.0, c.1, c.2 + 1);
    let (mut a, mut b) = lopsided(&fabric, one, Access::empty(), told, psn, |_| {});
    b.recv(9, &[b.sge(0, 8)]);
    assert_eq!(unanswered(&fabric, &mut a), [(1, WcStatus::RetryExceeded)]);
    assert_eq!(a.state(), QpState::Err);
    assert!(b.poll().is_empty(), "nothing reached the peer");
    // The peer is connected to another queue pair.
    let other = |c: Card| (c.0, QpNum(c.1.0 + 1), c.2);
    let (mut c, mut d) = lopsided(&fabric, one, Access::empty(), told, other, |_| {});
    d.recv(9, &[d.sge(0, 8)]);
    assert_eq!(unanswered(&fabric, &mut c), [(1, WcStatus::RetryExceeded)]);
}

#[test]
fn a_peer_not_yet_ready_to_receive_is_reached_by_a_retry() {
    let fabric = SoftFabric::with_device("soft0");
    let access = Access::empty();
    let mut a = End::open(&fabric, "soft0", 64, access);
    let mut b = End::open(&fabric, "soft0", 64, access);
    a.init(access);
    b.init(access);
    let (ca, cb) = (a.card(), b.card());
    a.rtr(cb);
    a.rts(3);
    b.recv(9, &[b.sge(0, 8)]);
    a.send(1, SendOp::Send, &[a.sge(0, 8)]);
    assert!(a.poll().is_empty(), "the peer is still in Init");
    b.rtr(ca);
    fabric.advance(TIMEOUT.duration().expect("a timeout"));
    assert_eq!(statuses(&a.poll()), [(1, WcStatus::Success)]);
    assert_eq!(statuses(&b.poll()), [(9, WcStatus::Success)]);
}

#[test]
fn a_dead_process_or_a_port_down_leaves_its_peer_retrying_then_failing() {
    let (fabric, mut a, b) = pair();
    drop(b);
    assert_eq!(unanswered(&fabric, &mut a), [(1, WcStatus::RetryExceeded)]);

    let (fabric, mut a, mut b) = pair();
    b.recv(9, &[b.sge(0, 8)]);
    fabric
        .set_port_state("soft0", 1, PortState::Down)
        .expect("port");
    assert_eq!(unanswered(&fabric, &mut a), [(1, WcStatus::RetryExceeded)]);
}

#[test]
fn rdma_writes_and_reads_land_without_the_peer_doing_anything() {
    let (_fabric, mut a, mut b) = pair();
    a.write(0, b"put this there");
    b.write(2000, b"and get that");
    a.send(1, SendOp::RdmaWrite(b.remote(500)), &[a.sge(0, 14)]);
    a.send(2, SendOp::RdmaRead(b.remote(2000)), &[a.sge(100, 12)]);
    let done = a.poll();
    assert_eq!(
        statuses(&done),
        [(1, WcStatus::Success), (2, WcStatus::Success)]
    );
    assert_eq!(
        (done[0].opcode, done[1].opcode),
        (WcOpcode::RdmaWrite, WcOpcode::RdmaRead)
    );
    assert_eq!(done[1].byte_len, 12);
    assert_eq!(b.read(500, 14), b"put this there");
    assert_eq!(a.read(100, 12), b"and get that");
    assert!(
        b.poll().is_empty(),
        "a plain write completes nothing at the target"
    );
}

#[test]
fn a_write_with_immediate_data_takes_a_receive() {
    let (fabric, mut a, mut b) = pair();
    a.write(0, b"data");
    a.send(
        1,
        SendOp::RdmaWriteWithImm(b.remote(64), 77),
        &[a.sge(0, 4)],
    );
    assert!(a.poll().is_empty(), "no receive: RNR");
    b.recv(5, &[]);
    fabric.advance(RNR.duration());
    assert_eq!(statuses(&a.poll()), [(1, WcStatus::Success)]);
    let got = b.poll();
    assert_eq!(
        (got[0].wr_id, got[0].opcode, got[0].imm, got[0].byte_len),
        (5, WcOpcode::RecvRdmaWithImm, Some(77), 4)
    );
    assert_eq!(b.read(64, 4), b"data");
}

/// `a` posts `op` against `b`, which must refuse it with `status`; both
/// queue pairs end in `Err` and `b`'s memory is untouched.
fn refused(a: &mut End, b: &mut End, op: SendOp, status: WcStatus) {
    let before = b.read(0, 4096);
    b.recv(60, &[b.sge(0, 8)]);
    a.send(1, op, &[a.sge(0, 16)]);
    a.send(2, SendOp::Send, &[a.sge(0, 1)]);
    assert_eq!(
        statuses(&a.poll()),
        [(1, status), (2, WcStatus::Flushed)],
        "{op:?}"
    );
    assert_eq!(a.state(), QpState::Err);
    assert_eq!(b.state(), QpState::Err, "the responder fails too");
    assert_eq!(statuses(&b.poll()), [(60, WcStatus::Flushed)]);
    assert_eq!(b.read(0, 4096), before);
}

#[test]
fn every_rdma_access_is_checked_at_the_responder() {
    let fabric = SoftFabric::with_device("soft0");
    let all = Access::REMOTE_WRITE | Access::REMOTE_READ;
    let remote_access = WcStatus::RemoteAccess;

    // An unknown key.
    let (mut a, mut b) = pair_on(&fabric, "soft0", "soft0", all);
    let bogus = RemoteAddr {
        rkey: Rkey(b.mr.rkey.0 ^ 0x5500),
        offset: 0,
    };
    refused(&mut a, &mut b, SendOp::RdmaWrite(bogus), remote_access);

    // Past the end, and an offset that would wrap.
    let (mut a, mut b) = pair_on(&fabric, "soft0", "soft0", all);
    let op = SendOp::RdmaWrite(b.remote(4090));
    refused(&mut a, &mut b, op, remote_access);
    let (mut a, mut b) = pair_on(&fabric, "soft0", "soft0", all);
    let op = SendOp::RdmaRead(b.remote(u64::MAX - 3));
    refused(&mut a, &mut b, op, remote_access);

    // A stale key: the region was deregistered, and its slot reused.
    let (mut a, mut b) = pair_on(&fabric, "soft0", "soft0", all);
    let stale = b.remote(0);
    b.hca.dereg_mr(b.mr.lkey).expect("dereg");
    b.mr = b
        .hca
        .reg_mr(b.pd, vec![0; 4096], Access::LOCAL_WRITE | all)
        .expect("reg");
    assert_ne!(b.mr.rkey, stale.rkey);
    refused(&mut a, &mut b, SendOp::RdmaWrite(stale), remote_access);

    // A read-only region, and a queue pair that allows no writes.
    let (mut a, mut b) = pair_on(&fabric, "soft0", "soft0", all);
    b.hca.dereg_mr(b.mr.lkey).expect("dereg");
    b.mr = b
        .hca
        .reg_mr(
            b.pd,
            vec![0; 4096],
            Access::LOCAL_WRITE | Access::REMOTE_READ,
        )
        .expect("reg");
    let op = SendOp::RdmaWrite(b.remote(0));
    refused(&mut a, &mut b, op, remote_access);
    let (mut a, mut b) = pair_on(&fabric, "soft0", "soft0", Access::REMOTE_READ);
    let op = SendOp::RdmaWrite(b.remote(0));
    refused(&mut a, &mut b, op, remote_access);

    // A region of another protection domain of the same process.
    let (mut a, mut b) = pair_on(&fabric, "soft0", "soft0", all);
    let other_pd = b.hca.alloc_pd().expect("pd");
    let other = b
        .hca
        .reg_mr(other_pd, vec![0; 4096], Access::LOCAL_WRITE | all)
        .expect("reg");
    let there = RemoteAddr {
        rkey: other.rkey,
        offset: 0,
    };
    refused(&mut a, &mut b, SendOp::RdmaWrite(there), remote_access);
}

#[test]
fn a_read_needs_room_for_reads_at_the_responder() {
    let fabric = SoftFabric::with_device("soft0");
    let all = Access::REMOTE_WRITE | Access::REMOTE_READ;
    let no_reads = |r: &mut ToRtr| r.max_dest_rd_atomic = 0;
    let (mut a, mut b) = lopsided(&fabric, ("soft0", "soft0"), all, told, |c| c, no_reads);
    let read = SendOp::RdmaRead(b.remote(0));
    refused(&mut a, &mut b, read, WcStatus::RemoteInvalidRequest);
}

#[test]
fn a_message_longer_than_its_receive_fails_both_ends() {
    let (_fabric, mut a, mut b) = pair();
    b.recv(3, &[b.sge(0, 8)]);
    a.send(1, SendOp::Send, &[a.sge(0, 9)]);
    assert_eq!(statuses(&a.poll()), [(1, WcStatus::RemoteInvalidRequest)]);
    assert_eq!(statuses(&b.poll()), [(3, WcStatus::LocalLength)]);
    assert_eq!((a.state(), b.state()), (QpState::Err, QpState::Err));
}

#[test]
fn a_bad_local_entry_fails_with_a_protection_error() {
    let (_fabric, mut a, mut b) = pair();
    b.recv(3, &[b.sge(0, 64)]);
    a.send(1, SendOp::Send, &[a.sge(4090, 16)]);
    assert_eq!(statuses(&a.poll()), [(1, WcStatus::LocalProtection)]);
    assert_eq!(a.state(), QpState::Err);
    assert_eq!(b.state(), QpState::Rts);
    assert!(b.poll().is_empty());
}

#[test]
fn an_error_flushes_what_a_queue_pair_holds() {
    let (fabric, mut a, _b) = pair();
    a.recv(10, &[a.sge(0, 8)]);
    a.recv(11, &[a.sge(8, 8)]);
    a.send(1, SendOp::Send, &[a.sge(0, 8)]);
    fabric.fail_qp("soft0", a.qp).expect("qp");
    assert_eq!(
        statuses(&a.poll()),
        [
            (1, WcStatus::Flushed),
            (10, WcStatus::Flushed),
            (11, WcStatus::Flushed)
        ]
    );
    assert_eq!(a.state(), QpState::Err);
    // Back to Reset and up again, it works.
    a.hca.modify_qp(a.qp, &Transition::Reset).expect("reset");
    assert_eq!(a.state(), QpState::Reset);
}

#[test]
fn a_completion_queue_too_small_overruns_and_fails_its_queue_pairs() {
    let fabric = SoftFabric::with_device("soft0");
    let mut a = End::open(&fabric, "soft0", 2, Access::empty());
    let mut b = End::open(&fabric, "soft0", 64, Access::empty());
    connect(&mut a, &mut b, Access::empty(), 3);
    for i in 0..3 {
        b.recv(i, &[b.sge(0, 8)]);
    }
    for i in 0..3 {
        a.send(i, SendOp::Send, &[a.sge(0, 8)]);
    }
    let mut out = [WorkCompletion::default(); 8];
    assert_eq!(
        a.hca.poll_cq(a.cq, &mut out),
        Err(VerbsError::CqOverrun(a.cq))
    );
    assert_eq!(a.state(), QpState::Err);
    assert_eq!(b.poll().len(), 3, "the peer's own queue is fine");
    // The overrun queue can go once its queue pair has.
    assert_eq!(
        a.hca.destroy_cq(a.cq),
        Err(VerbsError::Busy("completion queue"))
    );
    a.hca.destroy_qp(a.qp).expect("qp");
    a.hca.destroy_cq(a.cq).expect("cq");
}

#[test]
fn a_shared_receive_queue_feeds_every_queue_pair_on_it() {
    let fabric = SoftFabric::with_device("soft0");
    let mut b = fabric.open("soft0").expect("b");
    let pd = b.alloc_pd().expect("pd");
    let cq = b.create_cq(16).expect("cq");
    let srq = b.create_srq(pd, 8, 1).expect("srq");
    let mr = b.reg_mr(pd, vec![0; 64], Access::LOCAL_WRITE).expect("mr");
    let init = QpInit {
        send_cq: cq,
        recv_cq: cq,
        srq: Some(srq),
        caps: QpCaps {
            max_send_wr: 4,
            max_recv_wr: 0,
            max_send_sge: 1,
            max_recv_sge: 1,
        },
    };
    let mut senders = Vec::new();
    let mut qps = Vec::new();
    for _ in 0..2 {
        let mut a = End::open(&fabric, "soft0", 16, Access::empty());
        let qp = b.create_qp(pd, &init).expect("qp");
        let port = b.port(1).expect("port");
        a.init(Access::empty());
        b.modify_qp(
            qp,
            &Transition::Init(ToInit {
                port: 1,
                access: Access::empty(),
            }),
        )
        .expect("init");
        a.rtr((
            PortAddr {
                lid: port.lid,
                gid: None,
            },
            qp,
            0,
        ));
        let ca = a.card();
        b.modify_qp(
            qp,
            &Transition::Rtr(ToRtr {
                dest: ca.0,
                dest_qp: ca.1,
                rq_psn: ca.2,
                path_mtu: Mtu::M4096,
                max_dest_rd_atomic: 0,
                min_rnr_timer: RNR,
            }),
        )
        .expect("rtr");
        a.hca
            .modify_qp(
                a.qp,
                &Transition::Rts(ToRts {
                    sq_psn: ca.2,
                    timeout: TIMEOUT,
                    retry_cnt: 1,
                    rnr_retry: 1,
                    max_rd_atomic: 0,
                }),
            )
            .expect("rts");
        assert!(b.post_recv(qp, &[RecvWr { wr_id: 0, sg: &[] }]).is_err());
        senders.push(a);
        qps.push(qp);
    }
    for i in 0..2u64 {
        let sg = [Sge {
            lkey: mr.lkey,
            offset: 32 * i,
            len: 32,
        }];
        b.post_srq_recv(
            srq,
            &[RecvWr {
                wr_id: 100 + i,
                sg: &sg,
            }],
        )
        .expect("srq recv");
    }
    for (i, a) in senders.iter_mut().enumerate() {
        a.write(0, &[i as u8 + 1; 4]);
        a.send(i as u64, SendOp::Send, &[a.sge(0, 4)]);
        assert_eq!(statuses(&a.poll()), [(i as u64, WcStatus::Success)]);
    }
    let mut out = [WorkCompletion::default(); 4];
    assert_eq!(b.poll_cq(cq, &mut out), Ok(2));
    assert_eq!((out[0].wr_id, out[0].qp), (100, qps[0]));
    assert_eq!((out[1].wr_id, out[1].qp), (101, qps[1]));
    let bytes = b.with_mr(mr.lkey, |m| (m[0], m[32])).expect("mr");
    assert_eq!(bytes, (1, 2));
}

#[test]
fn roce_peers_are_reached_by_gid_and_infiniband_peers_by_lid() {
    let fabric = SoftFabric::new();
    fabric
        .add_device(DeviceSpec::roce("roce0"))
        .expect("a new name");
    fabric
        .add_device(DeviceSpec::roce("roce1"))
        .expect("a new name");
    let (mut a, mut b) = pair_on(&fabric, "roce0", "roce1", Access::empty());
    b.recv(1, &[b.sge(0, 8)]);
    a.send(1, SendOp::Send, &[a.sge(0, 8)]);
    assert_eq!(statuses(&a.poll()), [(1, WcStatus::Success)]);

    // A RoCE peer named by a LID alone is never reached.
    let lid_only = |c: Card, _| (PortAddr { lid: 0, gid: None }, c.1, c.2);
    let roce = ("roce0", "roce1");
    let (mut c, mut d) = lopsided(&fabric, roce, Access::empty(), lid_only, |c| c, |_| {});
    d.recv(1, &[d.sge(0, 8)]);
    assert_eq!(unanswered(&fabric, &mut c), [(1, WcStatus::RetryExceeded)]);

    // On InfiniBand, another device's LID is another port.
    let fabric = SoftFabric::new();
    fabric
        .add_device(DeviceSpec::infiniband("ib0"))
        .expect("a new name");
    fabric
        .add_device(DeviceSpec::infiniband("ib1"))
        .expect("a new name");
    let own_lid = |theirs: Card, mine: Card| {
        assert_ne!(theirs.0.lid, mine.0.lid);
        (mine.0, theirs.1, theirs.2)
    };
    let ib = ("ib0", "ib1");
    let (mut e, mut g) = lopsided(&fabric, ib, Access::empty(), own_lid, |c| c, |_| {});
    g.recv(1, &[g.sge(0, 8)]);
    assert_eq!(unanswered(&fabric, &mut e), [(1, WcStatus::RetryExceeded)]);
}

#[test]
fn a_larger_path_mtu_than_the_responders_is_never_answered() {
    let fabric = SoftFabric::with_device("ib0");
    let small = |r: &mut ToRtr| r.path_mtu = Mtu::M1024;
    let (mut a, mut b) = lopsided(&fabric, ("ib0", "ib0"), Access::empty(), told, |c| c, small);
    b.recv(1, &[b.sge(0, 8)]);
    assert_eq!(unanswered(&fabric, &mut a), [(1, WcStatus::RetryExceeded)]);
}

#[test]
fn psns_advance_by_packets_on_both_sides() {
    let (_fabric, mut a, mut b) = pair();
    // 4096 bytes at a 4 KiB MTU is one packet, 4097 would be two: a run of
    // sizes keeps both sides in step or the next send would go unanswered.
    for (i, len) in [1u32, 4096, 2048, 4000].into_iter().enumerate() {
        b.recv(i as u64, &[b.sge(0, 4096)]);
        a.send(i as u64, SendOp::Send, &[a.sge(0, len)]);
        a.send(
            100 + i as u64,
            SendOp::RdmaWrite(b.remote(0)),
            &[a.sge(0, len)],
        );
        let done = statuses(&a.poll());
        assert_eq!(
            done,
            [
                (i as u64, WcStatus::Success),
                (100 + i as u64, WcStatus::Success)
            ]
        );
    }
}

#[test]
fn a_context_sees_only_what_it_allocated() {
    let fabric = SoftFabric::with_device("soft0");
    let a = End::open(&fabric, "soft0", 8, Access::empty());
    let mut other = fabric.open("soft0").expect("context");
    assert_eq!(other.qp_state(a.qp), Err(VerbsError::Unknown("queue pair")));
    assert_eq!(
        other.dereg_mr(a.mr.lkey),
        Err(VerbsError::Unknown("memory region"))
    );
    assert!(other.with_mr(a.mr.lkey, |_| ()).is_err());
    assert_eq!(
        other.create_cq(0),
        Err(VerbsError::Invalid("completion queue size"))
    );
    assert!(matches!(
        fabric.open("mlx5_0"),
        Err(VerbsError::NoDevice(_))
    ));
    assert_eq!(
        other.dealloc_pd(a.pd),
        Err(VerbsError::Unknown("protection domain"))
    );
}

#[test]
fn a_domain_in_use_stays() {
    let fabric = SoftFabric::with_device("soft0");
    let mut a = End::open(&fabric, "soft0", 8, Access::empty());
    assert_eq!(
        a.hca.dealloc_pd(a.pd),
        Err(VerbsError::Busy("protection domain"))
    );
    a.hca.destroy_qp(a.qp).expect("qp");
    a.hca.dereg_mr(a.mr.lkey).expect("mr");
    a.hca.dealloc_pd(a.pd).expect("pd");
}

/// Memory an end lends its device, in regions it names by number.
#[derive(Default)]
struct Lender {
    regions: BTreeMap<u64, Vec<u8>>,
}

impl LentMemory for Lender {
    fn bytes(&mut self, id: u64) -> Option<&mut [u8]> {
        self.regions.get_mut(&id).map(Vec::as_mut_slice)
    }
}

impl Lender {
    /// Lends region `id` of `len` bytes, each `fill`, to `end`'s device.
    fn lend(&mut self, end: &mut End, id: u64, len: usize, fill: u8, access: Access) -> Mr {
        let bytes = self.regions.entry(id).or_insert_with(|| vec![fill; len]);
        let region = LentRegion {
            id,
            addr: bytes.as_mut_ptr(),
            len,
        };
        // SAFETY: the soft device never reads `addr`; it asks `self` for
        // the bytes.
        #[allow(unsafe_code)]
        let mr = unsafe {
            end.hca
                .reg_lent(end.pd, region, Access::LOCAL_WRITE | access)
        };
        mr.expect("lent")
    }
}

#[test]
fn lent_memory_is_reached_only_while_its_owner_serves_the_device() {
    let (_fabric, mut a, mut b) = pair();
    let (mut la, mut lb) = (Lender::default(), Lender::default());
    let src = la.lend(&mut a, 1, 64, 0xaa, Access::empty());
    let dst = lb.lend(&mut b, 7, 64, 0, Access::REMOTE_WRITE | Access::REMOTE_READ);
    assert_eq!(
        a.hca.with_mr(src.lkey, |m| m.len()),
        Err(LENT),
        "the owner's, not the provider's"
    );
    let at = RemoteAddr {
        rkey: dst.rkey,
        offset: 8,
    };
    let sg = [Sge {
        lkey: src.lkey,
        offset: 0,
        len: 16,
    }];
    a.send(1, SendOp::RdmaWrite(at), &sg);
    assert!(a.poll().is_empty(), "A's bytes wait for A");
    b.hca.serve(&mut lb);
    assert!(a.poll().is_empty(), "and B cannot take them");
    a.hca.serve(&mut la);
    assert!(a.poll().is_empty(), "taken, they wait for B");
    assert_eq!(lb.regions[&7], vec![0; 64]);
    b.hca.serve(&mut lb);
    assert_eq!(statuses(&a.poll()), [(1, WcStatus::Success)]);
    assert_eq!(&lb.regions[&7][8..24], &[0xaa; 16]);
    assert_eq!(lb.regions[&7][7], 0);

    // A read, the other way: B's bytes first, then A's memory.
    lb.regions.get_mut(&7).expect("lent")[40..48].fill(0x55);
    let dst_local = la.lend(&mut a, 2, 8, 0, Access::empty());
    let sg = [Sge {
        lkey: dst_local.lkey,
        offset: 0,
        len: 8,
    }];
    let at = RemoteAddr {
        rkey: dst.rkey,
        offset: 40,
    };
    a.send(2, SendOp::RdmaRead(at), &sg);
    a.hca.serve(&mut la);
    assert!(a.poll().is_empty());
    b.hca.serve(&mut lb);
    assert!(a.poll().is_empty(), "read, it waits for A's memory");
    a.hca.serve(&mut la);
    assert_eq!(statuses(&a.poll()), [(2, WcStatus::Success)]);
    assert_eq!(la.regions[&2], vec![0x55; 8]);
    assert_eq!(
        b.hca.dereg_mr(dst.lkey),
        Ok(Vec::new()),
        "nothing was handed over"
    );
}

#[test]
fn lent_memory_its_owner_took_back_is_never_written() {
    let (fabric, mut a, mut b) = pair();
    let (mut la, mut lb) = (Lender::default(), Lender::default());
    let src = la.lend(&mut a, 1, 32, 0xaa, Access::empty());
    let dst = lb.lend(&mut b, 7, 32, 0, Access::REMOTE_WRITE);
    let sg = [Sge {
        lkey: src.lkey,
        offset: 0,
        len: 32,
    }];
    let at = RemoteAddr {
        rkey: dst.rkey,
        offset: 0,
    };
    a.send(1, SendOp::RdmaWrite(at), &sg);
    a.hca.serve(&mut la);
    // B takes the memory back while the bytes are on their way, the
    // device first, as a driver must.
    b.hca.dereg_mr(dst.lkey).expect("registered");
    lb.regions.remove(&7);
    lb.regions.insert(7, vec![0; 32]);
    b.hca.serve(&mut lb);
    assert_eq!(statuses(&a.poll()), [(1, WcStatus::RemoteAccess)]);
    assert_eq!(
        lb.regions[&7],
        vec![0; 32],
        "the new memory under the old name is untouched"
    );
    assert_eq!(fabric.counters().remote_access_errors, 1);
    assert_eq!(a.state(), QpState::Err);

    // The owner that no longer lends what its device still names: the
    // device's request fails, nothing else happens.
    let (_fabric, mut a, b) = pair();
    let mut la = Lender::default();
    let src = la.lend(&mut a, 1, 32, 0xaa, Access::empty());
    la.regions.clear();
    let sg = [Sge {
        lkey: src.lkey,
        offset: 0,
        len: 32,
    }];
    a.send(2, SendOp::RdmaWrite(b.remote(0)), &sg);
    a.hca.serve(&mut la);
    assert_eq!(statuses(&a.poll()), [(2, WcStatus::LocalProtection)]);
    assert_eq!(b.read(0, 32), vec![0; 32]);
}

#[test]
fn a_receive_into_lent_memory_is_refused() {
    let (_fabric, mut a, mut b) = pair();
    let mut lb = Lender::default();
    let lent = lb.lend(&mut b, 3, 64, 0, Access::empty());
    b.recv(
        9,
        &[Sge {
            lkey: lent.lkey,
            offset: 0,
            len: 64,
        }],
    );
    a.send(1, SendOp::Send, &[a.sge(0, 8)]);
    b.hca.serve(&mut lb);
    assert_eq!(statuses(&a.poll()), [(1, WcStatus::RemoteOperation)]);
    assert_eq!(statuses(&b.poll()), [(9, WcStatus::LocalProtection)]);
    assert_eq!(lb.regions[&3], vec![0; 64]);
}
