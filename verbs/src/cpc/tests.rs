//! The `oob` CPC between processes on the soft HCA, its side channel a
//! queue the test delivers by hand, so that every interleaving is chosen.

use std::cell::RefCell;
use std::collections::VecDeque;
use std::rc::Rc;

use btl_core::endpoint::ProcName;
use btl_core::engine::ConnectFailure;
use btl_core::mca::ListValue;
use btl_core::time::{Duration, Instant};

use super::*;
use crate::provider::{
    Cq, Lkey, Mtu, PortState, QpCaps, QpState, RecvWr, SendOp, SendWr, Sge, WcOpcode, WcStatus,
    WorkCompletion,
};
use crate::soft::{DeviceSpec, SoftFabric, SoftHca};

/// Receives each queue pair gets.
const RECVS: usize = 4;
const TIMEOUT: Duration = Duration::from_secs(2);

/// Messages on their way: (from, to, bytes).
type Channel = Rc<RefCell<VecDeque<(ProcName, ProcName, Vec<u8>)>>>;

/// One process: its context, what the CPC called back, and its CPC.
struct Proc {
    host: Host,
    cpc: Oob,
}

struct Host {
    me: ProcName,
    hca: SoftHca,
    pd: Pd,
    cq: Cq,
    mr: Lkey,
    channel: Channel,
    psn: u32,
    posted: Vec<QpNum>,
    connected: Vec<(ProcName, QpNum)>,
    failed: Vec<(ProcName, ConnectFailure)>,
    disconnected: Vec<(ProcName, QpNum)>,
}

impl CpcHost for Host {
    type Provider = SoftHca;

    fn provider(&mut self) -> &mut SoftHca {
        &mut self.hca
    }

    fn port(&self) -> u8 {
        1
    }

    fn pd(&self) -> Pd {
        self.pd
    }

    fn qp_init(&self) -> QpInit {
        QpInit {
            send_cq: self.cq,
            recv_cq: self.cq,
            srq: None,
            caps: QpCaps {
                max_send_wr: 8,
                max_recv_wr: RECVS as u32,
                max_send_sge: 1,
                max_recv_sge: 1,
            },
        }
    }

    fn qp_access(&self) -> Access {
        Access::REMOTE_WRITE | Access::REMOTE_READ
    }

    fn qp_tuning(&self) -> QpTuning {
        QpTuning {
            ack_timeout: crate::provider::AckTimeout(10),
            retry_cnt: 3,
            ..QpTuning::default()
        }
    }

    fn psn(&mut self) -> u32 {
        self.psn = self.psn.wrapping_mul(1_103_515_245).wrapping_add(12_345);
        self.psn
    }

    fn post_recvs(&mut self, qp: QpNum) -> Result<(), VerbsError> {
        assert_eq!(
            self.hca.qp_state(qp),
            Ok(QpState::Init),
            "receives go in Init"
        );
        for i in 0..RECVS {
            let sg = [Sge {
                lkey: self.mr,
                offset: 64 * i as u64,
                len: 64,
            }];
            self.hca
                .post_recv(
                    qp,
                    &[RecvWr {
                        wr_id: i as u64,
                        sg: &sg,
                    }],
                )
                .map_err(|e| e.error)?;
        }
        self.posted.push(qp);
        Ok(())
    }

    fn connected(&mut self, peer: ProcName, qp: QpNum) {
        assert_eq!(self.hca.qp_state(qp), Ok(QpState::Rts));
        self.connected.push((peer, qp));
    }

    fn connect_failed(&mut self, peer: ProcName, why: ConnectFailure) {
        self.failed.push((peer, why));
    }

    fn disconnected(&mut self, peer: ProcName, qp: QpNum) {
        self.disconnected.push((peer, qp));
    }

    fn destroy_qp(&mut self, qp: QpNum) {
        let _ = self.hca.destroy_qp(qp);
    }

    fn send_message(&mut self, peer: ProcName, message: &[u8]) {
        self.channel
            .borrow_mut()
            .push_back((self.me, peer, message.to_vec()));
    }
}

impl Proc {
    fn new(fabric: &SoftFabric, device: &str, rank: u32, channel: &Channel) -> Proc {
        Proc::with(fabric, device, rank, channel, 1, OobConfig::default())
    }

