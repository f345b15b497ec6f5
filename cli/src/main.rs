//! The `btl` command.
#![forbid(unsafe_code)]

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use btl_cli::bench::alltoall::AlltoallPlan;
use btl_cli::bench::{self, BenchError, Driven, Plan, Side, Test, Waiting};
use btl_cli::info::{Filter, Report, Selection};
use btl_cli::job;
use btl_cli::launch::{ParamSources, RunDir, open_bml};
use btl_core::btl::{Btl, BtlError, LostReason};
use btl_core::endpoint::{EndpointId, ProcName};
use btl_core::mca::{BTL_FRAMEWORK, BTL_FRAMEWORK_VERSION, Params};
use btl_std::bootstrap::{Bootstrap, Contact, SharedDir, StaticPeers};
use btl_std::config::sources::{apply_environment, apply_file, default_param_file};
use btl_std::{ComponentInfo, ParamRegistry, register_all};
use clap::{Parser, Subcommand};

/// btl, a byte transfer layer: inspect and exercise its components.
#[derive(Debug, Parser)]
#[command(name = "btl", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// List the components of this build and every parameter with its
    /// current value, source, level and help (as ompi_info does).
    Info(InfoArgs),
    /// One-way latency by ping-pong, 1 B to 4 MiB. With no peer given it
    /// starts one as a second process on loopback.
    Pingpong(RunArgs),
    /// Bandwidth with a window of messages in flight (as osu_bw).
    Bw(RunArgs),
    /// Message rate of small messages, with a window in flight.
    Rate(RunArgs),
    /// All to all among the processes of a job: every pair's latency and
    /// the aggregate bandwidth, and the BTL of each pair. Under `mpirun`
    /// or `srun --mpi=pmix` each process is one rank; started alone, it
    /// starts `--np` processes on this host.
    Alltoall(AlltoallArgs),
    /// Wait for `btl connect` from another host and answer its runs.
    Serve(ServeArgs),
    /// Print a running process's peers and their traffic, read from its
    /// metrics endpoint (`btl serve --metrics ADDR`).
    Stats(StatsArgs),
    /// Replay a flight record (written by a module with
    /// `btl_<component>_record` set when a peer was lost) into a fresh
    /// engine, and say whether it did the same.
    Replay(ReplayArgs),
    /// Run a measurement against `btl serve` on HOST:PORT.
    Connect(ConnectArgs),
    /// The second process of a local run (started by the first).
    #[command(hide = true)]
    Peer(PeerArgs),
    /// A CPU-bound process for `--load` (spins until killed).
    #[command(hide = true)]
    Spin,
    /// The idle peers of a local run's `--idle` (started by the first).
    #[command(hide = true)]
    Idle(IdleCmd),
}

#[derive(Debug, Clone, clap::Args)]
struct IdleCmd {
    #[arg(long)]
    job: u64,
    #[arg(long)]
    dir: PathBuf,
    #[arg(long)]
    count: u32,
    #[arg(long = "btl")]
    btl: String,
    #[arg(long)]
    param_file: Option<PathBuf>,
}

/// How a waiting process moves the BTL forward.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum WaitMode {
    /// Busy-poll (lowest latency; a core each).
    Poll,
    /// Spin briefly, then block in the poller.
    Block,
    /// Busy-poll, giving the core away whenever nothing came (for more
    /// processes than cores).
    Yield,
}

impl From<WaitMode> for Waiting {
    fn from(w: WaitMode) -> Self {
        match w {
            WaitMode::Poll => Waiting::Poll,
            WaitMode::Block => Waiting::Block,
            WaitMode::Yield => Waiting::Yield,
        }
    }
}

#[derive(Debug, Clone, clap::Args)]
struct RunArgs {
    /// The BTLs to choose from, as the `btl` parameter takes them: `sm`,
    /// `tcp`, `udp`, `self` (one process), `^sm`, `verbs` (alone). The
    /// two processes meet over the best one that reaches across; by
    /// default what the parameter's sources say (`BTL`, the parameter
    /// file), else `self,sm,tcp`: shared memory. `btl connect` takes `tcp`
    /// or `udp`.
    #[arg(long = "btl", value_name = "LIST")]
    btl: Option<String>,
    /// Smallest message size (k, M suffixes).
    #[arg(long, default_value = "1", value_parser = parse_size)]
    min_size: usize,
    /// Largest message size (k, M suffixes).
    #[arg(long, default_value = "4M", value_parser = parse_size)]
    max_size: usize,
    /// Timed iterations per size, at every size; by default 1000 round
    /// trips (20 windows for bw, 200 for rate), fewer for large sizes.
    #[arg(long)]
    iters: Option<u32>,
    /// Untimed iterations per size first (default: a tenth of them).
    #[arg(long)]
    warmup: Option<u32>,
    /// Messages in flight per window (bw, rate).
    #[arg(long, default_value_t = 64)]
    window: u32,
    /// How both processes wait.
    #[arg(long, value_enum, default_value = "poll")]
    wait: WaitMode,
    /// Print JSON instead of a table.
    #[arg(long)]
    json: bool,
    /// Read parameters from this file.
    #[arg(long, value_name = "PATH")]
    param_file: Option<PathBuf>,
    /// Also run the same measurement over a plain socket (one write per
    /// message) between the same two processes, and print the ratios: a
    /// TCP connection for tcp, a Unix stream socket and one thread's
    /// memcpy for sm.
    #[arg(long)]
    baseline: bool,
    /// With --baseline: draw both as an SVG chart at this path.
    #[arg(long, value_name = "PATH", requires = "baseline")]
    svg: Option<PathBuf>,
    /// Start this many CPU-bound processes for the length of the run, to
    /// see how waiting holds up when cores are shared.
    #[arg(long, default_value_t = 0)]
    load: u32,
    /// Connect this many idle peers to the second process before the run
    /// (modules of a third process that only keep their connections
    /// alive): what one message costs beside many connected peers. Over
    /// `--btl tcp` or `--btl udp`; the second process is given peer slots
    /// for them (`btl_<c>_max_peers`).
    #[arg(long, default_value_t = 0, value_parser = clap::value_parser!(u32).range(0..=16000))]
    idle: u32,
    /// Pin this process to the first CPU and the peer process to the
    /// second (`0,1`): a measurement whose two sides share a core, or
    /// move between cores, varies from run to run. By default the two
    /// processes of `pingpong`, `bw` and `rate` are pinned to the first
    /// two CPUs they may run on, as `mpirun --bind-to core` does.
    #[arg(long, value_name = "LEAD,PEER", value_parser = parse_cpus)]
    cpus: Option<(usize, usize)>,
    /// Pin neither process: let the scheduler place them.
    #[arg(long, conflicts_with = "cpus")]
    no_pin: bool,
}

