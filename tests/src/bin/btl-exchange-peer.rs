//! One side of the interop conversation (`btl-exchange`) on btl-std's
//! sockets: the Linux process a board, or a process on smoltcp, talks to.
//!
//! ```text
//! btl-exchange-peer tcp|udp ME PEER FIRST BULK 'CARDS'
//! ```
//!
//! `ME` and `PEER` are process names (`job.rank`); `CARDS` is the static
//! peer list (`proc 1.0;tcp 10.77.1.1/24 7100;proc 1.1;tcp 10.77.1.2/24
//! 7000`), which also says where this process listens. It runs the
//! conversation twice over one module: first with role `FIRST` (`lead` or
//! `follow`), then with the other, each with `BULK` bytes put and got, and
//! prints a line per conversation; it exits with 1 on the first failure.

use std::error::Error;
use std::sync::Arc;
use std::time::{Duration, Instant};

use btl_core::btl::{Access, Btl};
use btl_core::endpoint::ProcName;
use btl_exchange::{Exchange, JOB_KEY, Role};
use btl_std::ModuleBuilder;
use btl_std::bootstrap::StaticPeers;
use btl_std::driver::module::{Module, Transport};

/// How long a conversation may take.
const TIMEOUT: Duration = Duration::from_secs(60);

type Result<T = ()> = std::result::Result<T, Box<dyn Error>>;

fn main() {
    // BTL_LOG=debug shows what the engine and transports do.
    let _ = btl_std::logging::init("warn");
    if let Err(e) = run() {
        eprintln!("btl-exchange-peer: {e}");
        std::process::exit(1);
    }
}

fn run() -> Result {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [component, me, peer, first, bulk, cards] = &args[..] else {
        return Err("usage: btl-exchange-peer tcp|udp ME PEER lead|follow BULK 'CARDS'".into());
    };
    let me = proc_name(me)?;
    let peer = proc_name(peer)?;
    let first = match first.as_str() {
        "lead" => Role::Lead,
        "follow" => Role::Follow,
        other => return Err(format!("a role is lead or follow, not {other}").into()),
    };
    let bulk: u64 = bulk.parse()?;
    let builder = ModuleBuilder::new(me)
        .bootstrap(Arc::new(StaticPeers::parse(cards, "the command line")?))
        .job_key(JOB_KEY);
    match component.as_str() {
        "tcp" => converse(&mut builder.tcp()?, peer, first, bulk),
        "udp" => converse(&mut builder.udp()?, peer, first, bulk),
        other => Err(format!("no component {other}").into()),
    }
}

fn proc_name(s: &str) -> Result<ProcName> {
    let (job, rank) = s.split_once('.').ok_or("a process name is job.rank")?;
    Ok(ProcName::new(job.parse()?, rank.parse()?))
}

/// Both conversations over `module`, `first` leading the first.
fn converse<T: Transport>(
    module: &mut Module<T>,
    peer: ProcName,
    first: Role,
    bulk: u64,
) -> Result {
    let endpoint = module.reach(peer, TIMEOUT)?;
    let region = module
        .register_mem(
            vec![0; usize::try_from(2 * bulk)?],
            Access::REMOTE_READ | Access::REMOTE_WRITE,
        )
        .map_err(|e| e.error)?;
    let second = match first {
        Role::Lead => Role::Follow,
        Role::Follow => Role::Lead,
    };
    for role in [first, second] {
        let start = Instant::now();
        let mut exchange =
            Exchange::new(module, role, endpoint, region, bulk).map_err(|e| format!("{e:?}"))?;
        while !exchange.is_done() {
            if start.elapsed() > TIMEOUT {
                return Err(format!("{role:?}: no end within {TIMEOUT:?}").into());
            }
            module.progress();
            exchange
                .poll(module)
                .map_err(|e| format!("{role:?}: {e:?}"))?;
            module.wait(Duration::from_millis(1))?;
        }
        println!(
            "exchange ok: {role:?}, {bulk} bytes put and got, in {:?}",
            start.elapsed()
        );
    }
    // The peer has every answer before this process goes.
    module.flush(TIMEOUT)?;
    Ok(())
}
