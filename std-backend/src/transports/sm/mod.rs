//! Shared memory between the processes of one host: the pieces of the
//! `sm` component built so far. [`segment`] is a process's segment in
//! `/dev/shm`, holding an inbound [`btl_core::ring`] per peer slot.

#[allow(unsafe_code)]
pub mod segment;
