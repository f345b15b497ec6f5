//! Choosing which components run: the user's include/exclude list, then
//! exclusivity, then priority.

use core::fmt;

use super::param::{ListValue, ParamKind};
use super::registry::{ParamId, Params, RegisterError};
use super::spec::ParamSpec;

/// The name of the BTL framework, first part of its parameters' names.
pub const BTL_FRAMEWORK: &str = "btl";

/// How strongly a transport claims the peers it reaches: of the transports
/// that reach a peer, only those of the highest exclusivity are used.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Exclusivity(pub u32);

impl Exclusivity {
    /// Transports that always win when they reach a peer: `self`.
    pub const HIGH: Exclusivity = Exclusivity(65536);
    /// Shared memory between the processes of one host: above every
    /// network, below `self` (Open MPI ranks its `sm` so too).
    pub const SHARED_MEMORY: Exclusivity = Exclusivity(65535);
    /// Fast fabrics: verbs.
    pub const DEFAULT: Exclusivity = Exclusivity(1024);
    /// Fallback transports: tcp and udp, usually `LOW.plus(100)`.
    pub const LOW: Exclusivity = Exclusivity(0);

    /// This exclusivity raised by `offset` (saturating), to rank transports
    /// within a class.
    pub const fn plus(self, offset: u32) -> Exclusivity {
        Exclusivity(self.0.saturating_add(offset))
    }
}

impl fmt::Display for Exclusivity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// A component (or one of its modules) offered for selection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Candidate<'a> {
    /// The component's name, matched against the selection list.
    pub name: &'a str,
    /// Its exclusivity.
    pub exclusivity: Exclusivity,
    /// Its priority among equal exclusivity; higher first.
    pub priority: i32,
}

/// The selection list did not fit the output.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SelectError {
    /// More candidates were selected than the output holds.
    TooMany {
        /// How many were selected.
        selected: usize,
        /// The output's capacity.
        capacity: usize,
    },
}

impl fmt::Display for SelectError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SelectError::TooMany { selected, capacity } => write!(
                f,
                "{selected} components selected but room for only {capacity}"
            ),
        }
    }
}

impl core::error::Error for SelectError {}

/// The outcome of [`select`]: the chosen candidates in order, and the names
/// of the include list that matched no candidate.
#[derive(Clone, Debug)]
pub struct Selection<'a, const N: usize> {
    candidates: &'a [Candidate<'a>],
    request: &'a ListValue,
    order: heapless::Vec<usize, N>,
}

impl<'a, const N: usize> Selection<'a, N> {
    /// The selected candidates, best first, each with its index in the
    /// caller's candidate slice (to find the module it stands for).
    pub fn iter(&self) -> impl Iterator<Item = (usize, &'a Candidate<'a>)> {
        let candidates = self.candidates;
        self.order
            .iter()
            .filter_map(move |&i| Some((i, candidates.get(i)?)))
    }

    /// The indices of the selected candidates, best first.
    pub fn indices(&self) -> &[usize] {
        &self.order
    }

    /// How many candidates were selected.
    pub fn len(&self) -> usize {
        self.order.len()
    }

    /// Whether nothing was selected.
    pub fn is_empty(&self) -> bool {
        self.order.is_empty()
    }

    /// Names in an include list that match no candidate, for the caller to
    /// warn about (a typo, or a component not built or not available).
    /// Exclude lists report nothing: excluding an absent component is
    /// harmless and common.
    pub fn unknown(&self) -> impl Iterator<Item = &'a str> {
        let candidates = self.candidates;
        let request: &'a ListValue = self.request;
        let include = !request.is_negated();
        request
            .items()
            .filter(move |item| include && !candidates.iter().any(|c| c.name == *item))
    }

    /// The selected candidates to use for one peer: of those for which
    /// `reaches(index, candidate)` holds, the ones sharing the highest
    /// exclusivity, best first.
    pub fn for_peer<F>(&self, mut reaches: F) -> impl Iterator<Item = (usize, &'a Candidate<'a>)>
    where
        F: FnMut(usize, &Candidate<'a>) -> bool,
    {
        let mut top = None;
        self.iter()
            .filter(move |(i, c)| reaches(*i, c))
            .take_while(move |(_, c)| *top.get_or_insert(c.exclusivity) == c.exclusivity)
    }
}

