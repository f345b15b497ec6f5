//! Work requests as verbs take them, chained for one post, and work
//! completions as this crate reports them.

use std::ffi::c_int;
use std::ptr;

use ibverbs_sys as sys;

use crate::provider::{QpNum, RecvWr, SendOp, SendWr, Sge, WcOpcode, WcStatus, WorkCompletion};

/// A C work request with a `next` link.
pub(super) trait Linked {
    /// Its link to the next request of the chain.
    fn next(&mut self) -> &mut *mut Self;
}

impl Linked for sys::ibv_send_wr {
    fn next(&mut self) -> &mut *mut Self {
        &mut self.next
    }
}

impl Linked for sys::ibv_recv_wr {
    fn next(&mut self) -> &mut *mut Self {
        &mut self.next
    }
}

/// The work requests of one post, linked in order, and the scatter/gather
/// entries they point into.
///
/// Built anew for each post, into vectors kept from post to post, so that
/// posting allocates nothing once they have grown. Neither vector is
/// touched between building and posting, so the pointers between them
/// hold; the device copies what it needs before the post returns.
#[derive(Debug)]
pub(super) struct Chain<W> {
    wrs: Vec<W>,
    sges: Vec<sys::ibv_sge>,
}

impl<W> Default for Chain<W> {
    fn default() -> Self {
        Chain {
            wrs: Vec::new(),
            sges: Vec::new(),
        }
    }
}

impl<W: Linked> Chain<W> {
    /// Builds a chain of `wrs` (not empty), `make` turning each into its C
    /// request given its scatter/gather list; the head.
    fn build<T>(
        &mut self,
        wrs: &[T],
        sg: impl Fn(&T) -> &[Sge],
        make: impl Fn(&T, *mut sys::ibv_sge, c_int) -> W,
    ) -> *mut W {
        self.wrs.clear();
        self.sges.clear();
        for wr in wrs {
            self.sges.extend(sg(wr).iter().map(sge));
        }
        let sges = self.sges.as_mut_ptr();
        let mut first = 0;
        for wr in wrs {
            let n = sg(wr).len();
            let list = if n == 0 {
                ptr::null_mut()
            } else {
                sges.wrapping_add(first)
            };
            // Lists are no longer than the device's `max_sge`, a C `int`.
            let num = c_int::try_from(n).unwrap_or(c_int::MAX);
            self.wrs.push(make(wr, list, num));
            first += n;
        }
        let len = self.wrs.len();
        let base = self.wrs.as_mut_ptr();
        for i in 1..len {
            // SAFETY: `i - 1` and `i` are below the vector's length, and no
            // reference into the vector is alive while the links are made.
            unsafe { *(*base.add(i - 1)).next() = base.add(i) };
        }
        base
    }

    /// Which request of the chain built last `bad` (the driver's `bad_wr`)
    /// points to.
    pub(super) fn index_of(&self, bad: *const W) -> usize {
        failed_index(
            self.wrs.as_ptr().addr(),
            bad.addr(),
            size_of::<W>(),
            self.wrs.len(),
        )
    }
}