    fn with(
        fabric: &SoftFabric,
        device: &str,
        rank: u32,
        channel: &Channel,
        incarnation: u64,
        config: OobConfig,
    ) -> Proc {
        let me = ProcName::new(7, rank);
        let mut hca = fabric.open(device).expect("device");
        let pd = hca.alloc_pd().expect("pd");
        let cq = hca.create_cq(64).expect("cq");
        let mr = hca
            .reg_mr(pd, vec![0; 64 * RECVS], Access::LOCAL_WRITE)
            .expect("mr")
            .lkey;
        let mut cpc = Oob::new(OobConfig {
            timeout: TIMEOUT,
            ..config
        });
        let params = btl_core::mca::Registry::<8>::new();
        <Oob as Cpc<Host>>::init(&mut cpc, &params, me, incarnation).expect("init");
        Proc {
            host: Host {
                me,
                hca,
                pd,
                cq,
                mr,
                channel: channel.clone(),
                psn: rank + 1,
                posted: Vec::new(),
                connected: Vec::new(),
                failed: Vec::new(),
                disconnected: Vec::new(),
            },
            cpc,
        }
    }

    fn me(&self) -> ProcName {
        self.host.me
    }

    fn connect(&mut self, peer: &Proc) {
        self.cpc
            .start_connect(&mut self.host, peer.me(), Instant::ZERO);
    }

    /// Sends `byte` on the queue pair connected to `peer`.
    fn send(&mut self, qp: QpNum, byte: u8) {
        self.host
            .hca
            .with_mr_mut(self.host.mr, |m| m[255] = byte)
            .expect("mr");
        let sg = [Sge {
            lkey: self.host.mr,
            offset: 255,
            len: 1,
        }];
        self.host
            .hca
            .post_send(
                qp,
                &[SendWr {
                    wr_id: 1000,
                    op: SendOp::Send,
                    sg: &sg,
                    signaled: true,
                }],
            )
            .expect("post_send");
    }

    fn poll(&mut self) -> Vec<WorkCompletion> {
        let mut out = [WorkCompletion::default(); 16];
        let n = self.host.hca.poll_cq(self.host.cq, &mut out).expect("cq");
        out[..n].to_vec()
    }
}

/// Processes 7.0 (A) and 7.1 (B) on device `soft0`, not connected, and
/// their side channel.
fn two() -> (SoftFabric, Channel, Proc, Proc) {
    let fabric = SoftFabric::with_device("soft0");
    let ch = channel();
    let a = Proc::new(&fabric, "soft0", 0, &ch);
    let b = Proc::new(&fabric, "soft0", 1, &ch);
    (fabric, ch, a, b)
}

fn channel() -> Channel {
    Rc::new(RefCell::new(VecDeque::new()))
}

/// Delivers every message on its way (and those they cause) to whichever
/// of `procs` it is for; how many.
fn deliver(channel: &Channel, procs: &mut [&mut Proc]) -> usize {
    let mut n = 0;
    loop {
        let Some((from, to, bytes)) = channel.borrow_mut().pop_front() else {
            return n;
        };
        n += 1;
        if let Some(p) = procs.iter_mut().find(|p| p.me() == to) {
            p.cpc
                .handle_message(&mut p.host, from, &bytes, Instant::ZERO);
        }
    }
}

/// `a` and `b` can move a byte each way over their queue pairs.
fn talk(a: &mut Proc, b: &mut Proc) {
    let qa = a.cpc.qp_of(b.me()).expect("a's queue pair");
    let qb = b.cpc.qp_of(a.me()).expect("b's queue pair");
    a.send(qa, 0xA1);
    let got = b.poll();
    assert_eq!(got.len(), 1, "{got:?}");
    assert_eq!((got[0].status, got[0].qp), (WcStatus::Success, qb));
    b.send(qb, 0xB2);
    let got = a.poll();
    assert!(
        got.iter()
            .any(|wc| wc.opcode == WcOpcode::Recv && wc.status.is_success() && wc.qp == qa),
        "{got:?}"
    );
}

#[test]
fn three_messages_connect_two_processes() {
    let (_fabric, ch, mut a, mut b) = two();
    a.connect(&b);
    assert_eq!(a.host.posted.len(), 1, "receives posted before the REQ");
    assert_eq!(deliver(&ch, &mut [&mut a, &mut b]), 3, "REQ, REP, RTU");
    let (qa, qb) = (a.host.posted[0], b.host.posted[0]);
    assert_eq!(a.host.connected, [(b.me(), qa)]);
    assert_eq!(b.host.connected, [(a.me(), qb)]);
    assert!(a.cpc.is_connected(b.me()) && b.cpc.is_connected(a.me()));
    assert_eq!(<Oob as Cpc<Host>>::poll_timeout(&a.cpc), None);
    b.poll();
    a.poll();
    talk(&mut a, &mut b);
}

