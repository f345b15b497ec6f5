//! What comes in: messages by tag range ([`Receiver`]), notices of puts
//! that landed ([`Arrivals`]), and peers that left or were lost
//! ([`PeerEvents`]). Each is a bounded queue the driver fills; when one is
//! full the driver stops taking the module's events, so the peer's credits
//! run out and its sends wait: backpressure, not an unbounded buffer.
//!
//! An item leaves its queue only when a `recv` returns it, so a `recv`
//! dropped before it completes loses nothing.

use std::collections::VecDeque;
use std::future::poll_fn;
use std::marker::PhantomData;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};

use btl_std::driver::module::Transport;
use btl_std::{BtlError, EndpointId, MemSlice, Tag};
use bytes::Bytes;

use crate::state::{Shared, State};

/// A message from a peer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Message {
    /// The peer that sent it.
    pub from: EndpointId,
    /// Its tag.
    pub tag: Tag,
    /// Its bytes, copied out of the module (into space shared with other
    /// messages, which comes back once they are all dropped: keep what
    /// must outlive the message with `to_vec`).
    pub data: Bytes,
}

/// A peer's `put_notify` landed in memory this endpoint lent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Arrival {
    /// The peer that put.
    pub from: EndpointId,
    /// Where the data lies: read it with [`Endpoint::with_lent`](crate::Endpoint::with_lent).
    pub slice: MemSlice,
    /// The value the peer gave.
    pub imm: u64,
}

/// A peer gone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PeerEvent {
    /// It said goodbye (it closed, or is done with this process).
    Left(EndpointId),
    /// It was lost, for this reason; its operations failed with it.
    Lost(EndpointId, BtlError),
}

/// A bounded queue of deliveries and the waker of the task reading it.
pub struct Queue<X> {
    items: VecDeque<X>,
    capacity: usize,
    waker: Option<Waker>,
}

impl<X> Queue<X> {
    pub(crate) fn new(capacity: usize) -> Self {
        Queue {
            items: VecDeque::with_capacity(capacity),
            capacity,
            waker: None,
        }
    }

    /// Takes `item` if there is room; gives it back if not.
    pub(crate) fn offer(&mut self, item: X) -> Result<(), X> {
        if self.items.len() >= self.capacity {
            return Err(item);
        }
        self.items.push_back(item);
        self.wake();
        Ok(())
    }

    pub(crate) fn wake(&mut self) {
        if let Some(w) = self.waker.take() {
            w.wake();
        }
    }

    pub(crate) fn into_items(self) -> VecDeque<X> {
        self.items
    }
}

mod sealed {
    use super::{Queue, State, Transport};

    /// Where the driver keeps the queue of an item.
    pub trait Sealed: Sized {
        fn queue<T: Transport>(state: &mut State<T>, id: u64) -> Option<&mut Queue<Self>>;
        fn close<T: Transport>(state: &mut State<T>, id: u64);
    }
}

/// What an [`Inbox`] holds: a [`Message`], an [`Arrival`] or a
/// [`PeerEvent`].
pub trait Item: sealed::Sealed {}

impl Item for Message {}
impl Item for Arrival {}
impl Item for PeerEvent {}

impl sealed::Sealed for Message {
    fn queue<T: Transport>(state: &mut State<T>, id: u64) -> Option<&mut Queue<Self>> {
        state
            .routes
            .iter_mut()
            .find(|r| r.id == id)
            .map(|r| &mut r.queue)
    }
    fn close<T: Transport>(state: &mut State<T>, id: u64) {
        state.unroute(id);
    }
}

impl sealed::Sealed for Arrival {
    fn queue<T: Transport>(state: &mut State<T>, id: u64) -> Option<&mut Queue<Self>> {
        state
            .arrivals
            .as_mut()
            .filter(|(i, _)| *i == id)
            .map(|(_, q)| q)
    }
    fn close<T: Transport>(state: &mut State<T>, id: u64) {
        if state.arrivals.as_ref().is_some_and(|(i, _)| *i == id) {
            state.arrivals = None;
        }
    }
}

