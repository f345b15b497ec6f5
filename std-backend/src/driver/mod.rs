//! The driver of the engine over sockets: a module that holds the engine
//! and a poller ([`module`]), the network it moves bytes through ([`net`]:
//! the operating system's, or a simulated one), and a thread that can
//! serve a module for callers that do not poll ([`progress_thread`], woken
//! as `wake` says). What serves every transport alike lives here: the
//! engine's storage on the heap ([`heap`]), what a module publishes,
//! looks up and refuses ([`directory`]), the counting of refused
//! strangers ([`refusals`]), what the kernel says of datagrams a peer
//! refused (`icmp`), and the queue that makes each pass read every
//! ready socket in turn ([`read_queue`]).

pub mod directory;
pub mod heap;
#[allow(unsafe_code)]
mod icmp;
pub mod link_map;
pub mod module;
pub mod net;
pub mod progress_thread;
pub mod read_queue;
pub mod recorder;
pub mod refusals;
#[allow(unsafe_code)]
pub mod udp_offload;
mod wake;
