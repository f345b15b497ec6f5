//! The futures of operations: a send, and a put or get whose buffer the
//! future owns until it hands it back.
//!
//! An operation starts when it is called, not when its future is first
//! polled: a window of sends is a loop of calls, then their futures
//! awaited. If the module has no room for it then (the peer's queue is
//! full, its credits spent), it waits its turn: the operations waiting for
//! room to one peer start in the order they were called, and none called
//! later passes them. So messages to one peer arrive in the order of the
//! `send` calls.
//!
//! Cancellation, for each:
//! - dropped while it waits for room: withdrawn, nothing was sent, and the
//!   next one waiting for that peer takes its turn;
//! - dropped after the module took it: it finishes in the background, and
//!   its result is not seen; a put's or get's buffer goes back to the
//!   module, which frees it when the operation ends.
//!
//! Either way the operation's completion is taken by the driver exactly
//! once, and no event meant for anyone else is consumed.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use btl_std::driver::module::Transport;
use btl_std::{
    Access, Btl, BtlError, DescFlags, EndpointId, MemSlice, Order, RemoteSlice, SendError,
    SendStatus, Tag,
};

use crate::state::{Outcome, Shared, State};
use crate::{Error, TransferError};

/// How an operation ended: its result, and the buffer of a put or get.
type Ended = (Result<(), Error>, Option<Vec<u8>>);

/// Polls the outcome of `ticket`, until it ends.
fn poll_outcome<T: Transport>(
    state: &mut State<T>,
    ticket: u64,
    cx: &mut Context<'_>,
) -> Poll<Ended> {
    match state.outcomes.get_mut(&ticket) {
        Some(Outcome::Waiting(waker)) => {
            if let Some(why) = &state.stopped {
                let why = why.clone();
                state.outcomes.insert(ticket, Outcome::Abandoned);
                return Poll::Ready((Err(why), None));
            }
            if !waker.as_ref().is_some_and(|w| w.will_wake(cx.waker())) {
                *waker = Some(cx.waker().clone());
            }
            Poll::Pending
        }
        Some(Outcome::Done(..)) => match state.outcomes.remove(&ticket) {
            Some(Outcome::Done(result, buffer)) => {
                let result = match (result, &state.stopped) {
                    // Ended by the endpoint's end (a close, the driver's
                    // drop): told as such.
                    (Err(BtlError::Finalized), Some(why)) => Err(why.clone()),
                    (result, _) => result.map_err(Error::Btl),
                };
                Poll::Ready((result, buffer))
            }
            _ => Poll::Ready((Err(Error::Polled), None)),
        },
        Some(Outcome::Abandoned) | None => Poll::Ready((Err(Error::Polled), None)),
    }
}

/// Marks `ticket` abandoned if it is still under way; forgets it if done.
fn abandon<T: Transport>(state: &mut State<T>, ticket: u64) {
    match state.outcomes.get(&ticket) {
        Some(Outcome::Waiting(_)) => {
            state.outcomes.insert(ticket, Outcome::Abandoned);
        }
        Some(Outcome::Done(..)) => {
            state.outcomes.remove(&ticket);
        }
        _ => {}
    }
}

/// Where an operation stands, as its future sees it.
enum Stage<I, R> {
    /// Waiting for room to its peer, in its turn `ticket`, with its input.
    Waiting { turn: u64, input: I },
    /// Taken by the module; its completion is `ticket`'s.
    Taken(u64),
    /// Ended before the module took it.
    Ended(R),
    /// Its output was handed out.
    Finished,
}

/// What a start of an operation came to.
enum Started<I, R> {
    Taken(u64),
    Ended(R),
    /// No room: the input back.
    NoRoom(I),
}

