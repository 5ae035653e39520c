//! Replays the allocation-trace family of `benches/common/alloc_traces.rs` straight on a
//! `MemoryPool` over a virtual device that only counts (no client, no host memory): peak reserved
//! over peak in use and the device allocations of every shape and seed, in seconds. The fast loop
//! behind the pool rules of issue 25; `benches/alloc_traces.rs` measures the same through the
//! client on real backends (on cpu the two agree, exact and batched).
//!
//! Run: `cargo run --release -p gpuworld-systems --example pool_traces`. Environment:
//! `SCALE` (default 32), `SEEDS` (default `1,2,3,4,5`), `ALIGN` (device alignment, default 64, the
//! cpu backend's), `SHAPE` (one shape by name; default all), `CACHE` (`SLACK,FIT`: the
//! `CachePolicy` divisors; default the tight one, 512,8; `3,2` is `CachePolicy::ROOMY`),
//! `PAGE` (bytes of a mapped page: the device maps pages, as CUDA does, and large requests go to
//! a mapped pool; default none), `TICK` (buffers are written as they are made, so a freed one is
//! parked for its stream, and the GC stage returns what a tick parked at the end of the next tick,
//! a tick being this many events: the runtime's batched replay, modelled; default none: freed
//! buffers return at once, as unwritten ones do), `LAG=0` (with `TICK`: at the end of the same
//! tick), `SLOW=1` (the device makes buffers slowly, as wgpu: large requests go to a compacting
//! pool), `UNWRITTEN` (a compaction moves blocks without copying), `COMPACT=0` (with `SLOW=1`: large
//! requests get buffers of their own instead), `REPEAT=0` (no buffers of their own for repeated
//! large sizes, `MemoryConfig::repeat_buffers`), `MEMORY_GIB` (default 8).

#[path = "../../benches/common/alloc_traces.rs"]
mod alloc_traces;
#[path = "../../benches/common/virtual_device.rs"]
mod virtual_device;

use alloc_traces::{Event, Shape};
use bevy_ecs::entity::Entity;
use gpuworld_systems::backend::Backend;
use gpuworld_systems::ids::StreamId;
use gpuworld_systems::memory::{
    AllocationMode, CachePolicy, Compaction, MemoryConfig, MemoryPool, Movable, SliceKey,
};
use std::collections::HashMap;
use virtual_device::VirtualDevice;

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name).map_or(default, |value| {
        value
            .trim()
            .parse()
            .unwrap_or_else(|_| panic!("{name}: `{value}` is not a number"))
    })
}