impl Chain<sys::ibv_send_wr> {
    /// The chain of `wrs` (not empty); its head.
    pub(super) fn sends(&mut self, wrs: &[SendWr<'_>]) -> *mut sys::ibv_send_wr {
        self.build(wrs, |wr| wr.sg, send_wr)
    }
}

impl Chain<sys::ibv_recv_wr> {
    /// The chain of `wrs` (not empty); its head.
    pub(super) fn recvs(&mut self, wrs: &[RecvWr<'_>]) -> *mut sys::ibv_recv_wr {
        self.build(
            wrs,
            |wr| wr.sg,
            |wr, sg_list, num_sge| sys::ibv_recv_wr {
                wr_id: wr.wr_id,
                next: ptr::null_mut(),
                sg_list,
                num_sge,
            },
        )
    }
}

/// The index of the request at `bad` in a chain of `len` requests of
/// `size` bytes from `base`. A driver that points elsewhere (it must not)
/// is taken to have posted nothing.
pub(super) fn failed_index(base: usize, bad: usize, size: usize, len: usize) -> usize {
    bad.checked_sub(base)
        .filter(|off| off % size == 0)
        .map(|off| off / size)
        .filter(|&i| i < len)
        .unwrap_or(0)
}

/// A scatter/gather entry as verbs take it. Regions are registered at
/// IOVA 0, and a local entry is addressed in the IOVA space of its lkey's
/// region, like a remote one: its address is its offset.
pub(super) fn sge(s: &Sge) -> sys::ibv_sge {
    sys::ibv_sge {
        addr: s.offset,
        length: s.len,
        lkey: s.lkey.0,
    }
}

/// What verbs take of a send operation: its opcode, its immediate data (in
/// network byte order, as it travels), and where in the peer's region it
/// goes (an offset, the peer's region being registered at IOVA 0) under
/// which key.
pub(super) fn send_parts(
    op: &SendOp,
) -> (sys::ibv_wr_opcode::Type, Option<u32>, Option<(u64, u32)>) {
    use sys::ibv_wr_opcode::*;
    match *op {
        SendOp::Send => (IBV_WR_SEND, None, None),
        SendOp::SendWithImm(imm) => (IBV_WR_SEND_WITH_IMM, Some(imm.to_be()), None),
        SendOp::RdmaWrite(at) => (IBV_WR_RDMA_WRITE, None, Some((at.offset, at.rkey.0))),
        SendOp::RdmaWriteWithImm(at, imm) => (
            IBV_WR_RDMA_WRITE_WITH_IMM,
            Some(imm.to_be()),
            Some((at.offset, at.rkey.0)),
        ),
        SendOp::RdmaRead(at) => (IBV_WR_RDMA_READ, None, Some((at.offset, at.rkey.0))),
    }
}

/// The send flags of a request.
pub(super) fn send_flags(signaled: bool) -> u32 {
    if signaled {
        sys::ibv_send_flags::IBV_SEND_SIGNALED.0
    } else {
        0
    }
}

/// The C request of `wr`, whose scatter/gather list is `sg_list`.
fn send_wr(wr: &SendWr<'_>, sg_list: *mut sys::ibv_sge, num_sge: c_int) -> sys::ibv_send_wr {
    let (opcode, imm, remote) = send_parts(&wr.op);
    let mut c = sys::ibv_send_wr {
        wr_id: wr.wr_id,
        next: ptr::null_mut(),
        sg_list,
        num_sge,
        opcode,
        send_flags: send_flags(wr.signaled),
        ..Default::default()
    };
    if let Some(imm) = imm {
        c.__bindgen_anon_1.imm_data = imm;
    }
    if let Some((remote_addr, rkey)) = remote {
        c.wr.rdma = sys::ibv_send_wr__bindgen_ty_2__bindgen_ty_1 { remote_addr, rkey };
    }
    c
}

/// What this crate reads of a verbs work completion.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct RawWc {
    pub(super) wr_id: u64,
    pub(super) status: sys::ibv_wc_status::Type,
    pub(super) opcode: sys::ibv_wc_opcode::Type,
    pub(super) byte_len: u32,
    pub(super) flags: u32,
    /// Immediate data, in network byte order.
    pub(super) imm: u32,
    pub(super) qp_num: u32,
}

impl From<&sys::ibv_wc> for RawWc {
    fn from(wc: &sys::ibv_wc) -> Self {
        RawWc {
            wr_id: wc.wr_id(),
            status: wc
                .error()
                .map_or(sys::ibv_wc_status::IBV_WC_SUCCESS, |(status, _)| status),
            opcode: wc.opcode(),
            byte_len: u32::try_from(wc.len()).unwrap_or(u32::MAX),
            flags: wc.wc_flags.0,
            imm: wc.imm_data,
            qp_num: wc.qp_num,
        }
    }
}

/// A completion status; those this crate does not name keep their number.
pub(super) fn wc_status(raw: sys::ibv_wc_status::Type) -> WcStatus {
    use sys::ibv_wc_status::*;
    match raw {
        IBV_WC_SUCCESS => WcStatus::Success,
        IBV_WC_LOC_LEN_ERR => WcStatus::LocalLength,
        IBV_WC_LOC_PROT_ERR => WcStatus::LocalProtection,
        IBV_WC_WR_FLUSH_ERR => WcStatus::Flushed,
        IBV_WC_REM_INV_REQ_ERR => WcStatus::RemoteInvalidRequest,
        IBV_WC_REM_ACCESS_ERR => WcStatus::RemoteAccess,
        IBV_WC_REM_OP_ERR => WcStatus::RemoteOperation,
        IBV_WC_RETRY_EXC_ERR => WcStatus::RetryExceeded,
        IBV_WC_RNR_RETRY_EXC_ERR => WcStatus::RnrRetryExceeded,
        other => WcStatus::Other(other),
    }
}

/// A completion opcode, if it is one of the operations this crate posts.
pub(super) fn wc_opcode(raw: sys::ibv_wc_opcode::Type) -> Option<WcOpcode> {
    use sys::ibv_wc_opcode::*;
    Some(match raw {
        IBV_WC_SEND => WcOpcode::Send,
        IBV_WC_RDMA_WRITE => WcOpcode::RdmaWrite,
        IBV_WC_RDMA_READ => WcOpcode::RdmaRead,
        IBV_WC_RECV => WcOpcode::Recv,
        IBV_WC_RECV_RDMA_WITH_IMM => WcOpcode::RecvRdmaWithImm,
        _ => return None,
    })
}

/// The completion `raw` reports, as a request of kind `opcode`. Byte count
/// and immediate data are read only on success, the only case where verbs
/// define them; immediate data only when the device flags it.
pub(super) fn completion(raw: &RawWc, opcode: WcOpcode) -> WorkCompletion {
    let status = wc_status(raw.status);
    let ok = status.is_success();
    let with_imm = raw.flags & sys::ibv_wc_flags::IBV_WC_WITH_IMM.0 != 0;
    WorkCompletion {
        wr_id: raw.wr_id,
        status,
        opcode,
        byte_len: if ok { raw.byte_len } else { 0 },
        imm: (ok && with_imm).then(|| u32::from_be(raw.imm)),
        qp: QpNum(raw.qp_num),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::provider::{Lkey, RemoteAddr, Rkey};

    const AT: RemoteAddr = RemoteAddr {
        rkey: Rkey(0x55),
        offset: 4096,
    };

    #[test]
    fn local_entries_are_addressed_by_their_offset() {
        let s = sge(&Sge {
            lkey: Lkey(9),
            offset: 128,
            len: 64,
        });
        assert_eq!((s.addr, s.length, s.lkey), (128, 64, 9));
    }

    #[test]
    fn every_operation_has_its_opcode_immediate_and_remote_address() {
        use sys::ibv_wr_opcode::*;
        let imm = 0x0102_0304u32;
        assert_eq!(send_parts(&SendOp::Send), (IBV_WR_SEND, None, None));
        assert_eq!(
            send_parts(&SendOp::SendWithImm(imm)),
            (IBV_WR_SEND_WITH_IMM, Some(imm.to_be()), None)
        );
        assert_eq!(
            send_parts(&SendOp::RdmaWrite(AT)),
            (IBV_WR_RDMA_WRITE, None, Some((4096, 0x55)))
        );
        assert_eq!(
            send_parts(&SendOp::RdmaWriteWithImm(AT, imm)),
            (
                IBV_WR_RDMA_WRITE_WITH_IMM,
                Some(imm.to_be()),
                Some((4096, 0x55))
            )
        );
        assert_eq!(
            send_parts(&SendOp::RdmaRead(AT)),
            (IBV_WR_RDMA_READ, None, Some((4096, 0x55)))
        );
        // Network byte order: the most significant byte first in memory.
        assert_eq!(imm.to_be().to_ne_bytes(), [1, 2, 3, 4]);
        assert_eq!(send_flags(true), 2);
        assert_eq!(send_flags(false), 0);
    }

    #[test]
    fn a_send_chain_links_every_request_and_its_entries() {
        let a = [Sge {
            lkey: Lkey(1),
            offset: 0,
            len: 8,
        }];
        let b = [
            Sge {
                lkey: Lkey(2),
                offset: 16,
                len: 4,
            },
            Sge {
                lkey: Lkey(3),
                offset: 32,
                len: 2,
            },
        ];
        let wrs = [
            SendWr {
                wr_id: 1,
                op: SendOp::Send,
                sg: &a,
                signaled: false,
            },
            SendWr {
                wr_id: 2,
                op: SendOp::RdmaWrite(AT),
                sg: &[],
                signaled: true,
            },
            SendWr {
                wr_id: 3,
                op: SendOp::RdmaRead(AT),
                sg: &b,
                signaled: true,
            },
        ];
        let mut chain = Chain::default();
        let head = chain.sends(&wrs);
        let mut seen = Vec::new();
        let mut at = head;
        while !at.is_null() {
            // SAFETY: the chain is alive and unchanged, and every link
            // points to one of its requests, the last to NULL.
            let wr = unsafe { *at };
            let sges: Vec<(u64, u32, u32)> = (0..wr.num_sge as usize)
                .map(|i| {
                    // SAFETY: `num_sge` entries follow `sg_list`, in the
                    // chain's live entry vector.
                    let s = unsafe { *wr.sg_list.add(i) };
                    (s.addr, s.length, s.lkey)
                })
                .collect();
            seen.push((wr.wr_id, wr.opcode, wr.send_flags, sges));
            at = wr.next;
        }
        use sys::ibv_wr_opcode::*;
        assert_eq!(
            seen,
            vec![
                (1, IBV_WR_SEND, 0, vec![(0, 8, 1)]),
                (2, IBV_WR_RDMA_WRITE, 2, vec![]),
                (3, IBV_WR_RDMA_READ, 2, vec![(16, 4, 2), (32, 2, 3)]),
            ]
        );
        assert_eq!(chain.index_of(head), 0);
        assert_eq!(chain.index_of(head.wrapping_add(2)), 2);
    }

    #[test]
    fn a_receive_chain_links_every_request() {
        let s = [Sge {
            lkey: Lkey(4),
            offset: 256,
            len: 256,
        }];
        let wrs = [RecvWr { wr_id: 7, sg: &s }, RecvWr { wr_id: 8, sg: &s }];
        let mut chain = Chain::default();
        let head = chain.recvs(&wrs);
        // SAFETY: the chain is alive and unchanged; it has two requests.
        let (first, second) = unsafe { (*head, *head.add(1)) };
        assert_eq!((first.wr_id, first.num_sge), (7, 1));
        assert_eq!(first.next, head.wrapping_add(1));
        assert_eq!((second.wr_id, second.next), (8, ptr::null_mut()));
        // SAFETY: the second request's one entry is in the live chain.
        let entry = unsafe { *second.sg_list };
        assert_eq!((entry.addr, entry.length, entry.lkey), (256, 256, 4));
    }

    #[test]
    fn a_bad_request_outside_the_chain_counts_as_the_first() {
        assert_eq!(failed_index(1000, 1000, 10, 3), 0);
        assert_eq!(failed_index(1000, 1020, 10, 3), 2);
        assert_eq!(failed_index(1000, 1030, 10, 3), 0);
        assert_eq!(failed_index(1000, 1005, 10, 3), 0);
        assert_eq!(failed_index(1000, 0, 10, 3), 0);
    }

    #[test]
    fn statuses_map_and_unknown_ones_keep_their_number() {
        use sys::ibv_wc_status::*;
        let known = [
            (IBV_WC_SUCCESS, WcStatus::Success),
            (IBV_WC_LOC_LEN_ERR, WcStatus::LocalLength),
            (IBV_WC_LOC_PROT_ERR, WcStatus::LocalProtection),
            (IBV_WC_WR_FLUSH_ERR, WcStatus::Flushed),
            (IBV_WC_REM_INV_REQ_ERR, WcStatus::RemoteInvalidRequest),
            (IBV_WC_REM_ACCESS_ERR, WcStatus::RemoteAccess),
            (IBV_WC_REM_OP_ERR, WcStatus::RemoteOperation),
            (IBV_WC_RETRY_EXC_ERR, WcStatus::RetryExceeded),
            (IBV_WC_RNR_RETRY_EXC_ERR, WcStatus::RnrRetryExceeded),
        ];
        for (raw, status) in known {
            assert_eq!(wc_status(raw), status);
        }
        assert_eq!(wc_status(IBV_WC_FATAL_ERR), WcStatus::Other(19));
        assert_eq!(wc_status(IBV_WC_GENERAL_ERR), WcStatus::Other(21));
        assert_eq!(wc_status(1000), WcStatus::Other(1000));
    }

    #[test]
    fn opcodes_map_for_what_this_crate_posts() {
        use sys::ibv_wc_opcode::*;
        assert_eq!(wc_opcode(IBV_WC_SEND), Some(WcOpcode::Send));
        assert_eq!(wc_opcode(IBV_WC_RDMA_WRITE), Some(WcOpcode::RdmaWrite));
        assert_eq!(wc_opcode(IBV_WC_RDMA_READ), Some(WcOpcode::RdmaRead));
        assert_eq!(wc_opcode(IBV_WC_RECV), Some(WcOpcode::Recv));
        assert_eq!(
            wc_opcode(IBV_WC_RECV_RDMA_WITH_IMM),
            Some(WcOpcode::RecvRdmaWithImm)
        );
        assert_eq!(wc_opcode(IBV_WC_COMP_SWAP), None);
        assert_eq!(wc_opcode(IBV_WC_LOCAL_INV), None);
    }

    fn raw(status: u32, flags: u32) -> RawWc {
        RawWc {
            wr_id: 42,
            status,
            opcode: sys::ibv_wc_opcode::IBV_WC_RECV,
            byte_len: 100,
            flags,
            imm: 0xdead_beefu32.to_be(),
            qp_num: 0x11,
        }
    }

    #[test]
    fn immediate_data_comes_only_when_flagged_and_successful() {
        let with_imm = sys::ibv_wc_flags::IBV_WC_WITH_IMM.0;
        let wc = completion(&raw(0, with_imm), WcOpcode::Recv);
        assert_eq!(
            wc,
            WorkCompletion {
                wr_id: 42,
                status: WcStatus::Success,
                opcode: WcOpcode::Recv,
                byte_len: 100,
                imm: Some(0xdead_beef),
                qp: QpNum(0x11),
            }
        );
        assert_eq!(completion(&raw(0, 0), WcOpcode::Recv).imm, None);
        let flushed = completion(
            &raw(sys::ibv_wc_status::IBV_WC_WR_FLUSH_ERR, with_imm),
            WcOpcode::Recv,
        );
        assert_eq!(flushed.status, WcStatus::Flushed);
        assert_eq!((flushed.byte_len, flushed.imm), (0, None));
    }

    #[test]
    fn a_default_completion_reads_as_a_failure() {
        // What `poll_cq` hands the driver to fill: unwritten fields must
        // not pass for a success.
        let raw = RawWc::from(&sys::ibv_wc::default());
        assert_ne!(wc_status(raw.status), WcStatus::Success);
        assert_eq!(wc_opcode(raw.opcode), None);
    }
}
