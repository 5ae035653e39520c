//! Capture and replay (issue 28): a graph replays the launches and writes of a frame as one
//! command, with the eager run's bytes and tick-by-tick snapshots on the sim; the buffers it uses
//! stay with it whatever the user drops; eager work between replays is ordered as on any stream;
//! scalars and written bytes change between replays through explicit updates; a read, a sync or
//! a nested capture inside a capture is a typed error and the runtime goes on.

mod common;

use common::{sim_on_stream_0 as sim, without_holds};
use gpuworld::error::GraphError;
use gpuworld::{
    Bindings, ComputeClient, CubeCount, Driver, Error, Graph, Handle, SimBackend, StreamId, library,
};

const N: usize = 512;

fn floats(client: &ComputeClient<impl gpuworld::Backend>, handle: &Handle) -> Vec<f32> {
    client.read_one_as::<f32>(handle).expect("read")
}

/// One frame over two streams: stream 0 writes `x` and scales it into `y`; stream 1 adds `y` and
/// `x` into `z` (waiting for stream 0's work through the runtime's events).
fn frame<B: gpuworld::Backend>(
    client: &ComputeClient<B>,
    [x, y, z]: [&Handle; 3],
    input: &[f32],
) -> gpuworld::Result<()> {
    let cubes = CubeCount::new_1d(N.div_ceil(256) as u32);
    // Explicit streams: a thread's own stream may have any number, 1 included.
    let client = client.with_stream(StreamId { value: 0 });
    client.write(x, bytemuck::cast_slice(input))?;
    client.launch(
        &library::SCALE,
        cubes,
        Bindings::new().buffer(x).buffer(y).scalar_f32(2.0),
    )?;
    let other = client.with_stream(StreamId { value: 1 });
    other.launch(
        &library::ADD,
        cubes,
        Bindings::new().buffer(y).buffer(x).buffer(z),
    )?;
    Ok(())
}

#[test]
fn a_replay_gives_the_eager_runs_bytes_and_snapshots_tick_for_tick_on_the_sim() {
    let input: Vec<f32> = (0..N).map(|i| i as f32 * 0.25).collect();
    let (eager, replayed) = (sim(), sim());
    let buffers = |client: &ComputeClient<SimBackend>| {
        [0, 1, 2].map(|_| client.create_from_slice(&vec![0u8; N * 4]))
    };
    let (e, r) = (buffers(&eager), buffers(&replayed));
    eager.tick();
    replayed.tick();
    let graph = replayed
        .capture(|c| frame(c, [&r[0], &r[1], &r[2]], &input))
        .expect("the capture");
    assert_eq!(graph.len(), 3, "{:?}", graph.commands());
    frame(&eager, [&e[0], &e[1], &e[2]], &input).unwrap();
    for step in 0..6 {
        if step > 0 {
            frame(&eager, [&e[0], &e[1], &e[2]], &input).unwrap();
            graph.replay().unwrap();
        }
        for _ in 0..2 {
            eager.tick();
            replayed.tick();
            assert_eq!(
                without_holds(&eager.snapshot()),
                without_holds(&replayed.snapshot()),
                "step {step}"
            );
        }
        if step == 2 {
            insta::assert_snapshot!("replay_mid_run", replayed.snapshot());
        }
    }
    let expected: Vec<f32> = input.iter().map(|x| x * 2.0 + x).collect();
    assert_eq!(floats(&eager, &e[2]), expected);
    assert_eq!(floats(&replayed, &r[2]), expected);
}

