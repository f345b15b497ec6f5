//! Feeds arbitrary bytes to an engine as a hostile peer would, on one
//! accepted link: stream reads of arbitrary sizes, or length-prefixed
//! datagrams (see `btl_fuzz::engine_input`), with the clock moving between
//! them so that its timers fire; the engine's answers are written and its
//! closes carried out, and the events it makes are polled. Nothing may
//! panic; once the engine has given the peer up and is finalized, every
//! fragment is back in its pools and no event is left owed.
#![no_main]

use btl_core::btl::Btl;
use btl_core::engine::{COOKIE_FRAME_LEN, Datagram, Framing, LinkId, Source, Stream};
use btl_core::pool::FragmentClass;
use btl_core::time::{Duration, Instant};
use btl_fuzz::engine_input::{Carried, E, NONCE, Tables, carried, engine, pieces};
use libfuzzer_sys::fuzz_target;

const MS: Duration = Duration::from_millis(1);

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
    let keyed = matches!(how, Carried::Datagram { keyed: true });
    let mut e = engine(&mut region, &mut tables, framing, keyed);
    let Ok(link) = e.handle_accepted(Source(1), NONCE, Instant::ZERO) else {
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
        // datagram server runs first), then on the link; a keyed engine's
        // link, once a seed has opened it, takes only sealed datagrams.
        Carried::Datagram { .. } => {
            run(Datagram { mtu: 1500 }, rest, how, |e, link, piece, now| {
                let mut answer = [0u8; COOKIE_FRAME_LEN];
                let _ = e.handle_stranger(&[127, 0, 0, 1, 0, 1], piece, now, &mut answer);
                let _ = e.handle_datagram(link, piece, now);
            })
        }
    }
});
