//! Feeds arbitrary bytes to an engine as a peer would: split into stream
//! reads of arbitrary sizes on an accepted stream link, and as datagrams on
//! an accepted datagram link. Nothing may panic, and whatever the engine
//! does with the bytes, its fragments go back to its pools once it has
//! given the peer up.
#![no_main]

use btl_core::btl::Btl;
use btl_core::endpoint::ProcName;
use btl_core::engine::Engine;
use btl_core::engine::config::{EngineConfig, Framing};
use btl_core::pool::{FragmentClass, FragmentPoolConfig, FragmentPools, FragmentPoolsConfig};
use libfuzzer_sys::fuzz_target;

const ME: ProcName = ProcName::new(1, 0);

fn engine(region: &mut [u8], framing: Framing) -> Engine<'_, 'static, 2, 2, 2> {
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
        framing,
        max_body: 4096,
        ..EngineConfig::new(ME)
    };
    Engine::new(config, pools)
}

fuzz_target!(|data: &[u8]| {
    let Some((&split, rest)) = data.split_first() else {
        return;
    };
    for framing in [Framing::Stream, Framing::Datagram { mtu: 1500 }] {
        let mut region = vec![0u8; 64 * 1024];
        let mut e = engine(&mut region, framing);
        let Ok(link) = e.handle_accepted([7; 16], 0) else {
            return;
        };
        let chunk = usize::from(split % 61) + 1;
        for (i, piece) in rest.chunks(chunk).enumerate() {
            let now = i as u64 * 1_000_000;
            let _ = match framing {
                Framing::Stream => e.handle_stream(link, piece, now).map(|_| ()),
                Framing::Datagram { .. } => e.handle_datagram(link, piece, now),
            };
            while let Some(n) = e
                .poll_transmit(link)
                .map(|t| t.segments.iter().map(|s| s.len()).sum())
            {
                e.handle_written(link, n);
            }
            while e.poll_event().is_some() {}
        }
        e.finalize();
        while e.poll_event().is_some() {}
        for class in FragmentClass::ALL {
            assert_eq!(
                e.pools().stats(class).in_use,
                0,
                "{class:?} fragments leaked"
            );
        }
    }
});