#[test]
fn a_buffer_the_user_drops_stays_with_the_graph_until_the_graph_goes() {
    let client = sim();
    let x = client.create_from_slice(&vec![0u8; N * 4]);
    let mut temp_id = None;
    let graph = client
        .capture(|c| {
            // A buffer made and dropped inside the capture: the graph keeps it.
            let temp = c.empty((N * 4) as u64);
            temp_id = Some(temp.id());
            let cubes = CubeCount::new_1d(2);
            c.launch(
                &library::SCALE,
                cubes,
                Bindings::new().buffer(&x).buffer(&temp).scalar_f32(3.0),
            )?;
            c.launch(
                &library::ADD,
                cubes,
                Bindings::new().buffer(&temp).buffer(&temp).buffer(&x),
            )
        })
        .expect("the capture");
    assert_eq!(graph.buffers(), 2);
    drop(x);
    for _ in 0..4 {
        client.tick();
    }
    let usage = client.memory_usage();
    assert_eq!(usage.number_allocs, 2, "the graph holds both: {usage:?}");
    insta::assert_snapshot!("graph_holds_released_buffers", client.snapshot());
    // New allocations do not land on the held memory.
    let other = client.create_from_slice(&vec![7u8; N * 4]);
    graph.replay().unwrap();
    client.tick();
    assert_eq!(client.read_one(&other).unwrap().to_vec(), vec![7u8; N * 4]);
    drop(graph);
    for _ in 0..4 {
        client.tick();
    }
    let usage = client.memory_usage();
    assert_eq!(usage.number_allocs, 1, "only `other` is left: {usage:?}");
    assert!(temp_id.is_some());
}

#[test]
fn eager_writes_between_replays_are_seen_by_the_next_replay() {
    let client = gpuworld::cpu_client(Driver::DeviceThread).expect("a cpu client");
    let x = client.create_from_pod(&[1.0f32; N]);
    let y = client.empty((N * 4) as u64);
    let graph = client
        .capture(|c| {
            c.launch(
                &library::SCALE,
                CubeCount::new_1d(2),
                Bindings::new().buffer(&x).buffer(&y).scalar_f32(2.0),
            )
        })
        .expect("the capture");
    assert_eq!(floats(&client, &y), vec![2.0; N]);
    for value in [3.0f32, 5.0, -1.5] {
        client.write(&x, bytemuck::cast_slice(&[value; N])).unwrap();
        graph.replay().unwrap();
        assert_eq!(floats(&client, &y), vec![value * 2.0; N]);
    }
    // Eager work after a replay sees its result.
    client
        .write(&x, bytemuck::cast_slice(&[4.0f32; N]))
        .unwrap();
    graph.replay().unwrap();
    client
        .launch(
            &library::ADD,
            CubeCount::new_1d(2),
            Bindings::new().buffer(&y).buffer(&y).buffer(&x),
        )
        .unwrap();
    assert_eq!(floats(&client, &x), vec![16.0; N]);
}

#[test]
fn scalar_and_data_updates_change_later_replays_and_bad_ones_are_refused() {
    let client = gpuworld::cpu_client(Driver::DeviceThread).expect("a cpu client");
    let x = client.empty((N * 4) as u64);
    let y = client.empty((N * 4) as u64);
    let mut graph: Graph<_> = client
        .capture(|c| {
            c.write(&x, bytemuck::cast_slice(&[1.0f32; N]))?;
            c.launch(
                &library::SCALE,
                CubeCount::new_1d(2),
                Bindings::new().buffer(&x).buffer(&y).scalar_f32(2.0),
            )
        })
        .expect("the capture");
    assert_eq!(graph.commands().len(), 2);
    assert!(
        graph.commands()[1].contains("launch"),
        "{:?}",
        graph.commands()
    );
    graph.set_scalar_f32(1, 0, 10.0).unwrap();
    graph
        .set_data(0, bytemuck::cast_slice(&[0.5f32; N]))
        .unwrap();
    graph.replay().unwrap();
    assert_eq!(floats(&client, &y), vec![5.0; N]);

    let refused = |result: gpuworld::Result<()>| match result {
        Err(Error::Graph(error)) => error,
        other => panic!("expected a GraphError, got {other:?}"),
    };
    assert!(matches!(
        refused(graph.set_scalar_u32(1, 0, 3)),
        GraphError::UpdateRefused { node: 1, .. }
    ));
    assert!(matches!(
        refused(graph.set_scalar_f32(1, 4, 3.0)),
        GraphError::UpdateRefused { node: 1, .. }
    ));
    assert!(matches!(
        refused(graph.set_scalar_f32(0, 0, 3.0)),
        GraphError::NoSuchNode {
            node: 0,
            found: "write",
            ..
        }
    ));
    assert!(matches!(
        refused(graph.set_scalar_f32(9, 0, 3.0)),
        GraphError::NoSuchNode {
            node: 9,
            found: "none",
            ..
        }
    ));
    assert!(matches!(
        refused(graph.set_data(0, &[0u8; 12])),
        GraphError::UpdateRefused { node: 0, .. }
    ));
    // The refused updates changed nothing.
    graph.replay().unwrap();
    assert_eq!(floats(&client, &y), vec![5.0; N]);
}

