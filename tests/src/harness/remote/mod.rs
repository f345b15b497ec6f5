//! A BTL in another process: [`RemoteBtl`] is what the suite holds, and
//! every call it takes runs on a real module in a child process
//! ([`serve`]), over a Unix socket. So a world's side B can be a process
//! of its own: the bytes between A and B move as they would between two
//! processes of a job, and killing B is a real SIGKILL.
//!
//! The parent keeps what the suite reads in place, as its own copy:
//! - the descriptors: [`RemoteBtl::pools`] are pools of the child's
//!   configuration in which each descriptor the child lends is mirrored
//!   (same headroom, reserve and payload). What the suite writes in a
//!   mirror goes with the send; what the child's send leaves in a
//!   descriptor it hands back comes back into the mirror. The child's own
//!   pools, which also hold what it took for itself, are read with
//!   [`RemoteBtl::pool_stats`];
//! - the registered regions: the same registrations in a table of the
//!   parent's, which hands out the same handles (checked at each one).
//!   What the suite writes through `region_mut` is sent before the next
//!   call; what peers wrote in the child's regions is fetched by
//!   [`RemoteBtl::refresh`], which the world calls before it hands the
//!   module out, because a peer's put lands without the child being
//!   asked anything.

mod wire;

use std::collections::{HashMap, HashSet};
use std::os::unix::net::UnixStream;
use std::pin::Pin;

use btl_core::btl::memory::{RegSlot, Registrations};
use btl_core::btl::{
    Access, Attributes, Btl, BtlError, BtlFlags, ErrorEvent, Event, Incoming, MemHandle, MemSlice,
    OpId, RegisterError, RemoteSlice, SendError, SendStatus, Tag, Undelivered,
};
use btl_core::desc::{DescFlags, Descriptor, Order};
use btl_core::endpoint::{EndpointId, ProcName, Reachability};
use btl_core::mca::Exclusivity;
use btl_core::pool::{
    FragmentClass, FragmentPools, FragmentPoolsConfig, PoolCell, PoolStats, PoolsRef,
};

use crate::world::Memory;
use wire::{In, Out, Wire, wire_unit_enum};

wire_unit_enum!(
    /// A call from the parent.
    enum Op {
        Attributes,
        AddProcs,
        DelProcs,
        Alloc,
        Free,
        PrepareSrc,
        PrepareSrcRegistered,
        Send,
        Sendi,
        SendCopy,
        Register,
        Deregister,
        Write,
        Fetch,
        Put,
        PutNotify,
        Get,
        Progress,
        Poll,
        Finalize,
        PoolStats,
        Quit,
    }
);

/// A descriptor lent by the child, as the parent mirrors it.
#[derive(Debug, Clone, Copy)]
struct Lent {
    /// Which descriptor it is in the child.
    key: u64,
    headroom: u16,
    reserve: usize,
    inline: usize,
    referenced: bool,
}

impl Wire for Lent {
    fn put(&self, out: &mut Out) {
        out.put(&self.key)
            .put(&self.headroom)
            .put(&self.reserve)
            .put(&self.inline)
            .put(&self.referenced);
    }
    fn take(from: &mut In) -> Self {
        Lent {
            key: from.take(),
            headroom: from.take(),
            reserve: from.take(),
            inline: from.take(),
            referenced: from.take(),
        }
    }
}

/// What became of a send, from the child.
enum Sent {
    /// `Completed(Some)`: back, with what the send left in it.
    Back(Vec<u8>),
    /// `Completed(None)`: freed by the module.
    Gone,
    /// `Queued`.
    Queued,
    /// Refused, and back with what it holds.
    Refused(BtlError, Vec<u8>),
}

impl Wire for Sent {
    fn put(&self, out: &mut Out) {
        match self {
            Sent::Back(bytes) => {
                out.put(&0u8).put(bytes);
            }
            Sent::Gone => 1u8.put(out),
            Sent::Queued => 2u8.put(out),
            Sent::Refused(e, bytes) => {
                out.put(&3u8).put(e).put(bytes);
            }
        }
    }
    fn take(from: &mut In) -> Self {
        match u8::take(from) {
            0 => Sent::Back(from.take()),
            1 => Sent::Gone,
            2 => Sent::Queued,
            _ => Sent::Refused(from.take(), from.take()),
        }
    }
}

