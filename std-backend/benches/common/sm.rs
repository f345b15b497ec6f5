//! What the shared-memory benchmarks share: pinning a thread, and a module
//! of a job joined to its peer.

use btl_core::btl::Btl;
use btl_core::endpoint::{EndpointId, ProcName, Reachability};
use btl_std::{ModuleBuilder, SmModule};

/// Pins the calling thread to `cpu`, as the command pins its processes.
pub fn pin(cpu: usize) {
    let mut set = rustix::thread::CpuSet::new();
    set.set(cpu);
    let _ = rustix::thread::sched_setaffinity(None, &set);
}

/// The module of rank `rank` of `job`, its card in `dir`, opened with
/// `params` over the defaults.
pub fn open(job: u64, rank: u32, dir: &std::path::Path, params: &[(&str, &str)]) -> SmModule {
    let mut builder = ModuleBuilder::new(ProcName::new(job, rank))
        .ignore_environment()
        .shared_dir(dir);
    for (name, value) in params {
        builder = builder.param(name, value);
    }
    builder.sm().expect("an sm module")
}

/// `proc`'s endpoint, once it has joined.
pub fn reach(sm: &mut SmModule, proc: ProcName) -> EndpointId {
    let mut eps = [None];
    let mut words = [0u64];
    sm.add_procs(&[proc], &mut eps, &mut Reachability::new(&mut words))
        .expect("add");
    eps[0].expect("reachable")
}
