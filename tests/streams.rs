//! Many streams, tick by tick on the sim backend: cursors, last-synced state, waits on other
//! streams' events, pinned shared bindings and the scheduler's strategies, with the world and
//! the sim's call log snapshotted after every tick.

mod common;

use common::{Pending, bytes_of, f32s};
use gpuworld::{
    Bindings, ComputeClient, CubeCount, Driver, RuntimeConfig, SchedulingStrategy, SimBackend,
    SimConfig, SimModel, StreamId, library,
};

fn sim_with(config: SimConfig, runtime: RuntimeConfig) -> ComputeClient<SimBackend> {
    ComputeClient::new(SimBackend::new(config), runtime, Driver::Manual)
}

fn sim() -> ComputeClient<SimBackend> {
    sim_with(SimConfig::default(), RuntimeConfig::default())
}

fn on(client: &ComputeClient<SimBackend>, id: u64) -> ComputeClient<SimBackend> {
    client.with_stream(StreamId { value: id })
}

/// The world and the calls the backend received since the last call.
fn state(client: &ComputeClient<SimBackend>) -> String {
    let world = client.snapshot();
    let calls = client.with_runtime(|rt| {
        let log = rt.backend_mut().take_log();
        log.iter()
            .map(|(tick, call)| format!("  t{tick} {}\n", rt.backend().call_text(call)))
            .collect::<String>()
    });
    format!("{world}backend calls:\n{calls}")
}

/// The waits the streams were given.
fn waits_in(client: &ComputeClient<SimBackend>) -> Vec<String> {
    client.with_runtime(|rt| {
        let log = rt.backend().log();
        log.iter()
            .filter(|(_, call)| matches!(call, gpuworld::SimCall::Wait { .. }))
            .map(|(_, call)| rt.backend().call_text(call))
            .collect()
    })
}

fn stream(client: &ComputeClient<SimBackend>, id: u64) -> gpuworld::StreamState {
    client
        .with_runtime(|rt| rt.stream_state(StreamId { value: id }))
        .expect("the stream was opened")
}

/// A task with no bindings on the client's stream: it only advances the cursor.
fn empty_task(client: &ComputeClient<SimBackend>) {
    client
        .launch(&library::NOOP, CubeCount::new_1d(1), Bindings::new())
        .unwrap();
}

// The reference's shared-binding analysis, through the public API: `s1.empty()` makes a binding
// owned by stream 1, and a launch with bindings is the reference's `resolve`.

/// The reference's analysis setup: bindings owned by the given streams (1 or 2), one empty task
/// on each stream, then a launch with those bindings on stream 1; the compute-stream waits it made.
fn waits_of_a_launch_on_stream_1(owners: &[u64]) -> Vec<String> {
    let client = sim();
    let (s1, s2) = (on(&client, 1), on(&client, 2));
    let bindings: Vec<_> = owners.iter().map(|&id| on(&client, id).empty(16)).collect();
    empty_task(&s1);
    empty_task(&s2);
    client.tick();
    let kernel = match bindings.len() {
        2 => &library::COPY,
        _ => &library::ADD,
    };
    let launch = bindings.iter().fold(Bindings::new(), |b, h| b.buffer(h));
    s1.launch(kernel, CubeCount::new_1d(1), launch).unwrap();
    client.tick();
    waits_in(&client)
}

#[test]
fn a_binding_from_another_stream_is_shared_once() {
    assert_eq!(
        waits_of_a_launch_on_stream_1(&[1, 2]),
        // Named by the order they were opened: stream 1 is `s0`, stream 2 `s1`.
        vec!["s0 wait s1 op 1"]
    );
}

#[test]
fn a_repeated_shared_binding_adds_no_second_wait() {
    assert_eq!(
        waits_of_a_launch_on_stream_1(&[1, 2, 1]),
        vec!["s0 wait s1 op 1"]
    );
}

#[test]
fn bindings_of_the_same_stream_are_not_shared() {
    assert!(waits_of_a_launch_on_stream_1(&[1, 1, 1]).is_empty());
}

