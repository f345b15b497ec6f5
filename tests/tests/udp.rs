//! The conformance suite against the UDP component: two modules over real
//! sockets on loopback, the engine making UDP reliable.

use btl_std::transports::udp::UdpModule;
use btl_tests::harness::sockets::SocketWorld;

fn udp() -> SocketWorld<UdpModule> {
    SocketWorld::new()
}

btl_tests::conformance_suite!(udp, gated: [pause, peer_loss]);
