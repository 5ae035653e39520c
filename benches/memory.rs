//! Memory pool benchmarks on a virtual device that only counts bytes (so gigabytes of
//! reservations cost no host memory): reserve + release of a cached slice, cubecl's dynamic
//! pattern (204,800 reservations of 1 MiB, 4,000 live), a training-step trace replayed to report
//! fragmentation (peak bytes_reserved / peak bytes_in_use), and the per-tick cost of the periodic
//! cleanup.
//!
//! The trace is `benches/data/training_trace.txt`, made by `generate_training_trace` below;
//! `GPUWORLD_REGENERATE_TRACE=1 cargo bench --bench memory` rewrites it.

#[path = "common/training_trace.rs"]
mod training_trace;
// The replay example uses the unbounded device; these benches only the bounded one.
#[allow(dead_code)]
#[path = "common/virtual_device.rs"]
mod virtual_device;

use criterion::{Criterion, criterion_group};
use gpuworld_systems::backend::*;
use gpuworld_systems::memory::{AllocationMode, MemoryConfig, MemoryPool, SliceKey};
use std::collections::HashMap;
use std::hint::black_box;
use std::time::Duration;
use training_trace::{Event, TRACE_PATH, committed_trace};
use virtual_device::VirtualDevice;

const MIB: u64 = 1 << 20;

/// A 16 GiB virtual device and the default ladder for it.
fn default_pool() -> (VirtualDevice, MemoryPool) {
    let device = VirtualDevice::new(16 << 30, 256);
    let pool = MemoryPool::new(&device.properties(), &MemoryConfig::default());
    (device, pool)
}

fn reserve(pool: &mut MemoryPool, device: &mut VirtualDevice, size: u64) -> SliceKey {
    match pool.reserve(device, size, AllocationMode::Auto) {
        Ok(reservation) => reservation.slice,
        Err(error) => panic!("the virtual device refused {size} bytes: {error}"),
    }
}

fn release(pool: &mut MemoryPool, key: SliceKey) {
    if let Err(error) = pool.release(key) {
        panic!("releasing a live slice failed: {error}");
    }
}

fn reserve_release_cached_slice(c: &mut Criterion) {
    let (mut device, mut pool) = default_pool();
    // Some neighbours, so the page is not trivially empty.
    let _neighbours: Vec<SliceKey> = (0..8)
        .map(|_| reserve(&mut pool, &mut device, 4096))
        .collect();
    let warm = reserve(&mut pool, &mut device, 1024);
    release(&mut pool, warm);
    c.bench_function("memory/reserve_release_cached_slice_1KiB", |b| {
        b.iter(|| {
            let key = reserve(&mut pool, &mut device, black_box(1024));
            release(&mut pool, key);
        })
    });
}

/// 204,800 reservations of 1 MiB; once 4,000 are live, each new one releases a pseudo-random
/// live one first, so freed slices land all over the pages.
fn dynamic_pattern(pool: &mut MemoryPool, device: &mut VirtualDevice) {
    const TOTAL: usize = 204_800;
    const LIVE: usize = 4_000;
    let mut live: Vec<SliceKey> = Vec::with_capacity(LIVE);
    let mut rng = XorShift(0x9e37_79b9_7f4a_7c15);
    for _ in 0..TOTAL {
        if live.len() == LIVE {
            let victim = (rng.next() % LIVE as u64) as usize;
            release(pool, live.swap_remove(victim));
        }
        live.push(reserve(pool, device, MIB));
    }
    for key in live {
        release(pool, key);
    }
}

fn dynamic_1mib(c: &mut Criterion) {
    let mut group = c.benchmark_group("memory");
    group
        .sample_size(10)
        .measurement_time(Duration::from_secs(20));
    group.bench_function("dynamic_204800x1MiB_4000_live", |b| {
        b.iter_batched(
            default_pool,
            |(mut device, mut pool)| {
                dynamic_pattern(&mut pool, &mut device);
                pool
            },
            criterion::BatchSize::PerIteration,
        )
    });
    group.finish();
}