/// Applies the selection list `request` to `candidates` and orders the
/// survivors; at most `N` may survive.
///
/// The rules are Open MPI's. The framework parameter `btl` (environment
/// `BTL`) is a list: empty means every available component, `tcp,self`
/// means only those, `^tcp` means all but those. The `^` negates the whole
/// list and may only come first, so a list cannot mix included and excluded
/// names (the list parser already rejects `tcp,^self`). Survivors are
/// ordered by exclusivity, then priority (both highest first), then name,
/// then position among the candidates, so the order is deterministic.
///
/// Exclusivity then applies per peer: of the selected transports that reach
/// a peer, only those with the highest exclusivity are used for it, so
/// `self` takes over for a process talking to itself and `tcp` is used only
/// when nothing better reaches the peer. See [`Selection::for_peer`].
///
/// ```
/// use btl_core::mca::{select, Candidate, Exclusivity, ListValue};
///
/// let candidates = [
///     Candidate { name: "tcp", exclusivity: Exclusivity::LOW.plus(100), priority: 0 },
///     Candidate { name: "self", exclusivity: Exclusivity::HIGH, priority: 0 },
/// ];
/// let all = ListValue::parse("")?;
/// let chosen = select::<4>(&all, &candidates)?;
/// assert_eq!(chosen.indices(), [1, 0]); // self first
///
/// let only = ListValue::parse("tcp,sm")?;
/// let chosen = select::<4>(&only, &candidates)?;
/// assert_eq!(chosen.indices(), [0]);
/// assert_eq!(chosen.unknown().collect::<Vec<_>>(), ["sm"]); // worth a warning
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn select<'a, const N: usize>(
    request: &'a ListValue,
    candidates: &'a [Candidate<'a>],
) -> Result<Selection<'a, N>, SelectError> {
    let negated = request.is_negated();
    let wanted = |c: &Candidate<'_>| request.is_empty() || request.contains(c.name) != negated;
    let mut order = heapless::Vec::<usize, N>::new();
    let selected = candidates.iter().filter(|c| wanted(c)).count();
    for (i, _) in candidates.iter().enumerate().filter(|(_, c)| wanted(c)) {
        order.push(i).map_err(|_| SelectError::TooMany {
            selected,
            capacity: N,
        })?;
    }
    order.sort_unstable_by(|&a, &b| match (candidates.get(a), candidates.get(b)) {
        (Some(x), Some(y)) => y
            .exclusivity
            .cmp(&x.exclusivity)
            .then(y.priority.cmp(&x.priority))
            .then(x.name.cmp(y.name))
            .then(a.cmp(&b)),
        _ => a.cmp(&b),
    });
    Ok(Selection {
        candidates,
        request,
        order,
    })
}

/// The framework-level selection parameter `btl` (environment `BTL`).
pub const BTL_SELECTION_PARAM: ParamSpec =
    ParamSpec::new(BTL_FRAMEWORK, "", "", ParamKind::List, "")
        .help(
            "Components to use, comma-separated (`tcp,self`), or `^` and the \
             ones not to use (`^tcp`); empty uses the default ones (self, sm \
             and tcp; udp only when named)",
        )
        .level(2);

/// The handles of the BTL framework's own parameters.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FrameworkParams {
    /// The selection list `btl`; read it with [`Params::list`] and pass it
    /// to [`select`].
    pub selection: ParamId,
}

/// Registers the BTL framework's own parameters (the selection list).
pub fn register_framework_params(
    params: &mut dyn Params,
) -> Result<FrameworkParams, RegisterError> {
    Ok(FrameworkParams {
        selection: params.register(&BTL_SELECTION_PARAM)?,
    })
}

