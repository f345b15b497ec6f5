//! The conformance suite against two engines joined by two links per peer
//! over the in-memory stream pair: puts are striped over both, and every
//! behaviour holds as over one.

use btl_tests::harness::stream_pair::StreamPairWorld;

fn two_links() -> StreamPairWorld {
    StreamPairWorld::with_links(2)
}

btl_tests::conformance_suite!(
    two_links,
    gated: [pause, peer_loss, handshake, garbage]
);
