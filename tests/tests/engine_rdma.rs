//! Puts and gets that a driver's device carries out itself (RDMA), over
//! the in-memory stream pair: the pair's driver carries the engines'
//! packets, and a device of the test's own writes and reads the other
//! side's registered memory when an engine hands it a transfer
//! (`poll_rdma`), as an RDMA NIC would. The engines ask each other what a
//! key names (KEY, KEY_INFO), check each transfer as its target would,
//! and hand the device only what passes.

use btl_core::btl::{
    Access, Btl, BtlError, MemError, MemHandle, RejectCode, RemoteKey, RemoteSlice,
};
use btl_core::endpoint::{EndpointId, ProcName};
use btl_core::engine::{Rdma, RdmaFailure, RdmaKind};
use btl_core::time::Duration;
use btl_core::wire::DeviceKey;
use btl_tests::pair::Side;
use btl_tests::pair::stream::StreamPair;

mod common;
use common::{E, drain, engine};

const A: ProcName = ProcName::new(8, 0);
const B: ProcName = ProcName::new(8, 1);

type Pair = StreamPair<E, 4096, 4, Box<E>>;

/// The device's address of each region's first byte.
const BASE: u64 = 0x7000_0000;

/// Both sides' devices: the regions they hold, and what they did.
#[derive(Default)]
struct Device {
    /// Side, device key, handle.
    regions: Vec<(Side, u64, MemHandle)>,
    next_key: u64,
    writes: u32,
    reads: u32,
    /// Transfers taken and held back, not carried out, while `hold`.
    held: Vec<(Side, Rdma)>,
    hold: bool,
    /// Declines every transfer (too large for its queues, say).
    decline: bool,
}

impl Device {
    /// Registers `region` at `side` with the engine and with the device.
    fn register(&mut self, pair: &mut Pair, side: Side, len: usize, access: Access) -> MemHandle {
        let region: Vec<u8> = (0..len).map(|i| (i * 7 + side.index()) as u8).collect();
        let e = pair.engine_mut(side);
        let h = e.register_mem(region, access).expect("room");
        self.next_key += 1;
        let key = 0x100 + self.next_key;
        e.set_device_key(h, Some(DeviceKey { key, base: BASE }))
            .expect("registered");
        self.regions.push((side, key, h));
        h
    }

    /// Takes `h` from the device, then from the engine, as a driver must
    /// (the engine refuses while the device holds it).
    fn deregister(&mut self, pair: &mut Pair, side: Side, h: MemHandle) -> Vec<u8> {
        let e = pair.engine_mut(side);
        assert_eq!(
            e.deregister_mem(h).err(),
            Some(BtlError::Memory(MemError::InUse)),
            "the device holds it"
        );
        self.regions.retain(|&(s, _, r)| !(s == side && r == h));
        e.set_device_key(h, None).expect("registered");
        e.deregister_mem(h).expect("registered")
    }

    /// Takes what each engine hands its device on its link and carries it
    /// out (or holds it); whether anything was handed.
    fn serve(&mut self, pair: &mut Pair) -> bool {
        let mut any = false;
        for side in Side::BOTH {
            let Some(link) = pair.link(side) else {
                continue;
            };
            while let Some(r) = pair.engine_mut(side).poll_rdma(link) {
                any = true;
                if self.decline {
                    pair.engine_mut(side)
                        .handle_rdma(r.token, Err(RdmaFailure::Declined));
                } else if self.hold {
                    self.held.push((side, r));
                } else {
                    self.carry_out(pair, side, r);
                }
            }
        }
        any
    }

