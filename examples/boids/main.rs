//! Boids with a neighbour grid, written with `#[gpuworld::kernel]` alone (`world.rs`): each tick
//! builds a uniform grid — cells by position, a histogram with atomics, a prefix sum in shared
//! memory, a scatter made deterministic by each boid's rank in its cell — and steers every boid
//! from the boids in the 3×3 cells around it (separation, alignment, cohesion) on a torus. The
//! state's hash is the same bits on every backend.
//!
//! ```sh
//! cargo run --release --example boids                                  # cpu, 1M boids
//! cargo run --release --example boids -- --backend sim --particles 4096
//! cargo run --release --example boids --features wgpu -- --backend wgpu --hash-every 100
//! cargo run --release --example boids --features cuda -- --backend cuda --ticks 10000 --hash-every 1000
//! ```
//! Options: `--particles N` (1,000,000), `--ticks N` (100), `--backend cpu|sim|wgpu|cuda` (cpu),
//! `--hash-every K` (print the FNV-1a hash of the state after every K-th tick; 0, the default,
//! prints only the last).

mod world;

use gpuworld::{Backend, ComputeClient, Driver};
use std::process::ExitCode;
use std::time::Instant;
use world::Flock;

/// The command line.
struct Options {
    particles: u32,
    ticks: u64,
    backend: String,
    hash_every: u64,
}

fn options() -> Result<Options, String> {
    let mut options = Options {
        particles: 1_000_000,
        ticks: 100,
        backend: "cpu".to_string(),
        hash_every: 0,
    };
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let mut value = || args.next().ok_or(format!("{arg} needs a value"));
        match arg.as_str() {
            "--particles" => {
                options.particles = value()?.parse().map_err(|e| format!("--particles: {e}"))?
            }
            "--ticks" => options.ticks = value()?.parse().map_err(|e| format!("--ticks: {e}"))?,
            "--backend" => options.backend = value()?,
            "--hash-every" => {
                options.hash_every = value()?.parse().map_err(|e| format!("--hash-every: {e}"))?
            }
            "--help" | "-h" => {
                return Err("usage: boids [--particles N] [--ticks N] \
                            [--backend cpu|sim|wgpu|cuda] [--hash-every K]"
                    .to_string());
            }
            other => return Err(format!("unknown argument `{other}`")),
        }
    }
    // The grid's cubes: one unit per boid, at most 65,535 cubes of 256 on every backend.
    let most = 65_535 * 256;
    if options.particles == 0 || options.particles > most {
        return Err(format!("--particles: between 1 and {most}"));
    }
    Ok(options)
}

fn run<B: Backend>(client: ComputeClient<B>, options: &Options) -> Result<(), String> {
    let error = |e: gpuworld::Error| format!("{}: {e}", B::NAME);
    let mut flock = Flock::new(&client, options.particles);
    println!(
        "{} boids in {}×{} cells on {}",
        flock.count,
        flock.side,
        flock.side,
        B::NAME
    );
    println!("tick 0: hash {:016x}", flock.hash(&client).map_err(error)?);
    // The first tick compiles the kernels: timed apart.
    let first = Instant::now();
    let mut done = 0;
    let mut stepping = std::time::Duration::ZERO;
    let mut last_hash = None;
    while done < options.ticks {
        let started = Instant::now();
        flock.tick(&client).map_err(error)?;
        client.sync().map_err(error)?;
        if done > 0 {
            stepping += started.elapsed();
        }
        done += 1;
        if options.hash_every > 0 && done % options.hash_every == 0 {
            let hash = flock.hash(&client).map_err(error)?;
            println!("tick {done}: hash {hash:016x}");
            last_hash = Some(done);
        }
        if done == 1 {
            println!(
                "first tick (kernel compiles): {:.3} ms",
                first.elapsed().as_secs_f64() * 1e3
            );
        }
    }
    if last_hash != Some(done) {
        println!(
            "tick {done}: hash {:016x}",
            flock.hash(&client).map_err(error)?
        );
    }
    if done > 0 {
        // How crowded the flock got: the neighbour search costs about 9 × this per boid, the
        // rank pass the square of a cell's count.
        let grid = flock.grid(&client).map_err(error)?;
        let fullest = grid.counts.iter().max().copied().unwrap_or(0);
        let occupied = grid.counts.iter().filter(|&&n| n > 0).count().max(1);
        println!(
            "grid of the last tick: at most {fullest} boids in a cell, {:.2} per occupied cell",
            flock.count as f64 / occupied as f64
        );
    }
    if done > 1 {
        println!(
            "{:.3} ms per tick over ticks 2..={done} ({} boids, {})",
            stepping.as_secs_f64() * 1e3 / (done - 1) as f64,
            flock.count,
            B::NAME
        );
    }
    Ok(())
}

fn main() -> ExitCode {
    let options = match options() {
        Ok(options) => options,
        Err(message) => {
            eprintln!("error: {message}");
            return ExitCode::from(2);
        }
    };
    let outcome = match options.backend.as_str() {
        "cpu" => gpuworld::cpu_client(Driver::Manual)
            .map_err(|e| format!("cpu: {e}"))
            .and_then(|client| run(client, &options)),
        "sim" => gpuworld::sim_client(gpuworld::SimConfig::default())
            .map_err(|e| format!("sim: {e}"))
            .and_then(|client| run(client, &options)),
        #[cfg(feature = "wgpu")]
        "wgpu" => gpuworld::wgpu_client_with(gpuworld::WgpuConfig::default(), Driver::Manual)
            .map_err(|e| format!("no wgpu adapter: {e}"))
            .and_then(|client| run(client, &options)),
        #[cfg(feature = "cuda")]
        "cuda" => gpuworld::cuda_client_with(gpuworld::CudaConfig::default(), Driver::Manual)
            .map_err(|e| format!("no CUDA device: {e}"))
            .and_then(|client| run(client, &options)),
        other => Err(format!(
            "backend `{other}` is not compiled in (cpu, sim; wgpu and cuda with their features)"
        )),
    };
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("error: {message}");
            ExitCode::FAILURE
        }
    }
}
