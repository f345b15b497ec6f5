//! The conformance suite against the shared-memory component: two of its
//! modules in one process, each with its segment in `/dev/shm`, opened
//! with the default parameters and joined through a shared directory;
//! then again with B a module of a child process (this binary started
//! again, as its ignored test `sm_side_b`).

use btl_tests::harness::sm::SmModuleWorld;

btl_tests::conformance_suite!(SmModuleWorld::new, gated: [pause]);

/// The limits the book's getting-started table gives for `sm`.
#[test]
fn the_default_limits_are_the_books() {
    use btl_tests::world::{Side, World};
    let mut world = SmModuleWorld::new();
    let attributes = world.btl(Side::A).attributes();
    assert_eq!(attributes.eager_limit, 4 << 10);
    assert_eq!(attributes.max_send_size, 32 << 10);
    assert_eq!(attributes.put_limit, u64::MAX >> 1);
    assert_eq!(attributes.get_limit, u64::MAX >> 1);
}

/// The conformance suite with B in a process of its own, killed for real
/// in the peer-loss group.
mod two_processes {
    use btl_tests::harness::sm::SmProcessesWorld;

    btl_tests::conformance_suite!(SmProcessesWorld::new, gated: [pause, peer_loss]);
}

btl_tests::sm_side_b_process!();
