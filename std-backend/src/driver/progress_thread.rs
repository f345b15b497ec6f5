//! A progress thread: a module whose sockets a thread of its own serves,
//! for callers that do not poll (a storage service, a runtime between
//! phases). The thread waits in the poller (spinning first while that
//! pays, as [`Module::wait`] does) until a socket, a timer of the engine or
//! a caller needs it, moves the protocol forward, and calls a handler with
//! each event. When a caller wakes it is the `wake` module's to say.
//!
//! The module lives behind one lock, shared by the thread and callers
//! ([`Served::with`]). The handler is called with the lock released, so it
//! may send a reply, post a put or free a descriptor through the same
//! [`Served`]: a received message is copied out of its fragment first (into
//! a buffer kept from message to message; it grows to the largest message
//! once and then no more). This is Open MPI's progress thread and
//! libfabric's automatic progress, without their rule that a callback must
//! not call back in.

use std::io;
use std::panic::AssertUnwindSafe;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::thread::{JoinHandle, ThreadId};
use std::time::{Duration, Instant};

use btl_core::btl::{Btl, Completion, Event, Incoming, Tag};
use btl_core::endpoint::EndpointId;
use mio::Waker;

use crate::driver::module::{Module, Transport, Unflushed, WaitCosts};
use crate::driver::net::{Os, OsPoller, Poller};
use crate::driver::wake::Wakeup;

/// A module served by a progress thread, shared by the thread and the
/// callers that post to it.
pub struct Served<T: Transport> {
    module: Mutex<Module<T>>,
    /// When callers wake the thread, and how.
    wakeup: Wakeup<Arc<Waker>>,
    thread: ThreadId,
}

/// A thread serving a module; stopping it hands the module back.
pub struct ProgressThread<T: Transport<Net = Os> + Send + 'static> {
    served: Arc<Served<T>>,
    thread: Option<JoinHandle<io::Result<OsPoller>>>,
}

impl<T: Transport> Served<T> {
    /// Waits until everything sent so far is acknowledged by its peer (or
    /// has failed, its event handed to the handler), up to `timeout`,
    /// while the thread goes on serving: the handler takes events
    /// meanwhile, so a peer that keeps sending does not hold its own
    /// acknowledgements back behind messages nobody takes. What is sent
    /// after the call is not waited for. Not from the handler (the thread
    /// would wait for itself).
    pub fn flush(&self, timeout: Duration) -> Result<(), Unflushed> {
        let start = Instant::now();
        let mark = self.with(|module| module.flush_mark());
        loop {
            let (done, outstanding) =
                self.with(|module| (module.flushed(&mark), module.outstanding()));
            if done {
                return Ok(());
            }
            let waited = start.elapsed();
            if waited >= timeout {
                return Err(Unflushed {
                    outstanding,
                    waited,
                });
            }
            std::thread::sleep((timeout - waited).min(Duration::from_micros(100)));
        }
    }

    /// Runs `f` on the module under the lock, then sends what `f` queued
    /// and wakes the thread if `f` made events or armed an earlier timer.
    ///
    /// Do not call `with` from inside `f`: the lock is not re-entrant.
    /// The progress thread's handler may call it (it runs unlocked).
    pub fn with<R>(&self, f: impl FnOnce(&mut Module<T>) -> R) -> R {
        let mut module = self.lock();
        let r = f(&mut module);
        module.serve_queued();
        let wake = self
            .wakeup
            .needed(module.pending_events() > 0, module.timer_at());
        drop(module);
        // The thread's own calls (its handler's) need no wake: it looks
        // again before it sleeps.
        if wake && std::thread::current().id() != self.thread {
            // A failed wake leaves the thread to its own timeout; the
            // eventfd behind it does not fail once made.
            let _ = self.wakeup.wake();
        }
        r
    }

