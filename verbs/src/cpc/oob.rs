//! `oob`: queue pairs connected by a three-way exchange over a side
//! channel (the BTL's bootstrap or a TCP connection), after Open MPI's
//! `oob` CPC.
//!
//! ```text
//!  requester                                   responder
//!  create QP, Init, post_recvs
//!        ── REQ (qpn, psn, lid, gid, mtu) ──►
//!                                              create QP, Init, post_recvs,
//!                                              Rtr, Rts
//!        ◄── REP (qpn, psn, lid, gid, mtu) ──
//!  Rtr, Rts; connected
//!        ── RTU ──►
//!                                              connected
//! ```
//!
//! The responder is in `Rts` when it replies, so the requester may send
//! at once; the responder waits for the RTU (or the requester's first
//! message on the queue pair) so that it never sends into a queue pair
//! not yet in `Rtr`. The path MTU is the smaller of the two ports'.
//!
//! - **Both sides connect at once**: each has its REQ out when the other's
//!   arrives. The side with the smaller process name keeps its attempt and
//!   ignores the other's REQ; the larger one drops its own and answers.
//!   One queue pair pair comes out, and each side's BTL sees it connected.
//! - **A peer that connects again** (its queue pair failed) **or
//!   restarted** sends a REQ while this side holds a connection to it: the
//!   old queue pair is destroyed ([`CpcHost::disconnected`]) and the new
//!   REQ answered.
//! - **Stale messages** (a REP for an attempt abandoned, an RTU for a queue
//!   pair replaced) match no attempt and are dropped, as are messages that
//!   do not parse or whose sender is not who the side channel says.
//! - **A peer that never answers**: an attempt fails with `Unreachable`
//!   after the handshake timeout; a REJ fails it with `Refused`.
//!
//! At most `max_peers` connections and attempts are held at once; a REQ
//! beyond is refused with `NoResources`.

use std::collections::BTreeMap;

use btl_core::endpoint::ProcName;
use btl_core::engine::ConnectFailure;
use btl_core::mca::{NotAvailable, ParamId, ParamKind, ParamSpec, Params, RegisterError};
use btl_core::time::{Duration, Instant};

use super::message::{Kind, MessageRepr, QpCard, RejectReason};
use super::{Cpc, CpcHost};
use crate::provider::{
    DeviceAttr, LinkLayer, PortAddr, PortAttr, PortState, Provider, QpNum, ToInit, ToRtr, ToRts,
    Transition, VerbsError,
};

/// The handshake timeout parameter, in milliseconds.
pub const TIMEOUT_PARAM: ParamSpec = ParamSpec::new(
    "btl",
    "verbs",
    "cpc_oob_timeout",
    ParamKind::Int {
        min: 1,
        max: 3_600_000,
    },
    "10000",
)
.help(
    "Milliseconds an `oob` connection attempt waits for the peer's answer \
     before it fails as unreachable",
)
.level(5);

/// The `oob` CPC's priority: the only one, it serves every port.
pub const PRIORITY: i32 = 50;

/// What an `oob` CPC is set up with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OobConfig {
    /// How long an attempt waits for the peer's answer.
    pub timeout: Duration,
    /// Most connections and attempts at once: the BTL's peers.
    pub max_peers: usize,
}

impl Default for OobConfig {
    fn default() -> Self {
        OobConfig {
            timeout: Duration::from_secs(10),
            max_peers: 64,
        }
    }
}

/// Where the connection with one peer stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Conn {
    /// This side sent a REQ and waits for the REP.
    Requested {
        qp: QpNum,
        psn: u32,
        attempt: u32,
        deadline: Instant,
    },
    /// This side answered a REQ and waits for the RTU.
    Replied {
        qp: QpNum,
        psn: u32,
        attempt: u32,
        incarnation: u64,
        deadline: Instant,
    },
    /// Both sides are in `Rts` and know it.
    Connected { qp: QpNum },
}

impl Conn {
    fn qp(&self) -> QpNum {
        match *self {
            Conn::Requested { qp, .. } | Conn::Replied { qp, .. } | Conn::Connected { qp } => qp,
        }
    }
}

/// The `oob` CPC.
#[derive(Debug)]
pub struct Oob {
    config: OobConfig,
    timeout_param: Option<ParamId>,
    me: ProcName,
    incarnation: u64,
    next_attempt: u32,
    peers: BTreeMap<ProcName, Conn>,
}

