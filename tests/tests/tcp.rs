//! The conformance suite against the TCP component: two modules over real
//! sockets on loopback.

use btl_std::tcp::TcpModule;
use btl_tests::harness::sockets::SocketWorld;

fn tcp() -> SocketWorld<TcpModule> {
    SocketWorld::new()
}

btl_tests::conformance_suite!(tcp, gated: [pause, peer_loss]);
