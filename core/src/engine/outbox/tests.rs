//! Unit tests of the outbox: transmit order, partial writes and pinning,
//! packets let go before their turn, and one frame per datagram.

use std::vec::Vec as StdVec;

use super::*;
use crate::btl::{RegSlot, Registrations};
use crate::engine::framing::{Datagram, Stream};
use crate::engine::window::Ack;
use crate::pool::{FragmentPoolConfig, FragmentPools, FragmentPoolsConfig};
use crate::wire::ControlRepr;
use crate::wire::{CloseReason, CloseRepr, DoneRepr, Flags, Limits, PacketRepr, parse};

type Regs = Registrations<StdVec<u8>, [RegSlot<StdVec<u8>>; 0]>;
type Cells = core::pin::Pin<std::boxed::Box<[crate::pool::PoolCell]>>;

/// A peer that retains DONE packets numbered as their transfer, and
/// counts those it lets go.
struct Packets {
    retained: StdVec<(u64, Outgoing)>,
    let_go: u64,
}

impl Packets {
    fn new(seqs: impl IntoIterator<Item = u64>, fix: &Fixture) -> Self {
        let retained = seqs
            .into_iter()
            .map(|seq| {
                let mut out = Outgoing::control(ControlRepr::Done(DoneRepr { xfer_id: seq }));
                out.stamp(seq, 0, 0, &Trailers::default(), fix.pools.view());
                (seq, out)
            })
            .collect();
        Packets {
            retained,
            let_go: 0,
        }
    }

    /// The peer lets `seq` go (acknowledged).
    fn release(&mut self, seq: u64) {
        self.retained.retain(|(s, _)| *s != seq);
        self.let_go += 1;
    }
}

impl Retained for Packets {
    fn retained(&self, seq: u64) -> Option<&Outgoing> {
        self.retained
            .iter()
            .find(|(s, _)| *s == seq)
            .map(|(_, o)| o)
    }

    fn let_go(&self) -> Option<u64> {
        Some(self.let_go)
    }
}

struct Fixture {
    pools: FragmentPools<Cells>,
    regs: Regs,
}

impl Fixture {
    fn new() -> Self {
        let small = FragmentPoolConfig {
            fragment_size: 64,
            num: 1,
            max: 1,
            inc: 1,
        };
        let cfg = FragmentPoolsConfig {
            small,
            eager: small,
            max: small,
        };
        let region: Cells = std::iter::repeat_with(crate::pool::PoolCell::new)
            .take(cfg.required_bytes())
            .collect::<std::boxed::Box<[_]>>()
            .into();
        Fixture {
            pools: FragmentPools::owning(region, cfg).expect("pools"),
            regs: Registrations::inline(),
        }
    }
}

/// The bytes of one transmit, joined.
fn bytes_of<const W: usize, F: Framing>(
    outbox: &mut Outbox<W>,
    peer: &Packets,
    fix: &Fixture,
) -> StdVec<u8> {
    outbox
        .poll_transmit::<F, _>(Some(peer), fix.pools.view(), &fix.regs)
        .map(|s| s.concat())
        .unwrap_or_default()
}

/// What the frames in `bytes` are: DONE by transfer, or the packet type.
fn frames(mut bytes: &[u8]) -> StdVec<std::string::String> {
    let mut out = StdVec::new();
    while !bytes.is_empty() {
        let (header, packet, len) = parse(bytes, &Limits::new(1024)).expect("whole frames");
        out.push(match packet {
            PacketRepr::Control(ControlRepr::Done(d)) => std::format!("done {}", d.xfer_id),
            PacketRepr::Ack(_) => std::format!("ack {}", header.ack),
            other => std::format!("{:?}", other.packet_type()),
        });
        bytes = &bytes[len..];
    }
    out
}

fn ack(cumulative: u64) -> ControlFrame {
    ack_frame(
        Ack {
            cumulative,
            sack: 0,
        },
        0,
        &Trailers::default(),
        Flags::empty(),
    )
}

use crate::engine::packet::{Trailers, ack_frame};

#[test]
fn control_frames_then_the_latest_ack_then_packets_in_one_write() {
    let fix = Fixture::new();
    let peer = Packets::new([1, 2], &fix);
    let mut outbox = Outbox::<8>::new();
    assert!(outbox.is_empty());
    outbox.enqueue(1, &peer);
    outbox.enqueue(2, &peer);
    outbox.set_ack(ack(3));
    outbox.set_ack(ack(4));
    assert!(outbox.push_control(ControlFrame::close(
        CloseRepr {
            reason: CloseReason::Normal
        },
        None
    )));
    assert!(outbox.holds(1) && outbox.holds(2) && !outbox.holds(3));
    let bytes = bytes_of::<8, Stream>(&mut outbox, &peer, &fix);
    assert_eq!(
        frames(&bytes),
        ["Close", "ack 4", "done 1", "done 2"],
        "the newer ACK took the older's place"
    );
    let written =
        outbox.handle_written::<Stream, _>(bytes.len(), Some(&peer), fix.pools.view(), &fix.regs);
    assert_eq!(
        written,
        Written::default(),
        "nothing was left partly written"
    );
    assert!(outbox.is_empty());
    assert!(
        outbox
            .poll_transmit::<Stream, _>(Some(&peer), fix.pools.view(), &fix.regs)
            .is_none()
    );
}

