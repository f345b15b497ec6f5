//! One process of a job: the launcher says who it is and how many there
//! are, the `btl` parameter chooses the BTLs, and every process says hello
//! to every other over the best BTL that reaches it.
//!
//! ```text
//! cargo build --release -p btl-std --features pmix --example job
//! mpirun -np 4 target/release/examples/job
//! srun --mpi=pmix -n 4 target/release/examples/job
//! ```
//!
//! Each process prints how long it took to join the job, open its BTLs
//! and reach every process, and which BTL carries each peer. Started
//! without a launcher it is a job of one, which reaches itself over
//! `self`.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use btl_std::bootstrap::Job;
use btl_std::{Btl, Event, Tag};

const HELLO: Tag = Tag(0x10);
const WAIT: Duration = Duration::from_secs(60);

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let start = Instant::now();
    let job = Job::join()?;
    let mut bml = job.builder().open()?;
    let mut carriers: BTreeMap<&str, u32> = BTreeMap::new();
    let mut peers = Vec::with_capacity(job.size() as usize);
    for rank in 0..job.size() {
        let ep = bml.reach(job.proc(rank), WAIT)?;
        *carriers.entry(bml.carrier(ep).unwrap_or("?")).or_default() += 1;
        peers.push(ep);
    }
    let reached = start.elapsed();
    for &ep in &peers {
        bml.send_copy(ep, HELLO, &job.me().rank.to_le_bytes())?;
    }

    // A hello from every process, this one's own included.
    let mut heard = vec![false; job.size() as usize];
    while heard.contains(&false) {
        let from = bml.wait_for(WAIT, |ev| match ev {
            Event::Received(m) if m.tag == HELLO => {
                Some(u32::from_le_bytes(m.data.try_into().unwrap_or_default()))
            }
            _ => None,
        });
        match from {
            Ok(rank) => heard[rank as usize] = true,
            Err(e) => {
                let missing: Vec<(usize, &str)> = (0..heard.len())
                    .filter(|&r| !heard[r])
                    .map(|r| (r, bml.carrier(peers[r]).unwrap_or("?")))
                    .collect();
                return Err(
                    format!("rank {}: {e}: no hello from {missing:?}", job.me().rank).into(),
                );
            }
        }
    }
    println!(
        "rank {} of {}: reached every process in {:.1} ms over {carriers:?}; heard from all in {:.1} ms",
        job.me().rank,
        job.size(),
        reached.as_secs_f64() * 1e3,
        start.elapsed().as_secs_f64() * 1e3,
    );
    // Leaving: what is still unread by a slower process gets there first.
    bml.flush(WAIT)?;
    Ok(())
}
