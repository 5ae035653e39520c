//! Who ticks: under the manual driver getters read what the last tick left and never tick, and
//! `memory_cleanup` only enqueues; under either driver a blocking call returns after the tick that
//! answered it has published, so `sync()` then `memory_usage()` counts every command sent before.

mod common;

use common::Pending;
use gpuworld::{Bindings, CubeCount, Driver, MemoryUsage, SimConfig, StreamId, library};
use std::time::{Duration, Instant};

fn tick_count<B: gpuworld::Backend>(client: &gpuworld::ComputeClient<B>) -> u64 {
    client.with_runtime(|runtime| runtime.tick_count())
}

#[test]
fn memory_usage_under_the_manual_driver_reads_the_last_tick_and_never_ticks() {
    let client = gpuworld::sim_client(SimConfig::default()).expect("the sim opens");
    let handle = client.empty(1000);
    let ticks = tick_count(&client);

    assert_eq!(
        client.memory_usage(),
        MemoryUsage::default(),
        "the create is still in the inbox"
    );
    assert_eq!(tick_count(&client), ticks, "memory_usage ran a tick");

    client.tick();
    let usage = client.memory_usage();
    assert_eq!(usage.number_allocs, 1, "{usage:?}");
    assert_eq!(usage.bytes_in_use, 1000, "{usage:?}");
    assert!(usage.bytes_reserved >= 1000, "{usage:?}");
    assert_eq!(tick_count(&client), ticks + 1);

    drop(handle);
    assert_eq!(
        client.memory_usage(),
        usage,
        "the release is still in the inbox"
    );
    assert_eq!(tick_count(&client), ticks + 1, "memory_usage ran a tick");
}

#[test]
fn memory_report_and_memory_cleanup_under_the_manual_driver_never_tick() {
    let client = gpuworld::sim_client(SimConfig::default()).expect("the sim opens");
    drop(client.empty(1000));
    client.tick();
    client.tick();
    let ticks = tick_count(&client);
    let reserved = client.memory_usage().bytes_reserved;
    assert!(reserved > 0, "the freed slice is kept for reuse");

    client.memory_cleanup();
    let reports = client.memory_report();
    assert_eq!(tick_count(&client), ticks, "a getter or cleanup ran a tick");
    assert_eq!(
        reports.iter().map(|r| r.bytes_reserved).sum::<u64>(),
        reserved,
        "the cleanup waits for the next tick"
    );

    client.tick();
    assert_eq!(client.memory_usage().bytes_reserved, 0);
}

#[test]
fn after_a_sync_memory_usage_counts_every_command_sent_before_it_with_the_device_thread() {
    let client = gpuworld::cpu_client(Driver::DeviceThread).unwrap();
    let mut kept = Vec::new();
    for round in 1..=200u64 {
        kept.push(client.empty(4096));
        client
            .launch(
                &library::FILL,
                CubeCount::new_1d(1),
                Bindings::new()
                    .buffer(kept.last().expect("just pushed"))
                    .scalar_f32(1.0),
            )
            .unwrap();
        client.sync().unwrap();
        let usage = client.memory_usage();
        assert_eq!(usage.number_allocs, round, "round {round}: {usage:?}");
    }
}

#[test]
fn a_read_beside_the_device_thread_sees_the_launch_before_it() {
    let client = gpuworld::cpu_client(Driver::DeviceThread).unwrap();
    let word = client.empty(4);
    for round in 0..500u32 {
        let value = round as f32;
        client
            .launch(
                &library::FILL,
                CubeCount::new_1d(1),
                Bindings::new().buffer(&word).scalar_f32(value),
            )
            .unwrap();
        let bytes = client.read_one(&word).unwrap();
        assert_eq!(bytes, value.to_le_bytes(), "round {round}");
    }
}

#[test]
fn a_tick_awaiting_replies_answers_the_read_it_submits() {
    // What a blocking read does: its reply comes in the tick that submits it, not a tick later,
    // even behind a kernel that runs for a while.
    const WORDS: u64 = 1 << 20;
    let client = gpuworld::cpu_client(Driver::Manual).unwrap();
    let field = client.empty(WORDS * 4);
    for round in 0..5u32 {
        let value = round as f32;
        client
            .launch(
                &library::FILL,
                CubeCount::covering(WORDS, library::FILL.signature.cube_dim[0]),
                Bindings::new().buffer(&field).scalar_f32(value),
            )
            .unwrap();
        let mut read =
            Pending::new(client.read_async(&[field.clone().offset_start(WORDS * 4 - 4).binding()]));
        client.with_runtime(|runtime| runtime.tick_awaiting_replies(Duration::from_secs(30)));
        let bytes = read.poll().expect("answered within the tick").unwrap();
        assert_eq!(bytes[0], value.to_le_bytes(), "round {round}");
    }
}

#[test]
fn a_tick_awaiting_replies_on_the_sim_waits_for_nothing_and_matches_a_plain_tick() {
    // The sim progresses only when ticked: waiting cannot help, so the tick must not wait, and
    // the world after each tick is the same as with plain ticks.
    let run = |awaiting: bool| {
        let client = gpuworld::sim_client(SimConfig::default().with_latency_ticks(2))
            .expect("the sim opens")
            .with_stream(StreamId { value: 0 });
        let word = client.create(vec![1, 2, 3, 4]);
        let mut read = Pending::new(client.read_async(&[word.binding()]));
        let mut snapshots = Vec::new();
        for _ in 0..3 {
            let start = Instant::now();
            if awaiting {
                client
                    .with_runtime(|runtime| runtime.tick_awaiting_replies(Duration::from_secs(30)));
            } else {
                client.tick();
            }
            assert!(start.elapsed() < Duration::from_secs(10), "the tick waited");
            snapshots.push((client.snapshot(), read.poll().is_some()));
        }
        snapshots
    };
    let awaiting = run(true);
    assert_eq!(awaiting, run(false));
    assert_eq!(
        awaiting
            .iter()
            .map(|(_, answered)| *answered)
            .collect::<Vec<_>>(),
        [false, false, true],
        "the sim answers after its latency"
    );
}

#[test]
fn futures_still_queued_when_the_last_client_drops_are_answered() {
    for driver in [Driver::Manual, Driver::DeviceThread] {
        let client = gpuworld::cpu_client(driver).unwrap();
        let kept = client.create(vec![1u8; 64]);
        for _ in 0..8 {
            client
                .launch(
                    &gpuworld::library::FILL,
                    gpuworld::CubeCount::new_1d(1),
                    gpuworld::Bindings::new().buffer(&kept).scalar_f32(2.0),
                )
                .unwrap();
        }
        let read = client.read_async(&[kept.binding()]);
        let sync = client.sync_async();
        drop(client);
        // The handle still lives (and holds the inbox): the futures must complete anyway.
        let read = futures_executor::block_on(read);
        let sync = futures_executor::block_on(sync);
        assert!(
            read.is_ok() || matches!(read, Err(gpuworld::Error::Disconnected)),
            "{driver:?}"
        );
        assert!(
            sync.is_ok() || matches!(sync, Err(gpuworld::Error::Disconnected)),
            "{driver:?}"
        );
        // Releases and writes after the runtime is gone are answered, not kept.
        drop(kept);
    }
}