/// An event, as the child polled it. Descriptors and regions go by key.
enum Polled {
    Received(EndpointId, Tag, Vec<u8>),
    SendComplete(
        EndpointId,
        Tag,
        Option<(u64, Vec<u8>)>,
        Result<(), BtlError>,
    ),
    PutComplete(OpId, u64, Result<(), BtlError>),
    GetComplete(OpId, u64, Result<(), BtlError>),
    PutArrived(EndpointId, (u64, (u64, u64)), u64),
    PeerLeft(EndpointId),
    Room(EndpointId),
    Error(bool, Option<EndpointId>, BtlError),
}

impl Wire for Polled {
    fn put(&self, out: &mut Out) {
        match self {
            Polled::Received(from, tag, data) => {
                out.put(&0u8).put(from).put(tag).put(data);
            }
            Polled::SendComplete(ep, tag, desc, result) => {
                out.put(&1u8).put(ep).put(tag).put(desc).put(result);
            }
            Polled::PutComplete(op, ctx, result) => {
                out.put(&2u8).put(op).put(ctx).put(result);
            }
            Polled::GetComplete(op, ctx, result) => {
                out.put(&3u8).put(op).put(ctx).put(result);
            }
            Polled::PutArrived(from, slice, imm) => {
                out.put(&4u8).put(from).put(slice).put(imm);
            }
            Polled::PeerLeft(ep) => {
                out.put(&5u8).put(ep);
            }
            Polled::Room(ep) => {
                out.put(&6u8).put(ep);
            }
            Polled::Error(fatal, ep, error) => {
                out.put(&7u8).put(fatal).put(ep).put(error);
            }
        }
    }
    fn take(from: &mut In) -> Self {
        match u8::take(from) {
            0 => Polled::Received(from.take(), from.take(), from.take()),
            1 => Polled::SendComplete(from.take(), from.take(), from.take(), from.take()),
            2 => Polled::PutComplete(from.take(), from.take(), from.take()),
            3 => Polled::GetComplete(from.take(), from.take(), from.take()),
            4 => Polled::PutArrived(from.take(), from.take(), from.take()),
            5 => Polled::PeerLeft(from.take()),
            6 => Polled::Room(from.take()),
            _ => Polled::Error(from.take(), from.take(), from.take()),
        }
    }
}

impl Wire for Attributes {
    fn put(&self, out: &mut Out) {
        out.put(&self.name.to_string())
            .put(&self.eager_limit)
            .put(&self.max_send_size)
            .put(&self.rdma_pipeline_send_length)
            .put(&self.rdma_pipeline_frag_size)
            .put(&self.put_limit)
            .put(&self.put_alignment)
            .put(&self.get_limit)
            .put(&self.get_alignment)
            .put(&self.exclusivity.0)
            .put(&self.latency_us)
            .put(&self.bandwidth_mbps)
            .put(&self.flags.bits())
            .put(&self.registration_handle_size);
    }
    fn take(from: &mut In) -> Self {
        let name: String = from.take();
        Attributes {
            // A handful of bytes per world, for the `'static` the
            // attributes name their component with.
            name: Box::leak(name.into_boxed_str()),
            eager_limit: from.take(),
            max_send_size: from.take(),
            rdma_pipeline_send_length: from.take(),
            rdma_pipeline_frag_size: from.take(),
            put_limit: from.take(),
            put_alignment: from.take(),
            get_limit: from.take(),
            get_alignment: from.take(),
            exclusivity: Exclusivity(from.take()),
            latency_us: from.take(),
            bandwidth_mbps: from.take(),
            flags: BtlFlags::from_bits(from.take()).expect("known flags"),
            registration_handle_size: from.take(),
        }
    }
}

/// Which descriptor of its pools `desc` is: its fragment's class and
/// place, unique among those lent out.
fn key_of(desc: &Descriptor) -> u64 {
    let fragment = desc.fragment();
    let class = FragmentClass::ALL
        .iter()
        .position(|&c| c == fragment.class())
        .unwrap_or_default();
    (class as u64) << 32 | fragment.index() as u64
}

/// What a descriptor holds past the module's headroom: its header reserve
/// and inline payload.
fn written(desc: &Descriptor, pools: PoolsRef<'_>) -> Vec<u8> {
    let bytes = desc
        .fragment_bytes(pools)
        .expect("a lent descriptor's bytes");
    bytes[desc.headroom()..].to_vec()
}

