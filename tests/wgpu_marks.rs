//! Device time between marks on the wgpu backend: two marks time the work between them with
//! timestamp queries where the adapter has them (lavapipe does), the autotuner then times its
//! candidates with them, and without timestamps a mark is a plain flush that times nothing.
//! Each test is reported ignored when the machine has no adapter (or the adapter no timestamp
//! queries), and fails then under `GPUWORLD_REQUIRE_WGPU=1`.

mod common;

use common::{Skip, wgpu_backend_with, wgpu_client_with};
use gpuworld::tune::{
    BenchmarkConfig, CacheLocation, MATMUL_SET, MatmulInput, TuneEntry, TuneMode, Tuner,
    TunerConfig, matmul_set,
};
use gpuworld::{
    Bindings, ComputeClient, CubeCount, Driver, ExecutionMode, StreamId, WgpuBackend, WgpuConfig,
    library,
};
use gpuworld_systems::backend::{
    Completion, DeviceEvent, DeviceTiming, LaunchCount, Memory, Queue, Region,
};
use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

test_main![
    two_marks_time_the_work_between_them_and_more_work_takes_longer,
    host_time_between_a_mark_and_the_next_work_is_not_counted,
    device_elapsed_is_none_in_flight_for_unknown_events_and_once_recycled,
    without_timestamp_queries_a_mark_is_a_flush_that_times_nothing,
    the_matmul_set_tunes_with_device_timing_on_wgpu,
];

/// Elements each SCALE launch reads and writes: enough work to take a few milliseconds.
const SCALE_LEN: u64 = 1 << 22;

fn has_timestamps(backend: &WgpuBackend) -> bool {
    backend
        .features()
        .contains(gpuworld::wgpu::Features::TIMESTAMP_QUERY)
}

/// The skip of a test that needs timestamp queries on an adapter without them.
fn no_timestamps() -> Skip {
    Skip("this adapter has no timestamp queries".into())
}

/// A manual client on an adapter with timestamp queries, or a [`Skip`] without one.
fn timed_client() -> Result<ComputeClient<WgpuBackend>, Skip> {
    let client = wgpu_client_with(WgpuConfig::default(), Driver::Manual)?;
    if !client.with_runtime(|rt| has_timestamps(rt.backend())) {
        return Err(no_timestamps());
    }
    Ok(client)
}

/// Launches SCALE over `SCALE_LEN` elements `launches` times between two marks and returns the
/// device time the marks measured.
fn time_scale(
    client: &ComputeClient<WgpuBackend>,
    input: &gpuworld::Handle,
    output: &gpuworld::Handle,
    launches: usize,
) -> Option<Duration> {
    let start = client.mark().unwrap();
    for _ in 0..launches {
        client
            .launch(
                &library::SCALE,
                CubeCount::covering(SCALE_LEN, library::LINEAR_CUBE),
                Bindings::new().buffer(input).buffer(output).scalar_f32(2.0),
            )
            .unwrap();
    }
    let end = client.mark().unwrap();
    client.sync().unwrap();
    client.device_elapsed(start, end)
}

fn two_marks_time_the_work_between_them_and_more_work_takes_longer() -> Result<(), Skip> {
    let client = timed_client()?;
    let input = client.empty(SCALE_LEN * 4);
    let output = client.empty(SCALE_LEN * 4);
    // Compiles the pipeline and touches the buffers before anything is timed.
    time_scale(&client, &input, &output, 1);

    let one = time_scale(&client, &input, &output, 1).expect("two completed marks are timed");
    let twenty = time_scale(&client, &input, &output, 20).expect("two completed marks are timed");

    assert!(one > Duration::ZERO, "one launch took {one:?}");
    assert!(
        twenty > one,
        "20 launches took {twenty:?}, one took {one:?}"
    );
    assert!(twenty < Duration::from_secs(30), "{twenty:?}");
    Ok(())
}

fn host_time_between_a_mark_and_the_next_work_is_not_counted() -> Result<(), Skip> {
    let client = timed_client()?;
    let out = client.empty(4096);
    let start = client.mark().unwrap();
    // The device is idle while the host sleeps: the start mark's own timestamp would count
    // the sleep, the timestamp at the start of the next work does not.
    std::thread::sleep(Duration::from_millis(300));
    client
        .launch(
            &library::FILL,
            CubeCount::new_1d(4),
            Bindings::new().buffer(&out).scalar_f32(1.0),
        )
        .unwrap();
    let end = client.mark().unwrap();
    client.sync().unwrap();

    let elapsed = client
        .device_elapsed(start, end)
        .expect("both marks completed");

    assert!(elapsed < Duration::from_millis(150), "{elapsed:?}");
    Ok(())
}

/// A backend driven by hand, its stream, and a buffer of `SCALE_LEN` words.
fn bare_backend() -> Result<(WgpuBackend, gpuworld_systems::backend::DeviceStream, Region), Skip> {
    let mut backend = wgpu_backend_with(WgpuConfig::default())?;
    if !has_timestamps(&backend) {
        return Err(no_timestamps());
    }
    let stream = backend.create_stream(StreamId::current());
    let storage = backend.allocate(SCALE_LEN * 4).unwrap();
    let region = Region {
        storage,
        offset: 0,
        size: SCALE_LEN * 4,
    };
    Ok((backend, stream, region))
}

