//! Render interop (docs/render.md): the wgpu backend on a device the test opens as a renderer
//! would, leases of handles read by the "renderer"'s own copies on that device's queue, the
//! order of gpuworld's writes against the renderer's submissions, the typed errors, and a lease
//! in the sim's snapshot. wgpu tests are reported ignored on a machine without an adapter.

mod common;

use common::{Skip, bytes_of, f32s, no_wgpu_adapter, wgpu_required};
use gpuworld::error::{BindingError, DeviceError};
use gpuworld::{
    Binding, Bindings, ComputeClient, CubeCount, Driver, Error, Graph, Leasable, SharedDeviceError,
    SimConfig, WgpuBackend, WgpuConfig, library, wgpu,
};

test_main![
    a_renderers_device_runs_gpuworld_and_its_queue_orders_both,
    a_device_with_limits_too_low_is_refused_naming_each_limit,
    a_leased_handle_released_keeps_its_bytes_while_many_allocations_follow,
    writes_before_a_lease_are_seen_and_writes_after_the_frame_come_after_it,
    a_lease_outliving_its_runtime_still_reads_its_bytes,
    a_lease_of_a_released_handle_or_of_another_runtime_is_a_typed_error,
    leased_buffers_bind_as_vertices_indices_and_uniforms,
    several_leases_at_once_submit_once_and_fail_together,
    a_lease_shows_as_a_pin_in_the_sim_snapshot,
    a_leased_handle_released_is_refused_to_reads_writes_launches_and_leases_on_the_sim,
    a_leased_handle_released_is_refused_to_reads_writes_launches_and_leases_on_wgpu,
    a_handle_a_graph_pins_released_is_refused_to_the_user_while_replays_still_use_it,
];

/// A renderer's device: its own instance, adapter and device with `limits`. The tests run in
/// parallel, each with its own renderer: the device is opened and dropped under gpuworld's device
/// lifecycle lock, as NVIDIA's Vulkan driver deadlocks on `vkCreateDevice` and `vkDestroyDevice`
/// on two threads at once (`gpuworld::wgpu_device_lifecycle`).
struct Renderer(std::mem::ManuallyDrop<RendererParts>);

/// What a renderer holds.
struct RendererParts {
    adapter: wgpu::Adapter,
    device: wgpu::Device,
    queue: wgpu::Queue,
}

impl std::ops::Deref for Renderer {
    type Target = RendererParts;

    fn deref(&self) -> &RendererParts {
        &self.0
    }
}

impl Drop for Renderer {
    fn drop(&mut self) {
        // SAFETY: `self.0` is taken once, here, and never used again.
        let parts = unsafe { std::mem::ManuallyDrop::take(&mut self.0) };
        // The device's last handles (a client on it is dropped first) go under the lock.
        gpuworld::wgpu_device_lifecycle(move || drop(parts));
    }
}

fn renderer_with(limits: impl FnOnce(&wgpu::Adapter) -> wgpu::Limits) -> Result<Renderer, Skip> {
    let instance =
        wgpu::Instance::new(wgpu::InstanceDescriptor::new_without_display_handle_from_env());
    let adapter = match pollster::block_on(instance.request_adapter(&Default::default())) {
        Ok(adapter) => adapter,
        Err(error) if wgpu_required() => panic!("GPUWORLD_REQUIRE_WGPU=1 but no adapter: {error}"),
        Err(error) => return Err(no_wgpu_adapter(error)),
    };
    let required_limits = limits(&adapter);
    let (device, queue) = gpuworld::wgpu_device_lifecycle(|| {
        pollster::block_on(adapter.request_device(&wgpu::DeviceDescriptor {
            label: Some("renderer"),
            required_limits,
            ..Default::default()
        }))
    })
    .map_err(no_wgpu_adapter)?;
    Ok(Renderer(std::mem::ManuallyDrop::new(RendererParts {
        adapter,
        device,
        queue,
    })))
}

