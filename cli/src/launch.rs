//! How the `btl` command opens a module of the chosen BTL from the
//! parameters (config file, environment) and meets its peer: a second
//! process it starts itself on loopback, or across hosts with
//! `btl serve` and `btl connect HOST:PORT`.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use btl_core::endpoint::ProcName;

use btl_std::bml::Offer;
use btl_std::bootstrap::Bootstrap;
use btl_std::{Bml, ModuleBuilder};

/// Environment variable holding the job key both sides prove.
pub const JOB_KEY_VAR: &str = "BTL_JOB_KEY";

/// Where a run's parameters come from, besides the defaults and the
/// environment: a config file (`--param-file`, else the default one);
/// `local` keeps the run on loopback; the job key.
#[derive(Debug, Clone, Default)]
pub struct ParamSources {
    /// The config file to read instead of the default one, if any.
    pub file: Option<PathBuf>,
    /// Use `lo` unless the user chose interfaces.
    pub local: bool,
    /// The job key both sides prove: [`JOB_KEY_VAR`]'s, unless set with
    /// [`with_key`](Self::with_key).
    pub key: Option<Vec<u8>>,
}

impl ParamSources {
    /// The file given (or the default one), on loopback if `local`, with
    /// the job key of [`JOB_KEY_VAR`] if it is set.
    pub fn new(file: Option<PathBuf>, local: bool) -> Self {
        ParamSources {
            file,
            local,
            key: job_key(),
        }
    }

    /// The same sources with job key `key` (`None`: none).
    pub fn with_key(self, key: Option<Vec<u8>>) -> Self {
        ParamSources { key, ..self }
    }

    /// A builder of process `me`'s module, with these sources and key;
    /// the `Bml`s it opens hold the verbs component too.
    pub fn builder(&self, me: ProcName) -> ModuleBuilder {
        let mut builder = ModuleBuilder::new(me).offer(verbs_offer());
        if let Some(file) = &self.file {
            builder = builder.param_file(file);
        }
        if self.local {
            builder = builder.on_loopback();
        }
        if let Some(key) = &self.key {
            builder = builder.job_key(key.clone());
        }
        builder
    }
}

/// A fresh job key: 16 random bytes from the OS, as 32 hexadecimal
/// characters (what `btl serve` makes unless told `--no-key`).
pub fn fresh_job_key() -> Result<String, String> {
    let mut bytes = [0u8; 16];
    getrandom::fill(&mut bytes)
        .map_err(|e| format!("no job key could be made (the OS random generator: {e})"))?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

/// The job key from [`JOB_KEY_VAR`], if set.
pub fn job_key() -> Option<Vec<u8>> {
    std::env::var(JOB_KEY_VAR)
        .ok()
        .filter(|k| !k.is_empty())
        .map(String::into_bytes)
}

/// The modules `list` selects (the `btl` parameter's syntax; `None`: what
/// the parameter's sources say, else `self,sm,tcp`) for process `me`,
/// under one `Bml`, its card published through `bootstrap` (`None`: a run
/// within this process).
pub fn open_bml(
    sources: &ParamSources,
    me: ProcName,
    bootstrap: Option<Arc<dyn Bootstrap>>,
    list: Option<&str>,
) -> Result<Bml, String> {
    let mut builder = sources.builder(me);
    builder = match bootstrap {
        Some(b) => builder.bootstrap(b),
        // Nobody to find: a list that names nobody.
        None => builder.bootstrap(Arc::new(btl_std::bootstrap::StaticPeers::new(
            Vec::new(),
            "a run within one process",
        ))),
    };
    if let Some(list) = list {
        builder = builder.param("btl", list);
    }
    builder.open().map_err(|e| e.to_string())
}

/// The verbs component, on the RDMA device the parameters choose
/// (`btl_verbs_device`, else the first one).
#[cfg(feature = "rdma")]
pub fn verbs_offer() -> Offer {
    Offer::new(btl_verbs::module::VerbsOffer)
}

/// What a build without RDMA support offers for verbs: a component that
/// says so when a list names it.
#[cfg(not(feature = "rdma"))]
pub fn verbs_offer() -> Offer {
    Offer::unavailable(
        "verbs",
        btl_core::mca::Exclusivity::DEFAULT,
        "this build has no RDMA support (build btl with `--features rdma`)",
    )
}

/// A scratch directory for a local run's bootstrap, removed when dropped.
pub struct RunDir(pub PathBuf);

impl RunDir {
    /// A fresh directory for job `job`.
    pub fn new(job: u64) -> Self {
        let dir = std::env::temp_dir().join(format!("btl-run-{job:x}"));
        let _ = std::fs::remove_dir_all(&dir);
        RunDir(dir)
    }

    /// The directory.
    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for RunDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