#[test]
fn a_frame_partly_written_is_pinned_and_finished_first() {
    let fix = Fixture::new();
    let peer = Packets::new([1, 2], &fix);
    let mut outbox = Outbox::<8>::new();
    outbox.enqueue(1, &peer);
    outbox.enqueue(2, &peer);
    let all = bytes_of::<8, Stream>(&mut outbox, &peer, &fix);
    let first = peer
        .retained(1)
        .expect("retained")
        .wire_len(fix.pools.view(), &fix.regs);
    // The whole first packet and 3 bytes of the second.
    let written =
        outbox.handle_written::<Stream, _>(first + 3, Some(&peer), fix.pools.view(), &fix.regs);
    assert_eq!(
        written,
        Written {
            unpinned: None,
            pinned: Some(2)
        }
    );
    assert!(outbox.is_mid_frame() && outbox.holds(2) && !outbox.holds(1));
    // An ACK queued now waits for the frame begun.
    outbox.set_ack(ack(9));
    let rest = bytes_of::<8, Stream>(&mut outbox, &peer, &fix);
    assert_eq!(
        &rest[..all.len() - first - 3],
        &all[first + 3..],
        "the rest of packet 2 first"
    );
    assert_eq!(frames(&rest[all.len() - first - 3..]), ["ack 9"]);
    let written =
        outbox.handle_written::<Stream, _>(rest.len(), Some(&peer), fix.pools.view(), &fix.regs);
    assert_eq!(
        written.unpinned,
        Some(2),
        "written whole: the peer may let it go"
    );
    assert!(outbox.is_empty() && !outbox.is_mid_frame());
}

#[test]
fn packets_let_go_before_their_turn_are_not_written() {
    let fix = Fixture::new();
    let mut peer = Packets::new([1, 2, 3], &fix);
    let mut outbox = Outbox::<8>::new();
    for seq in 1..=3 {
        outbox.enqueue(seq, &peer);
    }
    // Acknowledged by way of another link.
    peer.release(2);
    let bytes = bytes_of::<8, Stream>(&mut outbox, &peer, &fix);
    assert_eq!(frames(&bytes), ["done 1", "done 3"]);
    assert!(!outbox.holds(2));
    // A link whose peer is gone writes none of them.
    let mut orphan = Outbox::<8>::new();
    orphan.enqueue(1, &peer);
    assert!(
        orphan
            .poll_transmit::<Stream, Packets>(None, fix.pools.view(), &fix.regs)
            .is_none()
    );
    assert!(orphan.is_empty());
}

#[test]
fn a_full_queue_makes_room_by_dropping_what_the_peer_let_go() {
    // A window's worth queued and not yet written; the peer's ACK lets
    // them go, and the next window's packets must all still be queued.
    let fix = Fixture::new();
    let mut peer = Packets::new(1..=8, &fix);
    let mut outbox = Outbox::<4>::new();
    for seq in 1..=4 {
        outbox.enqueue(seq, &peer);
    }
    for seq in 1..=4 {
        peer.release(seq);
    }
    for seq in 5..=8 {
        outbox.enqueue(seq, &peer);
    }
    let bytes = bytes_of::<4, Stream>(&mut outbox, &peer, &fix);
    assert_eq!(frames(&bytes), ["done 5", "done 6", "done 7", "done 8"]);
}

#[test]
fn a_packet_let_go_in_the_middle_of_the_queue_leaves_it_once_the_peer_says_so() {
    let fix = Fixture::new();
    let mut peer = Packets::new([1, 2, 3], &fix);
    let mut outbox = Outbox::<8>::new();
    for seq in 1..=3 {
        outbox.enqueue(seq, &peer);
    }
    // Looked over while the peer retains all three.
    assert!(
        outbox
            .poll_transmit::<Datagram, _>(Some(&peer), fix.pools.view(), &fix.regs)
            .is_some()
    );
    outbox.handle_written::<Datagram, _>(0, Some(&peer), fix.pools.view(), &fix.regs);
    assert!(outbox.holds(3), "queued");
    peer.release(3);
    // The next transmit sees that the peer let one go and drops it.
    assert_eq!(
        frames(&bytes_of::<8, Datagram>(&mut outbox, &peer, &fix)),
        ["done 2"]
    );
    assert!(!outbox.holds(3));
    // A packet numbered above all ever queued is held nowhere.
    assert!(!outbox.holds(4));
}

