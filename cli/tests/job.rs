//! `btl alltoall`: a job of several processes, each pair over the BTL the
//! rules choose, launched by the command itself, by hand in network
//! namespaces that stand for hosts, by `mpirun` and by `srun --mpi=pmix`
//! (the last two with feature `pmix`, which the test command turns on).

use std::process::{Command, Output};
use std::time::Duration;

use serde_json::Value;

/// How long a job of this file may take.
const LIMIT: Duration = Duration::from_secs(120);

/// `btl` with no parameter file or key of the user's.
fn btl() -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_btl"));
    clean(&mut cmd);
    cmd
}

/// Takes away what a user's environment could set for the run.
fn clean(cmd: &mut Command) {
    cmd.env_remove("BTL_PARAM_FILE")
        .env_remove("BTL")
        .env_remove("BTL_JOB_KEY")
        .env_remove("BTL_PMIX_EXCHANGE")
        .env(
            "XDG_CONFIG_HOME",
            std::env::temp_dir().join("btl-job-no-config"),
        );
}

/// Runs `cmd` to its end, within [`LIMIT`].
fn finish(cmd: &mut Command) -> Output {
    let child = cmd
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("the job starts");
    btl_tests::netns::Reaper(child).finish(LIMIT)
}

/// The report a successful job printed.
fn report(out: &Output) -> Value {
    assert!(
        out.status.success(),
        "the job failed: {}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text
        .lines()
        .rev()
        .find(|l| l.starts_with('{'))
        .unwrap_or_else(|| panic!("no report in: {text}"));
    serde_json::from_str(line).expect("the report is JSON")
}

/// The BTL of each pair, `(a, b, btl)`.
fn pairs(report: &Value) -> Vec<(u64, u64, String)> {
    report["pairs"]
        .as_array()
        .expect("pairs")
        .iter()
        .map(|p| {
            (
                p["a"].as_u64().expect("a"),
                p["b"].as_u64().expect("b"),
                p["btl"].as_str().expect("btl").to_owned(),
            )
        })
        .collect()
}

/// Checks a report of `ranks` processes that measured `sizes` with
/// `iters` round trips per pair: every pair's latency was measured and
/// bytes moved by messages and by puts; each pair went over the BTL
/// `expect(a, b)` names.
fn check(
    report: &Value,
    ranks: u64,
    sizes: &[u64],
    iters: u64,
    expect: impl Fn(u64, u64) -> &'static str,
) {
    assert_eq!(report["ranks"].as_u64(), Some(ranks), "{report}");
    let all = pairs(report);
    assert_eq!(all.len() as u64, ranks * (ranks + 1) / 2, "{report}");
    for (a, b, btl) in &all {
        assert_eq!(btl, expect(*a, *b), "pair {a}-{b}: {report}");
    }
    // sm moves a message larger than its rdma_pipeline_send_length by a
    // get from its sender's memory (tcp sends it in pieces).
    let by_gets = all.iter().all(|(a, b, btl)| a == b || btl == "sm");
    let measured = report["sizes"].as_array().expect("sizes");
    assert_eq!(measured.len(), sizes.len(), "{report}");
    for (m, &size) in measured.iter().zip(sizes) {
        assert_eq!(m["size"].as_u64(), Some(size), "{report}");
        let cross = ranks * (ranks - 1) / 2;
        let trips = iters.min((32 << 20) / (2 * size)).max(1).max(10.min(iters));
        assert_eq!(m["samples"].as_u64(), Some(cross * trips), "{report}");
        if cross > 0 {
            for key in ["median_us", "p99_us", "aggregate_mb_s", "put_mb_s"] {
                assert!(m[key].as_f64().is_some_and(|v| v > 0.0), "{key}: {report}");
            }
            // Messages, puts and gets all crossed.
            if by_gets && size == 1 << 20 {
                assert!(m["gets"].as_u64().is_some_and(|g| g > 0), "gets: {report}");
            }
        }
    }
}

/// Same host: `self` with itself, `sm` with the others.
fn one_host(a: u64, b: u64) -> &'static str {
    if a == b { "self" } else { "sm" }
}

/// `self` with itself, `tcp` with the others.
fn over_tcp(a: u64, b: u64) -> &'static str {
    if a == b { "self" } else { "tcp" }
}

const ARGS: [&str; 6] = ["alltoall", "--json", "--sizes", "8,64k,1M", "--iters", "20"];
const SIZES: [u64; 3] = [8, 65536, 1 << 20];

#[test]
fn started_alone_it_starts_the_job_itself_every_pair_over_shared_memory() {
    let out = finish(btl().args(ARGS).args(["--np", "3"]));
    check(&report(&out), 3, &SIZES, 20, one_host);
}

#[test]
fn a_job_of_one_is_a_singleton_that_reaches_itself_over_self() {
    let out = finish(btl().args(ARGS).args(["--np", "1"]));
    check(&report(&out), 1, &SIZES, 20, |_, _| "self");
}