/// Writes `bytes` (what [`written`] read from its twin) into `desc`.
fn write_back(desc: &mut Descriptor, pools: PoolsRef<'_>, bytes: &[u8]) {
    let (header, payload) = bytes.split_at(desc.reserve());
    desc.header_mut(pools)
        .expect("a lent descriptor's header")
        .copy_from_slice(header);
    desc.payload_mut(pools)
        .expect("a lent descriptor's payload")
        .copy_from_slice(payload);
}

/// Bytes compared at once when the parent fetches what changed in a region.
const CHUNK: usize = 4096;

/// Serves `btl` to the parent at the other end of `control` until it says
/// quit or goes away: each call it sends is made on `btl`, and the answer
/// sent back.
pub fn serve<B: Btl<Memory = Memory>>(btl: &mut B, mut control: UnixStream) {
    let mut servant = Servant {
        held: HashMap::new(),
        handles: HashMap::new(),
        shown: HashMap::new(),
    };
    while let Some(mut call) = In::receive(&mut control) {
        let op: Op = call.take();
        if op == Op::Quit {
            return;
        }
        let answer = servant.answer(btl, op, &mut call);
        if answer.send(&mut control).is_err() {
            return;
        }
    }
}

/// The child's side: what it lent the parent and what the parent has seen.
struct Servant {
    /// Descriptors the parent holds, by key.
    held: HashMap<u64, Descriptor>,
    /// Every handle registered here, by its key.
    handles: HashMap<u64, MemHandle>,
    /// Each registered region as the parent last saw it.
    shown: HashMap<u64, Vec<u8>>,
}

impl Servant {
    fn slice(&self, from: &mut In) -> MemSlice {
        let (key, (offset, len)): (u64, (u64, u64)) = from.take();
        self.handles
            .get(&key)
            .expect("a handle registered here")
            .slice(offset, len)
    }

    fn lend<B: Btl<Memory = Memory>>(
        &mut self,
        btl: &B,
        made: Result<Descriptor, BtlError>,
    ) -> Result<Lent, BtlError> {
        let desc = made?;
        let lent = Lent {
            key: key_of(&desc),
            headroom: desc.headroom() as u16,
            reserve: desc.reserve(),
            inline: written(&desc, btl.pools()).len() - desc.reserve(),
            referenced: desc.referenced().is_some(),
        };
        self.held.insert(lent.key, desc);
        Ok(lent)
    }

    fn keep<B: Btl<Memory = Memory>>(&mut self, btl: &B, desc: Descriptor) -> Vec<u8> {
        let bytes = written(&desc, btl.pools());
        self.held.insert(key_of(&desc), desc);
        bytes
    }