    /// Writes or reads the other side's region as the transfer says; a
    /// key the other side's device does not hold, or a range outside its
    /// region, is refused, as an HCA refuses it.
    fn carry_out(&mut self, pair: &mut Pair, side: Side, r: Rdma) {
        let target = self
            .regions
            .iter()
            .find(|&&(s, k, _)| s == side.other() && k == r.remote_key)
            .map(|&(_, _, h)| h);
        let (a, b) = pair.engines_mut();
        let (mine, theirs) = match side {
            Side::A => (a, b),
            Side::B => (b, a),
        };
        let len = r.local.len as usize;
        let local = r.local.offset as usize..r.local.offset as usize + len;
        let at = r.remote_addr.checked_sub(BASE).map(|o| o as usize);
        let result = match (target, at) {
            (Some(h), Some(at)) if theirs.region(h).is_ok_and(|reg| at + len <= reg.len()) => {
                match r.kind {
                    RdmaKind::Write => {
                        self.writes += 1;
                        let data = mine.region(r.local.handle).expect("local")[local].to_vec();
                        theirs.region_mut(h).expect("checked")[at..at + len].copy_from_slice(&data);
                    }
                    RdmaKind::Read => {
                        self.reads += 1;
                        let data = theirs.region(h).expect("checked")[at..at + len].to_vec();
                        mine.region_mut(r.local.handle).expect("local")[local]
                            .copy_from_slice(&data);
                    }
                }
                Ok(())
            }
            _ => Err(RdmaFailure::KeyRefused),
        };
        mine.handle_rdma(r.token, result);
    }
}

fn new_pair() -> (Pair, EndpointId, Device) {
    let mut pair = Pair::new(
        Box::new(engine(A, None, 16)),
        Box::new(engine(B, None, 16)),
        [A, B],
        0xd0d0,
    );
    let [ep_b, _] = pair.introduce().expect("each reaches the other");
    (pair, ep_b, Device::default())
}

/// Plays the driver and the devices until nothing moves (bounded), and
/// then for a while longer, for acknowledgements that wait.
fn pump(pair: &mut Pair, dev: &mut Device) {
    for _ in 0..1000 {
        pair.run_until_idle(10_000)
            .expect("the pair never went quiet");
        let handed = dev.serve(pair);
        // Past the acknowledgement delay.
        pair.advance(Duration::from_micros(100));
        pair.run_until_idle(10_000)
            .expect("the pair never went quiet");
        if !handed && !dev.serve(pair) {
            return;
        }
    }
    panic!("the devices never went quiet");
}

fn remote(h: MemHandle, offset: u64, len: u64) -> RemoteSlice {
    h.remote_key().slice(offset, len)
}

#[test]
fn puts_and_gets_go_by_the_device_after_the_targets_checks() {
    let (mut pair, ep_b, mut dev) = new_pair();
    let src = dev.register(&mut pair, Side::A, 4096, Access::empty());
    let dst = dev.register(&mut pair, Side::B, 8192, Access::REMOTE_WRITE);
    let readable = dev.register(&mut pair, Side::B, 1024, Access::REMOTE_READ);
    pump(&mut pair, &mut dev);

    pair.a()
        .put(ep_b, src.slice(0, 4096), remote(dst, 1000, 4096), 1)
        .expect("taken");
    pump(&mut pair, &mut dev);
    assert_eq!(drain(pair.a()), ["put 1 Ok(())"]);
    assert_eq!((dev.writes, dev.reads), (1, 0), "one RDMA write");
    let sent = pair.a().region(src).expect("src").to_vec();
    assert_eq!(&pair.b().region(dst).expect("dst")[1000..5096], &sent[..]);

    pair.a()
        .get(ep_b, src.slice(100, 1000), remote(readable, 24, 1000), 2)
        .expect("taken");
    pump(&mut pair, &mut dev);
    assert_eq!(drain(pair.a()), ["get 2 Ok(())"]);
    assert_eq!((dev.writes, dev.reads), (1, 1), "one RDMA read");
    let read = pair.b().region(readable).expect("readable")[24..1024].to_vec();
    assert_eq!(&pair.a().region(src).expect("src")[100..1100], &read[..]);

    // Refused here, with the target's codes, before the device is asked.
    let refusals = [
        (remote(dst, 8000, 4096), true, RejectCode::OutOfBounds),
        (remote(readable, 0, 16), true, RejectCode::AccessDenied),
        (remote(dst, 0, 16), false, RejectCode::AccessDenied),
        (
            RemoteKey(0xdead_0001).slice(0, 16),
            true,
            RejectCode::BadHandle,
        ),
    ];
    for (i, (to, put, code)) in refusals.into_iter().enumerate() {
        let local = src.slice(0, to.len);
        let ctx = 10 + i as u64;
        if put {
            pair.a().put(ep_b, local, to, ctx).expect("taken");
        } else {
            pair.a().get(ep_b, local, to, ctx).expect("taken");
        }
        pump(&mut pair, &mut dev);
        let kind = if put { "put" } else { "get" };
        assert_eq!(
            drain(pair.a()),
            [format!("{kind} {ctx} Err({:?})", BtlError::Rejected(code))]
        );
    }
    assert_eq!(
        (dev.writes, dev.reads),
        (1, 1),
        "none of them reached the device"
    );
    assert!(drain(pair.b()).is_empty(), "the target heard of none of it");
}

