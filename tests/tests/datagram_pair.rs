//! The conformance suite against the sans-I/O engine in datagram framing:
//! two engines over an in-memory network that loses, duplicates and
//! reorders datagrams.

use btl_tests::harness::datagram_pair::DatagramPairWorld;

btl_tests::conformance_suite!(DatagramPairWorld::new, gated: [pause, peer_loss]);