    fn answer<B: Btl<Memory = Memory>>(&mut self, btl: &mut B, op: Op, call: &mut In) -> Out {
        let mut out = Out::new();
        match op {
            Op::Attributes => {
                out.put(btl.attributes());
            }
            Op::AddProcs => {
                let procs: Vec<ProcName> = call.take();
                let mut endpoints = vec![None; procs.len()];
                let mut words = vec![0u64; procs.len().div_ceil(64)];
                let mut reachable = Reachability::new(&mut words);
                let result = btl.add_procs(&procs, &mut endpoints, &mut reachable);
                out.put(&result).put(&endpoints).put(&words);
            }
            Op::DelProcs => {
                let endpoints: Vec<EndpointId> = call.take();
                out.put(&btl.del_procs(&endpoints));
            }
            Op::Alloc => {
                let made = btl.alloc(call.take(), call.take(), call.take(), call.take());
                out.put(&self.lend(btl, made));
            }
            Op::Free => {
                let key: u64 = call.take();
                let desc = self.held.remove(&key).expect("a descriptor lent");
                out.put(&btl.free(desc));
            }
            Op::PrepareSrc => {
                let ep = call.take();
                let data: Vec<u8> = call.take();
                let made = btl.prepare_src(ep, &data, call.take(), call.take(), call.take());
                out.put(&self.lend(btl, made));
            }
            Op::PrepareSrcRegistered => {
                let ep = call.take();
                let slice = self.slice(call);
                let made =
                    btl.prepare_src_registered(ep, slice, call.take(), call.take(), call.take());
                out.put(&self.lend(btl, made));
            }
            Op::Send => {
                let (ep, key, tag): (EndpointId, u64, Tag) =
                    (call.take(), call.take(), call.take());
                let mut desc = self.held.remove(&key).expect("a descriptor lent");
                desc.set_flags(call.take());
                let bytes: Vec<u8> = call.take();
                write_back(&mut desc, btl.pools(), &bytes);
                let sent = match btl.send(ep, desc, tag) {
                    Ok(SendStatus::Completed(Some(desc))) => Sent::Back(self.keep(btl, desc)),
                    Ok(SendStatus::Completed(None)) => Sent::Gone,
                    Ok(SendStatus::Queued) => Sent::Queued,
                    Err(SendError { error, desc }) => Sent::Refused(error, self.keep(btl, desc)),
                };
                out.put(&sent);
            }
            Op::Sendi => {
                let ep = call.take();
                let (header, payload): (Vec<u8>, Vec<u8>) = call.take();
                let result =
                    btl.sendi(ep, &header, &payload, call.take(), call.take(), call.take());
                out.put(&result);
            }
            Op::SendCopy => {
                let (ep, tag) = (call.take(), call.take());
                let data: Vec<u8> = call.take();
                out.put(&btl.send_copy(ep, tag, &data));
            }
            Op::Register => {
                let access: Access = call.take();
                let region: Vec<u8> = call.take();
                let shown = region.clone();
                let result = btl
                    .register_mem(region, access)
                    .map(|handle| {
                        let key = handle.remote_key().0;
                        self.handles.insert(key, handle);
                        self.shown.insert(key, shown);
                        key
                    })
                    .map_err(|refused| refused.error);
                out.put(&result);
            }
            Op::Deregister => {
                let key: u64 = call.take();
                let handle = self.handles[&key];
                let result = btl.deregister_mem(handle);
                if result.is_ok() {
                    self.shown.remove(&key);
                }
                out.put(&result);
            }
            Op::Write => {
                let key: u64 = call.take();
                let bytes: Vec<u8> = call.take();
                let region = btl
                    .region_mut(self.handles[&key])
                    .expect("a region the parent wrote");
                region.copy_from_slice(&bytes);
                self.shown.insert(key, bytes);
            }
            Op::Fetch => {
                let mut changed: Vec<(u64, (u64, Vec<u8>))> = Vec::new();
                for (&key, shown) in &mut self.shown {
                    let Ok(region) = btl.region(self.handles[&key]) else {
                        continue;
                    };
                    for (i, (now, was)) in region
                        .chunks(CHUNK)
                        .zip(shown.chunks_mut(CHUNK))
                        .enumerate()
                    {
                        if now != was {
                            was.copy_from_slice(now);
                            changed.push((key, ((i * CHUNK) as u64, now.to_vec())));
                        }
                    }
                }
                out.put(&changed);
            }
            Op::Put | Op::Get => {
                let ep = call.take();
                let local = self.slice(call);
                let (remote, ctx): (RemoteSlice, u64) = (call.take(), call.take());
                let result = if op == Op::Put {
                    btl.put(ep, local, remote, ctx)
                } else {
                    btl.get(ep, local, remote, ctx)
                };
                out.put(&result);
            }
            Op::PutNotify => {
                let ep = call.take();
                let local = self.slice(call);
                let (remote, imm, ctx) = (call.take(), call.take(), call.take());
                out.put(&btl.put_notify(ep, local, remote, imm, ctx));
            }
            Op::Progress => {
                out.put(&btl.progress());
            }
            Op::Poll => {
                let polled = self.poll(btl);
                out.put(&polled);
            }
            Op::Finalize => {
                out.put(&btl.finalize());
            }
            Op::PoolStats => {
                let pools = btl.pools();
                let stats: Vec<PoolStats> =
                    FragmentClass::ALL.iter().map(|&c| pools.stats(c)).collect();
                out.put(&stats);
            }
            Op::Quit => {}
        }
        out
    }

