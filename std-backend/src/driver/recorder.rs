//! A module's flight recorder: its engine's [journal](btl_core::engine::journal)
//! kept in memory up to a bound, with what it takes to make the engine
//! again (its configuration as given, framing, capacities, pools and start
//! time), written to a file when a peer is lost for a reason other than a
//! clean close, or on demand; and the replay of such a file into a fresh
//! engine ([`Record::replay`]), which says whether it did the same.
//!
//! The record keeps a module's life from its start: a replay begins with a
//! fresh engine, so what came first cannot be dropped for what comes
//! later. Once the bound is reached the recorder stops, and a replay checks
//! what it holds.
//!
//! A record holds what the engine took in: messages' bytes and the job
//! key (a replay needs it to make the same proofs). It is written readable
//! by its owner only; treat it as the job's secret.

use std::fmt;
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use btl_core::endpoint::ProcName;
use btl_core::engine::config::{EngineConfig, MAX_KEY_LEN};
use btl_core::engine::framing::{Datagram, Stream};
use btl_core::engine::journal::{Call, Journal};
use btl_core::engine::replay::{ReplayError, Replayed, replay};
use btl_core::engine::rtt::RttConfig;
use btl_core::engine::{Capacities, Engine};
use btl_core::pool::{FragmentPoolConfig, FragmentPoolsConfig};
use btl_core::time::{Duration, Instant};

use super::heap::Heap;

/// The bytes a record file starts with.
const MAGIC: &[u8; 8] = b"BTLREC\0\x01";

/// The journal of one engine, in memory, up to a bound.
///
/// The memory for the whole bound is taken, and written once, when the
/// recorder is made: an entry is then a copy into memory already there,
/// never a wait on the kernel for a fresh page. A module's journal grows
/// to its bound in a long run anyway; this takes it at the start.
#[derive(Debug, Default)]
pub struct Recorder {
    memory: Box<[u8]>,
    len: usize,
    full: bool,
}

impl Recorder {
    /// A recorder that keeps nothing.
    pub fn off() -> Self {
        Recorder::default()
    }

    /// A recorder that keeps up to `limit` bytes of journal, its memory
    /// taken now; an error if the system has not that much to give.
    pub fn with_limit(limit: usize) -> Result<Self, RecordError> {
        let mut memory = Vec::new();
        memory
            .try_reserve_exact(limit)
            .map_err(|_| RecordError::NoMemory(limit))?;
        // Written now, so that no entry waits for a page.
        memory.resize(limit, 0);
        Ok(Recorder {
            memory: memory.into_boxed_slice(),
            len: 0,
            full: false,
        })
    }

    /// The journal so far.
    pub fn bytes(&self) -> &[u8] {
        &self.memory[..self.len]
    }

    /// Whether the bound was reached: the journal stops there.
    pub fn is_full(&self) -> bool {
        self.full
    }

    /// Forgets the journal, keeping the memory: how a benchmark records
    /// without end. A module's record must start with its engine, so what
    /// is kept after this replays nowhere.
    pub fn clear(&mut self) {
        self.len = 0;
        self.full = false;
    }
}

impl Journal for Recorder {
    #[inline]
    fn is_on(&self) -> bool {
        !self.memory.is_empty() && !self.full
    }

    #[inline(always)]
    fn call(&mut self, call: &Call<'_>) {
        // Room for the result's digest too: an entry is whole or absent.
        let room = self.memory.len().saturating_sub(8);
        match self
            .memory
            .get_mut(self.len..room)
            .map(|out| call.encode_into(out))
        {
            Some(Ok(n)) => self.len += n,
            _ => self.full = true,
        }
    }

    #[inline(always)]
    fn out(&mut self, digest: u64) {
        if self.is_on() {
            self.memory[self.len..self.len + 8].copy_from_slice(&digest.to_le_bytes());
            self.len += 8;
        }
    }
}

/// How a recorded engine framed its links.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Framed {
    /// A byte stream (TCP).
    Stream,
    /// Datagrams of at most `mtu` bytes (UDP).
    Datagram {
        /// The largest datagram.
        mtu: usize,
    },
}