/// Starts an operation now, or queues it for room to `peer` behind those
/// already waiting: the stage its future begins in.
fn begin<T: Transport, I, R>(
    state: &mut State<T>,
    peer: EndpointId,
    input: I,
    stopped: impl FnOnce(Error, I) -> R,
    start: impl FnOnce(&mut State<T>, I) -> Started<I, R>,
) -> Stage<I, R> {
    if let Some(why) = state.stopped.clone() {
        return Stage::Ended(stopped(why, input));
    }
    let input = if state.room.has_waiting(peer) {
        input
    } else {
        match start(state, input) {
            Started::Taken(ticket) => return Stage::Taken(ticket),
            Started::Ended(r) => return Stage::Ended(r),
            Started::NoRoom(input) => input,
        }
    };
    let turn = state.next_id();
    state.room.join(peer, turn);
    state.kick();
    Stage::Waiting { turn, input }
}

/// What differs between a send and a put or get, for [`poll_stage`]: the
/// output of one ended by a stop (its input back), how it starts, the
/// output of its outcome, and that of a poll after the end.
struct Operation<S, B, E, P> {
    stopped: S,
    start: B,
    ended: E,
    polled: P,
}

/// Polls an operation to its end: its turn for room while it waits (it
/// starts when its turn has come and the module takes it), then its
/// outcome.
fn poll_stage<T, I, R, S, B, E, P>(
    state: &mut State<T>,
    peer: EndpointId,
    stage: &mut Stage<I, R>,
    cx: &mut Context<'_>,
    op: Operation<S, B, E, P>,
) -> Poll<R>
where
    T: Transport,
    S: FnOnce(Error, I) -> R,
    B: FnOnce(&mut State<T>, I) -> Started<I, R>,
    E: FnOnce(Ended) -> R,
    P: FnOnce() -> R,
{
    if let Stage::Waiting { turn, .. } = *stage {
        take_turn(state, peer, turn, stage, cx, op.stopped, op.start);
    }
    match std::mem::replace(stage, Stage::Finished) {
        Stage::Taken(ticket) => match poll_outcome(state, ticket, cx) {
            Poll::Ready(ended) => Poll::Ready((op.ended)(ended)),
            Poll::Pending => {
                *stage = Stage::Taken(ticket);
                Poll::Pending
            }
        },
        Stage::Ended(result) => Poll::Ready(result),
        waiting @ Stage::Waiting { .. } => {
            *stage = waiting;
            Poll::Pending
        }
        Stage::Finished => Poll::Ready((op.polled)()),
    }
}

/// An operation waiting for room, polled in its turn `turn`: ended if the
/// endpoint stopped, started if its turn has come and the module takes it.
fn take_turn<T: Transport, I, R>(
    state: &mut State<T>,
    peer: EndpointId,
    turn: u64,
    stage: &mut Stage<I, R>,
    cx: &mut Context<'_>,
    stopped: impl FnOnce(Error, I) -> R,
    start: impl FnOnce(&mut State<T>, I) -> Started<I, R>,
) {
    if let Some(why) = state.stopped.clone() {
        state.room.leave(peer, turn);
        if let Stage::Waiting { input, .. } = std::mem::replace(stage, Stage::Finished) {
            *stage = Stage::Ended(stopped(why, input));
        }
        return;
    }
    if !state.room.is_first(peer, turn) {
        state.room.wait(peer, turn, cx.waker());
        return;
    }
    let Stage::Waiting { input, .. } = std::mem::replace(stage, Stage::Finished) else {
        return;
    };
    match start(state, input) {
        Started::Taken(ticket) => {
            state.room.leave(peer, turn);
            *stage = Stage::Taken(ticket);
        }
        Started::Ended(r) => {
            state.room.leave(peer, turn);
            *stage = Stage::Ended(r);
        }
        Started::NoRoom(input) => {
            state.room.wait(peer, turn, cx.waker());
            state.kick();
            *stage = Stage::Waiting { turn, input };
        }
    }
}

/// A future dropped at `stage`: withdrawn from its turn if it waits for
/// room, left to finish in the background if the module took it.
fn release<T: Transport, I, R>(state: &mut State<T>, peer: EndpointId, stage: &Stage<I, R>) {
    match *stage {
        Stage::Waiting { turn, .. } => state.room.leave(peer, turn),
        Stage::Taken(ticket) => abandon(state, ticket),
        _ => {}
    }
}

