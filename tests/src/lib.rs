//! `btl-tests`: the conformance suite that every btl backend must pass.
//!
//! The suite is written once, against the [`World`](world::World) harness
//! trait: two processes A and B, each with a [`Btl`](btl_core::btl::Btl),
//! and a `progress` that drives both and carries their bytes. A backend
//! plugs in by implementing `World` (see [`harness`]) and instantiating the
//! tests in one file under `tests/tests/`:
//!
//! ```ignore
//! btl_tests::conformance_suite!(btl_tests::harness::loopback::LoopbackWorld::new);
//! // a harness with fault hooks names the gated groups it supports:
//! btl_tests::conformance_suite!(my_harness::new, gated: [pause, peer_loss]);
//! ```
//!
//! Every test runs a bounded number of progress rounds and panics on the
//! first broken promise: wrong or duplicated bytes, a completion missing or
//! delivered twice, a descriptor lost, a fragment not back in its pool.
#![deny(unsafe_code)]

pub mod alloc_count;
pub mod data;
pub mod harness;
pub mod netns;
pub mod pair;
pub mod rogue;
pub mod slurm;
pub mod suite;
pub mod track;
pub mod world;

/// Expands to one `#[test]` per behaviour of the suite, each calling
/// `$make()` for a fresh world.
///
/// `gated: [...]` adds the capability-gated groups the harness supports:
/// `pause`, `peer_loss`, `handshake`, `garbage`. A generated test checks
/// that this list matches the harness's declared
/// [`Capabilities`](crate::world::Capabilities), so no capability goes
/// untested and no test runs against a harness that cannot support it.
/// Use it once per test file.
#[macro_export]
macro_rules! conformance_suite {
    ($make:path) => {
        $crate::conformance_suite!($make, gated: []);
    };
    ($make:path, gated: [$($group:ident),* $(,)?]) => {
        $crate::__conformance_group!($make, core);
        $( $crate::__conformance_group!($make, $group); )*

        #[test]
        fn declared_capabilities_match_the_gated_groups() {
            $crate::world::check_gated_groups(&$make(), &[$(stringify!($group)),*]);
        }
    };
}

/// The tests of one group, for [`conformance_suite!`]: a module named
/// after the group with one test per suite function.
#[doc(hidden)]
#[macro_export]
macro_rules! __conformance_group {
    ($make:path, core) => {
        $crate::__conformance_tests!(
            send,
            $make,
            [
                every_size_arrives_intact_once,
                descriptors_come_back_exactly_once_for_every_flag,
                header_reserve_precedes_the_payload,
                alloc_then_fill_sends_the_payload,
                registered_memory_is_sent,
                larger_than_max_send_size_is_refused,
                send_copy_keeps_order_per_peer,
            ]
        );
        $crate::__conformance_tests!(tags, $make, [every_tag_arrives_with_its_tag]);
        $crate::__conformance_tests!(
            sendi,
            $make,
            [
                small_messages_go_at_once,
                out_of_resource_falls_back_to_send,
                too_large_for_sendi_falls_back_to_send,
            ]
        );
        $crate::__conformance_tests!(
            rdma,
            $make,
            [
                put_lands_in_peer_memory,
                get_reads_peer_memory,
                largest_put_and_get,
                many_outstanding_complete_once,
                put_notify_tells_the_target_once,
            ]
        );
        $crate::__conformance_tests!(
            registration,
            $make,
            [
                out_of_bounds_is_rejected,
                access_is_enforced,
                stale_keys_are_rejected,
                garbage_keys_are_rejected,
                local_slices_are_checked_at_the_call,
            ]
        );
        $crate::__conformance_tests!(
            flow,
            $make,
            [
                stalled_receiver_bounds_the_sender,
                replies_from_the_event_loop_are_accounted,
            ]
        );
        $crate::__conformance_tests!(
            finalize,
            $make,
            [
                outstanding_operations_fail_with_finalized_once,
                later_calls_fail_with_finalized,
            ]
        );
        $crate::__conformance_tests!(
            xfer,
            $make,
            [
                messages_fill_receive_buffers_once_each,
                passive_and_active_bulk_move_both_ways,
                deleted_buffers_complete_once_cancelled,
                unmet_deadlines_complete_once_timed_out,
                stop_completes_every_queued_buffer_once,
            ]
        );
    };
    ($make:path, pause) => {
        $crate::__conformance_tests!(pause, $make, [flow::paused_receiver_bounds_the_sender]);
    };
    ($make:path, peer_loss) => {
        $crate::__conformance_tests!(
            peer_loss,
            $make,
            [outstanding_operations_fail_once_when_the_peer_dies,]
        );
    };
    ($make:path, handshake) => {
        $crate::__conformance_tests!(
            handshake,
            $make,
            [
                wrong_version_is_refused,
                wrong_job_key_is_refused,
                garbage_handshake_is_refused,
            ]
        );
    };
    ($make:path, garbage) => {
        $crate::__conformance_tests!(
            garbage,
            $make,
            [garbage_drops_the_connection_not_the_process,]
        );
    };
}

/// A module `$group` of tests, each calling `suite::$group::$test` (or the
/// given `module::test`) with `&mut $make()`.
#[doc(hidden)]
#[macro_export]
macro_rules! __conformance_tests {
    ($group:ident, $make:path, [$($test:ident),* $(,)?]) => {
        mod $group {
            #[allow(unused_imports)]
            use super::*;
            $(
                #[test]
                fn $test() {
                    $crate::suite::$group::$test(&mut $make());
                }
            )*
        }
    };
    ($group:ident, $make:path, [$module:ident :: $test:ident]) => {
        mod $group {
            #[allow(unused_imports)]
            use super::*;
            #[test]
            fn $test() {
                $crate::suite::$module::$test(&mut $make());
            }
        }
    };
}