impl RunArgs {
    /// The CPUs the two processes run on: `--cpus`, else (unless
    /// `--no-pin`) the first two this process may run on, if it may run
    /// on two.
    fn pinning(&self) -> Option<(usize, usize)> {
        if self.no_pin {
            return None;
        }
        self.cpus.or_else(|| {
            let cpus: Vec<usize> = core_affinity::get_core_ids()
                .unwrap_or_default()
                .iter()
                .map(|c| c.id)
                .collect();
            first_two(&cpus)
        })
    }
}

/// The first two of `cpus`, if there are two.
fn first_two(cpus: &[usize]) -> Option<(usize, usize)> {
    match cpus {
        [a, b, ..] => Some((*a, *b)),
        _ => None,
    }
}

/// How a run's processes are placed, for its title.
fn placement(pinning: Option<(usize, usize)>) -> String {
    match pinning {
        Some((lead, peer)) => format!("pinned to CPUs {lead} and {peer}"),
        None => "not pinned".into(),
    }
}

/// `--cpus LEAD,PEER`.
fn parse_cpus(s: &str) -> Result<(usize, usize), String> {
    let (lead, peer) = s.split_once(',').ok_or("two CPU numbers, as LEAD,PEER")?;
    let number = |n: &str| {
        n.trim()
            .parse::<usize>()
            .map_err(|_| format!("{n:?} is not a CPU number"))
    };
    Ok((number(lead)?, number(peer)?))
}

/// `cpu` as a core this process may run on.
fn core(cpu: usize) -> Result<core_affinity::CoreId, String> {
    core_affinity::get_core_ids()
        .unwrap_or_default()
        .into_iter()
        .find(|c| c.id == cpu)
        .ok_or_else(|| format!("CPU {cpu} is not one this process may run on"))
}

/// Pins the calling thread, and the threads it starts later, to `cpu`.
fn pin_to(cpu: usize) -> Result<(), String> {
    if core_affinity::set_for_current(core(cpu)?) {
        Ok(())
    } else {
        Err(format!("could not pin to CPU {cpu}"))
    }
}

#[derive(Debug, clap::Args)]
struct ServeArgs {
    /// The BTLs to serve on, in the `btl` parameter's syntax (`tcp`,
    /// `udp`, `tcp,udp`); with --tap, `tcp` or `udp`.
    #[arg(long, default_value = "tcp")]
    btl: String,
    /// Largest message a client may send (k, M suffixes): what the server
    /// holds for one client at most, and the longest reply it sends.
    #[arg(long, default_value = "4M", value_parser = parse_size)]
    max_size: usize,
    /// How to wait between messages.
    #[arg(long, value_enum, default_value = "block")]
    wait: WaitMode,
    /// Read parameters from this file.
    #[arg(long, value_name = "PATH")]
    param_file: Option<PathBuf>,
    /// Publish this server's card (every address it listens on) in DIR,
    /// a directory `btl connect --dir DIR` also reaches (a shared
    /// filesystem): the client then pairs all of them, one link each.
    #[arg(long, value_name = "DIR", conflicts_with = "tap")]
    dir: Option<PathBuf>,
    /// Serve on btl's own TCP/IP stack (the engine over smoltcp, as a
    /// board runs it) attached to this TAP device, which must exist and
    /// be up, rather than on the kernel's sockets.
    #[arg(long, value_name = "DEVICE", requires = "address")]
    tap: Option<String>,
    /// With --tap: this server's address on the TAP's subnet
    /// (ADDRESS/PREFIX, such as 10.77.0.2/24).
    #[arg(long, value_name = "ADDRESS/PREFIX", requires = "tap")]
    address: Option<String>,
    /// With --tap: the port to listen on.
    #[arg(long, default_value = "7000", requires = "tap")]
    port: u16,
    /// Serve without a job key. By default the server uses $BTL_JOB_KEY,
    /// or makes a key and prints it with its address, and only clients
    /// that prove it are served; without one, anyone who reaches the port
    /// can hold a client slot (one address at most a tenth of them).
    #[arg(long)]
    no_key: bool,
    /// Serve Prometheus metrics at ADDR (HOST:PORT, such as
    /// 127.0.0.1:9464): each module's and each peer's counters at
    /// http://ADDR/metrics, which `btl stats ADDR` prints as a table.
    #[arg(long, value_name = "ADDR", conflicts_with = "tap")]
    metrics: Option<String>,
}

#[derive(Debug, clap::Args)]
struct ReplayArgs {
    /// The record file.
    file: PathBuf,
    /// Print the first N calls of the record, as the engine took them.
    #[arg(long, value_name = "N")]
    list: Option<usize>,
}

#[derive(Debug, clap::Args)]
struct StatsArgs {
    /// The metrics endpoint: HOST:PORT, as `--metrics` was given.
    addr: String,
    /// Print the exposition as it came instead of the table.
    #[arg(long)]
    raw: bool,
}

#[derive(Debug, clap::Args)]
struct ConnectArgs {
    /// `btl serve`'s address: HOST:PORT as it printed it, or an endpoint
    /// address (`inet:tcp:HOST@PORT`, `inet6:dgram:HOST@PORT` with `--btl
    /// udp`, or an lnet address such as `10.0.2.15@tcp:12345:34:123`).
    /// Or give `--dir`.
    #[arg(required_unless_present = "dir")]
    address: Option<String>,
    /// Find the server's card in DIR (see `btl serve --dir`).
    #[arg(long, value_name = "DIR", conflicts_with = "address")]
    dir: Option<PathBuf>,
    /// The job key the server printed (`btl serve`); $BTL_JOB_KEY works
    /// too, and keeps the key out of the process list.
    #[arg(long, value_name = "KEY")]
    key: Option<String>,
    /// The measurement.
    #[arg(long, value_enum, default_value = "pingpong")]
    test: TestName,
    #[command(flatten)]
    run: RunArgs,
}

#[derive(Debug, Clone, Copy, clap::ValueEnum)]
enum TestName {
    Pingpong,
    Bw,
    Rate,
}

#[derive(Debug, clap::Args)]
struct PeerArgs {
    #[arg(long = "btl")]
    btl: Option<String>,
    #[arg(long)]
    max_size: usize,
    #[arg(long)]
    job: u64,
    #[arg(long)]
    dir: PathBuf,
    #[arg(long)]
    window: u32,
    #[arg(long, value_enum)]
    wait: WaitMode,
    #[arg(long)]
    param_file: Option<PathBuf>,
    #[arg(long)]
    baseline: bool,
    #[arg(long)]
    cpu: Option<usize>,
}

