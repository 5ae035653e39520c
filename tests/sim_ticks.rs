//! Tick-stepped scenarios on the sim backend: the world and the sim's call log are snapshotted
//! after every tick, so each stage's effect can be reviewed tick by tick.

mod common;

use common::{Pending, bytes_of, f32s};
use gpuworld::testing::TestRuntime;
use gpuworld::{Bindings, CubeCount, StreamId, library};

/// A sim runtime whose `s0` client the tests use.
fn sim() -> TestRuntime {
    TestRuntime::new()
}

/// The world and the calls the backend received during the last tick.
fn state(client: &TestRuntime) -> String {
    client.tick_snapshot().to_string()
}

#[test]
fn create_launch_read_completes_after_the_configured_latency() {
    let client = sim();
    let input = client.create(bytes_of(&[1.0, 2.0, 3.0, 4.0]));
    let output = client.empty(16);
    client
        .launch(
            &library::SCALE,
            CubeCount::new_1d(1),
            Bindings::new()
                .buffer(&input)
                .buffer(&output)
                .scalar_f32(3.0),
        )
        .unwrap();
    let mut read = Pending::new(client.read_async(&[output.binding()]));

    client.step();
    insta::assert_snapshot!("create_launch_read_tick1", state(&client));
    assert!(read.poll().is_none(), "the read is in flight during tick 1");

    client.step();
    insta::assert_snapshot!("create_launch_read_tick2", state(&client));
    let bytes = read.poll().expect("the read completes at tick 2").unwrap();
    assert_eq!(f32s(&bytes[0]), vec![3.0, 6.0, 9.0, 12.0]);
}

#[test]
fn write_then_read_returns_the_written_bytes() {
    let client = sim();
    let handle = client.create(bytes_of(&[0.0; 4]));
    client.step();
    insta::assert_snapshot!("write_then_read_tick1", state(&client));

    client.write(&handle, &bytes_of(&[5.0, 6.0])).unwrap();
    let mut read = Pending::new(client.read_async(&[handle.binding()]));
    client.step();
    insta::assert_snapshot!("write_then_read_tick2", state(&client));
    assert!(read.poll().is_none());

    client.step();
    insta::assert_snapshot!("write_then_read_tick3", state(&client));
    let bytes = read.poll().expect("ready at tick 3").unwrap();
    assert_eq!(f32s(&bytes[0]), vec![5.0, 6.0, 0.0, 0.0]);
}

#[test]
fn a_release_is_reused_by_the_next_allocation_of_its_stream_in_the_same_tick() {
    let client = sim();
    let first = client.create(bytes_of(&[7.0; 64]));
    client
        .launch(
            &library::FILL,
            CubeCount::new_1d(1),
            Bindings::new().buffer(&first).scalar_f32(1.0),
        )
        .unwrap();
    // Dropped while its write and fill are queued: the stream runs in order, so its next
    // allocation may take the memory at once; the write below runs after the fill.
    drop(first);
    let second = client.create(bytes_of(&[2.0; 64]));
    client.step();
    insta::assert_snapshot!("release_reuse_same_stream_tick1", state(&client));
    let usage = client.with_runtime(|rt| rt.memory_usage());
    assert_eq!(usage.number_allocs, 1, "only the second handle is in use");
    assert_eq!(usage.bytes_reserved, 256, "no second device allocation");

    client.step();
    insta::assert_snapshot!("release_reuse_same_stream_tick2", state(&client));
    let bytes = client.read_one(&second).unwrap();
    assert_eq!(f32s(&bytes), vec![2.0; 64]);
}

#[test]
fn a_release_waits_for_its_event_before_another_stream_reuses_it() {
    let client = sim();
    let other = client.with_stream(StreamId { value: 1 });
    let first = client.create(bytes_of(&[7.0; 64]));
    client
        .launch(
            &library::FILL,
            CubeCount::new_1d(1),
            Bindings::new().buffer(&first).scalar_f32(1.0),
        )
        .unwrap();
    drop(first);
    // Stream 1's work could run before stream 0's fill: it gets memory of its own.
    let second = other.create(bytes_of(&[2.0; 64]));
    client.step();
    insta::assert_snapshot!("release_reuse_other_stream_tick1", state(&client));
    assert_eq!(
        client.with_runtime(|rt| rt.memory_usage()).bytes_reserved,
        512
    );

    // The event after the fill passed: the memory is back in the pool, for every stream.
    client.step();
    insta::assert_snapshot!("release_reuse_other_stream_tick2", state(&client));
    let third = other.create(bytes_of(&[3.0; 64]));
    client.step();
    insta::assert_snapshot!("release_reuse_other_stream_tick3", state(&client));
    assert_eq!(
        client.with_runtime(|rt| rt.memory_usage()).bytes_reserved,
        512
    );
    assert_eq!(f32s(&other.read_one(&second).unwrap()), vec![2.0; 64]);
    assert_eq!(f32s(&other.read_one(&third).unwrap()), vec![3.0; 64]);
}

