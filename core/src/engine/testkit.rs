//! What the unit tests of the engine's state machines share: storage on
//! the test's heap, the resources a peer draws on, and instants, links and
//! peers named by small numbers.

use std::boxed::Box;
use std::pin::Pin;
use std::vec::Vec;

use super::config::EngineConfig;
use super::events::{Events, Pending};
use super::framing::Framing;
use super::ops::Ops;
use super::peer::{Hello, Opened};
use super::shared::Shared;
use super::storage::Storage;
use super::tables::Tables;
use super::{Engine, LinkId, rtt::RttConfig};
use crate::btl::{BtlError, Completion, RegSlot, Registrations, Tag};
use crate::desc::{DescFlags, Descriptor, Order};
use crate::endpoint::{EndpointId, ProcName};
use crate::pool::{FragmentPoolConfig, FragmentPools, FragmentPoolsConfig, PoolCell};
use crate::table::Key;
use crate::time::{Duration, Instant};

/// Tables in boxes, memory in vectors, the pools' region a pinned box.
pub(crate) struct Boxed;

impl Storage for Boxed {
    type Table<T: 'static> = Box<[T]>;
    type Memory = Vec<u8>;
    type Registrations = Box<[RegSlot<Vec<u8>>]>;
    type Region = Pin<Box<[PoolCell]>>;
    type Journal = Tape;
}

/// A journal the tests read back: every entry's bytes, once turned on.
#[derive(Debug, Default)]
pub(crate) struct Tape(pub(crate) Option<Vec<u8>>);

impl super::journal::Journal for Tape {
    fn is_on(&self) -> bool {
        self.0.is_some()
    }

    fn call(&mut self, call: &super::journal::Call<'_>) {
        if let Some(bytes) = &mut self.0 {
            bytes.extend_from_slice(&call.to_vec());
        }
    }

    fn out(&mut self, digest: u64) {
        if let Some(bytes) = &mut self.0 {
            bytes.extend_from_slice(&digest.to_le_bytes());
        }
    }
}

/// `n` empty slots.
pub(crate) fn slots<T: Default>(n: usize) -> Box<[T]> {
    std::iter::repeat_with(T::default).take(n).collect()
}

/// The process the tests' engine is.
pub(crate) const ME: ProcName = ProcName::new(1, 0);

/// The process its peer is.
pub(crate) const PEER: ProcName = ProcName::new(1, 1);

/// A configuration with round timers: peer timeout 1 s, keepalive 100 ms,
/// handshake 500 ms, refusals given up after 250 ms, 4 credits.
pub(crate) fn config() -> EngineConfig {
    EngineConfig {
        peer_timeout: Duration::from_secs(1),
        keepalive: Duration::from_millis(100),
        handshake_timeout: Duration::from_millis(500),
        refused_timeout: Duration::from_millis(250),
        initial_credits: 4,
        rtt: RttConfig {
            initial_rto: Duration::from_millis(10),
            min_rto: Duration::from_millis(10),
            max_rto: Duration::from_millis(80),
        },
        ..EngineConfig::new(ME)
    }
}

/// The resources of an engine with `config`: small pools (16 fragments
/// of 256 B, 8 of 4 KiB, 4 of 64 KiB), 8 operations, 32 events and 4
/// registrations.
pub(crate) fn shared(config: EngineConfig) -> Shared<Boxed> {
    let class = |fragment_size, max| FragmentPoolConfig {
        fragment_size,
        num: max,
        max,
        inc: 1,
    };
    let pools = FragmentPoolsConfig {
        small: class(256, 16),
        eager: class(4096, 8),
        max: class(65536, 4),
    };
    let region: Box<[PoolCell]> = slots(pools.required_bytes());
    Shared {
        config,
        pools: FragmentPools::owning(Box::into_pin(region), pools).expect("pools"),
        regs: Registrations::new(slots(4)),
        ops: Ops::new(slots(8)),
        events: Events::new(slots(32)),
        peers: 1,
        now: Instant::ZERO,
        unclean_losses: (0, None),
    }
}