impl sealed::Sealed for PeerEvent {
    fn queue<T: Transport>(state: &mut State<T>, id: u64) -> Option<&mut Queue<Self>> {
        state
            .peer_events
            .as_mut()
            .filter(|(i, _)| *i == id)
            .map(|(_, q)| q)
    }
    fn close<T: Transport>(state: &mut State<T>, id: u64) {
        if state.peer_events.as_ref().is_some_and(|(i, _)| *i == id) {
            state.peer_events = None;
        }
    }
}

/// A bounded queue of what the endpoint delivers, read by one task at a
/// time with [`recv`](Self::recv) or as a [`Stream`](futures_core::Stream).
/// Dropping it gives its place up: messages it held wait for the next
/// receiver of their tags (nothing is lost); arrivals and peer events it
/// held are dropped, as they are while nobody asks for them.
pub struct Inbox<T: Transport, X: Item> {
    shared: Arc<Shared<T>>,
    id: u64,
    _item: PhantomData<fn() -> X>,
}

/// Messages of a range of tags ([`Endpoint::receiver`](crate::Endpoint::receiver)).
pub type Receiver<T> = Inbox<T, Message>;
/// Notices of peers' puts that landed ([`Endpoint::arrivals`](crate::Endpoint::arrivals)).
pub type Arrivals<T> = Inbox<T, Arrival>;
/// Peers that left or were lost ([`Endpoint::peer_events`](crate::Endpoint::peer_events)).
pub type PeerEvents<T> = Inbox<T, PeerEvent>;

impl<T: Transport, X: Item> Inbox<T, X> {
    pub(crate) fn new(shared: Arc<Shared<T>>, id: u64) -> Self {
        Inbox {
            shared,
            id,
            _item: PhantomData,
        }
    }

    /// The next delivery; `None` once the endpoint has stopped (closed,
    /// failed, or its driver gone) and nothing is left. Cancel-safe: a
    /// delivery leaves the inbox only when this returns it.
    pub async fn recv(&mut self) -> Option<X> {
        poll_fn(|cx| self.poll_recv(cx)).await
    }

    /// The next delivery if one is there now, without waiting.
    pub fn try_recv(&mut self) -> Option<X> {
        let mut state = self.shared.lock();
        self.take(&mut state)
    }

    fn take(&self, state: &mut State<T>) -> Option<X> {
        let queue = X::queue(state, self.id)?;
        let full = queue.items.len() >= queue.capacity;
        let item = queue.items.pop_front()?;
        if full {
            // Room for what the driver holds.
            state.kick();
        }
        Some(item)
    }

    /// Polls for the next delivery, as [`recv`](Self::recv).
    pub fn poll_recv(&mut self, cx: &mut Context<'_>) -> Poll<Option<X>> {
        let mut state = self.shared.lock();
        if let Some(item) = self.take(&mut state) {
            return Poll::Ready(Some(item));
        }
        if state.stopped.is_some() {
            return Poll::Ready(None);
        }
        match X::queue(&mut state, self.id) {
            Some(queue) => {
                if !queue
                    .waker
                    .as_ref()
                    .is_some_and(|w| w.will_wake(cx.waker()))
                {
                    queue.waker = Some(cx.waker().clone());
                }
                Poll::Pending
            }
            None => Poll::Ready(None),
        }
    }
}

impl<T: Transport, X: Item> futures_core::Stream for Inbox<T, X> {
    type Item = X;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<X>> {
        self.get_mut().poll_recv(cx)
    }
}

impl<T: Transport, X: Item> Drop for Inbox<T, X> {
    fn drop(&mut self) {
        let mut state = self.shared.lock();
        X::close(&mut state, self.id);
        state.kick();
    }
}

impl<T: Transport, X: Item> std::fmt::Debug for Inbox<T, X> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Inbox").field("id", &self.id).finish()
    }
}