/// A transformer-like training loop, scaled to run in seconds: persistent weights and optimizer
/// state, then per step a forward pass keeping activations, a backward pass freeing them in
/// reverse and allocating gradients, and an optimizer update. The sequence length changes every
/// step (dynamic shapes), and small temporaries (reductions, masks, norms) come and go in between.
fn generate_training_trace() -> Vec<Event> {
    const LAYERS: u64 = 8;
    const HIDDEN: u64 = 512;
    const HEADS: u64 = 8;
    const BATCH: u64 = 8;
    const STEPS: usize = 6;
    const SEQ_LENS: [u64; STEPS] = [256, 192, 320, 256, 128, 288];
    let f32s = |n: u64| n * 4;
    let mut rng = XorShift(0x2545_f491_4f6c_dd1d);
    let mut events = Vec::new();
    let mut next_id = 0u32;
    let mut alloc = |events: &mut Vec<Event>, bytes: u64, persistent: bool| {
        next_id += 1;
        events.push(Event::Alloc {
            id: next_id,
            bytes,
            persistent,
        });
        next_id
    };
    let free = |events: &mut Vec<Event>, id: u32| events.push(Event::Free { id });
    let temporaries =
        |events: &mut Vec<Event>,
         rng: &mut XorShift,
         alloc: &mut dyn FnMut(&mut Vec<Event>, u64, bool) -> u32| {
            let ids: Vec<u32> = (0..1 + rng.next() % 3)
                .map(|_| alloc(events, 256 + rng.next() % (256 << 10), false))
                .collect();
            for id in ids {
                events.push(Event::Free { id });
            }
        };

    // Weights: q, k, v, o (H x H), MLP up and down (H x 4H), two norms (H) per layer; Adam keeps
    // two moments per weight.
    let weight_sizes: Vec<u64> = (0..LAYERS)
        .flat_map(|_| {
            [HIDDEN * HIDDEN; 4]
                .into_iter()
                .chain([HIDDEN * 4 * HIDDEN; 2])
                .chain([HIDDEN; 2])
        })
        .map(f32s)
        .collect();
    for &bytes in &weight_sizes {
        for _ in 0..3 {
            alloc(&mut events, bytes, true);
        }
    }

    for &seq in &SEQ_LENS {
        let tokens = BATCH * seq;
        let act = f32s(tokens * HIDDEN);
        let wide = f32s(tokens * 4 * HIDDEN);
        let scores = f32s(BATCH * HEADS * seq * seq);
        let mut saved: Vec<Vec<u32>> = Vec::new();
        // Forward: each layer keeps what backward needs.
        for _ in 0..LAYERS {
            let mut keep = Vec::new();
            keep.push(alloc(&mut events, act, false)); // norm output
            keep.push(alloc(&mut events, 3 * act, false)); // q, k, v
            let s = alloc(&mut events, scores, false);
            temporaries(&mut events, &mut rng, &mut alloc);
            keep.push(alloc(&mut events, scores, false)); // softmax probabilities
            free(&mut events, s);
            keep.push(alloc(&mut events, act, false)); // attention output
            keep.push(alloc(&mut events, wide, false)); // MLP hidden
            keep.push(alloc(&mut events, wide, false)); // activation output
            temporaries(&mut events, &mut rng, &mut alloc);
            keep.push(alloc(&mut events, act, false)); // residual
            saved.push(keep);
        }
        let loss = alloc(&mut events, f32s(tokens), false);
        // Backward: gradients per weight kept for the optimizer; activations freed in reverse.
        let mut weight_grads = Vec::new();
        let mut upstream = alloc(&mut events, act, false);
        for keep in saved.into_iter().rev() {
            let g_wide = alloc(&mut events, wide, false);
            for &bytes in &weight_sizes[..8] {
                weight_grads.push(alloc(&mut events, bytes, false));
            }
            let g_scores = alloc(&mut events, scores, false);
            temporaries(&mut events, &mut rng, &mut alloc);
            free(&mut events, g_scores);
            free(&mut events, g_wide);
            let next = alloc(&mut events, act, false);
            free(&mut events, upstream);
            upstream = next;
            for id in keep.into_iter().rev() {
                free(&mut events, id);
            }
        }
        free(&mut events, upstream);
        free(&mut events, loss);
        // Optimizer: a temporary per gradient, then the gradients go.
        for id in weight_grads {
            temporaries(&mut events, &mut rng, &mut alloc);
            free(&mut events, id);
        }
    }
    events
}

