//! Under `Driver::Manual` nothing ticks behind the host's back: every public call that is not a
//! blocking call leaves the tick counter where it was (each is counted here, one by one), the
//! blocking ones say so, and a future awaited with nobody ticking drives the runtime itself
//! instead of hanging. `ReadTicket` and the futures are `Send + Sync`.

mod common;

use gpuworld::error::BindingError;
use gpuworld::tune::{CacheLocation, ReduceInput, reduce_sum_set};
use gpuworld::{
    Backend, Bindings, ComputeClient, CubeCount, Driver, ExecutionMode, ReadTicket, ReplyFuture,
    SimConfig, TensorDesc, library,
};
use std::sync::Arc;

test_main![
    no_getter_ticks_on_the_cpu_backend,
    no_getter_ticks_on_the_sim_backend,
    #[cfg(feature = "wgpu")]
    no_getter_ticks_on_the_wgpu_backend,
    device_elapsed_does_not_tick,
    block_on_a_read_under_the_manual_driver_ticks_until_its_bytes_arrive,
    a_read_future_polled_once_a_frame_between_host_ticks_never_ticks_itself,
    a_read_ticket_completes_only_when_the_host_ticks,
    a_read_of_a_foreign_handle_fails_at_once_as_a_ticket_and_as_a_future,
    in_flight_counts_commands_tasks_reads_and_frames,
    tickets_and_futures_are_send_and_sync,
];

/// Calls `call` and asserts that the runtime did not tick meanwhile.
fn no_tick<B: Backend, R>(client: &ComputeClient<B>, name: &str, call: impl FnOnce() -> R) -> R {
    let before = client.tick_count();
    let result = call();
    assert_eq!(
        client.tick_count(),
        before,
        "`{name}` ticked the runtime on the {} backend",
        B::NAME
    );
    result
}

