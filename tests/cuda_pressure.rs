//! CUDA under memory pressure (issue 30): whatever memory other allocations leave (run it with
//! another process holding 90–95% of the GPU, as `.device` scripts do with PyTorch), the runtime
//! fails an allocation with `OutOfMemory` only where what is live and in flight really does not
//! fit, after giving back what its pools cache; the call that asked gets the error, nothing
//! already written is lost, and the runtime stays usable. Streams that allocate faster than the
//! device retires wait instead of failing, and allocation traces sized to the free memory replay.
//! The tests take turns (each may fill the device), and measure the free memory when they start.

#[path = "../benches/common/alloc_replay.rs"]
mod alloc_replay;
#[path = "../benches/common/alloc_traces.rs"]
mod alloc_traces;
mod common;

use alloc_replay::{Reports, replay};
use alloc_traces::Shape;
use common::{Skip, cuda_client_or_skip, f32s};
use gpuworld::error::MemoryError;
use gpuworld::{Bindings, ComputeClient, CubeCount, CudaBackend, Error, Handle, StreamId, library};
use std::sync::Mutex;

test_main![
    filling_the_free_memory_fails_only_where_a_request_does_not_fit_and_loses_nothing,
    streams_that_allocate_faster_than_the_device_retires_wait_under_pressure,
    allocation_traces_sized_to_the_free_memory_replay_without_failing,
];

const MIB: u64 = 1 << 20;

/// One test at a time: each may take all the memory there is.
static DEVICE: Mutex<()> = Mutex::new(());

/// The device's free memory now, as the driver reports it.
fn free_memory(client: &ComputeClient<CudaBackend>) -> u64 {
    let (free, total) = client
        .with_runtime(|runtime| runtime.backend().memory_info())
        .expect("cuMemGetInfo");
    eprintln!(
        "free {} MiB of {} MiB ({:.1}% taken)",
        free / MIB,
        total / MIB,
        100.0 * (total - free) as f64 / total as f64
    );
    free
}

/// Fills `handle` with `value` (a whole number of floats).
fn fill(client: &ComputeClient<CudaBackend>, handle: &Handle, bytes: u64, value: f32) {
    client
        .launch(
            &library::FILL,
            CubeCount::covering(bytes / 4, library::LINEAR_CUBE),
            Bindings::new().buffer(handle).scalar_f32(value),
        )
        .expect("launch FILL");
}

/// The first float of `handle`, or the read's error.
fn first_word(
    client: &ComputeClient<CudaBackend>,
    handle: &Handle,
    bytes: u64,
) -> Result<f32, Error> {
    let word = handle.clone().offset_end(bytes - 4);
    client.read_one(&word).map(|bytes| f32s(&bytes)[0])
}

