//! What a queue pair has outstanding, so that a failed completion can say
//! what was posted.
//!
//! Verbs define only `wr_id`, `status`, `qp_num` and `vendor_err` of a
//! completion that failed; its opcode is whatever was in memory (mlx5 does
//! not write it). [`WorkCompletion::opcode`](crate::provider::WorkCompletion)
//! promises what was posted, so each queue pair remembers its requests
//! from post to completion. A reliable-connected queue pair completes each
//! of its queues in order, and a completion retires the requests posted
//! before it on its queue too (an unsignaled send completes silently when a
//! later one does), so each queue is a FIFO searched from its oldest end.
//! Receives taken from a shared receive queue are not remembered: a failed
//! completion that names no outstanding send of its queue pair is a
//! receive. (One whose identifier an outstanding send and an outstanding
//! receive share is read as the send's.)

use std::collections::VecDeque;

use crate::provider::{RecvWr, SendOp, SendWr, WcOpcode};

/// The requests of one queue pair that have not completed yet.
#[derive(Debug, Default)]
pub(super) struct Outstanding {
    /// Sends, oldest first: identifier and kind.
    sends: VecDeque<(u64, WcOpcode)>,
    /// Receives on the queue pair's own receive queue, oldest first.
    recvs: VecDeque<u64>,
}

/// What a send request completes as.
pub(super) fn send_opcode(op: &SendOp) -> WcOpcode {
    match op {
        SendOp::Send | SendOp::SendWithImm(_) => WcOpcode::Send,
        SendOp::RdmaWrite(_) | SendOp::RdmaWriteWithImm(..) => WcOpcode::RdmaWrite,
        SendOp::RdmaRead(_) => WcOpcode::RdmaRead,
    }
}

impl Outstanding {
    /// Remembers sends just posted.
    pub(super) fn sent(&mut self, wrs: &[SendWr<'_>]) {
        self.sends
            .extend(wrs.iter().map(|wr| (wr.wr_id, send_opcode(&wr.op))));
    }

    /// Remembers receives just posted on the queue pair's own queue.
    pub(super) fn received(&mut self, wrs: &[RecvWr<'_>]) {
        self.recvs.extend(wrs.iter().map(|wr| wr.wr_id));
    }

    /// Forgets everything: a reset queue pair drops its requests without
    /// completions.
    pub(super) fn clear(&mut self) {
        self.sends.clear();
        self.recvs.clear();
    }

    /// The kind of the request a completion of `wr_id` reports, given the
    /// opcode the device wrote (`reported`, trusted only on success);
    /// retires it and the requests before it on its queue.
    pub(super) fn complete(
        &mut self,
        wr_id: u64,
        reported: Option<WcOpcode>,
        success: bool,
    ) -> WcOpcode {
        let is_send = match reported.filter(|_| success) {
            Some(WcOpcode::Send | WcOpcode::RdmaWrite | WcOpcode::RdmaRead) => true,
            Some(WcOpcode::Recv | WcOpcode::RecvRdmaWithImm) => false,
            None => self.sends.iter().any(|&(id, _)| id == wr_id),
        };
        if is_send {
            let posted = retire(&mut self.sends, |&(id, _)| id == wr_id).map(|(_, op)| op);
            return reported
                .filter(|_| success)
                .or(posted)
                .unwrap_or(WcOpcode::Send);
        }
        retire(&mut self.recvs, |&id| id == wr_id);
        match reported.filter(|_| success) {
            Some(WcOpcode::RecvRdmaWithImm) => WcOpcode::RecvRdmaWithImm,
            _ => WcOpcode::Recv,
        }
    }

    /// Requests remembered, sends and receives.
    #[cfg(test)]
    fn len(&self) -> (usize, usize) {
        (self.sends.len(), self.recvs.len())
    }
}

/// Removes the oldest entry `is` picks and every entry before it; that
/// entry, if there is one (else nothing is removed).
fn retire<T: Copy>(queue: &mut VecDeque<T>, is: impl Fn(&T) -> bool) -> Option<T> {
    let at = queue.iter().position(is)?;
    let entry = queue[at];
    queue.drain(..=at);
    Some(entry)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::provider::{RemoteAddr, Rkey};

    fn send(wr_id: u64, op: SendOp, signaled: bool) -> SendWr<'static> {
        SendWr {
            wr_id,
            op,
            sg: &[],
            signaled,
        }
    }

    const AT: RemoteAddr = RemoteAddr {
        rkey: Rkey(1),
        offset: 0,
    };

    #[test]
    fn a_success_retires_the_unsignaled_sends_before_it() {
        let mut q = Outstanding::default();
        q.sent(&[
            send(1, SendOp::RdmaWrite(AT), false),
            send(2, SendOp::RdmaWrite(AT), false),
            send(3, SendOp::Send, true),
            send(4, SendOp::RdmaRead(AT), true),
        ]);
        assert_eq!(q.complete(3, Some(WcOpcode::Send), true), WcOpcode::Send);
        assert_eq!(q.len(), (1, 0));
        assert_eq!(
            q.complete(4, Some(WcOpcode::RdmaRead), true),
            WcOpcode::RdmaRead
        );
        assert_eq!(q.len(), (0, 0));
    }

    #[test]
    fn a_failure_says_what_was_posted_whatever_the_device_wrote() {
        let mut q = Outstanding::default();
        q.sent(&[
            send(1, SendOp::RdmaWrite(AT), false),
            send(2, SendOp::RdmaRead(AT), true),
        ]);
        q.received(&[RecvWr { wr_id: 10, sg: &[] }, RecvWr { wr_id: 11, sg: &[] }]);
        // Flushed, interleaved, with garbage (or nothing known) as opcode.
        assert_eq!(q.complete(10, Some(WcOpcode::Send), false), WcOpcode::Recv);
        assert_eq!(q.complete(1, None, false), WcOpcode::RdmaWrite);
        assert_eq!(
            q.complete(2, Some(WcOpcode::Recv), false),
            WcOpcode::RdmaRead
        );
        assert_eq!(q.complete(11, None, false), WcOpcode::Recv);
        assert_eq!(q.len(), (0, 0));
    }

    #[test]
    fn receives_keep_the_opcode_of_what_filled_them() {
        let mut q = Outstanding::default();
        q.received(&[RecvWr { wr_id: 5, sg: &[] }, RecvWr { wr_id: 6, sg: &[] }]);
        assert_eq!(
            q.complete(5, Some(WcOpcode::RecvRdmaWithImm), true),
            WcOpcode::RecvRdmaWithImm
        );
        assert_eq!(q.complete(6, Some(WcOpcode::Recv), true), WcOpcode::Recv);
        assert_eq!(q.len(), (0, 0));
    }

    #[test]
    fn a_failure_naming_no_send_is_a_shared_receive() {
        let mut q = Outstanding::default();
        q.sent(&[send(1, SendOp::Send, true)]);
        assert_eq!(q.complete(77, None, false), WcOpcode::Recv);
        assert_eq!(q.len(), (1, 0));
    }

    #[test]
    fn a_reset_forgets_everything() {
        let mut q = Outstanding::default();
        q.sent(&[send(1, SendOp::Send, false)]);
        q.received(&[RecvWr { wr_id: 2, sg: &[] }]);
        q.clear();
        assert_eq!(q.len(), (0, 0));
    }
}
