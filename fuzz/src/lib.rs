//! What the fuzz targets and their seed generator (`examples/seeds.rs`)
//! share: the layout of the structured targets' inputs, so that a seed the
//! generator writes means to a target what the generator meant.

pub mod bench_message;
pub mod cpc_message;
pub mod engine_input;
pub mod handshake;
pub mod journal_replay;
