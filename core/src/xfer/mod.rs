//! Motr-style transfer machines over any [`Btl`](crate::btl::Btl), after
//! Motr's `net/net.h`.
//!
//! A [`TransferMachine`] owns one XFER tag on a BTL. The user registers
//! buffers with it (registered BTL memory, [`TransferMachine::register_buffer`])
//! and adds them to one of six [`Queue`]s: MSG_RECV and MSG_SEND for
//! messages, PASSIVE_BULK_RECV / PASSIVE_BULK_SEND for buffers a peer will
//! write or read, ACTIVE_BULK_RECV / ACTIVE_BULK_SEND for moving data to or
//! from a peer's passive buffer named by its [`NetBufDesc`]. The active side
//! moves the data with `put` or `get`, then sends a BULK_DONE so that the
//! passive side completes too.
//!
//! Every add ends in exactly one [`XferEvent::Completed`]: success, a BTL
//! error, a timeout, a cancel (`del`, or `stop` for everything queued), or
//! the machine failing. A MSG_RECV buffer may take several messages, each
//! reported by an [`XferEvent::Received`] before its completion.
//!
//! The machine is sans-I/O like the rest of the core: the caller passes the
//! BTL and the time to [`TransferMachine::progress`] and takes events from
//! [`TransferMachine::poll_event`]. Nothing calls back, so no callback ever
//! runs under a lock. An application that uses the BTL for its own tags
//! too polls the BTL itself and hands each event to
//! [`TransferMachine::offer`], which takes the machine's own and gives the
//! others back; several machines (one tag each) can share one BTL that way.
//!
//! # Example
//!
//! ```
//! use btl_core::btl::{Access, Btl, MemSlice, Tag};
//! use btl_core::endpoint::{ProcName, Reachability};
//! use btl_core::loopback::Loopback;
//! use btl_core::pool::{FragmentPoolConfig, FragmentPools, FragmentPoolsConfig};
//! use btl_core::time::Instant;
//! use btl_core::xfer::{Queue, TransferMachine, XferEvent};
//!
//! let me = ProcName::new(1, 0);
//! let pool = |fragment_size| FragmentPoolConfig { fragment_size, num: 4, max: 4, inc: 1 };
//! let cfg = FragmentPoolsConfig { small: pool(64), eager: pool(1024), max: pool(4096) };
//! let mut region = vec![0u8; FragmentPools::required_bytes(&cfg)];
//! let mut outgoing = *b"hello";
//! let mut incoming = [0u8; 64];
//!
//! let mut btl = Loopback::<_, _, 4, 8>::new(me, FragmentPools::new(&mut region, cfg)?);
//! let mut endpoints = [None];
//! let mut words = [0u64; 1];
//! btl.add_procs(&[me], &mut endpoints, &mut Reachability::new(&mut words))?;
//! let peer = endpoints[0].ok_or("unreachable")?;
//! let out = btl.register_mem(&mut outgoing[..], Access::empty()).map_err(|e| e.error)?;
//! let inc = btl.register_mem(&mut incoming[..], Access::empty()).map_err(|e| e.error)?;
//!
//! let mut tm = TransferMachine::<8, 8, 256>::new(me, Tag(0x60))?;
//! let send = tm.register_buffer(&btl, MemSlice { handle: out, offset: 0, len: 5 })?;
//! let recv = tm.register_buffer(&btl, MemSlice { handle: inc, offset: 0, len: 64 })?;
//! tm.start()?;
//! tm.progress(&mut btl, Instant::ZERO); // Started
//!
//! tm.add_msg_recv(recv, 1, 1, None)?; // completes after one message
//! tm.add_msg_send(send, tm.addr(peer), 5, None)?;
//! tm.progress(&mut btl, Instant::from_nanos(1));
//!
//! let mut completed = 0;
//! while let Some(event) = tm.poll_event() {
//!     match event {
//!         XferEvent::Received { offset, len, .. } => {
//!             let at = offset as usize;
//!             assert_eq!(&btl.region(inc)?[at..at + len as usize], b"hello");
//!         }
//!         XferEvent::Completed(c) => {
//!             assert!(matches!(c.queue, Queue::MsgSend | Queue::MsgRecv));
//!             assert_eq!(c.result, Ok(5));
//!             completed += 1;
//!         }
//!         XferEvent::StateChanged { .. } => {} // Starting, Started
//!         other => panic!("unexpected {other:?}"),
//!     }
//! }
//! assert_eq!(completed, 2);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod addr;
mod buffer;
mod descriptor;
mod error;
mod event;
mod machine;
mod progress;
mod queue;
mod state;
mod stats;
pub mod wire;

pub use addr::TmAddr;
pub use buffer::BufferId;
pub use descriptor::{NetBufDesc, NetBufDescError};
pub use error::XferError;
pub use event::{Completion, XferEvent};
pub use machine::TransferMachine;
pub use queue::{Passive, Queue};
pub use state::TmState;
pub use stats::{QueueStats, Stats};

#[cfg(test)]
mod tests;
