//! The harness trait: what a backend offers the suite.
//!
//! A conformance test runs between two processes, [`Side::A`] and
//! [`Side::B`], each with its own [`Btl`]. Something has to carry bytes
//! between them: an in-memory stream or datagram pair, sockets, a simulated
//! network. The suite never sees that machinery; it calls
//! [`World::progress`] and the harness drives both BTLs and moves whatever is
//! in flight. The loopback fits the same shape with both sides being one
//! BTL object ([`Capabilities::same_btl`]).

use btl_core::btl::{Btl, LostReason};
use btl_core::endpoint::EndpointId;
use btl_core::pool::{FragmentClass, PoolStats};

/// How the harnesses' BTLs hold registered memory: owned buffers, handed
/// back at deregistration.
pub type Memory = Vec<u8>;

/// One of the two processes of a conformance test.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Side {
    /// The process that usually starts operations.
    A,
    /// The process that usually serves them.
    B,
}

impl Side {
    /// Both sides, A first.
    pub const BOTH: [Side; 2] = [Side::A, Side::B];

    /// The side at the other end.
    pub const fn other(self) -> Side {
        match self {
            Side::A => Side::B,
            Side::B => Side::A,
        }
    }

    /// 0 for A, 1 for B: the side's place in a pair of anything.
    pub const fn index(self) -> usize {
        self as usize
    }
}

/// A handshake a rogue third peer sends, for the handshake suite.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BadHandshake {
    /// A well-formed handshake with another major protocol version.
    WrongVersion,
    /// A well-formed handshake that cannot prove the job key.
    WrongJobKey,
    /// Bytes that are not a handshake at all.
    Garbage,
}

impl BadHandshake {
    /// Every kind, in the order the suite tries them.
    pub const ALL: [BadHandshake; 3] = [Self::WrongVersion, Self::WrongJobKey, Self::Garbage];

    /// The reason a refusal reports when the BTL names one in an error event.
    pub fn reason(self) -> LostReason {
        match self {
            Self::WrongVersion => LostReason::VersionMismatch,
            Self::WrongJobKey => LostReason::AuthFailed,
            Self::Garbage => LostReason::ProtocolViolation,
        }
    }
}

/// What became of the last handshake injected with
/// [`World::inject_handshake`], as the harness sees it on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HandshakeOutcome {
    /// The target has neither refused nor accepted the rogue yet.
    Pending,
    /// The target closed the rogue's connection (or, over datagrams,
    /// dropped it for good) without accepting it.
    Refused,
    /// The target accepted the rogue as a peer: a conformance failure.
    Accepted,
}

/// What a harness can do and how long the suite may wait for it.
///
/// There is deliberately no `Default`: a field added here must be decided by
/// every harness, not silently inherited.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Capabilities {
    /// A and B are one BTL object (the loopback): the suite polls it once
    /// and sees both sides' events there.
    pub same_btl: bool,
    /// Progress rounds within which any operation of the suite must finish,
    /// timeouts included; waiting longer is a failure, never a hang.
    pub max_rounds: u32,
    /// Rounds after which nothing sent earlier is still in flight: once a
    /// test has seen what it waits for, it runs this many more before
    /// checking that nothing arrived twice (a duplicating network needs
    /// enough for its last duplicate).
    pub linger_rounds: u32,
    /// Largest put or get the suite tries (64 MiB unless the harness is too
    /// slow for it); larger ones are still bounded by the BTL's attributes.
    pub max_rdma_len: u64,
    /// Largest header plus payload that `sendi` takes when it has resources.
    pub sendi_max: usize,
    /// [`World::pause`] and [`World::resume`] work: gates the `pause` group.
    pub pause: bool,
    /// [`World::kill`] works: gates the `peer_loss` group.
    pub peer_loss: bool,
    /// [`World::inject_handshake`] works: gates the `handshake` group.
    pub handshake: bool,
    /// [`World::inject_garbage`] works: gates the `garbage` group.
    pub garbage: bool,
}