    fn poll<B: Btl<Memory = Memory>>(&mut self, btl: &mut B) -> Option<Polled> {
        let event = match btl.poll_event()? {
            Event::Received(m) => return Some(Polled::Received(m.from, m.tag, m.data.to_vec())),
            event => event,
        };
        Some(match event {
            Event::SendComplete {
                endpoint,
                tag,
                desc,
                result,
            } => {
                let desc = desc.map(|d| (key_of(&d), self.keep(btl, d)));
                Polled::SendComplete(endpoint, tag, desc, result)
            }
            Event::PutComplete { op, ctx, result } => Polled::PutComplete(op, ctx, result),
            Event::GetComplete { op, ctx, result } => Polled::GetComplete(op, ctx, result),
            Event::PutArrived { from, slice, imm } => Polled::PutArrived(
                from,
                (slice.handle.remote_key().0, (slice.offset, slice.len)),
                imm,
            ),
            Event::PeerLeft { endpoint } => Polled::PeerLeft(endpoint),
            Event::Room { endpoint } => Polled::Room(endpoint),
            Event::Error(e) => Polled::Error(e.fatal, e.endpoint, e.error),
            Event::Received(_) => unreachable!("answered above"),
        })
    }
}

/// The parent's face of a module in a child process: a [`Btl`] whose
/// calls each go to the child and wait for its answer.
pub struct RemoteBtl {
    control: UnixStream,
    attributes: Attributes,
    pools: FragmentPools<Pin<Box<[PoolCell]>>>,
    /// Mirrors of the descriptors the suite holds: their key in the child.
    lent: HashMap<u64, u64>,
    /// Mirrors of queued sends the suite is owed back, by the child's key.
    queued: HashMap<u64, Descriptor>,
    regions: Registrations<Memory, Vec<RegSlot<Memory>>>,
    handles: HashMap<u64, MemHandle>,
    /// Regions the suite may have written since the child last had them.
    written: HashSet<MemHandle>,
    /// Whether the child's regions may hold what the parent has not seen.
    stale: bool,
    /// The bytes of the last message polled.
    message: Vec<u8>,
}

impl std::fmt::Debug for RemoteBtl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RemoteBtl")
            .field("attributes", &self.attributes)
            .field("lent", &self.lent.len())
            .field("queued", &self.queued.len())
            .finish_non_exhaustive()
    }
}

impl RemoteBtl {
    /// The module at the other end of `control` (served by [`serve`]),
    /// whose pools are configured as `pools` and whose table holds up to
    /// `registrations` regions.
    pub fn new(control: UnixStream, pools: FragmentPoolsConfig, registrations: usize) -> Self {
        let region = PoolCell::boxed(pools.required_bytes());
        let mut remote = RemoteBtl {
            control,
            attributes: Attributes {
                name: "",
                eager_limit: 0,
                max_send_size: 0,
                rdma_pipeline_send_length: 0,
                rdma_pipeline_frag_size: 0,
                put_limit: 0,
                put_alignment: 1,
                get_limit: 0,
                get_alignment: 1,
                exclusivity: Exclusivity(0),
                latency_us: 0,
                bandwidth_mbps: 0,
                flags: BtlFlags::empty(),
                registration_handle_size: 0,
            },
            pools: FragmentPools::owning(region, pools).expect("the child's pool configuration"),
            lent: HashMap::new(),
            queued: HashMap::new(),
            regions: Registrations::new((0..registrations).map(|_| RegSlot::EMPTY).collect()),
            handles: HashMap::new(),
            written: HashSet::new(),
            stale: false,
            message: Vec::new(),
        };
        remote.attributes = remote.ask(Out::new().put(&Op::Attributes)).take();
        remote
    }

    /// Sends `call` and waits for the answer. The child going away here is
    /// a failure of the test: a killed child is never called.
    fn ask(&mut self, call: &Out) -> In {
        call.send(&mut self.control)
            .expect("the child process takes a call");
        self.stale = true;
        In::receive(&mut self.control).expect("the child process answers")
    }

    /// A call that names `op`, after the regions the suite wrote are sent.
    fn call(&mut self, op: Op) -> Out {
        for handle in std::mem::take(&mut self.written) {
            if let Ok(region) = self.regions.region(handle) {
                let mut write = Out::new();
                write
                    .put(&Op::Write)
                    .put(&handle.remote_key().0)
                    .put(&region.to_vec());
                self.ask(&write);
            }
        }
        let mut out = Out::new();
        out.put(&op);
        out
    }

