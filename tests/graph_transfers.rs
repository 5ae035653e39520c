//! Graphs that span runtimes (issue 28): a transfer to another runtime (`to_client_into`) inside
//! a capture is recorded and issued again at every replay, and `Graph::capture_group` captures the
//! work of several runtimes in the order it was issued, as a split run's halo exchange needs. A
//! replay gives the eager run's bytes (and, on the sim, its snapshots tick for tick); eager work
//! on either side between replays is ordered as the calls were; the destination range stays
//! with the graph whatever the user drops; a transfer *into* a capturing runtime from one that
//! is not capturing is a typed error, and both runtimes go on.

mod common;

use common::halo::{N, Pair, replay_equals_eager};
use common::{sim_on_stream_0 as sim, without_holds};
use gpuworld::error::GraphError;
use gpuworld::{
    Backend, Bindings, ComputeClient, CubeCount, Driver, Error, FrameGraph, FrameMode, Graph,
    Handle, SimBackend, library,
};

fn cpu() -> ComputeClient<gpuworld::CpuBackend> {
    gpuworld::cpu_client(Driver::DeviceThread).expect("a cpu client")
}

fn floats<B: Backend>(client: &ComputeClient<B>, handle: &Handle) -> Vec<f32> {
    client.read_one_as::<f32>(handle).expect("read")
}

#[test]
fn a_halo_exchange_captured_over_two_runtimes_replays_to_the_eager_runs_bytes() {
    replay_equals_eager(Pair::new(cpu(), cpu()), Pair::new(cpu(), cpu()));
    replay_equals_eager(Pair::new(sim(), sim()), Pair::new(sim(), sim()));
}

#[cfg(feature = "wgpu")]
#[test]
fn a_halo_exchange_captured_over_two_wgpu_runtimes_replays_to_the_eager_runs_bytes() {
    let client = || match gpuworld::wgpu_client(gpuworld::WgpuConfig::default()) {
        Ok(client) => Some(client),
        Err(error) if std::env::var_os("GPUWORLD_REQUIRE_WGPU").is_some() => {
            panic!("GPUWORLD_REQUIRE_WGPU=1 but there is no wgpu adapter: {error}")
        }
        Err(error) => {
            eprintln!("SKIPPED: no wgpu adapter: {error}");
            None
        }
    };
    let (Some(a), Some(b), Some(c), Some(d)) = (client(), client(), client(), client()) else {
        return;
    };
    replay_equals_eager(Pair::new(a, b), Pair::new(c, d));
}

#[test]
fn on_the_sim_a_replayed_halo_exchange_gives_the_eager_runs_snapshots_tick_for_tick() {
    let (eager, replayed) = (Pair::new(sim(), sim()), Pair::new(sim(), sim()));
    let graph = Graph::capture_group(&replayed.clients(), |clients| replayed.step(clients))
        .expect("the capture");
    eager.step(&eager.clients()).expect("an eager step");
    let tick = |pair: &Pair<SimBackend>| {
        pair.a.tick();
        pair.b.tick();
        (
            without_holds(&pair.a.snapshot()),
            without_holds(&pair.b.snapshot()),
        )
    };
    for round in 0..6 {
        if round > 0 {
            eager.step(&eager.clients()).expect("an eager step");
            graph.replay().expect("a replay");
        }
        for t in 0..4 {
            assert_eq!(tick(&replayed), tick(&eager), "round {round}, tick {t}");
        }
    }
    assert_eq!(replayed.state(), eager.state());
}

#[test]
fn a_transfer_between_backends_inside_a_capture_replays() {
    // The source's capture records the transfer; the destination (another backend) is not
    // capturing and runs its own work eagerly.
    let (a, b) = (cpu(), sim());
    let x = a.create_from_pod(&[1.0f32; N]);
    let y = b.create_from_pod(&[0.0f32; N]);
    let graph = a
        .capture(|c| {
            let doubled = Bindings::new().buffer(&x).buffer(&x).buffer(&x);
            c.launch(&library::ADD, CubeCount::new_1d(4), doubled)?;
            c.to_client_into(&x, &b, &y)
        })
        .expect("the capture");
    assert_eq!(graph.len(), 2);
    assert_eq!(graph.buffers(), 2, "`x` on the cpu, `y` on the sim");
    let listing = graph.commands();
    assert!(
        listing[1].starts_with("1: transfer 4096 bytes of handle"),
        "{listing:?}"
    );
    assert_eq!(floats(&b, &y), vec![2.0; N]);
    for round in 2..6 {
        graph.replay().unwrap();
        assert_eq!(floats(&b, &y), vec![(1u32 << round) as f32; N]);
    }
}