#[test]
fn the_btl_list_chooses_every_pairs_btl_from_the_flag_the_environment_or_a_file() {
    let out = finish(btl().args(ARGS).args(["--np", "3", "--btl", "tcp,self"]));
    check(&report(&out), 3, &SIZES, 20, over_tcp);
    let out = finish(btl().args(ARGS).args(["--np", "2", "--btl", "^sm"]));
    check(&report(&out), 2, &SIZES, 20, over_tcp);
    let out = finish(btl().args(ARGS).args(["--np", "2"]).env("BTL", "self,tcp"));
    check(&report(&out), 2, &SIZES, 20, over_tcp);
    let file = std::env::temp_dir().join(format!("btl-job-params-{}.conf", std::process::id()));
    std::fs::write(&file, "btl = tcp,self\n").expect("a parameter file");
    let out = finish(
        btl()
            .args(ARGS)
            .args(["--np", "2", "--param-file"])
            .arg(&file),
    );
    let _ = std::fs::remove_file(&file);
    check(&report(&out), 2, &SIZES, 20, over_tcp);
}

#[test]
fn a_bad_btl_list_is_an_error_naming_the_component() {
    let out = finish(btl().args(ARGS).args(["--np", "2", "--btl", "sm,bogus"]));
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("bogus"), "{err}");
}

#[test]
fn a_rank_outside_the_job_is_refused_with_the_variables_named() {
    let dir = std::env::temp_dir().join(format!("btl-job-bad-rank-{}", std::process::id()));
    let out = finish(
        btl()
            .args(ARGS)
            .args(["--np", "2", "--shared-dir"])
            .arg(&dir)
            .env("BTL_JOB", "77")
            .env("BTL_RANK", "5"),
    );
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("BTL_RANK=5") && err.contains("--np 2"),
        "{err}"
    );
    let out = finish(
        btl()
            .args(ARGS)
            .args(["--np", "2", "--shared-dir"])
            .arg(&dir),
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("BTL_JOB"), "{err}");
}

#[cfg(not(feature = "pmix"))]
#[test]
fn a_build_without_pmix_under_a_pmix_launcher_says_so_instead_of_running_alone() {
    let out = finish(btl().args(ARGS).env("PMIX_NAMESPACE", "prterun-test@1"));
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("PMIX_NAMESPACE") && err.contains("feature `pmix`"),
        "{err}"
    );
}

/// Three hosts in network namespaces, each pair joined by a veth pair on
/// its own subnet, each with its own `/dev/shm`; two processes on each,
/// started by hand with a shared directory.
mod three_hosts {
    use super::*;
    use btl_tests::netns::{Namespaces, sh, unsupported};

