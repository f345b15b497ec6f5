//! The conformance suite against the engine over reliable-connected queue
//! pairs of the software HCA, connected by the `oob` CPC.

use btl_tests::harness::verbs::VerbsWorld;

btl_tests::conformance_suite!(VerbsWorld::new, gated: [pause, peer_loss]);
