//! The conformance suite against the engine over a byte stream: two
//! engines, each with a `SerialDriver`, on an in-memory serial line whose
//! writes are cut anywhere.

use btl_tests::harness::serial::SerialWorld;

btl_tests::conformance_suite!(SerialWorld::new, gated: [pause, peer_loss]);
