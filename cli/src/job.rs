//! How `btl alltoall` joins its job and reports it: one process of a job
//! a PMIx launcher started (`mpirun`, `srun --mpi=pmix`), one started by
//! hand or a script with a shared directory, or the command starting the
//! job's processes itself on this host.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use btl_core::endpoint::{EndpointId, ProcName};
#[cfg(feature = "pmix")]
use btl_std::bootstrap::Pmix;
use btl_std::bootstrap::{Bootstrap, JOB_VAR, Job, Launcher, RANK_VAR, SharedDir};

use crate::bench::alltoall::{self, AlltoallPlan, RankResult, Report};
use crate::bench::{BenchError, Waiting};
use crate::launch::{JOB_KEY_VAR, ParamSources};

/// How long a process waits for the others: to appear, and to report.
pub const JOB_START: Duration = Duration::from_secs(60);

/// One process of a job, as `btl alltoall` runs it.
pub struct Rank {
    /// This process.
    pub me: ProcName,
    /// Processes in the job.
    pub size: u32,
    /// Where the job's processes find each other.
    pub bootstrap: Arc<dyn Bootstrap>,
    /// The job key every process proves, if any.
    pub key: Option<Vec<u8>>,
    /// Processes of the job on this host, if known.
    pub local: Option<u32>,
    /// Where the results meet at rank 0.
    pub gather: Gather,
}

/// Where the processes' results meet at rank 0.
pub enum Gather {
    /// Through the launcher's PMIx store, in a collecting fence.
    #[cfg(feature = "pmix")]
    Pmix(Arc<Pmix>),
    /// As files in the job's shared directory.
    Dir(PathBuf),
}

/// How a process waits when the caller did not say: busy-polling while
/// the processes of this host have a core each, giving the core away when
/// idle once they share (blocking would cost a wake-up per message).
pub fn default_waiting(local_processes: Option<u32>) -> Waiting {
    match local_processes {
        Some(n) if n as usize <= host_cpus() => Waiting::Poll,
        _ => Waiting::Yield,
    }
}

/// The CPUs this host has online: a launcher that binds each process to
/// one core leaves it an affinity mask of one, which says nothing of how
/// many processes share the host.
fn host_cpus() -> usize {
    let counted = std::fs::read_to_string("/sys/devices/system/cpu/online")
        .ok()
        .and_then(|list| cpus_in(list.trim()));
    counted.unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
}

/// The number of CPUs in a kernel CPU list (`0-3,8,10-11`).
fn cpus_in(list: &str) -> Option<usize> {
    let mut n = 0;
    for part in list.split(',') {
        n += match part.split_once('-') {
            Some((a, b)) => b.parse::<usize>().ok()?.checked_sub(a.parse().ok()?)? + 1,
            None => {
                part.parse::<usize>().ok()?;
                1
            }
        };
    }
    (n > 0).then_some(n)
}

impl Rank {
    /// Rank `BTL_RANK` of job `BTL_JOB` of `size` processes, whose cards
    /// are in `dir`; the key is `BTL_JOB_KEY`'s, if set.
    pub fn from_dir(dir: &Path, size: u32) -> Result<Rank, String> {
        let me = btl_std::bootstrap::proc_from_env().map_err(|e| {
            format!("{e}: a process joining by --shared-dir is named by {JOB_VAR} and {RANK_VAR}")
        })?;
        if me.rank >= size {
            return Err(format!(
                "{RANK_VAR}={} is not a rank of a job of --np {size} processes",
                me.rank
            ));
        }
        Ok(Rank {
            me,
            size,
            bootstrap: Arc::new(SharedDir::new(dir)),
            key: crate::launch::job_key(),
            local: None,
            gather: Gather::Dir(dir.to_path_buf()),
        })
    }

    /// This process as one of the job a launcher started; `None` for a
    /// singleton, which nobody launched.
    pub fn launched(job: &Job) -> Option<Rank> {
        match job.launcher() {
            #[cfg(feature = "pmix")]
            Launcher::Pmix(pmix) => Some(Rank {
                me: job.me(),
                size: job.size(),
                bootstrap: job.bootstrap(),
                key: Some(job.key().to_vec()),
                local: pmix.local_ranks().map(|l| l.len() as u32),
                gather: Gather::Pmix(Arc::clone(pmix)),
            }),
            Launcher::Singleton => None,
        }
    }

    /// Opens the BTLs `list` selects, reaches every process of the job,
    /// runs `plan`, and returns the job's report at rank 0 (`None` at the
    /// others).
    pub fn run(
        &self,
        sources: &ParamSources,
        list: Option<&str>,
        plan: &AlltoallPlan,
        waiting: Option<Waiting>,
    ) -> Result<Option<Report>, String> {
        let mut builder = sources
            .clone()
            .with_key(self.key.clone())
            .builder(self.me)
            .bootstrap(Arc::clone(&self.bootstrap));
        if let Some(list) = list {
            builder = builder.param("btl", list);
        }
        let mut bml = builder.open().map_err(|e| e.to_string())?;
        let mut peers: Vec<EndpointId> = Vec::with_capacity(self.size as usize);
        let mut carriers = Vec::with_capacity(self.size as usize);
        for rank in 0..self.size {
            let proc = ProcName::new(self.me.job, rank);
            let ep = bml
                .reach(proc, JOB_START)
                .map_err(|e| format!("rank {}: reaching rank {rank}: {e}", self.me.rank))?;
            carriers.push(bml.carrier(ep).unwrap_or("none").to_owned());
            peers.push(ep);
        }
        let waiting = waiting.unwrap_or_else(|| default_waiting(self.local.or(Some(self.size))));
        let mine = alltoall::run(&mut bml, self.me.rank, &peers, carriers, plan, waiting)
            .map_err(|e: BenchError| format!("rank {}: {e}", self.me.rank))?;
        let all = self.gather(&mine)?;
        drop(bml);
        all.map(Report::of).transpose()
    }