#[test]
fn a_notice_follows_the_data_the_device_wrote() {
    let (mut pair, ep_b, mut dev) = new_pair();
    let src = dev.register(&mut pair, Side::A, 2048, Access::empty());
    let dst = dev.register(&mut pair, Side::B, 2048, Access::REMOTE_WRITE);
    pump(&mut pair, &mut dev);
    pair.a()
        .put_notify(ep_b, src.slice(0, 2048), remote(dst, 0, 2048), 0xfeed, 3)
        .expect("taken");
    pump(&mut pair, &mut dev);
    assert_eq!(dev.writes, 1);
    assert_eq!(drain(pair.b()), ["arrived 65261 2048"]);
    assert_eq!(drain(pair.a()), ["put 3 Ok(())"]);
    let sent = pair.a().region(src).expect("src").to_vec();
    assert_eq!(pair.b().region(dst).expect("dst"), &sent[..]);
}

#[test]
fn a_stale_key_fails_with_bad_handle_and_never_reaches_the_new_region() {
    let (mut pair, ep_b, mut dev) = new_pair();
    let src = dev.register(&mut pair, Side::A, 512, Access::empty());
    let old = dev.register(&mut pair, Side::B, 512, Access::REMOTE_WRITE);
    pump(&mut pair, &mut dev);
    pair.a()
        .put(ep_b, src.slice(0, 512), remote(old, 0, 512), 1)
        .expect("taken");
    pump(&mut pair, &mut dev);
    assert_eq!(drain(pair.a()), ["put 1 Ok(())"]);

    // B's region goes, and another takes its place (the same slot).
    dev.deregister(&mut pair, Side::B, old);
    let new = dev.register(&mut pair, Side::B, 512, Access::REMOTE_WRITE);
    let before = pair.b().region(new).expect("new").to_vec();

    // A still knows the old key: the device refuses it.
    pair.a()
        .put(ep_b, src.slice(0, 512), remote(old, 0, 512), 2)
        .expect("taken");
    pump(&mut pair, &mut dev);
    assert_eq!(
        drain(pair.a()),
        [format!(
            "put 2 Err({:?})",
            BtlError::Rejected(RejectCode::BadHandle)
        )]
    );
    // Forgotten: the next transfer with it asks B, which refuses it.
    pair.a()
        .put(ep_b, src.slice(0, 512), remote(old, 0, 512), 3)
        .expect("taken");
    pump(&mut pair, &mut dev);
    assert_eq!(
        drain(pair.a()),
        [format!(
            "put 3 Err({:?})",
            BtlError::Rejected(RejectCode::BadHandle)
        )]
    );
    assert_eq!(dev.writes, 1, "only the first put was written");
    assert_eq!(pair.b().region(new).expect("new"), &before[..]);

    pair.a()
        .put(ep_b, src.slice(0, 512), remote(new, 0, 512), 4)
        .expect("taken");
    pump(&mut pair, &mut dev);
    assert_eq!(drain(pair.a()), ["put 4 Ok(())"]);
    assert_eq!(dev.writes, 2);
}

