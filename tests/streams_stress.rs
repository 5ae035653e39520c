//! Eight threads, each on its own stream of the CPU backend (one worker thread per stream),
//! sharing an input buffer and writing disjoint ranges of one shared output buffer. Every value
//! read is checked, the run must end in bounded time (no deadlock), and nothing leaks.

mod common;

use common::{bytes_of, f32s};
use gpuworld::{
    Bindings, ComputeClient, CpuBackend, CubeCount, Driver, RuntimeConfig, StreamId, library,
};
use std::sync::mpsc;
use std::time::Duration;

const THREADS: u64 = 8;
const ROUNDS: usize = 25;
const LEN: usize = 512;
const MAIN: StreamId = StreamId { value: THREADS };

fn run(driver: Driver) {
    let config = RuntimeConfig::default().with_stream_slots(THREADS as usize + 1);
    let client = ComputeClient::new(CpuBackend::new(), config, driver).with_stream(MAIN);
    let input: Vec<f32> = (0..LEN).map(|i| i as f32).collect();
    let shared_in = client.create(bytes_of(&input));
    let shared_out = client.empty(THREADS * LEN as u64 * 4);
    let bytes_per_range = LEN as u64 * 4;

    std::thread::scope(|scope| {
        for t in 0..THREADS {
            let (client, shared_in, shared_out) = (
                client.with_stream(StreamId { value: t }),
                shared_in.clone(),
                shared_out.clone(),
            );
            let input = input.clone();
            scope.spawn(move || {
                let range = shared_out
                    .clone()
                    .offset_start(t * bytes_per_range)
                    .offset_end((THREADS - 1 - t) * bytes_per_range);
                for round in 0..ROUNDS {
                    let factor = (t as usize + round) as f32;
                    let scaled = client.empty(bytes_per_range);
                    let count = CubeCount::covering(LEN as u64, library::LINEAR_CUBE);
                    client
                        .launch(
                            &library::SCALE,
                            count,
                            Bindings::new()
                                .buffer(&shared_in)
                                .buffer(&scaled)
                                .scalar_f32(factor),
                        )
                        .unwrap();
                    client
                        .launch(
                            &library::COPY,
                            count,
                            Bindings::new().buffer(&scaled).buffer(&range),
                        )
                        .unwrap();
                    let mine = f32s(&client.read_one(&range).unwrap());
                    for (i, value) in mine.iter().enumerate() {
                        assert_eq!(
                            *value,
                            input[i] * factor,
                            "thread {t} round {round} index {i}"
                        );
                    }
                }
            });
        }
    });

    let all = f32s(&client.read_one(&shared_out).unwrap());
    for t in 0..THREADS as usize {
        let factor = (t + ROUNDS - 1) as f32;
        for i in 0..LEN {
            assert_eq!(
                all[t * LEN + i],
                input[i] * factor,
                "final range {t} index {i}"
            );
        }
    }
    drop((shared_in, shared_out));
    for t in 0..=THREADS {
        client.with_stream(StreamId { value: t }).sync().unwrap();
    }
    // Memory used on several streams is reclaimed once their events passed: tick until nothing
    // is in flight, as a host loop would before checking for leaks.
    client.with_runtime(|runtime| {
        runtime.tick();
        while runtime.has_work_in_flight() {
            runtime.wait_for_device(Duration::from_millis(1));
            runtime.tick();
        }
    });
    let usage = client.memory_usage();
    assert_eq!(
        (usage.number_allocs, usage.bytes_in_use),
        (0, 0),
        "{usage:?}"
    );
    client.memory_cleanup();
    client.sync().unwrap();
    assert_eq!(client.memory_usage().bytes_reserved, 0);
}

/// Runs `scenario` on a thread and fails if it does not finish within `limit`.
fn within(limit: Duration, scenario: fn(Driver), driver: Driver) {
    let (done, finished) = mpsc::channel();
    let worker = std::thread::spawn(move || {
        scenario(driver);
        let _ = done.send(());
    });
    match finished.recv_timeout(limit) {
        Ok(()) => worker.join().unwrap(),
        Err(mpsc::RecvTimeoutError::Disconnected) => {
            if let Err(panic) = worker.join() {
                std::panic::resume_unwind(panic);
            }
        }
        Err(mpsc::RecvTimeoutError::Timeout) => panic!("no progress within {limit:?}: deadlock"),
    }
}

#[test]
fn eight_streams_sharing_buffers_with_blocking_calls_agree_and_leak_nothing() {
    within(Duration::from_secs(120), run, Driver::Manual);
}

#[test]
fn eight_streams_sharing_buffers_with_the_device_thread_agree_and_leak_nothing() {
    within(Duration::from_secs(120), run, Driver::DeviceThread);
}
