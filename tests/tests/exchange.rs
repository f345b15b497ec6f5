//! The interop conversation (`btl-exchange`) between two in-memory sides,
//! each way round: over the engine on byte pipes, over smoltcp's TCP and
//! UDP on an Ethernet cable (also a faulty one), and over the loopback.
//! What a board and a Linux process say to each other, checked here first.

use btl_core::btl::Access;
use btl_exchange::{Exchange, Role};
use btl_tests::harness::smoltcp::{FAULTS, SmolTcpWorld, SmolUdpWorld};
use btl_tests::harness::stream_pair::StreamPairWorld;
use btl_tests::world::{Side, World};

/// Each half of a side's region: what is put, and what is got.
const BULK: u64 = 1 << 20;

/// Runs the conversation with `lead` leading; panics unless both sides
/// finish within `rounds`.
fn converse(world: &mut dyn World, lead: Side, rounds: u32) {
    let mut sides = Side::BOTH.map(|side| {
        let peer = world.peer(side);
        let btl = world.btl(side);
        let region = btl
            .register_mem(
                vec![0; 2 * BULK as usize],
                Access::REMOTE_READ | Access::REMOTE_WRITE,
            )
            .unwrap_or_else(|_| panic!("{side:?} registers its region"));
        let role = if side == lead {
            Role::Lead
        } else {
            Role::Follow
        };
        Exchange::new(btl, role, peer, region, BULK).expect("a region of 2 × BULK")
    });
    for _ in 0..rounds {
        world.progress();
        for side in Side::BOTH {
            sides[side.index()]
                .poll(world.btl(side))
                .unwrap_or_else(|e| panic!("{side:?}, {lead:?} leading: {e:?}"));
        }
        if sides.iter().all(Exchange::is_done) {
            return;
        }
    }
    panic!("the conversation did not end within {rounds} rounds ({lead:?} leading)");
}

fn both_ways(mut make: impl FnMut() -> Box<dyn World>, rounds: u32) {
    for lead in Side::BOTH {
        converse(&mut *make(), lead, rounds);
    }
}

#[test]
fn over_the_engine_on_byte_pipes() {
    both_ways(|| Box::new(StreamPairWorld::new()), 20_000);
}

#[test]
fn over_smoltcp_tcp() {
    both_ways(|| Box::new(SmolTcpWorld::new()), 20_000);
}

#[test]
fn over_smoltcp_tcp_on_a_faulty_cable() {
    both_ways(|| Box::new(SmolTcpWorld::with_faults(FAULTS)), 50_000);
}

#[test]
fn over_smoltcp_udp() {
    both_ways(|| Box::new(SmolUdpWorld::new()), 20_000);
}

#[test]
fn over_smoltcp_udp_on_a_faulty_cable() {
    both_ways(|| Box::new(SmolUdpWorld::with_faults(FAULTS)), 50_000);
}

#[test]
fn two_conversations_follow_each_other_on_the_same_modules() {
    let mut world = SmolTcpWorld::new();
    let regions = Side::BOTH.map(|side| {
        world
            .btl(side)
            .register_mem(
                vec![0; 2 * BULK as usize],
                Access::REMOTE_READ | Access::REMOTE_WRITE,
            )
            .unwrap_or_else(|_| panic!("{side:?} registers its region"))
    });
    for lead in Side::BOTH {
        let mut sides = Side::BOTH.map(|side| {
            let peer = world.peer(side);
            let role = if side == lead {
                Role::Lead
            } else {
                Role::Follow
            };
            Exchange::new(world.btl(side), role, peer, regions[side.index()], BULK)
                .expect("a region of 2 × BULK")
        });
        let mut rounds = 0;
        while !sides.iter().all(Exchange::is_done) {
            rounds += 1;
            assert!(rounds < 20_000, "{lead:?} leading: no end");
            world.progress();
            for side in Side::BOTH {
                // A side done with its part leaves what comes next to the
                // next conversation.
                if !sides[side.index()].is_done() {
                    sides[side.index()]
                        .poll(world.btl(side))
                        .unwrap_or_else(|e| panic!("{side:?}, {lead:?} leading: {e:?}"));
                }
            }
        }
    }
}