/// The future of [`Endpoint::send`](crate::Endpoint::send): `Ok` once the
/// peer has acknowledged the message, an error if it was refused or its
/// peer was lost first.
///
/// The message was taken when `send` was called, unless the module had no
/// room for it: then it waits its turn, and dropping the future withdraws
/// it. Dropped after the module took it, the message goes, its result
/// unseen.
#[must_use = "the send is under way; await it to learn whether the peer has it"]
pub struct Send<T: Transport, B> {
    shared: Arc<Shared<T>>,
    peer: EndpointId,
    tag: Tag,
    stage: Stage<B, Result<(), Error>>,
}

impl<T: Transport, B: AsRef<[u8]>> Send<T, B> {
    pub(crate) fn new(shared: Arc<Shared<T>>, peer: EndpointId, tag: Tag, data: B) -> Self {
        let stage = {
            let mut state = shared.lock();
            begin(
                &mut state,
                peer,
                data,
                |why, _| Err(why),
                |state, data| start_send(state, peer, tag, data),
            )
        };
        Send {
            shared,
            peer,
            tag,
            stage,
        }
    }
}

/// Queues `data` to `peer` with a descriptor that comes back on its
/// completion.
fn start_send<T: Transport, B: AsRef<[u8]>>(
    state: &mut State<T>,
    peer: EndpointId,
    tag: Tag,
    data: B,
) -> Started<B, Result<(), Error>> {
    let module = &mut state.module;
    let desc = match module.prepare_src(
        peer,
        data.as_ref(),
        0,
        Order::ANY,
        DescFlags::ALWAYS_CALLBACK,
    ) {
        Ok(desc) => desc,
        Err(BtlError::OutOfResource) => return Started::NoRoom(data),
        Err(e) => return Started::Ended(Err(Error::Btl(e))),
    };
    let key = (desc.fragment().class(), desc.fragment().index());
    let started = match module.send(peer, desc, tag) {
        Ok(SendStatus::Queued) => {
            let ticket = state.next_id();
            state.sends.insert(key, ticket);
            state.outcomes.insert(ticket, Outcome::Waiting(None));
            Started::Taken(ticket)
        }
        Ok(SendStatus::Completed(desc)) => {
            if let Some(desc) = desc {
                let _ = module.free(desc);
            }
            Started::Ended(Ok(()))
        }
        Err(SendError { error, desc }) => {
            let _ = module.free(desc);
            return match error {
                BtlError::OutOfResource => Started::NoRoom(data),
                e => Started::Ended(Err(Error::Btl(e))),
            };
        }
    };
    state.after_call();
    started
}

impl<T: Transport, B: AsRef<[u8]> + Unpin> Future for Send<T, B> {
    type Output = Result<(), Error>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        let mut state = this.shared.lock();
        let (peer, tag) = (this.peer, this.tag);
        poll_stage(
            &mut state,
            peer,
            &mut this.stage,
            cx,
            Operation {
                stopped: |why, _| Err(why),
                start: |state: &mut State<T>, data| start_send(state, peer, tag, data),
                ended: |(result, _)| result,
                polled: || Err(Error::Polled),
            },
        )
    }
}

impl<T: Transport, B> Drop for Send<T, B> {
    fn drop(&mut self) {
        release(&mut self.shared.lock(), self.peer, &self.stage);
    }
}

/// Which one-sided operation a [`Transfer`] is.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Kind {
    Put,
    PutNotify(u64),
    Get,
}

/// The future of a put or get ([`Endpoint::put`](crate::Endpoint::put),
/// [`put_notify`](crate::Endpoint::put_notify),
/// [`get`](crate::Endpoint::get)): the buffer back once the data is in the
/// peer's memory (put) or in the buffer (get); on failure the error holds
/// the buffer ([`TransferError`]).
///
/// Started when called, unless the module had no room for it: then it
/// waits its turn, and dropping the future withdraws it and drops the
/// buffer. Dropped after the module took it, it finishes in the
/// background, and the module frees the buffer when it ends.
#[must_use = "the put or get is under way; await it for its buffer and result"]
pub struct Transfer<T: Transport> {
    shared: Arc<Shared<T>>,
    peer: EndpointId,
    remote: RemoteSlice,
    kind: Kind,
    stage: Stage<Vec<u8>, Result<Vec<u8>, TransferError>>,
}