    /// Says that the child's regions may have changed without its being
    /// asked: a peer's put or get moved bytes there.
    pub fn touched(&mut self) {
        self.stale = true;
    }

    /// Brings the parent's copies of the registered regions up to date,
    /// if anything may have changed them since the last time.
    pub fn refresh(&mut self) {
        if !self.stale {
            return;
        }
        let call = self.call(Op::Fetch);
        let changed: Vec<(u64, (u64, Vec<u8>))> = self.ask(&call).take();
        for (key, (offset, bytes)) in changed {
            let handle = self.handles[&key];
            let region = self
                .regions
                .region_mut(handle)
                .expect("a region the child has");
            region[offset as usize..][..bytes.len()].copy_from_slice(&bytes);
        }
        self.stale = false;
    }

    /// The child's pools, class by class, with what the module took for
    /// itself.
    pub fn pool_stats(&mut self) -> [(FragmentClass, PoolStats); 3] {
        let call = self.call(Op::PoolStats);
        let stats: Vec<PoolStats> = self.ask(&call).take();
        let mut at = stats.into_iter();
        FragmentClass::ALL.map(|c| (c, at.next().expect("every class")))
    }

    /// Tells the child to stop serving.
    pub fn quit(&mut self) {
        let _ = Out::new().put(&Op::Quit).send(&mut self.control);
    }

    /// A put or a get, as `op` says.
    fn rdma(
        &mut self,
        op: Op,
        endpoint: EndpointId,
        local: MemSlice,
        remote: RemoteSlice,
        ctx: u64,
    ) -> Result<OpId, BtlError> {
        let mut call = self.call(op);
        call.put(&endpoint)
            .put(&self.local(local))
            .put(&remote)
            .put(&ctx);
        self.ask(&call).take()
    }

    fn local(&self, slice: MemSlice) -> (u64, (u64, u64)) {
        (slice.handle.remote_key().0, (slice.offset, slice.len))
    }

    /// Mirrors what the child lent.
    fn mirror(
        &mut self,
        lent: Lent,
        order: Order,
        flags: DescFlags,
        data: Mirror<'_>,
    ) -> Descriptor {
        let pools = self.pools.view();
        let made = match data {
            Mirror::Blank => Descriptor::alloc(
                pools,
                lent.headroom,
                lent.reserve,
                lent.inline,
                order,
                flags,
            ),
            Mirror::Copy(data) => {
                Descriptor::prepare_src(pools, lent.headroom, lent.reserve, data, order, flags)
            }
            Mirror::InPlace(slice) => Descriptor::prepare_src_inplace(
                pools,
                lent.headroom,
                lent.reserve,
                slice,
                order,
                flags,
            ),
        };
        let desc = made.expect("the parent's pools hold what the child's lent");
        self.lent.insert(key_of(&desc), lent.key);
        desc
    }

    fn give_back(&mut self, mut desc: Descriptor, bytes: &[u8]) -> Descriptor {
        write_back(&mut desc, self.pools.view(), bytes);
        desc
    }

    fn forget(&mut self, desc: Descriptor) {
        desc.free(self.pools.view())
            .expect("a mirror from the parent's pools");
    }
}

/// How a mirror's payload is made.
enum Mirror<'a> {
    Blank,
    Copy(&'a [u8]),
    InPlace(MemSlice),
}

impl Btl for RemoteBtl {
    type Memory = Memory;

    fn attributes(&self) -> &Attributes {
        &self.attributes
    }

