//! Recording a launch: the kernel's pipeline, its cube count checked against the device's
//! limits, each buffer region turned into a binding, the scalars into the batch's uniform, then
//! the dispatch in the stream's open compute pass. A region whose offset is not a multiple of
//! the device's storage offset alignment cannot be bound in place: it is copied to a scratch
//! buffer, bound there, and copied back after the dispatch (unless read-only), all in stream
//! order. A launch that binds one buffer both read-only and written runs the kernel's pipeline
//! whose buffers are all declared writable (`Declared::AllWritable`): wgpu refuses a buffer as
//! read-only and writable storage in one dispatch, and copying the read-only region aside made
//! every in-place step (`x += y` into `x`) a buffer creation, a copy and a compute pass of its own.

use crate::bind_groups::{BindGroupCache, BindKey};
use crate::device::WgpuBackend;
use crate::pipelines::KernelPipeline;
use crate::stream::WgpuStream;
use crate::wgsl::Declared;
use gpuworld_hal::backend::{DeviceStream, LaunchCount, Region, StorageId};
use gpuworld_hal::error::Error;
use gpuworld_hal::kernel::Kernel;
use smallvec::SmallVec;

/// How one buffer region is bound.
pub(crate) enum Bound {
    /// In place, at an aligned offset.
    InPlace {
        storage: StorageId,
        buffer: wgpu::Buffer,
        offset: u64,
        size: u64,
    },
    /// Through a scratch copy of the region, copied back after the dispatch if `write_back`.
    Scratch {
        scratch: wgpu::Buffer,
        source: wgpu::Buffer,
        offset: u64,
        size: u64,
        write_back: bool,
    },
}

impl Bound {
    fn binding(&self) -> wgpu::BufferBinding<'_> {
        let (buffer, offset, size) = match self {
            Bound::InPlace {
                buffer,
                offset,
                size,
                ..
            } => (buffer, *offset, *size),
            Bound::Scratch { scratch, size, .. } => (scratch, 0, *size),
        };
        wgpu::BufferBinding {
            buffer,
            offset,
            size: std::num::NonZeroU64::new(size),
        }
    }
}