#[test]
fn a_read_sync_or_nested_capture_inside_a_capture_is_a_typed_error_and_the_runtime_goes_on() {
    let client = gpuworld::cpu_client(Driver::DeviceThread).expect("a cpu client");
    let x = client.create_from_pod(&[1.0f32; N]);
    let not_capturable = |error: Error, call: &str| match error {
        Error::Graph(GraphError::NotCapturable { call: c }) if c == call => {}
        other => panic!("expected NotCapturable for {call}, got {other:?}"),
    };
    let mut read_inside = None;
    let error = client
        .capture(|c| {
            read_inside = Some(c.read_one(&x).map(|b| b.len()));
            Ok(())
        })
        .expect_err("a read inside a capture");
    not_capturable(error, "read");
    not_capturable(read_inside.unwrap().unwrap_err(), "read");

    let error = client
        .capture(|c| c.sync())
        .expect_err("a sync inside a capture");
    not_capturable(error, "sync");

    let nested = client
        .capture(|c| match c.capture(|_| Ok(())) {
            Err(Error::Graph(GraphError::NestedCapture)) => Ok(()),
            other => panic!("expected NestedCapture, got {other:?}"),
        })
        .expect("the outer capture");
    assert!(nested.is_empty());

    // An error of the closure itself fails the capture, and nothing stays held.
    let error = client
        .capture(|c| {
            c.launch(
                &library::FILL,
                CubeCount::new_1d(2),
                Bindings::new().buffer(&x).scalar_f32(9.0),
            )?;
            Err(Error::Graph(GraphError::NestedCapture))
        })
        .expect_err("the closure's error");
    assert!(matches!(error, Error::Graph(GraphError::NestedCapture)));

    // The runtime goes on: the warm-up's fill ran, reads work, a new capture works.
    assert_eq!(floats(&client, &x), vec![9.0; N]);
    let graph = client
        .capture(|c| {
            c.launch(
                &library::FILL,
                CubeCount::new_1d(2),
                Bindings::new().buffer(&x).scalar_f32(4.0),
            )
        })
        .unwrap();
    client
        .write(&x, bytemuck::cast_slice(&[0.0f32; N]))
        .unwrap();
    graph.replay().unwrap();
    assert_eq!(floats(&client, &x), vec![4.0; N]);
    drop(graph);
    drop(x);
    client.sync().unwrap();
    client.memory_cleanup();
    client.sync().unwrap();
    assert_eq!(client.memory_usage().number_allocs, 0);
}

#[test]
fn other_threads_are_not_captured() {
    let client = gpuworld::cpu_client(Driver::DeviceThread).expect("a cpu client");
    let x = client.create_from_pod(&[1.0f32; N]);
    let y = client.create_from_pod(&[1.0f32; N]);
    let graph = client
        .capture(|c| {
            std::thread::scope(|s| {
                s.spawn(|| {
                    client
                        .launch(
                            &library::FILL,
                            CubeCount::new_1d(2),
                            Bindings::new().buffer(&y).scalar_f32(7.0),
                        )
                        .unwrap();
                    // A read from another thread is not refused.
                    assert_eq!(floats(&client, &y), vec![7.0; N]);
                });
            });
            c.launch(
                &library::FILL,
                CubeCount::new_1d(2),
                Bindings::new().buffer(&x).scalar_f32(3.0),
            )
        })
        .unwrap();
    assert_eq!(graph.len(), 1, "{:?}", graph.commands());
    assert_eq!(graph.buffers(), 1);
}