#[test]
fn memory_no_work_used_returns_to_the_pool_when_released() {
    let client = sim();
    let kept = client.empty(256);
    for _ in 0..1000 {
        drop(client.empty(1 << 20));
    }
    client.step();
    insta::assert_snapshot!("release_unused", state(&client));
    let usage = client.with_runtime(|rt| rt.memory_usage());
    assert_eq!(usage.number_allocs, 1);
    assert!(usage.bytes_reserved <= (2 << 20) + 256, "{usage:?}");
    drop(kept);
}

#[test]
fn the_same_commands_give_the_same_world_after_every_tick() {
    let run = || {
        let client = sim();
        let a = client.create(bytes_of(&[1.0; 8]));
        let b = client.empty(32);
        let mut states = Vec::new();
        for step in 0..4 {
            client
                .launch(
                    &library::SCALE,
                    CubeCount::new_1d(1),
                    Bindings::new()
                        .buffer(&a)
                        .buffer(&b)
                        .scalar_f32(step as f32),
                )
                .unwrap();
            client.step();
            states.push(state(&client));
        }
        states
    };
    assert_eq!(run(), run());
}

/// Queues `count` in-place `SCALE` launches of `handle` by 1.0 (the values stay put), then a read
/// of it.
fn launches_then_read(
    client: &TestRuntime,
    handle: &gpuworld::Handle,
    count: usize,
) -> Pending<gpuworld::Result<Vec<gpuworld::HostBytes>>> {
    for _ in 0..count {
        client
            .launch(
                &library::SCALE,
                CubeCount::new_1d(1),
                Bindings::new()
                    .buffer(handle)
                    .buffer(handle)
                    .scalar_f32(1.0),
            )
            .unwrap();
    }
    Pending::new(client.read_async(&[handle.binding()]))
}

#[test]
fn a_long_drain_ends_at_a_read_and_the_next_tick_takes_what_it_carried_whole() {
    let client = sim();
    let handle = client.create(bytes_of(&[2.0, 4.0]));
    client.step();

    // 202 commands queued before the tick: the drain ends after the first read past the 64th
    // (the 101st command), and the 101 behind it wait for the next tick.
    let mut first = launches_then_read(&client, &handle, 100);
    let mut second = launches_then_read(&client, &handle, 100);
    client.step();
    assert_eq!(client.tick_snapshot().deferred_commands, 101);

    // The next tick takes the 101 carried whole, and the new commands up to the first read past
    // them: a backlog never grows from tick to tick however much is queued.
    let mut third = launches_then_read(&client, &handle, 100);
    let mut fourth = launches_then_read(&client, &handle, 100);
    client.step();
    assert_eq!(client.tick_snapshot().deferred_commands, 101);
    client.step_until_idle().unwrap();
    assert_eq!(client.tick_snapshot().deferred_commands, 0);
    for read in [&mut first, &mut second, &mut third, &mut fourth] {
        let bytes = read.poll().expect("every read completes").unwrap();
        assert_eq!(f32s(&bytes[0]), vec![2.0, 4.0]);
    }
}

#[test]
fn commands_carried_past_a_tick_are_answered_when_the_runtime_goes() {
    let client = sim();
    let handle = client.create(bytes_of(&[2.0, 4.0]));
    client.step();
    let _first = launches_then_read(&client, &handle, 100);
    let mut second = launches_then_read(&client, &handle, 100);
    client.step();
    assert_eq!(client.tick_snapshot().deferred_commands, 101);
    // The runtime goes with the second read carried, never ingested: it is answered, not lost.
    drop(client);
    let error = second.poll().expect("answered at once").unwrap_err();
    assert_eq!(error, gpuworld::Error::Disconnected);
}

#[test]
fn a_cleanup_asked_for_while_released_memory_waits_for_the_device_returns_it_once_it_is_done() {
    let mut config = gpuworld::SimConfig::default();
    config.latency_ticks = 3;
    let client = TestRuntime::with_sim(config);
    let written = client.create(bytes_of(&vec![7.0; 1 << 18]));
    client.step();
    // Released, then a cleanup, before the device is done with the upload: the memory waits
    // behind the upload's event when the cleanup runs.
    drop(written);
    client.memory_cleanup();
    client.step();
    assert!(client.memory_usage().bytes_reserved > 0);
    client.step_until_idle().unwrap();
    assert_eq!(
        client.memory_usage().bytes_reserved,
        0,
        "the cleanup returns memory released before it once the device is done with it\n{}",
        client.tick_snapshot()
    );

    // Memory released after the cleanup is the pool's to keep, for the next allocation.
    let later = client.create(bytes_of(&vec![8.0; 1 << 18]));
    client.step();
    drop(later);
    client.step_until_idle().unwrap();
    assert_eq!(client.memory_usage().bytes_reserved, 1 << 20);
}
