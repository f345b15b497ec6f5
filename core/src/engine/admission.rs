//! Admission of strangers: which connection in its handshake gives way
//! when one more arrives and the handshake budget is spent.
//!
//! Links that strangers opened and that are still in their handshake are
//! held to a budget, in all and per source (one network address). A new
//! one beyond it takes the place of an older one, chosen so that a flood
//! cannot push out the connection of a legitimate client:
//!
//! - past its own source's budget, the newcomer's source gives way: one
//!   host cannot take more than its budget whatever the others do;
//! - past the whole budget, the source holding the most gives way (of
//!   sources holding as many, one with a link found silent, then the one
//!   with the oldest link), so that strangers from many addresses push out
//!   each other before a source holding one connection loses it;
//! - within that source, a link found silent goes first: one that has
//!   had [`JUDGED_AFTER`] to say something and said nothing. A link
//!   younger than that is not judged by its silence (its first bytes may
//!   simply not have been read yet), and goes by age with those that
//!   spoke: the oldest first.
//!
//! The newcomer itself is never chosen, and no verified peer's link is
//! ever a candidate.

use crate::time::{Duration, Instant};

use super::{LinkId, Source};

/// How long a link in its handshake has to say something before its
/// silence counts against it: a driver reads a new connection within a
/// pass or two, far sooner.
pub const JUDGED_AFTER: Duration = Duration::from_millis(50);

/// A link in its handshake that a stranger opened.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Candidate {
    /// The link.
    pub link: LinkId,
    /// Where it comes from.
    pub source: Source,
    /// Whether any byte has come on it.
    pub heard: bool,
    /// When it was accepted, and its place in the order of age.
    pub age: (Instant, u32),
}

/// The handshake budgets ([`EngineConfig::handshake_budget`] and per
/// source).
///
/// [`EngineConfig::handshake_budget`]: super::config::EngineConfig::handshake_budget
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Budget {
    /// Links in their handshake from all sources.
    pub all: usize,
    /// From one source.
    pub per_source: usize,
}

/// The most strangers' links in their handshake an engine holds: the
/// handshake budget is at most this, so that [`give_way`] finds them all
/// in a table on the stack.
pub const MAX_CANDIDATES: usize = 64;

/// The link that gives way for one more from `newcomer` at `now`, if the
/// `candidates` (every stranger's link in its handshake, which it sorts)
/// fill a budget. Sorted by source, each source's links stand together,
/// so the whole choice costs a sort and a walk, however many sources there
/// are: it is made for every connection a flood opens.
pub fn give_way(
    candidates: &mut [Candidate],
    newcomer: Source,
    budget: Budget,
    now: Instant,
) -> Option<LinkId> {
    let silent = |c: &Candidate| !c.heard && now.since(c.age.0) >= JUDGED_AFTER;
    let held_by_newcomer = candidates.iter().filter(|c| c.source == newcomer).count();
    let source = if held_by_newcomer >= budget.per_source {
        newcomer
    } else if candidates.len() >= budget.all {
        candidates.sort_unstable_by_key(|c| (c.source, c.age));
        // Each source's run: how many it holds, whether one is silent, and
        // its oldest (the run's first).
        candidates
            .chunk_by(|a, b| a.source == b.source)
            .max_by_key(|run| {
                (
                    run.len(),
                    run.iter().any(silent),
                    core::cmp::Reverse(run[0].age),
                )
            })?[0]
            .source
    } else {
        return None;
    };
    candidates
        .iter()
        .filter(|c| c.source == source)
        .min_by_key(|c| (!silent(c), c.age))
        .map(|c| c.link)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::testkit::link;

    const BUDGET: Budget = Budget {
        all: 4,
        per_source: 2,
    };

    fn ms(v: u64) -> Instant {
        Instant::from_millis(v)
    }

    fn candidate(n: u16, source: u64, heard: bool, at: u64) -> Candidate {
        Candidate {
            link: link(n),
            source: Source(source),
            heard,
            age: (ms(at), u32::from(n)),
        }
    }

    #[test]
    fn nothing_gives_way_within_the_budgets() {
        let mut c = [candidate(1, 1, false, 0), candidate(2, 2, false, 0)];
        assert_eq!(give_way(&mut c, Source(3), BUDGET, ms(500)), None);
        assert_eq!(give_way(&mut [], Source(3), BUDGET, ms(500)), None);
    }

    #[test]
    fn past_its_own_budget_a_source_gives_way_silent_first() {
        let mut c = [
            candidate(1, 1, true, 0),
            candidate(2, 1, false, 10),
            candidate(3, 2, false, 0),
        ];
        assert_eq!(
            give_way(&mut c, Source(1), BUDGET, ms(100)),
            Some(link(2)),
            "the silent one, though younger"
        );
        assert_eq!(
            give_way(&mut c, Source(1), BUDGET, ms(40)),
            Some(link(1)),
            "too young to be judged silent: the oldest goes"
        );
    }

    #[test]
    fn past_the_whole_budget_the_source_holding_most_gives_way() {
        // A legit client's link (source 9), accepted a moment ago and not
        // read yet, among a flood's from three addresses.
        let mut c = [
            candidate(1, 1, true, 0),
            candidate(2, 2, true, 1),
            candidate(3, 2, true, 2),
            candidate(4, 9, false, 3),
        ];
        assert_eq!(give_way(&mut c, Source(3), BUDGET, ms(3)), Some(link(2)));
        // Sources holding as many: the one with the oldest link.
        let mut c = [
            candidate(1, 9, false, 5),
            candidate(2, 1, true, 0),
            candidate(3, 2, true, 1),
            candidate(4, 3, true, 2),
        ];
        assert_eq!(give_way(&mut c, Source(4), BUDGET, ms(5)), Some(link(2)));
        // Of those, first one with a link found silent.
        let mut c = [
            candidate(1, 1, true, 0),
            candidate(2, 2, false, 10),
            candidate(3, 3, true, 1),
            candidate(4, 4, true, 2),
        ];
        assert_eq!(give_way(&mut c, Source(5), BUDGET, ms(100)), Some(link(2)));
    }

    #[test]
    fn a_flood_from_many_addresses_never_takes_a_source_holding_one() {
        // Every candidate from the flood's 30 sources, 8 each at most, and
        // one legit link: the legit one never gives way.
        let mut c = std::vec::Vec::new();
        c.push(candidate(0, 1000, false, 0));
        let budget = Budget {
            all: 32,
            per_source: 8,
        };
        for (n, round) in (1..).zip(0..200u64) {
            let source = round % 30;
            if let Some(gone) = give_way(&mut c, Source(source), budget, ms(round)) {
                assert_ne!(gone, link(0), "round {round}");
                c.retain(|x| x.link != gone);
            }
            c.push(candidate(n, source, true, round));
        }
        assert!(c.iter().any(|x| x.link == link(0)));
    }
}
