//! Compute pipelines, compiled once per kernel id from the kernel's WGSL and the bind group
//! layout of the binding convention (`gpuworld_systems::library::wgsl`): storage buffers at
//! bindings `0..buffers`, the scalars' uniform (dynamic offset) after them. A kernel whose
//! source fails to compile is remembered as failed, so each launch reports it without
//! recompiling.

use crate::faults::{DeviceErrors, describe};
use gpuworld_systems::kernel::Kernel;
use std::collections::HashMap;
use std::num::NonZeroU64;
use std::sync::Arc;

/// One kernel ready to dispatch.
pub(crate) struct KernelPipeline {
    /// The pipeline.
    pub pipeline: wgpu::ComputePipeline,
    /// The layout of its one bind group.
    pub layout: wgpu::BindGroupLayout,
    /// Bytes of its scalars' uniform, 0 when it has no scalars.
    pub uniform_size: u64,
}

/// Pipelines by kernel id, including the kernels that failed to compile.
#[derive(Default)]
pub(crate) struct PipelineCache {
    pipelines: HashMap<&'static str, Result<Arc<KernelPipeline>, Arc<str>>>,
    compiled: u64,
}

/// Bytes of the uniform holding `scalars` 32-bit words, padded to 16.
pub(crate) fn uniform_size(scalars: usize) -> u64 {
    (scalars as u64 * 4).div_ceil(16) * 16
}

impl PipelineCache {
    /// Number of pipelines compiled so far (a cache hit compiles nothing).
    pub fn compiled(&self) -> u64 {
        self.compiled
    }

    /// The pipeline of `kernel`, compiling it on first use.
    pub fn get(
        &mut self,
        device: &wgpu::Device,
        errors: &DeviceErrors,
        kernel: Kernel,
    ) -> Result<Arc<KernelPipeline>, Arc<str>> {
        if let Some(entry) = self.pipelines.get(kernel.id) {
            return entry.clone();
        }
        let entry = self.compile(device, errors, kernel);
        self.pipelines.insert(kernel.id, entry.clone());
        entry
    }

    fn compile(
        &mut self,
        device: &wgpu::Device,
        errors: &DeviceErrors,
        kernel: Kernel,
    ) -> Result<Arc<KernelPipeline>, Arc<str>> {
        let source = kernel
            .wgsl
            .ok_or_else(|| Arc::from(format!("kernel `{}` has no WGSL source", kernel.name)))?;
        let started = std::time::Instant::now();
        // Errors raised by earlier calls belong to those calls; they were taken already.
        let module = device.create_shader_module(wgpu::ShaderModuleDescriptor {
            label: Some(kernel.id),
            source: wgpu::ShaderSource::Wgsl(source.into()),
        });
        let uniform_size = uniform_size(kernel.scalars);
        let mut entries: Vec<wgpu::BindGroupLayoutEntry> = (0..kernel.buffers)
            .map(|binding| wgpu::BindGroupLayoutEntry {
                binding: binding as u32,
                visibility: wgpu::ShaderStages::COMPUTE,
                ty: wgpu::BindingType::Buffer {
                    ty: wgpu::BufferBindingType::Storage { read_only: false },
                    has_dynamic_offset: false,
                    min_binding_size: None,
                },
                count: None,
            })
            .collect();
        if kernel.scalars > 0 {
            entries.push(wgpu::BindGroupLayoutEntry {
                binding: kernel.buffers as u32,
                visibility: wgpu::ShaderStages::COMPUTE,
                ty: wgpu::BindingType::Buffer {
                    ty: wgpu::BufferBindingType::Uniform,
                    has_dynamic_offset: true,
                    min_binding_size: NonZeroU64::new(uniform_size),
                },
                count: None,
            });
        }
        let layout = device.create_bind_group_layout(&wgpu::BindGroupLayoutDescriptor {
            label: Some(kernel.id),
            entries: &entries,
        });
        let pipeline_layout = device.create_pipeline_layout(&wgpu::PipelineLayoutDescriptor {
            label: Some(kernel.id),
            bind_group_layouts: &[Some(&layout)],
            immediate_size: 0,
        });
        let pipeline = device.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
            label: Some(kernel.id),
            layout: Some(&pipeline_layout),
            module: &module,
            entry_point: Some("main"),
            compilation_options: Default::default(),
            cache: None,
        });
        let raised = errors.take();
        if let Some(first) = raised.first() {
            let message = format!(
                "kernel `{}` failed to compile for wgpu: {}",
                kernel.name,
                describe(first)
            );
            tracing::error!(target: "gpuworld::kernel", kernel = kernel.id, %message);
            return Err(message.into());
        }
        self.compiled += 1;
        tracing::debug!(
            target: "gpuworld::kernel",
            kernel = kernel.id,
            elapsed_us = started.elapsed().as_micros() as u64,
            "compiled compute pipeline"
        );
        Ok(Arc::new(KernelPipeline {
            pipeline,
            layout,
            uniform_size,
        }))
    }
}
