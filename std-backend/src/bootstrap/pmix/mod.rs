//! Bootstrap through PMIx, for processes started by a PMIx launcher:
//! Open MPI's `mpirun` (and `prterun`), or Slurm's `srun --mpi=pmix`.
//!
//! The launcher names each process (a namespace and a rank) and runs a
//! key-value store every process of the job reaches through its node's
//! PMIx server. A process puts its card there under two keys:
//!
//! | key              | scope  | holds                                           |
//! |------------------|--------|-------------------------------------------------|
//! | `btl.card`       | global | the `proc` line and the network contacts         |
//! | `btl.card.local` | local  | the `proc` line and the `sm` line (segment, host) |
//! | `btl.job.key`    | global | rank 0 only: the job key (see [`Pmix::job_key`]) |
//!
//! A peer's card is fetched when the process first reaches that peer
//! ([`CardExchange::Direct`], Open MPI's "direct modex"): a job of many
//! thousands of processes fetches only the cards its traffic needs, and
//! nothing at start. [`CardExchange::Fence`] instead gathers every card in one
//! collective fence once the process has published (Open MPI's default
//! "full modex"), which costs one exchange of all cards at start and saves
//! a request per peer later.
//!
//! Started without a launcher, [`Pmix::init`] returns `None`: the process
//! is a singleton, and the caller uses another bootstrap.

#[allow(unsafe_code)]
mod ffi;

use std::ffi::{CString, c_int};
use std::time::{Duration, Instant};

use btl_core::endpoint::ProcName;

use super::{Bootstrap, BootstrapError, Card};

/// The key of a process's network contacts.
const KEY_CARD: &std::ffi::CStr = c"btl.card";
/// The key of what only same-node peers need (the `sm` segment).
const KEY_CARD_LOCAL: &std::ffi::CStr = c"btl.card.local";
/// The key under which rank 0 publishes the job key.
const KEY_JOB_KEY: &std::ffi::CStr = c"btl.job.key";

/// How long [`Pmix::init`]'s job-level queries and fences may wait.
const JOB_QUERY_TIMEOUT: Duration = Duration::from_secs(30);

/// Environment variable choosing how cards are exchanged under PMIx:
/// `direct` (each when first needed, the default) or `fence` (all at
/// start).
pub const PMIX_EXCHANGE_VAR: &str = "BTL_PMIX_EXCHANGE";

/// The exchange [`PMIX_EXCHANGE_VAR`] chooses, else the default.
pub(super) fn exchange_from_env() -> Result<CardExchange, BootstrapError> {
    match std::env::var(PMIX_EXCHANGE_VAR) {
        Ok(value) if !value.trim().is_empty() => {
            value
                .trim()
                .parse()
                .map_err(|problem| BootstrapError::Environment {
                    var: PMIX_EXCHANGE_VAR,
                    problem,
                })
        }
        _ => Ok(CardExchange::default()),
    }
}

/// How a process fetches its peers' cards.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum CardExchange {
    /// Each peer's card when the process first reaches that peer.
    #[default]
    Direct,
    /// Every card at once, in a collective fence after publishing: every
    /// process of the job must open its modules.
    Fence,
}

impl std::str::FromStr for CardExchange {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "direct" => Ok(CardExchange::Direct),
            "fence" => Ok(CardExchange::Fence),
            other => Err(format!(
                "`{other}` is not a card exchange: `direct` (each card when first needed) or `fence` (all at start)"
            )),
        }
    }
}

/// This process's connection to its launcher's PMIx server, and the
/// bootstrap over it. Dropping it closes the connection.
#[derive(Debug)]
pub struct Pmix {
    me: ffi::Proc,
    name: ProcName,
    size: u32,
    local_ranks: Option<Vec<u32>>,
    exchange: CardExchange,
}

impl std::fmt::Debug for ffi::Proc {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}.{}", nspace_text(self), self.rank)
    }
}