/// Every call of the client that is not a blocking call, each with work queued and in flight so
/// that a hidden tick would have something to do.
fn every_getter_leaves_the_tick_counter<B: Backend>(client: ComputeClient<B>) {
    let a = client.create_from_slice(bytemuck::cast_slice(&[1.0f32; 256]));
    let b = client.empty(1024);
    common::scale_first_cube(&client, &a, &b, 2.0);
    // Something in flight for a hidden tick to finish.
    let mut pending = client.read_ticket(&[b.binding()]).unwrap();
    client.tick();
    let c = &client;
    no_tick(c, "stream_id", || c.stream_id());
    no_tick(c, "with_stream", || c.with_stream(c.stream_id()));
    no_tick(c, "driver", || c.driver());
    no_tick(c, "properties", || c.properties().clone());
    no_tick(c, "runtime_id", || c.runtime_id());
    no_tick(c, "tick_count", || c.tick_count());
    no_tick(c, "in_flight", || c.in_flight());
    no_tick(c, "memory_usage", || c.memory_usage());
    no_tick(c, "memory_report", || c.memory_report());
    no_tick(c, "memory_cleanup", || c.memory_cleanup());
    no_tick(c, "snapshot", || c.snapshot());
    no_tick(c, "tune_cache", || c.tune_cache());
    no_tick(c, "with_tune_cache", || c.with_tune_cache(|_| ()));
    no_tick(c, "with_runtime (reading)", || {
        c.with_runtime(|rt| rt.tick_count())
    });
    no_tick(c, "flush", || c.flush());
    no_tick(c, "warm_up", || c.warm_up(&library::ADD).unwrap());
    no_tick(c, "warm_up_mode", || {
        c.warm_up_mode(&library::ADD, ExecutionMode::Unchecked)
            .unwrap()
    });
    no_tick(c, "end_frame", || c.end_frame());
    no_tick(c, "frames_in_flight", || c.frames_in_flight());
    no_tick(c, "empty", || c.empty(64));
    no_tick(c, "create", || c.create(vec![0u8; 64]));
    no_tick(c, "create_from_slice", || c.create_from_slice(&[0u8; 64]));
    no_tick(c, "create_from_pod", || c.create_from_pod(&[0.5f32; 16]));
    no_tick(c, "create_from_slice_pinned", || {
        c.create_from_slice_pinned(&[0u8; 64])
    });
    no_tick(c, "reserve_staging", || c.reserve_staging(&[64]));
    no_tick(c, "write", || c.write(&a, &[0u8; 16]).unwrap());
    no_tick(c, "write_bytes", || {
        c.write_bytes(&a, vec![0u8; 16]).unwrap()
    });
    no_tick(c, "launch", || {
        c.launch(
            &library::FILL,
            CubeCount::new_1d(1),
            Bindings::new().buffer(&b).scalar_f32(3.0),
        )
        .unwrap()
    });
    let desc = TensorDesc {
        shape: &[4, 4],
        elem_size: 4,
    };
    no_tick(c, "create_tensor", || {
        c.create_tensor(&[0u8; 64], &[4, 4], 4).unwrap()
    });
    no_tick(c, "empty_tensor", || c.empty_tensor(&[4, 4], 4).unwrap());
    no_tick(c, "create_tensors", || {
        c.create_tensors(&[(desc, &[0u8; 64][..])]).unwrap()
    });
    no_tick(c, "empty_tensors", || c.empty_tensors(&[desc]).unwrap());
    no_tick(c, "memory_persistent_allocation", || {
        c.memory_persistent_allocation((), |()| c.empty(64))
    });
    no_tick(c, "with_allocation_mode", || {
        c.with_allocation_mode(gpuworld::AllocationMode::Auto, (), |()| c.empty(64))
    });
    no_tick(c, "read_ticket", || c.read_ticket(&[a.binding()]).unwrap());
    // Creating the futures only enqueues; polling them under Manual is what may tick.
    no_tick(c, "read_async", || drop(c.read_async(&[a.binding()])));
    no_tick(c, "sync_async", || drop(c.sync_async()));
    no_tick(c, "ReadTicket::is_ready", || pending.is_ready());
    no_tick(c, "ReadTicket::try_take", || pending.try_take());
    no_tick(c, "submit_tune_result / send_tune_message", || {
        c.send_tune_message(gpuworld::tune::TuneMessage::Failed {
            set: "tests.none".into(),
            key: "1".into(),
        })
    });
    no_tick(c, "Handle drop", || drop(c.empty(64)));
    // The tuner: creating it and a cache hit never tick (tuning itself syncs: blocking calls).
    let tuner = no_tick(c, "Tuner::new", || {
        common::quick_tuner(c, CacheLocation::Disabled)
    });
    no_tick(c, "Tuner::cache_problem", || {
        tuner.cache_problem().is_some()
    });
    no_tick(c, "Tuner::cache_path", || tuner.cache_path().is_some());
    let set = Arc::new(reduce_sum_set::<B>());
    let input = ReduceInput {
        input: c.create_from_slice(bytemuck::cast_slice(&[1.0f32; 4096])),
        len: 4096,
    };
    tuner.select(&set, &input).unwrap();
    no_tick(c, "Tuner::select (a cached key)", || {
        tuner.select(&set, &input).unwrap()
    });
    // The blocking calls do tick, as their documentation says.
    let before = c.tick_count();
    c.sync().unwrap();
    assert!(c.tick_count() > before, "sync is a blocking call and ticks");
}

fn no_getter_ticks_on_the_cpu_backend() {
    every_getter_leaves_the_tick_counter(gpuworld::cpu_client(Driver::Manual).unwrap());
}

fn no_getter_ticks_on_the_sim_backend() {
    every_getter_leaves_the_tick_counter(
        gpuworld::sim_client(SimConfig::default()).expect("the sim opens"),
    );
}

#[cfg(feature = "wgpu")]
fn no_getter_ticks_on_the_wgpu_backend() -> Result<(), common::Skip> {
    let client = common::wgpu_client_with(gpuworld::WgpuConfig::default(), Driver::Manual)?;
    // The render interop getters (docs/render.md) take the runtime lock, never tick.
    no_tick(&client, "wgpu_device", || client.wgpu_device());
    no_tick(&client, "wgpu_queue", || client.wgpu_queue());
    no_tick(&client, "wgpu_host_traffic", || client.wgpu_host_traffic());
    every_getter_leaves_the_tick_counter(client);
    Ok(())
}

fn device_elapsed_does_not_tick() {
    let client = gpuworld::sim_client(SimConfig::default()).expect("the sim opens");
    let start = client.mark().unwrap();
    let end = client.mark().unwrap();
    no_tick(&client, "device_elapsed", || {
        client.device_elapsed(start, end)
    });
}

