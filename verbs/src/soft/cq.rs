//! A completion queue of fixed capacity, which overruns when full.

use std::collections::VecDeque;

use crate::provider::WorkCompletion;

/// A completion queue.
#[derive(Debug)]
pub(crate) struct CompletionQueue {
    capacity: usize,
    entries: VecDeque<WorkCompletion>,
    overrun: bool,
}

impl CompletionQueue {
    pub(crate) fn new(capacity: usize) -> Self {
        CompletionQueue {
            capacity,
            entries: VecDeque::with_capacity(capacity),
            overrun: false,
        }
    }

    /// Adds a completion; `false` if the queue was full, which overruns
    /// it: that completion and every later one are lost.
    pub(crate) fn push(&mut self, wc: WorkCompletion) -> bool {
        if self.overrun {
            return false;
        }
        if self.entries.len() == self.capacity {
            self.overrun = true;
            return false;
        }
        self.entries.push_back(wc);
        true
    }

    /// Moves the oldest completions into `out`; `None` once overrun.
    pub(crate) fn poll(&mut self, out: &mut [WorkCompletion]) -> Option<usize> {
        if self.overrun {
            return None;
        }
        let n = out.len().min(self.entries.len());
        for (slot, wc) in out.iter_mut().zip(self.entries.drain(..n)) {
            *slot = wc;
        }
        Some(n)
    }

    pub(crate) fn is_overrun(&self) -> bool {
        self.overrun
    }

    /// Overruns the queue as if one completion too many had come.
    pub(crate) fn overrun(&mut self) {
        self.overrun = true;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::provider::{QpNum, WcOpcode, WcStatus};

    fn wc(id: u64) -> WorkCompletion {
        WorkCompletion {
            wr_id: id,
            status: WcStatus::Success,
            opcode: WcOpcode::Send,
            byte_len: 0,
            imm: None,
            qp: QpNum(1),
        }
    }

    #[test]
    fn completions_come_out_oldest_first_in_batches() {
        let mut cq = CompletionQueue::new(4);
        for id in 0..3 {
            assert!(cq.push(wc(id)));
        }
        let mut out = [wc(99); 2];
        assert_eq!(cq.poll(&mut out), Some(2));
        assert_eq!((out[0].wr_id, out[1].wr_id), (0, 1));
        assert_eq!(cq.poll(&mut out), Some(1));
        assert_eq!(out[0].wr_id, 2);
        assert_eq!(cq.poll(&mut out), Some(0));
    }

    #[test]
    fn one_completion_too_many_overruns_the_queue_for_good() {
        let mut cq = CompletionQueue::new(2);
        assert!(cq.push(wc(0)));
        assert!(cq.push(wc(1)));
        assert!(!cq.push(wc(2)));
        assert!(cq.is_overrun());
        let mut out = [wc(99); 4];
        assert_eq!(
            cq.poll(&mut out),
            None,
            "what it holds is no longer trusted"
        );
        assert!(!cq.push(wc(3)));
    }
}