impl WgpuBackend {
    fn scratch(&self, size: u64) -> wgpu::Buffer {
        self.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("gpuworld unaligned binding"),
            size,
            usage: wgpu::BufferUsages::STORAGE
                | wgpu::BufferUsages::COPY_SRC
                | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        })
    }

    /// How `kernel` binds `region` (copied back after the dispatch if `write_back` and bound
    /// through a scratch copy), or why it cannot.
    pub(crate) fn bind(
        &self,
        kernel: Kernel,
        region: Region,
        write_back: bool,
    ) -> Result<Bound, String> {
        let buffer = self
            .buffer(region.storage)
            .ok_or_else(|| format!("kernel `{}` bound to freed memory", kernel.name))?;
        // The kernel sees whole words, as the CPU's `len32` does.
        let size = region.size / 4 * 4;
        if region.offset + size > buffer.size() {
            return Err(format!(
                "kernel `{}` binding {}..{} is past the end of its {}-byte buffer",
                kernel.name,
                region.offset,
                region.offset + size,
                buffer.size()
            ));
        }
        let max = self.limits.max_storage_buffer_binding_size;
        if size > max {
            return Err(format!(
                "kernel `{}` binding of {size} bytes exceeds the device's \
                 max_storage_buffer_binding_size of {max}",
                kernel.name
            ));
        }
        let alignment = u64::from(self.limits.min_storage_buffer_offset_alignment);
        Ok(if size == 0 {
            // Nothing is visible: a fresh (zeroed) word stands in, and is thrown away.
            Bound::Scratch {
                scratch: self.scratch(4),
                source: buffer.clone(),
                offset: region.offset,
                size: 0,
                write_back,
            }
        } else if region.offset.is_multiple_of(alignment) {
            Bound::InPlace {
                storage: region.storage,
                buffer: buffer.clone(),
                offset: region.offset,
                size,
            }
        } else {
            Bound::Scratch {
                scratch: self.scratch(size),
                source: buffer.clone(),
                offset: region.offset,
                size,
                write_back,
            }
        })
    }

    /// Records `kernel` on stream `s`; an error is the stream's fault and records nothing.
    pub(crate) fn record_launch(
        &mut self,
        s: usize,
        kernel: Kernel,
        count: LaunchCount,
        regions: &[Region],
        scalars: &[u32],
    ) -> Result<(), Error> {
        let stream = self.streams[s].id;
        let declared = Declared::for_launch(kernel, regions);
        let pipeline = self.pipelines.get(&self.device, kernel, declared, stream)?;
        self.record_dispatch(s, &pipeline, kernel, declared, count, regions, scalars)
            .map_err(|message| Error::device_fault(stream, message))
    }

    /// Records the dispatch of a compiled `pipeline` (its buffers `declared` so) and the copies
    /// its bindings need.
    #[allow(clippy::too_many_arguments)]
    fn record_dispatch(
        &mut self,
        s: usize,
        pipeline: &KernelPipeline,
        kernel: Kernel,
        declared: Declared,
        count: LaunchCount,
        regions: &[Region],
        scalars: &[u32],
    ) -> Result<(), String> {
        let indirect = match self.dispatch_of(kernel, count)? {
            Dispatch::Nothing => return Ok(()),
            Dispatch::Static => None,
            Dispatch::Indirect(buffer, offset) => Some((buffer, offset)),
        };
        let params = kernel.signature.buffers;
        let writes = |i: usize| params.get(i).is_none_or(|p| p.access.writes());
        let bound = regions
            .iter()
            .enumerate()
            .map(|(i, &region)| self.bind(kernel, region, writes(i)))
            .collect::<Result<SmallVec<[Bound; 4]>, String>>()?;
        // wgpu refuses a buffer as indirect arguments and as storage in one dispatch (a
        // validation error that loses the whole batch), and allocations share buffers: a count
        // in a buffer bound in place is read from a copy of its 12 bytes.
        let count_shares_a_binding = match count {
            LaunchCount::Dynamic(region) => bound
                .iter()
                .any(|b| matches!(b, Bound::InPlace { storage, .. } if *storage == region.storage)),
            LaunchCount::Static(_) => false,
        };

        let WgpuBackend {
            device,
            streams,
            uniforms,
            bind_groups,
            timing,
            ..
        } = self;
        let stream = &mut streams[s];
        let uniform = (!kernel.signature.scalars.is_empty()).then(|| {
            let (chunk, offset) =
                uniforms.push(device, &mut stream.uniforms, scalars, pipeline.uniform_size);
            let chunk = &stream.uniforms[chunk];
            (chunk.id, chunk.buffer.clone(), offset)
        });
        let group = (!bound.is_empty() || uniform.is_some()).then(|| {
            bind_group(
                device,
                bind_groups,
                pipeline,
                kernel,
                declared,
                &bound,
                &uniform,
            )
        });
        let offsets: SmallVec<[u32; 1]> = uniform.iter().map(|(_, _, o)| *o).collect();

        copy_scratch(stream, device, &bound, Direction::In);
        let indirect = match indirect {
            Some((buffer, offset)) if count_shares_a_binding => {
                Some(copy_of_count(stream, device, &buffer, offset))
            }
            indirect => indirect,
        };
        let mut timed = false;
        if let Some(timing) = timing.as_mut().filter(|t| t.active) {
            let mut set = stream.timing.take().unwrap_or_else(|| timing.set(device));
            let bytes = regions.iter().map(|r| r.size).sum();
            if let Some(writes) = set.next(kernel, DeviceStream(s as u32), bytes) {
                stream.timed_pass(device, writes);
                timed = true;
            }
            stream.timing = Some(set);
        }
        let pass = stream.pass(device);
        pass.set_pipeline(&pipeline.pipeline);
        if let Some(group) = &group {
            pass.set_bind_group(0, group, &offsets);
        }
        match (&indirect, count) {
            (Some((buffer, offset)), _) => pass.dispatch_workgroups_indirect(buffer, *offset),
            (None, LaunchCount::Static([x, y, z])) => pass.dispatch_workgroups(x, y, z),
            (None, LaunchCount::Dynamic(_)) => {}
        }
        stream.commands += 1;
        if timed {
            stream.end_pass();
        }
        copy_scratch(stream, device, &bound, Direction::Back);
        Ok(())
    }

    /// What a launch of `kernel` over `count` dispatches, or why the device cannot: nothing for
    /// a static count with a zero, a static count within the device's limit per axis, or the
    /// buffer and offset of a dynamic count.
    fn dispatch_of(&self, kernel: Kernel, count: LaunchCount) -> Result<Dispatch, String> {
        let per_axis = self.limits.max_compute_workgroups_per_dimension;
        match count {
            LaunchCount::Static(cubes) if cubes.contains(&0) => Ok(Dispatch::Nothing),
            LaunchCount::Static(cubes) if cubes.iter().any(|&n| n > per_axis) => Err(format!(
                "kernel `{}`: cube count {cubes:?} exceeds the device's {per_axis} per axis",
                kernel.name
            )),
            LaunchCount::Static(_) => Ok(Dispatch::Static),
            LaunchCount::Dynamic(region) => {
                let buffer = self
                    .buffer(region.storage)
                    .ok_or("dynamic cube count in freed memory")?;
                if !region.offset.is_multiple_of(4) || region.offset + 12 > buffer.size() {
                    return Err(format!(
                        "kernel `{}`: a dynamic cube count must be 12 bytes at a multiple of 4, \
                         got offset {}",
                        kernel.name, region.offset
                    ));
                }
                Ok(Dispatch::Indirect(buffer.clone(), region.offset))
            }
        }
    }
}