#[test]
fn cursors_and_last_synced_match_the_reference_state() {
    let client = sim();
    let (s1, s2) = (on(&client, 1), on(&client, 2));
    let b1 = s1.empty(16);
    let b2 = s2.empty(16);
    let b3 = s1.empty(16);
    empty_task(&s1);
    empty_task(&s2);
    s1.launch(
        &library::ADD,
        CubeCount::new_1d(1),
        Bindings::new().buffer(&b1).buffer(&b2).buffer(&b3),
    )
    .unwrap();
    client.tick();
    let (one, two) = (stream(&client, 1), stream(&client, 2));
    assert_eq!(one.cursor, 2);
    assert_eq!(
        one.last_synced,
        vec![(2, 1)],
        "stream 1 synced with slot 2 at its cursor 1"
    );
    assert_eq!(two.cursor, 1);
    assert!(two.last_synced.is_empty());
}

// Tick-by-tick snapshots.

#[test]
fn a_binding_written_on_a_and_used_on_b_waits_once() {
    let client = sim();
    let (a, b) = (on(&client, 1), on(&client, 2));
    let shared = a.create(bytes_of(&[1.0, 2.0, 3.0, 4.0]));
    let out = b.empty(16);
    b.launch(
        &library::SCALE,
        CubeCount::new_1d(1),
        Bindings::new().buffer(&shared).buffer(&out).scalar_f32(2.0),
    )
    .unwrap();
    client.tick();
    insta::assert_snapshot!("a_to_b_tick1", state(&client));
    client.tick();
    insta::assert_snapshot!("a_to_b_tick2", state(&client));

    // The same again: B already synced with A past the write, so no second wait.
    let out2 = b.empty(16);
    b.launch(
        &library::SCALE,
        CubeCount::new_1d(1),
        Bindings::new()
            .buffer(&shared)
            .buffer(&out2)
            .scalar_f32(3.0),
    )
    .unwrap();
    client.tick();
    insta::assert_snapshot!("a_to_b_again_tick3", state(&client));
    client.tick();
    insta::assert_snapshot!("a_to_b_again_tick4", state(&client));
    assert_eq!(f32s(&b.read_one(&out).unwrap()), vec![2.0, 4.0, 6.0, 8.0]);
    assert_eq!(f32s(&b.read_one(&out2).unwrap()), vec![3.0, 6.0, 9.0, 12.0]);
}

#[test]
fn three_streams_in_a_ring_each_wait_on_the_previous() {
    let client = sim();
    let (a, b, c) = (on(&client, 1), on(&client, 2), on(&client, 3));
    let x = a.create(bytes_of(&[1.0; 4]));
    let y = b.empty(16);
    let z = c.empty(16);
    let w = a.empty(16);
    let scale = |s: &ComputeClient<SimBackend>, from: &gpuworld::Handle, to: &gpuworld::Handle| {
        s.launch(
            &library::SCALE,
            CubeCount::new_1d(1),
            Bindings::new().buffer(from).buffer(to).scalar_f32(2.0),
        )
        .unwrap();
    };
    scale(&b, &x, &y);
    scale(&c, &y, &z);
    scale(&a, &z, &w);
    client.tick();
    insta::assert_snapshot!("ring_tick1", state(&client));
    client.tick();
    insta::assert_snapshot!("ring_tick2", state(&client));
    assert_eq!(f32s(&a.read_one(&w).unwrap()), vec![8.0; 4]);
}

// Access: a binding the signature declares read-only is ordered as a read.

/// `x` written on stream 1, then read by `SCALE` (whose `x` is read-only) on streams 2 and 3.
fn x_read_on_streams_2_and_3(client: &ComputeClient<SimBackend>) -> [gpuworld::Handle; 3] {
    let x = on(client, 1).create(bytes_of(&[1.0, 2.0, 3.0, 4.0]));
    let outs = [2, 3].map(|id| {
        let reader = on(client, id);
        let out = reader.empty(16);
        reader
            .launch(
                &library::SCALE,
                CubeCount::new_1d(1),
                Bindings::new()
                    .buffer(&x)
                    .buffer(&out)
                    .scalar_f32(id as f32),
            )
            .unwrap();
        out
    });
    let [two, three] = outs;
    [x, two, three]
}

/// The readers of [`x_read_on_streams_2_and_3`] got `x` = 1, 2, 3, 4 scaled by their stream id.
fn assert_readers_scaled_x(
    client: &ComputeClient<SimBackend>,
    two: &gpuworld::Handle,
    three: &gpuworld::Handle,
) {
    assert_eq!(
        f32s(&on(client, 2).read_one(two).unwrap()),
        [2.0, 4.0, 6.0, 8.0]
    );
    assert_eq!(
        f32s(&on(client, 3).read_one(three).unwrap()),
        [3.0, 6.0, 9.0, 12.0]
    );
}