    /// How long the thread may block: until the engine's next timer, which
    /// callers learn from the plan; not at all while a socket has bytes
    /// left unread. Called under the lock.
    fn plan_wake(&self, module: &Module<T>) -> Option<Duration> {
        self.wakeup.plan(module.timer_at());
        if module.left_unread() {
            return Some(Duration::ZERO);
        }
        module.until_timer()
    }

    fn lock(&self) -> MutexGuard<'_, Module<T>> {
        // A panic under the lock is reported when the thread is joined;
        // the module is still whole, as every engine call keeps it so.
        self.module.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// An event taken out of the module so that the handler can see it with
/// the lock released.
enum Taken {
    /// A message, its bytes copied to the thread's buffer.
    Received {
        from: EndpointId,
        tag: Tag,
    },
    Completion(Completion),
}

impl Taken {
    fn from_event(event: Event<'_>, buf: &mut Vec<u8>) -> Self {
        match event {
            Event::Received(m) => {
                buf.clear();
                buf.extend_from_slice(m.data);
                Taken::Received {
                    from: m.from,
                    tag: m.tag,
                }
            }
            Event::SendComplete {
                endpoint,
                tag,
                desc,
                result,
            } => Taken::Completion(Completion::Send {
                endpoint,
                tag,
                desc,
                result,
            }),
            Event::PutComplete { op, ctx, result } => {
                Taken::Completion(Completion::Put { op, ctx, result })
            }
            Event::GetComplete { op, ctx, result } => {
                Taken::Completion(Completion::Get { op, ctx, result })
            }
            Event::PutArrived { from, slice, imm } => {
                Taken::Completion(Completion::PutArrived { from, slice, imm })
            }
            Event::PeerLeft { endpoint } => Taken::Completion(Completion::PeerLeft { endpoint }),
            Event::Room { endpoint } => Taken::Completion(Completion::Room { endpoint }),
            Event::Error(e) => Taken::Completion(Completion::Error(e)),
        }
    }

    fn into_event(self, buf: &[u8]) -> Event<'_> {
        match self {
            Taken::Received { from, tag } => Event::Received(Incoming {
                from,
                tag,
                data: buf,
            }),
            Taken::Completion(c) => c.into(),
        }
    }
}

impl<T: Transport<Net = Os> + Send + 'static> ProgressThread<T> {
    /// Starts a thread that serves `module` and calls `handler` with each
    /// of its events, the lock released. Fails if the module is served
    /// already or the thread cannot be made.
    pub fn spawn(
        mut module: Module<T>,
        handler: impl FnMut(&Served<T>, Event<'_>) + Send + 'static,
    ) -> io::Result<Self> {
        let mut poller = module
            .take_poller()
            .ok_or_else(|| io::Error::other("the module is served by a thread already"))?;
        let waker = poller.waker()?;
        let (tx, rx) = std::sync::mpsc::channel();
        let thread = std::thread::Builder::new()
            .name("btl-progress".into())
            .spawn(move || {
                let served: Arc<Served<T>> = rx.recv().map_err(io::Error::other)?;
                serve(&served, poller, handler)
            })?;
        let served = Arc::new(Served {
            module: Mutex::new(module),
            wakeup: Wakeup::new(waker),
            thread: thread.thread().id(),
        });
        tx.send(Arc::clone(&served))
            .map_err(|_| io::Error::other("the progress thread ended at its start"))?;
        Ok(ProgressThread {
            served,
            thread: Some(thread),
        })
    }

    /// The module as the thread serves it, to post to it.
    pub fn served(&self) -> &Served<T> {
        &self.served
    }

    /// Flushes the module while the thread serves it (see
    /// [`Served::flush`]).
    pub fn flush(&self, timeout: Duration) -> Result<(), Unflushed> {
        self.served.flush(timeout)
    }

    /// Runs `f` on the module (see [`Served::with`]).
    pub fn with<R>(&self, f: impl FnOnce(&mut Module<T>) -> R) -> R {
        self.served.with(f)
    }

    /// Stops the thread and hands the module back, its poller with it, to
    /// be driven by its owner again. An error is the thread's: the poller
    /// failed. (A handler that panics is logged and the thread serves on.)
    pub fn stop(mut self) -> io::Result<Module<T>> {
        let poller = self.halt()?;
        let served = Arc::clone(&self.served);
        drop(self);
        let served = Arc::into_inner(served)
            .ok_or_else(|| io::Error::other("the module is still shared"))?;
        let mut module = served
            .module
            .into_inner()
            .unwrap_or_else(PoisonError::into_inner);
        module.give_poller(poller);
        Ok(module)
    }

    /// Stops and joins the thread; its poller back.
    fn halt(&mut self) -> io::Result<OsPoller> {
        let thread = self
            .thread
            .take()
            .ok_or_else(|| io::Error::other("the progress thread is stopped already"))?;
        self.served.wakeup.stop()?;
        thread
            .join()
            .map_err(|_| io::Error::other("the progress thread's handler panicked"))?
    }
}