    #[test]
    fn same_host_pairs_go_over_shared_memory_and_the_others_over_tcp() {
        if let Some(why) = unsupported(false) {
            eprintln!("skipped: network namespaces need root and iproute2 ({why})");
            return;
        }
        let ns = Namespaces::new(3);
        let n = ns.number();
        // Link k joins hosts (k, k+1 mod 3) on 10.n.k.0/24.
        for k in 0..3usize {
            let (x, y) = (k, (k + 1) % 3);
            let (ex, ey) = (format!("h{x}l{k}x{n}"), format!("h{y}l{k}x{n}"));
            sh(&[
                "ip", "link", "add", &ex, "type", "veth", "peer", "name", &ey,
            ]);
            for (host, dev, addr) in [(x, &ex, 1), (y, &ey, 2)] {
                sh(&["ip", "link", "set", dev, "netns", ns.name(host)]);
                let cidr = format!("10.{n}.{k}.{addr}/24");
                sh(&["ip", "-n", ns.name(host), "addr", "add", &cidr, "dev", dev]);
                sh(&["ip", "-n", ns.name(host), "link", "set", dev, "up"]);
            }
        }
        let dir = std::env::temp_dir().join(format!("btl-three-hosts-{n}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("shared directory");
        let exe = env!("CARGO_BIN_EXE_btl");
        // Host h runs ranks 2h and 2h+1 in one mount namespace with a
        // /dev/shm of its own: `ip netns exec` gives each host's shell its
        // own mount namespace.
        let hosts: Vec<_> = (0..3u32)
            .map(|h| {
                let script = format!(
                    "mount -t tmpfs btl-shm-{h} /dev/shm || exit 9; \
                     echo \"host {h}: /dev/shm is device $(stat -c %d /dev/shm)\" >&2; \
                     BTL_RANK={a} \"$0\" \"$@\" & first=$!; \
                     BTL_RANK={b} \"$0\" \"$@\" & second=$!; \
                     s=0; wait $first || s=1; wait $second || s=1; exit $s",
                    a = 2 * h,
                    b = 2 * h + 1
                );
                let mut cmd = Command::new("ip");
                cmd.args([
                    "netns",
                    "exec",
                    ns.name(h as usize),
                    "sh",
                    "-c",
                    &script,
                    exe,
                ])
                .args(ARGS)
                .args(["--np", "6", "--shared-dir"])
                .arg(&dir)
                .env("BTL_JOB", format!("{}", 4000 + n))
                .env("BTL_JOB_KEY", "the key of the three hosts");
                clean(&mut cmd);
                cmd.env("BTL_JOB_KEY", "the key of the three hosts");
                cmd.stdout(std::process::Stdio::piped())
                    .stderr(std::process::Stdio::piped())
                    .spawn()
                    .expect("a host starts")
            })
            .collect();
        let outs: Vec<Output> = hosts
            .into_iter()
            .map(|c| btl_tests::netns::Reaper(c).finish(LIMIT))
            .collect();
        let _ = std::fs::remove_dir_all(&dir);
        for (h, out) in outs.iter().enumerate() {
            assert!(
                out.status.success(),
                "host {h}: {}\n{}",
                out.status,
                String::from_utf8_lossy(&out.stderr)
            );
        }
        // Rank 0, on host 0, reports.
        let host_of = |rank: u64| rank / 2;
        // What each host says of its /dev/shm, should a check fail.
        let said: Vec<String> = outs
            .iter()
            .map(|o| String::from_utf8_lossy(&o.stderr).into_owned())
            .collect();
        eprintln!("{}", said.join(""));
        check(&report(&outs[0]), 6, &SIZES, 20, |a, b| {
            if a == b {
                "self"
            } else if host_of(a) == host_of(b) {
                "sm"
            } else {
                "tcp"
            }
        });
        // The bytes of the cross-host pairs crossed the links: at 1 MiB
        // alone, each of the four pairs a link joins streams two windows
        // of 16 MiB each way.
        for k in 0..3usize {
            for (host, end) in [(k, k), ((k + 1) % 3, (k + 1) % 3)] {
                let dev = format!("h{end}l{k}x{n}");
                let out = Command::new("ip")
                    .args(["netns", "exec", ns.name(host), "cat"])
                    .arg(format!("/sys/class/net/{dev}/statistics/tx_bytes"))
                    .output()
                    .expect("cat");
                let sent: u64 = String::from_utf8_lossy(&out.stdout)
                    .trim()
                    .parse()
                    .unwrap_or(0);
                assert!(
                    sent > 4 * (32 << 20),
                    "link {k} from host {host} sent {sent} bytes"
                );
            }
        }
    }
}

/// Jobs a PMIx launcher starts: `mpirun` (Open MPI) and `srun --mpi=pmix`
/// (Slurm). The test command installs both.
#[cfg(feature = "pmix")]
mod launched {
    use super::*;

    /// `mpirun -np N` of `btl ARGS`, as root if need be, with `env`
    /// passed to the ranks.
    fn mpirun(np: u32, args: &[&str], env: &[(&str, &str)]) -> Command {
        let mut cmd = Command::new("mpirun");
        clean(&mut cmd);
        cmd.args([
            "--allow-run-as-root",
            "--oversubscribe",
            "--bind-to",
            "none",
        ])
        .args(["-np", &np.to_string()]);
        for (k, v) in env {
            cmd.env(k, v).args(["-x", k]);
        }
        cmd.arg(env!("CARGO_BIN_EXE_btl")).args(args);
        cmd
    }

    #[test]
    fn four_processes_under_mpirun_exchange_all_to_all_over_shared_memory() {
        let out = finish(&mut mpirun(4, &ARGS, &[]));
        check(&report(&out), 4, &SIZES, 20, one_host);
    }

    #[test]
    fn under_mpirun_the_btl_list_puts_the_pairs_on_tcp_with_the_jobs_key() {
        let mut args = ARGS.to_vec();
        args.extend(["--btl", "tcp,self"]);
        let out = finish(&mut mpirun(3, &args, &[]));
        check(&report(&out), 3, &SIZES, 20, over_tcp);
    }

    #[test]
    fn cards_exchanged_in_a_fence_at_start_work_as_on_demand_and_a_bad_mode_is_named() {
        let out = finish(&mut mpirun(4, &ARGS, &[("BTL_PMIX_EXCHANGE", "fence")]));
        check(&report(&out), 4, &SIZES, 20, one_host);
        let out = finish(&mut mpirun(2, &ARGS, &[("BTL_PMIX_EXCHANGE", "sometimes")]));
        assert!(!out.status.success());
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains("BTL_PMIX_EXCHANGE") && err.contains("direct") && err.contains("fence"),
            "{err}"
        );
    }

    #[test]
    fn four_processes_under_srun_exchange_all_to_all_over_shared_memory() {
        let cluster = btl_tests::slurm::Cluster::start().expect("a one-node Slurm cluster");
        let mut srun = cluster.command("srun");
        clean(&mut srun);
        srun.args(["--mpi=pmix", "-n", "4", "--time=2"])
            .arg(env!("CARGO_BIN_EXE_btl"))
            .args(ARGS);
        let out = finish(&mut srun);
        check(&report(&out), 4, &SIZES, 20, one_host);
    }
}
