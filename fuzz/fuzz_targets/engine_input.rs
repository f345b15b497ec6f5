//! Feeds arbitrary bytes to an engine as a hostile peer would, on one
//! accepted link: stream reads of arbitrary sizes, or length-prefixed
//! datagrams (see `btl_fuzz::engine_input`), with the clock moving between
//! them so that its timers fire; the engine's answers are written and its
//! closes carried out, and the events it makes are polled. Nothing may
//! panic; once the engine has given the peer up and is finalized, every
//! fragment is back in its pools and no event is left owed.
#![no_main]

use btl_core::btl::Btl;
use btl_core::endpoint::ProcName;
use btl_core::engine::config::EngineConfig;
use btl_core::engine::{
    COOKIE_FRAME_LEN, Datagram, Engine, Framing, Inline, Lent, LinkId, Source, Stream,
};
use btl_core::pool::{FragmentClass, FragmentPoolConfig, FragmentPools, FragmentPoolsConfig};
use btl_core::time::{Duration, Instant};
use btl_fuzz::engine_input::{Carried, carried, pieces};
use libfuzzer_sys::fuzz_target;

const ME: ProcName = ProcName::new(1, 0);
const MS: Duration = Duration::from_millis(1);

/// Two peers, two links, a window of 8, 8 operations, 32 events, two
/// registrations.
type Tables<'a> = Inline<2, 2, 8, 8, 32, 2, &'a mut [u8]>;
type E<'a, F> = Engine<Lent<'a>, F, 8>;

fn engine<'a, F: Framing>(
    region: &'a mut [u8],
    tables: &'a mut Tables<'a>,
    framing: F,
) -> E<'a, F> {
    let pool = |fragment_size| FragmentPoolConfig {
        fragment_size,
        num: 4,
        max: 4,
        inc: 4,
    };
    let cfg = FragmentPoolsConfig {
        small: pool(128),
        eager: pool(1024),
        max: pool(2048),
    };
    let pools = FragmentPools::new(region, cfg).expect("pools fit the region");
    let config = EngineConfig {
        initial_credits: 4,
        ..EngineConfig::new(ME)
    };
    Engine::new(config, framing, tables.lend(), pools, Instant::ZERO)
}

/// Writes whatever the engine has for `link` and carries out its closes;
/// whether `link` is still open.
fn serve<F: Framing>(e: &mut E<'_, F>, link: LinkId, now: Instant) -> bool {
    while let Some(n) = e
        .poll_transmit(link)
        .map(|t| t.segments.iter().map(|s| s.len()).sum())
    {
        e.handle_written(link, n);
    }
    let mut open = true;
    while let Some(closing) = e.poll_close() {
        let _ = e.link_end(closing);
        e.handle_closed(closing, now);
        open &= closing != link;
    }
    // Nobody can be connected to: every connect this side asks for fails.
    while let Some(req) = e.poll_connect() {
        e.handle_connect_failed(req, btl_core::engine::ConnectFailure::Unreachable, now);
    }
    while e.poll_event().is_some() {}
    open
}

/// Feeds one input's pieces to an engine framed as `framing`, reading each
/// with `read`.
fn run<F: Framing>(
    framing: F,
    rest: &[u8],
    how: Carried,
    read: impl Fn(&mut E<'_, F>, LinkId, &[u8], Instant),
) {
    let mut region = vec![0u8; 64 * 1024];
    let mut tables = Tables::new();
    let mut e = engine(&mut region, &mut tables, framing);
    let Ok(link) = e.handle_accepted(Source(1), [7; 16], Instant::ZERO) else {
        return;
    };
    let mut now = Instant::ZERO;
    let mut open = true;
    for piece in pieces(how, rest) {
        now += MS;
        if open {
            read(&mut e, link, piece, now);
        }
        if e.poll_timeout().is_some_and(|t| t <= now) {
            e.handle_timeout(now);
        }
        open &= serve(&mut e, link, now);
    }
    e.finalize();
    serve(&mut e, link, now);
    if open {
        e.handle_closed(link, now);
    }
    while e.poll_event().is_some() {}
    for class in FragmentClass::ALL {
        assert_eq!(
            e.pools().stats(class).in_use,
            0,
            "{class:?} fragments leaked"
        );
    }
    assert_eq!(e.usage().events, 0, "events left");
    assert_eq!(e.usage().events_owed, 0, "events owed after finalize");
}

fuzz_target!(|data: &[u8]| {
    let Some((&settings, rest)) = data.split_first() else {
        return;
    };
    let how = carried(settings);
    match how {
        Carried::Stream { .. } => run(Stream, rest, how, |e, link, piece, now| {
            let _ = e.handle_stream(link, piece, now);
        }),
        // Each datagram also as a stranger's (the address validation a
        // datagram server runs first), then on the link.
        Carried::Datagram => run(Datagram { mtu: 1500 }, rest, how, |e, link, piece, now| {
            let mut answer = [0u8; COOKIE_FRAME_LEN];
            let _ = e.handle_stranger(&[127, 0, 0, 1, 0, 1], piece, now, &mut answer);
            let _ = e.handle_datagram(link, piece, now);
        }),
    }
});
