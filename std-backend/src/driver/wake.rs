//! When a caller must wake a progress thread that sleeps in its poller:
//! the whole handshake between the two, kept apart from the thread and
//! generic over the waker so that loom checks it (`--cfg loom`: the
//! atomics are loom's, and a model stands in for the poller's waker).
//!
//! The thread records, under the module's lock, when it will next look at
//! the engine's timers ([`Wakeup::plan`]); a caller, under the same lock,
//! asks whether its call needs the thread sooner ([`Wakeup::needed`]): it
//! left events to hand out, or armed a timer before that time. The waker
//! is an eventfd: a wake made while the thread is not yet waiting is seen
//! by its next wait, so none is lost.

use std::io;

use btl_core::time::Instant;

#[cfg(loom)]
use loom::sync::atomic::{AtomicBool, AtomicU64, Ordering};
#[cfg(not(loom))]
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// Something that makes a sleeping thread's next (or current) wait return.
pub trait Wake {
    /// Wakes the thread.
    fn wake(&self) -> io::Result<()>;
}

impl Wake for std::sync::Arc<mio::Waker> {
    fn wake(&self) -> io::Result<()> {
        mio::Waker::wake(self)
    }
}

/// The engine time of a thread that sleeps with no timer to look at.
const NO_TIMER: u64 = u64::MAX;

/// The wake-up handshake of one progress thread.
#[derive(Debug)]
pub struct Wakeup<W> {
    /// When the thread will next look at the engine's timers (engine time).
    wakes_at: AtomicU64,
    stop: AtomicBool,
    waker: W,
}

impl<W: Wake> Wakeup<W> {
    /// A handshake over `waker`; until the thread plans, any timer wakes it.
    pub fn new(waker: W) -> Self {
        Wakeup {
            wakes_at: AtomicU64::new(NO_TIMER),
            stop: AtomicBool::new(false),
            waker,
        }
    }

    /// The thread, under the module's lock, before it sleeps: it will look
    /// at the timers at `timer_at` (engine time), or at no time.
    pub fn plan(&self, timer_at: Option<Instant>) {
        self.wakes_at.store(
            timer_at.map_or(NO_TIMER, Instant::as_nanos),
            Ordering::Release,
        );
    }

    /// A caller, under the module's lock, after its call: whether the
    /// thread must be woken, because events wait to be handed out or the
    /// engine's next timer (`timer_at`) comes before the thread's plan.
    pub fn needed(&self, events: bool, timer_at: Option<Instant>) -> bool {
        events || timer_at.is_some_and(|t| t.as_nanos() < self.wakes_at.load(Ordering::Acquire))
    }

    /// Wakes the thread.
    pub fn wake(&self) -> io::Result<()> {
        self.waker.wake()
    }

    /// Tells the thread to stop, and wakes it to see so.
    pub fn stop(&self) -> io::Result<()> {
        self.stop.store(true, Ordering::Release);
        self.waker.wake()
    }

    /// Whether the thread is to stop (it asks each time it wakes).
    pub fn stopping(&self) -> bool {
        self.stop.load(Ordering::Acquire)
    }
}

#[cfg(all(test, loom))]
mod loom_tests {
    //! Every interleaving of a progress thread and a caller: no event a
    //! caller leaves while the thread sleeps is left unserved, whether the
    //! caller comes before, during or after the thread's plan, and whether
    //! the thread's own handler posts more while it serves.

    use super::*;
    use loom::sync::atomic::AtomicUsize;
    use loom::sync::{Arc, Mutex};
    use loom::thread;

    /// An eventfd: wakes counted until the next wait takes them.
    #[derive(Default)]
    struct EventFd(AtomicUsize);

    impl Wake for Arc<EventFd> {
        fn wake(&self) -> io::Result<()> {
            self.0.fetch_add(1, Ordering::Release);
            Ok(())
        }
    }

    /// What the module's lock guards, in the model: events to hand out,
    /// and whether the handler has posted its one reply yet.
    #[derive(Default)]
    struct Module {
        events: u32,
        replied: bool,
    }

    #[test]
    fn no_wake_is_lost() {
        loom::model(|| {
            let fd = Arc::new(EventFd::default());
            let wakeup = Arc::new(Wakeup::new(fd.clone()));
            let module = Arc::new(Mutex::new(Module::default()));
            let served = Arc::new(AtomicUsize::new(0));

            // The progress thread: serve what is there (its handler
            // replies once, from the thread, without waking it), plan,
            // sleep until woken; until told to stop.
            let thread = {
                let (fd, wakeup, module, served) =
                    (fd.clone(), wakeup.clone(), module.clone(), served.clone());
                thread::spawn(move || {
                    loop {
                        {
                            let mut m = module.lock().expect("model lock");
                            while m.events > 0 {
                                m.events -= 1;
                                served.fetch_add(1, Ordering::Relaxed);
                                if !m.replied {
                                    // The handler, on this thread: its own
                                    // call does not wake it; the loop takes
                                    // the event next.
                                    m.replied = true;
                                    m.events += 1;
                                }
                            }
                            wakeup.plan(None);
                        }
                        // The poller's wait: until a wake is there.
                        while fd.0.swap(0, Ordering::AcqRel) == 0 {
                            thread::yield_now();
                        }
                        if wakeup.stopping() {
                            return;
                        }
                    }
                })
            };

            // A caller posts an event and wakes the thread if needed.
            {
                let mut m = module.lock().expect("model lock");
                m.events += 1;
                let needed = wakeup.needed(m.events > 0, None);
                drop(m);
                if needed {
                    wakeup.wake().expect("wake");
                }
            }
            // Every event is served (the caller's and the reply) before
            // the thread is stopped: a lost wake would leave this waiting.
            while served.load(Ordering::Relaxed) < 2 {
                thread::yield_now();
            }
            wakeup.stop().expect("stop");
            thread.join().expect("the thread ends");
            assert_eq!(module.lock().expect("model lock").events, 0);
        });
    }

    #[test]
    fn a_timer_before_the_plan_wakes_the_thread() {
        loom::model(|| {
            let fd = Arc::new(EventFd::default());
            let wakeup = Arc::new(Wakeup::new(fd.clone()));
            let plan = {
                let wakeup = wakeup.clone();
                thread::spawn(move || wakeup.plan(Some(Instant::from_nanos(100))))
            };
            // Earlier than any plan: needed however the two interleave.
            assert!(wakeup.needed(false, Some(Instant::from_nanos(50))));
            plan.join().expect("planned");
            // Later than the plan: not needed once the thread has planned.
            assert!(!wakeup.needed(false, Some(Instant::from_nanos(200))));
        });
    }
}