#[test]
fn the_path_mtu_is_the_smaller_of_the_two_ports() {
    let fabric = SoftFabric::new();
    for (name, mtu) in [("big", Mtu::M4096), ("small", Mtu::M1024)] {
        fabric
            .add_device(DeviceSpec {
                mtu,
                ..DeviceSpec::infiniband(name)
            })
            .expect("device");
    }
    let ch = channel();
    let mut a = Proc::new(&fabric, "big", 0, &ch);
    let mut b = Proc::new(&fabric, "small", 1, &ch);
    a.connect(&b);
    deliver(&ch, &mut [&mut a, &mut b]);
    // With 4096 on the big side, the small one would never answer.
    talk(&mut a, &mut b);
}

#[test]
fn roce_ports_connect_by_gid() {
    let fabric = SoftFabric::new();
    fabric
        .add_device(DeviceSpec::roce("roce0"))
        .expect("device");
    fabric
        .add_device(DeviceSpec::roce("roce1"))
        .expect("device");
    let ch = channel();
    let mut a = Proc::new(&fabric, "roce0", 0, &ch);
    let mut b = Proc::new(&fabric, "roce1", 1, &ch);
    a.connect(&b);
    deliver(&ch, &mut [&mut a, &mut b]);
    assert_eq!(a.host.connected.len(), 1);
    talk(&mut a, &mut b);
}

#[test]
fn both_connecting_at_once_make_one_connection() {
    let (_fabric, ch, mut a, mut b) = two();
    a.connect(&b);
    b.connect(&a);
    let (first_a, first_b) = (a.host.posted[0], b.host.posted[0]);
    deliver(&ch, &mut [&mut a, &mut b]);
    assert_eq!(a.host.connected.len(), 1);
    assert_eq!(b.host.connected.len(), 1);
    assert!(a.host.failed.is_empty() && b.host.failed.is_empty());
    // The smaller name's attempt went on; the larger one's queue pair went.
    assert_eq!(a.cpc.qp_of(b.me()), Some(first_a));
    assert_ne!(b.cpc.qp_of(a.me()), Some(first_b));
    assert!(b.host.hca.qp_state(first_b).is_err(), "destroyed");
    talk(&mut a, &mut b);
}

#[test]
fn a_peer_that_connects_again_replaces_the_old_queue_pair() {
    let (fabric, ch, mut a, mut b) = two();
    a.connect(&b);
    deliver(&ch, &mut [&mut a, &mut b]);
    let old_b = b.cpc.qp_of(a.me()).expect("connected");
    // A's queue pair fails; its BTL drops it and connects again.
    let old_a = a.cpc.qp_of(b.me()).expect("connected");
    fabric.fail_qp("soft0", old_a).expect("qp");
    a.cpc.drop_qp(&mut a.host, b.me(), old_a);
    a.poll();
    a.connect(&b);
    deliver(&ch, &mut [&mut a, &mut b]);
    assert_eq!(b.host.disconnected, [(a.me(), old_b)]);
    assert_eq!(b.host.connected.len(), 2);
    assert!(
        b.host.hca.qp_state(old_b).is_err(),
        "the old one is destroyed"
    );
    b.poll();
    talk(&mut a, &mut b);
}

#[test]
fn a_restarted_peer_connects_anew() {
    let (fabric, ch, mut a, mut b) = two();
    a.connect(&b);
    deliver(&ch, &mut [&mut a, &mut b]);
    let old_a = a.cpc.qp_of(b.me()).expect("connected");
    // B dies and comes back: a new context, a new incarnation, and its
    // attempt numbers start again.
    drop(b);
    let mut b = Proc::with(&fabric, "soft0", 1, &ch, 2, OobConfig::default());
    b.connect(&a);
    deliver(&ch, &mut [&mut a, &mut b]);
    assert_eq!(a.host.disconnected, [(b.me(), old_a)]);
    assert_eq!(b.host.connected.len(), 1);
    a.poll();
    talk(&mut a, &mut b);
}

