//! `btl-cli`: what the `btl` command is made of, apart from the library a
//! service links (`btl-std`).
//!
//! - [`info`]: the report of `btl info`, components and parameters as text
//!   or JSON;
//! - [`launch`]: how the command opens a module of the chosen BTL from the
//!   parameters and meets its peer;
//! - [`bench`](mod@bench): the measurements between two processes
//!   (ping-pong latency, bandwidth, message rate) and the messages they
//!   exchange;
//! - [`job`]: how `btl alltoall` joins a job of many processes (launched
//!   through PMIx, by hand with a shared directory, or by the command
//!   itself) and gathers its report;
//! - [`idle`]: the idle peers of `--idle N`, a third process's modules
//!   that only keep their connections alive;
//! - [`raw`]: the same measurements over a plain TCP socket, the baseline;
//! - [`plot`]: the chart comparing the two, as SVG.
#![forbid(unsafe_code)]

pub mod bench;
pub mod idle;
pub mod info;
pub mod job;
pub mod launch;
pub mod plot;
pub mod raw;
pub mod stats;
pub mod tap;
