//! Bootstrap (Open MPI's "modex"): how the processes of a job learn where
//! each other listens. Each process publishes a [`Card`] with its contacts
//! (component, address, subnet prefix, port) and looks up the cards of the
//! peers it wants to reach.
//!
//! Two implementations need no launcher: [`StaticPeers`], a list written in
//! advance (environment or file), and [`SharedDir`], a directory every
//! process can read and write (one host, or several on a shared
//! filesystem). With feature `pmix`, `Pmix` is the bootstrap of processes
//! an `mpirun` or `srun --mpi=pmix` started. Another launcher plugs in by
//! implementing [`Bootstrap`] over its own key-value store (a
//! coordinator's RPC): publish writes the card's text under the process's
//! name, lookup reads it back.
//!
//! A socket module keeps what it looked up of its peers in its
//! [`Directory`](crate::driver::directory::Directory), and says with a
//! [`LookupError`] why a peer cannot be reached.

mod card;
mod contacts;
mod job;
mod one_card;
#[cfg(feature = "pmix")]
mod pmix;
mod shared_dir;
mod static_peers;

use std::time::Duration;

use btl_core::endpoint::ProcName;

pub use card::{AddressError, Card, CardError, Contact, SegmentContact};
pub use contacts::LookupError;
pub use job::{Job, Launcher};
pub use one_card::OneCard;
#[cfg(feature = "pmix")]
pub use pmix::{CardExchange, PMIX_EXCHANGE_VAR, Pmix};
pub use shared_dir::SharedDir;
pub use static_peers::{PEERS_FILE_VAR, PEERS_VAR, StaticPeers};

/// Environment variable naming this process's job (a number).
pub const JOB_VAR: &str = "BTL_JOB";
/// Environment variable naming this process's rank in its job.
pub const RANK_VAR: &str = "BTL_RANK";

/// Where the processes of a job publish their cards and find each other's.
pub trait Bootstrap: Send + Sync {
    /// Makes `card` known to the other processes of its job.
    fn publish(&self, card: &Card) -> Result<(), BootstrapError>;

    /// The card of `proc`, waiting up to `timeout` for it to be published.
    fn lookup(&self, proc: ProcName, timeout: Duration) -> Result<Card, BootstrapError>;

    /// Called once every module of the process has published its part
    /// of the card: a bootstrap that exchanges cards collectively (a
    /// PMIx fence) does so now. Nothing to do by default.
    fn published(&self) -> Result<(), BootstrapError> {
        Ok(())
    }

    /// Takes back `card`, published by this process, as it stops
    /// listening: a process that comes later finds no stale addresses.
    /// Nothing to do where cards are not kept (a static list).
    fn withdraw(&self, card: &Card) -> Result<(), BootstrapError> {
        let _ = card;
        Ok(())
    }

    /// The contacts `proc` must listen on, when they were fixed in advance
    /// (a static list); `None` when the process chooses and publishes them.
    fn assigned(&self, proc: ProcName) -> Option<Card> {
        let _ = proc;
        None
    }
}

/// Why the bootstrap failed.
#[derive(Debug, thiserror::Error)]
pub enum BootstrapError {
    /// No card for the process appeared in time.
    #[error("no card for process {proc} within {timeout:?} ({where_})")]
    Timeout {
        /// The process looked up.
        proc: ProcName,
        /// How long the lookup waited.
        timeout: Duration,
        /// Where it looked.
        where_: String,
    },
    /// The process is not in a static list.
    #[error("process {0} is not in the static peer list")]
    Unknown(ProcName),
    /// The process is not of the job a launcher started: another job, or
    /// a rank past the job's size.
    #[error("process {proc} is not in the launcher's job ({job_size} processes of job {job})")]
    NotInJob {
        /// The process looked up.
        proc: ProcName,
        /// This process's job.
        job: u64,
        /// How many processes it has.
        job_size: u32,
    },
    /// A card did not parse.
    #[error("{source} (in {where_})")]
    Card {
        /// What was wrong.
        source: CardError,
        /// Where the card came from.
        where_: String,
    },
    /// A published card differs from what a static list fixed.
    #[error("process {proc} publishes {published}, but the static list says {listed}")]
    Mismatch {
        /// The process.
        proc: ProcName,
        /// The card it published.
        published: String,
        /// The card the list holds.
        listed: String,
    },
    /// Reading or writing a card failed.
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// The error.
        source: std::io::Error,
    },
    /// A PMIx call failed.
    #[error("{call}: {status}")]
    Pmix {
        /// The call.
        call: &'static str,
        /// PMIx's status, or what was wrong with its answer.
        status: String,
    },
    /// The job or rank in the environment is missing or not a number.
    #[error("environment variable {var}: {problem}")]
    Environment {
        /// The variable.
        var: &'static str,
        /// What is wrong with it.
        problem: String,
    },
}

/// This process's name from [`JOB_VAR`] and [`RANK_VAR`].
pub fn proc_from_env() -> Result<ProcName, BootstrapError> {
    Ok(ProcName::new(env_number(JOB_VAR)?, env_number(RANK_VAR)?))
}

fn env_number<T: std::str::FromStr>(var: &'static str) -> Result<T, BootstrapError> {
    let value = std::env::var(var).map_err(|_| BootstrapError::Environment {
        var,
        problem: "not set".into(),
    })?;
    value
        .trim()
        .parse()
        .map_err(|_| BootstrapError::Environment {
            var,
            problem: format!("`{value}` is not a number"),
        })
}