impl Oob {
    /// An `oob` CPC with `config` (its timeout is replaced by the
    /// parameter's value at [`init`](Cpc::init) once registered).
    pub fn new(config: OobConfig) -> Self {
        Oob {
            config,
            timeout_param: None,
            me: ProcName::new(0, 0),
            incarnation: 0,
            next_attempt: 1,
            peers: BTreeMap::new(),
        }
    }

    /// Whether `peer` is connected.
    pub fn is_connected(&self, peer: ProcName) -> bool {
        matches!(self.peers.get(&peer), Some(Conn::Connected { .. }))
    }

    /// The queue pair connected, or being connected, to `peer`.
    pub fn qp_of(&self, peer: ProcName) -> Option<QpNum> {
        self.peers.get(&peer).map(Conn::qp)
    }

    /// Connections and attempts held.
    pub fn len(&self) -> usize {
        self.peers.len()
    }

    /// Whether none is held.
    pub fn is_empty(&self) -> bool {
        self.peers.is_empty()
    }

    fn message(&self, kind: Kind, attempt: u32, card: QpCard) -> [u8; super::MESSAGE_LEN] {
        MessageRepr {
            kind,
            from: self.me,
            attempt,
            incarnation: self.incarnation,
            card,
        }
        .emit()
    }

    fn reject<H: CpcHost>(&self, host: &mut H, to: ProcName, req: &MessageRepr, why: RejectReason) {
        let card = QpCard {
            qpn: QpNum(0),
            psn: 0,
            ..req.card
        };
        host.send_message(to, &self.message(Kind::Reject(why), req.attempt, card));
    }

    /// Removes what is held for `peer`, destroying its queue pair.
    fn forget<H: CpcHost>(&mut self, host: &mut H, peer: ProcName) -> Option<Conn> {
        let conn = self.peers.remove(&peer)?;
        host.destroy_qp(conn.qp());
        Some(conn)
    }

    /// The card of this side's queue pair `qp`, which sends from `psn`.
    fn card<H: CpcHost>(host: &mut H, qp: QpNum, psn: u32) -> Result<QpCard, VerbsError> {
        let port = host.port();
        let attr = host.provider().port(port)?;
        Ok(QpCard {
            qpn: qp,
            psn,
            lid: attr.lid,
            gid: attr.gid,
            mtu: attr.active_mtu,
        })
    }

    /// A new queue pair in `Init` with its receives posted, and its card.
    fn new_qp<H: CpcHost>(host: &mut H) -> Result<QpCard, VerbsError> {
        let (pd, init, port, access) = (host.pd(), host.qp_init(), host.port(), host.qp_access());
        let qp = host.provider().create_qp(pd, &init)?;
        let up = host
            .provider()
            .modify_qp(qp, &Transition::Init(ToInit { port, access }))
            .and_then(|()| host.post_recvs(qp));
        if let Err(e) = up {
            host.destroy_qp(qp);
            return Err(e);
        }
        let psn = host.psn() & 0x00FF_FFFF;
        Self::card(host, qp, psn).inspect_err(|_| host.destroy_qp(qp))
    }

    /// Moves `mine` to `Rtr` towards `theirs`, then to `Rts`.
    fn bring_up<H: CpcHost>(
        host: &mut H,
        mine: &QpCard,
        theirs: &QpCard,
    ) -> Result<(), VerbsError> {
        let tuning = host.qp_tuning();
        let port = host.port();
        let own_mtu = host.provider().port(port)?.active_mtu;
        let dest = match theirs.lid {
            // LID 0 does not exist on InfiniBand: the peer is on RoCE.
            0 => PortAddr {
                lid: 0,
                gid: Some(theirs.gid),
            },
            lid => PortAddr { lid, gid: None },
        };
        let provider = host.provider();
        provider.modify_qp(
            mine.qpn,
            &Transition::Rtr(ToRtr {
                dest,
                dest_qp: theirs.qpn,
                rq_psn: theirs.psn,
                path_mtu: own_mtu.min(theirs.mtu),
                max_dest_rd_atomic: tuning.max_rd_atomic,
                min_rnr_timer: tuning.min_rnr_timer,
            }),
        )?;
        provider.modify_qp(
            mine.qpn,
            &Transition::Rts(ToRts {
                sq_psn: mine.psn,
                timeout: tuning.ack_timeout,
                retry_cnt: tuning.retry_cnt,
                rnr_retry: tuning.rnr_retry,
                max_rd_atomic: tuning.max_rd_atomic,
            }),
        )
    }