fn renderer() -> Result<Renderer, Skip> {
    renderer_with(wgpu::Adapter::limits)
}

/// A client on the renderer's device, ticked by hand.
fn client_on(renderer: &Renderer) -> ComputeClient<WgpuBackend> {
    gpuworld::wgpu_client_on_device(
        &renderer.adapter,
        renderer.device.clone(),
        renderer.queue.clone(),
        WgpuConfig::default(),
        Driver::Manual,
    )
    .unwrap()
}

/// What the renderer reads of `buffer[offset..offset + size]` with a copy it submits now.
fn renderer_reads(renderer: &Renderer, buffer: &wgpu::Buffer, offset: u64, size: u64) -> Vec<u8> {
    let staging = renderer.device.create_buffer(&wgpu::BufferDescriptor {
        label: Some("renderer readback"),
        size,
        usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
        mapped_at_creation: false,
    });
    let mut encoder = renderer.device.create_command_encoder(&Default::default());
    encoder.copy_buffer_to_buffer(buffer, offset, &staging, 0, size);
    renderer.queue.submit([encoder.finish()]);
    staging
        .slice(..)
        .map_async(wgpu::MapMode::Read, |r| r.unwrap());
    renderer
        .device
        .poll(wgpu::PollType::wait_indefinitely())
        .unwrap();
    staging.slice(..).get_mapped_range().unwrap().to_vec()
}

fn a_renderers_device_runs_gpuworld_and_its_queue_orders_both() -> Result<(), Skip> {
    let renderer = renderer()?;
    let client = client_on(&renderer);
    assert!(
        client.wgpu_device() == renderer.device,
        "the client runs on the renderer's device"
    );
    let data = client.create(bytes_of(&[1.0, 2.0, 3.0, 4.0]));
    let lease = client.lease(&data).unwrap();
    // The renderer writes the bytes on the shared queue after the lease: gpuworld's read, submitted
    // later on the same queue, sees the renderer's write.
    renderer.queue.write_buffer(
        lease.buffer(),
        lease.offset(),
        &bytes_of(&[9.0, 8.0, 7.0, 6.0]),
    );
    renderer.queue.submit([]);
    drop(lease);
    assert_eq!(f32s(&client.read_one(&data).unwrap()), [9.0, 8.0, 7.0, 6.0]);
    Ok(())
}

fn a_device_with_limits_too_low_is_refused_naming_each_limit() -> Result<(), Skip> {
    let renderer = renderer_with(|adapter| wgpu::Limits {
        max_storage_buffers_per_shader_stage: 2,
        max_compute_workgroup_size_x: 64,
        ..adapter.limits()
    })?;
    let error = WgpuBackend::on_device(
        &renderer.adapter,
        renderer.device.clone(),
        renderer.queue.clone(),
        WgpuConfig::default(),
    )
    .unwrap_err();
    let SharedDeviceError::LimitsTooLow { limits, .. } = &error else {
        panic!("not LimitsTooLow: {error}");
    };
    let mut names: Vec<_> = limits.iter().map(|l| (l.name, l.has)).collect();
    names.sort();
    assert_eq!(
        names,
        [
            ("max_compute_workgroup_size_x", 64),
            ("max_storage_buffers_per_shader_stage", 2)
        ]
    );
    let message = error.to_string();
    assert!(
        message.contains("max_storage_buffers_per_shader_stage is 2, needs at least"),
        "{message}"
    );
    let through_client = gpuworld::wgpu_client_on_device(
        &renderer.adapter,
        renderer.device.clone(),
        renderer.queue.clone(),
        WgpuConfig::default(),
        Driver::Manual,
    )
    .unwrap_err();
    assert!(
        matches!(&through_client, Error::Device(DeviceError::BackendUnavailable { reason, .. }) if reason.contains("max_compute_workgroup_size_x")),
        "{through_client}"
    );
    Ok(())
}

