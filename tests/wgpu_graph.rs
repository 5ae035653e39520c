//! Captured graphs on wgpu (issue 28): a replay of launches on one stream records a plan made at
//! its first replay (pipelines, bind groups, the scalars in a buffer of the plan's own), with the
//! bytes of the eager run; an update makes a new plan; eager writes between replays are seen by
//! the next one; a view that cannot be bound in place replays launch by launch, as correct; a
//! replay over two streams is one plan, and the second stream's later work follows it; in a
//! frame with writes, each run of launches between them is one plan; a long replay, submitted in
//! segments, has the eager run's bytes.

mod common;

use common::{Skip, add_chain, floats, wgpu_client_or_skip};
use gpuworld::{Bindings, ComputeClient, CubeCount, StreamId, WgpuBackend, library};

test_main![
    a_replay_records_its_plan_made_once_with_the_eager_runs_bytes,
    an_update_makes_a_new_plan_and_writes_between_replays_are_seen,
    a_view_not_bound_in_place_replays_launch_by_launch,
    a_replay_over_two_streams_is_one_plan_and_the_second_stream_follows_it,
    the_runs_of_launches_between_writes_replay_as_one_plan_each,
    an_update_to_one_runtimes_commands_leaves_the_other_runtimes_plan,
    a_long_replay_submitted_in_segments_has_the_eager_runs_bytes,
];

const N: usize = 1 << 10;

fn plans(client: &ComputeClient<WgpuBackend>) -> u64 {
    client.with_runtime(|rt| rt.backend().replay_plans_made())
}

fn cubes() -> CubeCount {
    CubeCount::new_1d(N.div_ceil(256) as u32)
}

fn a_replay_records_its_plan_made_once_with_the_eager_runs_bytes() -> Result<(), Skip> {
    let client = wgpu_client_or_skip()?;
    let x = client.create_from_pod(&[0.0f32; N]);
    let ones = client.create_from_pod(&[1.0f32; N]);
    let graph = client
        .capture(|c| {
            add_chain(c, &x, &ones, 50);
            Ok(())
        })
        .unwrap();
    assert_eq!(floats(&client, &x), vec![50.0; N], "the capture's run");
    assert_eq!(plans(&client), 0, "nothing replayed yet");
    for round in 1..=10 {
        graph.replay().unwrap();
        if round % 5 == 0 {
            assert_eq!(floats(&client, &x), vec![50.0 * (round + 1) as f32; N]);
        }
    }
    assert_eq!(plans(&client), 1, "one plan, made at the first replay");
    // Eager launches after the replays see their results, and the other way round.
    add_chain(&client, &x, &ones, 3);
    graph.replay().unwrap();
    assert_eq!(floats(&client, &x), vec![603.0; N]);
    Ok(())
}

fn an_update_makes_a_new_plan_and_writes_between_replays_are_seen() -> Result<(), Skip> {
    let client = wgpu_client_or_skip()?;
    let x = client.create_from_pod(&[1.0f32; N]);
    let y = client.empty((N * 4) as u64);
    let z = client.empty((N * 4) as u64);
    let mut graph = client
        .capture(|c| {
            c.launch(
                &library::SCALE,
                cubes(),
                Bindings::new().buffer(&x).buffer(&y).scalar_f32(2.0),
            )?;
            c.launch(
                &library::ADD,
                cubes(),
                Bindings::new().buffer(&y).buffer(&x).buffer(&z),
            )?;
            c.launch(
                &library::SCALE,
                cubes(),
                Bindings::new().buffer(&z).buffer(&z).scalar_f32(1.0),
            )
        })
        .unwrap();
    for value in [3.0f32, -0.5, 7.25] {
        client.write(&x, bytemuck::cast_slice(&[value; N])).unwrap();
        graph.replay().unwrap();
        assert_eq!(floats(&client, &z), vec![value * 3.0; N]);
    }
    assert_eq!(plans(&client), 1);
    graph.set_scalar_f32(0, 0, 10.0).unwrap();
    graph.set_scalar_f32(2, 0, 0.5).unwrap();
    client
        .write(&x, bytemuck::cast_slice(&[2.0f32; N]))
        .unwrap();
    graph.replay().unwrap();
    assert_eq!(floats(&client, &z), vec![11.0; N]);
    assert_eq!(plans(&client), 2, "a new version, a new plan");
    // The user drops its handles; the graph still has them, and its plan.
    drop((x, y));
    graph.replay().unwrap();
    assert_eq!(floats(&client, &z), vec![11.0; N]);
    assert_eq!(plans(&client), 2);
    // A replay queued before an update keeps its values: the update applies to later ones.
    graph.replay().unwrap();
    graph.set_scalar_f32(0, 0, 1.0).unwrap();
    assert_eq!(floats(&client, &z), vec![11.0; N]);
    graph.replay().unwrap();
    assert_eq!(floats(&client, &z), vec![2.0; N]);
    Ok(())
}

fn a_view_not_bound_in_place_replays_launch_by_launch() -> Result<(), Skip> {
    let client = wgpu_client_or_skip()?;
    let values: Vec<f32> = (0..N).map(|i| i as f32).collect();
    let x = client.create_from_pod(&values);
    let ones = client.create_from_pod(&[1.0f32; N]);
    // 4 bytes in: no device lets a storage binding start there.
    let view = x.clone().offset_start(4);
    let len = N - 1;
    let graph = client
        .capture(|c| {
            for _ in 0..3 {
                c.launch(
                    &library::ADD,
                    CubeCount::new_1d(len.div_ceil(256) as u32),
                    Bindings::new().buffer(&view).buffer(&ones).buffer(&view),
                )?;
            }
            Ok(())
        })
        .unwrap();
    graph.replay().unwrap();
    graph.replay().unwrap();
    let expected: Vec<f32> = (0..N)
        .map(|i| if i == 0 { 0.0 } else { i as f32 + 9.0 })
        .collect();
    assert_eq!(floats(&client, &x), expected);
    assert_eq!(
        plans(&client),
        0,
        "no plan: the view is copied around each launch"
    );
    Ok(())
}

