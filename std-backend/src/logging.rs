//! Turns btl's log on: what the `btl` command does, for a service in one
//! call. btl logs with `tracing`; nothing is printed until a subscriber is
//! installed, and a library user who has none of their own sees no
//! warning, no refusal and no reason for a lost peer.
//!
//! Only with the `logging` feature, which brings `tracing-subscriber`: a
//! service that installs a subscriber of its own does without it.

/// The environment variable that says what to log, in `tracing`'s filter
/// syntax (`warn`, `btl_std=debug`, ...).
pub const LOG_VAR: &str = "BTL_LOG";

/// Prints btl's log (and anything else logged with `tracing`) to stderr,
/// filtered by [`LOG_VAR`] or, when it is unset or invalid, by `default`
/// (`"warn"` for a service). Colours only on a terminal. Fails if the
/// process has a global subscriber already (it keeps it).
pub fn init(default: &str) -> Result<(), LogInitError> {
    let filter = tracing_subscriber::EnvFilter::try_from_env(LOG_VAR)
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_target(false)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .try_init()
        .map_err(|e| LogInitError(e.to_string()))
}

/// The process has a global `tracing` subscriber already.
#[derive(Debug, thiserror::Error)]
#[error("a log subscriber is installed already: {0}")]
pub struct LogInitError(String);
