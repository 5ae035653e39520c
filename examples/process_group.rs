//! One rank of a process group on the cpu backend, for `gpuworld launch` (issue 29's cpu-rank
//! benchmark): times the rendezvous, then `ROUNDS` all_reduces of `ELEMENTS` f32 checked against
//! the host reference, and prints rank 0's times.
//!
//! ```sh
//! cargo build --release --features cli --bin gpuworld --example process_group
//! target/release/gpuworld launch --nproc-per-node 8 -- target/release/examples/process_group
//! ```
//! `GPUWORLD_PG_ELEMENTS` and `GPUWORLD_PG_ROUNDS` change the size and the count.

use gpuworld::Driver;
use gpuworld::collective::{ElemType, ReduceOp};
use gpuworld::distributed::ProcessGroup;
use std::process::ExitCode;
use std::time::Instant;

/// The number in `name`, `default` when it is not set; a value that is not a number stops the
/// rank with a message naming it.
fn setting(name: &str, default: usize) -> usize {
    match std::env::var(name) {
        Err(_) => default,
        Ok(value) => value.trim().parse().unwrap_or_else(|_| {
            eprintln!("process_group: {name}={value} is not a number");
            std::process::exit(2)
        }),
    }
}

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("process_group: {error}");
            ExitCode::FAILURE
        }
    }
}

fn run() -> Result<(), gpuworld::Error> {
    let elements = setting("GPUWORLD_PG_ELEMENTS", 1024);
    let rounds = setting("GPUWORLD_PG_ROUNDS", 100);
    let start = Instant::now();
    let mut group = ProcessGroup::from_env()?;
    let joined = start.elapsed();
    let (rank, world) = (group.rank(), group.world_size());
    let client = gpuworld::cpu_client(Driver::DeviceThread)?;
    // Rank r holds r + 1 everywhere: the sum is world (world + 1) / 2, exact in f32.
    let expected = (world * (world + 1) / 2) as f32;
    let mut times = Vec::with_capacity(rounds);
    for _ in 0..rounds {
        let buffer = client.create_from_pod(&vec![rank as f32 + 1.0; elements]);
        let start = Instant::now();
        group.all_reduce(&client, &buffer, ElemType::F32, ReduceOp::Sum)?;
        times.push(start.elapsed());
        let summed: Vec<f32> = client.read_one_as(&buffer)?;
        if summed.iter().any(|&value| value != expected) {
            eprintln!(
                "rank {rank}: all_reduce gave {:?}, expected {expected}",
                &summed[..4]
            );
            std::process::exit(3);
        }
    }
    if rank == 0 {
        times.sort_unstable();
        let micros = |q: f64| times[((times.len() - 1) as f64 * q) as usize].as_secs_f64() * 1e6;
        println!(
            "{world} ranks: rendezvous {:.1} ms; all_reduce of {elements} f32 (read, exchange, write, \
             checked), {rounds} rounds: p50 {:.0} µs, p90 {:.0} µs, max {:.0} µs",
            joined.as_secs_f64() * 1e3,
            micros(0.5),
            micros(0.9),
            micros(1.0),
        );
    }
    Ok(())
}