fn main() {
    let scale = env_u64("SCALE", 32);
    let alignment = env_u64("ALIGN", 64);
    let seeds: Vec<u64> = std::env::var("SEEDS").map_or_else(
        |_| vec![1, 2, 3, 4, 5],
        |list| {
            list.split(',')
                .map(|seed| {
                    seed.trim()
                        .parse()
                        .unwrap_or_else(|_| panic!("SEEDS: `{seed}` is not a number"))
                })
                .collect()
        },
    );
    let only = std::env::var("SHAPE").ok();
    let cache = std::env::var("CACHE").map_or(CachePolicy::TIGHT, |pair| {
        let divisors: Vec<u64> = pair
            .split(',')
            .map(|d| {
                d.trim()
                    .parse()
                    .unwrap_or_else(|_| panic!("CACHE: `{d}` is not a number"))
            })
            .collect();
        match divisors[..] {
            [slack, fit] => CachePolicy::TIGHT
                .with_slack_divisor(slack)
                .with_fit_divisor(fit),
            _ => panic!("CACHE: `{pair}` is not SLACK,FIT"),
        }
    });
    // `COMPACT=0`: large requests get buffers of their own where making buffers is slow.
    let compact = std::env::var("COMPACT").map_or(true, |v| v != "0");
    // `REPEAT=0`: no buffers of their own for repeated large sizes.
    let repeat = std::env::var("REPEAT").map_or(true, |v| v != "0");
    let config = MemoryConfig::default()
        .with_cache(cache)
        .with_compact(compact)
        .with_repeat_buffers(repeat);
    // `SLOW=1`: the device makes buffers slowly (wgpu): large requests go to a compacting pool.
    let slow = std::env::var("SLOW").is_ok_and(|v| v == "1");
    let unwritten = std::env::var("UNWRITTEN").is_ok();
    let (tick, same_tick) = (env_u64("TICK", 0), env_u64("LAG", 1) == 0);
    let memory = env_u64("MEMORY_GIB", 8) << 30;
    let page = std::env::var("PAGE").ok().map(|page| {
        page.trim()
            .parse::<u64>()
            .unwrap_or_else(|_| panic!("PAGE: `{page}` is not a number"))
    });
    println!(
        "scale {scale}, alignment {alignment}, seeds {seeds:?}, {cache:?}, mapped pages {page:?}\n\n| shape | peak reserved / peak in use | device allocations (all seeds) | GiB allocated (all seeds) | GiB moved (all seeds) | per seed: ratio, allocations, moved |\n| --- | --- | --- | --- | --- | --- |"
    );
    for shape in Shape::ALL {
        if only.as_deref().is_some_and(|name| name != shape.name()) {
            continue;
        }
        let (mut low, mut high) = (f64::INFINITY, 0f64);
        let (mut allocations, mut bytes, mut moved_bytes) = (0, 0, 0u64);
        let mut per_seed = Vec::new();
        for &seed in &seeds {
            let trace = shape.generate(seed, scale);
            let mut device = VirtualDevice::unbounded(memory, alignment);
            device.page_mapping = page;
            device.slow_buffers = slow;
            let mut pool = MemoryPool::new(&device.properties(), &config);
            let mut live: HashMap<u32, (SliceKey, Entity)> = HashMap::new();
            let (mut parked, mut parked_before) = (Vec::new(), Vec::new());
            for (index, event) in trace.events.iter().enumerate() {
                if tick > 0 && (index as u64).is_multiple_of(tick) {
                    // The GC stage: what the tick before parked is done on the device.
                    pool.seal_parking();
                    if same_tick {
                        parked_before.append(&mut parked);
                    }
                    for key in std::mem::replace(&mut parked_before, std::mem::take(&mut parked)) {
                        pool.release_parked(key, false)
                            .unwrap_or_else(|error| panic!("release failed: {error}"));
                    }
                }
                match *event {
                    Event::Alloc { id, bytes, stream } => {
                        let entity = Entity::from_raw_u32(stream + 1).expect("a small index");
                        let mut movable = |_: SliceKey| {
                            if unwritten {
                                Movable::Unwritten
                            } else {
                                Movable::Copied
                            }
                        };
                        let reservation = loop {
                            let mut moves = Vec::new();
                            let compaction = Some(Compaction {
                                movable: &mut movable,
                                moves: &mut moves,
                                stream: Some(entity),
                            });
                            let reserved = if tick > 0 {
                                let id = StreamId {
                                    value: u64::from(stream),
                                };
                                pool.reserve_moving(&mut device, bytes, id, entity, compaction)
                            } else {
                                pool.reserve_with(
                                    &mut device,
                                    bytes,
                                    AllocationMode::Auto,
                                    compaction,
                                )
                            };
                            match reserved {
                                Ok(reservation) => break reservation,
                                // Pages emptied for the request: the runtime's next tick returns
                                // them, and the request asks again.
                                Err(_) if pool.retiring() > 0 => {
                                    pool.release_retiring(&mut device, u64::MAX)
                                }
                                Err(error) => panic!("{bytes} bytes refused: {error}"),
                            }
                        };
                        live.insert(id, (reservation.slice, entity));
                    }
                    Event::Free { id } => {
                        let (key, entity) =
                            live.remove(&id).expect("the trace frees a live buffer");
                        if tick > 0 {
                            pool.park(key, entity)
                                .unwrap_or_else(|error| panic!("parking failed: {error}"));
                            parked.push(key);
                        } else {
                            pool.release(key)
                                .unwrap_or_else(|error| panic!("release failed: {error}"));
                        }
                    }
                }
            }
            let ratio = pool.peak_reserved() as f64 / trace.peak_live_bytes.max(1) as f64;
            low = low.min(ratio);
            high = high.max(ratio);
            allocations += device.allocations;
            bytes += device.bytes_allocated;
            let moved: u64 = pool.reports().iter().map(|r| r.bytes_moved).sum();
            moved_bytes += moved;
            per_seed.push(format!(
                "{ratio:.3}, {}, {:.1} GiB moved",
                device.allocations,
                moved as f64 / (1u64 << 30) as f64
            ));
        }
        println!(
            "| {} | {low:.3}–{high:.3} | {allocations} | {:.1} | {:.1} | {} |",
            shape.name(),
            bytes as f64 / (1u64 << 30) as f64,
            moved_bytes as f64 / (1u64 << 30) as f64,
            per_seed.join("; ")
        );
    }
}