#[test]
fn over_datagrams_each_transmit_is_one_frame() {
    let fix = Fixture::new();
    let peer = Packets::new([1, 2], &fix);
    let mut outbox = Outbox::<8>::new();
    outbox.set_ack(ack(5));
    outbox.enqueue(1, &peer);
    outbox.enqueue(2, &peer);
    let mut seen = StdVec::new();
    loop {
        let bytes = bytes_of::<8, Datagram>(&mut outbox, &peer, &fix);
        if bytes.is_empty() {
            break;
        }
        seen.extend(frames(&bytes));
        // Sent or dropped, the datagram is done with: nothing is pinned.
        let written =
            outbox.handle_written::<Datagram, _>(0, Some(&peer), fix.pools.view(), &fix.regs);
        assert_eq!(written, Written::default());
        assert!(!outbox.is_mid_frame());
    }
    assert_eq!(seen, ["ack 5", "done 1", "done 2"]);
}

#[test]
fn clearing_hands_back_the_packet_pinned() {
    let fix = Fixture::new();
    let peer = Packets::new([1], &fix);
    let mut outbox = Outbox::<8>::new();
    outbox.enqueue(1, &peer);
    let _ = bytes_of::<8, Stream>(&mut outbox, &peer, &fix);
    let written = outbox.handle_written::<Stream, _>(1, Some(&peer), fix.pools.view(), &fix.regs);
    assert_eq!(written.pinned, Some(1));
    assert_eq!(outbox.clear(), Some(1));
    assert!(outbox.is_empty());
    assert_eq!(outbox.clear(), None, "once");
}

#[test]
fn a_datagram_offered_but_not_sent_and_then_let_go_is_skipped() {
    // The driver's socket was full: it took the transmit but could not
    // send it, and reported nothing. The packet is acknowledged meanwhile
    // (an earlier copy arrived). The next transmit must go on with the
    // packets after it, not offer nothing for ever.
    let fix = Fixture::new();
    let mut peer = Packets::new([1, 2], &fix);
    let mut outbox = Outbox::<8>::new();
    outbox.enqueue(1, &peer);
    outbox.enqueue(2, &peer);
    assert_eq!(
        frames(&bytes_of::<8, Datagram>(&mut outbox, &peer, &fix)),
        ["done 1"]
    );
    peer.release(1);
    assert_eq!(
        frames(&bytes_of::<8, Datagram>(&mut outbox, &peer, &fix)),
        ["done 2"]
    );
    outbox.handle_written::<Datagram, _>(0, Some(&peer), fix.pools.view(), &fix.regs);
    peer.release(2);
    assert!(bytes_of::<8, Datagram>(&mut outbox, &peer, &fix).is_empty());
    assert!(outbox.is_empty());
}

#[test]
fn a_put_whose_payload_changes_between_two_parts_of_its_write_still_checks() {
    use crate::btl::{Access, MemSlice};
    use crate::wire::PutRepr;
    let fix = Fixture::new();
    let mut regs = Registrations::<StdVec<u8>, [RegSlot<StdVec<u8>>; 1]>::inline();
    let handle = regs
        .register(std::vec![1u8; 300], Access::empty())
        .unwrap_or_else(|_| panic!("a slot"));
    let data = MemSlice {
        handle,
        offset: 0,
        len: 300,
    };
    let put = PutRepr {
        xfer_id: 7,
        handle: 9,
        offset: 0,
        total_len: 300,
        index: 0,
        count: 1,
    };
    let mut out = Outgoing::put(&put, data, 0);
    let trailers = Trailers {
        checksum: true,
        seal: None,
    };
    out.stamp(1, 0, 0, &trailers, fix.pools.view());
    struct One(Outgoing);
    impl Retained for One {
        fn retained(&self, seq: u64) -> Option<&Outgoing> {
            (seq == 1).then_some(&self.0)
        }
    }
    let peer = One(out);
    let mut outbox = Outbox::<4>::new();
    outbox.enqueue(1, &peer);
    // The payload changes after stamping, before the first byte goes.
    regs.region_mut(handle).expect("region")[..10].fill(2);
    let first: StdVec<u8> = outbox
        .poll_transmit::<Stream, _>(Some(&peer), fix.pools.view(), &regs)
        .expect("bytes")
        .concat();
    // A write takes 100 bytes; then a put lands in the part not written.
    let _ = outbox.handle_written::<Stream, _>(100, Some(&peer), fix.pools.view(), &regs);
    regs.region_mut(handle).expect("region")[200..].fill(3);
    let rest: StdVec<u8> = outbox
        .poll_transmit::<Stream, _>(Some(&peer), fix.pools.view(), &regs)
        .expect("the rest")
        .concat();
    let mut wire = first[..100].to_vec();
    wire.extend_from_slice(&rest);
    let (header, packet, len) = parse(&wire, &Limits::new(1024)).expect("the peer takes it");
    assert_eq!(len, wire.len());
    assert!(header.flags.contains(Flags::CHECKSUM));
    let PacketRepr::Put { data, .. } = packet else {
        panic!("{packet:?}");
    };
    assert_eq!(
        &data[..10],
        &[2; 10],
        "changed before the write: sent as changed"
    );
    assert_eq!(&data[200..], &[3; 100][..], "changed between its parts");
    let written =
        outbox.handle_written::<Stream, _>(rest.len(), Some(&peer), fix.pools.view(), &regs);
    assert_eq!(written.unpinned, Some(1), "written whole");
}