fn trace_text(events: &[Event]) -> String {
    let mut text = String::from(
        "# gpuworld training-step allocation trace: `a <id> <bytes>` allocates, `p <id> <bytes>`\n\
         # allocates persistent, `f <id>` frees. Made by generate_training_trace in benches/memory.rs.\n",
    );
    for event in events {
        let line = match event {
            Event::Alloc {
                id,
                bytes,
                persistent: false,
            } => format!("a {id} {bytes}\n"),
            Event::Alloc {
                id,
                bytes,
                persistent: true,
            } => format!("p {id} {bytes}\n"),
            Event::Free { id } => format!("f {id}\n"),
        };
        text.push_str(&line);
    }
    text
}

/// The committed trace; regenerated on request, and checked against the generator.
fn training_trace() -> Vec<Event> {
    let generated = generate_training_trace();
    if std::env::var_os("GPUWORLD_REGENERATE_TRACE").is_some()
        && let Err(error) = std::fs::write(TRACE_PATH, trace_text(&generated))
    {
        panic!("writing {TRACE_PATH}: {error}");
    }
    let committed = committed_trace();
    assert_eq!(
        committed, generated,
        "the committed trace is stale: regenerate it"
    );
    committed
}

/// Replays `trace`; returns (peak bytes_reserved, peak bytes_in_use).
fn replay(trace: &[Event], pool: &mut MemoryPool, device: &mut VirtualDevice) -> (u64, u64) {
    let mut live: HashMap<u32, SliceKey> = HashMap::new();
    let mut peak_reserved = 0;
    for event in trace {
        match *event {
            Event::Alloc {
                id,
                bytes,
                persistent,
            } => {
                let mode = if persistent {
                    AllocationMode::Persistent
                } else {
                    AllocationMode::Auto
                };
                let key = match pool.reserve(device, bytes, mode) {
                    Ok(reservation) => reservation.slice,
                    Err(error) => panic!("trace allocation failed: {error}"),
                };
                live.insert(id, key);
                peak_reserved = peak_reserved.max(pool.usage().bytes_reserved);
            }
            Event::Free { id } => {
                if let Some(key) = live.remove(&id) {
                    release(pool, key);
                }
            }
        }
    }
    (peak_reserved, pool.peak_in_use())
}

fn fragmentation(c: &mut Criterion) {
    let trace = training_trace();
    let (mut device, mut pool) = default_pool();
    let (reserved, in_use) = replay(&trace, &mut pool, &mut device);
    let allocations = trace
        .iter()
        .filter(|e| matches!(e, Event::Alloc { .. }))
        .count();
    println!(
        "memory/fragmentation: {allocations} allocations, peak bytes_reserved {reserved} / peak bytes_in_use {in_use} = {:.3}",
        reserved as f64 / in_use as f64
    );
    for report in pool.reports() {
        println!("  {report}");
    }
    let mut group = c.benchmark_group("memory");
    group.sample_size(20);
    group.bench_function("training_trace_replay", |b| {
        b.iter_batched(
            default_pool,
            |(mut device, mut pool)| {
                replay(&trace, &mut pool, &mut device);
                pool
            },
            criterion::BatchSize::PerIteration,
        )
    });
    group.finish();
}

/// A tick's periodic cleanup when nothing became free: 10,000 live slices over many pages.
fn periodic_cleanup_idle(c: &mut Criterion) {
    let (mut device, mut pool) = default_pool();
    let _live: Vec<SliceKey> = (0..10_000)
        .map(|i| reserve(&mut pool, &mut device, 1024 + (i % 64) * 4096))
        .collect();
    let mut tick = 0;
    c.bench_function("memory/periodic_cleanup_tick_10k_live", |b| {
        b.iter(|| {
            tick += 1;
            pool.periodic_cleanup(&mut device, black_box(tick));
        })
    });
}

/// Deterministic pseudo-random numbers (xorshift64).
struct XorShift(u64);

impl XorShift {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

// criterion_group!'s function is public and undocumented: it stays in a private module.
mod group {
    use super::*;
    criterion_group!(
        benches,
        reserve_release_cached_slice,
        dynamic_1mib,
        fragmentation,
        periodic_cleanup_idle
    );
}

fn main() {
    group::benches();
    Criterion::default().configure_from_args().final_summary();
}
