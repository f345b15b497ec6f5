//! The job this process belongs to, as its launcher says: who it is, how
//! many processes the job has, how they find each other, and the key they
//! prove. One call ([`Job::join`]) for a service that a launcher may or
//! may not have started.

use std::sync::Arc;
use std::time::Duration;

use btl_core::endpoint::ProcName;

#[cfg(feature = "pmix")]
use super::Pmix;
use super::{Bootstrap, BootstrapError, StaticPeers};
use crate::ModuleBuilder;

/// How long [`Job::join`] waits for rank 0's job key.
#[cfg(feature = "pmix")]
const KEY_TIMEOUT: Duration = Duration::from_secs(60);

/// Set by a PMIx launcher in the environment of the processes it starts.
#[cfg(not(feature = "pmix"))]
const LAUNCHED_VAR: &str = "PMIX_NAMESPACE";

/// What started this process.
#[derive(Debug, Clone)]
pub enum Launcher {
    /// A PMIx launcher (`mpirun`, `prterun`, `srun --mpi=pmix`).
    #[cfg(feature = "pmix")]
    Pmix(Arc<Pmix>),
    /// Nobody: the process is a job of its own.
    Singleton,
}

/// This process's job: its name, size, bootstrap and key.
#[derive(Clone)]
pub struct Job {
    me: ProcName,
    size: u32,
    bootstrap: Arc<dyn Bootstrap>,
    key: Vec<u8>,
    launcher: Launcher,
}

impl std::fmt::Debug for Job {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Job")
            .field("me", &self.me)
            .field("size", &self.size)
            .field("launcher", &self.launcher)
            .finish_non_exhaustive()
    }
}

impl Job {
    /// The job as the launcher that started this process says, through
    /// PMIx (with feature `pmix`); a singleton, a job of one, when no
    /// launcher started it.
    ///
    /// Cards are exchanged as `BTL_PMIX_EXCHANGE`
    /// says: `direct` (the default) or `fence`.
    ///
    /// A launched job is authenticated: rank 0 makes the job key and the
    /// others fetch it through PMIx, which only the job's processes read.
    /// A singleton's key is fresh and random, so that nobody completes a
    /// handshake with a process that has no peers.
    pub fn join() -> Result<Job, BootstrapError> {
        #[cfg(feature = "pmix")]
        if let Some(pmix) = Pmix::init()? {
            let exchange = super::pmix::exchange_from_env()?;
            return Self::launched(Arc::new(pmix.with_exchange(exchange)));
        }
        #[cfg(not(feature = "pmix"))]
        if std::env::var_os(LAUNCHED_VAR).is_some() {
            // Each process would think itself alone.
            return Err(BootstrapError::Environment {
                var: LAUNCHED_VAR,
                problem: "a PMIx launcher (mpirun, srun --mpi=pmix) started this process, \
                          but this build of btl has no PMIx support: build it with feature `pmix`"
                    .into(),
            });
        }
        Self::singleton()
    }

    /// A job of this process alone.
    pub fn singleton() -> Result<Job, BootstrapError> {
        let mut bytes = [0u8; 24];
        getrandom::fill(&mut bytes).map_err(|e| BootstrapError::Environment {
            var: "(the OS random generator)",
            problem: e.to_string(),
        })?;
        let job = u64::from_le_bytes(bytes[..8].try_into().expect("8 bytes"));
        Ok(Job {
            me: ProcName::new(job, 0),
            size: 1,
            bootstrap: Arc::new(StaticPeers::new(Vec::new(), "a singleton")),
            key: bytes[8..].to_vec(),
            launcher: Launcher::Singleton,
        })
    }

    /// The job `pmix` connects to.
    #[cfg(feature = "pmix")]
    fn launched(pmix: Arc<Pmix>) -> Result<Job, BootstrapError> {
        let key = pmix.job_key(KEY_TIMEOUT)?;
        Ok(Job {
            me: pmix.me(),
            size: pmix.size(),
            bootstrap: Arc::clone(&pmix) as Arc<dyn Bootstrap>,
            key,
            launcher: Launcher::Pmix(pmix),
        })
    }

    /// This process.
    pub fn me(&self) -> ProcName {
        self.me
    }

    /// How many processes the job has: ranks `0..size`.
    pub fn size(&self) -> u32 {
        self.size
    }

    /// Process `rank` of this job.
    pub fn proc(&self, rank: u32) -> ProcName {
        ProcName::new(self.me.job, rank)
    }

    /// The key the job's processes prove in their handshakes.
    pub fn key(&self) -> &[u8] {
        &self.key
    }

    /// What started the process.
    pub fn launcher(&self) -> &Launcher {
        &self.launcher
    }

    /// Where the job's processes find each other.
    pub fn bootstrap(&self) -> Arc<dyn Bootstrap> {
        Arc::clone(&self.bootstrap)
    }

    /// A builder of this process's modules: its name, the job's bootstrap
    /// and key set; [`open`](ModuleBuilder::open) opens what the `btl`
    /// parameter selects.
    pub fn builder(&self) -> ModuleBuilder {
        ModuleBuilder::new(self.me)
            .bootstrap(self.bootstrap())
            .job_key(self.key.clone())
    }

    /// Returns once every process of the job has called it (a PMIx fence),
    /// or fails after `timeout`. A singleton returns at once.
    pub fn barrier(&self, timeout: Duration) -> Result<(), BootstrapError> {
        match &self.launcher {
            #[cfg(feature = "pmix")]
            Launcher::Pmix(pmix) => pmix.barrier(timeout),
            Launcher::Singleton => {
                let _ = timeout;
                Ok(())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_singleton_is_rank_zero_of_one_with_a_key_of_its_own() {
        let a = Job::singleton().expect("singleton");
        let b = Job::singleton().expect("singleton");
        assert_eq!((a.me().rank, a.size()), (0, 1));
        assert!(matches!(a.launcher(), Launcher::Singleton));
        assert_ne!(a.me().job, b.me().job, "two singletons are two jobs");
        assert_ne!(a.key, b.key);
        assert!(a.barrier(Duration::ZERO).is_ok());
        assert!(
            a.bootstrap()
                .lookup(a.proc(1), Duration::from_millis(10))
                .is_err(),
            "a singleton finds nobody"
        );
    }
}