#[cfg(test)]
mod tests {
    extern crate std;
    use super::*;
    use crate::mca::param::ValueError;
    use crate::mca::registry::Registry;
    use crate::mca::source::Source;
    use std::string::ToString;
    use std::vec::Vec;

    const SELF: Candidate<'static> = Candidate {
        name: "self",
        exclusivity: Exclusivity::HIGH,
        priority: 0,
    };
    const VERBS: Candidate<'static> = Candidate {
        name: "verbs",
        exclusivity: Exclusivity::DEFAULT,
        priority: 0,
    };
    const TCP: Candidate<'static> = Candidate {
        name: "tcp",
        exclusivity: Exclusivity::LOW.plus(100),
        priority: 0,
    };
    const UDP: Candidate<'static> = Candidate {
        name: "udp",
        exclusivity: Exclusivity::LOW.plus(100),
        priority: 0,
    };
    const ALL: [Candidate<'static>; 4] = [TCP, UDP, SELF, VERBS];

    fn names<const N: usize>(s: &Selection<'_, N>) -> Vec<&'static str> {
        s.iter()
            .map(|(i, _)| ALL.get(i).map_or("?", |c| c.name))
            .collect()
    }

    fn list(text: &str) -> ListValue {
        ListValue::parse(text).expect("valid list")
    }

    #[test]
    fn empty_list_selects_all_by_exclusivity_then_name() {
        let l = list("");
        let s = select::<8>(&l, &ALL).expect("fits");
        assert_eq!(names(&s), ["self", "verbs", "tcp", "udp"]);
        assert_eq!(s.indices(), [2, 3, 0, 1]);
        assert_eq!(s.len(), 4);
        assert_eq!(s.unknown().count(), 0);
    }

    #[test]
    fn include_list() {
        let l = list("tcp,self");
        let s = select::<8>(&l, &ALL).expect("fits");
        assert_eq!(names(&s), ["self", "tcp"]);
        assert_eq!(s.unknown().count(), 0);
    }

    #[test]
    fn include_list_reports_unknown_names() {
        let l = list("tcp,sm,openib");
        let s = select::<8>(&l, &ALL).expect("fits");
        assert_eq!(names(&s), ["tcp"]);
        assert_eq!(s.unknown().collect::<Vec<_>>(), ["sm", "openib"]);
    }

    #[test]
    fn exclude_list() {
        let l = list("^tcp");
        let s = select::<8>(&l, &ALL).expect("fits");
        assert_eq!(names(&s), ["self", "verbs", "udp"]);
        let l = list("^tcp,udp,verbs,nothere");
        let s = select::<8>(&l, &ALL).expect("fits");
        assert_eq!(names(&s), ["self"]);
        assert_eq!(s.unknown().count(), 0, "exclude lists report nothing");
    }

    #[test]
    fn mixing_included_and_excluded_is_an_error() {
        assert_eq!(
            ListValue::parse("tcp,^self"),
            Err(ValueError::MisplacedNegation)
        );
        let mut r = Registry::<2>::new();
        let fw = register_framework_params(&mut r).expect("register");
        let err = r
            .set(fw.selection, "tcp,^self", Source::Environment)
            .expect_err("mixed");
        assert_eq!(
            err.to_string(),
            "invalid value `tcp,^self` for parameter btl (from environment variable BTL): \
             `^` may only prefix the whole list (cannot mix included and excluded names)"
        );
    }

    #[test]
    fn priority_orders_within_exclusivity_and_name_breaks_ties() {
        let cands = [
            Candidate {
                name: "b",
                exclusivity: Exclusivity::LOW,
                priority: 5,
            },
            Candidate {
                name: "a",
                exclusivity: Exclusivity::LOW,
                priority: 5,
            },
            Candidate {
                name: "c",
                exclusivity: Exclusivity::LOW,
                priority: 9,
            },
            Candidate {
                name: "d",
                exclusivity: Exclusivity::LOW.plus(1),
                priority: -100,
            },
            Candidate {
                name: "a",
                exclusivity: Exclusivity::LOW,
                priority: 5,
            },
        ];
        let l = list("");
        let s = select::<8>(&l, &cands).expect("fits");
        // Exclusivity beats priority; priority beats name; name, then
        // position, breaks ties.
        assert_eq!(s.indices(), [3, 2, 1, 4, 0]);
    }

    #[test]
    fn order_does_not_depend_on_input_order() {
        let l = list("");
        let mut rev = ALL;
        rev.reverse();
        let a = select::<4>(&l, &ALL).expect("fits");
        let b = select::<4>(&l, &rev).expect("fits");
        let an: Vec<_> = a.iter().map(|(_, c)| c.name).collect();
        let bn: Vec<_> = b.iter().map(|(_, c)| c.name).collect();
        assert_eq!(an, bn);
    }

    #[test]
    fn too_many_selected_is_an_error() {
        let l = list("");
        assert_eq!(
            select::<3>(&l, &ALL).map(|s| s.len()),
            Err(SelectError::TooMany {
                selected: 4,
                capacity: 3
            })
        );
        assert_eq!(
            SelectError::TooMany {
                selected: 4,
                capacity: 3
            }
            .to_string(),
            "4 components selected but room for only 3"
        );
        let l = list("self");
        assert_eq!(select::<1>(&l, &ALL).map(|s| s.len()), Ok(1));
    }

    #[test]
    fn nothing_selected() {
        let l = list("^tcp,udp,self,verbs");
        let s = select::<0>(&l, &ALL).expect("nothing to store");
        assert!(s.is_empty());
        let s = select::<4>(&l, &[]).expect("no candidates");
        assert!(s.is_empty());
    }

    #[test]
    fn per_peer_exclusivity() {
        let l = list("");
        let s = select::<8>(&l, &ALL).expect("fits");
        // Talking to ourselves: everything reaches, self wins alone.
        let me: Vec<_> = s.for_peer(|_, _| true).map(|(_, c)| c.name).collect();
        assert_eq!(me, ["self"]);
        // A remote peer on the fabric: verbs beats tcp and udp.
        let remote: Vec<_> = s
            .for_peer(|_, c| c.name != "self")
            .map(|(_, c)| c.name)
            .collect();
        assert_eq!(remote, ["verbs"]);
        // Only IP reaches: tcp and udp share the exclusivity, both are used.
        let ip: Vec<_> = s
            .for_peer(|_, c| c.name == "tcp" || c.name == "udp")
            .map(|(_, c)| c.name)
            .collect();
        assert_eq!(ip, ["tcp", "udp"]);
        assert_eq!(s.for_peer(|_, _| false).count(), 0);
    }

    #[test]
    fn exclusivity_constants() {
        assert_eq!(Exclusivity::HIGH.0, 65536);
        assert_eq!(Exclusivity::DEFAULT.0, 1024);
        assert_eq!(Exclusivity::LOW.0, 0);
        assert!(Exclusivity::HIGH > Exclusivity::DEFAULT);
        assert!(Exclusivity::DEFAULT > Exclusivity::LOW.plus(100));
        assert_eq!(Exclusivity(u32::MAX).plus(1), Exclusivity(u32::MAX));
        assert_eq!(Exclusivity::LOW.plus(100).to_string(), "100");
    }

    #[test]
    fn framework_params_from_registry() {
        let mut r = Registry::<4>::new();
        let fw = register_framework_params(&mut r).expect("register");
        let p = r.param(fw.selection).expect("param");
        assert_eq!(p.spec.name.to_string(), "btl");
        assert_eq!(p.spec.name.env().to_string(), "BTL");
        assert_eq!(p.spec.level, 2);
        assert!(!p.spec.help.is_empty());
        assert!(r.list(fw.selection).expect("list").is_empty());
        assert!(matches!(
            register_framework_params(&mut r),
            Err(RegisterError::Duplicate { .. })
        ));
        r.set_by_name("btl", "^tcp", Source::Environment)
            .expect("valid");
        let l = r.list(fw.selection).expect("list");
        let s = select::<8>(l, &ALL).expect("fits");
        assert_eq!(names(&s), ["self", "verbs", "udp"]);
    }
}