    /// Brings every process's result to rank 0.
    fn gather(&self, mine: &RankResult) -> Result<Option<Vec<RankResult>>, String> {
        let text = serde_json::to_string(mine).map_err(|e| e.to_string())?;
        let texts = match &self.gather {
            #[cfg(feature = "pmix")]
            Gather::Pmix(pmix) => pmix
                .gather("btl.alltoall", &text, JOB_START)
                .map_err(|e| e.to_string())?,
            Gather::Dir(dir) => gather_in(dir, self.me, self.size, &text)?,
        };
        let Some(texts) = texts else {
            return Ok(None);
        };
        texts
            .iter()
            .enumerate()
            .map(|(rank, t)| {
                serde_json::from_str(t).map_err(|e| format!("the result of rank {rank}: {e}"))
            })
            .collect::<Result<Vec<RankResult>, String>>()
            .map(Some)
    }
}

/// Writes `text` as `me`'s result in `dir`; at rank 0, waits up to
/// [`JOB_START`] for every rank's and returns them by rank.
fn gather_in(
    dir: &Path,
    me: ProcName,
    size: u32,
    text: &str,
) -> Result<Option<Vec<String>>, String> {
    let results = dir.join(format!("alltoall-{}", me.job));
    let io = |what: String| move |e: std::io::Error| format!("{what}: {e}");
    std::fs::create_dir_all(&results).map_err(io(format!("creating {}", results.display())))?;
    let path = |rank: u32| results.join(format!("{rank}.json"));
    let temp = results.join(format!(".{}.json", me.rank));
    std::fs::write(&temp, text).map_err(io(format!("writing {}", temp.display())))?;
    std::fs::rename(&temp, path(me.rank))
        .map_err(io(format!("writing {}", path(me.rank).display())))?;
    if me.rank != 0 {
        return Ok(None);
    }
    let start = Instant::now();
    let mut all = Vec::with_capacity(size as usize);
    for rank in 0..size {
        loop {
            match std::fs::read_to_string(path(rank)) {
                Ok(text) => {
                    all.push(text);
                    break;
                }
                Err(_) if start.elapsed() < JOB_START => {
                    std::thread::sleep(Duration::from_millis(10));
                }
                Err(e) => {
                    return Err(format!(
                        "no result from rank {rank} within {JOB_START:?} ({}: {e})",
                        path(rank).display()
                    ));
                }
            }
        }
    }
    let _ = std::fs::remove_dir_all(&results);
    Ok(Some(all))
}

/// Starts `size` processes of `exe` on this host as one job (`args` each,
/// with `--shared-dir` and the job's name, rank and a fresh key in the
/// environment), and waits for them all; the first failure stops the
/// others and is the error.
pub fn start_local(exe: &Path, args: &[String], size: u32, dir: &Path) -> Result<(), String> {
    let job = u64::from(std::process::id()) << 16 | 0xa2a;
    let key = crate::launch::fresh_job_key()?;
    let mut children = Vec::with_capacity(size as usize);
    for rank in 0..size {
        let child = std::process::Command::new(exe)
            .args(args)
            .arg("--shared-dir")
            .arg(dir)
            .env(JOB_VAR, job.to_string())
            .env(RANK_VAR, rank.to_string())
            .env(JOB_KEY_VAR, &key)
            .spawn();
        match child {
            Ok(c) => children.push((rank, c)),
            Err(e) => {
                for (_, mut c) in children {
                    let _ = c.kill();
                    let _ = c.wait();
                }
                return Err(format!("starting rank {rank}: {e}"));
            }
        }
    }
    let mut failure = None;
    while !children.is_empty() {
        let mut i = 0;
        while i < children.len() {
            match children[i].1.try_wait() {
                Ok(Some(status)) => {
                    let (rank, _) = children.remove(i);
                    if !status.success() && failure.is_none() {
                        failure = Some(format!("rank {rank} failed: {status}"));
                    }
                }
                Ok(None) => i += 1,
                Err(e) => {
                    failure.get_or_insert(format!("waiting for rank {}: {e}", children[i].0));
                    let (_, mut c) = children.remove(i);
                    let _ = c.kill();
                }
            }
        }
        if failure.is_some() {
            for (_, c) in &mut children {
                let _ = c.kill();
            }
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    failure.map_or(Ok(()), Err)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cpu_list_counts_its_ranges_and_single_cpus() {
        assert_eq!(cpus_in("0-1"), Some(2));
        assert_eq!(cpus_in("0-3,8,10-11"), Some(7));
        assert_eq!(cpus_in("5"), Some(1));
        assert_eq!(cpus_in(""), None);
        assert_eq!(cpus_in("3-1"), None);
    }

    #[test]
    fn processes_poll_while_they_have_a_core_each() {
        assert_eq!(default_waiting(Some(1)), Waiting::Poll);
        assert_eq!(default_waiting(Some(10_000)), Waiting::Yield);
        assert_eq!(default_waiting(None), Waiting::Yield);
    }
}