fn a_leased_handle_released_keeps_its_bytes_while_many_allocations_follow() -> Result<(), Skip> {
    let renderer = renderer()?;
    let client = client_on(&renderer);
    let old: Vec<f32> = (0..1024).map(|i| i as f32).collect();
    let leased = client.create(bytes_of(&old));
    let lease = client.lease(&leased).unwrap();
    drop(leased);
    let mut others = Vec::new();
    for round in 0..64 {
        let other = client.create(bytes_of(&vec![-1.0 - round as f32; 1024]));
        client.sync().unwrap();
        others.push(other);
        if round % 2 == 0 {
            // Half of them go back at once: the pool has free ranges of the size to hand out.
            others.pop();
        }
        client.memory_cleanup();
        client.tick();
    }
    client.sync().unwrap();
    let read = renderer_reads(&renderer, lease.buffer(), lease.offset(), lease.size());
    assert_eq!(
        f32s(&read),
        old,
        "the renderer reads the leased handle's bytes"
    );
    drop(lease);
    // Let go of: the memory goes back to the pool, and the runtime keeps working.
    client.tick();
    let fresh = client.create(bytes_of(&[5.0; 1024]));
    assert_eq!(f32s(&client.read_one(&fresh).unwrap()), vec![5.0; 1024]);
    Ok(())
}

fn writes_before_a_lease_are_seen_and_writes_after_the_frame_come_after_it() -> Result<(), Skip> {
    let renderer = renderer()?;
    let client = client_on(&renderer);
    let data = client.empty(16);
    client
        .write(&data, &bytes_of(&[1.0, 1.0, 1.0, 1.0]))
        .unwrap();
    // No sync: the lease itself submits the write before handing out the buffer.
    let lease = client.lease(&data).unwrap();
    let frame_target = renderer.device.create_buffer(&wgpu::BufferDescriptor {
        label: Some("frame"),
        size: 16,
        usage: wgpu::BufferUsages::COPY_SRC | wgpu::BufferUsages::COPY_DST,
        mapped_at_creation: false,
    });
    // The frame: the renderer copies the leased bytes and submits.
    let mut encoder = renderer.device.create_command_encoder(&Default::default());
    encoder.copy_buffer_to_buffer(lease.buffer(), lease.offset(), &frame_target, 0, 16);
    renderer.queue.submit([encoder.finish()]);
    drop(lease);
    // gpuworld's next write, enqueued after the frame was submitted, runs after it.
    client
        .write(&data, &bytes_of(&[2.0, 2.0, 2.0, 2.0]))
        .unwrap();
    client.sync().unwrap();
    assert_eq!(
        f32s(&renderer_reads(&renderer, &frame_target, 0, 16)),
        [1.0; 4]
    );
    let next = client.lease(&data).unwrap();
    assert_eq!(
        f32s(&renderer_reads(&renderer, next.buffer(), next.offset(), 16)),
        [2.0; 4]
    );
    Ok(())
}

fn a_lease_outliving_its_runtime_still_reads_its_bytes() -> Result<(), Skip> {
    let renderer = renderer()?;
    let client = client_on(&renderer);
    let data = client.create(bytes_of(&[3.0, 1.0, 4.0, 1.0]));
    let lease = client.lease(&data).unwrap();
    drop(data);
    drop(client);
    let read = renderer_reads(&renderer, lease.buffer(), lease.offset(), lease.size());
    assert_eq!(f32s(&read), [3.0, 1.0, 4.0, 1.0]);
    drop(lease);
    Ok(())
}