    /// Whether a peer with `card` can reach this side's port: both on
    /// InfiniBand (a LID) or both on RoCE (LID 0).
    fn compatible<H: CpcHost>(host: &mut H, card: &QpCard) -> bool {
        let port = host.port();
        host.provider()
            .port(port)
            .is_ok_and(|p| (p.link_layer == LinkLayer::Ethernet) == (card.lid == 0))
    }

    fn on_request<H: CpcHost>(&mut self, host: &mut H, req: &MessageRepr, now: Instant) {
        let peer = req.from;
        match self.peers.get(&peer).copied() {
            // Both connect at once: the smaller name's attempt goes on.
            Some(Conn::Requested { .. }) if self.me < peer => return,
            // The same REQ again: the REP may have been lost.
            Some(Conn::Replied {
                qp,
                psn,
                attempt,
                incarnation,
                ..
            }) if attempt == req.attempt && incarnation == req.incarnation => {
                if let Ok(card) = Self::card(host, qp, psn) {
                    host.send_message(peer, &self.message(Kind::Reply, attempt, card));
                }
                return;
            }
            Some(Conn::Requested { .. }) | Some(Conn::Replied { .. }) => {
                self.forget(host, peer);
            }
            Some(Conn::Connected { qp }) => {
                self.forget(host, peer);
                host.disconnected(peer, qp);
            }
            None => {}
        }
        if !Self::compatible(host, &req.card) {
            self.reject(host, peer, req, RejectReason::Incompatible);
            return;
        }
        if self.peers.len() >= self.config.max_peers {
            self.reject(host, peer, req, RejectReason::NoResources);
            return;
        }
        let card = match Self::new_qp(host) {
            Ok(card) => card,
            Err(_) => {
                self.reject(host, peer, req, RejectReason::NoResources);
                return;
            }
        };
        if Self::bring_up(host, &card, &req.card).is_err() {
            host.destroy_qp(card.qpn);
            self.reject(host, peer, req, RejectReason::NoResources);
            return;
        }
        self.peers.insert(
            peer,
            Conn::Replied {
                qp: card.qpn,
                psn: card.psn,
                attempt: req.attempt,
                incarnation: req.incarnation,
                deadline: now + self.config.timeout,
            },
        );
        host.send_message(peer, &self.message(Kind::Reply, req.attempt, card));
    }

    fn on_reply<H: CpcHost>(&mut self, host: &mut H, rep: &MessageRepr) {
        let peer = rep.from;
        let Some(Conn::Requested {
            qp, psn, attempt, ..
        }) = self.peers.get(&peer).copied()
        else {
            return;
        };
        if attempt != rep.attempt {
            return;
        }
        let Ok(mine) = Self::card(host, qp, psn) else {
            return;
        };
        if Self::bring_up(host, &mine, &rep.card).is_err() {
            self.forget(host, peer);
            host.connect_failed(peer, ConnectFailure::Unreachable);
            return;
        }
        self.peers.insert(peer, Conn::Connected { qp });
        host.send_message(peer, &self.message(Kind::ReadyToUse, attempt, mine));
        host.connected(peer, qp);
    }

    fn on_ready<H: CpcHost>(&mut self, host: &mut H, rtu: &MessageRepr) {
        let peer = rtu.from;
        if let Some(Conn::Replied {
            qp,
            attempt,
            incarnation,
            ..
        }) = self.peers.get(&peer).copied()
            && attempt == rtu.attempt
            && incarnation == rtu.incarnation
        {
            self.peers.insert(peer, Conn::Connected { qp });
            host.connected(peer, qp);
        }
    }

    fn on_reject<H: CpcHost>(&mut self, host: &mut H, rej: &MessageRepr) {
        let peer = rej.from;
        if let Some(Conn::Requested { attempt, .. }) = self.peers.get(&peer).copied()
            && attempt == rej.attempt
        {
            self.forget(host, peer);
            host.connect_failed(peer, ConnectFailure::Refused);
        }
    }
}