/// A framing a record can name.
pub trait AsFramed {
    /// How the record names it.
    fn framed(&self) -> Framed;
}

impl AsFramed for Stream {
    fn framed(&self) -> Framed {
        Framed::Stream
    }
}

impl AsFramed for Datagram {
    fn framed(&self) -> Framed {
        Framed::Datagram { mtu: self.mtu }
    }
}

/// What it takes to make a recorded engine again.
#[derive(Debug, Clone)]
pub struct Setup {
    /// The module's component (`tcp`, `udp`).
    pub component: String,
    /// Its framing.
    pub framing: Framed,
    /// Its configuration as the module gave it (the engine fits it).
    pub config: EngineConfig,
    /// Its tables' lengths.
    pub capacities: Capacities,
    /// Its fragment pools.
    pub pools: FragmentPoolsConfig,
    /// The time it was made, on its clock.
    pub start: Instant,
}

/// A record: how to make the engine, and its journal.
#[derive(Debug, Clone)]
pub struct Record {
    /// How to make the engine.
    pub setup: Setup,
    /// Why it was written (`peer 7.1 lost: timeout`, or what the caller of
    /// `write_record` said).
    pub why: String,
    /// Whether the recorder had stopped at its bound.
    pub full: bool,
    /// The journal.
    pub journal: Vec<u8>,
}

/// Why a record file could not be read.
#[derive(Debug)]
pub enum RecordError {
    /// The file could not be read or written.
    Io(PathBuf, io::Error),
    /// It is no btl record, or of another version.
    NotARecord,
    /// It ends early, or holds a value no engine takes.
    Damaged(&'static str),
    /// The module records nothing: `btl_<component>_record` is 0.
    NotRecording,
    /// Recording was asked of a module already in use: a replay starts
    /// from a fresh engine, so a record must start with the module.
    AlreadyInUse,
    /// The system could not give the recorder its bound's memory.
    NoMemory(usize),
}

impl fmt::Display for RecordError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RecordError::Io(path, e) => write!(f, "{}: {e}", path.display()),
            RecordError::NotARecord => f.write_str(
                "not a btl record of this version (one is written by a module with btl_<component>_record set)",
            ),
            RecordError::Damaged(what) => write!(f, "the record is damaged: {what}"),
            RecordError::NotRecording => f.write_str(
                "this module records nothing: set btl_<component>_record to the bytes to keep",
            ),
            RecordError::AlreadyInUse => f.write_str(
                "recording starts only with a module not used yet (a replay starts from a fresh engine)",
            ),
            RecordError::NoMemory(limit) => write!(
                f,
                "the flight recorder could not take its {limit} bytes of memory: lower btl_<component>_record"
            ),
        }
    }
}

impl std::error::Error for RecordError {}

/// Fields written little-endian.
struct Out(Vec<u8>);

impl Out {
    fn u8(&mut self, v: u8) {
        self.0.push(v);
    }
    fn u16(&mut self, v: u16) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    fn u32(&mut self, v: u32) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    fn u64(&mut self, v: u64) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    fn duration(&mut self, d: Duration) {
        self.u64(d.as_nanos());
    }
    fn bytes(&mut self, b: &[u8]) {
        self.u64(b.len() as u64);
        self.0.extend_from_slice(b);
    }
    fn pool(&mut self, p: &FragmentPoolConfig) {
        self.u64(p.fragment_size as u64);
        self.u32(p.num);
        self.u32(p.max);
        self.u32(p.inc);
    }
}

/// Fields read back.
struct In<'a>(&'a [u8]);

