//! The conformance suite against the loopback (`self`) BTL.

use btl_tests::harness::loopback::LoopbackWorld;

btl_tests::conformance_suite!(LoopbackWorld::new);
