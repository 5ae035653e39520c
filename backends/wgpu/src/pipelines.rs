//! Compute pipelines, compiled once per kernel id from the kernel's WGSL module (`wgsl`) and the
//! bind group layout of the binding convention (on `KernelDef`): storage buffers at bindings
//! `0..buffers` (read-only where the signature says so), the scalars' uniform (dynamic offset)
//! after them. Creation runs inside error scopes, so a kernel whose WGSL does not compile (or does
//! not match the layout, or whose `@workgroup_size` is not its cube dim) is
//! `ExecutionError::Compile` with wgpu's message as the log, as NVRTC's is on CUDA; naga checks the
//! module first, so a source error's log is in the lines of the kernel's own source and lists its
//! declared bindings (`wgsl::check_source`); it is remembered as failed, so each launch reports it
//! without recompiling. A kernel has a second pipeline, compiled on first need, whose buffers are
//! all declared `read_write` (`Declared::AllWritable`), for launches that bind one buffer both
//! read-only and written.

use crate::WgpuBackend;
use crate::wgsl::{Declared, check_source, uniform_size, wgsl_text_as};
use gpuworld_hal::backend::Kernels;
use gpuworld_hal::error::{Error, ExecutionError, LaunchError};
use gpuworld_hal::ids::StreamId;
use gpuworld_hal::kernel::{Access, Kernel};
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

impl KernelPipeline {
    /// The bind group of one dispatch: `buffers` at bindings `0..`, then the scalars' `uniform`
    /// (bound with a dynamic offset) where the kernel has scalars.
    pub fn bind_group<'a>(
        &self,
        device: &wgpu::Device,
        label: &str,
        buffers: impl Iterator<Item = wgpu::BufferBinding<'a>>,
        uniform: Option<&'a wgpu::Buffer>,
    ) -> wgpu::BindGroup {
        let mut entries: Vec<wgpu::BindGroupEntry<'a>> = buffers
            .enumerate()
            .map(|(i, binding)| wgpu::BindGroupEntry {
                binding: i as u32,
                resource: wgpu::BindingResource::Buffer(binding),
            })
            .collect();
        if let Some(buffer) = uniform {
            entries.push(wgpu::BindGroupEntry {
                binding: entries.len() as u32,
                resource: wgpu::BindingResource::Buffer(wgpu::BufferBinding {
                    buffer,
                    offset: 0,
                    size: NonZeroU64::new(self.uniform_size),
                }),
            });
        }
        device.create_bind_group(&wgpu::BindGroupDescriptor {
            label: Some(label),
            layout: &self.layout,
            entries: &entries,
        })
    }
}

/// Pipelines by kernel id, including the kernels that failed to compile.
#[derive(Default)]
pub(crate) struct PipelineCache {
    pipelines: HashMap<(&'static str, Declared), Result<Arc<KernelPipeline>, Error>>,
    compiled: u64,
}

impl PipelineCache {
    /// Number of pipelines compiled so far (a cache hit compiles nothing).
    pub fn compiled(&self) -> u64 {
        self.compiled
    }

    /// The pipeline of `kernel` with its buffers `declared` so, compiling it on first use; a
    /// compile error is cached with it, running out of memory is a fault of `stream` and is not.
    pub fn get(
        &mut self,
        device: &wgpu::Device,
        kernel: Kernel,
        declared: Declared,
        stream: StreamId,
    ) -> Result<Arc<KernelPipeline>, Error> {
        if let Some(entry) = self.pipelines.get(&(kernel.id, declared)) {
            return entry.clone();
        }
        // The client refuses kernels without WGSL; only a direct backend call gets here.
        let text = wgsl_text_as(kernel, declared).ok_or(Error::Launch(
            LaunchError::MissingKernelSource {
                kernel: kernel.name,
                backend: WgpuBackend::NAME,
            },
        ))?;
        let started = std::time::Instant::now();
        if let Err(log) = check_source(kernel, &text) {
            return Err(self.failed(kernel, declared, log));
        }
        // Scopes are per thread and popped in reverse order; what they catch goes to no
        // uncaptured-error handler, so it is reported once, here, typed.
        let internal = device.push_error_scope(wgpu::ErrorFilter::Internal);
        let validation = device.push_error_scope(wgpu::ErrorFilter::Validation);
        let out_of_memory = device.push_error_scope(wgpu::ErrorFilter::OutOfMemory);
        let created = create(device, kernel, declared, &text);
        // wgpu-core resolves a popped scope at once; block_on only unwraps the future.
        let out_of_memory = pollster::block_on(out_of_memory.pop());
        let validation = pollster::block_on(validation.pop());
        let internal = pollster::block_on(internal.pop());
        let invalid = validation.or(internal);
        if out_of_memory.is_some() {
            // Not the kernel's fault, and perhaps gone by the next launch: not cached.
            return Err(Error::device_fault(
                stream,
                format!(
                    "device out of memory while creating kernel `{}`'s pipeline",
                    kernel.name
                ),
            ));
        }
        if let Some(error) = invalid {
            return Err(self.failed(kernel, declared, error.to_string()));
        }
        self.compiled += 1;
        tracing::debug!(
            target: "gpuworld::kernel",
            kernel = kernel.id,
            elapsed_us = started.elapsed().as_micros() as u64,
            "compiled compute pipeline"
        );
        let entry = Arc::new(created);
        self.pipelines
            .insert((kernel.id, declared), Ok(entry.clone()));
        Ok(entry)
    }

    /// Remembers that `kernel` (its buffers `declared` so) does not compile, for `log`; the
    /// error to report.
    fn failed(&mut self, kernel: Kernel, declared: Declared, log: String) -> Error {
        let log: Arc<str> = log.into();
        tracing::error!(target: "gpuworld::kernel", kernel = kernel.id, %log, "compile failed");
        let error = Error::Execution(ExecutionError::Compile {
            kernel: kernel.name,
            log,
        });
        self.pipelines
            .insert((kernel.id, declared), Err(error.clone()));
        error
    }
}

/// Creates `kernel`'s module, layouts and pipeline from the WGSL `text` (its buffers `declared`
/// so); errors go to the scopes open.
fn create(device: &wgpu::Device, kernel: Kernel, declared: Declared, text: &str) -> KernelPipeline {
    let module = device.create_shader_module(wgpu::ShaderModuleDescriptor {
        label: Some(kernel.id),
        source: wgpu::ShaderSource::Wgsl(text.into()),
    });
    let (buffers, scalars) = (kernel.signature.buffers, kernel.signature.scalars);
    let uniform_size = uniform_size(scalars.len());
    let mut entries: Vec<wgpu::BindGroupLayoutEntry> = (buffers.iter().enumerate())
        .map(|(binding, param)| wgpu::BindGroupLayoutEntry {
            binding: binding as u32,
            visibility: wgpu::ShaderStages::COMPUTE,
            ty: wgpu::BindingType::Buffer {
                ty: wgpu::BufferBindingType::Storage {
                    read_only: declared == Declared::AsSigned && param.access == Access::Read,
                },
                has_dynamic_offset: false,
                min_binding_size: None,
            },
            count: None,
        })
        .collect();
    if !scalars.is_empty() {
        entries.push(wgpu::BindGroupLayoutEntry {
            binding: buffers.len() as u32,
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
    KernelPipeline {
        pipeline,
        layout,
        uniform_size,
    }
}