fn a_lease_of_a_released_handle_or_of_another_runtime_is_a_typed_error() -> Result<(), Skip> {
    let renderer = renderer()?;
    let client = client_on(&renderer);
    let other = client_on(&renderer);
    let theirs = other.create(bytes_of(&[1.0]));
    let error = client.lease(&theirs).unwrap_err();
    assert!(
        matches!(error, Error::Binding(BindingError::ForeignHandle { .. })),
        "{error}"
    );
    let released = client.create(bytes_of(&[1.0]));
    let binding = released.binding();
    drop(released);
    let error = client.lease(binding).unwrap_err();
    assert!(
        matches!(error, Error::Binding(BindingError::ReleasedHandle { .. })),
        "{error}"
    );
    // Still usable.
    let kept = client.create(bytes_of(&[7.0]));
    assert_eq!(client.lease(&kept).unwrap().size(), 4);
    Ok(())
}

fn leased_buffers_bind_as_vertices_indices_and_uniforms() -> Result<(), Skip> {
    let renderer = renderer()?;
    let client = client_on(&renderer);
    let data = client.create(bytes_of(&[0.0; 64]));
    let lease = client.lease(&data).unwrap();
    let usage = lease.buffer().usage();
    for needed in [
        wgpu::BufferUsages::VERTEX,
        wgpu::BufferUsages::INDEX,
        wgpu::BufferUsages::UNIFORM,
        wgpu::BufferUsages::STORAGE,
    ] {
        assert!(usage.contains(needed), "{usage:?} lacks {needed:?}");
    }
    Ok(())
}

fn a_lease_shows_as_a_pin_in_the_sim_snapshot() {
    let client = gpuworld::sim_client(SimConfig::default()).unwrap();
    let data = client.create(bytes_of(&[1.0, 2.0]));
    let lease = client.lease(&data).unwrap();
    client.tick();
    // A lease is the pin a captured graph takes, and the snapshot names it as a lease.
    let pinned = client.snapshot();
    assert!(pinned.contains("live, held by 1 lease"), "{pinned}");
    let second = client.lease(&data).unwrap();
    client.tick();
    let twice = client.snapshot();
    assert!(twice.contains("live, held by 2 leases"), "{twice}");
    drop(second);
    drop(data);
    client.tick();
    let released = client.snapshot();
    assert!(released.contains("released, held by 1 lease"), "{released}");
    drop(lease);
    client.tick();
    client.tick();
    let after = client.snapshot();
    assert!(!after.contains("held by"), "{after}");
}

fn several_leases_at_once_submit_once_and_fail_together() -> Result<(), Skip> {
    let renderer = renderer()?;
    let client = client_on(&renderer);
    let a = client.create(bytes_of(&[1.0, 2.0]));
    let b = client.create(bytes_of(&[3.0]));
    let leases = client.leases([&a, &b]).unwrap();
    assert_eq!(leases.iter().map(|l| l.size()).collect::<Vec<_>>(), [8, 4]);
    let read = renderer_reads(&renderer, leases[1].buffer(), leases[1].offset(), 4);
    assert_eq!(f32s(&read), [3.0]);
    drop(leases);
    // One released binding among them: an error, and neither handle stays pinned.
    let gone = client.create(bytes_of(&[5.0]));
    let binding = gone.binding();
    drop(gone);
    let error = client.leases([a.binding(), binding]).unwrap_err();
    assert!(
        matches!(error, Error::Binding(BindingError::ReleasedHandle { .. })),
        "{error}"
    );
    client.tick();
    assert!(
        !client.snapshot().contains("held by"),
        "{}",
        client.snapshot()
    );
    Ok(())
}

/// Asserts that `result`, or else the stream's next sync, is `ReleasedHandle`: a write or a
/// launch is either refused at the call or faults its stream.
fn released_at_call_or_sync<B: Leasable>(
    client: &ComputeClient<B>,
    result: gpuworld::Result<()>,
    what: &str,
) {
    let error = match result {
        Err(error) => error,
        Ok(()) => client
            .sync()
            .expect_err(&format!("{what} of a released, leased handle must fail")),
    };
    assert!(
        matches!(error, Error::Binding(BindingError::ReleasedHandle { .. })),
        "{what}: {error}"
    );
}