#[derive(Debug, Clone, clap::Args)]
struct AlltoallArgs {
    /// The BTLs to choose from for each pair, as the `btl` parameter takes
    /// them (default: what the parameter's sources say, else
    /// `self,sm,tcp`).
    #[arg(long = "btl", value_name = "LIST")]
    btl: Option<String>,
    /// Processes in the job, when no launcher started this one: this many
    /// are started on this host (or, with --shared-dir, joined).
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u32).range(1..=1024))]
    np: u32,
    /// Message sizes, comma-separated (k, M suffixes).
    #[arg(long, value_delimiter = ',', default_value = "8,4k,64k,1M", value_parser = parse_size)]
    sizes: Vec<usize>,
    /// Timed round trips per pair and size (fewer for large messages).
    #[arg(long, default_value_t = 200)]
    iters: u32,
    /// Messages in flight per window in the bandwidth rounds.
    #[arg(long, default_value_t = 16)]
    window: u32,
    /// How every process waits (default: poll while the processes of a
    /// host have a core each, else yield).
    #[arg(long, value_enum)]
    wait: Option<WaitMode>,
    /// Print JSON instead of a table.
    #[arg(long)]
    json: bool,
    /// Read parameters from this file.
    #[arg(long, value_name = "PATH")]
    param_file: Option<PathBuf>,
    /// Join a job of --np processes started by hand or by a script: this
    /// one is named by BTL_JOB and BTL_RANK, proves BTL_JOB_KEY if set,
    /// and finds the others' cards in DIR, a directory they all reach (one
    /// host's, or a shared filesystem's).
    #[arg(long, value_name = "DIR")]
    shared_dir: Option<PathBuf>,
    /// Keep TCP on loopback (the processes this command starts itself).
    #[arg(long, hide = true)]
    loopback: bool,
}

#[derive(Debug, clap::Args)]
struct InfoArgs {
    /// Show only the parameters of FRAMEWORK and COMPONENT (`all` matches
    /// any; `--param btl all`, `--param btl tcp`).
    #[arg(long, num_args = 2, value_names = ["FRAMEWORK", "COMPONENT"])]
    param: Option<Vec<String>>,
    /// Show parameters up to this level: 1-3 users, 4-6 tuners, 7-9 developers.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u8).range(1..=9))]
    level: u8,
    /// Print JSON instead of text.
    #[arg(long)]
    json: bool,
    /// Read parameters from this file instead of $BTL_PARAM_FILE or
    /// ~/.config/btl/params.conf (lines of `name = value`).
    #[arg(long, value_name = "PATH")]
    param_file: Option<PathBuf>,
}

/// Why the command failed.
enum Failure {
    /// It was asked something it cannot do: exit 2, as for what clap
    /// refuses.
    Usage(String),
    /// The run failed: exit 1.
    Run(String),
}

impl From<String> for Failure {
    fn from(message: String) -> Self {
        Failure::Run(message)
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    // A measuring client prints its one error line itself; the warnings of
    // the links it went through would only say it again. A server logs its
    // refusals.
    let default_log = match cli.command {
        Command::Serve(_) | Command::Info(_) => "warn",
        _ => "error",
    };
    // The only subscriber of this process: it cannot be there already.
    let _ = btl_std::logging::init(default_log);
    // The second process of a local run has the first's environment, which
    // the first has spoken of.
    if !matches!(
        cli.command,
        Command::Peer(_) | Command::Spin | Command::Idle(_)
    ) {
        say_environment_mistakes();
    }
    let result = match cli.command {
        Command::Info(args) => info(args),
        Command::Pingpong(args) => run_local(Test::PingPong, args),
        Command::Bw(args) => run_local(Test::Bandwidth, args),
        Command::Rate(args) => run_local(Test::Rate, args),
        Command::Alltoall(args) => alltoall(args),
        Command::Serve(args) => serve(args),
        Command::Stats(args) => stats(args),
        Command::Replay(args) => replay(args),
        Command::Connect(args) => connect(args),
        Command::Peer(args) => peer(args).map_err(Failure::Run),
        Command::Idle(args) => btl_cli::idle::serve(
            btl_cli::idle::IdleArgs {
                job: args.job,
                dir: args.dir,
                count: args.count,
                btl: args.btl,
                param_file: args.param_file,
            },
            PEER_START,
        )
        .map_err(Failure::Run),
        Command::Spin => loop {
            std::hint::spin_loop();
        },
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(Failure::Usage(message)) => {
            eprintln!("btl: {message}");
            ExitCode::from(2)
        }
        Err(Failure::Run(message)) => {
            eprintln!("btl: {message}");
            ExitCode::from(1)
        }
    }
}

/// Says once, on stderr whatever the log level, each `BTL_*` variable
/// that is no parameter of this build (verbs included) and each unknown
/// component in `BTL`: set by mistake, they would be ignored silently.
fn say_environment_mistakes() {
    if !btl_std::config::sources::claim_environment_mistakes() {
        return;
    }
    let mut registry = Box::new(ParamRegistry::new());
    let params: &mut dyn Params = registry.as_mut();
    let Ok(mut components) = register_all(params) else {
        return;
    };
    let Ok(verbs) = btl_verbs::component::register(params) else {
        return;
    };
    components.push(verbs_listing(params, &verbs));
    let names: Vec<&str> = components.iter().map(|c| c.name.as_str()).collect();
    let mistakes = btl_std::config::sources::environment_mistakes(params, &names, std::env::vars());
    for mistake in mistakes {
        eprintln!("btl: warning: {mistake}");
    }
}

fn info(args: InfoArgs) -> Result<(), Failure> {
    let mut registry = Box::new(ParamRegistry::new());
    let params: &mut dyn Params = registry.as_mut();
    let mut components = register_all(params).map_err(|e| e.to_string())?;
    let verbs = btl_verbs::component::register(params).map_err(|e| e.to_string())?;

    let env = |var: &str| std::env::var(var).ok();
    let param_file = args.param_file.or_else(|| default_param_file(env));
    if let Some(path) = &param_file {
        let unknown = apply_file(params, path).map_err(|e| Failure::Usage(e.to_string()))?;
        for u in unknown {
            eprintln!(
                "btl: warning: {}:{}: no parameter `{}` in this build",
                path.display(),
                u.line,
                u.name
            );
        }
    }
    apply_environment(params, env).map_err(|e| Failure::Usage(e.to_string()))?;
    components.push(verbs_listing(params, &verbs));

    let any = |s: String| (s != "all").then_some(s);
    let (framework, component) = match args.param {
        Some(v) => {
            let mut v = v.into_iter();
            (v.next().and_then(any), v.next().and_then(any))
        }
        None => (None, None),
    };
    let filter = Filter {
        framework,
        component,
        level: args.level,
    };
    let list = params
        .find(BTL_FRAMEWORK)
        .and_then(|id| params.list(id).ok())
        .cloned()
        .unwrap_or_default();
    let selection = Selection::of(&list, &components, &[btl_cli::launch::verbs_offer()]);
    let report = Report::gather(
        BTL_FRAMEWORK,
        BTL_FRAMEWORK_VERSION,
        components,
        selection,
        params,
        param_file,
        &filter,
    );
    let text = if args.json {
        report.to_json() + "\n"
    } else {
        report.to_string()
    };
    Ok(write_stdout(&text)?)
}

/// The verbs component as `btl info` lists it: whether it can run here
/// with the parameters' values, and why not.
fn verbs_listing(params: &dyn Params, ids: &btl_verbs::component::VerbsParams) -> ComponentInfo {
    use btl_verbs::component;
    ComponentInfo {
        framework: BTL_FRAMEWORK.to_owned(),
        name: component::NAME.to_owned(),
        version: component::VERSION.to_string(),
        framework_version: component::FRAMEWORK_VERSION.to_string(),
        unavailable: component::probe(params, ids)
            .err()
            .map(|why| why.reason().to_owned()),
    }
}

/// Writes to stdout; a reader that went away (`btl info | head`) is not an
/// error.
fn write_stdout(text: &str) -> Result<(), String> {
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => Err(e.to_string()),
        _ => Ok(()),
    }
}

