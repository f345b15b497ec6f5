//! The conformance suite against the sans-I/O engine: two engines over an
//! in-memory stream pair, with every fault hook.

use btl_tests::harness::stream_pair::StreamPairWorld;

btl_tests::conformance_suite!(
    StreamPairWorld::new,
    gated: [pause, peer_loss, handshake, garbage]
);