#[test]
fn a_destination_the_user_drops_stays_with_the_graph_until_the_graph_goes() {
    let (a, b) = (cpu(), cpu());
    let x = a.create_from_pod(&[5.0f32; N]);
    let mut received = None;
    let graph = a
        .capture(|c| {
            received = Some(c.to_client(&x, &b)?);
            Ok(())
        })
        .expect("the capture");
    let received = received.expect("the capture's handle");
    assert_eq!(floats(&b, &received), vec![5.0; N]);
    drop(received);
    // Allocations of the dropped size on the destination never land where replays still write.
    let others: Vec<Handle> = (0..8).map(|_| b.create_from_pod(&[7.0f32; N])).collect();
    for _ in 0..4 {
        graph.replay().unwrap();
    }
    for other in &others {
        assert_eq!(floats(&b, other), vec![7.0; N]);
    }
    let held = b.memory_usage().number_allocs;
    drop(graph);
    b.sync().unwrap();
    let after = b.memory_usage().number_allocs;
    assert_eq!(after + 1, held, "the graph's drop lets the destination go");
}

#[test]
fn a_transfer_into_a_capturing_runtime_is_refused_and_both_runtimes_go_on() {
    let (a, b) = (cpu(), cpu());
    let x = a.create_from_pod(&[3.0f32; N]);
    let y = b.create_from_pod(&[0.0f32; N]);
    let refused = b.capture(|c| a.to_client_into(&x, c, &y));
    match refused {
        Err(Error::Graph(GraphError::NotCapturable { call })) => {
            assert!(call.contains("source's client"), "{call}");
        }
        other => panic!("expected NotCapturable, got {other:?}"),
    }
    // Both runtimes go on: the same transfer, eager, arrives.
    a.to_client_into(&x, &b, &y).unwrap();
    assert_eq!(floats(&b, &y), vec![3.0; N]);
    // And a capture on the source works.
    let graph = a.capture(|c| c.to_client_into(&x, &b, &y)).unwrap();
    b.write(&y, bytemuck::cast_slice(&[0.0f32; N])).unwrap();
    graph.replay().unwrap();
    assert_eq!(floats(&b, &y), vec![3.0; N]);
}

#[test]
fn a_group_capture_over_a_runtime_capturing_already_is_refused() {
    let (a, b) = (cpu(), cpu());
    let outcome = a.capture(|_| {
        let nested = Graph::capture_group(&[a.clone(), b.clone()], |_| Ok(()));
        assert!(matches!(
            nested,
            Err(Error::Graph(GraphError::NestedCapture))
        ));
        Ok(())
    });
    assert!(outcome.is_ok(), "{outcome:?}");
    // `b`'s capture was closed again: a capture there works.
    let x = b.create_from_pod(&[1.0f32; N]);
    let graph = Graph::capture_group(std::slice::from_ref(&b), |clients| {
        let doubled = Bindings::new().buffer(&x).buffer(&x).buffer(&x);
        clients[0].launch(&library::ADD, CubeCount::new_1d(4), doubled)
    })
    .unwrap();
    graph.replay().unwrap();
    assert_eq!(floats(&b, &x), vec![4.0; N]);
}

#[test]
fn a_frame_graph_replays_frames_with_transfers_and_goes_eager_when_they_change() {
    let (a, b) = (cpu(), cpu());
    let x = a.create_from_pod(&[1.0f32; N]);
    let y = b.create_from_pod(&[0.0f32; N]);
    let z = b.create_from_pod(&[0.0f32; N]);
    let mut frames = FrameGraph::new(&a, 2);
    let mut modes = Vec::new();
    let mut expected = 1.0f32;
    for frame in 0..8 {
        // Frame 5 sends to `z` instead: the graph is dropped and the frame runs eagerly.
        let target = if frame == 5 { &z } else { &y };
        let mode = frames
            .run(|c| {
                let doubled = Bindings::new().buffer(&x).buffer(&x).buffer(&x);
                c.launch(&library::ADD, CubeCount::new_1d(4), doubled)?;
                c.to_client_into(&x, &b, target)
            })
            .unwrap();
        modes.push(mode);
        expected *= 2.0;
        assert_eq!(floats(&b, target), vec![expected; N], "frame {frame}");
    }
    use FrameMode::*;
    assert_eq!(
        modes,
        [
            Eager, Captured, Replayed, Replayed, Replayed, Changed, Eager, Captured
        ]
    );
}