/// A size with an optional k/M/G suffix.
fn parse_size(text: &str) -> Result<usize, String> {
    let bytes = btl_core::mca::parse_size(text).map_err(|e| e.to_string())?;
    usize::try_from(bytes).map_err(|_| format!("{text} is too large"))
}

/// Job number of `btl serve`: a client that reaches it by its address
/// learns it from its handshake; one that finds its card in `--dir` looks
/// it up by it.
const REMOTE_JOB: u64 = 0x6274_6c00;
/// How long a local run's peer may take to appear.
const PEER_START: std::time::Duration = std::time::Duration::from_secs(30);

fn plan(test: Test, args: &RunArgs) -> Result<Plan, Failure> {
    if args.min_size > args.max_size {
        return Err(Failure::Usage(format!(
            "--min-size {} is larger than --max-size {}",
            args.min_size, args.max_size
        )));
    }
    let sizes = match test {
        // The rate of small messages: 8 bytes unless told otherwise.
        Test::Rate if args.min_size == 1 => vec![8],
        Test::Rate => vec![args.min_size],
        _ => bench::sizes(args.min_size, args.max_size),
    };
    let iters = args.iters.unwrap_or(match test {
        Test::PingPong => 1000,
        Test::Bandwidth => 20,
        Test::Rate => 200,
    });
    Ok(Plan {
        test,
        sizes,
        warmup: args.warmup.unwrap_or((iters / 10).max(2)),
        iters,
        exact: args.iters.is_some(),
        window: args.window.max(1),
    })
}

fn test_name(test: Test) -> &'static str {
    match test {
        Test::PingPong => "pingpong",
        Test::Bandwidth => "bw",
        Test::Rate => "rate",
    }
}

/// Runs `plan` on `btl` against `peer`, printing as it goes.
fn lead<B: Driven>(
    btl: &mut B,
    peer: EndpointId,
    plan: &Plan,
    args: &RunArgs,
    title: &str,
) -> Result<Vec<bench::Row>, BenchError> {
    let table = !args.json;
    let bar = progress_bar(plan.sizes.len() as u64, args.json);
    if table {
        say(format!("# {title}"));
        say(format!(
            "# {:>9} {:>7} {:>12} {:>12} {:>12} {:>12}",
            "size", "iters", "median_us", "p99_us", "MiB/s", "msg/s"
        ));
    }
    let rows = bench::lead(btl, peer, plan, args.wait.into(), |r| {
        if table {
            bar.suspend(|| {
                say(format!(
                    "  {:>9} {:>7} {:>12.2} {:>12.2} {:>12.1} {:>12.0}",
                    r.size, r.iters, r.median_us, r.p99_us, r.mib_per_s, r.msgs_per_s
                ))
            });
        }
        bar.inc(1);
    })?;
    bar.finish_and_clear();
    if args.json {
        let doc = serde_json::json!({
            "test": test_name(plan.test),
            "btl": title,
            "cpus": args.pinning().map(|(lead, peer)| [lead, peer]),
            "rows": rows,
        });
        say(format!("{doc}"));
    }
    Ok(rows)
}

/// Prints a line of a report; a reader that went away (`| head`) is no
/// error.
fn say(line: String) {
    let _ = write_stdout(&(line + "\n"));
}

/// A progress bar on stderr when it is a terminal and JSON is not asked.
fn progress_bar(len: u64, json: bool) -> indicatif::ProgressBar {
    use std::io::IsTerminal;
    if json || !std::io::stderr().is_terminal() || len < 4 {
        return indicatif::ProgressBar::hidden();
    }
    indicatif::ProgressBar::new(len)
}

/// Whether a local run's `--btl` list asks for `self` alone: one
/// process, no peer to start.
fn within(list: Option<&str>) -> bool {
    list.map(str::trim) == Some("self")
}