#[test]
fn readers_of_one_buffer_on_two_streams_do_not_wait_for_each_other() {
    let client = sim();
    let [_x, two, three] = x_read_on_streams_2_and_3(&client);
    client.tick();
    // Each reader waits for the write on stream 1, and stream 3 not for stream 2's read (streams
    // 1, 2, 3 were opened in that order: `s0`, `s1`, `s2`).
    assert_eq!(waits_in(&client), ["s1 wait s0 op 1", "s2 wait s0 op 1"]);
    insta::assert_snapshot!("read_read_tick1", state(&client));
    assert_readers_scaled_x(&client, &two, &three);
}

#[test]
fn a_write_after_reads_on_other_streams_waits_for_every_reader() {
    let client = sim();
    let [x, two, three] = x_read_on_streams_2_and_3(&client);
    client.tick();
    let s1 = on(&client, 1);
    s1.launch(
        &library::FILL,
        CubeCount::new_1d(1),
        Bindings::new().buffer(&x).scalar_f32(0.0),
    )
    .unwrap();
    client.tick();
    assert_eq!(
        waits_in(&client),
        [
            "s1 wait s0 op 1",
            "s2 wait s0 op 1",
            "s0 wait s1 op 2",
            "s0 wait s2 op 2"
        ]
    );
    insta::assert_snapshot!("read_read_write_tick2", state(&client));
    assert_eq!(f32s(&s1.read_one(&x).unwrap()), [0.0; 4]);
    assert_readers_scaled_x(&client, &two, &three);
}

#[test]
fn a_read_after_a_write_on_another_stream_waits_for_the_write() {
    let client = sim();
    let (s1, s2) = (on(&client, 1), on(&client, 2));
    let x = s2.create(bytes_of(&[1.0; 4]));
    client.tick();
    s1.launch(
        &library::FILL,
        CubeCount::new_1d(1),
        Bindings::new().buffer(&x).scalar_f32(5.0),
    )
    .unwrap();
    let out = s2.empty(16);
    s2.launch(
        &library::SCALE,
        CubeCount::new_1d(1),
        Bindings::new().buffer(&x).buffer(&out).scalar_f32(2.0),
    )
    .unwrap();
    client.tick();
    // The fill waits for the creation on stream 2; the read waits for the fill. Stream 2 was
    // opened first (the creation), so it is `s0`, and stream 1 is `s1`.
    assert_eq!(waits_in(&client), ["s1 wait s0 op 1", "s0 wait s1 op 2"]);
    assert_eq!(f32s(&s2.read_one(&out).unwrap()), [10.0; 4]);
}

fn three_streams_five_tasks(strategy: SchedulingStrategy) -> Vec<String> {
    let client = sim_with(
        SimConfig::default().with_model(SimModel::SingleQueue),
        RuntimeConfig::default()
            .with_max_tasks(5)
            .with_strategy(strategy),
    );
    let streams: Vec<_> = (1..=3).map(|id| on(&client, id)).collect();
    let handles: Vec<_> = streams.iter().map(|s| s.empty(64)).collect();
    let mut states = Vec::new();
    for task in 0..5 {
        for (s, h) in streams.iter().zip(&handles) {
            s.launch(
                &library::FILL,
                CubeCount::new_1d(1),
                Bindings::new().buffer(h).scalar_f32(task as f32),
            )
            .unwrap();
        }
        if task == 3 {
            // Four tasks queued per stream: below max_tasks, nothing is submitted yet.
            client.tick();
            states.push(state(&client));
        }
    }
    client.tick();
    states.push(state(&client));
    client.tick();
    states.push(state(&client));
    for (s, h) in streams.iter().zip(&handles) {
        assert_eq!(f32s(&s.read_one(h).unwrap()), vec![4.0; 16]);
    }
    states
}

#[test]
fn the_scheduler_interleaves_three_streams_of_five_tasks() {
    let states = three_streams_five_tasks(SchedulingStrategy::Interleave);
    insta::assert_snapshot!("scheduler_interleave_queued", states[0]);
    insta::assert_snapshot!("scheduler_interleave_submitted", states[1]);
    insta::assert_snapshot!("scheduler_interleave_done", states[2]);
}

#[test]
fn the_scheduler_runs_three_streams_of_five_tasks_in_sequence() {
    let states = three_streams_five_tasks(SchedulingStrategy::Sequential);
    insta::assert_snapshot!("scheduler_sequential_submitted", states[1]);
}

