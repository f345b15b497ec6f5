//! The loopback (`self`) BTL as a world: A and B are one process and one
//! BTL, built by the `self` component from its default parameters.

use std::pin::Pin;

use btl_core::btl::Btl;
use btl_core::endpoint::{EndpointId, ProcName, Reachability};
use btl_core::loopback::{Loopback, SENDI_MAX, SelfComponent};
use btl_core::mca::{Component, Registry};
use btl_core::pool::PoolCell;

use crate::world::{Capabilities, Memory, Side, World};
use btl_std::driver::heap::Heap;

/// Registrations the harness's loopback holds: more than any suite keeps at once.
pub const REGS: usize = 16;

/// Undelivered events the harness's loopback holds. Smaller than each pool's
/// default capacity (64), so that a stalled receiver meets the queue bound.
pub const QUEUE: usize = 32;

/// The loopback module the harness runs.
pub type SelfBtl = Loopback<Pin<Box<[PoolCell]>>, Memory, REGS, QUEUE>;

/// A and B as the one loopback of one process.
pub struct LoopbackWorld {
    btl: SelfBtl,
    me: EndpointId,
}

impl LoopbackWorld {
    /// Builds the loopback the way a driver does: the `self` component
    /// registers its parameters, `init` yields the setup, and the module's
    /// pools are carved from a region of their own.
    pub fn new() -> Self {
        let mut params = Registry::<16>::new();
        let mut component = SelfComponent::default();
        component.register(&mut params).expect("self parameters");
        let setup = component
            .init(&params)
            .expect("self is always available")
            .pop()
            .expect("one module");
        let me = ProcName::new(0x5e1f, 0);
        let mut btl: SelfBtl = setup
            .build(Heap::<Memory>::region(setup.required_bytes()), me)
            .expect("self pools");
        let mut endpoint = [None];
        let mut words = [0u64];
        btl.add_procs(&[me], &mut endpoint, &mut Reachability::new(&mut words))
            .expect("add_procs");
        let me = endpoint[0].expect("the loopback reaches its own process");
        LoopbackWorld { btl, me }
    }
}

impl Default for LoopbackWorld {
    fn default() -> Self {
        Self::new()
    }
}

impl World for LoopbackWorld {
    fn capabilities(&self) -> Capabilities {
        Capabilities {
            same_btl: true,
            max_rounds: 1000,
            linger_rounds: 1,
            max_rdma_len: 64 << 20,
            sendi_max: SENDI_MAX,
            pause: false,
            peer_loss: false,
            handshake: false,
            garbage: false,
        }
    }

    fn btl(&mut self, _side: Side) -> &mut dyn Btl<Memory = Memory> {
        &mut self.btl
    }

    fn peer(&self, _side: Side) -> EndpointId {
        self.me
    }

    fn progress(&mut self) {
        self.btl.progress();
    }
}
