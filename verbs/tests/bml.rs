//! The verbs component in a `Bml`: offered to the builder by this crate
//! (here on a soft device, as the `btl` command offers it on a real HCA),
//! selected by the `btl` list as btl-std's own components are, and ranked
//! by its exclusivity: between two processes it reaches it carries the
//! pair before tcp does, and a list without it leaves the pair to tcp.

use std::sync::Arc;
use std::time::{Duration, Instant};

use btl_core::btl::{Btl, Event, Tag};
use btl_core::endpoint::{EndpointId, ProcName};
use btl_core::engine::config::EngineConfig;
use btl_core::mca::Exclusivity;
use btl_std::bml::{Offer, Offered};
use btl_std::bootstrap::{Bootstrap, SharedDir};
use btl_std::driver::heap::Buffer;
use btl_std::driver::module::Module;
use btl_std::driver::net::Os;
use btl_std::{Bml, ModuleBuilder, OpenError};
use btl_verbs::module::Verbs;
use btl_verbs::soft::{SoftFabric, SoftHca};

mod common;

const JOB: u64 = 0x7E4D;

/// The verbs component on a soft device of `fabric`.
struct SoftVerbs {
    fabric: SoftFabric,
}

impl Offered for SoftVerbs {
    type Transport = Verbs<SoftHca, Os>;

    fn name(&self) -> &'static str {
        "verbs"
    }

    fn exclusivity(&self) -> Exclusivity {
        Exclusivity::DEFAULT
    }

    fn open<M: Buffer>(
        &self,
        builder: ModuleBuilder,
    ) -> Result<Module<Self::Transport, M>, OpenError>
    where
        Module<Self::Transport, M>: Send,
    {
        let opening = builder.opening()?;
        let config = opening.engine_config("verbs", EngineConfig::new(opening.me))?;
        common::soft_module(&self.fabric, config, opening.bootstrap).map_err(|error| {
            OpenError::Io {
                component: "verbs",
                error,
            }
        })
    }
}

/// Process `rank`'s `Bml` of what `list` selects, verbs offered on
/// `fabric`.
fn open(fabric: &SoftFabric, bootstrap: &Arc<dyn Bootstrap>, rank: u32, list: &str) -> Bml {
    ModuleBuilder::new(ProcName::new(JOB, rank))
        .bootstrap(Arc::clone(bootstrap))
        .on_loopback()
        .param("btl", list)
        .param("btl_tcp_if_include", "lo")
        .offer(Offer::new(SoftVerbs {
            fabric: fabric.clone(),
        }))
        .open()
        .expect("a Bml")
}

/// The two processes reach each other over `list`'s best module: its
/// name, after a message went from the first to the second.
fn carrier_of_the_pair(list: &str, run: u32) -> &'static str {
    let dir = std::env::temp_dir().join(format!("btl-verbs-bml-{}-{run}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let bootstrap: Arc<dyn Bootstrap> = Arc::new(SharedDir::new(&dir));
    let fabric = SoftFabric::with_device("soft0");
    let mut a = open(&fabric, &bootstrap, 0, list);
    let mut b = open(&fabric, &bootstrap, 1, list);
    let to_b: EndpointId = a
        .reach(ProcName::new(JOB, 1), Duration::from_secs(5))
        .expect("B");
    b.reach(ProcName::new(JOB, 0), Duration::from_secs(5))
        .expect("A");
    let start = Instant::now();
    while a.send_copy(to_b, Tag(0x81), b"over the best").is_err() {
        assert!(start.elapsed() < Duration::from_secs(20), "never sent");
        a.progress();
        b.progress();
    }
    let mut got = None;
    while got.is_none() {
        assert!(start.elapsed() < Duration::from_secs(20), "never came");
        a.progress();
        b.progress();
        while a.poll_event().is_some() {}
        while let Some(event) = b.poll_event() {
            if let Event::Received(m) = event {
                got = Some(m.data.to_vec());
            }
        }
    }
    assert_eq!(got.as_deref(), Some(&b"over the best"[..]));
    let carrier = a.carrier(to_b).expect("a carrier");
    let _ = std::fs::remove_dir_all(&dir);
    carrier
}

#[test]
fn an_offered_verbs_component_carries_the_pairs_it_reaches_before_tcp() {
    assert_eq!(carrier_of_the_pair("self,verbs,tcp", 0), "verbs");
}

#[test]
fn a_list_without_verbs_leaves_the_pair_to_tcp() {
    assert_eq!(carrier_of_the_pair("self,tcp", 1), "tcp");
}

#[test]
fn the_selection_lists_the_offered_component_by_its_exclusivity() {
    let fabric = SoftFabric::with_device("soft0");
    let offers = [Offer::new(SoftVerbs { fabric })];
    let list = btl_core::mca::ListValue::default();
    let names: Vec<String> = btl_std::bml::choose(&list, &offers)
        .expect("the default list")
        .into_iter()
        .map(|c| c.component)
        .collect();
    assert_eq!(names, ["self", "sm", "verbs", "tcp", "udp"]);
}
