//! Connection pseudo-components (CPCs): how two processes bring a pair of
//! reliable-connected queue pairs up, after Open MPI's openib BTL.
//!
//! A queue pair can only talk to the one queue pair it was connected to,
//! and connecting it takes what only the peer knows (its queue pair
//! number, its port's LID or GID, its first PSN, its MTU). A CPC carries
//! that over some other channel. Each is chosen by name and priority
//! (parameter `btl_verbs_cpc`), and has Open MPI's life:
//!
//! - [`register`](Cpc::register) declares its parameters (openib's
//!   `open`);
//! - [`init`](Cpc::init) readies it with their values;
//! - [`query`](Cpc::query) says whether it may serve a device and port;
//! - [`start_connect`](Cpc::start_connect) opens a connection to a peer,
//!   and the messages and timeouts it is fed carry it on;
//! - [`finalize`](Cpc::finalize) destroys what it holds.
//!
//! It calls back into the BTL through [`CpcHost`]: `post_recvs` when a
//! queue pair is ready locally (in `Init`, before any message can
//! arrive), `connected` when both sides are in `Rts` and know it, which
//! releases what the BTL queued for the peer meanwhile.

mod message;
mod oob;

pub use message::{Kind, LEN as MESSAGE_LEN, MessageError, MessageRepr, QpCard, RejectReason};
pub use oob::{Oob, OobConfig, TIMEOUT_PARAM as OOB_TIMEOUT_PARAM};

use btl_core::endpoint::ProcName;
use btl_core::engine::ConnectFailure;
use btl_core::mca::{
    Candidate, Exclusivity, ListValue, NotAvailable, ParamId, ParamKind, ParamSpec, Params,
    RegisterError, SelectError, select,
};
use btl_core::time::Instant;

use crate::provider::{
    Access, AckTimeout, DeviceAttr, Pd, PortAttr, Provider, QpInit, QpNum, RNR_RETRY_FOREVER,
    RnrTimer, VerbsError,
};

/// What a CPC needs of the BTL it connects queue pairs for.
pub trait CpcHost {
    /// The provider the BTL's queue pairs live on.
    type Provider: Provider;

    /// The provider, to create and move queue pairs.
    fn provider(&mut self) -> &mut Self::Provider;

    /// The port the BTL's queue pairs use (from 1).
    fn port(&self) -> u8;

    /// The protection domain of the BTL's queue pairs and memory.
    fn pd(&self) -> Pd;

    /// How a queue pair of the BTL is created: its completion queues, its
    /// shared receive queue if any, its sizes.
    fn qp_init(&self) -> QpInit;

    /// What peers' RDMA may do through a queue pair of the BTL.
    fn qp_access(&self) -> Access;

    /// The retry and timer attributes of the BTL's queue pairs.
    fn qp_tuning(&self) -> QpTuning;

    /// A fresh random 24-bit PSN for a new queue pair.
    fn psn(&mut self) -> u32;

    /// `qp`, in `Init`, is ready locally: the BTL posts its receives now,
    /// before the peer can send.
    fn post_recvs(&mut self, qp: QpNum) -> Result<(), VerbsError>;

    /// `qp` is connected to `peer`, and both sides know it.
    fn connected(&mut self, peer: ProcName, qp: QpNum);

    /// The connection this side asked for with `peer` could not be made.
    fn connect_failed(&mut self, peer: ProcName, why: ConnectFailure);

    /// `qp`, which was connected to `peer`, is gone (the peer connected
    /// again, or restarted): the BTL closes what it ran over it.
    fn disconnected(&mut self, peer: ProcName, qp: QpNum);

    /// Destroys `qp`, which the CPC created and no longer needs: the BTL
    /// releases what it posted on it too.
    fn destroy_qp(&mut self, qp: QpNum);

    /// Sends `message` to `peer` over the side channel.
    fn send_message(&mut self, peer: ProcName, message: &[u8]);
}

/// The retry and timer attributes every queue pair of a BTL gets, whatever
/// CPC connects it (openib's `ib_timeout`, `ib_retry_count`,
/// `ib_rnr_retry`, `ib_min_rnr_timer`, `ib_max_rdma_dst_ops`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QpTuning {
    /// How long a request waits for its acknowledgement.
    pub ack_timeout: AckTimeout,
    /// Retries without an acknowledgement (at most 7).
    pub retry_cnt: u8,
    /// Retries after the peer had no receive (7: without end).
    pub rnr_retry: u8,
    /// How long a peer waits here before it sends again into no receive.
    pub min_rnr_timer: RnrTimer,
    /// RDMA reads outstanding at once, each way.
    pub max_rd_atomic: u8,
}