impl<H: CpcHost> Cpc<H> for Oob {
    fn name(&self) -> &'static str {
        "oob"
    }

    fn priority(&self) -> i32 {
        PRIORITY
    }

    fn register(&mut self, params: &mut dyn Params) -> Result<(), RegisterError> {
        self.timeout_param = Some(params.register(&TIMEOUT_PARAM)?);
        Ok(())
    }

    fn init(
        &mut self,
        params: &dyn Params,
        me: ProcName,
        incarnation: u64,
    ) -> Result<(), NotAvailable> {
        if let Some(id) = self.timeout_param {
            let ms = params
                .int(id)
                .map_err(|_| NotAvailable::new("cpc_oob_timeout unreadable"))?;
            self.config.timeout = Duration::from_millis(ms.max(1) as u64);
        }
        self.me = me;
        self.incarnation = incarnation;
        Ok(())
    }

    fn query(&self, _device: &DeviceAttr, port: &PortAttr) -> Result<(), NotAvailable> {
        if port.state != PortState::Active {
            return Err(NotAvailable::new("the port is not active"));
        }
        Ok(())
    }

    fn start_connect(&mut self, host: &mut H, peer: ProcName, now: Instant) {
        if self.peers.contains_key(&peer) {
            // Connected, or an attempt (either way) already on.
            return;
        }
        if self.peers.len() >= self.config.max_peers {
            host.connect_failed(peer, ConnectFailure::Unreachable);
            return;
        }
        let card = match Self::new_qp(host) {
            Ok(card) => card,
            Err(_) => {
                host.connect_failed(peer, ConnectFailure::Unreachable);
                return;
            }
        };
        let attempt = self.next_attempt;
        self.next_attempt = self.next_attempt.wrapping_add(1).max(1);
        self.peers.insert(
            peer,
            Conn::Requested {
                qp: card.qpn,
                psn: card.psn,
                attempt,
                deadline: now + self.config.timeout,
            },
        );
        host.send_message(peer, &self.message(Kind::Request, attempt, card));
    }

    fn handle_message(&mut self, host: &mut H, from: ProcName, message: &[u8], now: Instant) {
        let Ok(m) = MessageRepr::parse(message) else {
            return;
        };
        if m.from != from || from == self.me {
            return;
        }
        match m.kind {
            Kind::Request => self.on_request(host, &m, now),
            Kind::Reply => self.on_reply(host, &m),
            Kind::ReadyToUse => self.on_ready(host, &m),
            Kind::Reject(_) => self.on_reject(host, &m),
        }
    }

    fn handle_receive(&mut self, host: &mut H, qp: QpNum) {
        let waiting = self.peers.iter().find_map(|(&peer, c)| match *c {
            Conn::Replied { qp: q, .. } if q == qp => Some(peer),
            _ => None,
        });
        if let Some(peer) = waiting {
            self.peers.insert(peer, Conn::Connected { qp });
            host.connected(peer, qp);
        }
    }

    fn drop_qp(&mut self, host: &mut H, peer: ProcName, qp: QpNum) {
        if self.qp_of(peer) == Some(qp) {
            self.forget(host, peer);
        }
    }

    fn poll_timeout(&self) -> Option<Instant> {
        self.peers
            .values()
            .filter_map(|c| match *c {
                Conn::Requested { deadline, .. } | Conn::Replied { deadline, .. } => Some(deadline),
                Conn::Connected { .. } => None,
            })
            .min()
    }

    fn handle_timeout(&mut self, host: &mut H, now: Instant) {
        let over: Vec<(ProcName, bool)> = self
            .peers
            .iter()
            .filter_map(|(&peer, c)| match *c {
                Conn::Requested { deadline, .. } if now >= deadline => Some((peer, true)),
                Conn::Replied { deadline, .. } if now >= deadline => Some((peer, false)),
                _ => None,
            })
            .collect();
        for (peer, asked_here) in over {
            self.forget(host, peer);
            if asked_here {
                host.connect_failed(peer, ConnectFailure::Unreachable);
            }
        }
    }

    fn finalize(&mut self, host: &mut H) {
        let peers: Vec<ProcName> = self.peers.keys().copied().collect();
        for peer in peers {
            self.forget(host, peer);
        }
    }
}