impl<T: Transport<Net = Os> + Send + 'static> Drop for ProgressThread<T> {
    fn drop(&mut self) {
        if self.thread.is_some() {
            let _ = self.halt();
        }
    }
}

/// Waits for socket events as [`Module::wait`] does: spinning on the
/// poller first, for up to `spin`, or blocking at once, by what each has
/// cost lately. A `timeout` of zero (bytes left unread, a timer due) is
/// one look at the poller, not a wait, and counts in neither cost.
fn wait(
    poller: &mut OsPoller,
    timeout: Option<Duration>,
    spin: Duration,
    costs: &mut WaitCosts,
    wakeup: &Wakeup<Arc<Waker>>,
) -> io::Result<()> {
    if timeout == Some(Duration::ZERO) {
        return poller.poll(timeout);
    }
    let start = Instant::now();
    let spins = costs.spin_now();
    let spin = timeout.map_or(spin, |t| t.min(spin));
    if spins {
        loop {
            poller.poll(Some(Duration::ZERO))?;
            if !poller.is_empty() {
                costs.record(true, start.elapsed());
                return Ok(());
            }
            if start.elapsed() >= spin || wakeup.stopping() {
                break;
            }
            std::hint::spin_loop();
        }
    }
    poller.poll(timeout.map(|t| t.saturating_sub(start.elapsed())))?;
    if !poller.is_empty() {
        costs.record(spins, start.elapsed());
    }
    Ok(())
}

/// The thread: block in the poller until a socket, a timer or a caller
/// needs the module, serve it, hand out its events; until told to stop.
fn serve<T: Transport<Net = Os>>(
    served: &Served<T>,
    mut poller: OsPoller,
    mut handler: impl FnMut(&Served<T>, Event<'_>),
) -> io::Result<OsPoller> {
    let mut message = Vec::new();
    let mut costs = WaitCosts::default();
    let (mut timeout, spin) = {
        let module = served.lock();
        (served.plan_wake(&module), module.spin())
    };
    loop {
        if let Err(e) = wait(&mut poller, timeout, spin, &mut costs, &served.wakeup) {
            tracing::error!(error = %e, "the progress thread's poller failed");
            return Err(e);
        }
        if served.wakeup.stopping() {
            return Ok(poller);
        }
        let mut module = served.lock();
        module.on_socket_events(&poller, true);
        while let Some(taken) = module
            .poll_event()
            .map(|e| Taken::from_event(e, &mut message))
        {
            drop(module);
            // A handler that panics loses its event, not the module: the
            // thread serves on, and the other peers never notice.
            let call = AssertUnwindSafe(|| handler(served, taken.into_event(&message)));
            if let Err(panic) = std::panic::catch_unwind(call) {
                let what = panic
                    .downcast_ref::<&str>()
                    .copied()
                    .or_else(|| panic.downcast_ref::<String>().map(String::as_str))
                    .unwrap_or("a panic");
                tracing::error!("the progress thread's handler panicked ({what}); serving on");
            }
            module = served.lock();
        }
        timeout = served.plan_wake(&module);
    }
}
