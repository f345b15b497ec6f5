//! The conformance suite against the shared-memory component: two of its
//! modules in one process, each with its segment in `/dev/shm`, opened
//! with the default parameters and joined through a shared directory.

use btl_tests::harness::sm::SmModuleWorld;

btl_tests::conformance_suite!(SmModuleWorld::new, gated: [pause]);
