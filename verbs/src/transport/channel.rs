//! The side channel a CPC talks over before any queue pair exists.

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};

use btl_core::endpoint::ProcName;

/// Messages between processes outside the fabric: the bootstrap, a TCP
/// connection, or (in tests and simulations) a queue in memory. It may
/// lose messages to a process that is gone; the CPC times out.
pub trait SideChannel {
    /// Sends `message` to `to`.
    fn send(&mut self, to: ProcName, message: &[u8]);

    /// The next message that came, and who sent it.
    fn recv(&mut self) -> Option<(ProcName, Vec<u8>)>;

    /// Whether the last `recv` that returned nothing stopped with more
    /// waiting: a channel that drops what it cannot read (datagrams too
    /// short to name a sender) drops a bounded number per call, so that a
    /// flood of them cannot hold its reader, and says so here for the
    /// reader to come back without waiting for news.
    fn left_unread(&self) -> bool {
        false
    }
}

/// Most messages waiting for one process in a [`MemoryHub`]: beyond, new
/// ones are dropped, as a full socket buffer would.
pub const HUB_QUEUE: usize = 1024;

#[derive(Debug, Default)]
struct Mailboxes {
    boxes: BTreeMap<ProcName, VecDeque<(ProcName, Vec<u8>)>>,
    /// Messages a test chose to lose, counted.
    dropped: u64,
    /// While set, every message is lost.
    cut: bool,
}

/// A side channel in memory for processes of one test or simulation: each
/// [`join`](Self::join)s with its name and gets its mailbox; a message to a
/// process that has not joined, or has left, is lost.
#[derive(Debug, Clone, Default)]
pub struct MemoryHub {
    inner: Arc<Mutex<Mailboxes>>,
}

impl MemoryHub {
    /// An empty hub.
    pub fn new() -> Self {
        MemoryHub::default()
    }

    fn lock(&self) -> MutexGuard<'_, Mailboxes> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Process `me`'s end: its mailbox, empty (a restarted process does not
    /// get its predecessor's mail).
    pub fn join(&self, me: ProcName) -> MemoryChannel {
        self.lock().boxes.insert(me, VecDeque::new());
        MemoryChannel {
            hub: self.clone(),
            me,
        }
    }

    /// While `cut`, every message is lost.
    pub fn set_cut(&self, cut: bool) {
        self.lock().cut = cut;
    }

    /// Messages lost so far (to absent processes, full boxes, or a cut).
    pub fn dropped(&self) -> u64 {
        self.lock().dropped
    }
}

/// One process's end of a [`MemoryHub`]; dropping it leaves the hub.
#[derive(Debug)]
pub struct MemoryChannel {
    hub: MemoryHub,
    me: ProcName,
}

impl Drop for MemoryChannel {
    fn drop(&mut self) {
        self.hub.lock().boxes.remove(&self.me);
    }
}

impl SideChannel for MemoryChannel {
    fn send(&mut self, to: ProcName, message: &[u8]) {
        let mut hub = self.hub.lock();
        let cut = hub.cut;
        match hub.boxes.get_mut(&to) {
            Some(q) if !cut && q.len() < HUB_QUEUE => q.push_back((self.me, message.to_vec())),
            _ => hub.dropped += 1,
        }
    }

    fn recv(&mut self) -> Option<(ProcName, Vec<u8>)> {
        self.hub.lock().boxes.get_mut(&self.me)?.pop_front()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_reach_those_who_joined_and_no_one_else() {
        let hub = MemoryHub::new();
        let (a, b, c) = (
            ProcName::new(1, 0),
            ProcName::new(1, 1),
            ProcName::new(1, 2),
        );
        let mut ca = hub.join(a);
        let mut cb = hub.join(b);
        ca.send(b, b"hi");
        ca.send(c, b"nobody");
        assert_eq!(cb.recv(), Some((a, b"hi".to_vec())));
        assert_eq!(cb.recv(), None);
        assert_eq!(hub.dropped(), 1);
        drop(cb);
        ca.send(b, b"gone");
        assert_eq!(hub.dropped(), 2);
        let mut cb = hub.join(b);
        assert_eq!(cb.recv(), None, "a new process starts with an empty box");
        hub.set_cut(true);
        ca.send(b, b"lost");
        assert_eq!(cb.recv(), None);
    }
}
