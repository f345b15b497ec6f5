//! One side of the interop conversation (`btl-exchange`) on the engine over
//! smoltcp, on a Linux TAP device: btl as a board runs it, with its own
//! TCP/IP stack, talking to the kernel's through the TAP.
//!
//! ```text
//! btl-smoltcp-tap tcp|udp TAP ADDRESS/PREFIX ME PEER PEER-ADDRESS PEER-PORT FIRST BULK
//! ```
//!
//! It listens on port 7000 of `ADDRESS` (on `TAP`, which must exist and
//! be up), reaches `PEER` at `PEER-ADDRESS:PEER-PORT`, says `ready` once
//! its interface is up, and runs the conversation twice: first with role
//! `FIRST` (`lead` or `follow`), then the other, with `BULK` bytes put and
//! got. It prints a line per conversation and exits with 1 on the first
//! failure.

use std::error::Error;
use std::io::Write;
use std::os::fd::AsRawFd;
use std::time::Duration;

use btl_core::btl::{Access, Btl};
use btl_core::endpoint::ProcName;
use btl_core::engine::{Datagram, Framing, Stream};
use btl_core::smoltcp::{PeerAddr, smol_instant};
use btl_core::time::Instant;
use btl_exchange::{Exchange, JOB_KEY, Role};
use btl_tests::harness::add_peer;
use btl_tests::harness::smoltcp::{PORT, SeededNonces, SmolDriver, Tcp, Udp, engine_of};
use smoltcp::iface::{Config, Interface, SocketSet};
use smoltcp::phy::{Medium, TunTapInterface, wait};
use smoltcp::wire::{EthernetAddress, HardwareAddress, IpAddress, IpCidr, IpEndpoint};

/// How long a conversation may take.
const TIMEOUT: Duration = Duration::from_secs(60);

type Result<T = ()> = std::result::Result<T, Box<dyn Error>>;

fn main() {
    // BTL_LOG=debug shows what the engine and transports do.
    let _ = btl_std::logging::init("warn");
    if let Err(e) = run() {
        eprintln!("btl-smoltcp-tap: {e}");
        std::process::exit(1);
    }
}

/// What the command line says.
struct Args {
    tap: String,
    address: IpCidr,
    me: ProcName,
    peer: PeerAddr,
    first: Role,
    bulk: u64,
}

fn run() -> Result {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [
        component,
        tap,
        address,
        me,
        peer,
        peer_address,
        peer_port,
        first,
        bulk,
    ] = &args[..]
    else {
        return Err("usage: btl-smoltcp-tap tcp|udp TAP ADDRESS/PREFIX ME PEER PEER-ADDRESS PEER-PORT lead|follow BULK".into());
    };
    let peer_address: IpAddress = peer_address
        .parse()
        .map_err(|_| format!("not an address: {peer_address}"))?;
    let args = Args {
        tap: tap.clone(),
        address: address
            .parse()
            .map_err(|_| format!("not an address/prefix: {address}"))?,
        me: proc_name(me)?,
        peer: PeerAddr {
            proc: proc_name(peer)?,
            endpoint: IpEndpoint::new(peer_address, peer_port.parse()?),
        },
        first: match first.as_str() {
            "lead" => Role::Lead,
            "follow" => Role::Follow,
            other => return Err(format!("a role is lead or follow, not {other}").into()),
        },
        bulk: bulk.parse()?,
    };
    match component.as_str() {
        "tcp" => converse::<Stream, Tcp>(&args),
        "udp" => converse::<Datagram, Udp>(&args),
        other => Err(format!("no component {other}").into()),
    }
}

fn proc_name(s: &str) -> Result<ProcName> {
    let (job, rank) = s.split_once('.').ok_or("a process name is job.rank")?;
    Ok(ProcName::new(job.parse()?, rank.parse()?))
}

/// Nonces and smoltcp's randomness from the operating system.
fn random_u64() -> Result<u64> {
    let mut bytes = [0; 8];
    std::io::Read::read_exact(&mut std::fs::File::open("/dev/urandom")?, &mut bytes)?;
    Ok(u64::from_le_bytes(bytes))
}

fn converse<F: Framing, D: SmolDriver<F>>(args: &Args) -> Result {
    let mut device = TunTapInterface::new(&args.tap, Medium::Ethernet)?;
    let clock = std::time::Instant::now();
    let now = || Instant::from_nanos(u64::try_from(clock.elapsed().as_nanos()).unwrap_or(u64::MAX));
    let mut config = Config::new(HardwareAddress::Ethernet(EthernetAddress([
        0x02, 0, 0, 0, 0x77, 0x02,
    ])));
    config.random_seed = random_u64()?;
    let mut iface = Interface::new(config, &mut device, smol_instant(now()));
    iface.update_ip_addrs(|addrs| {
        let _ = addrs.push(args.address);
    });
    let mut sockets = SocketSet::new(vec![]);
    let mut driver = D::open(
        &mut sockets,
        SeededNonces::new(random_u64()?),
        PORT,
        args.peer,
    );
    let mut engine = engine_of::<F, D>(args.me, JOB_KEY);
    let endpoint = add_peer(&mut *engine, args.peer.proc);
    let region = engine
        .register_mem(
            vec![0; usize::try_from(2 * args.bulk)?],
            Access::REMOTE_READ | Access::REMOTE_WRITE,
        )
        .map_err(|e| e.error)?;
    println!("ready");
    std::io::stdout().flush()?;

    let second = match args.first {
        Role::Lead => Role::Follow,
        Role::Follow => Role::Lead,
    };
    let mut step = |engine: &mut _, driver: &mut D| {
        let at = now();
        let polled = driver.poll(engine, &mut iface, &mut device, &mut sockets, at);
        if !polled.more {
            let next = driver.poll_at(engine, &mut iface, &sockets, at);
            let delay = next.map_or(Duration::from_millis(1), |next| {
                Duration::from_nanos(next.since(now()).as_nanos()).min(Duration::from_millis(1))
            });
            let _ = wait(
                device.as_raw_fd(),
                Some(smoltcp::time::Duration::from_micros(
                    delay.as_micros() as u64
                )),
            );
        }
    };
    for role in [args.first, second] {
        let start = std::time::Instant::now();
        let mut exchange = Exchange::new(&mut *engine, role, endpoint, region, args.bulk)
            .map_err(|e| format!("{e:?}"))?;
        while !exchange.is_done() {
            if start.elapsed() > TIMEOUT {
                return Err(format!("{role:?}: no end within {TIMEOUT:?}").into());
            }
            step(&mut *engine, &mut driver);
            exchange
                .poll(&mut *engine)
                .map_err(|e| format!("{role:?}: {e:?}"))?;
        }
        println!(
            "exchange ok: {role:?}, {} bytes put and got, in {:?}",
            args.bulk,
            start.elapsed()
        );
    }
    // The peer has every answer before this process goes.
    let start = std::time::Instant::now();
    while engine.outstanding() > 0 {
        if start.elapsed() > TIMEOUT {
            return Err("unacknowledged at the end".into());
        }
        step(&mut *engine, &mut driver);
    }
    Ok(())
}