impl Default for QpTuning {
    /// openib's defaults: a 4.3 s ACK timeout (code 20), 7 retries, RNR
    /// retries without end, a 10.24 ms RNR timer (code 20), 4 reads.
    fn default() -> Self {
        QpTuning {
            ack_timeout: AckTimeout(20),
            retry_cnt: 7,
            rnr_retry: RNR_RETRY_FOREVER,
            min_rnr_timer: RnrTimer(20),
            max_rd_atomic: 4,
        }
    }
}

/// A connection pseudo-component.
pub trait Cpc<H: CpcHost> {
    /// Its name, as `btl_verbs_cpc` lists it.
    fn name(&self) -> &'static str;

    /// Its rank among the CPCs that may serve a port: higher first.
    fn priority(&self) -> i32;

    /// Declares its parameters.
    fn register(&mut self, params: &mut dyn Params) -> Result<(), RegisterError>;

    /// Readies it, with its parameters' values, for process `me` in its
    /// `incarnation`; or says why it cannot run.
    fn init(
        &mut self,
        params: &dyn Params,
        me: ProcName,
        incarnation: u64,
    ) -> Result<(), NotAvailable>;

    /// Whether it may connect queue pairs of `port` of `device`.
    fn query(&self, device: &DeviceAttr, port: &PortAttr) -> Result<(), NotAvailable>;

    /// Opens a connection to `peer`; it ends in [`CpcHost::connected`] or
    /// [`CpcHost::connect_failed`].
    fn start_connect(&mut self, host: &mut H, peer: ProcName, now: Instant);

    /// A message from `from` on the side channel.
    fn handle_message(&mut self, host: &mut H, from: ProcName, message: &[u8], now: Instant);

    /// The first completion of a receive on `qp`: the peer is sending, so
    /// it is in `Rts`, whatever message about it is still on its way.
    fn handle_receive(&mut self, host: &mut H, qp: QpNum);

    /// The BTL is done with `qp`, its connection to `peer` (the queue pair
    /// failed, or the peer is gone): the CPC forgets it, unless it has
    /// moved on to another queue pair for that peer.
    fn drop_qp(&mut self, host: &mut H, peer: ProcName, qp: QpNum);

    /// When [`handle_timeout`](Self::handle_timeout) is due next.
    fn poll_timeout(&self) -> Option<Instant>;

    /// Time passed: attempts that waited too long fail.
    fn handle_timeout(&mut self, host: &mut H, now: Instant);

    /// Destroys every queue pair it holds.
    fn finalize(&mut self, host: &mut H);
}

/// The parameter that chooses CPCs.
pub const CPC_PARAM: ParamSpec = ParamSpec::new("btl", "verbs", "cpc", ParamKind::List, "")
    .help(
        "Connection pseudo-components to use, in order of preference \
         (`oob`), or `^` and those not to use; empty: every one that can \
         serve the port, highest priority first",
    )
    .level(4);

/// Most CPCs one BTL knows.
pub const MAX_CPCS: usize = 4;

/// Registers [`CPC_PARAM`] and every CPC's own parameters.
pub fn register<H: CpcHost>(
    cpcs: &mut [Box<dyn Cpc<H>>],
    params: &mut dyn Params,
) -> Result<ParamId, RegisterError> {
    let id = params.register(&CPC_PARAM)?;
    for cpc in cpcs.iter_mut() {
        cpc.register(params)?;
    }
    Ok(id)
}

/// Why no CPC serves a port.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CpcSelectError {
    /// The selection list leaves none that can serve it; each CPC's
    /// reason.
    #[error("no connection pseudo-component serves this port ({0})")]
    NoneServes(String),
    /// The list named more CPCs than a BTL holds.
    #[error("too many connection pseudo-components: {0:?}")]
    TooMany(SelectError),
}

/// The CPC that connects the queue pairs of `port` of `device`: of those
/// `request` names (all if empty) that say they can serve it, the highest
/// priority. Its index in `cpcs`.
pub fn select_for<H: CpcHost>(
    cpcs: &[Box<dyn Cpc<H>>],
    request: &ListValue,
    device: &DeviceAttr,
    port: &PortAttr,
) -> Result<usize, CpcSelectError> {
    let mut reasons = Vec::new();
    let candidates: Vec<Candidate<'_>> = cpcs
        .iter()
        .map(|c| Candidate {
            name: c.name(),
            exclusivity: Exclusivity::DEFAULT,
            priority: c.priority(),
        })
        .collect();
    let chosen = select::<MAX_CPCS>(request, &candidates).map_err(CpcSelectError::TooMany)?;
    for (i, c) in chosen.iter() {
        match cpcs[i].query(device, port) {
            Ok(()) => return Ok(i),
            Err(why) => reasons.push(format!("{}: {why}", c.name)),
        }
    }
    if chosen.is_empty() {
        reasons.push("the list names none of them".to_owned());
    }
    Err(CpcSelectError::NoneServes(reasons.join("; ")))
}

#[cfg(test)]
mod tests;