/// `btl pingpong|bw|rate`: the second process is started here, on
/// loopback, unless the BTL is `self`; the two meet over the best BTL the
/// `--btl` list (else the `btl` parameter) selects.
fn run_local(test: Test, args: RunArgs) -> Result<(), Failure> {
    let plan = plan(test, &args)?;
    let sources = ParamSources::new(args.param_file.clone(), true);
    let mode = match args.wait {
        WaitMode::Poll => "busy-polling",
        WaitMode::Yield => "polling and yielding",
        WaitMode::Block => "blocking",
    };
    let list = args.btl.as_deref();
    if within(list) {
        let me = ProcName::new(0, 0);
        let mut m = open_bml(&sources, me, None, list)?;
        let ep = m.reach(me, PEER_START).map_err(|e| e.to_string())?;
        let title = format!("btl {} over self, one process, {mode}", test_name(test));
        return lead(&mut m, ep, &plan, &args, &title)
            .map(|_| ())
            .map_err(|e| Failure::Run(e.to_string()));
    }
    let idle_over = match (args.idle, list.map(str::trim)) {
        (0, _) => None,
        (_, Some(l)) if btl_cli::idle::NETWORKS.contains(&l) => Some(l),
        _ => {
            return Err(Failure::Usage(
                "--idle connects its peers over a network: give --btl tcp or --btl udp".into(),
            ));
        }
    };
    let _load = Load::start(args.load)?;
    let pinning = args.pinning();
    if let Some((lead, peer)) = pinning {
        core(lead).and(core(peer)).map_err(Failure::Usage)?;
    }
    let job = u64::from(std::process::id()) << 16 | 0xb7;
    let dir = RunDir::new(job);
    let boot = Arc::new(SharedDir::new(dir.path()));
    let peer_name = ProcName::new(job, 1);
    let me = ProcName::new(job, 0);
    // What cannot open here (no RDMA device, a bad list) is known before
    // a peer process is started for nothing.
    let mut m = open_bml(&sources, me, Some(boot.clone()), list)?;
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let mut cmd = std::process::Command::new(exe);
    cmd.arg("peer")
        .args(["--job", &job.to_string()])
        .arg("--dir")
        .arg(dir.path())
        .args(["--window", &plan.window.to_string()])
        .args(["--max-size", &args.max_size.to_string()])
        .args([
            "--wait",
            match args.wait {
                WaitMode::Poll => "poll",
                WaitMode::Block => "block",
                WaitMode::Yield => "yield",
            },
        ]);
    if let Some(list) = list {
        cmd.args(["--btl", list]);
    }
    if let Some(f) = &sources.file {
        cmd.arg("--param-file").arg(f);
    }
    if args.baseline {
        cmd.arg("--baseline");
    }
    if let Some((_, peer)) = pinning {
        cmd.args(["--cpu", &peer.to_string()]);
    }
    if let Some(component) = idle_over {
        cmd.envs(btl_cli::idle::answering_environment(component, args.idle));
    }
    let mut child = cmd
        .spawn()
        .map_err(|e| format!("starting the peer process: {e}"))?;
    // Pinned only now: the peer inherits no mask that hides its own CPU.
    if let Some((lead, _)) = pinning
        && let Err(e) = pin_to(lead)
    {
        let _ = child.kill();
        return Err(Failure::Run(e));
    }
    let to = format!("the peer process {peer_name}");
    let title = |over: &str| {
        let place = if over == "sm" {
            "2 processes of one host"
        } else {
            "2 processes on loopback"
        };
        let idle = match args.idle {
            0 => String::new(),
            n => format!(", {n} idle peers connected to the second"),
        };
        format!(
            "btl {} over {over}, {place}{idle}, {mode}, {}",
            test_name(test),
            placement(pinning)
        )
    };
    let mut idle = None;
    let result = m
        .reach(peer_name, PEER_START)
        .map_err(|e| e.to_string())
        .and_then(|ep| {
            if let Some(component) = idle_over {
                let run = btl_cli::idle::IdleRun {
                    job,
                    dir: dir.path(),
                    component,
                    count: args.idle,
                    param_file: sources.file.as_deref(),
                };
                let exe = std::env::current_exe().map_err(|e| e.to_string())?;
                idle = Some(btl_cli::idle::IdlePeers::start(&exe, &run, PEER_START)?);
            }
            let over = m.carrier(ep).unwrap_or("bml");
            let title = title(over);
            lead(&mut m, ep, &plan, &args, &title)
                .map(|rows| (rows, over, title))
                .map_err(|e| failure_with(&e, &to))
        });
    drop(idle);
    let result = match result {
        Ok((rows, over, title)) if args.baseline => {
            baseline(&plan, &args, over, dir.path(), &rows, &title)
        }
        other => other.map(|_| ()),
    };
    if result.is_err() {
        let _ = child.kill();
    }
    let status = child.wait().map_err(|e| e.to_string())?;
    result?;
    if !status.success() {
        return Err(format!("the peer process failed: {status}").into());
    }
    Ok(())
}

/// A run's failure as the user reads it: why `to` was lost, in words.
fn failure_with(e: &BenchError, to: &str) -> String {
    let Some(BtlError::PeerLost(reason)) = e.btl_error() else {
        return e.to_string();
    };
    match reason {
        LostReason::Refused => format!("connection refused by {to}: nothing listens there"),
        LostReason::NoRoom => format!("{to} refused: no room for another client"),
        LostReason::AuthFailed => {
            format!("{to} refused the handshake: job key not proven (BTL_JOB_KEY differs)")
        }
        LostReason::VersionMismatch => {
            format!("{to} refused the handshake: another protocol version")
        }
        LostReason::Unreachable => format!("no connection could be made to {to}"),
        LostReason::Timeout => format!("{to} did not answer within the peer timeout"),
        LostReason::HandshakeTimeout => format!(
            "{to} did not complete a handshake within the handshake timeout (does a server listen there?)"
        ),
        LostReason::Stalled => format!(
            "{to} stopped taking what was sent to it (nothing acknowledged within the peer timeout)"
        ),
        LostReason::ProtocolViolation => format!("{to} broke the protocol"),
        LostReason::Closed => format!("{to} closed the connection"),
        LostReason::Left => format!("{to} left: it shut down"),
        LostReason::Restarted => format!("{to} restarted"),
        LostReason::Removed => format!("{to} was removed"),
        LostReason::Exited => format!("{to} ended without a goodbye (killed or crashed)"),
        LostReason::Duplicate => format!("{to} is already a peer of this process"),
    }
}

/// Where the second process of a `--baseline` run tells its raw port.
const RAW_PORT_FILE: &str = "raw.port";

/// Where the second process of a `--baseline` run over shared memory
/// listens on a Unix stream socket.
const RAW_SOCKET_FILE: &str = "raw.sock";

