//! The engine of a socket module together with the memory its fragment
//! pools are carved from: the core borrows its pool region and never
//! allocates, so the module owns both, and the region lives exactly as
//! long as the engine that borrows it.

use btl_core::engine::Engine;
use btl_core::engine::config::EngineConfig;
use btl_core::pool::{FragmentPools, FragmentPoolsConfig, PoolError};
use btl_core::time::Instant;

/// Peers one socket module reaches at most.
pub const MAX_PEERS: usize = 64;
/// Connections one socket module holds at once: two per peer, or more for
/// fewer peers.
pub const MAX_LINKS: usize = 128;
/// Memory registrations one socket module holds at once.
pub const MAX_REGS: usize = 64;

/// The engine of a socket module, borrowing its pool region for `'a`.
/// Registered memory is lent for `'static` (leaked or static buffers; a
/// registration hands its region back on `deregister_mem`).
pub type StdEngine<'a> = Engine<'a, 'static, MAX_PEERS, MAX_LINKS, MAX_REGS>;

/// Stack for building an engine: its fixed storage (a few MiB with the
/// bounds above) is a value, and an unoptimised build copies a value
/// through the stack more than once on its way into a box.
const BUILD_STACK: usize = 64 << 20;

/// A pool region and the engine built on it.
#[ouroboros::self_referencing]
pub struct EngineCell {
    region: Box<[u8]>,
    #[borrows(mut region)]
    #[not_covariant]
    engine: Box<StdEngine<'this>>,
}

impl EngineCell {
    /// An engine with `config`, its pools laid out as `pools` in a region
    /// of their own. It is built on a thread of its own with a stack large
    /// enough for it (64 MiB); the cell that comes back holds
    /// it in a box.
    pub fn build(
        config: EngineConfig,
        pools: FragmentPoolsConfig,
        now: Instant,
    ) -> std::io::Result<Self> {
        let region = vec![0u8; FragmentPools::required_bytes(&pools)].into_boxed_slice();
        let build = move || {
            EngineCellTryBuilder {
                region,
                engine_builder: |region: &mut Box<[u8]>| {
                    Ok(Box::new(Engine::new(
                        config,
                        FragmentPools::new(region, pools)?,
                        now,
                    )))
                },
            }
            .try_build()
            .map_err(|e: PoolError| std::io::Error::other(format!("fragment pools: {e:?}")))
        };
        std::thread::scope(|scope| {
            std::thread::Builder::new()
                .name("btl-engine-build".into())
                .stack_size(BUILD_STACK)
                .spawn_scoped(scope, build)?
                .join()
                .unwrap_or_else(|_| Err(std::io::Error::other("building the engine panicked")))
        })
    }

    /// Runs `f` on the engine; what it returns may borrow the engine for
    /// as long as the cell is borrowed.
    pub fn engine<'s, R>(&'s self, f: impl for<'a> FnOnce(&'s StdEngine<'a>) -> R) -> R {
        self.with_engine(|e| f(e))
    }

    /// Runs `f` on the engine, mutably.
    pub fn engine_mut<'s, R>(
        &'s mut self,
        f: impl for<'a> FnOnce(&'s mut StdEngine<'a>) -> R,
    ) -> R {
        self.with_engine_mut(|e| f(e))
    }
}
