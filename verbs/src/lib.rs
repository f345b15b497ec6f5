//! `btl-verbs`: the RDMA verbs backend of btl.
//!
//! It will hold reliable-connected queue pairs, memory registration, RDMA
//! write/read for put/get, connection pseudo-components and a software HCA
//! model. Nothing of it exists yet: the crate is reserved in the workspace so
//! that its place in the layout is fixed (see `DESIGN.md`).
#![forbid(unsafe_code)]