/// Polls `backend` until `event` completed.
fn wait_for(backend: &mut WgpuBackend, event: DeviceEvent) {
    let began = Instant::now();
    while !backend.event_done(event) {
        assert!(
            began.elapsed() < Duration::from_secs(30),
            "{event:?} never completed"
        );
        backend.wait_for_progress(Duration::from_millis(1), None);
        backend.poll(0);
    }
}

fn device_elapsed_is_none_in_flight_for_unknown_events_and_once_recycled() -> Result<(), Skip> {
    let (mut backend, stream, region) = bare_backend()?;
    let start = backend.mark(stream);
    // SAFETY: the region is the whole of a buffer `bare_backend` just allocated; the launch is checked.
    unsafe {
        backend.launch(
            stream,
            &library::FILL,
            LaunchCount::Static([(SCALE_LEN / 256) as u32, 1, 1]),
            &[region],
            &[1.0f32.to_bits()],
            ExecutionMode::Checked,
        );
    }
    let end = backend.mark(stream);

    // Nothing was polled yet: the end mark is in flight as far as the backend knows.
    assert_eq!(backend.device_elapsed(start, end), None);
    wait_for(&mut backend, end);
    assert!(backend.take_fault(stream).is_none());
    assert!(backend.device_elapsed(start, end).is_some());
    // A plain flush is no mark, and an event never made is unknown.
    backend.write(stream, region, vec![0; 4].into());
    let flushed = backend.flush(stream);
    wait_for(&mut backend, flushed);
    assert_eq!(backend.device_elapsed(start, flushed), None);
    assert_eq!(
        backend.device_elapsed(start, DeviceEvent(flushed.0 + 100)),
        None
    );

    // The backend keeps the last 1024 marks: 1100 later ones push the first pair out.
    let mut last = end;
    for _ in 0..1100 {
        last = backend.mark(stream);
        backend.poll(0);
    }
    let before_last = DeviceEvent(last.0 - 1);
    wait_for(&mut backend, last);
    assert_eq!(backend.device_elapsed(start, end), None);
    assert!(backend.device_elapsed(before_last, last).is_some());
    // SAFETY: every launch and write on the buffer finished (`last` was waited for, after them).
    unsafe { backend.deallocate(region.storage) };
    Ok(())
}

fn without_timestamp_queries_a_mark_is_a_flush_that_times_nothing() -> Result<(), Skip> {
    // An adapter without timestamp queries, by construction: the device is opened without them.
    let config = WgpuConfig::default().with_mark_timestamps(false);
    let client = wgpu_client_with(config, Driver::Manual)?;
    assert!(!client.with_runtime(|rt| has_timestamps(rt.backend())));
    let input = client.empty(SCALE_LEN * 4);
    let output = client.empty(SCALE_LEN * 4);

    assert_eq!(time_scale(&client, &input, &output, 1), None);
    let (log, _) = tuning_log(&client, 32);
    assert!(log.contains("candidate timed"), "{log}");
    assert!(!log.contains("clock=Events"), "{log}");
    assert!(log.contains("clock=Host"), "{log}");
    Ok(())
}

/// A `tracing` writer into a shared buffer.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl Write for Captured {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Tunes the matmul set for a `size`³ product on `client`; returns the tuner's debug log and
/// the key it tuned.
fn tuning_log(client: &ComputeClient<WgpuBackend>, size: u32) -> (String, String) {
    let captured = Captured::default();
    let writer = captured.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::DEBUG)
        .with_ansi(false)
        .with_writer(move || writer.clone())
        .finish();
    let set = Arc::new(matmul_set::<WgpuBackend>());
    let input = MatmulInput {
        a: client.empty(u64::from(size * size) * 4),
        b: client.empty(u64::from(size * size) * 4),
        m: size,
        n: size,
        k: size,
    };
    let tuner = Tuner::new(
        client,
        TunerConfig::default()
            .with_benchmark(BenchmarkConfig::default())
            .with_mode(TuneMode::Blocking)
            .with_cache(CacheLocation::Disabled),
    );
    // Blocking tuning benchmarks on this thread, where the subscriber is the default.
    tracing::subscriber::with_default(subscriber, || tuner.select(&set, &input)).unwrap();
    let log = captured.0.lock().unwrap().clone();
    let key = gpuworld::tune::matmul_key(&input).to_string();
    (String::from_utf8_lossy(&log).into_owned(), key)
}

fn the_matmul_set_tunes_with_device_timing_on_wgpu() -> Result<(), Skip> {
    let client = common::wgpu_client_or_skip()?;
    if !client.with_runtime(|rt| has_timestamps(rt.backend())) {
        return Err(no_timestamps());
    }

    let (log, key) = tuning_log(&client, 64);
    // The tick's tune stage ingests the result.
    client.tick();

    let timed: Vec<&str> = log
        .lines()
        .filter(|line| line.contains("candidate timed"))
        .collect();
    assert_eq!(timed.len(), 3, "one line per candidate:\n{log}");
    assert!(
        timed.iter().all(|line| line.contains("clock=Events")),
        "{log}"
    );
    let outcomes = match client.with_tune_cache(|cache| cache.entry(MATMUL_SET, &key)) {
        Some(TuneEntry::Tuned { outcomes, .. }) => outcomes,
        other => panic!("expected a tuned entry, found {other:?}"),
    };
    for outcome in &outcomes {
        let median = outcome.result.as_ref().expect("every candidate runs");
        assert!(*median > Duration::ZERO, "{}: {median:?}", outcome.name);
    }
    Ok(())
}