#[test]
fn a_trace_shows_a_replay_as_one_unit_with_its_commands() {
    let client = sim();
    let x = client.create_from_slice(&vec![0u8; N * 4]);
    let y = client.create_from_slice(&vec![0u8; N * 4]);
    client.tick();
    let graph = client
        .capture(|c| frame(c, [&x, &y, &y], &[1.0; N]))
        .expect("the capture");
    client.start_trace();
    graph.replay().unwrap();
    client.tick();
    graph.replay().unwrap();
    client.tick();
    let trace = client.stop_trace().expect("a trace");
    assert_eq!(trace.replays.len(), 2);
    let replay = &trace.replays[0];
    assert_eq!(replay.commands.len(), 3, "{:?}", replay.commands);
    assert!(
        replay.commands[0].starts_with("write 2048 bytes"),
        "{:?}",
        replay.commands
    );
    assert!(replay.commands[1].contains("gpuworld.scale") || replay.commands[1].contains("scale"));
    let json = trace.to_chrome_json();
    assert!(json.contains("replay graph"), "{json}");
}

#[test]
fn a_recording_of_captures_and_replays_replays_to_the_same_reads() {
    use gpuworld::testing::{Recorder, Recording, Replayer};
    let client = sim();
    let recorder = Recorder::attach(&client, u64::MAX);
    let x = client.create_from_slice(&vec![0u8; N * 4]);
    let y = client.create_from_slice(&vec![0u8; N * 4]);
    let z = client.create_from_slice(&vec![0u8; N * 4]);
    client.tick();
    let input: Vec<f32> = (0..N).map(|i| i as f32).collect();
    let mut graph = client
        .capture(|c| frame(c, [&x, &y, &z], &input))
        .expect("the capture");
    client.tick();
    graph.replay().unwrap();
    client.tick();
    graph.set_scalar_f32(1, 0, 5.0).unwrap();
    drop(y);
    graph.replay().unwrap();
    client.tick();
    let read = client.read_one(&z).unwrap().into_vec();
    drop(graph);
    client.tick();
    let recording: Recording = recorder.finish();

    let again = sim();
    let report = Replayer::new(recording)
        .replay(&again, |_| {})
        .expect("the recording replays");
    let replayed = report
        .reads
        .last()
        .expect("the read")
        .result
        .clone()
        .unwrap();
    assert_eq!(replayed, vec![read.clone()]);
    let expected: Vec<f32> = input.iter().map(|v| v * 5.0 + v).collect();
    assert_eq!(read, bytemuck::cast_slice::<f32, u8>(&expected));
}

#[test]
fn a_frame_graph_replays_repeated_frames_and_goes_eager_when_the_frame_changes() {
    use gpuworld::{FrameGraph, FrameMode};
    let client = gpuworld::cpu_client(Driver::DeviceThread).expect("a cpu client");
    let x = client.create_from_pod(&[0.0f32; N]);
    let ones = client.create_from_pod(&[1.0f32; N]);
    let mut frames = FrameGraph::new(&client, 3);
    let step = |factor: f32| {
        let (x, ones) = (&x, &ones);
        move |c: &ComputeClient<gpuworld::CpuBackend>| {
            c.launch(
                &library::ADD,
                CubeCount::new_1d(2),
                Bindings::new().buffer(x).buffer(ones).buffer(x),
            )?;
            c.launch(
                &library::SCALE,
                CubeCount::new_1d(2),
                Bindings::new().buffer(x).buffer(x).scalar_f32(factor),
            )
        }
    };
    let mut modes = Vec::new();
    let mut expected = 0.0f32;
    for frame in 0..10 {
        let factor = if frame == 6 { 0.5 } else { 1.0 };
        modes.push(frames.run(step(factor)).unwrap());
        expected = (expected + 1.0) * factor;
        assert_eq!(floats(&client, &x), vec![expected; N], "frame {frame}");
    }
    use FrameMode::*;
    assert_eq!(
        modes,
        // Frame 6 differs; frames 7-9 are the old frame again, three in a row from frame 7.
        [
            Eager, Eager, Captured, Replayed, Replayed, Replayed, Changed, Eager, Eager, Captured
        ]
    );
    assert!(frames.graph().is_some());
    // A read inside a frame is refused whatever the mode, and the frames go on.
    let error = frames
        .run(|c| c.read_one(&x).map(|_| ()))
        .expect_err("a read inside a frame");
    assert!(matches!(
        error,
        Error::Graph(GraphError::NotCapturable { call: "read" })
    ));
    assert_eq!(frames.run(step(1.0)).unwrap(), FrameMode::Replayed);
}
