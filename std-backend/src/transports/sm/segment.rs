//! A process's shared-memory segment: a file in `/dev/shm` that the
//! process makes and its same-host peers map, holding one inbound ring
//! ([`btl_core::ring`]) per peer slot. Peers write into the segment of
//! the process they send to, as into Open MPI's vader fast boxes; each
//! process reads only its own.
//!
//! A named file in `/dev/shm`, not a `memfd` passed over a Unix socket: a
//! peer finds it by the name on the process's card, with no connection to
//! make first and no descriptor to pass, and a process that died leaves a
//! name the next process of the same job and rank finds and removes. The
//! file is the user's alone (mode 0600): a segment of another user's is
//! never opened, reused or removed.
//!
//! # Layout
//!
//! In 32-bit words; the segment is a whole number of pages.
//!
//! | words | field |
//! |-------|-------|
//! | 0 | magic `btlS` |
//! | 1 | layout version (1) |
//! | 2 | the creator's process id |
//! | 3 | slots |
//! | 4 | words of each ring ([`ring::words_for`] of its capacity) |
//! | 5 | claims made so far: a peer adds one after each claim, so that the
//! owner looks at the claims only when it changed |
//! | 6 | the owner's sleep state ([`ring::Bell`]): 0 it polls, 1 it may sleep, 2 it sleeps |
//! | 7 | the owner's wake sequence, which it sleeps on (a futex) |
//! | 8, 9 | where the owner maps the segment (low word first): a peer reads word 0 there with cross-memory attach to learn whether it may copy straight into and out of the owner's memory |
//! | 10..16 | zero |
//! | 16 + 16·i | slot `i`'s claim, a 64-byte line: its state (0 free, 1 being claimed, 2 claimed), the claimant's job (two words, low first), rank and process id, and 1 if the claimant may copy across into the owner's memory |
//! | 16 + 16·slots | the rings, one per slot, back to back |
//!
//! A slot's ring is made by the peer that claims it, in memory that is
//! zero until then: a segment's file is sparse, so a slot no peer claimed
//! costs its owner no memory, and a ring only the pages its records have
//! reached.
//!
//! Everything in the segment is written by peers as well as its owner, so
//! the owner reads it as untrusted, as the ring does.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::AsFd;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};

use btl_core::endpoint::ProcName;
use btl_core::ring;

/// Word 0 of a segment: "btlS".
pub const MAGIC: u32 = u32::from_le_bytes(*b"btlS");
/// The layout this code writes and reads.
pub const VERSION: u32 = 1;
/// Words before the slots' claims.
const HEADER_WORDS: usize = 16;
/// Words per claim: a 64-byte line each, so that claims do not share one.
const CLAIM_WORDS: usize = 16;
/// Where the count of claims is.
const CLAIMS_AT: usize = 5;
/// Where the owner's sleep state and wake sequence are.
const SLEEP_AT: usize = 6;
const SEQUENCE_AT: usize = 7;
/// Where the owner's own mapping of the segment is.
const HOME_AT: usize = 8;
/// A claim's states.
const FREE: u32 = 0;
const CLAIMING: u32 = 1;
const CLAIMED: u32 = 2;
/// Where segments live: the same-host filesystem every process shares.
pub const SHM_DIR: &str = "/dev/shm";
const PAGE: usize = 4096;

/// Why a segment could not be had.
#[derive(Debug, thiserror::Error)]
pub enum SegmentError {
    /// The file system said no (no `/dev/shm`, no room, no permission).
    #[error("shared-memory segment {path}: {source}")]
    Io {
        /// The segment's file.
        path: PathBuf,
        /// What the system said.
        source: io::Error,
    },
    /// A file of that name belongs to another user: it is left alone.
    #[error(
        "shared-memory segment {path} belongs to user {owner}, not to this process's user {me}: it is left alone; give this job another name or remove the file as that user"
    )]
    NotOurs {
        /// The segment's file.
        path: PathBuf,
        /// Its owner.
        owner: u32,
        /// This process's effective user.
        me: u32,
    },
    /// A live process made the segment of that name: two processes claim
    /// one job and rank.
    #[error(
        "shared-memory segment {path} is in use by process {pid}: another process runs as this job and rank"
    )]
    InUse {
        /// The segment's file.
        path: PathBuf,
        /// The process that made it.
        pid: u32,
    },
    /// The file is no segment of this layout (another program's, a newer
    /// btl's, or one scribbled on).
    #[error("{path} is no btl shared-memory segment of layout {VERSION}")]
    NotASegment {
        /// The file.
        path: PathBuf,
    },
    /// Slots or ring sizes that no segment can have.
    #[error("a segment of {slots} slots of {ring_words} words each cannot be made")]
    BadSize {
        /// Slots asked for.
        slots: usize,
        /// Words of each ring.
        ring_words: usize,
    },
}