#[test]
fn an_attempt_nobody_answers_fails_as_unreachable() {
    let (_fabric, ch, mut a, b) = two();
    a.connect(&b);
    ch.borrow_mut().clear();
    let deadline = <Oob as Cpc<Host>>::poll_timeout(&a.cpc).expect("a deadline");
    assert_eq!(deadline, Instant::ZERO + TIMEOUT);
    let qp = a.host.posted[0];
    a.cpc
        .handle_timeout(&mut a.host, deadline - Duration::from_millis(1));
    assert!(a.host.failed.is_empty(), "not before its time");
    a.cpc.handle_timeout(&mut a.host, deadline);
    assert_eq!(a.host.failed, [(b.me(), ConnectFailure::Unreachable)]);
    assert!(a.host.hca.qp_state(qp).is_err());
    assert!(a.cpc.is_empty());
}

#[test]
fn a_responder_whose_rtu_never_comes_forgets_quietly() {
    let (_fabric, _ch, a, mut b) = two();
    let req = MessageRepr {
        kind: Kind::Request,
        from: a.me(),
        attempt: 1,
        incarnation: 1,
        card: QpCard {
            qpn: QpNum(0x999),
            psn: 5,
            lid: 1,
            gid: crate::provider::Gid::default(),
            mtu: Mtu::M4096,
        },
    };
    b.cpc
        .handle_message(&mut b.host, a.me(), &req.emit(), Instant::ZERO);
    assert_eq!(b.cpc.len(), 1);
    b.cpc.handle_timeout(&mut b.host, Instant::ZERO + TIMEOUT);
    assert!(b.cpc.is_empty());
    assert!(b.host.failed.is_empty(), "it never asked");
}

#[test]
fn a_lost_rtu_is_made_up_for_by_the_first_message() {
    let (_fabric, ch, mut a, mut b) = two();
    a.connect(&b);
    // REQ, then REP; the RTU is lost.
    for _ in 0..2 {
        let m = ch.borrow_mut().pop_front().expect("a message");
        let p = if m.1 == a.me() { &mut a } else { &mut b };
        p.cpc.handle_message(&mut p.host, m.0, &m.2, Instant::ZERO);
    }
    ch.borrow_mut().clear();
    assert_eq!(a.host.connected.len(), 1);
    assert!(b.host.connected.is_empty());
    let qb = b.cpc.qp_of(a.me()).expect("replied");
    let qa = a.cpc.qp_of(b.me()).expect("connected");
    a.send(qa, 1);
    let got = b.poll();
    assert_eq!(got[0].qp, qb);
    b.cpc.handle_receive(&mut b.host, qb);
    assert_eq!(b.host.connected, [(a.me(), qb)]);
}

#[test]
fn refusals_fail_the_attempt_as_refused() {
    // No room at the responder.
    let fabric = SoftFabric::with_device("soft0");
    let ch = channel();
    let mut a = Proc::new(&fabric, "soft0", 0, &ch);
    let full = OobConfig {
        max_peers: 0,
        ..OobConfig::default()
    };
    let mut b = Proc::with(&fabric, "soft0", 1, &ch, 1, full);
    a.connect(&b);
    deliver(&ch, &mut [&mut a, &mut b]);
    assert_eq!(a.host.failed, [(b.me(), ConnectFailure::Refused)]);
    assert!(a.cpc.is_empty() && b.cpc.is_empty());

    // InfiniBand and RoCE cannot talk.
    let fabric = SoftFabric::new();
    fabric
        .add_device(DeviceSpec::infiniband("ib0"))
        .expect("device");
    fabric
        .add_device(DeviceSpec::roce("roce0"))
        .expect("device");
    let mut a = Proc::new(&fabric, "ib0", 0, &ch);
    let mut b = Proc::new(&fabric, "roce0", 1, &ch);
    a.connect(&b);
    deliver(&ch, &mut [&mut a, &mut b]);
    assert_eq!(a.host.failed, [(b.me(), ConnectFailure::Refused)]);
}

