//! `btl-verbs`: the RDMA verbs backend of btl.
//!
//! Its lower half is queue pairs instead of sockets. [`provider`] names the
//! verbs the BTL needs (devices and ports, protection domains, completion
//! queues, reliable-connected queue pairs and their state transitions,
//! memory registration, posting and polling) as one trait, so that the
//! layers above run unchanged on a real HCA and on [`soft`], a software
//! HCA that keeps reliable-connected semantics exactly and that every
//! test of this crate runs on.
#![deny(unsafe_code)]

pub mod component;
pub mod cpc;
pub mod module;
pub mod provider;
#[cfg(feature = "rdma")]
#[allow(unsafe_code)]
pub mod rdma;
pub mod soft;
pub mod transport;
