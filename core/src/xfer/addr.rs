//! The address of a transfer machine: Motr's end point, which names a
//! process and a transfer machine in it.

use crate::btl::Tag;
use crate::endpoint::EndpointId;

/// A transfer machine as seen from another: the BTL endpoint of its process
/// and its tag there (Motr's transfer machine id), so several machines can
/// share one BTL.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct TmAddr {
    /// The process, as this side's BTL names it.
    pub endpoint: EndpointId,
    /// The machine's tag, in [`TagRange::XFER`](crate::btl::TagRange::XFER).
    pub tag: Tag,
}