/// What a launch dispatches.
enum Dispatch {
    /// Nothing: a static count with a zero.
    Nothing,
    /// A static count.
    Static,
    /// A count the device reads from a buffer, at an offset.
    Indirect(wgpu::Buffer, u64),
}

/// The bind group of a dispatch: its bound buffers and its uniform (id, buffer, offset); taken
/// from the cache where every buffer is bound in place.
fn bind_group(
    device: &wgpu::Device,
    bind_groups: &mut BindGroupCache,
    pipeline: &KernelPipeline,
    kernel: Kernel,
    declared: Declared,
    bound: &[Bound],
    uniform: &Option<(u64, wgpu::Buffer, u32)>,
) -> wgpu::BindGroup {
    let create = || {
        pipeline.bind_group(
            device,
            kernel.id,
            bound.iter().map(Bound::binding),
            uniform.as_ref().map(|(_, buffer, _)| buffer),
        )
    };
    let in_place: Option<SmallVec<[(StorageId, u64, u64); 4]>> = bound
        .iter()
        .map(|b| match b {
            Bound::InPlace {
                storage,
                offset,
                size,
                ..
            } => Some((*storage, *offset, *size)),
            Bound::Scratch { .. } => None,
        })
        .collect();
    match in_place {
        Some(buffers) => {
            let key = BindKey {
                kernel: kernel.id,
                declared,
                buffers,
                uniform: uniform.as_ref().map_or(0, |(id, _, _)| *id),
            };
            bind_groups.get(key, create)
        }
        None => create(),
    }
}

/// Which way a scratch copy goes: into the scratch buffer before the dispatch, or back to its
/// source after it (only for a written binding).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Direction {
    In,
    Back,
}

/// Copies each non-empty scratch binding of `bound` in `direction` on `stream`.
fn copy_scratch(
    stream: &mut WgpuStream,
    device: &wgpu::Device,
    bound: &[Bound],
    direction: Direction,
) {
    for b in bound {
        if let Bound::Scratch {
            scratch,
            source,
            offset,
            size,
            write_back,
        } = b
            && *size > 0
        {
            let encoder = stream.encoder(device);
            match direction {
                Direction::In => encoder.copy_buffer_to_buffer(source, *offset, scratch, 0, *size),
                Direction::Back if *write_back => {
                    encoder.copy_buffer_to_buffer(scratch, 0, source, *offset, *size)
                }
                Direction::Back => continue,
            }
            stream.commands += 1;
        }
    }
}

/// A copy of the 12-byte cube count at `offset` of `buffer`, made on `stream`: the dispatch
/// reads its count there.
fn copy_of_count(
    stream: &mut WgpuStream,
    device: &wgpu::Device,
    buffer: &wgpu::Buffer,
    offset: u64,
) -> (wgpu::Buffer, u64) {
    let copy = device.create_buffer(&wgpu::BufferDescriptor {
        label: Some("gpuworld cube count copy"),
        size: 12,
        usage: wgpu::BufferUsages::INDIRECT | wgpu::BufferUsages::COPY_DST,
        mapped_at_creation: false,
    });
    stream
        .encoder(device)
        .copy_buffer_to_buffer(buffer, offset, &copy, 0, 12);
    stream.commands += 1;
    (copy, 0)
}