    fn pools(&self) -> PoolsRef<'_> {
        self.pools.view()
    }

    fn add_procs(
        &mut self,
        procs: &[ProcName],
        endpoints: &mut [Option<EndpointId>],
        reachable: &mut Reachability<'_>,
    ) -> Result<(), BtlError> {
        let mut call = self.call(Op::AddProcs);
        call.put(&procs.to_vec());
        let mut answer = self.ask(&call);
        let result: Result<(), BtlError> = answer.take();
        let found: Vec<Option<EndpointId>> = answer.take();
        for (slot, ep) in endpoints.iter_mut().zip(found) {
            *slot = ep;
        }
        let words: Vec<u64> = answer.take();
        for i in 0..procs.len() {
            if words[i / 64] >> (i % 64) & 1 == 1 {
                reachable.set(i);
            }
        }
        result
    }

    fn del_procs(&mut self, endpoints: &[EndpointId]) -> Result<(), BtlError> {
        let mut call = self.call(Op::DelProcs);
        call.put(&endpoints.to_vec());
        self.ask(&call).take()
    }

    fn alloc(
        &mut self,
        endpoint: EndpointId,
        order: Order,
        size: usize,
        flags: DescFlags,
    ) -> Result<Descriptor, BtlError> {
        let mut call = self.call(Op::Alloc);
        call.put(&endpoint).put(&order).put(&size).put(&flags);
        let lent: Lent = self.ask(&call).take::<Result<_, BtlError>>()?;
        Ok(self.mirror(lent, order, flags, Mirror::Blank))
    }

    fn free(&mut self, desc: Descriptor) -> Result<(), BtlError> {
        let key = self
            .lent
            .remove(&key_of(&desc))
            .expect("a descriptor of this module");
        let mut call = self.call(Op::Free);
        call.put(&key);
        let result = self.ask(&call).take();
        self.forget(desc);
        result
    }

    fn prepare_src(
        &mut self,
        endpoint: EndpointId,
        data: &[u8],
        reserve: usize,
        order: Order,
        flags: DescFlags,
    ) -> Result<Descriptor, BtlError> {
        let mut call = self.call(Op::PrepareSrc);
        call.put(&endpoint)
            .put(&data.to_vec())
            .put(&reserve)
            .put(&order)
            .put(&flags);
        let lent: Lent = self.ask(&call).take::<Result<_, BtlError>>()?;
        Ok(self.mirror(lent, order, flags, Mirror::Copy(data)))
    }

    fn prepare_src_registered(
        &mut self,
        endpoint: EndpointId,
        data: MemSlice,
        reserve: usize,
        order: Order,
        flags: DescFlags,
    ) -> Result<Descriptor, BtlError> {
        let mut call = self.call(Op::PrepareSrcRegistered);
        call.put(&endpoint)
            .put(&self.local(data))
            .put(&reserve)
            .put(&order)
            .put(&flags);
        let lent: Lent = self.ask(&call).take::<Result<_, BtlError>>()?;
        if lent.referenced {
            return Ok(self.mirror(lent, order, flags, Mirror::InPlace(data)));
        }
        let copied = self.regions.slice(data).map_err(BtlError::Memory)?.to_vec();
        Ok(self.mirror(lent, order, flags, Mirror::Copy(&copied)))
    }

    fn send(
        &mut self,
        endpoint: EndpointId,
        desc: Descriptor,
        tag: Tag,
    ) -> Result<SendStatus, SendError> {
        let key = self
            .lent
            .remove(&key_of(&desc))
            .expect("a descriptor of this module");
        let bytes = written(&desc, self.pools.view());
        let mut call = self.call(Op::Send);
        call.put(&endpoint)
            .put(&key)
            .put(&tag)
            .put(&desc.flags())
            .put(&bytes);
        match self.ask(&call).take() {
            Sent::Back(bytes) => {
                let desc = self.give_back(desc, &bytes);
                self.lent.insert(key_of(&desc), key);
                Ok(SendStatus::Completed(Some(desc)))
            }
            Sent::Gone => {
                self.forget(desc);
                Ok(SendStatus::Completed(None))
            }
            Sent::Queued => {
                if desc.flags().contains(DescFlags::BTL_OWNERSHIP) {
                    self.forget(desc);
                } else {
                    self.queued.insert(key, desc);
                }
                Ok(SendStatus::Queued)
            }
            Sent::Refused(error, bytes) => {
                let desc = self.give_back(desc, &bytes);
                self.lent.insert(key_of(&desc), key);
                Err(SendError { error, desc })
            }
        }
    }

    fn sendi(
        &mut self,
        endpoint: EndpointId,
        header: &[u8],
        payload: &[u8],
        tag: Tag,
        order: Order,
        flags: DescFlags,
    ) -> Result<(), BtlError> {
        let mut call = self.call(Op::Sendi);
        call.put(&endpoint)
            .put(&(header.to_vec(), payload.to_vec()))
            .put(&tag)
            .put(&order)
            .put(&flags);
        self.ask(&call).take()
    }

    fn send_copy(&mut self, endpoint: EndpointId, tag: Tag, data: &[u8]) -> Result<(), BtlError> {
        let mut call = self.call(Op::SendCopy);
        call.put(&endpoint).put(&tag).put(&data.to_vec());
        self.ask(&call).take()
    }

    fn register_mem(
        &mut self,
        region: Memory,
        access: Access,
    ) -> Result<MemHandle, RegisterError<Memory>> {
        let mut call = self.call(Op::Register);
        call.put(&access).put(&region);
        let key = match self.ask(&call).take::<Result<u64, BtlError>>() {
            Ok(key) => key,
            Err(error) => return Err(RegisterError { error, region }),
        };
        let handle = self
            .regions
            .register(region, access)
            .expect("the parent's table holds what the child's does");
        assert_eq!(
            handle.remote_key().0,
            key,
            "the parent's registrations hand out the child's handles"
        );
        self.handles.insert(key, handle);
        Ok(handle)
    }

    fn deregister_mem(&mut self, handle: MemHandle) -> Result<Memory, BtlError> {
        let mut call = self.call(Op::Deregister);
        call.put(&handle.remote_key().0);
        let region: Memory = self.ask(&call).take::<Result<_, BtlError>>()?;
        self.regions
            .deregister(handle)
            .expect("the parent's table holds what the child's does");
        Ok(region)
    }

    fn region(&self, handle: MemHandle) -> Result<&[u8], BtlError> {
        Ok(self.regions.region(handle)?)
    }

    fn region_mut(&mut self, handle: MemHandle) -> Result<&mut [u8], BtlError> {
        let region = self.regions.region_mut(handle)?;
        self.written.insert(handle);
        Ok(region)
    }

    fn put(
        &mut self,
        endpoint: EndpointId,
        local: MemSlice,
        remote: RemoteSlice,
        ctx: u64,
    ) -> Result<OpId, BtlError> {
        self.rdma(Op::Put, endpoint, local, remote, ctx)
    }

    fn put_notify(
        &mut self,
        endpoint: EndpointId,
        local: MemSlice,
        remote: RemoteSlice,
        imm: u64,
        ctx: u64,
    ) -> Result<OpId, BtlError> {
        let mut call = self.call(Op::PutNotify);
        call.put(&endpoint)
            .put(&self.local(local))
            .put(&remote)
            .put(&imm)
            .put(&ctx);
        self.ask(&call).take()
    }

    fn get(
        &mut self,
        endpoint: EndpointId,
        local: MemSlice,
        remote: RemoteSlice,
        ctx: u64,
    ) -> Result<OpId, BtlError> {
        self.rdma(Op::Get, endpoint, local, remote, ctx)
    }

    fn progress(&mut self) -> usize {
        let call = self.call(Op::Progress);
        self.ask(&call).take()
    }

    fn poll_event(&mut self) -> Option<Event<'_>> {
        let call = self.call(Op::Poll);
        let polled: Option<Polled> = self.ask(&call).take();
        Some(match polled? {
            Polled::Received(from, tag, data) => {
                self.message = data;
                Event::Received(Incoming {
                    from,
                    tag,
                    data: &self.message,
                })
            }
            Polled::SendComplete(endpoint, tag, desc, result) => {
                let desc = desc.map(|(key, bytes)| {
                    let mirror = self
                        .queued
                        .remove(&key)
                        .expect("a queued send the suite is owed back");
                    let desc = self.give_back(mirror, &bytes);
                    self.lent.insert(key_of(&desc), key);
                    desc
                });
                Event::SendComplete {
                    endpoint,
                    tag,
                    desc,
                    result,
                }
            }
            Polled::PutComplete(op, ctx, result) => Event::PutComplete { op, ctx, result },
            Polled::GetComplete(op, ctx, result) => Event::GetComplete { op, ctx, result },
            Polled::PutArrived(from, (key, (offset, len)), imm) => Event::PutArrived {
                from,
                slice: self.handles[&key].slice(offset, len),
                imm,
            },
            Polled::PeerLeft(endpoint) => Event::PeerLeft { endpoint },
            Polled::Room(endpoint) => Event::Room { endpoint },
            Polled::Error(fatal, endpoint, error) => Event::Error(ErrorEvent {
                fatal,
                endpoint,
                error,
            }),
        })
    }

    fn finalize(&mut self) -> Undelivered {
        let call = self.call(Op::Finalize);
        self.ask(&call).take()
    }
}