impl<'a> In<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], RecordError> {
        if self.0.len() < n {
            return Err(RecordError::Damaged("it ends early"));
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Ok(head)
    }
    fn array<const N: usize>(&mut self) -> Result<[u8; N], RecordError> {
        let mut a = [0; N];
        a.copy_from_slice(self.take(N)?);
        Ok(a)
    }
    fn u8(&mut self) -> Result<u8, RecordError> {
        Ok(self.take(1)?[0])
    }
    fn u16(&mut self) -> Result<u16, RecordError> {
        Ok(u16::from_le_bytes(self.array()?))
    }
    fn u32(&mut self) -> Result<u32, RecordError> {
        Ok(u32::from_le_bytes(self.array()?))
    }
    fn u64(&mut self) -> Result<u64, RecordError> {
        Ok(u64::from_le_bytes(self.array()?))
    }
    fn usize(&mut self) -> Result<usize, RecordError> {
        usize::try_from(self.u64()?).map_err(|_| RecordError::Damaged("a length"))
    }
    fn duration(&mut self) -> Result<Duration, RecordError> {
        Ok(Duration::from_nanos(self.u64()?))
    }
    fn bytes(&mut self) -> Result<&'a [u8], RecordError> {
        let n = self.usize()?;
        self.take(n)
    }
    fn pool(&mut self) -> Result<FragmentPoolConfig, RecordError> {
        Ok(FragmentPoolConfig {
            fragment_size: self.usize()?,
            num: self.u32()?,
            max: self.u32()?,
            inc: self.u32()?,
        })
    }
}

