//! Captured graphs on CUDA (issue 28): a replay of launches on one stream runs as one CUDA graph
//! (captured from the stream at its first replay, one `cuGraphLaunch` after), with the bytes of
//! the eager run; an update makes a fresh CUDA graph; eager writes between replays are seen by the
//! next one; a replay over two streams is one CUDA graph with a lane per stream, ordered where
//! the streams share buffers, and each stream's later work follows it. Needs a GPU.

mod common;

use common::halo::{Pair, replay_equals_eager};
use common::{Skip, add_chain, cuda_client_or_skip, floats};
use gpuworld::{Bindings, ComputeClient, CubeCount, CudaBackend, StreamId, library};

test_main![
    a_replay_runs_as_one_cuda_graph_with_the_eager_runs_bytes,
    an_update_changes_the_cuda_graph_in_place_and_writes_between_replays_are_seen,
    a_replay_over_two_streams_is_one_cuda_graph_with_a_lane_per_stream,
    a_halo_exchange_of_peer_copies_captured_over_two_runtimes_replays_to_the_eager_bytes,
    a_halo_exchange_over_manual_runtimes_replays_to_the_eager_bytes,
    graphs_of_transfers_made_and_dropped_one_after_another_replay_their_bytes,
    the_runs_of_launches_between_writes_replay_as_one_cuda_graph_each,
];

const N: usize = 1 << 12;

fn executables(client: &ComputeClient<CudaBackend>) -> usize {
    client.with_runtime(|rt| rt.backend().graph_executables())
}

fn a_replay_runs_as_one_cuda_graph_with_the_eager_runs_bytes() -> Result<(), Skip> {
    let client = cuda_client_or_skip()?;
    let x = client.create_from_pod(&[0.0f32; N]);
    let ones = client.create_from_pod(&[1.0f32; N]);
    let graph = client
        .capture(|c| {
            add_chain(c, &x, &ones, 100);
            Ok(())
        })
        .unwrap();
    assert_eq!(floats(&client, &x), vec![100.0; N], "the capture's run");
    assert_eq!(executables(&client), 0, "nothing replayed yet");
    for round in 1..=20 {
        graph.replay().unwrap();
        if round % 5 == 0 {
            assert_eq!(floats(&client, &x), vec![100.0 * (round + 1) as f32; N]);
        }
    }
    assert_eq!(executables(&client), 1, "one CUDA graph, made once");
    // Eager launches after the replays see their results, and the other way round: the run,
    // 20 replays, 3 eager launches and one more replay.
    add_chain(&client, &x, &ones, 3);
    graph.replay().unwrap();
    assert_eq!(floats(&client, &x), vec![2203.0; N]);
    Ok(())
}

fn an_update_changes_the_cuda_graph_in_place_and_writes_between_replays_are_seen()
-> Result<(), Skip> {
    let client = cuda_client_or_skip()?;
    let x = client.create_from_pod(&[1.0f32; N]);
    let y = client.empty((N * 4) as u64);
    let z = client.empty((N * 4) as u64);
    let cubes = CubeCount::new_1d(N.div_ceil(256) as u32);
    let mut graph = client
        .capture(|c| {
            c.launch(
                &library::SCALE,
                cubes,
                Bindings::new().buffer(&x).buffer(&y).scalar_f32(2.0),
            )?;
            c.launch(
                &library::ADD,
                cubes,
                Bindings::new().buffer(&y).buffer(&x).buffer(&z),
            )
        })
        .unwrap();
    for value in [3.0f32, -0.5, 7.25] {
        client.write(&x, bytemuck::cast_slice(&[value; N])).unwrap();
        graph.replay().unwrap();
        assert_eq!(floats(&client, &z), vec![value * 3.0; N]);
    }
    assert_eq!(executables(&client), 1);
    graph.set_scalar_f32(0, 0, 10.0).unwrap();
    client
        .write(&x, bytemuck::cast_slice(&[2.0f32; N]))
        .unwrap();
    graph.replay().unwrap();
    assert_eq!(floats(&client, &z), vec![22.0; N]);
    assert_eq!(executables(&client), 1, "the older version's graph went");
    assert_eq!(
        client.with_runtime(|rt| rt.backend().graph_captures_and_updates()),
        (1, 1),
        "the scalar went into the executable (`cuGraphExecKernelNodeSetParams`), no new capture"
    );
    // The user drops its handles; the graph still has them.
    drop((x, y));
    graph.replay().unwrap();
    assert_eq!(floats(&client, &z), vec![22.0; N]);
    // Several updates between two replays: the last value of each is what runs.
    graph.set_scalar_f32(0, 0, 4.0).unwrap();
    graph.set_scalar_f32(0, 0, 0.5).unwrap();
    graph.replay().unwrap();
    assert_eq!(floats(&client, &z), vec![3.0; N]);
    assert_eq!(
        client.with_runtime(|rt| rt.backend().graph_captures_and_updates()),
        (1, 2)
    );
    Ok(())
}