impl Capabilities {
    /// Names of the capability-gated test groups these capabilities enable,
    /// as written in `conformance_suite!(..., gated: [...])`.
    pub fn gated_groups(&self) -> Vec<&'static str> {
        [
            (self.pause, "pause"),
            (self.peer_loss, "peer_loss"),
            (self.handshake, "handshake"),
            (self.garbage, "garbage"),
        ]
        .into_iter()
        .filter_map(|(on, name)| on.then_some(name))
        .collect()
    }
}

/// Two processes, their BTLs, and whatever carries bytes between them.
///
/// A harness builds both BTLs, makes each reach the other (`add_procs`), and
/// hands them out; registered memory is owned (a [`Memory`] the BTL hands
/// back at deregistration).
/// The fault hooks have defaults that panic: a harness implements those its
/// [`Capabilities`] declare, and the suite calls only those.
pub trait World {
    /// What this harness offers.
    fn capabilities(&self) -> Capabilities;

    /// The BTL of `side` (the same object for both sides when
    /// [`Capabilities::same_btl`]).
    fn btl(&mut self, side: Side) -> &mut dyn Btl<Memory = Memory>;

    /// The endpoint through which `side` reaches the other side.
    fn peer(&self, side: Side) -> EndpointId;

    /// One round: drives every live, unpaused BTL and moves the bytes in
    /// flight between them (and advances simulated time, if the harness
    /// has any). Never blocks.
    fn progress(&mut self);

    /// The fragment pools of `side`'s BTL, class by class: what they lend
    /// out now and what they can. A harness whose BTL lives in another
    /// process reads them there, with what the BTL took for itself.
    fn pool_stats(&mut self, side: Side) -> [(FragmentClass, PoolStats); 3] {
        let pools = self.btl(side).pools();
        FragmentClass::ALL.map(|class| (class, pools.stats(class)))
    }

    /// Stops driving `side`: its BTL is not progressed and nothing is
    /// delivered into it until [`World::resume`], as if its process stopped
    /// entering the library. Bytes for it stay in flight.
    fn pause(&mut self, side: Side) {
        unsupported("pause", side)
    }

    /// Drives `side` again after [`World::pause`].
    fn resume(&mut self, side: Side) {
        unsupported("resume", side)
    }

    /// Kills the process of `side` without a goodbye: its BTL is never
    /// driven again and the suite no longer touches it. Whether the other
    /// side learns of it by a closed connection or a timeout is the
    /// harness's choice.
    fn kill(&mut self, side: Side) {
        unsupported("kill", side)
    }

    /// Has a rogue third process open a connection to `target` and send a
    /// handshake of `kind`; [`World::handshake_outcome`] then tells what
    /// the target did with it.
    fn inject_handshake(&mut self, target: Side, kind: BadHandshake) {
        let _ = kind;
        unsupported("inject_handshake", target)
    }

    /// What became of the rogue of the last [`World::inject_handshake`].
    fn handshake_outcome(&mut self) -> HandshakeOutcome {
        unsupported("handshake_outcome", Side::A)
    }

    /// Puts bytes that break the protocol into the established connection
    /// towards `target`, as if its peer had sent them.
    fn inject_garbage(&mut self, target: Side) {
        unsupported("inject_garbage", target)
    }
}

fn unsupported(hook: &str, side: Side) -> ! {
    panic!(
        "this harness does not implement `{hook}` (called for side {side:?}); its capabilities must not declare it"
    )
}

/// Fails unless the capability-gated groups a test file instantiates are
/// exactly those the harness declares, so that a declared capability is
/// never left untested and no test runs against a harness that cannot
/// support it. `conformance_suite!` calls it.
pub fn check_gated_groups(world: &dyn World, instantiated: &[&str]) {
    let mut declared = world.capabilities().gated_groups();
    let mut instantiated = instantiated.to_vec();
    declared.sort_unstable();
    instantiated.sort_unstable();
    assert_eq!(
        declared, instantiated,
        "the gated groups instantiated for this harness differ from the capabilities it declares"
    );
}