impl Record {
    /// The record's bytes, as [`read`](Self::read) takes them.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut o = Out(Vec::with_capacity(512 + self.journal.len()));
        o.0.extend_from_slice(MAGIC);
        let s = &self.setup;
        o.bytes(s.component.as_bytes());
        o.bytes(self.why.as_bytes());
        o.u8(u8::from(self.full));
        match s.framing {
            Framed::Stream => o.u8(0),
            Framed::Datagram { mtu } => {
                o.u8(1);
                o.u64(mtu as u64);
            }
        }
        let c = &s.config;
        o.u64(c.me.job);
        o.u32(c.me.rank);
        match &c.job_key {
            Some(key) => {
                o.u8(1);
                o.bytes(key);
            }
            None => o.u8(0),
        }
        o.u8(u8::from(c.checksum));
        o.u64(c.max_body);
        o.u32(c.initial_credits);
        o.u64(c.put_chunk);
        o.duration(c.handshake_timeout);
        o.duration(c.peer_timeout);
        o.duration(c.keepalive);
        o.duration(c.rtt.initial_rto);
        o.duration(c.rtt.min_rto);
        o.duration(c.rtt.max_rto);
        o.duration(c.ack_delay);
        o.u8(c.links);
        o.duration(c.refused_timeout);
        o.u16(c.handshake_budget);
        o.u16(c.handshake_budget_per_source);
        o.u8(c.source_share);
        o.0.extend_from_slice(&c.cookie_secret);
        o.duration(c.linger);
        o.u64(c.epoch);
        let k = &s.capacities;
        for n in [k.peers, k.links, k.ops, k.events, k.registrations] {
            o.u64(n as u64);
        }
        for p in [&s.pools.small, &s.pools.eager, &s.pools.max] {
            o.pool(p);
        }
        o.u64(s.start.as_nanos());
        o.bytes(&self.journal);
        o.0
    }

    /// A record from its bytes.
    pub fn read(bytes: &[u8]) -> Result<Record, RecordError> {
        let mut i = In(bytes);
        if i.take(MAGIC.len()).ok() != Some(&MAGIC[..]) {
            return Err(RecordError::NotARecord);
        }
        let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
        let component = text(i.bytes()?);
        let why = text(i.bytes()?);
        let full = i.u8()? != 0;
        let framing = match i.u8()? {
            0 => Framed::Stream,
            1 => Framed::Datagram { mtu: i.usize()? },
            _ => return Err(RecordError::Damaged("the framing")),
        };
        let me = ProcName::new(i.u64()?, i.u32()?);
        let job_key = match i.u8()? {
            0 => None,
            _ => Some(
                heapless::Vec::<u8, MAX_KEY_LEN>::from_slice(i.bytes()?)
                    .map_err(|_| RecordError::Damaged("the job key"))?,
            ),
        };
        let config = EngineConfig {
            me,
            job_key,
            checksum: i.u8()? != 0,
            max_body: i.u64()?,
            initial_credits: i.u32()?,
            put_chunk: i.u64()?,
            handshake_timeout: i.duration()?,
            peer_timeout: i.duration()?,
            keepalive: i.duration()?,
            rtt: RttConfig {
                initial_rto: i.duration()?,
                min_rto: i.duration()?,
                max_rto: i.duration()?,
            },
            ack_delay: i.duration()?,
            links: i.u8()?,
            refused_timeout: i.duration()?,
            handshake_budget: i.u16()?,
            handshake_budget_per_source: i.u16()?,
            source_share: i.u8()?,
            cookie_secret: i.array()?,
            linger: i.duration()?,
            epoch: i.u64()?,
        };
        let capacities = Capacities {
            peers: i.usize()?,
            links: i.usize()?,
            ops: i.usize()?,
            events: i.usize()?,
            registrations: i.usize()?,
        };
        let pools = FragmentPoolsConfig {
            small: i.pool()?,
            eager: i.pool()?,
            max: i.pool()?,
        };
        let start = Instant::from_nanos(i.u64()?);
        let journal = i.bytes()?.to_vec();
        Ok(Record {
            setup: Setup {
                component,
                framing,
                config,
                capacities,
                pools,
                start,
            },
            why,
            full,
            journal,
        })
    }

    /// Writes the record to `path`, readable by its owner only.
    pub fn save(&self, path: &Path) -> Result<(), RecordError> {
        let io = |e| RecordError::Io(path.to_owned(), e);
        // A new file, never one that is there (another's, or a link to
        // one): it holds the job's key.
        let mut options = std::fs::OpenOptions::new();
        options.write(true).create_new(true);
        #[cfg(unix)]
        std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
        let mut file = options.open(path).map_err(io)?;
        file.write_all(&self.to_bytes()).map_err(io)?;
        file.sync_all().map_err(io)
    }

    /// Reads the record at `path`.
    pub fn load(path: &Path) -> Result<Record, RecordError> {
        let bytes = std::fs::read(path).map_err(|e| RecordError::Io(path.to_owned(), e))?;
        Record::read(&bytes)
    }

    /// Makes the engine again and feeds it the journal; what it went
    /// through, or where it did something else.
    pub fn replay(&self) -> Result<Replayed, ReplayFailure> {
        let s = &self.setup;
        let pools = |e| ReplayFailure::Setup(format!("its fragment pools: {e}"));
        // A file says how much to allocate: a forged one is refused before
        // its pools are made, not after.
        s.pools.validate().map_err(pools)?;
        match s.framing {
            Framed::Stream => {
                let mut engine: Engine<Heap, Stream, 64> =
                    Heap::engine(s.config.clone(), Stream, s.capacities, s.pools, s.start)
                        .map_err(pools)?;
                replay(&mut engine, &self.journal, <[u8]>::to_vec).map_err(ReplayFailure::Replay)
            }
            Framed::Datagram { mtu } => {
                let mut engine: Engine<Heap, Datagram, 64> = Heap::engine(
                    s.config.clone(),
                    Datagram { mtu },
                    s.capacities,
                    s.pools,
                    s.start,
                )
                .map_err(pools)?;
                replay(&mut engine, &self.journal, <[u8]>::to_vec).map_err(ReplayFailure::Replay)
            }
        }
    }
}

/// Why a replay did not match.
#[derive(Debug)]
pub enum ReplayFailure {
    /// The engine could not be made as recorded.
    Setup(String),
    /// It was made, and the journal went another way, or stopped at a
    /// call a replay cannot repeat.
    Replay(ReplayError),
}

impl fmt::Display for ReplayFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ReplayFailure::Setup(why) => write!(f, "the engine cannot be made as recorded: {why}"),
            ReplayFailure::Replay(e) => e.fmt(f),
        }
    }
}

impl std::error::Error for ReplayFailure {}