fn a_replay_over_two_streams_is_one_plan_and_the_second_stream_follows_it() -> Result<(), Skip> {
    let client = wgpu_client_or_skip()?;
    let (first, other) = (
        client.with_stream(StreamId { value: 0 }),
        client.with_stream(StreamId { value: 1 }),
    );
    let x = client.create_from_pod(&[0.0f32; N]);
    let ones = client.create_from_pod(&[1.0f32; N]);
    let y = client.create_from_pod(&[0.0f32; N]);
    let graph = client
        .capture(|_| {
            add_chain(&first, &x, &ones, 2);
            // Follows stream 0's chain: it reads x.
            other.launch(
                &library::ADD,
                cubes(),
                Bindings::new().buffer(&x).buffer(&y).buffer(&y),
            )
        })
        .unwrap();
    for _ in 0..3 {
        graph.replay().unwrap();
    }
    // x: 2 per run; y accumulates x: 2 + 4 + 6 + 8.
    assert_eq!(floats(&client, &x), vec![8.0; N]);
    assert_eq!(floats(&client, &y), vec![20.0; N]);
    assert_eq!(plans(&client), 1, "one plan across both streams");
    // Stream 1's later work follows the replay's launch on it.
    graph.replay().unwrap();
    other
        .launch(
            &library::ADD,
            cubes(),
            Bindings::new().buffer(&y).buffer(&ones).buffer(&y),
        )
        .unwrap();
    other.sync().unwrap();
    assert_eq!(floats(&client, &y), vec![31.0; N]);
    Ok(())
}

/// A frame that writes its input, runs a chain, writes again and runs another: each chain is one
/// plan, the writes land between them, and an update to a write's bytes is seen by the next
/// replay.
fn the_runs_of_launches_between_writes_replay_as_one_plan_each() -> Result<(), Skip> {
    let client = wgpu_client_or_skip()?;
    common::write_chain_frame_replays(&client, plans);
    Ok(())
}

/// A graph captured over two runtimes: each runtime's launches are one plan there, and an update
/// to a launch on one runtime makes a new plan on that runtime only.
fn an_update_to_one_runtimes_commands_leaves_the_other_runtimes_plan() -> Result<(), Skip> {
    let (a, b) = (wgpu_client_or_skip()?, wgpu_client_or_skip()?);
    let x = a.create_from_pod(&[1.0f32; N]);
    let (y, ones) = (
        b.create_from_pod(&[0.0f32; N]),
        b.create_from_pod(&[1.0f32; N]),
    );
    let scale = |c: &ComputeClient<WgpuBackend>, factor: f32| {
        let bindings = Bindings::new().buffer(&x).buffer(&x).scalar_f32(factor);
        c.launch(&library::SCALE, cubes(), bindings)
    };
    let mut graph = gpuworld::Graph::capture_group(&[a.clone(), b.clone()], |clients| {
        scale(&clients[0], 2.0)?;
        scale(&clients[0], 1.0)?;
        add_chain(&clients[1], &y, &ones, 3);
        Ok(())
    })
    .unwrap();
    graph.replay().unwrap();
    assert_eq!(floats(&a, &x), vec![4.0; N]);
    assert_eq!(floats(&b, &y), vec![6.0; N]);
    assert_eq!((plans(&a), plans(&b)), (1, 1), "a plan on each runtime");
    graph.set_scalar_f32(0, 0, 3.0).unwrap();
    graph.replay().unwrap();
    assert_eq!(floats(&a, &x), vec![12.0; N]);
    assert_eq!(floats(&b, &y), vec![9.0; N]);
    assert_eq!(
        (plans(&a), plans(&b)),
        (2, 1),
        "a new plan on the updated runtime only"
    );
    Ok(())
}

/// A replay of 1,000 chained launches goes to the device in several submissions (issue 52), each
/// after the one before: the bytes are the eager run's, replay after replay, and eager work after
/// a replay sees all of it.
fn a_long_replay_submitted_in_segments_has_the_eager_runs_bytes() -> Result<(), Skip> {
    let client = wgpu_client_or_skip()?;
    let x = client.create_from_pod(&[0.0f32; N]);
    let ones = client.create_from_pod(&[1.0f32; N]);
    let graph = client
        .capture(|c| {
            add_chain(c, &x, &ones, 1000);
            Ok(())
        })
        .unwrap();
    assert_eq!(floats(&client, &x), vec![1000.0; N], "the capture's run");
    let submitted =
        |client: &ComputeClient<WgpuBackend>| client.with_runtime(|rt| rt.backend().submissions());
    let before = submitted(&client);
    graph.replay().unwrap();
    client.sync().unwrap();
    // Segments of 64, 128, 256, 256, 256 and 40 dispatches: six submissions, against one or two
    // for the replay recorded whole (a batch past 512 commands is submitted by the poll).
    let submissions = submitted(&client) - before;
    assert!(
        submissions >= 6,
        "a replay of 1,000 launches is submitted in segments: {submissions} submissions"
    );
    graph.replay().unwrap();
    add_chain(&client, &x, &ones, 3);
    assert_eq!(floats(&client, &x), vec![3003.0; N]);
    assert_eq!(plans(&client), 1, "one plan for both replays");
    Ok(())
}
