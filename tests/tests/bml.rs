//! The conformance suite against btl-std's `Bml`: two of them in one
//! process, the suite carried by the route the selection rules choose.

use btl_tests::harness::bml::BmlWorld;

/// `self`, `sm` and `tcp` all selected: two processes of one host meet
/// over shared memory.
mod by_default {
    use super::*;

    fn world() -> BmlWorld {
        let world = BmlWorld::over("");
        assert_eq!(world.route(), "sm");
        world
    }

    btl_tests::conformance_suite!(world, gated: [pause]);
}

/// Shared memory left out: the same two processes meet over TCP.
mod without_sm {
    use super::*;

    fn world() -> BmlWorld {
        let world = BmlWorld::over("^sm");
        assert_eq!(world.route(), "tcp");
        world
    }

    btl_tests::conformance_suite!(world, gated: [pause, peer_loss]);
}

/// `self` carries a process's messages to itself, `sm` those to another
/// process of the host, and `tcp` those when shared memory is left out;
/// the reasons each module gave come back when none reaches.
#[test]
fn each_peer_goes_over_the_best_module_that_reaches_it() {
    use std::time::Duration;

    use btl_core::endpoint::ProcName;
    use btl_tests::harness::bml::open;

    let (job, dir) = btl_tests::harness::fresh_job("bml-routes");
    let names = [ProcName::new(job, 0), ProcName::new(job, 1)];
    for (selection, to_other) in [("", "sm"), ("self,tcp", "tcp")] {
        let (mut a, mut b) = (
            open(names[0], &dir.0, selection),
            open(names[1], &dir.0, selection),
        );
        let (to_self, to_b) = std::thread::scope(|s| {
            let joining = s.spawn(|| {
                b.reach(names[0], Duration::from_secs(10))
                    .expect("B reaches A")
            });
            let to_self = a
                .reach(names[0], Duration::from_secs(1))
                .expect("A reaches itself");
            let to_b = a
                .reach(names[1], Duration::from_secs(10))
                .expect("A reaches B");
            joining.join().expect("B joins");
            (to_self, to_b)
        });
        assert_eq!(a.carrier(to_self), Some("self"), "{selection}");
        assert_eq!(a.carrier(to_b), Some(to_other), "{selection}");
        let stranger = ProcName::new(job, 9);
        let why = a
            .reach(stranger, Duration::from_millis(50))
            .expect_err("nobody published that card")
            .to_string();
        assert!(
            why.contains("self:") && why.contains(&format!("{to_other}:")),
            "{why}"
        );
    }
}
