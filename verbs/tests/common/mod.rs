//! What the verbs module tests share: a small module on a soft device.

use std::sync::Arc;
use std::time::Duration;

use btl_core::engine::config::EngineConfig;
use btl_core::engine::{Capacities, HEADER_RESERVE};
use btl_core::pool::{FragmentPoolConfig, FragmentPoolsConfig};
use btl_std::bootstrap::Bootstrap;
use btl_std::driver::directory::Directory;
use btl_std::driver::heap::Buffer;
use btl_std::driver::module::Module;
use btl_std::driver::net::{Net, Os};
use btl_verbs::cpc::OobConfig;
use btl_verbs::module::{Verbs, VerbsSetup};
use btl_verbs::soft::{SoftFabric, SoftHca};
use btl_verbs::transport::VerbsConfig;

/// Small pools: 32 fragments of 256 B, 4 KiB and 64 KiB payload.
fn pools() -> FragmentPoolsConfig {
    let class = |payload: usize| FragmentPoolConfig {
        fragment_size: payload + HEADER_RESERVE,
        num: 32,
        max: 32,
        inc: 8,
    };
    FragmentPoolsConfig {
        small: class(256),
        eager: class(4096),
        max: class(64 << 10),
    }
}

/// A verbs module of the engine `config` on `fabric`'s device `soft0`,
/// room for 4 peers, its side channel on the loopback, its card
/// published through `bootstrap`.
pub fn soft_module<M: Buffer>(
    fabric: &SoftFabric,
    config: EngineConfig,
    bootstrap: Arc<dyn Bootstrap>,
) -> std::io::Result<Module<Verbs<SoftHca, Os>, M>> {
    let me = config.me;
    let setup = VerbsSetup {
        config: VerbsConfig {
            max_peers: 4,
            recv_buffers: 8,
            send_buffers: 8,
            buffer_size: 8 << 10,
            rdma_depth: 8,
            ..VerbsConfig::default()
        },
        oob: OobConfig::default(),
        side: ("127.0.0.1:0".parse().expect("an address"), 8),
        lookup_timeout: Duration::from_secs(5),
    };
    let hca = fabric.open("soft0").map_err(std::io::Error::other)?;
    Module::open(
        "verbs",
        config,
        pools(),
        Capacities {
            peers: 4,
            links: 8,
            ..Capacities::SOCKET_MODULE
        },
        Duration::from_millis(1),
        Os,
        Directory::new(me, "verbs", bootstrap, setup.lookup_timeout),
        move |net, registry, directory| {
            let nonces = Box::new(|| Os.random());
            Verbs::start(me, setup, hca, directory.bootstrap(), net, registry, nonces)
        },
    )
}
