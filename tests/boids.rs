//! The boids showcase (`examples/boids`): the neighbour grid each tick builds is the host's
//! (cells, counts, starts, and each cell's boids in ascending index order), and the state's
//! hash after every tick of 1,000 is the same on cpu, sim, wgpu and CUDA. A backend this machine
//! lacks is reported ignored.

mod common;

#[path = "../examples/boids/world.rs"]
mod world;

use common::Skip;
use gpuworld::testing::{BackendTest, TestBackend};
use gpuworld::{Backend, ComputeClient};
use std::sync::Mutex;
use world::{Flock, host_grid};

test_main![
    cases::the_grid_is_the_hosts_on_cpu,
    cases::the_grid_is_the_hosts_on_sim,
    cases::the_grid_is_the_hosts_on_wgpu,
    cases::the_grid_is_the_hosts_on_cuda,
    cases::every_tick_hashes_alike_on_cpu,
    cases::every_tick_hashes_alike_on_sim,
    cases::every_tick_hashes_alike_on_wgpu,
    cases::every_tick_hashes_alike_on_cuda,
    the_start_and_the_host_grid_are_sane,
];

/// Boids of the determinism test: 16×16 cells of 4 on average, small enough for 1,000 ticks on
/// three backends in well under a minute in a debug build (the grid test's 3,000 boids take the
/// prefix sum's two-level path).
const BOIDS: u32 = 1024;
/// Ticks of the determinism test.
const TICKS: usize = 1000;
/// The hash of the state after [`TICKS`] ticks of [`BOIDS`] boids, as every backend gives it
/// (`cargo run --example boids -- --particles 1024 --ticks 1000`): a backend run alone is checked
/// too. A change to the kernels or the start changes it.
const FINAL: u64 = 0x2a39_2514_8296_5a80;

/// The backend that first finished the determinism test, and its hashes of the state after each
/// tick (index 0: the start); every other backend must give the same.
type Hashes = (&'static str, Vec<u64>);
static REFERENCE: Mutex<Option<Hashes>> = Mutex::new(None);

fn hashes<B: Backend>(client: &ComputeClient<B>, boids: u32, ticks: usize) -> Vec<u64> {
    let mut flock = Flock::new(client, boids);
    let mut hashes = vec![flock.hash(client).expect("the read succeeds")];
    for _ in 0..ticks {
        flock.tick(client).expect("the launches are valid");
        hashes.push(flock.hash(client).expect("the read succeeds"));
    }
    hashes
}

fn the_start_and_the_host_grid_are_sane() {
    let side = world::side_for(BOIDS);
    assert_eq!(side, 16);
    let boids = world::initial(BOIDS, side);
    let grid = host_grid(&boids, side);
    assert_eq!(grid.counts.iter().sum::<u32>(), BOIDS);
    assert!(
        grid.counts.iter().filter(|&&n| n > 1).count() > 100,
        "cells share boids"
    );
    let mut seen = grid.sorted.clone();
    seen.sort_unstable();
    assert_eq!(seen, (0..BOIDS).collect::<Vec<_>>(), "a permutation");
}

mod cases {
    use super::*;

    macro_rules! on_each_backend {
        ($test:expr, $cpu:ident, $sim:ident, $wgpu:ident, $cuda:ident) => {
            pub fn $cpu() -> Result<(), Skip> {
                Ok(TestBackend::Cpu.run(&$test)?)
            }
            pub fn $sim() -> Result<(), Skip> {
                Ok(TestBackend::Sim.run(&$test)?)
            }
            pub fn $wgpu() -> Result<(), Skip> {
                Ok(TestBackend::Wgpu.run(&$test)?)
            }
            pub fn $cuda() -> Result<(), Skip> {
                Ok(TestBackend::Cuda.run(&$test)?)
            }
        };
    }

    /// For a few ticks: the grid a tick builds from a state is the host's grid of that state,
    /// and the boids moved.
    pub struct GridIsTheHosts;
    impl BackendTest for GridIsTheHosts {
        fn run<B: Backend>(&self, client: &ComputeClient<B>) {
            // 3,000 boids: 28×28 cells (784), so the last cube of the scan is partly empty.
            let mut flock = Flock::new(client, 3000);
            for tick in 0..5 {
                let before = flock.boids(client).unwrap();
                let expected = host_grid(&before, flock.side);
                flock.tick(client).unwrap();
                let grid = flock.grid(client).unwrap();
                assert_eq!(grid.cells, expected.cells, "{} tick {tick}: cells", B::NAME);
                assert_eq!(
                    grid.counts,
                    expected.counts,
                    "{} tick {tick}: counts",
                    B::NAME
                );
                assert_eq!(
                    grid.starts,
                    expected.starts,
                    "{} tick {tick}: starts",
                    B::NAME
                );
                assert_eq!(
                    grid.sorted,
                    expected.sorted,
                    "{} tick {tick}: order",
                    B::NAME
                );
                let after = flock.boids(client).unwrap();
                assert_ne!(before, after, "{} tick {tick}: the boids move", B::NAME);
                let side = flock.side as f32;
                assert!(
                    after
                        .iter()
                        .all(|b| (0.0..side).contains(&b.x) && (0.0..side).contains(&b.y)),
                    "{} tick {tick}: every boid in the world",
                    B::NAME
                );
            }
        }
    }
    on_each_backend!(
        GridIsTheHosts,
        the_grid_is_the_hosts_on_cpu,
        the_grid_is_the_hosts_on_sim,
        the_grid_is_the_hosts_on_wgpu,
        the_grid_is_the_hosts_on_cuda
    );

    /// The state's hash after each of 1,000 ticks, the same as every other backend's.
    pub struct EveryTickHashesAlike;
    impl BackendTest for EveryTickHashesAlike {
        fn run<B: Backend>(&self, client: &ComputeClient<B>) {
            let ours = hashes(client, BOIDS, TICKS);
            assert_eq!(ours.len(), TICKS + 1);
            assert!(
                ours.windows(2).all(|w| w[0] != w[1]),
                "{}: the state changes every tick",
                B::NAME
            );
            assert_eq!(
                ours[TICKS],
                FINAL,
                "{}: the hash after {TICKS} ticks: {:016x}",
                B::NAME,
                ours[TICKS]
            );
            let mut reference = REFERENCE.lock().unwrap();
            match &*reference {
                None => *reference = Some((B::NAME, ours)),
                Some((first, theirs)) => {
                    if let Some(tick) = (0..=TICKS).find(|&t| ours[t] != theirs[t]) {
                        panic!(
                            "{} differs from {first} from tick {tick} on: {:016x} against {:016x}",
                            B::NAME,
                            ours[tick],
                            theirs[tick]
                        );
                    }
                }
            }
        }
    }
    on_each_backend!(
        EveryTickHashesAlike,
        every_tick_hashes_alike_on_cpu,
        every_tick_hashes_alike_on_sim,
        every_tick_hashes_alike_on_wgpu,
        every_tick_hashes_alike_on_cuda
    );
}