/// The raw-socket half of a `--baseline` run, after the BTL's: the same
/// plan over a plain socket to the peer process (TCP, or a Unix stream
/// socket for `sm`, with one thread's memcpy beside it), then the ratios.
fn baseline(
    plan: &Plan,
    args: &RunArgs,
    over: &str,
    dir: &std::path::Path,
    btl_rows: &[bench::Row],
    title: &str,
) -> Result<(), String> {
    let print = |r: &bench::Row| {
        if !args.json {
            say(format!(
                "  {:>9} {:>7} {:>12.2} {:>12.2} {:>12.1} {:>12.0}",
                r.size, r.iters, r.median_us, r.p99_us, r.mib_per_s, r.msgs_per_s
            ));
        }
    };
    let (name, raw_rows) = if over == "sm" {
        let stream = wait_for_peer(|| {
            std::os::unix::net::UnixStream::connect(dir.join(RAW_SOCKET_FILE)).ok()
        })?;
        if !args.json {
            say("# the same over a Unix stream socket, one write per message".into());
        }
        let rows = btl_cli::raw::lead(stream, plan, args.wait.into(), print);
        ("raw unix", rows)
    } else if over == "tcp" {
        let file = dir.join(RAW_PORT_FILE);
        let port: u16 = wait_for_peer(|| {
            std::fs::read_to_string(&file)
                .ok()
                .and_then(|t| t.trim().parse().ok())
        })?;
        let stream =
            std::net::TcpStream::connect(("127.0.0.1", port)).map_err(|e| e.to_string())?;
        if !args.json {
            say("# the same over a plain TCP socket, one write per message".into());
        }
        let rows = btl_cli::raw::lead(stream, plan, args.wait.into(), print);
        ("raw tcp", rows)
    } else {
        return Err(format!(
            "--baseline compares with a plain socket, for a run over tcp or sm; this one went over {over}"
        ));
    };
    let raw_rows = raw_rows.map_err(|e| format!("raw socket: {e}"))?;
    let copies = (over == "sm").then(|| btl_cli::raw::memcpy(plan));
    if args.json {
        say(serde_json::json!({ "baseline": name, "rows": raw_rows }).to_string());
        if let Some(rows) = &copies {
            say(serde_json::json!({ "baseline": "memcpy", "rows": rows }).to_string());
        }
    } else {
        if let Some(rows) = &copies {
            say("# one thread's memcpy of each size, as often: the time of one copy".into());
            rows.iter().for_each(print);
        }
        say(format!(
            "# btl / {name}: latency (lower is better), bandwidth and rate (higher is better)"
        ));
        say(format!(
            "# {:>9} {:>12} {:>12} {:>12}",
            "size", "latency", "MiB/s", "msg/s"
        ));
        for (b, r) in btl_rows.iter().zip(&raw_rows) {
            say(format!(
                "  {:>9} {:>12.2} {:>12.2} {:>12.2}",
                b.size,
                b.median_us / r.median_us.max(1e-9),
                b.mib_per_s / r.mib_per_s.max(1e-9),
                b.msgs_per_s / r.msgs_per_s.max(1e-9)
            ));
        }
    }
    if let Some(path) = &args.svg {
        let btl_name = format!("btl {over}");
        btl_cli::plot::compare(
            path,
            title,
            plan.test,
            [(&btl_name, btl_rows), (name, &raw_rows)],
        )
        .map_err(|e| format!("drawing {}: {e}", path.display()))?;
    }
    Ok(())
}

/// CPU-bound processes running for as long as this lives (`--load`).
struct Load(Vec<std::process::Child>);

