//! Replays a [`journal`](super::journal) into a fresh engine and checks
//! that each call gives what it gave when it was recorded: the same
//! connections asked for, the same bytes out, the same events. The engine
//! must be made as the recorded one was (its configuration, framing,
//! capacities, fragment pools and start time); a host records those beside
//! the journal.
//!
//! The replayer plays the driver and the upper layer: it holds the
//! descriptors the upper layer held (by the name the journal gives them),
//! writes a message's recorded bytes into its descriptor before it sends
//! it, and writes what a driver read into `payload_buffer` there before
//! it reports it.

use alloc::collections::BTreeMap;
use alloc::format;
use alloc::string::String;
use alloc::vec::Vec;
use core::fmt;

use crate::btl::{Btl, Event, MemSlice, SendStatus};
use crate::desc::Descriptor;
use crate::endpoint::Reachability;

use super::framing::{Datagram, Framing, Stream};
use super::journal::{Call, DescId, Digest, Entry, JournalError, RdmaCall};
use super::storage::Storage;
use super::{COOKIE_FRAME_LEN, Engine, Stranger};

/// What a replay went through, when it matched.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Replayed {
    /// Entries replayed.
    pub entries: usize,
    /// Transmits compared.
    pub transmits: usize,
    /// Events compared.
    pub events: usize,
}

/// Why a replay stopped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReplayError {
    /// The journal's bytes could not be read at `offset`.
    Journal {
        /// Where in the journal.
        offset: usize,
        /// What was wrong.
        error: JournalError,
    },
    /// Entry `entry` gave another result than when it was recorded.
    Diverged {
        /// Its index, from 0.
        entry: usize,
        /// The call, as text.
        call: String,
        /// The recorded result's digest.
        recorded: u64,
        /// The replayed one's.
        replayed: u64,
    },
    /// Entry `entry` is a call a replay cannot repeat.
    Unreplayable {
        /// Its index.
        entry: usize,
        /// What the call was.
        what: String,
    },
    /// Entry `entry` names a descriptor the replay does not hold, or a call
    /// of the other framing: the journal is not of this kind of engine.
    Mismatch {
        /// Its index.
        entry: usize,
        /// What did not fit.
        what: String,
    },
}

impl fmt::Display for ReplayError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ReplayError::Journal { offset, error } => {
                write!(f, "the journal cannot be read at byte {offset}: {error}")
            }
            ReplayError::Diverged {
                entry,
                call,
                recorded,
                replayed,
            } => write!(
                f,
                "entry {entry} ({call}) gave another result: recorded {recorded:016x}, replayed {replayed:016x}"
            ),
            ReplayError::Unreplayable { entry, what } => write!(
                f,
                "entry {entry} is a call a replay cannot repeat ({what}): the journal matched up to it"
            ),
            ReplayError::Mismatch { entry, what } => {
                write!(f, "entry {entry} does not fit this engine: {what}")
            }
        }
    }
}

impl core::error::Error for ReplayError {}

