//! The bytes of engine state for three engines: a 2-peer firmware (its
//! tables lent from a static, as `Inline` holds them), the default TCP
//! module, and a 1,024-peer server. The engine value, the tables it is
//! lent, and its fragment pools, which are sized separately.
//!
//! Run it with `cargo run -p btl-std --example footprint`.

use btl_core::engine::{Capacities, Engine, HEADER_RESERVE, Lent, Stream};
use btl_core::mca::{Component, Params};
use btl_core::pool::{FragmentPoolConfig, FragmentPoolsConfig};
use btl_std::ParamRegistry;
use btl_std::driver::heap::HeapEngine;
use btl_std::transports::tcp::TcpComponent;

fn main() {
    let tcp_pools = default_tcp_pools();
    let firmware_pools = {
        let class = |fragment_size, max| FragmentPoolConfig {
            fragment_size,
            num: max,
            max,
            inc: 1,
        };
        FragmentPoolsConfig {
            small: class(256, 8),
            eager: class(1024 + HEADER_RESERVE, 4),
            max: class(4096 + HEADER_RESERVE, 2),
        }
    };
    let firmware = Capacities {
        peers: 2,
        links: 2,
        ops: 4,
        events: 16,
        registrations: 4,
    };
    let server = Capacities {
        peers: 1024,
        links: 2048,
        ops: 256,
        events: 4096,
        registrations: 256,
    };
    println!(
        "| engine | peers | links | window | ops | events | registrations | engine value | tables | pools |"
    );
    println!("|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|");
    row(
        "2-peer firmware",
        firmware,
        8,
        size_of::<Engine<Lent<'static>, Stream, 8>>(),
        firmware.table_bytes::<8, &'static mut [u8]>(),
        firmware_pools.required_bytes(),
    );
    let module = Capacities::SOCKET_MODULE;
    let heap_engine = size_of::<HeapEngine<Stream>>();
    row(
        "default TCP module",
        module,
        64,
        heap_engine,
        module.table_bytes::<64, Vec<u8>>(),
        tcp_pools.required_bytes(),
    );
    row(
        "1,024-peer server",
        server,
        64,
        heap_engine,
        server.table_bytes::<64, Vec<u8>>(),
        tcp_pools.required_bytes(),
    );
    println!();
    println!(
        "per slot, window 64: peer {} B, link {} B, operation {} B, event {} B; window 8: peer {} B, link {} B",
        size_of::<btl_core::endpoint::EndpointSlot<btl_core::engine::peer::Peer<64>>>(),
        size_of::<btl_core::table::Entry<btl_core::engine::link::Link<64>>>(),
        size_of::<btl_core::engine::OpSlot>(),
        size_of::<btl_core::engine::EventSlot>(),
        size_of::<btl_core::endpoint::EndpointSlot<btl_core::engine::peer::Peer<8>>>(),
        size_of::<btl_core::table::Entry<btl_core::engine::link::Link<8>>>(),
    );
}

fn row(name: &str, c: Capacities, window: usize, value: usize, tables: usize, pools: usize) {
    let kib = |b: usize| format!("{:.1} KiB", b as f64 / 1024.0);
    println!(
        "| {name} | {} | {} | {window} | {} | {} | {} | {value} B | {} | {} |",
        c.peers,
        c.links,
        c.ops,
        c.events,
        c.registrations,
        kib(tables),
        kib(pools)
    );
}

/// The pools a TCP module has when no parameter is set.
fn default_tcp_pools() -> FragmentPoolsConfig {
    let mut registry = Box::new(ParamRegistry::new());
    let params: &mut dyn Params = registry.as_mut();
    let mut tcp = TcpComponent::default();
    tcp.register(params).expect("registered");
    let setup = tcp.init(params).expect("the defaults are valid");
    setup.into_iter().next().expect("one module").pools
}
