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
        PoolsRef(Pools::One(Set {
            region: &self.region,
            parts: &self.parts,
        }))
    }
}

/// Fragment pools, whatever holds their region: what descriptors and the
/// `Btl` interface take. A shared borrow, cheap to copy; the pools are
/// lock-free, so many handles may be used at once.
///
/// It is one module's pools, or the pools of several modules
/// ([`PoolsRef::many`]): a BTL over other BTLs (btl-std's `Bml`) hands
/// out descriptors of whichever module carries a peer, and its pools find
/// each fragment's bytes in the pools that made it.
#[derive(Clone, Copy)]
pub struct PoolsRef<'a>(Pools<'a>);

#[derive(Clone, Copy)]
enum Pools<'a> {
    One(Set<'a>),
    Many(&'a dyn PoolSets),
}

/// One module's pools: the region and each class's pool in it.
#[derive(Clone, Copy)]
struct Set<'a> {
    region: &'a [PoolCell],
    parts: &'a [(PoolCore, usize); 3],
}

/// Several modules' fragment pools, for [`PoolsRef::many`].
pub trait PoolSets {
    /// How many sets there are.
    fn len(&self) -> usize;

    /// Whether there are none.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The pools of set `i` (`0..len()`).
    fn set(&self, i: usize) -> Option<PoolsRef<'_>>;
}

impl<'a> PoolsRef<'a> {
    /// The pools of every set in `sets`: a fragment is given back to, and
    /// read in, the set that made it; what names no fragment (allocation,
    /// sizes, counters) is the first set's.
    pub fn many(sets: &'a dyn PoolSets) -> Self {
        PoolsRef(Pools::Many(sets))
    }

    /// The first set's pools: what allocation and sizes go to.
    #[inline]
    fn first(self) -> Option<Set<'a>> {
        match self.0 {
            Pools::One(set) => Some(set),
            Pools::Many(sets) => sets.set(0).and_then(PoolsRef::first),
        }
    }

    /// The pools of `frag`'s set: itself for one module's, the set that
    /// made it among several.
    #[inline]
    fn of(self, frag: &Fragment) -> Option<Set<'a>> {
        match self.0 {
            Pools::One(set) => Some(set),
            Pools::Many(sets) => (0..sets.len())
                .filter_map(|i| sets.set(i))
                .find(|set| set.owns(frag))
                .and_then(PoolsRef::of_one),
        }
    }

    #[inline]
    fn of_one(self) -> Option<Set<'a>> {
        match self.0 {
            Pools::One(set) => Some(set),
            Pools::Many(_) => None,
        }
    }

    /// The pool of `class` and its part of the region.
    #[inline]
    fn part_in(
        Set { region, parts }: Set<'a>,
        class: FragmentClass,
    ) -> (&'a PoolCore, &'a [PoolCell]) {
        let i = match class {
            FragmentClass::Small => 0,
            FragmentClass::Eager => 1,
            FragmentClass::Max => 2,
        };
        let (core, at) = &parts[i];
        (core, &region[*at..])
    }

    /// The first set's pool of `class`.
    #[inline]
    fn part(self, class: FragmentClass) -> Option<(&'a PoolCore, &'a [PoolCell])> {
        self.first().map(|set| Self::part_in(set, class))
    }

    /// Whether `frag` was lent out by these pools.
    #[inline]
    pub fn owns(self, frag: &Fragment) -> bool {
        match self.0 {
            Pools::One(_) => self
                .of_one()
                .is_some_and(|set| Self::part_in(set, frag.class()).0.id() == frag.pool),
            Pools::Many(sets) => (0..sets.len())
                .filter_map(|i| sets.set(i))
                .any(|set| set.owns(frag)),
        }
    }

    /// The smallest class whose fragments hold `len` bytes.
    #[inline]
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
    #[inline]
    pub fn alloc(self, len: usize) -> Result<Fragment, PoolError> {
        self.alloc_class(self.class_for(len)?)
    }

    /// A fragment of the given class.
    #[inline]
    pub fn alloc_class(self, class: FragmentClass) -> Result<Fragment, PoolError> {
        let (core, cells) = self.part(class).ok_or(PoolError::Exhausted { class })?;
        core.alloc(cells)
    }

    /// Gives a fragment back to the pool of its class; one made by pools
    /// outside this set comes back as [`ForeignFragment`].
    #[inline]
    pub fn free(self, frag: Fragment) -> Result<(), ForeignFragment> {
        match self.of(&frag) {
            Some(set) => {
                let (core, cells) = Self::part_in(set, frag.class());
                core.free(cells, frag)
            }
            None => Err(ForeignFragment(frag)),
        }
    }

    /// The fragment's bytes, for as long as the pools and the token are
    /// borrowed; [`PoolError::Foreign`] for a fragment of other pools.
    #[inline]
    pub fn bytes<'f>(self, frag: &'f Fragment) -> Result<&'f [u8], PoolError>
    where
        'a: 'f,
    {
        let set = self.of(frag).ok_or(PoolError::Foreign)?;
        let (core, cells) = Self::part_in(set, frag.class());
        core.bytes(cells, frag)
    }

    /// The fragment's bytes, writable, for as long as the pools and the
    /// token are borrowed (the token exclusively, so that two `&mut` to one
    /// fragment never exist at once).
    #[inline]
    pub fn bytes_mut<'f>(self, frag: &'f mut Fragment) -> Result<&'f mut [u8], PoolError>
    where
        'a: 'f,
    {
        let set = self.of(frag).ok_or(PoolError::Foreign)?;
        let (core, cells) = Self::part_in(set, frag.class());
        core.bytes_mut(cells, frag)
    }

    /// Usable bytes of each fragment of `class` (the first set's).
    #[inline]
    pub fn class_size(self, class: FragmentClass) -> usize {
        self.part(class).map_or(0, |(core, _)| core.fragment_size())
    }

    /// Counters of the pool of `class` (the sum over every set).
    pub fn stats(self, class: FragmentClass) -> PoolStats {
        match self.0 {
            Pools::One(_) => self
                .part(class)
                .map(|(core, cells)| core.stats(cells))
                .unwrap_or_default(),
            Pools::Many(sets) => (0..sets.len())
                .filter_map(|i| sets.set(i))
                .map(|set| set.stats(class))
                .fold(PoolStats::default(), PoolStats::sum),
        }
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