/// The namespace of `proc` as text.
fn nspace_text(proc: &ffi::Proc) -> String {
    let bytes: Vec<u8> = proc
        .nspace
        .iter()
        .take_while(|&&c| c != 0)
        .map(|&c| c.cast_unsigned())
        .collect();
    String::from_utf8_lossy(&bytes).into_owned()
}

/// The job number btl uses for a PMIx namespace: its 64-bit FNV-1a hash,
/// the same in every process of the job.
fn job_of(nspace: &str) -> u64 {
    nspace.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// Whole seconds for PMIx's timeout directive, at least one.
fn seconds(d: Duration) -> c_int {
    c_int::try_from(d.as_secs().max(1)).unwrap_or(c_int::MAX)
}

fn pmix_error(call: &'static str, status: ffi::Status) -> BootstrapError {
    BootstrapError::Pmix {
        call,
        status: ffi::describe(status),
    }
}

impl Pmix {
    /// Connects to the PMIx server of the launcher that started this
    /// process, and asks it the job's size and which ranks share this
    /// node. `Ok(None)`: no launcher started the process (PMIx finds no
    /// server), so it runs alone.
    pub fn init() -> Result<Option<Pmix>, BootstrapError> {
        let me = match ffi::init() {
            Ok(me) => me,
            Err(ffi::ERR_UNREACH) => return Ok(None),
            Err(status) => return Err(pmix_error("PMIx_Init", status)),
        };
        let mut job = me;
        job.rank = ffi::RANK_WILDCARD;
        let timeout = seconds(JOB_QUERY_TIMEOUT);
        let size = match ffi::get(&job, ffi::KEY_JOB_SIZE, timeout) {
            Ok(ffi::Got::U32(n)) => n,
            Ok(other) => {
                let _ = ffi::finalize();
                return Err(BootstrapError::Pmix {
                    call: "PMIx_Get(pmix.job.size)",
                    status: format!("not a u32: {other:?}"),
                });
            }
            Err(status) => {
                let _ = ffi::finalize();
                return Err(pmix_error("PMIx_Get(pmix.job.size)", status));
            }
        };
        // Optional: a launcher that does not say leaves locality to the
        // cards (the `sm` line names the host).
        let local_ranks = match ffi::get(&job, ffi::KEY_LOCAL_PEERS, timeout) {
            Ok(ffi::Got::Text(list)) => Some(
                list.split(',')
                    .filter_map(|r| r.trim().parse().ok())
                    .collect(),
            ),
            _ => None,
        };
        let nspace = nspace_text(&me);
        Ok(Some(Pmix {
            name: ProcName::new(job_of(&nspace), me.rank),
            me,
            size,
            local_ranks,
            exchange: CardExchange::default(),
        }))
    }

    /// The same connection, fetching cards the `exchange` way.
    pub fn with_exchange(mut self, exchange: CardExchange) -> Self {
        self.exchange = exchange;
        self
    }

    /// This process's name in btl's terms: the job is a hash of the PMIx
    /// namespace, the rank is PMIx's.
    pub fn me(&self) -> ProcName {
        self.name
    }

    /// The job's PMIx namespace.
    pub fn namespace(&self) -> String {
        nspace_text(&self.me)
    }

    /// How many processes the job has (ranks `0..size`).
    pub fn size(&self) -> u32 {
        self.size
    }

    /// The ranks on this node, when the launcher says (`PMIX_LOCAL_PEERS`).
    pub fn local_ranks(&self) -> Option<&[u32]> {
        self.local_ranks.as_deref()
    }

    /// How cards are fetched.
    pub fn exchange(&self) -> CardExchange {
        self.exchange
    }

    /// The job's key, the same in every process: rank 0 makes 16 random
    /// bytes and publishes them; the others fetch them from rank 0,
    /// waiting up to `timeout`. Only the job's processes can read it, so
    /// a stranger cannot complete a handshake with them.
    pub fn job_key(&self, timeout: Duration) -> Result<Vec<u8>, BootstrapError> {
        if self.name.rank == 0 {
            let mut bytes = [0u8; 16];
            getrandom::fill(&mut bytes).map_err(|e| BootstrapError::Pmix {
                call: "making the job key",
                status: format!("the OS random generator failed: {e}"),
            })?;
            let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
            let text = CString::new(hex.clone()).expect("hex has no NUL");
            ffi::put(ffi::SCOPE_GLOBAL, KEY_JOB_KEY, &text)
                .map_err(|s| pmix_error("PMIx_Put(btl.job.key)", s))?;
            ffi::commit().map_err(|s| pmix_error("PMIx_Commit", s))?;
            return Ok(hex.into_bytes());
        }
        let mut rank0 = self.me;
        rank0.rank = 0;
        match self.get_text(&rank0, KEY_JOB_KEY, timeout)? {
            Some(key) => Ok(key.into_bytes()),
            None => Err(BootstrapError::Timeout {
                proc: ProcName::new(self.name.job, 0),
                timeout,
                where_: "PMIx key btl.job.key".into(),
            }),
        }
    }

    /// A barrier across the job: returns once every process has called it.
    pub fn barrier(&self, timeout: Duration) -> Result<(), BootstrapError> {
        ffi::fence(false, seconds(timeout)).map_err(|s| pmix_error("PMIx_Fence", s))
    }

    /// Gathers one text per process at rank 0: puts `text` under `key`
    /// for the whole job, waits in a collecting fence until every process
    /// has, and returns at rank 0 every process's text by rank (`None` at
    /// the others). For results a job reports once, not for traffic.
    pub fn gather(
        &self,
        key: &str,
        text: &str,
        timeout: Duration,
    ) -> Result<Option<Vec<String>>, BootstrapError> {
        let nul = |what: &str| BootstrapError::Pmix {
            call: "PMIx_Put",
            status: format!("the {what} has a NUL byte"),
        };
        let key = CString::new(key).map_err(|_| nul("key"))?;
        let value = CString::new(text).map_err(|_| nul("text"))?;
        ffi::put(ffi::SCOPE_GLOBAL, &key, &value).map_err(|s| pmix_error("PMIx_Put", s))?;
        ffi::commit().map_err(|s| pmix_error("PMIx_Commit", s))?;
        ffi::fence(true, seconds(timeout)).map_err(|s| pmix_error("PMIx_Fence(collect)", s))?;
        if self.name.rank != 0 {
            return Ok(None);
        }
        let mut all = Vec::with_capacity(self.size as usize);
        for rank in 0..self.size {
            let mut peer = self.me;
            peer.rank = rank;
            let text = self
                .get_text(&peer, &key, timeout)?
                .ok_or(BootstrapError::Timeout {
                    proc: ProcName::new(self.name.job, rank),
                    timeout,
                    where_: format!("PMIx key {key:?}"),
                })?;
            all.push(text);
        }
        Ok(Some(all))
    }

    /// Whether `rank` shares this node; `None` when the launcher did not say.
    fn is_local(&self, rank: u32) -> Option<bool> {
        self.local_ranks.as_ref().map(|l| l.contains(&rank))
    }

    /// The string `proc` put under `key`, retried until `timeout` while it
    /// is not there yet (a peer that has not committed); `None` then.
    fn get_text(
        &self,
        proc: &ffi::Proc,
        key: &std::ffi::CStr,
        timeout: Duration,
    ) -> Result<Option<String>, BootstrapError> {
        let start = Instant::now();
        loop {
            let left = timeout.saturating_sub(start.elapsed());
            match ffi::get(proc, key, seconds(left)) {
                Ok(ffi::Got::Text(text)) => return Ok(Some(text)),
                Ok(other) => {
                    return Err(BootstrapError::Pmix {
                        call: "PMIx_Get",
                        status: format!("{key:?} of {proc:?} is not a string: {other:?}"),
                    });
                }
                Err(ffi::ERR_NOT_FOUND | ffi::ERR_TIMEOUT) if !left.is_zero() => {
                    std::thread::sleep(Duration::from_millis(10).min(left));
                }
                Err(ffi::ERR_NOT_FOUND | ffi::ERR_TIMEOUT) => return Ok(None),
                Err(status) => return Err(pmix_error("PMIx_Get", status)),
            }
        }
    }
}

impl Drop for Pmix {
    fn drop(&mut self) {
        if let Err(status) = ffi::finalize() {
            tracing::warn!(status = %ffi::describe(status), "PMIx_Finalize failed");
        }
    }
}

impl Bootstrap for Pmix {
    /// Puts the card's network contacts for the whole job and its segment
    /// for this node, and commits them.
    fn publish(&self, card: &Card) -> Result<(), BootstrapError> {
        let global = Card {
            segment: None,
            ..card.clone()
        };
        let local = Card {
            contacts: Vec::new(),
            ..card.clone()
        };
        for (scope, key, part) in [
            (ffi::SCOPE_GLOBAL, KEY_CARD, global),
            (ffi::SCOPE_LOCAL, KEY_CARD_LOCAL, local),
        ] {
            let text = CString::new(part.to_string()).map_err(|_| BootstrapError::Pmix {
                call: "PMIx_Put",
                status: "a card with a NUL byte".into(),
            })?;
            ffi::put(scope, key, &text).map_err(|s| pmix_error("PMIx_Put(btl.card)", s))?;
        }
        ffi::commit().map_err(|s| pmix_error("PMIx_Commit", s))
    }

    /// Gathers every card in one fence, under [`CardExchange::Fence`].
    fn published(&self) -> Result<(), BootstrapError> {
        match self.exchange {
            CardExchange::Direct => Ok(()),
            CardExchange::Fence => ffi::fence(true, seconds(JOB_QUERY_TIMEOUT))
                .map_err(|s| pmix_error("PMIx_Fence(collect)", s)),
        }
    }

    fn lookup(&self, proc: ProcName, timeout: Duration) -> Result<Card, BootstrapError> {
        if proc.job != self.name.job || proc.rank >= self.size {
            return Err(BootstrapError::NotInJob {
                proc,
                job: self.name.job,
                job_size: self.size,
            });
        }
        let mut peer = self.me;
        peer.rank = proc.rank;
        let start = Instant::now();
        let where_ = format!("PMIx key btl.card of {peer:?}");
        let parse = |text: &str, where_: &str| {
            Card::parse(text).map_err(|source| BootstrapError::Card {
                source,
                where_: where_.to_owned(),
            })
        };
        let Some(text) = self.get_text(&peer, KEY_CARD, timeout)? else {
            return Err(BootstrapError::Timeout {
                proc,
                timeout,
                where_,
            });
        };
        let mut card = parse(&text, &where_)?;
        if self.is_local(proc.rank) != Some(false) {
            let left = timeout.saturating_sub(start.elapsed());
            if let Some(text) = self.get_text(&peer, KEY_CARD_LOCAL, left)? {
                card.segment = parse(&text, "PMIx key btl.card.local")?.segment;
            }
        }
        Ok(card)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_namespace_maps_to_one_job_number() {
        assert_eq!(job_of("prterun-host-1234@1"), job_of("prterun-host-1234@1"));
        assert_ne!(job_of("slurm.pmix.17.0"), job_of("slurm.pmix.18.0"));
        // FNV-1a 64 of the empty string is its offset basis.
        assert_eq!(job_of(""), 0xcbf2_9ce4_8422_2325);
    }

    #[test]
    fn the_exchange_parses_and_a_bad_one_says_the_choices() {
        assert_eq!("direct".parse::<CardExchange>(), Ok(CardExchange::Direct));
        assert_eq!("fence".parse::<CardExchange>(), Ok(CardExchange::Fence));
        let err = "all".parse::<CardExchange>().expect_err("bad");
        assert!(err.contains("direct") && err.contains("fence"), "{err}");
    }

    #[test]
    fn seconds_are_whole_and_at_least_one() {
        assert_eq!(seconds(Duration::ZERO), 1);
        assert_eq!(seconds(Duration::from_millis(2500)), 2);
    }
}