fn a_replay_over_two_streams_is_one_cuda_graph_with_a_lane_per_stream() -> Result<(), Skip> {
    let client = cuda_client_or_skip()?;
    // Explicit streams: a thread's own stream may have any number, 1 included.
    let (first, other) = (
        client.with_stream(StreamId { value: 0 }),
        client.with_stream(StreamId { value: 1 }),
    );
    let x = client.create_from_pod(&[0.0f32; N]);
    let ones = client.create_from_pod(&[1.0f32; N]);
    let y = client.create_from_pod(&[0.0f32; N]);
    // A chain of its own on stream 1, sharing nothing with stream 0's until the last launch.
    let w = client.create_from_pod(&[0.0f32; N]);
    let cubes = CubeCount::new_1d(N.div_ceil(256) as u32);
    let graph = client
        .capture(|_| {
            add_chain(&first, &x, &ones, 4);
            add_chain(&other, &w, &ones, 3);
            // Follows stream 0's chain (it reads x), and stream 1's (it writes y after w).
            other.launch(
                &library::ADD,
                cubes,
                Bindings::new().buffer(&x).buffer(&y).buffer(&y),
            )?;
            // Stream 0 again: follows that launch on stream 1 (it reads y).
            first.launch(
                &library::ADD,
                cubes,
                Bindings::new().buffer(&y).buffer(&w).buffer(&w),
            )
        })
        .unwrap();
    // The capture's run: x 4, w 3, y 4, w 7.
    for _ in 0..3 {
        graph.replay().unwrap();
    }
    // x: 4 per run. y accumulates x: 4 + 8 + 12 + 16 = 40. w: +3 then +y each run:
    // 3 + 4 = 7; 10 + 12 = 22; 25 + 24 = 49; 52 + 40 = 92.
    assert_eq!(floats(&client, &x), vec![16.0; N]);
    assert_eq!(floats(&client, &y), vec![40.0; N]);
    assert_eq!(floats(&client, &w), vec![92.0; N]);
    assert_eq!(
        executables(&client),
        1,
        "one CUDA graph across both streams"
    );
    // Stream 1's later work follows the replay's launches on it: an eager launch there sees y.
    graph.replay().unwrap();
    other
        .launch(
            &library::ADD,
            cubes,
            Bindings::new().buffer(&y).buffer(&ones).buffer(&y),
        )
        .unwrap();
    other.sync().unwrap();
    assert_eq!(floats(&client, &y), vec![61.0; N]);
    assert_eq!(executables(&client), 1);
    Ok(())
}

/// Peer copies (`cuMemcpyPeerAsync` with events on both sides) inside a graph captured over two
/// runtimes: between two clients of one GPU, and between two GPUs where there are two.
fn a_halo_exchange_of_peer_copies_captured_over_two_runtimes_replays_to_the_eager_bytes()
-> Result<(), Skip> {
    let pair = || -> Result<Pair<CudaBackend>, Skip> {
        Ok(Pair::new(cuda_client_or_skip()?, cuda_client_or_skip()?))
    };
    replay_equals_eager(pair()?, pair()?);
    if let Ok(gpus) = common::cuda_clients_or_skip(2) {
        let mut more = common::cuda_clients_or_skip(2)?.into_iter();
        let mut gpus = gpus.into_iter();
        let (Some(a), Some(b), Some(c), Some(d)) =
            (gpus.next(), gpus.next(), more.next(), more.next())
        else {
            return Ok(());
        };
        replay_equals_eager(Pair::new(a, b), Pair::new(c, d));
    }
    Ok(())
}

/// The same over runtimes only their owner ticks: a part waiting for the other runtime's drives
/// it, so a read on either side finishes the replay.
fn a_halo_exchange_over_manual_runtimes_replays_to_the_eager_bytes() -> Result<(), Skip> {
    let manual = || -> Result<ComputeClient<CudaBackend>, Skip> {
        // Skips (or fails under GPUWORLD_REQUIRE_CUDA) where there is no driver.
        drop(cuda_client_or_skip()?);
        let backend = CudaBackend::new(gpuworld::CudaConfig::default())
            .map_err(|error| Skip(format!("{error}")))?;
        Ok(ComputeClient::new(
            backend,
            gpuworld::RuntimeConfig::default(),
            gpuworld::Driver::Manual,
        ))
    };
    replay_equals_eager(
        Pair::new(manual()?, manual()?),
        Pair::new(manual()?, manual()?),
    );
    Ok(())
}

/// Graphs of one transfer made, replayed twice and dropped, one after another: each replays
/// exactly its run's bytes, and the destination's pins come and go.
fn graphs_of_transfers_made_and_dropped_one_after_another_replay_their_bytes() -> Result<(), Skip> {
    let (a, b) = (cuda_client_or_skip()?, cuda_client_or_skip()?);
    let x = a.create_from_pod(&[1.0f32; N]);
    let y = b.create_from_pod(&[0.0f32; N]);
    for round in 0..20u32 {
        let graph = a.capture(|c| c.to_client_into(&x, &b, &y)).unwrap();
        a.write(&x, bytemuck::cast_slice(&[round as f32; N]))
            .unwrap();
        graph.replay().unwrap();
        graph.replay().unwrap();
        assert_eq!(floats(&b, &y), vec![round as f32; N], "round {round}");
    }
    Ok(())
}

/// A frame with writes between two chains: each chain is one CUDA graph, made once; the writes
/// land between them, and an update to a write's bytes is seen by the next replay.
fn the_runs_of_launches_between_writes_replay_as_one_cuda_graph_each() -> Result<(), Skip> {
    let client = cuda_client_or_skip()?;
    common::write_chain_frame_replays(&client, |c| executables(c) as u64);
    Ok(())
}