/// A handle released while a lease pins it: its binding is refused by a read, a write, a launch
/// and another lease, as any released handle's (the pin keeps the memory for the lease only),
/// and nothing is written to the leased bytes. Returns the lease and the released binding.
fn released_but_leased_is_refused<B: Leasable>(
    client: &ComputeClient<B>,
) -> (gpuworld::Lease<B>, Binding) {
    let data = client.create(bytes_of(&[1.0, 2.0, 3.0, 4.0]));
    let lease = client.lease(&data).unwrap();
    let binding = data.binding();
    drop(data);
    let error = client.read(&[binding]).unwrap_err();
    assert!(
        matches!(error, Error::Binding(BindingError::ReleasedHandle { .. })),
        "read: {error}"
    );
    released_at_call_or_sync(
        client,
        client.write(binding, &bytes_of(&[9.0; 4])),
        "a write",
    );
    let launched = client.launch(
        &library::FILL,
        CubeCount::new_1d(1),
        Bindings::new().buffer(binding).scalar_f32(5.0),
    );
    released_at_call_or_sync(client, launched, "a launch");
    let error = client.lease(binding).unwrap_err();
    assert!(
        matches!(error, Error::Binding(BindingError::ReleasedHandle { .. })),
        "a second lease: {error}"
    );
    client
        .sync()
        .expect("each refusal reported once; the stream works again");
    (lease, binding)
}

fn a_leased_handle_released_is_refused_to_reads_writes_launches_and_leases_on_the_sim() {
    let client = gpuworld::sim_client(SimConfig::default()).unwrap();
    let (lease, _) = released_but_leased_is_refused(&client);
    client.tick();
    assert!(
        client.snapshot().contains("released, held by 1 lease"),
        "{}",
        client.snapshot()
    );
    drop(lease);
    client.tick();
    client.tick();
    assert!(
        !client.snapshot().contains("held by"),
        "{}",
        client.snapshot()
    );
}

fn a_leased_handle_released_is_refused_to_reads_writes_launches_and_leases_on_wgpu()
-> Result<(), Skip> {
    let renderer = renderer()?;
    let client = client_on(&renderer);
    let (lease, _) = released_but_leased_is_refused(&client);
    // The refused write and launch wrote nothing: the renderer still reads the leased bytes.
    let read = renderer_reads(&renderer, lease.buffer(), lease.offset(), lease.size());
    assert_eq!(f32s(&read), [1.0, 2.0, 3.0, 4.0]);
    drop(lease);
    let kept = client.create(bytes_of(&[7.0]));
    assert_eq!(f32s(&client.read_one(&kept).unwrap()), [7.0]);
    Ok(())
}

fn a_handle_a_graph_pins_released_is_refused_to_the_user_while_replays_still_use_it() {
    let client = gpuworld::sim_client(SimConfig::default()).unwrap();
    let data = client.create(bytes_of(&[0.0; 4]));
    let graph: Graph<_> = client
        .capture(|c| {
            c.launch(
                &library::FILL,
                CubeCount::new_1d(1),
                Bindings::new().buffer(&data).scalar_f32(3.0),
            )
        })
        .unwrap();
    let binding = data.binding();
    drop(data);
    // The graph's own commands still name the pinned memory.
    graph.replay().unwrap();
    client
        .sync()
        .expect("a replay over a released handle the graph pins runs");
    // The user's do not.
    let error = client.read(&[binding]).unwrap_err();
    assert!(
        matches!(error, Error::Binding(BindingError::ReleasedHandle { .. })),
        "read: {error}"
    );
    released_at_call_or_sync(
        &client,
        client.write(binding, &bytes_of(&[9.0; 4])),
        "a write",
    );
    graph.replay().unwrap();
    client
        .sync()
        .expect("replays go on after the user's refusals");
    drop(graph);
    client.tick();
    client.tick();
    assert!(
        !client.snapshot().contains("held by"),
        "{}",
        client.snapshot()
    );
}
