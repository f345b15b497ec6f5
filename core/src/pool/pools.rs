//! The three fragment classes of a BTL, carved from one region.

use super::fragment_pool::PoolCore;
use super::region::{PoolCell, Region};
use super::{ForeignFragment, Fragment, FragmentClass, FragmentPoolConfig, PoolError, PoolStats};

/// Configuration of the three classes, each in Open MPI's num/max/inc terms.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FragmentPoolsConfig {
    /// Descriptor-sized fragments (Open MPI's "rdma" free list).
    pub small: FragmentPoolConfig,
    /// `eager_limit`-sized fragments.
    pub eager: FragmentPoolConfig,
    /// `max_send_size`-sized fragments.
    pub max: FragmentPoolConfig,
}

impl FragmentPoolsConfig {
    /// The configuration of one class.
    pub const fn class(&self, class: FragmentClass) -> &FragmentPoolConfig {
        match class {
            FragmentClass::Small => &self.small,
            FragmentClass::Eager => &self.eager,
            FragmentClass::Max => &self.max,
        }
    }

    /// Checks each class and that sizes grow from small to eager to max, so
    /// that [`PoolsRef::alloc`] picks the smallest class that fits.
    pub const fn validate(&self) -> Result<(), PoolError> {
        if let Err(e) = self.small.validate() {
            return Err(e);
        }
        if let Err(e) = self.eager.validate() {
            return Err(e);
        }
        if let Err(e) = self.max.validate() {
            return Err(e);
        }
        if self.small.fragment_size > self.eager.fragment_size
            || self.eager.fragment_size > self.max.fragment_size
        {
            return Err(PoolError::InvalidConfig(
                "fragment sizes must satisfy small <= eager <= max",
            ));
        }
        Ok(())
    }

    /// Bytes of region that always suffice: the sum of the three pools'
    /// [`FragmentPool::required_bytes`](super::FragmentPool::required_bytes)
    /// (saturating).
    pub const fn required_bytes(&self) -> usize {
        PoolCore::required_bytes(&self.small)
            .saturating_add(PoolCore::required_bytes(&self.eager))
            .saturating_add(PoolCore::required_bytes(&self.max))
    }
}

/// The small, eager and max fragment pools of one BTL module, sharing one
/// region; fragments are routed back to their pool by their class.
///
/// `R` is how the region is held: cells lent from a caller's bytes
/// ([`FragmentPools::new`]), or a [`Region`] the pools own
/// ([`FragmentPools::owning`], say a `Pin<Box<[PoolCell]>>` on a host).
/// Every operation goes through [`view`](Self::view), the handle
/// descriptors and the `Btl` interface take whatever holds the region.
pub struct FragmentPools<R> {
    region: R,
    /// Each class's pool and where its part of the region starts.
    parts: [(PoolCore, usize); 3],
}

impl FragmentPools<()> {
    /// Bytes of region that always suffice for `cfg`; see
    /// [`FragmentPoolsConfig::required_bytes`].
    pub const fn required_bytes(cfg: &FragmentPoolsConfig) -> usize {
        cfg.required_bytes()
    }
}

impl<'r> FragmentPools<&'r [PoolCell]> {
    /// Lays the three pools over consecutive parts of `region`.
    pub fn new(region: &'r mut [u8], cfg: FragmentPoolsConfig) -> Result<Self, PoolError> {
        Self::owning(PoolCell::from_mut(region), cfg)
    }
}

impl<R: Region> FragmentPools<R> {
    /// Lays the three pools over consecutive parts of `region`, which they
    /// keep.
    pub fn owning(region: R, cfg: FragmentPoolsConfig) -> Result<Self, PoolError> {
        cfg.validate()?;
        let needed = cfg.required_bytes();
        if region.len() < needed {
            return Err(PoolError::RegionTooSmall {
                needed,
                given: region.len(),
            });
        }
        let mut start = 0;
        let mut part = |class: FragmentClass| {
            let c = *cfg.class(class);
            let len = PoolCore::required_bytes(&c);
            let at = start;
            start += len;
            Ok::<_, PoolError>((PoolCore::new(&region[at..at + len], class, c)?, at))
        };
        let parts = [
            part(FragmentClass::Small)?,
            part(FragmentClass::Eager)?,
            part(FragmentClass::Max)?,
        ];
        Ok(FragmentPools { region, parts })
    }

