//! The raw wgpu side of the benches: a device of its own on the default adapter, a pipeline of
//! a WGSL module, and a compute pass of dispatches submitted and waited for, as a program on wgpu
//! alone does it. Included by the benches that need it (`#[path]`).

use gpuworld::wgpu;

/// A device of its own on the default adapter (its own limits), its queue, and the compute
/// pipeline of `wgsl`'s `main` with the layout the shader implies; `None` without an adapter.
pub fn device_and_pipeline(
    wgsl: &str,
) -> Option<(wgpu::Device, wgpu::Queue, wgpu::ComputePipeline)> {
    let instance =
        wgpu::Instance::new(wgpu::InstanceDescriptor::new_without_display_handle_from_env());
    let adapter = pollster::block_on(instance.request_adapter(&wgpu::RequestAdapterOptions {
        power_preference: wgpu::PowerPreference::HighPerformance,
        ..Default::default()
    }))
    .ok()?;
    let (device, queue) = pollster::block_on(adapter.request_device(&wgpu::DeviceDescriptor {
        required_limits: adapter.limits(),
        ..Default::default()
    }))
    .ok()?;
    let module = device.create_shader_module(wgpu::ShaderModuleDescriptor {
        label: None,
        source: wgpu::ShaderSource::Wgsl(wgsl.into()),
    });
    let pipeline = device.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
        label: None,
        layout: None,
        module: &module,
        entry_point: Some("main"),
        compilation_options: Default::default(),
        cache: None,
    });
    Some((device, queue, pipeline))
}

/// `count` dispatches of `workgroups` workgroups with `pipeline` and `group`, in one compute
/// pass, submitted and waited for.
pub fn one_pass(
    device: &wgpu::Device,
    queue: &wgpu::Queue,
    pipeline: &wgpu::ComputePipeline,
    group: &wgpu::BindGroup,
    count: u64,
    workgroups: u32,
) {
    let mut encoder = device.create_command_encoder(&wgpu::CommandEncoderDescriptor::default());
    {
        let mut pass = encoder.begin_compute_pass(&wgpu::ComputePassDescriptor::default());
        pass.set_pipeline(pipeline);
        pass.set_bind_group(0, group, &[]);
        for _ in 0..count {
            pass.dispatch_workgroups(workgroups, 1, 1);
        }
    }
    queue.submit([encoder.finish()]);
    device
        .poll(wgpu::PollType::wait_indefinitely())
        .expect("the device completes its work");
}