fn filling_the_free_memory_fails_only_where_a_request_does_not_fit_and_loses_nothing()
-> Result<(), Skip> {
    let _turn = DEVICE
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    let client = cuda_client_or_skip()?;
    let free = free_memory(&client);
    // A chunk of a 64th of the free memory, at least 16 MiB, in whole MiB: a few dozen chunks
    // fill it under pressure, a few hundred on an idle GPU.
    let chunk = (free / 64).max(16 * MIB) / MIB * MIB;
    let mut held: Vec<(Handle, f32)> = Vec::new();
    let error = loop {
        let handle = client.empty(chunk);
        let value = held.len() as f32 + 1.0;
        fill(&client, &handle, chunk, value);
        match first_word(&client, &handle, chunk) {
            Ok(read) => {
                assert_eq!(read, value, "chunk {} reads back wrong", held.len());
                held.push((handle, value));
            }
            Err(error) => break error,
        }
        assert!(
            (held.len() as u64) * chunk <= free,
            "{} chunks of {chunk} B allocated where {free} B were free",
            held.len()
        );
    };
    let live = held.len() as u64 * chunk;
    match &error {
        Error::Memory(MemoryError::OutOfMemory {
            requested, usage, ..
        }) => {
            assert_eq!(*requested, chunk, "{error}");
            assert_eq!(usage.bytes_in_use, live, "{error}");
            // Cached memory went back before the request failed.
            assert!(
                usage.bytes_reserved - usage.bytes_in_use <= chunk,
                "failed with {} B cached: {error}",
                usage.bytes_reserved - usage.bytes_in_use
            );
            // It really did not fit: what the runtime held and the request exceed what was
            // free, less the driver's rounding (2 MiB a buffer) and its own growth (512 MiB).
            let allowance = 512 * MIB + 2 * MIB * usage.number_allocs;
            assert!(
                usage.bytes_reserved + requested + allowance > free,
                "out of memory with {} B reserved + {requested} B requested of {free} B free: {error}",
                usage.bytes_reserved
            );
        }
        other => panic!("expected out of memory, got {other}"),
    }
    eprintln!(
        "{} chunks of {} MiB live when a request failed: {error}",
        held.len(),
        chunk / MIB
    );
    // The FILL launched on the failed allocation failed too: the stream reports it once, at the
    // next sync, and is clean after.
    match client.sync() {
        Ok(()) => {}
        Err(error) if error.is_out_of_memory() => client.sync().unwrap(),
        Err(other) => panic!("the sync after an out-of-memory request: {other}"),
    }
    assert!(held.len() >= 8, "only {} chunks fit", held.len());
    // Nothing written is lost.
    for (handle, value) in held.iter().step_by(7) {
        assert_eq!(first_word(&client, handle, chunk).unwrap(), *value);
    }
    client.sync().unwrap();
    // Half given back, a request of another size fits: the pool returns the idle chunks it
    // caches to the device and retries.
    let mut kept = Vec::new();
    for (index, entry) in held.into_iter().enumerate() {
        if index % 2 == 0 {
            kept.push(entry);
        }
    }
    client.sync().unwrap();
    let larger = 3 * chunk / 2 / MIB * MIB;
    let big = client.empty(larger);
    fill(&client, &big, larger, -1.0);
    assert_eq!(first_word(&client, &big, larger).unwrap(), -1.0);
    for (handle, value) in &kept {
        assert_eq!(first_word(&client, handle, chunk).unwrap(), *value, "lost");
    }
    drop(big);
    drop(kept);
    client.sync().unwrap();
    client.memory_cleanup();
    client.sync().unwrap();
    let usage = client.memory_usage();
    assert_eq!(usage.bytes_in_use, 0, "{usage:?}");
    Ok(())
}

fn streams_that_allocate_faster_than_the_device_retires_wait_under_pressure() -> Result<(), Skip> {
    let _turn = DEVICE
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    let client = cuda_client_or_skip()?;
    let free = free_memory(&client);
    // Two buffers fit, three streams each allocate, fill and drop one in turn without waiting:
    // memory one stream released reaches another only after its work passed, so a request often
    // finds nothing free and must wait for it, not fail.
    let size = (free * 2 / 5) / MIB * MIB;
    let streams: Vec<_> = (0..3)
        .map(|s| client.with_stream(StreamId { value: s }))
        .collect();
    for round in 0..12 {
        for (index, stream) in streams.iter().enumerate() {
            let value = (round * 3 + index) as f32;
            let handle = stream.empty(size);
            fill(stream, &handle, size, value);
            if round % 4 == 0 {
                assert_eq!(first_word(stream, &handle, size).unwrap(), value);
            }
        }
    }
    for stream in &streams {
        stream.sync().unwrap();
    }
    let usage = client.memory_usage();
    assert!(usage.bytes_reserved <= 2 * size + 64 * MIB, "{usage:?}");
    Ok(())
}

fn allocation_traces_sized_to_the_free_memory_replay_without_failing() -> Result<(), Skip> {
    let _turn = DEVICE
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    let client = cuda_client_or_skip()?;
    let free = free_memory(&client);
    drop(client);
    for shape in [
        Shape::LogUniform,
        Shape::TrainingShiftingBatch,
        Shape::MultiStream,
    ] {
        // The smallest scale (1 or more) whose live peak takes at most 60% of the free memory.
        let peak = shape.generate(1, 1).peak_live_bytes;
        let scale = (peak * 10).div_ceil(free * 6).max(1);
        let trace = shape.generate(1, scale);
        let client = cuda_client_or_skip()?;
        let replayed = replay(&client, &trace, Reports::Exact, false).unwrap_or_else(|error| {
            panic!(
                "{} at scale {scale} ({} MiB live at most, {} MiB free): {error}",
                shape.name(),
                trace.peak_live_bytes / MIB,
                free / MIB
            )
        });
        eprintln!(
            "{} scale {scale}: peak reserved / peak in use {:.3}, {} ms",
            shape.name(),
            replayed.peak_ratio(Reports::Exact),
            replayed.time.as_millis()
        );
        assert!(replayed.pool_peak_reserved <= free, "{}", shape.name());
    }
    Ok(())
}