#[cfg(test)]
mod tests {
    use super::*;

    fn a_record() -> Record {
        let mut config = EngineConfig::new(ProcName::new(7, 1));
        config.job_key = heapless::Vec::from_slice(b"key").ok();
        config.epoch = 99;
        config.cookie_secret = [3; 16];
        Record {
            setup: Setup {
                component: "tcp".into(),
                framing: Framed::Datagram { mtu: 1472 },
                config,
                capacities: Capacities::for_peers(4),
                pools: FragmentPoolsConfig {
                    small: FragmentPoolConfig {
                        fragment_size: 256,
                        num: 4,
                        max: 8,
                        inc: 1,
                    },
                    eager: FragmentPoolConfig {
                        fragment_size: 4096,
                        num: 2,
                        max: 4,
                        inc: 1,
                    },
                    max: FragmentPoolConfig {
                        fragment_size: 65536,
                        num: 1,
                        max: 2,
                        inc: 1,
                    },
                },
                start: Instant::from_millis(5),
            },
            why: "on demand".into(),
            full: true,
            journal: vec![1, 2, 3],
        }
    }

    #[test]
    fn a_record_reads_back_as_written() {
        let r = a_record();
        let back = Record::read(&r.to_bytes()).expect("a record");
        assert_eq!(back.to_bytes(), r.to_bytes());
        assert_eq!(
            format!("{:?}", back.setup.config),
            format!("{:?}", r.setup.config)
        );
        assert_eq!(back.setup.framing, Framed::Datagram { mtu: 1472 });
        assert!(back.full);
    }

    #[test]
    fn a_damaged_record_is_an_error_never_a_panic() {
        let bytes = a_record().to_bytes();
        for cut in 0..bytes.len() {
            assert!(Record::read(&bytes[..cut]).is_err(), "cut at {cut}");
        }
        assert!(matches!(
            Record::read(b"something else entirely"),
            Err(RecordError::NotARecord)
        ));
    }

    #[test]
    fn a_record_asking_for_pools_no_engine_takes_is_refused_before_they_are_made() {
        let mut r = a_record();
        r.setup.pools.max.fragment_size = 0;
        r.setup.pools.max.max = u32::MAX;
        assert!(matches!(r.replay(), Err(ReplayFailure::Setup(_))));
    }

    #[test]
    fn a_full_recorder_keeps_whole_entries_and_stops() {
        let mut r = Recorder::with_limit(30).expect("memory");
        for _ in 0..10 {
            r.call(&Call::PollConnect);
            r.out(7);
        }
        assert!(r.is_full());
        assert!(!r.is_on());
        assert_eq!(r.bytes().len() % 9, 0, "whole entries of 9 bytes");
        assert_eq!(r.bytes().len(), 27);
        r.clear();
        assert!(r.is_on() && r.bytes().is_empty());
        r.call(&Call::PollConnect);
        r.out(7);
        assert_eq!(r.bytes(), [code_of_poll_connect(), 7, 0, 0, 0, 0, 0, 0, 0]);
    }

    fn code_of_poll_connect() -> u8 {
        Call::PollConnect.to_vec()[0]
    }

    #[test]
    fn a_bound_the_system_cannot_give_is_an_error_that_says_so() {
        let err = Recorder::with_limit(usize::MAX).expect_err("no such memory");
        assert!(matches!(err, RecordError::NoMemory(usize::MAX)));
        assert!(err.to_string().contains("btl_<component>_record"), "{err}");
    }

    #[test]
    fn an_entry_that_does_not_fit_leaves_no_part_of_itself() {
        // 20 bytes: room for one 9-byte entry, and 11 more that a 17-byte
        // clock entry does not fit in.
        let mut r = Recorder::with_limit(20).expect("memory");
        r.call(&Call::PollConnect);
        r.out(1);
        r.call(&Call::Clock(btl_core::time::Instant::from_nanos(5)));
        r.out(0);
        assert!(r.is_full());
        assert_eq!(r.bytes().len(), 9);
    }
}