#[test]
fn stray_and_forged_messages_change_nothing() {
    let (_fabric, ch, mut a, mut b) = two();
    a.connect(&b);
    let (from, _, req) = ch.borrow_mut().pop_front().expect("the REQ");
    let mut parsed = MessageRepr::parse(&req).expect("a REQ");
    // Garbage, a short message, and a REQ whose sender is not who the
    // channel says.
    b.cpc
        .handle_message(&mut b.host, from, &[0xff; 64], Instant::ZERO);
    b.cpc
        .handle_message(&mut b.host, from, &req[..10], Instant::ZERO);
    let other = ProcName::new(7, 99);
    b.cpc
        .handle_message(&mut b.host, other, &req, Instant::ZERO);
    assert!(b.cpc.is_empty() && ch.borrow().is_empty());
    // A REP for another attempt.
    parsed.kind = Kind::Reply;
    parsed.from = b.me();
    parsed.attempt += 1;
    a.cpc
        .handle_message(&mut a.host, b.me(), &parsed.emit(), Instant::ZERO);
    assert!(a.host.connected.is_empty());
    // The real REQ, twice: the REP goes twice, one queue pair is made.
    b.cpc.handle_message(&mut b.host, from, &req, Instant::ZERO);
    b.cpc.handle_message(&mut b.host, from, &req, Instant::ZERO);
    assert_eq!(b.host.posted.len(), 1);
    assert_eq!(ch.borrow().len(), 2);
    deliver(&ch, &mut [&mut a, &mut b]);
    assert_eq!(a.host.connected.len(), 1);
    assert_eq!(b.host.connected.len(), 1);
    talk(&mut a, &mut b);
}

#[test]
fn finalize_destroys_every_queue_pair() {
    let (fabric, ch, mut a, mut b) = two();
    let c = Proc::new(&fabric, "soft0", 2, &ch);
    a.connect(&b);
    deliver(&ch, &mut [&mut a, &mut b]);
    a.connect(&c);
    ch.borrow_mut().clear();
    let qps = a.host.posted.clone();
    assert_eq!(qps.len(), 2);
    <Oob as Cpc<Host>>::finalize(&mut a.cpc, &mut a.host);
    assert!(a.cpc.is_empty());
    for qp in qps {
        assert!(a.host.hca.qp_state(qp).is_err());
    }
}

#[test]
fn the_list_and_each_cpc_s_query_choose() {
    let fabric = SoftFabric::with_device("soft0");
    let hca = fabric.open("soft0").expect("device");
    let device = hca.device();
    let mut port = hca.port(1).expect("port");
    let cpcs: Vec<Box<dyn Cpc<Host>>> = vec![Box::new(Oob::new(OobConfig::default()))];
    let any = ListValue::new();
    assert_eq!(select_for(&cpcs, &any, &device, &port), Ok(0));
    let only = ListValue::parse("oob").expect("list");
    assert_eq!(select_for(&cpcs, &only, &device, &port), Ok(0));
    let none = ListValue::parse("^oob").expect("list");
    assert!(matches!(
        select_for(&cpcs, &none, &device, &port),
        Err(CpcSelectError::NoneServes(why)) if why.contains("names none")
    ));
    let unknown = ListValue::parse("rdmacm").expect("list");
    assert!(select_for(&cpcs, &unknown, &device, &port).is_err());
    port.state = PortState::Down;
    assert!(matches!(
        select_for(&cpcs, &any, &device, &port),
        Err(CpcSelectError::NoneServes(why)) if why.contains("oob: the port is not active")
    ));
}

#[test]
fn its_parameters_register_and_set_the_timeout() {
    let mut params = btl_core::mca::Registry::<8>::new();
    let mut cpcs: Vec<Box<dyn Cpc<Host>>> = vec![Box::new(Oob::new(OobConfig::default()))];
    let id = register(&mut cpcs, &mut params).expect("register");
    assert_eq!(params.find("btl_verbs_cpc"), Some(id));
    assert!(params.find("btl_verbs_cpc_oob_timeout").is_some());

    let mut params = btl_core::mca::Registry::<8>::new();
    let mut oob = Oob::new(OobConfig::default());
    <Oob as Cpc<Host>>::register(&mut oob, &mut params).expect("register");
    let timeout = params
        .find("btl_verbs_cpc_oob_timeout")
        .expect("registered");
    params
        .set(timeout, "250", btl_core::mca::Source::Code)
        .expect("set");
    <Oob as Cpc<Host>>::init(&mut oob, &params, ProcName::new(7, 0), 1).expect("init");
    let (_fabric, _ch, mut a, b) = two();
    a.cpc = oob;
    a.connect(&b);
    assert_eq!(
        <Oob as Cpc<Host>>::poll_timeout(&a.cpc),
        Some(Instant::ZERO + Duration::from_millis(250))
    );
}
