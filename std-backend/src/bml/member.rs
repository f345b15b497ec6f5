//! What a [`Bml`](super::Bml) asks of each module it holds beyond the
//! [`Btl`] interface: joining a process with a bound and a cause, waiting,
//! flushing. Implemented by every module of btl-std over the region type
//! the `Bml` shares among them.

use std::time::Duration;

use btl_core::btl::{Btl, MemHandle};
use btl_core::endpoint::{EndpointId, ProcName};
use btl_core::engine::Usage;

use super::region::Shared;
use crate::ReachError;
use crate::builder::SharedSelf;
use crate::driver::directory::Directory;
use crate::driver::module::{Module, Transport, Unflushed};
use crate::metrics::Snapshot;
#[cfg(not(loom))]
use crate::transports::sm::SmModule;

/// A module of a `Bml`.
pub(crate) trait Member: Btl<Memory = Shared> + Send {
    /// Joins `proc`, waiting up to `timeout`: its endpoint, or why this
    /// module does not reach it.
    fn reach(&mut self, proc: ProcName, timeout: Duration) -> Result<EndpointId, ReachError>;

    /// Reaches the process listening at `address` (`HOST:PORT`) for this
    /// module's component, waiting up to `timeout`: its endpoint and name,
    /// or why not; `None` for a module that reaches no one by address
    /// (`self`, `sm`).
    fn connect_to(
        &mut self,
        address: &str,
        timeout: Duration,
    ) -> Option<Result<(EndpointId, ProcName), ReachError>> {
        let _ = (address, timeout);
        None
    }

    /// Waits up to `timeout` for something to happen; the events ready.
    fn wait(&mut self, timeout: Duration) -> usize;

    /// Waits up to `timeout` for what was sent to be acknowledged.
    fn flush(&mut self, timeout: Duration) -> Result<(), Unflushed>;

    /// The peers it holds now (open, connecting, or lost and still
    /// referenced): an idle module is served less often.
    fn peers(&self) -> usize;

    /// Whether an operation under way uses registration `handle`.
    fn region_in_use(&self, handle: MemHandle) -> bool;

    /// Its card, peers' contacts and refusals of strangers, for a module
    /// over sockets; `None` for one that has none (`self`, `sm`).
    fn directory(&self) -> Option<&Directory> {
        None
    }

    /// How much of its engine's storage it uses, for a module with an
    /// engine of its own.
    fn usage(&self) -> Option<Usage> {
        None
    }

    /// Its metrics now, for a module with an engine of its own.
    fn snapshot(&self) -> Option<Snapshot> {
        None
    }

    /// Makes dropping the module close it without a goodbye, as a killed
    /// process's is (for tests that play a crash); nothing where peers
    /// learn of a crash by other means.
    fn abort_on_drop(&mut self) {}
}

impl<T: Transport> Member for Module<T, Shared>
where
    Self: Send,
{
    fn reach(&mut self, proc: ProcName, timeout: Duration) -> Result<EndpointId, ReachError> {
        Module::reach(self, proc, timeout)
    }

    fn connect_to(
        &mut self,
        address: &str,
        timeout: Duration,
    ) -> Option<Result<(EndpointId, ProcName), ReachError>> {
        Some(Module::connect_to(self, address, timeout))
    }

    fn wait(&mut self, timeout: Duration) -> usize {
        Module::wait(self, timeout).unwrap_or(0)
    }

    fn flush(&mut self, timeout: Duration) -> Result<(), Unflushed> {
        Module::flush(self, timeout)
    }

    fn peers(&self) -> usize {
        Module::peer_count(self)
    }

    fn region_in_use(&self, handle: MemHandle) -> bool {
        Module::region_in_use(self, handle)
    }

    fn directory(&self) -> Option<&Directory> {
        Some(Module::directory(self))
    }

    fn usage(&self) -> Option<Usage> {
        Some(Module::usage(self))
    }

    fn snapshot(&self) -> Option<Snapshot> {
        Some(Module::snapshot(self))
    }

    fn abort_on_drop(&mut self) {
        Module::abort_on_drop(self);
    }
}

#[cfg(not(loom))]
impl Member for SmModule<Shared> {
    fn reach(&mut self, proc: ProcName, timeout: Duration) -> Result<EndpointId, ReachError> {
        SmModule::reach(self, proc, timeout)
    }

    fn wait(&mut self, timeout: Duration) -> usize {
        SmModule::wait(self, timeout)
    }

    /// Nothing to wait for: a message is in the peer's ring once sent.
    fn flush(&mut self, _timeout: Duration) -> Result<(), Unflushed> {
        Ok(())
    }

    fn peers(&self) -> usize {
        self.joined()
    }

    fn region_in_use(&self, handle: MemHandle) -> bool {
        SmModule::region_in_use(self, handle)
    }
}

impl Member for SharedSelf {
    fn reach(&mut self, proc: ProcName, _timeout: Duration) -> Result<EndpointId, ReachError> {
        btl_core::btl::add_proc(self, proc)
            .map_err(|error| ReachError::Btl { proc, error })?
            .ok_or_else(|| ReachError::Join {
                proc,
                reason: "it is another process: self reaches only this one".into(),
            })
    }

    fn wait(&mut self, _timeout: Duration) -> usize {
        self.progress()
    }

    fn flush(&mut self, _timeout: Duration) -> Result<(), Unflushed> {
        Ok(())
    }

    fn peers(&self) -> usize {
        usize::from(self.in_use())
    }

    fn region_in_use(&self, _handle: MemHandle) -> bool {
        false
    }
}
