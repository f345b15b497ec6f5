//! Fair reading: which sockets a pass reads, each once and each up to its
//! transport's budget, so that a peer that keeps its socket full takes
//! its share of a pass and no more.
//!
//! The poller is edge-triggered: it reports a socket when bytes arrive,
//! not while they wait. A read that stops at its budget leaves bytes the
//! poller will not report again, so the socket goes back in the queue and
//! is read on the next pass, which does not wait in the poller while the
//! queue holds anything ([`ReadQueue::is_empty`]). A round reads every
//! socket queued once, in the order they were queued; one read to its
//! budget waits for the next round, with those that became ready
//! meanwhile: round-robin, whoever floods.

/// The sockets (by their token) to read on the next pass, each once.
#[derive(Debug, Default)]
pub struct ReadQueue {
    /// In the order they were queued.
    queued: Vec<usize>,
    /// Whether each token is in `queued`, so that it is there once.
    in_queue: Vec<bool>,
    /// The last round's list, kept for the next so that queueing
    /// allocates nothing once the queue has grown to its use.
    spare: Vec<usize>,
}

impl ReadQueue {
    /// Queues socket `token` for the next round, unless it is queued
    /// already.
    pub fn push(&mut self, token: usize) {
        if token >= self.in_queue.len() {
            self.in_queue.resize(token + 1, false);
        }
        if !std::mem::replace(&mut self.in_queue[token], true) {
            self.queued.push(token);
        }
    }

    /// Whether no socket waits to be read: only then may a pass wait in
    /// the poller.
    pub fn is_empty(&self) -> bool {
        self.queued.is_empty()
    }

    /// The sockets to read on this pass, the queue emptied: a socket
    /// queued while they are read (its budget spent) waits for the next
    /// round. Hand the list back with [`end_round`](Self::end_round).
    pub fn start_round(&mut self) -> Vec<usize> {
        let round = std::mem::replace(&mut self.queued, std::mem::take(&mut self.spare));
        for &token in &round {
            if let Some(queued) = self.in_queue.get_mut(token) {
                *queued = false;
            }
        }
        round
    }

    /// Takes back the list of a round once it is read.
    pub fn end_round(&mut self, mut round: Vec<usize>) {
        round.clear();
        self.spare = round;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_socket_is_read_once_per_round_and_one_requeued_goes_to_the_back() {
        let mut queue = ReadQueue::default();
        queue.push(3);
        queue.push(1);
        queue.push(3);
        let round = queue.start_round();
        assert_eq!(round, [3, 1], "in the order they became ready, each once");
        assert!(queue.is_empty());
        // 3 spent its budget; 2 became ready meanwhile; 3 again.
        queue.push(3);
        queue.push(2);
        queue.push(3);
        queue.end_round(round);
        assert!(!queue.is_empty(), "the next pass must not wait");
        let round = queue.start_round();
        assert_eq!(round, [3, 2]);
        queue.end_round(round);
        assert!(queue.is_empty());
        assert!(queue.start_round().is_empty());
    }
}