    /// The handle every operation goes through.
    pub fn view(&self) -> PoolsRef<'_> {
        PoolsRef {
            region: &self.region,
            parts: &self.parts,
        }
    }
}

/// Fragment pools, whatever holds their region: what descriptors and the
/// `Btl` interface take. A shared borrow, cheap to copy; the pools are
/// lock-free, so many handles may be used at once.
#[derive(Clone, Copy)]
pub struct PoolsRef<'a> {
    region: &'a [PoolCell],
    parts: &'a [(PoolCore, usize); 3],
}

impl<'a> PoolsRef<'a> {
    /// The pool of `class` and its part of the region.
    fn part(self, class: FragmentClass) -> (&'a PoolCore, &'a [PoolCell]) {
        let i = match class {
            FragmentClass::Small => 0,
            FragmentClass::Eager => 1,
            FragmentClass::Max => 2,
        };
        let (core, at) = &self.parts[i];
        (core, &self.region[*at..])
    }

    /// The smallest class whose fragments hold `len` bytes.
    pub fn class_for(self, len: usize) -> Result<FragmentClass, PoolError> {
        FragmentClass::ALL
            .into_iter()
            .find(|&class| len <= self.class_size(class))
            .ok_or(PoolError::TooLarge {
                requested: len,
                max: self.class_size(FragmentClass::Max),
            })
    }

    /// A fragment of the smallest class that holds `len` bytes. An exhausted
    /// class is an error even if a larger one has room: falling back would
    /// let small messages drain the pool that large sends depend on.
    pub fn alloc(self, len: usize) -> Result<Fragment, PoolError> {
        self.alloc_class(self.class_for(len)?)
    }

    /// A fragment of the given class.
    pub fn alloc_class(self, class: FragmentClass) -> Result<Fragment, PoolError> {
        let (core, cells) = self.part(class);
        core.alloc(cells)
    }

    /// Gives a fragment back to the pool of its class; one made by pools
    /// outside this set comes back as [`ForeignFragment`].
    pub fn free(self, frag: Fragment) -> Result<(), ForeignFragment> {
        let (core, cells) = self.part(frag.class());
        core.free(cells, frag)
    }

    /// The fragment's bytes, for as long as the pools and the token are
    /// borrowed; [`PoolError::Foreign`] for a fragment of other pools.
    pub fn bytes<'f>(self, frag: &'f Fragment) -> Result<&'f [u8], PoolError>
    where
        'a: 'f,
    {
        let (core, cells) = self.part(frag.class());
        core.bytes(cells, frag)
    }

    /// The fragment's bytes, writable, for as long as the pools and the
    /// token are borrowed (the token exclusively, so that two `&mut` to one
    /// fragment never exist at once).
    pub fn bytes_mut<'f>(self, frag: &'f mut Fragment) -> Result<&'f mut [u8], PoolError>
    where
        'a: 'f,
    {
        let (core, cells) = self.part(frag.class());
        core.bytes_mut(cells, frag)
    }

    /// Usable bytes of each fragment of `class`.
    pub fn class_size(self, class: FragmentClass) -> usize {
        self.part(class).0.fragment_size()
    }

    /// Counters of the pool of `class`.
    pub fn stats(self, class: FragmentClass) -> PoolStats {
        let (core, cells) = self.part(class);
        core.stats(cells)
    }
}

impl<R: Region> core::fmt::Debug for FragmentPools<R> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        self.view().fmt(f)
    }
}

impl core::fmt::Debug for PoolsRef<'_> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        let mut d = f.debug_struct("FragmentPools");
        for class in FragmentClass::ALL {
            d.field(class.name(), &self.stats(class));
        }
        d.finish()
    }
}