#[test]
fn a_transfer_whose_link_breaks_goes_again_and_ends_once() {
    let (mut pair, ep_b, mut dev) = new_pair();
    let src = dev.register(&mut pair, Side::A, 1024, Access::empty());
    let dst = dev.register(&mut pair, Side::B, 1024, Access::REMOTE_WRITE);
    pump(&mut pair, &mut dev);
    dev.hold = true;
    pair.a()
        .put(ep_b, src.slice(0, 1024), remote(dst, 0, 1024), 1)
        .expect("taken");
    pump(&mut pair, &mut dev);
    assert_eq!(dev.held.len(), 1, "handed to the device");
    assert!(drain(pair.a()).is_empty());

    let conn = pair.established().expect("a connection").id;
    pair.break_connection(conn).expect("known");
    dev.hold = false;
    pump(&mut pair, &mut dev);
    assert_eq!(dev.writes, 1, "handed out again on the new link");
    assert_eq!(drain(pair.a()), ["put 1 Ok(())"]);

    // The first hand-out's report, late: nothing changes.
    let (_, stale) = dev.held.pop().expect("held");
    pair.a().handle_rdma(stale.token, Ok(()));
    pair.a()
        .handle_rdma(stale.token, Err(RdmaFailure::KeyRefused));
    pump(&mut pair, &mut dev);
    assert!(drain(pair.a()).is_empty(), "it ended once");
    let sent = pair.a().region(src).expect("src").to_vec();
    assert_eq!(pair.b().region(dst).expect("dst"), &sent[..]);
}

#[test]
fn memory_the_device_has_not_got_goes_in_packets() {
    let (mut pair, ep_b, mut dev) = new_pair();
    // A's region is the engine's only; B's is the device's too.
    let src = pair
        .a()
        .register_mem(vec![9u8; 3000], Access::REMOTE_READ)
        .expect("room");
    let dst = dev.register(
        &mut pair,
        Side::B,
        3000,
        Access::REMOTE_WRITE | Access::REMOTE_READ,
    );
    pump(&mut pair, &mut dev);
    // Disjoint ranges: a get of bytes a put is writing races with it.
    pair.a()
        .put(ep_b, src.slice(0, 2000), remote(dst, 0, 2000), 1)
        .expect("taken");
    pair.a()
        .get(ep_b, src.slice(2900, 100), remote(dst, 2900, 100), 2)
        .expect("taken");
    pump(&mut pair, &mut dev);
    let mut seen = drain(pair.a());
    seen.sort();
    assert_eq!(seen, ["get 2 Ok(())", "put 1 Ok(())"]);
    assert_eq!((dev.writes, dev.reads), (0, 0));
    assert_eq!(
        &pair.b().region(dst).expect("dst")[..2000],
        &[9u8; 2000][..]
    );
    let read = pair.b().region(dst).expect("dst")[2900..].to_vec();
    assert_eq!(&pair.a().region(src).expect("src")[2900..], &read[..]);
}

#[test]
fn a_transfer_the_device_declines_goes_in_packets() {
    let (mut pair, ep_b, mut dev) = new_pair();
    let src = dev.register(&mut pair, Side::A, 5000, Access::empty());
    let dst = dev.register(
        &mut pair,
        Side::B,
        5000,
        Access::REMOTE_WRITE | Access::REMOTE_READ,
    );
    pump(&mut pair, &mut dev);
    dev.decline = true;
    pair.a()
        .put(ep_b, src.slice(0, 4000), remote(dst, 0, 4000), 1)
        .expect("taken");
    pair.a()
        .get(ep_b, src.slice(4500, 500), remote(dst, 4500, 500), 2)
        .expect("taken");
    pump(&mut pair, &mut dev);
    let mut seen = drain(pair.a());
    seen.sort();
    assert_eq!(seen, ["get 2 Ok(())", "put 1 Ok(())"]);
    assert_eq!((dev.writes, dev.reads), (0, 0));
    let (a, b) = pair.engines_mut();
    let (sent, landed) = (a.region(src).expect("src"), b.region(dst).expect("dst"));
    assert_eq!(&landed[..4000], &sent[..4000]);
    assert_eq!(&sent[4500..], &landed[4500..]);
}