impl<T: Transport> Transfer<T> {
    pub(crate) fn new(
        shared: Arc<Shared<T>>,
        peer: EndpointId,
        buffer: Vec<u8>,
        remote: RemoteSlice,
        kind: Kind,
    ) -> Self {
        let stage = {
            let mut state = shared.lock();
            begin(
                &mut state,
                peer,
                buffer,
                |error, buffer| Err(TransferError { error, buffer }),
                |state, buffer| post(state, peer, buffer, remote, kind),
            )
        };
        Transfer {
            shared,
            peer,
            remote,
            kind,
            stage,
        }
    }
}

/// The outcome of a put or get, its buffer back either way.
fn handed_back((result, buffer): Ended) -> Result<Vec<u8>, TransferError> {
    let buffer = buffer.unwrap_or_default();
    match result {
        Ok(()) => Ok(buffer),
        Err(error) => Err(TransferError { error, buffer }),
    }
}

impl<T: Transport> Future for Transfer<T> {
    type Output = Result<Vec<u8>, TransferError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        let mut state = this.shared.lock();
        let (peer, remote, kind) = (this.peer, this.remote, this.kind);
        poll_stage(
            &mut state,
            peer,
            &mut this.stage,
            cx,
            Operation {
                stopped: |error, buffer| Err(TransferError { error, buffer }),
                start: |state: &mut State<T>, buffer| post(state, peer, buffer, remote, kind),
                ended: handed_back,
                polled: || {
                    Err(TransferError {
                        error: Error::Polled,
                        buffer: Vec::new(),
                    })
                },
            },
        )
    }
}

/// Registers `buffer` and posts the operation on it.
fn post<T: Transport>(
    state: &mut State<T>,
    peer: EndpointId,
    buffer: Vec<u8>,
    remote: RemoteSlice,
    kind: Kind,
) -> Started<Vec<u8>, Result<Vec<u8>, TransferError>> {
    let len = match kind {
        Kind::Get => remote.len,
        Kind::Put | Kind::PutNotify(_) => buffer.len() as u64,
    };
    if len > buffer.len() as u64 {
        let error = Error::BufferTooShort {
            needed: len,
            len: buffer.len(),
        };
        return Started::Ended(Err(TransferError { error, buffer }));
    }
    let handle = match state.module.register_mem(buffer, Access::empty()) {
        Ok(handle) => handle,
        Err(refused) => {
            let error = Error::Btl(refused.error);
            return Started::Ended(Err(TransferError {
                error,
                buffer: refused.region,
            }));
        }
    };
    let ticket = state.next_id();
    let local = MemSlice {
        handle,
        offset: 0,
        len,
    };
    let module = &mut state.module;
    let posted = match kind {
        Kind::Put => module.put(peer, local, remote, ticket),
        Kind::PutNotify(imm) => module.put_notify(peer, local, remote, imm, ticket),
        Kind::Get => module.get(peer, local, remote, ticket),
    };
    match posted {
        Ok(_) => {
            state.transfers.insert(ticket, handle);
            state.outcomes.insert(ticket, Outcome::Waiting(None));
            state.after_call();
            Started::Taken(ticket)
        }
        // Nothing was posted, so nothing holds the region.
        Err(e) => {
            let buffer = state.module.deregister_mem(handle).unwrap_or_default();
            match e {
                BtlError::OutOfResource => Started::NoRoom(buffer),
                e => Started::Ended(Err(TransferError {
                    error: Error::Btl(e),
                    buffer,
                })),
            }
        }
    }
}

impl<T: Transport> Drop for Transfer<T> {
    fn drop(&mut self) {
        release(&mut self.shared.lock(), self.peer, &self.stage);
    }
}