/// Link number `n`.
pub(crate) fn link(n: u16) -> LinkId {
    LinkId(Key {
        index: n,
        generation: 0,
    })
}

/// Endpoint number `n`.
pub(crate) fn endpoint(n: u32) -> EndpointId {
    EndpointId(n)
}

/// What the peer's HELLO says: start `epoch`, `credits` to start with.
pub(crate) fn hello(epoch: u64, credits: u32) -> Hello {
    Hello {
        epoch,
        max_body: 1 << 20,
        initial_credits: credits,
        trailers: Default::default(),
        notices: true,
        keys: true,
    }
}

/// Link `n`, handshaken as the peer's link `index`.
pub(crate) fn opened(index: u8, n: u16, outbound: bool, hello: Hello) -> Opened {
    Opened {
        index,
        link: link(n),
        hello,
        outbound,
        replaced: false,
    }
}

/// A message of `len` bytes tagged `tag` whose completion is owed: its
/// event's place is kept, as the engine does when it takes a send.
pub(crate) fn message(shared: &mut Shared<Boxed>, len: usize, tag: u8) -> Descriptor {
    let mut desc = Descriptor::alloc(
        shared.pools(),
        super::HEADER_RESERVE as u16,
        0,
        len,
        Order::ANY,
        DescFlags::empty(),
    )
    .expect("a fragment");
    desc.set_tag(Tag(tag));
    assert!(shared.events.owe(), "room for its completion");
    desc
}

/// An event as a test checks it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Seen {
    /// A message arrived, tagged so.
    Received(u8),
    /// A send tagged so ended so.
    Sent(u8, Result<(), BtlError>),
    /// An error event.
    Error(BtlError),
    /// A peer left.
    Left,
    /// A put or get ended so.
    Op(Result<(), BtlError>),
    /// A peer's put landed, with this value.
    Arrived(u64),
}

/// The events queued so far, oldest first; their fragments and
/// descriptors go back to the pools.
pub(crate) fn drain_events(shared: &mut Shared<Boxed>) -> Vec<Seen> {
    let mut out = Vec::new();
    while let Some(event) = shared.events.pop() {
        out.push(match event {
            Pending::Received { frag, tag, .. } => {
                let _ = shared.pools().free(frag);
                Seen::Received(tag.0)
            }
            Pending::Done(Completion::Send {
                tag, desc, result, ..
            }) => {
                if let Some(d) = desc {
                    let _ = d.free(shared.pools());
                }
                Seen::Sent(tag.0, result)
            }
            Pending::Done(Completion::Error(e)) => Seen::Error(e.error),
            Pending::Done(Completion::PeerLeft { .. }) => Seen::Left,
            Pending::Done(Completion::Put { result, .. } | Completion::Get { result, .. }) => {
                Seen::Op(result)
            }
            Pending::Done(Completion::PutArrived { imm, .. }) => Seen::Arrived(imm),
            Pending::Done(Completion::Room { .. }) => {
                unreachable!("Room is made when polled, never queued")
            }
        });
    }
    out
}

/// An engine with `config` framed as `framing`, with the pools of
/// [`shared`] and room for 4 peers, 8 links, 8 operations, 32 events and
/// 4 registrations; started at time zero.
pub(crate) fn engine<F: Framing>(config: EngineConfig, framing: F) -> Engine<Boxed, F, 8> {
    let Shared { pools, .. } = shared(config.clone());
    let tables = Tables {
        peers: slots(4),
        peer_order: slots(4),
        peer_schedule: slots(4),
        links: slots(8),
        link_order: slots(8),
        link_schedule: slots(8),
        ops: slots(8),
        events: slots(32),
        forgotten: slots(4),
        registrations: slots(4),
        journal: Tape::default(),
    };
    Engine::new(config, framing, tables, pools, Instant::ZERO)
}