/// A mapped segment: this process's own (made with [`Segment::create`],
/// removed when dropped) or a peer's ([`Segment::open`]).
#[derive(Debug)]
pub struct Segment {
    path: PathBuf,
    file: File,
    map: Mapping,
    owned: bool,
    /// Slots and words per ring, as checked when made or mapped: the
    /// header's words may be rewritten later by anyone who maps it.
    slots: usize,
    ring_words: usize,
}

/// Who claimed a slot, as the claim says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Claimant {
    /// The process.
    pub proc: ProcName,
    /// Its process id, to tell its incarnations apart and watch it.
    pub pid: u32,
    /// It may copy straight into and out of the owner's memory (it tried).
    pub cross: bool,
}

impl Segment {
    /// The file of the segment named `name` in `/dev/shm`.
    pub fn path_of(name: &str) -> PathBuf {
        Path::new(SHM_DIR).join(name)
    }

    /// Makes this process's segment `name` with `slots` inbound rings of
    /// `ring_capacity` data words each (a power of two, see
    /// [`ring::init`]). A segment of that name that a process of this
    /// user left behind, which is no longer running, is removed first; one
    /// whose maker still runs, or another user's, is an error.
    pub fn create(name: &str, slots: usize, ring_capacity: usize) -> Result<Self, SegmentError> {
        let path = Self::path_of(name);
        let ring_words = ring::words_for(ring_capacity);
        let bad = SegmentError::BadSize { slots, ring_words };
        if slots == 0
            || slots > u16::MAX as usize
            || ring::words_for(ring::MIN_CAPACITY) > ring_words
            || !ring_capacity.is_power_of_two()
        {
            return Err(bad);
        }
        let words = ring_offset(slots)
            .checked_add(slots.checked_mul(ring_words).ok_or(bad)?)
            .ok_or(SegmentError::BadSize { slots, ring_words })?;
        let len = (words * 4).next_multiple_of(PAGE);
        let io = |source| SegmentError::Io {
            path: path.clone(),
            source,
        };
        remove_stale(&path)?;
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&path)
            .map_err(io)?;
        file.set_len(len as u64).map_err(io)?;
        let map = Mapping::new(&file, len).map_err(io)?;
        let segment = Segment {
            path,
            file,
            map,
            owned: true,
            slots,
            ring_words,
        };
        // The rings are made by their claimants, in memory still zero.
        let w = segment.words();
        w[1].store(VERSION, Ordering::Relaxed);
        w[2].store(std::process::id(), Ordering::Relaxed);
        w[3].store(slots as u32, Ordering::Relaxed);
        w[4].store(ring_words as u32, Ordering::Relaxed);
        let home = w.as_ptr() as u64;
        w[HOME_AT].store(home as u32, Ordering::Relaxed);
        w[HOME_AT + 1].store((home >> 32) as u32, Ordering::Relaxed);
        w[0].store(MAGIC, Ordering::Release);
        Ok(segment)
    }

    /// Maps a peer's segment `name`, checked to be one.
    pub fn open(name: &str) -> Result<Self, SegmentError> {
        Self::open_path(Self::path_of(name))
    }

    /// Maps the segment at `path`, checked to be one.
    pub fn open_path(path: PathBuf) -> Result<Self, SegmentError> {
        let io = |source| SegmentError::Io {
            path: path.clone(),
            source,
        };
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .open(&path)
            .map_err(io)?;
        let len = file.metadata().map_err(io)?.len() as usize;
        if len < PAGE || !len.is_multiple_of(PAGE) {
            return Err(SegmentError::NotASegment { path });
        }
        let map = Mapping::new(&file, len).map_err(io)?;
        let mut segment = Segment {
            path,
            file,
            map,
            owned: false,
            slots: 0,
            ring_words: 0,
        };
        let w = segment.words();
        let (slots, ring_words) = (
            w[3].load(Ordering::Relaxed) as usize,
            w[4].load(Ordering::Relaxed) as usize,
        );
        let fits = ring_offset(slots)
            .checked_add(slots.saturating_mul(ring_words))
            .is_some_and(|words| words <= w.len());
        if w[0].load(Ordering::Acquire) != MAGIC
            || w[1].load(Ordering::Relaxed) != VERSION
            || slots == 0
            || !fits
        {
            return Err(SegmentError::NotASegment {
                path: segment.path.clone(),
            });
        }
        segment.slots = slots;
        segment.ring_words = ring_words;
        Ok(segment)
    }

    /// Its file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Inbound rings, one per slot.
    pub fn slots(&self) -> usize {
        self.slots
    }

    /// Where the segment's owner maps it, as its header says: word 0 there
    /// is [`MAGIC`] in the owner's memory.
    pub fn home_address(&self) -> u64 {
        let w = self.words();
        u64::from(w[HOME_AT].load(Ordering::Relaxed))
            | u64::from(w[HOME_AT + 1].load(Ordering::Relaxed)) << 32
    }

    /// The process that made the segment, as its header says.
    pub fn maker(&self) -> u32 {
        self.words()[2].load(Ordering::Relaxed)
    }

    /// The owner's sleep state and wake sequence, for a
    /// [`ring::Bell`]: the owner sleeps on the sequence, and its peers
    /// wake it when it says it sleeps.
    pub fn bell_words(&self) -> (&AtomicU32, &AtomicU32) {
        let w = self.words();
        (&w[SLEEP_AT], &w[SEQUENCE_AT])
    }

    /// How many claims peers have made: the owner looks at the claims again
    /// when it changed.
    pub fn claims(&self) -> u32 {
        self.words()[CLAIMS_AT].load(Ordering::Acquire)
    }

    /// Claims a free slot for `who`, and makes its ring, empty: the
    /// slot's index, or `None` if all are taken. A claim is one
    /// compare-and-swap, so two peers never get the same slot; the owner
    /// sees it once the ring is made.
    pub fn claim(&self, who: Claimant) -> Option<usize> {
        let w = self.words();
        let slot = (0..self.slots()).find(|&slot| {
            w[claim_at(slot)]
                .compare_exchange(FREE, CLAIMING, Ordering::AcqRel, Ordering::Relaxed)
                .is_ok()
        })?;
        let at = claim_at(slot);
        let ring = self.ring_words_of(slot)?;
        // The slot's memory is zero: never used, or given back by `reopen`.
        if ring::init_zeroed(ring).is_err() {
            // A segment whose header lies about its rings: the slot stays
            // taken, and the peer finds it has no ring.
            return None;
        }
        w[at + 1].store(who.proc.job as u32, Ordering::Relaxed);
        w[at + 2].store((who.proc.job >> 32) as u32, Ordering::Relaxed);
        w[at + 3].store(who.proc.rank, Ordering::Relaxed);
        w[at + 4].store(who.pid, Ordering::Relaxed);
        w[at + 5].store(u32::from(who.cross), Ordering::Relaxed);
        w[at].store(CLAIMED, Ordering::Release);
        w[CLAIMS_AT].fetch_add(1, Ordering::Release);
        Some(slot)
    }

    /// Who claimed slot `slot`, once its ring is made.
    pub fn claimant(&self, slot: usize) -> Option<Claimant> {
        if slot >= self.slots() {
            return None;
        }
        let (w, at) = (self.words(), claim_at(slot));
        if w[at].load(Ordering::Acquire) != CLAIMED {
            return None;
        }
        let word = |i: usize| w[at + i].load(Ordering::Relaxed);
        Some(Claimant {
            proc: ProcName::new(u64::from(word(1)) | u64::from(word(2)) << 32, word(3)),
            pid: word(4),
            cross: word(5) == 1,
        })
    }

    /// Gives slot `slot` back for another peer, its ring's memory returned
    /// to the system (and so zero again). The owner does this once the
    /// process that claimed it is gone.
    pub fn reopen(&self, slot: usize) -> io::Result<()> {
        let Some(start) = self.ring_start(slot) else {
            return Ok(());
        };
        let len = self.ring_words;
        // Whole pages only: a ring starts on a 64-byte line, so the pages
        // it shares with its neighbours are zeroed by hand.
        let (from, to) = (start * 4, (start + len) * 4);
        let (inner_from, inner_to) = (from.next_multiple_of(PAGE), to / PAGE * PAGE);
        if inner_from < inner_to {
            rustix::fs::fallocate(
                self.file.as_fd(),
                rustix::fs::FallocateFlags::PUNCH_HOLE | rustix::fs::FallocateFlags::KEEP_SIZE,
                inner_from as u64,
                (inner_to - inner_from) as u64,
            )?;
        }
        let words = self.words();
        let by_hand = |a: usize, b: usize| {
            for w in &words[a / 4..b / 4] {
                w.store(0, Ordering::Relaxed);
            }
        };
        if inner_from < inner_to {
            by_hand(from, inner_from);
            by_hand(inner_to, to);
        } else {
            by_hand(from, to);
        }
        words[claim_at(slot)].store(FREE, Ordering::Release);
        Ok(())
    }

    /// The ring of slot `slot`, as words for [`ring::Producer::attach`] or
    /// [`ring::Consumer::attach`] (which check them again).
    pub fn ring_words_of(&self, slot: usize) -> Option<&[AtomicU32]> {
        let start = self.ring_start(slot)?;
        self.words().get(start..start.checked_add(self.ring_words)?)
    }

    /// The word where slot `slot`'s ring starts.
    fn ring_start(&self, slot: usize) -> Option<usize> {
        if slot >= self.slots() {
            return None;
        }
        ring_offset(self.slots).checked_add(slot.checked_mul(self.ring_words)?)
    }

    /// Lets go of a peer's segment whose process is gone: its pages are
    /// given back to the system, while its addresses stay mapped (to
    /// zeros, this process's alone), so that a ring still attached there
    /// reads as empty and writes into it go nowhere.
    pub fn vacate(&self) -> io::Result<()> {
        self.map.vacate()
    }

    /// The segment's words.
    fn words(&self) -> &[AtomicU32] {
        self.map.words()
    }
}

