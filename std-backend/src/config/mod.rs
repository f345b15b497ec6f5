//! How the socket components are configured: the parameters each
//! registers under its own name (`socket_params`), and where their values
//! come from besides the defaults, which `btl-core` cannot read itself: the
//! environment and a parameter file ([`sources`]), in the file's syntax
//! (`param_file`).

mod param_file;
pub(crate) mod socket_params;
pub mod sources;