impl Load {
    fn start(n: u32) -> Result<Self, String> {
        let exe = std::env::current_exe().map_err(|e| e.to_string())?;
        let children = (0..n)
            .map(|_| {
                std::process::Command::new(&exe)
                    .arg("spin")
                    .spawn()
                    .map_err(|e| format!("starting a load process: {e}"))
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Load(children))
    }
}

impl Drop for Load {
    fn drop(&mut self) {
        for c in &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// What `found` finds once the peer process has opened its raw socket,
/// tried until [`PEER_START`] has passed.
fn wait_for_peer<T>(mut found: impl FnMut() -> Option<T>) -> Result<T, String> {
    let start = std::time::Instant::now();
    loop {
        if let Some(t) = found() {
            return Ok(t);
        }
        if start.elapsed() > PEER_START {
            return Err("the peer process never opened its raw socket".into());
        }
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
}

/// The raw socket of a `--baseline` run's peer process.
enum RawListener {
    Tcp(std::net::TcpListener),
    Unix(std::os::unix::net::UnixListener),
}

impl RawListener {
    /// Listens as the baseline of a run over `over` does (a Unix socket
    /// for sm, else TCP), and says where through the run's directory.
    fn open(over: &str, dir: &std::path::Path) -> Result<Self, String> {
        if over == "sm" {
            std::fs::create_dir_all(dir).map_err(|e| e.to_string())?;
            let listener = std::os::unix::net::UnixListener::bind(dir.join(RAW_SOCKET_FILE))
                .map_err(|e| e.to_string())?;
            return Ok(RawListener::Unix(listener));
        }
        raw_listener(dir).map(RawListener::Tcp)
    }

    /// Answers the lead's baseline run.
    fn answer(&self, wait: Waiting) -> Result<(), String> {
        let answered = match self {
            RawListener::Tcp(l) => l
                .accept()
                .and_then(|(stream, _)| btl_cli::raw::answer(stream, wait)),
            RawListener::Unix(l) => l
                .accept()
                .and_then(|(stream, _)| btl_cli::raw::answer(stream, wait)),
        };
        answered.map_err(|e| format!("raw socket: {e}"))
    }
}

/// Opens the raw socket of a `--baseline` run and tells its port through
/// the run's directory.
fn raw_listener(dir: &std::path::Path) -> Result<std::net::TcpListener, String> {
    let listener = std::net::TcpListener::bind(("127.0.0.1", 0)).map_err(|e| e.to_string())?;
    let port = listener.local_addr().map_err(|e| e.to_string())?.port();
    let temp = dir.join(format!(".{RAW_PORT_FILE}"));
    std::fs::create_dir_all(dir).map_err(|e| e.to_string())?;
    std::fs::write(&temp, port.to_string()).map_err(|e| e.to_string())?;
    std::fs::rename(&temp, dir.join(RAW_PORT_FILE)).map_err(|e| e.to_string())?;
    Ok(listener)
}

/// The second process of a local run: answers until the first is done.
fn peer(args: PeerArgs) -> Result<(), String> {
    if let Some(cpu) = args.cpu {
        pin_to(cpu)?;
    }
    let sources = ParamSources::new(args.param_file, true);
    let boot = Arc::new(SharedDir::new(&args.dir));
    let me = ProcName::new(args.job, 1);
    let lead_name = ProcName::new(args.job, 0);
    let wait = args.wait.into();
    if within(args.btl.as_deref()) {
        return Err("a self run has no peer process".into());
    }
    let mut m = open_bml(&sources, me, Some(boot), args.btl.as_deref())?;
    let ep = m.reach(lead_name, PEER_START).map_err(|e| e.to_string())?;
    let over = m.carrier(ep).unwrap_or("bml");
    bench::answer(&mut m, args.max_size, wait, PEER_START).map_err(|e| e.to_string())?;
    if args.baseline {
        RawListener::open(over, &args.dir)?.answer(wait)?;
    }
    Ok(())
}

/// `btl alltoall`: one process of a job, or the job's processes started
/// here.
fn alltoall(args: AlltoallArgs) -> Result<(), Failure> {
    if args.sizes.is_empty() {
        return Err(Failure::Usage("--sizes names no size".into()));
    }
    let plan = AlltoallPlan {
        sizes: args.sizes.clone(),
        iters: args.iters.max(1),
        window: args.window.max(1),
    };
    let waiting = args.wait.map(Waiting::from);
    let rank = match &args.shared_dir {
        Some(dir) => job::Rank::from_dir(dir, args.np)?,
        None => {
            let joined = btl_std::bootstrap::Job::join().map_err(|e| e.to_string())?;
            match job::Rank::launched(&joined) {
                Some(rank) => rank,
                None => {
                    // Nobody launched this process: it starts the job here.
                    let dir = RunDir::new(u64::from(std::process::id()) << 16 | 0xa2a);
                    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
                    let mut child_args: Vec<String> = std::env::args().skip(1).collect();
                    child_args.push("--loopback".into());
                    return job::start_local(&exe, &child_args, args.np, dir.path())
                        .map_err(Failure::Run);
                }
            }
        }
    };
    let sources = ParamSources::new(args.param_file.clone(), args.loopback);
    let report = rank.run(&sources, args.btl.as_deref(), &plan, waiting)?;
    if let Some(report) = report {
        if args.json {
            println!(
                "{}",
                serde_json::to_string(&report).map_err(|e| e.to_string())?
            );
        } else {
            print!("{report}");
        }
    }
    Ok(())
}

/// `btl serve`: listens on the selected interfaces, prints how to connect,
/// and answers every client that comes, alone or together, until SIGINT
/// or SIGTERM; then it closes gracefully and prints what it served. No
/// client's failure ends it.
fn serve(args: ServeArgs) -> Result<(), Failure> {
    let stop = Arc::new(AtomicBool::new(false));
    for signal in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(signal, Arc::clone(&stop))
            .map_err(|e| format!("handling signal {signal}: {e}"))?;
    }
    // The key clients must prove: the environment's, else a fresh one
    // printed with the address, unless the operator says none.
    let mut sources = ParamSources::new(args.param_file.clone(), false);
    let printed_key = match (&sources.key, args.no_key) {
        (Some(_), _) => None,
        (None, true) => None,
        (None, false) => {
            let key = btl_cli::launch::fresh_job_key()?;
            sources = sources.with_key(Some(key.clone().into_bytes()));
            Some(key)
        }
    };
    let printed_key = printed_key.as_deref();
    let scratch = RunDir::new(REMOTE_JOB ^ u64::from(std::process::id()));
    let boot = Arc::new(SharedDir::new(
        args.dir.as_deref().unwrap_or(scratch.path()),
    ));
    let me = ProcName::new(REMOTE_JOB, 0);
    if let (Some(tap), Some(address)) = (&args.tap, &args.address) {
        return serve_tap(&args, tap, address, &sources, printed_key, me, &stop);
    }
    let mut m = open_bml(&sources, me, Some(boot), Some(&args.btl))?;
    let lines: Vec<String> = m
        .contacts()
        .iter()
        .map(|c| {
            let at = format!("{} {}", c.component, c.addr);
            connect_line(&at, &c.addr.to_string(), &c.component, printed_key)
        })
        .collect();
    if lines.is_empty() {
        return Err(Failure::Usage(format!(
            "--btl {} selects no module that listens for clients: name tcp or udp",
            args.btl
        )));
    }
    let mut exporter = match &args.metrics {
        Some(addr) => {
            let server = btl_std::metrics::MetricsServer::start(addr.as_str()).map_err(|e| {
                Failure::Usage(format!(
                    "--metrics {addr}: cannot listen there: {e} (name a free HOST:PORT, such as 127.0.0.1:9464)"
                ))
            })?;
            let at = server.local_addr();
            Some((server, at))
        }
        None => None,
    };
    let mut lines = lines;
    if let Some((_, at)) = &exporter {
        lines.push(format!("metrics at http://{at}/metrics: btl stats {at}"));
    }
    announce(&lines);
    let served = serve_until(&mut m, &args, &stop, |m| {
        if let Some((server, _)) = exporter.as_mut() {
            server.offer(m);
        }
    })?;
    let usage = m.usage();
    let summary = serde_json::json!({
        "runs": served.runs(),
        "dropped": served.dropped(),
        "peers": usage.peers,
        "links": usage.links,
        "registrations": usage.registrations,
        "refused": m.refusals(),
    });
    // What is owed goes out, then every client is told.
    let _ = m.flush(Duration::from_secs(1));
    m.finalize();
    say(format!("served: {summary}"));
    Ok(())
}

/// Serves the benchmark on `server` until `stop`: the side that served,
/// for its counts (runs ended, clients dropped for breaking the
/// benchmark's protocol).
fn serve_until<B: Driven>(
    server: &mut B,
    args: &ServeArgs,
    stop: &AtomicBool,
    mut each_turn: impl FnMut(&B),
) -> Result<Side, Failure> {
    let mut side = Side::new(server.btl(), args.max_size, 1).map_err(|e| e.to_string())?;
    let wait: Waiting = args.wait.into();
    while !stop.load(Ordering::Relaxed) {
        side.serve_once(server, wait);
        each_turn(server);
    }
    Ok(side)
}

/// `btl replay`: replays a flight record and says whether it matched.
fn replay(args: ReplayArgs) -> Result<(), Failure> {
    use btl_std::driver::recorder::Record;
    let record = Record::load(&args.file).map_err(|e| Failure::Run(e.to_string()))?;
    let s = &record.setup;
    println!(
        "record of {} process {} ({}): {} bytes of journal{}",
        s.component,
        s.config.me,
        record.why,
        record.journal.len(),
        if record.full {
            ", cut at its bound (btl_<component>_record)"
        } else {
            ""
        }
    );
    if let Some(n) = args.list {
        let mut offset = 0;
        for i in 0..n {
            let Ok((entry, len)) =
                btl_core::engine::journal::Entry::decode(&record.journal[offset..])
            else {
                break;
            };
            let text = format!("{:?}", entry.call);
            let text: String = text.chars().take(160).collect();
            println!("{i:>8} {text} -> {:016x}", entry.out);
            offset += len;
        }
    }
    if record.journal.is_empty() {
        return Err(Failure::Run(if record.full {
            "the record holds no call: its first did not fit btl_<component>_record; raise it"
                .into()
        } else {
            "the record holds no call: the module was not used".into()
        }));
    }
    match record.replay() {
        Ok(done) => {
            println!(
                "matched: {} calls replayed, {} transmits and {} events the same",
                done.entries, done.transmits, done.events
            );
            Ok(())
        }
        Err(e) => Err(Failure::Run(format!("did not match: {e}"))),
    }
}

/// `btl stats`: reads a process's metrics endpoint and prints its peers.
fn stats(args: StatsArgs) -> Result<(), Failure> {
    let text = btl_cli::stats::fetch(&args.addr).map_err(|e| Failure::Run(e.to_string()))?;
    if args.raw {
        print!("{text}");
    } else {
        print!("{}", btl_cli::stats::table(&btl_cli::stats::parse(&text)));
    }
    Ok(())
}

/// `btl serve --tap`: the same service on the engine over smoltcp,
/// attached to the TAP device `tap` at `address`.
fn serve_tap(
    args: &ServeArgs,
    tap: &str,
    address: &str,
    sources: &ParamSources,
    printed_key: Option<&str>,
    me: ProcName,
    stop: &AtomicBool,
) -> Result<(), Failure> {
    let cidr: smoltcp::wire::IpCidr = address
        .parse()
        .map_err(|_| Failure::Usage(format!("`{address}` is not ADDRESS/PREFIX")))?;
    let builder = sources.builder(me);
    let key = sources.key.as_deref();
    let at = format!("{}:{}", cidr.address(), args.port);
    let line = |component: &str| {
        let on = format!("{component} {at} (smoltcp on {tap})");
        connect_line(&on, &at, component, printed_key)
    };
    match args.btl.trim() {
        "tcp" => {
            let server = btl_cli::tap::tcp(&builder, me, key, tap, cidr, args.port)?;
            announce(&[line("tcp")]);
            serve_driven(server, args, stop)
        }
        "udp" => {
            let server = btl_cli::tap::udp(&builder, me, key, tap, cidr, args.port)?;
            announce(&[line("udp")]);
            serve_driven(server, args, stop)
        }
        other => Err(Failure::Usage(format!(
            "--tap serves tcp or udp, one of them, not {other}"
        ))),
    }
}

/// Serves the benchmark on `server` until `stop`; then prints one line,
/// `served: ` and a JSON object of the runs ended and clients dropped.
fn serve_driven<B: Driven>(
    mut server: B,
    args: &ServeArgs,
    stop: &AtomicBool,
) -> Result<(), Failure> {
    let side = serve_until(&mut server, args, stop, |_| {})?;
    let summary = serde_json::json!({ "runs": side.runs(), "dropped": side.dropped() });
    server.btl().finalize();
    for _ in 0..100 {
        server.step(Waiting::Poll);
    }
    say(format!("served: {summary}"));
    Ok(())
}

/// What `btl serve` prints for one address it listens `on`: the
/// command that measures it, with the job key the server made, if it made
/// one (a key from the environment is the operator's to hand out).
fn connect_line(on: &str, addr: &str, component: &str, key: Option<&str>) -> String {
    let key = key.map(|k| format!("BTL_JOB_KEY={k} ")).unwrap_or_default();
    format!("listening on {on}: {key}btl connect {addr} --btl {component}")
}

/// Prints where `btl serve` listens; a reader that went away is no error.
fn announce(lines: &[String]) {
    let mut out = std::io::stdout().lock();
    for line in lines {
        let _ = writeln!(out, "{line}");
    }
    let _ = out.flush();
}

/// How long `btl connect` waits for its server to listen and answer.
const SERVER_START: Duration = Duration::from_secs(10);

/// Where the server is, from what the user typed: HOST:PORT, or an
/// endpoint address, whose component (`tcp`, `udp`) the `--btl` list must
/// select if one is given; the address to connect to and the BTL list.
fn server_at(text: &str, btl: Option<&str>) -> Result<(String, String), Failure> {
    let list = btl.unwrap_or("tcp").to_owned();
    if !text.contains('@') {
        return Ok((text.to_owned(), list));
    }
    let contact = Contact::from_address(text).map_err(|e| {
        Failure::Usage(format!(
            "`{text}` is neither HOST:PORT nor an endpoint address: {e}"
        ))
    })?;
    let component = contact.component;
    match btl {
        Some(list) if list.trim() != component => Err(Failure::Usage(format!(
            "`{text}` is a {component} address: give --btl {component}"
        ))),
        _ => Ok((contact.addr.to_string(), component)),
    }
}

/// `btl connect ADDRESS`: runs a measurement against `btl serve`, which it
/// reaches by its address alone (or by its card in `--dir`).
fn connect(args: ConnectArgs) -> Result<(), Failure> {
    let test = match args.test {
        TestName::Pingpong => Test::PingPong,
        TestName::Bw => Test::Bandwidth,
        TestName::Rate => Test::Rate,
    };
    let run = args.run;
    let plan = plan(test, &run)?;
    let mut sources = ParamSources::new(run.param_file.clone(), false);
    if let Some(key) = args.key {
        sources = sources.with_key(Some(key.into_bytes()));
    }
    // A name of its own that no other client of the server has.
    let mut job = [0u8; 8];
    getrandom::fill(&mut job).map_err(|e| format!("the OS random generator: {e}"))?;
    let me = ProcName::new(u64::from_le_bytes(job) >> 1, 0);
    let (mut m, ep, to) = match (args.address, &args.dir) {
        (Some(address), _) => {
            let (at, list) = server_at(&address, run.btl.as_deref())?;
            let alone: Arc<dyn Bootstrap> =
                Arc::new(StaticPeers::new(Vec::new(), "a client of one server"));
            let mut m = open_bml(&sources, me, Some(alone), Some(&list))?;
            let (ep, _) = m.connect_to(&at, SERVER_START).map_err(|e| e.to_string())?;
            (m, ep, address)
        }
        (None, Some(dir)) => {
            let list = run.btl.as_deref().unwrap_or("tcp");
            let mut m = open_bml(
                &sources,
                me,
                Some(Arc::new(SharedDir::new(dir))),
                Some(list),
            )?;
            let server = ProcName::new(REMOTE_JOB, 0);
            let ep = m.reach(server, SERVER_START).map_err(|e| e.to_string())?;
            (m, ep, format!("(card in {})", dir.display()))
        }
        (None, None) => return Err(Failure::Usage("give the server's address or --dir".into())),
    };
    let over = m.carrier(ep).unwrap_or("bml");
    let title = format!("btl {} over {over} to {to}", test_name(test));
    let to = format!("the server at {to}");
    lead(&mut m, ep, &plan, &run, &title)
        .map(|_| ())
        .map_err(|e| Failure::Run(failure_with(&e, &to)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpus_are_two_numbers() {
        assert_eq!(parse_cpus("0,1"), Ok((0, 1)));
        assert_eq!(parse_cpus(" 3 , 2 "), Ok((3, 2)));
        assert!(parse_cpus("0").is_err());
        assert!(parse_cpus("0,x").is_err());
        assert!(parse_cpus("-1,0").is_err());
    }

    #[test]
    fn by_default_the_two_processes_take_the_first_two_cpus() {
        assert_eq!(first_two(&[2, 5, 7]), Some((2, 5)));
        assert_eq!(first_two(&[3]), None, "one CPU: nothing to pin apart");
        assert_eq!(first_two(&[]), None);
        assert_eq!(placement(Some((0, 1))), "pinned to CPUs 0 and 1");
        assert_eq!(placement(None), "not pinned");
    }

    #[test]
    fn a_cpu_this_process_cannot_run_on_is_refused() {
        assert!(core(usize::MAX).is_err());
    }
}
