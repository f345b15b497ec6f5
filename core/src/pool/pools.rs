//! The three fragment classes of a BTL, carved from one region.

use super::{
    ForeignFragment, Fragment, FragmentClass, FragmentPool, FragmentPoolConfig, PoolError,
    PoolStats,
};

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
    /// that [`FragmentPools::alloc`] picks the smallest class that fits.
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
}

/// The small, eager and max fragment pools of one BTL module, sharing one
/// region; fragments are routed back to their pool by their class.
#[derive(Debug)]
pub struct FragmentPools<'r> {
    small: FragmentPool<'r>,
    eager: FragmentPool<'r>,
    max: FragmentPool<'r>,
}

impl<'r> FragmentPools<'r> {
    /// Bytes of region that always suffice for `cfg`: the sum of the three
    /// pools' [`FragmentPool::required_bytes`] (saturating).
    pub const fn required_bytes(cfg: &FragmentPoolsConfig) -> usize {
        FragmentPool::required_bytes(&cfg.small)
            .saturating_add(FragmentPool::required_bytes(&cfg.eager))
            .saturating_add(FragmentPool::required_bytes(&cfg.max))
    }

    /// Lays the three pools over consecutive parts of `region`.
    pub fn new(region: &'r mut [u8], cfg: FragmentPoolsConfig) -> Result<Self, PoolError> {
        cfg.validate()?;
        let needed = Self::required_bytes(&cfg);
        if region.len() < needed {
            return Err(PoolError::RegionTooSmall {
                needed,
                given: region.len(),
            });
        }
        let (small, rest) = region.split_at_mut(FragmentPool::required_bytes(&cfg.small));
        let (eager, max) = rest.split_at_mut(FragmentPool::required_bytes(&cfg.eager));
        Ok(Self {
            small: FragmentPool::new(small, FragmentClass::Small, cfg.small)?,
            eager: FragmentPool::new(eager, FragmentClass::Eager, cfg.eager)?,
            max: FragmentPool::new(max, FragmentClass::Max, cfg.max)?,
        })
    }

    /// The pool of one class, e.g. to hand to code that deals in one size.
    pub fn pool(&self, class: FragmentClass) -> &FragmentPool<'r> {
        match class {
            FragmentClass::Small => &self.small,
            FragmentClass::Eager => &self.eager,
            FragmentClass::Max => &self.max,
        }
    }

    /// The smallest class whose fragments hold `len` bytes.
    pub fn class_for(&self, len: usize) -> Result<FragmentClass, PoolError> {
        FragmentClass::ALL
            .into_iter()
            .find(|&class| len <= self.class_size(class))
            .ok_or(PoolError::TooLarge {
                requested: len,
                max: self.max.fragment_size(),
            })
    }

    /// A fragment of the smallest class that holds `len` bytes. An exhausted
    /// class is an error even if a larger one has room: falling back would
    /// let small messages drain the pool that large sends depend on.
    pub fn alloc(&self, len: usize) -> Result<Fragment, PoolError> {
        self.alloc_class(self.class_for(len)?)
    }

    /// A fragment of the given class.
    pub fn alloc_class(&self, class: FragmentClass) -> Result<Fragment, PoolError> {
        self.pool(class).alloc()
    }

    /// Gives a fragment back to the pool of its class; one made by pools
    /// outside this set comes back as [`ForeignFragment`].
    pub fn free(&self, frag: Fragment) -> Result<(), ForeignFragment> {
        self.pool(frag.class()).free(frag)
    }

    /// The fragment's bytes; see [`FragmentPool::bytes`].
    pub fn bytes<'a>(&'a self, frag: &'a Fragment) -> Result<&'a [u8], PoolError> {
        self.pool(frag.class()).bytes(frag)
    }

    /// The fragment's bytes, writable; see [`FragmentPool::bytes_mut`].
    pub fn bytes_mut<'a>(&'a self, frag: &'a mut Fragment) -> Result<&'a mut [u8], PoolError> {
        self.pool(frag.class()).bytes_mut(frag)
    }

    /// Usable bytes of each fragment of `class`.
    pub fn class_size(&self, class: FragmentClass) -> usize {
        self.pool(class).fragment_size()
    }

    /// Counters of the pool of `class`.
    pub fn stats(&self, class: FragmentClass) -> PoolStats {
        self.pool(class).stats()
    }
}