#[test]
fn a_pinned_shared_binding_is_freed_only_after_its_consumers_event() {
    let client = sim_with(
        SimConfig::default().with_latency_ticks(2),
        RuntimeConfig::default(),
    );
    let (a, b) = (on(&client, 1), on(&client, 2));
    let shared = a.create(bytes_of(&[5.0; 4]));
    let out = b.empty(16);
    b.launch(
        &library::COPY,
        CubeCount::new_1d(1),
        Bindings::new().buffer(&shared).buffer(&out),
    )
    .unwrap();
    drop(shared);
    let mut states = Vec::new();
    for _ in 0..4 {
        client.tick();
        states.push(state(&client));
    }
    insta::assert_snapshot!("pinned_tick1", states[0]);
    insta::assert_snapshot!("pinned_tick2", states[1]);
    insta::assert_snapshot!("pinned_tick3", states[2]);
    insta::assert_snapshot!("pinned_tick4", states[3]);
    assert_eq!(client.memory_usage().number_allocs, 1, "only `out` is left");
    assert_eq!(f32s(&b.read_one(&out).unwrap()), vec![5.0; 4]);
}

#[test]
fn a_handle_dropped_while_in_flight_on_another_stream_waits_for_that_stream() {
    let client = sim_with(
        SimConfig::default().with_latency_ticks(2),
        RuntimeConfig::default(),
    );
    let (a, b) = (on(&client, 1), on(&client, 2));
    let handle = a.create(bytes_of(&[1.0; 64]));
    client.tick();
    client.tick();
    // B fills it (after syncing with A), then every clone is dropped while B's fill is in flight.
    b.launch(
        &library::FILL,
        CubeCount::new_1d(1),
        Bindings::new().buffer(&handle).scalar_f32(2.0),
    )
    .unwrap();
    drop(handle);
    let mut states = Vec::new();
    for _ in 0..3 {
        client.tick();
        states.push(state(&client));
    }
    insta::assert_snapshot!("dropped_in_flight_tick3", states[0]);
    insta::assert_snapshot!("dropped_in_flight_tick4", states[1]);
    insta::assert_snapshot!("dropped_in_flight_tick5", states[2]);
    // The tick after the device finished reclaims the memory.
    client.tick();
    let usage = client.memory_usage();
    assert_eq!((usage.number_allocs, usage.bytes_in_use), (0, 0));
}

#[test]
fn aliased_streams_reuse_memory_of_queued_work_only_behind_it() {
    // Streams 0 and 2 share slot 0 of two, hence one queue: memory released while work using it
    // is still queued (cubecl #1380) may go to the alias, whose work is queued behind it.
    let client = sim_with(
        SimConfig::default(),
        RuntimeConfig::default()
            .with_stream_slots(2)
            .with_max_tasks(100),
    );
    let (first, alias) = (on(&client, 0), on(&client, 2));
    let input = first.create(bytes_of(&[3.0; 64]));
    let out = first.empty(256);
    first
        .launch(
            &library::COPY,
            CubeCount::new_1d(1),
            Bindings::new().buffer(&input).buffer(&out),
        )
        .unwrap();
    drop(input);
    client.tick();
    client.tick();
    // The copy is still queued: the input's memory is parked for the slot's stream.
    assert_eq!(
        stream(&client, 0).queued,
        2,
        "the input's write and the copy"
    );
    let fresh = alias.create(bytes_of(&[9.0; 64]));
    client.tick();
    insta::assert_snapshot!("aliased_queued", state(&client));
    assert_eq!(f32s(&first.read_one(&out).unwrap()), vec![3.0; 64]);
    assert_eq!(f32s(&alias.read_one(&fresh).unwrap()), vec![9.0; 64]);
}

#[test]
fn a_read_on_another_stream_completes_in_order_as_the_runtime_ticks() {
    let client = sim();
    let (a, b) = (on(&client, 1), on(&client, 2));
    let h = a.create(bytes_of(&[7.0; 8]));
    let mut read = Pending::new(b.read_async(&[h.binding()]));
    let mut ticks = 0;
    let bytes = loop {
        if let Some(result) = read.poll() {
            break result.unwrap();
        }
        client.tick();
        ticks += 1;
        assert!(ticks < 10);
    };
    assert_eq!(f32s(&bytes[0]), vec![7.0; 8]);
}