fn block_on_a_read_under_the_manual_driver_ticks_until_its_bytes_arrive() {
    for latency_ticks in [1, 4] {
        let client = gpuworld::sim_client(SimConfig::default().with_latency_ticks(latency_ticks))
            .expect("the sim opens");
        let a = client.create_from_slice(bytemuck::cast_slice(&[5.0f32; 8]));
        let bytes = futures_executor::block_on(client.read_async(&[a.binding()])).unwrap();
        assert_eq!(common::f32s(&bytes[0]), [5.0; 8]);
        assert!(client.tick_count() >= latency_ticks);
        futures_executor::block_on(client.sync_async()).unwrap();
    }
    let cpu = gpuworld::cpu_client(Driver::Manual).unwrap();
    let a = cpu.create_from_slice(bytemuck::cast_slice(&[7.0f32; 8]));
    let bytes = futures_executor::block_on(cpu.read_async(&[a.binding()])).unwrap();
    assert_eq!(common::f32s(&bytes[0]), [7.0; 8]);
}

fn a_read_future_polled_once_a_frame_between_host_ticks_never_ticks_itself() {
    let client =
        gpuworld::sim_client(SimConfig::default().with_latency_ticks(3)).expect("the sim opens");
    let a = client.create_from_slice(bytemuck::cast_slice(&[4.0f32; 4]));
    let mut read = common::Pending::new(client.read_async(&[a.binding()]));
    let mut frames = 0;
    let bytes = loop {
        frames += 1;
        client.tick();
        if let Some(result) = no_tick(&client, "polling a future after a tick", || read.poll()) {
            break result.unwrap();
        }
        assert!(frames < 10);
    };
    assert_eq!(common::f32s(&bytes[0]), [4.0; 4]);
    assert_eq!(
        client.tick_count(),
        4,
        "submitted at tick 1, done at tick 4"
    );
}

fn a_read_ticket_completes_only_when_the_host_ticks() {
    let client =
        gpuworld::sim_client(SimConfig::default().with_latency_ticks(2)).expect("the sim opens");
    let a = client.create_from_slice(bytemuck::cast_slice(&[3.0f32; 4]));
    let mut ticket = client.read_ticket(&[a.binding()]).unwrap();
    for _ in 0..100 {
        assert!(!ticket.is_ready());
        assert!(ticket.try_take().is_none());
    }
    client.tick();
    client.tick();
    assert!(
        !ticket.is_ready(),
        "the read was submitted at tick 1: done at tick 3"
    );
    client.tick();
    assert!(ticket.is_ready());
    let bytes = ticket.try_take().unwrap().unwrap();
    assert_eq!(common::f32s(&bytes[0]), [3.0; 4]);
    assert!(
        ticket.try_take().is_none(),
        "the bytes are handed over once"
    );
}

fn a_read_of_a_foreign_handle_fails_at_once_as_a_ticket_and_as_a_future() {
    let client = gpuworld::sim_client(SimConfig::default()).expect("the sim opens");
    let other = gpuworld::sim_client(SimConfig::default()).expect("the sim opens");
    let foreign = other.empty(16);
    let error = client.read_ticket(&[foreign.binding()]).unwrap_err();
    assert!(matches!(
        error,
        gpuworld::Error::Binding(BindingError::ForeignHandle { .. })
    ));
    let error = futures_executor::block_on(client.read_async(&[foreign.binding()])).unwrap_err();
    assert!(matches!(
        error,
        gpuworld::Error::Binding(BindingError::ForeignHandle { .. })
    ));
}

fn in_flight_counts_commands_tasks_reads_and_frames() {
    let client =
        gpuworld::sim_client(SimConfig::default().with_latency_ticks(2)).expect("the sim opens");
    let a = client.create_from_slice(&[0u8; 64]);
    let _ticket = client.read_ticket(&[a.binding()]).unwrap();
    client.end_frame();
    let queued = client.in_flight();
    assert_eq!(queued.commands, 3);
    assert_eq!(queued.frames, 1);
    client.tick();
    let submitted = client.in_flight();
    assert_eq!(submitted.commands, 0);
    assert_eq!(
        (submitted.reads, submitted.syncs, submitted.frames),
        (1, 1, 1)
    );
    client.tick();
    client.tick();
    assert!(client.in_flight().is_idle(), "{:?}", client.in_flight());
}

fn tickets_and_futures_are_send_and_sync() {
    fn send_sync<T: Send + Sync + 'static>() {}
    send_sync::<ReadTicket>();
    send_sync::<ReplyFuture<Vec<gpuworld::HostBytes>>>();
    send_sync::<ReplyFuture<()>>();
    send_sync::<ComputeClient<gpuworld::SimBackend>>();
}