/// The calls whose form depends on the framing.
pub trait FramedInput {
    /// `handle_stream`'s digest, or `None` over datagrams.
    fn stream(&mut self, call: &Call<'_>) -> Option<u64>;
    /// `handle_payload_read` with the bytes written first, or `None`.
    fn payload_read(&mut self, call: &Call<'_>) -> Option<u64>;
    /// `handle_datagram`'s digest, or `None` over streams.
    fn datagram(&mut self, call: &Call<'_>) -> Option<u64>;
    /// `handle_stranger`'s digest, or `None` over streams.
    fn stranger(&mut self, call: &Call<'_>) -> Option<u64>;
}

impl<S: Storage, const W: usize> FramedInput for Engine<S, Stream, W> {
    fn stream(&mut self, call: &Call<'_>) -> Option<u64> {
        let Call::Stream { link, data, now } = *call else {
            return None;
        };
        Some(Digest::of(&self.handle_stream(link, data, now)))
    }

    fn payload_read(&mut self, call: &Call<'_>) -> Option<u64> {
        let Call::PayloadRead { link, data, now } = *call else {
            return None;
        };
        if let Some(buf) = self.payload_buffer(link) {
            let n = data.len().min(buf.len());
            buf[..n].copy_from_slice(&data[..n]);
        }
        Some(Digest::of(&self.handle_payload_read(link, data.len(), now)))
    }

    fn datagram(&mut self, _: &Call<'_>) -> Option<u64> {
        None
    }

    fn stranger(&mut self, _: &Call<'_>) -> Option<u64> {
        None
    }
}

impl<S: Storage, const W: usize> FramedInput for Engine<S, Datagram, W> {
    fn stream(&mut self, _: &Call<'_>) -> Option<u64> {
        None
    }

    fn payload_read(&mut self, _: &Call<'_>) -> Option<u64> {
        None
    }

    fn datagram(&mut self, call: &Call<'_>) -> Option<u64> {
        let Call::Datagram { link, data, now } = *call else {
            return None;
        };
        Some(Digest::of(&self.handle_datagram(link, data, now)))
    }

    fn stranger(&mut self, call: &Call<'_>) -> Option<u64> {
        let Call::Stranger { address, data, now } = *call else {
            return None;
        };
        let mut answer = [0; COOKIE_FRAME_LEN];
        let result = self.handle_stranger(address, data, now, &mut answer);
        let mut d = Digest::default();
        d.debug(&result);
        if let Stranger::Answer(n) = result {
            d.bytes(&answer[..n]);
        }
        Some(d.get())
    }
}

/// Feeds `journal` to `engine`, a fresh engine made as the recorded one
/// was, comparing each call's result with the recorded one; `memory`
/// makes the engine's registered memory from the bytes a registration
/// held.
pub fn replay<S: Storage, F: Framing, const W: usize>(
    engine: &mut Engine<S, F, W>,
    journal: &[u8],
    mut memory: impl FnMut(&[u8]) -> S::Memory,
) -> Result<Replayed, ReplayError>
where
    Engine<S, F, W>: FramedInput,
{
    let mut held: BTreeMap<DescId, Descriptor> = BTreeMap::new();
    let mut done = Replayed::default();
    let mut offset = 0;
    while offset < journal.len() {
        let (entry, len) = Entry::decode(&journal[offset..])
            .map_err(|error| ReplayError::Journal { offset, error })?;
        let at = done.entries;
        let mismatch = |what: String| ReplayError::Mismatch { entry: at, what };
        let replayed = match &entry.call {
            Call::Clock(now) => {
                engine.shared.now = *now;
                0
            }
            Call::PollConnect => Digest::of(&engine.poll_connect()),
            Call::Connected { req, nonce, now } => {
                Digest::of(&engine.handle_connected(*req, *nonce, *now))
            }
            Call::Accepted { source, nonce, now } => {
                Digest::of(&engine.handle_accepted(*source, *nonce, *now))
            }
            Call::ConnectFailed { req, why, now } => {
                engine.handle_connect_failed(*req, *why, *now);
                0
            }
            Call::Closed { link, now } => {
                engine.handle_closed(*link, *now);
                0
            }
            Call::Refused { link, now } => {
                engine.handle_refused(*link, *now);
                0
            }
            Call::PollClose => Digest::of(&engine.poll_close()),
            Call::Transmit(link) => {
                done.transmits += 1;
                let mut d = Digest::default();
                if let Some(t) = engine.poll_transmit(*link) {
                    for segment in &t.segments {
                        d.bytes(segment);
                    }
                }
                d.get()
            }
            Call::Written { link, n } => {
                engine.handle_written(*link, *n);
                0
            }
            Call::Timeout(now) => {
                engine.handle_timeout(*now);
                0
            }
            Call::PollReadyLink => Digest::of(&engine.poll_ready_link()),
            call @ Call::Stream { .. } => engine
                .stream(call)
                .ok_or_else(|| mismatch("a stream's bytes to a datagram engine".into()))?,
            call @ Call::PayloadRead { .. } => engine
                .payload_read(call)
                .ok_or_else(|| mismatch("a stream's bytes to a datagram engine".into()))?,
            call @ Call::Datagram { .. } => engine
                .datagram(call)
                .ok_or_else(|| mismatch("a datagram to a stream engine".into()))?,
            call @ Call::Stranger { .. } => engine
                .stranger(call)
                .ok_or_else(|| mismatch("a stranger's datagram to a stream engine".into()))?,
            Call::AcknowledgeNow => {
                engine.acknowledge_now();
                0
            }
            Call::Connect(endpoint) => Digest::of(&engine.connect(*endpoint)),
            Call::AddProcs(procs) => {
                let procs: Vec<_> = procs.iter().collect();
                let mut endpoints = alloc::vec![None; procs.len()];
                let mut bits = alloc::vec![0u64; procs.len().div_ceil(64).max(1)];
                let mut reachable = Reachability::new(&mut bits);
                let result = engine.add_procs(&procs, &mut endpoints, &mut reachable);
                Digest::of(&(&result, &*endpoints))
            }
            Call::DelProcs(endpoints) => {
                let endpoints: Vec<_> = endpoints.iter().collect();
                Digest::of(&engine.del_procs(&endpoints))
            }
            Call::Alloc {
                endpoint,
                order,
                size,
                flags,
            } => keep(&mut held, engine.alloc(*endpoint, *order, *size, *flags)),
            Call::Free(id) => {
                let desc = held
                    .remove(id)
                    .ok_or_else(|| mismatch(format!("no descriptor {id:?} to free")))?;
                Digest::of(&engine.free(desc))
            }
            Call::PrepareSrc {
                endpoint,
                data,
                reserve,
                order,
                flags,
            } => keep(
                &mut held,
                engine.prepare_src(*endpoint, data, *reserve, *order, *flags),
            ),
            Call::Send {
                endpoint,
                desc,
                bytes,
                tag,
            } => {
                let mut d = held
                    .remove(desc)
                    .ok_or_else(|| mismatch(format!("no descriptor {desc:?} to send")))?;
                write_back(engine, &mut d, bytes);
                let result = engine.send(*endpoint, d, *tag);
                let digest = Digest::of_send(&result);
                match result {
                    Ok(SendStatus::Completed(Some(desc))) => {
                        _ = held.insert(DescId::of(&desc), desc)
                    }
                    Err(e) => _ = held.insert(DescId::of(&e.desc), e.desc),
                    Ok(_) => {}
                }
                digest
            }
            Call::Sendi {
                endpoint,
                header,
                payload,
                tag,
                order,
                flags,
            } => Digest::of(&engine.sendi(*endpoint, header, payload, *tag, *order, *flags)),
            Call::Progress => Digest::of(&engine.progress()),
            Call::PollEvent => {
                let event = engine.poll_event();
                if event.is_some() {
                    done.events += 1;
                }
                let digest = match &event {
                    Some(e) => Digest::of_event(e),
                    None => Digest::of(&None::<()>),
                };
                if let Some(Event::SendComplete {
                    desc: Some(desc), ..
                }) = event
                {
                    held.insert(DescId::of(&desc), desc);
                }
                digest
            }
            Call::Finalize => Digest::of(&engine.finalize()),
            Call::RegisterMem { data, access } => Digest::of(
                &engine
                    .register_mem(memory(data), *access)
                    .as_ref()
                    .map_err(|e| e.error),
            ),
            Call::DeregisterMem(handle) => {
                Digest::of(&engine.deregister_mem(*handle).as_ref().map(|_| ()))
            }
            Call::PrepareSrcRegistered {
                endpoint,
                slice,
                bytes,
                reserve,
                order,
                flags,
            } => {
                write_region(engine, *slice, bytes);
                keep(
                    &mut held,
                    engine.prepare_src_registered(*endpoint, *slice, *reserve, *order, *flags),
                )
            }
            Call::Rdma {
                kind,
                endpoint,
                local,
                remote,
                ctx,
                imm,
                bytes,
            } => {
                write_region(engine, *local, bytes);
                Digest::of(&match kind {
                    RdmaCall::Put => engine.put(*endpoint, *local, *remote, *ctx),
                    RdmaCall::PutNotify => {
                        engine.put_notify(*endpoint, *local, *remote, *imm, *ctx)
                    }
                    RdmaCall::Get => engine.get(*endpoint, *local, *remote, *ctx),
                })
            }
            Call::GetThirdParty {
                source,
                src,
                target,
                dst,
                ctx,
            } => Digest::of(&engine.get_third_party(*source, *src, *target, *dst, *ctx)),
            Call::PollCompletion => {
                let completion = engine.poll_completion();
                let digest = Digest::of(&completion);
                if let Some(crate::btl::Completion::Send {
                    desc: Some(desc), ..
                }) = completion
                {
                    held.insert(DescId::of(&desc), desc);
                }
                digest
            }
            Call::Unreplayable(what) => {
                return Err(ReplayError::Unreplayable {
                    entry: at,
                    what: String::from(*what),
                });
            }
        };
        if replayed != entry.out {
            return Err(ReplayError::Diverged {
                entry: at,
                call: format!("{:?}", entry.call).chars().take(120).collect(),
                recorded: entry.out,
                replayed,
            });
        }
        done.entries += 1;
        offset += len;
    }
    Ok(done)
}

/// Holds a descriptor a call gave; the digest of the call's result.
fn keep(
    held: &mut BTreeMap<DescId, Descriptor>,
    result: Result<Descriptor, crate::btl::BtlError>,
) -> u64 {
    match result {
        Ok(desc) => {
            let digest = Digest::of_desc(&desc);
            held.insert(DescId::of(&desc), desc);
            digest
        }
        Err(e) => Digest::of(&e),
    }
}

/// Writes a message's recorded bytes (headroom, header reserve, payload)
/// into `desc`, past the headroom the engine writes itself.
fn write_back<S: Storage, F: Framing, const W: usize>(
    engine: &Engine<S, F, W>,
    desc: &mut Descriptor,
    bytes: &[u8],
) {
    let pools = engine.pools();
    let rest = bytes.get(desc.headroom()..).unwrap_or(&[]);
    let reserve = desc.reserve();
    if let Ok(header) = desc.header_mut(pools) {
        let n = header.len().min(rest.len());
        header[..n].copy_from_slice(&rest[..n]);
    }
    let rest = rest.get(reserve..).unwrap_or(&[]);
    if let Ok(payload) = desc.payload_mut(pools) {
        let n = payload.len().min(rest.len());
        payload[..n].copy_from_slice(&rest[..n]);
    }
}

/// Writes what `slice` held when a call read it (the caller wrote it
/// through `region_mut`, which the journal does not see).
fn write_region<S: Storage, F: Framing, const W: usize>(
    engine: &mut Engine<S, F, W>,
    slice: MemSlice,
    bytes: &[u8],
) {
    let Ok(region) = engine.region_mut(slice.handle) else {
        return;
    };
    let start = usize::try_from(slice.offset).unwrap_or(usize::MAX);
    if let Some(place) = start
        .checked_add(bytes.len())
        .and_then(|end| region.get_mut(start..end))
    {
        place.copy_from_slice(bytes);
    }
}