impl Drop for Segment {
    /// This process's segment goes with it: its name is free for the next
    /// process of the same job and rank. A peer's is only unmapped.
    fn drop(&mut self) {
        if self.owned {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

/// Where slot `slot`'s claim is.
fn claim_at(slot: usize) -> usize {
    HEADER_WORDS + slot * CLAIM_WORDS
}

/// Where the rings start for `slots` slots: after the claims, at a
/// 64-byte line.
fn ring_offset(slots: usize) -> usize {
    claim_at(slots)
}

/// Removes the segment at `path` if this user's process that made it is
/// no longer running; says why not otherwise. Nothing there: nothing to do.
fn remove_stale(path: &Path) -> Result<(), SegmentError> {
    let meta = match std::fs::symlink_metadata(path) {
        Ok(meta) => meta,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(source) => {
            return Err(SegmentError::Io {
                path: path.into(),
                source,
            });
        }
    };
    let me = rustix::process::geteuid().as_raw();
    if meta.uid() != me {
        return Err(SegmentError::NotOurs {
            path: path.into(),
            owner: meta.uid(),
            me,
        });
    }
    // The maker's process id, if the file says it: a segment cut short
    // (its maker died while making it) has none and is stale.
    let maker = Segment::open_path(path.into()).ok().map(|s| {
        let pid = s.words()[2].load(Ordering::Relaxed);
        // Not removed on drop: it was opened, not made.
        drop(s);
        pid
    });
    if let Some(pid) = maker
        && running(pid)
    {
        return Err(SegmentError::InUse {
            path: path.into(),
            pid,
        });
    }
    tracing::debug!(
        "removing {}, left by process {maker:?}, which is gone",
        path.display()
    );
    std::fs::remove_file(path).map_err(|source| SegmentError::Io {
        path: path.into(),
        source,
    })
}

/// This host as its same-host peers share it: the kernel's boot id and
/// the device of `/dev/shm`. Two network namespaces of one kernel with
/// one `/dev/shm` give the same identity; two containers without a shared
/// `/dev/shm`, or two hosts, do not. It goes on the card, so that a peer
/// maps a segment only where it is the same memory.
pub fn host_identity() -> io::Result<String> {
    let boot = std::fs::read_to_string("/proc/sys/kernel/random/boot_id")?;
    let shm = std::fs::metadata(SHM_DIR)?;
    Ok(format!("{}:{:x}", boot.trim(), shm.dev()))
}

/// Whether process `pid` runs (this one counts).
pub fn running(pid: u32) -> bool {
    let Some(pid) = i32::try_from(pid)
        .ok()
        .and_then(rustix::process::Pid::from_raw)
    else {
        return false;
    };
    match rustix::process::test_kill_process(pid) {
        Ok(()) => true,
        // It runs as another user.
        Err(e) => e == rustix::io::Errno::PERM,
    }
}

/// A shared mapping of a whole file, unmapped when dropped.
#[derive(Debug)]
struct Mapping {
    ptr: std::ptr::NonNull<AtomicU32>,
    len: usize,
}

// SAFETY: the mapping is memory every holder reads and writes only as
// atomics (`words`), which are `Sync`; the pointer is never handed out
// but as that slice.
unsafe impl Send for Mapping {}
// SAFETY: as above.
unsafe impl Sync for Mapping {}

impl Mapping {
    /// Maps `len` bytes of `file` (a whole number of pages), shared.
    fn new(file: &File, len: usize) -> io::Result<Self> {
        use rustix::mm::{MapFlags, ProtFlags, mmap};
        // SAFETY: a new mapping at an address the kernel picks, of a file
        // this process holds open; it aliases no Rust object, and is read
        // and written only as atomics (see `words`).
        let ptr = unsafe {
            mmap(
                std::ptr::null_mut(),
                len,
                ProtFlags::READ | ProtFlags::WRITE,
                MapFlags::SHARED,
                file,
                0,
            )
        }?;
        let ptr = std::ptr::NonNull::new(ptr.cast::<AtomicU32>())
            .ok_or_else(|| io::Error::other("mmap gave a null mapping"))?;
        Ok(Mapping { ptr, len })
    }

    /// Maps private zeros over the whole mapping, in place.
    fn vacate(&self) -> io::Result<()> {
        use rustix::mm::{MapFlags, ProtFlags, mmap_anonymous};
        // SAFETY: the new mapping replaces exactly this one (`MAP_FIXED`
        // at its address and length), so the memory every slice of
        // `words` refers to stays mapped, readable and writable; it holds
        // zeros instead of the file, as if another process had written
        // them, which the atomics the words are read as allow.
        unsafe {
            mmap_anonymous(
                self.ptr.as_ptr().cast(),
                self.len,
                ProtFlags::READ | ProtFlags::WRITE,
                MapFlags::PRIVATE | MapFlags::FIXED,
            )
        }?;
        Ok(())
    }

    /// The mapping as words: page-aligned, so aligned for `AtomicU32`,
    /// which has `u32`'s layout.
    fn words(&self) -> &[AtomicU32] {
        // SAFETY: the mapping is `len` bytes, page-aligned, valid until
        // `drop` unmaps it (which needs `&mut self`, so no slice outlives
        // it); other processes write it only through their own atomics,
        // the same sharing a slice of atomics allows between threads.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len / 4) }
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: the mapping `new` made, of `len` bytes, no longer
        // borrowed (`words` borrows `self`).
        let _ = unsafe { rustix::mm::munmap(self.ptr.as_ptr().cast(), self.len) };
    }
}

#[cfg(test)]
mod tests;
