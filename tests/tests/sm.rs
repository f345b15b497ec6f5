//! The conformance suite against the shared-memory BTL's core: two modules
//! in one process over two rings.

use btl_tests::harness::sm::SmWorld;

btl_tests::conformance_suite!(SmWorld::new, gated: [pause, peer_loss]);
