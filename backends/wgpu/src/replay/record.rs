//! Recording a replay into its stream: from the graph's plan (made at its first replay over a
//! set of buffers, in two steps: staging the launches, then their dispatches), or launch by
//! launch.

use super::{Plan, REPLAY_FIRST_SEGMENT, Step, WgpuReplay};
use crate::device::WgpuBackend;
use crate::launch::Bound;
use crate::pipelines::KernelPipeline;
use crate::stream::AUTO_SUBMIT_COMMANDS;
use crate::wgsl::Declared;
use gpuworld_hal::backend::{LaunchCount, Region};
use gpuworld_hal::error::Error;
use gpuworld_hal::graph::PlannedLaunch;
use gpuworld_hal::ids::StreamId;
use smallvec::SmallVec;
use std::collections::HashMap;
use std::sync::Arc;

/// A launch of a plan being made, before its bind group: what `stage_launches` found.
struct Staged<'a> {
    launch: &'a PlannedLaunch,
    declared: Declared,
    pipeline: Arc<KernelPipeline>,
    in_place: SmallVec<[(wgpu::Buffer, Region); 4]>,
    /// The dynamic offset of its scalars in the plan's uniform buffer.
    offset: Option<u32>,
}

/// The staged launches of a plan, and the bytes of their scalars.
type Staging<'a> = (Vec<Staged<'a>>, Vec<u8>);

impl WgpuBackend {
    /// Records `op` on stream `s` over the task's `buffers`: from its plan (made now if new),
    /// or launch by launch.
    pub(crate) fn run_replay(
        &mut self,
        s: usize,
        buffers: &[Region],
        op: &WgpuReplay,
    ) -> Result<(), Error> {
        if self.timing.as_ref().is_some_and(|t| t.active) {
            return self.replay_launch_by_launch(s, buffers, op);
        }
        let found = match self.plans.position(op, buffers) {
            Some(index) => Some(index),
            None => self
                .make_plan(s, buffers, op)?
                .map(|plan| self.plans.insert(plan)),
        };
        let Some(index) = found else {
            return self.replay_launch_by_launch(s, buffers, op);
        };
        // A long replay goes to the device in segments, as eager launches do (a batch is
        // submitted while the device is idle or past `AUTO_SUBMIT_COMMANDS`): recorded whole, the
        // device waited for all of it to be encoded, and 1,000 chained kernels replayed slower
        // than eager (issue 52). Segments double from `REPLAY_FIRST_SEGMENT`, so the device
        // starts early and the submissions stay few.
        let steps = self.plans.plans[index].steps.len();
        let segmented = steps > (AUTO_SUBMIT_COMMANDS / 2) as usize;
        let mut segment = if segmented {
            REPLAY_FIRST_SEGMENT
        } else {
            steps
        };
        let mut at = 0;
        while at < steps {
            let end = (at + segment).min(steps);
            let WgpuBackend {
                device,
                streams,
                plans,
                ..
            } = &mut *self;
            let stream = &mut streams[s];
            let pass = stream.pass(device);
            for step in &plans.plans[index].steps[at..end] {
                pass.set_pipeline(&step.pipeline.pipeline);
                if let Some(group) = &step.group {
                    let offsets: SmallVec<[u32; 1]> = step.offset.into_iter().collect();
                    pass.set_bind_group(0, group, &offsets);
                }
                let [x, y, z] = step.grid;
                pass.dispatch_workgroups(x, y, z);
            }
            stream.commands += (end - at) as u32;
            at = end;
            if at < steps {
                self.submit(s);
                segment = (segment * 2).min((AUTO_SUBMIT_COMMANDS / 2) as usize);
            }
        }
        Ok(())
    }

    /// The launches of `op` recorded one by one, as eager launches are.
    fn replay_launch_by_launch(
        &mut self,
        s: usize,
        buffers: &[Region],
        op: &WgpuReplay,
    ) -> Result<(), Error> {
        let stream = self.streams[s].id;
        for launch in op.launches.iter() {
            let regions = launch_regions(launch, buffers, stream)?;
            self.record_launch(
                s,
                launch.kernel,
                LaunchCount::Static(launch.grid),
                &regions,
                &launch.scalars,
            )?;
        }
        Ok(())
    }

    /// The plan of `op` over `buffers`, or `None` when a launch cannot be planned (a view that
    /// is not bound in place, or a grid past the device's limits: launched one by one, those
    /// are reported as eager launches are).
    fn make_plan(
        &mut self,
        s: usize,
        buffers: &[Region],
        op: &WgpuReplay,
    ) -> Result<Option<Plan>, Error> {
        let Some((staged, scalars)) = self.stage_launches(s, buffers, op)? else {
            return Ok(None);
        };
        let uniform = (!scalars.is_empty()).then(|| {
            let buffer = self.device.create_buffer(&wgpu::BufferDescriptor {
                label: Some("gpuworld graph scalars"),
                size: scalars.len() as u64,
                usage: wgpu::BufferUsages::UNIFORM | wgpu::BufferUsages::COPY_DST,
                mapped_at_creation: false,
            });
            // Lands at the start of the next submission, the first that can use the plan.
            self.queue.write_buffer(&buffer, 0, &scalars);
            buffer
        });
        let steps = self.plan_steps(staged, uniform.as_ref());
        Ok(Some(Plan {
            graph: op.graph,
            version: op.version,
            regions: buffers.to_vec(),
            steps,
            _uniform: uniform,
        }))
    }

    /// The first step of a plan: each launch's pipeline and in-place bindings, and the bytes of
    /// every launch's scalars at its dynamic offset; `None` when a launch cannot be planned.
    fn stage_launches<'a>(
        &mut self,
        s: usize,
        buffers: &[Region],
        op: &'a WgpuReplay,
    ) -> Result<Option<Staging<'a>>, Error> {
        let stream = self.streams[s].id;
        let per_axis = self.limits.max_compute_workgroups_per_dimension;
        let alignment = u64::from(self.limits.min_uniform_buffer_offset_alignment).max(16);
        let mut scalars = Vec::<u8>::new();
        let mut staged = Vec::with_capacity(op.launches.len());
        for launch in op.launches.iter() {
            if launch.grid.iter().any(|&n| n > per_axis) {
                return Ok(None);
            }
            let regions = launch_regions(launch, buffers, stream)?;
            let declared = Declared::for_launch(launch.kernel, &regions);
            let pipeline = self
                .pipelines
                .get(&self.device, launch.kernel, declared, stream)?;
            let mut in_place = SmallVec::<[(wgpu::Buffer, Region); 4]>::new();
            for &region in &regions {
                match self.bind(launch.kernel, region, false) {
                    Ok(Bound::InPlace {
                        buffer,
                        offset,
                        size,
                        ..
                    }) => in_place.push((
                        buffer,
                        Region {
                            storage: region.storage,
                            offset,
                            size,
                        },
                    )),
                    _ => return Ok(None),
                }
            }
            let offset = (!launch.kernel.signature.scalars.is_empty()).then(|| {
                let at = (scalars.len() as u64).next_multiple_of(alignment);
                scalars.resize(at as usize, 0);
                scalars.extend(launch.scalars.iter().flat_map(|w| w.to_le_bytes()));
                scalars.resize((at + pipeline.uniform_size) as usize, 0);
                at as u32
            });
            staged.push(Staged {
                launch,
                declared,
                pipeline,
                in_place,
                offset,
            });
        }
        Ok(Some((staged, scalars)))
    }

    /// The second step of a plan: its dispatches, with one bind group per distinct pipeline and
    /// bindings (a frame binds the same few); launches of an empty grid are left out.
    fn plan_steps(&self, staged: Vec<Staged<'_>>, uniform: Option<&wgpu::Buffer>) -> Vec<Step> {
        let mut groups = HashMap::<(&'static str, Declared, Vec<Region>), wgpu::BindGroup>::new();
        let mut steps = Vec::with_capacity(staged.len());
        for Staged {
            launch,
            declared,
            pipeline,
            in_place,
            offset,
        } in staged
        {
            if launch.grid.contains(&0) {
                continue;
            }
            let uses_uniform = offset.is_some();
            let group = (!in_place.is_empty() || uses_uniform).then(|| {
                let key = (
                    launch.kernel.id,
                    declared,
                    in_place.iter().map(|(_, r)| *r).collect::<Vec<_>>(),
                );
                groups
                    .entry(key)
                    .or_insert_with(|| {
                        let buffers = in_place.iter().map(|(buffer, region)| wgpu::BufferBinding {
                            buffer,
                            offset: region.offset,
                            size: std::num::NonZeroU64::new(region.size),
                        });
                        let uniform = uniform.filter(|_| uses_uniform);
                        pipeline.bind_group(&self.device, launch.kernel.id, buffers, uniform)
                    })
                    .clone()
            });
            steps.push(Step {
                pipeline,
                group,
                offset,
                grid: launch.grid,
            });
        }
        steps
    }
}

/// The regions `launch` binds, in its kernel's order, from the task's `buffers`; a fault of
/// `stream` if it names one the task does not have.
fn launch_regions(
    launch: &PlannedLaunch,
    buffers: &[Region],
    stream: StreamId,
) -> Result<SmallVec<[Region; 4]>, Error> {
    launch
        .bindings
        .iter()
        .map(|&index| {
            buffers.get(usize::from(index)).copied().ok_or_else(|| {
                Error::device_fault(
                    stream,
                    format!(
                        "graph replay of `{}` names binding {index} of {}",
                        launch.kernel.name,
                        buffers.len()
                    ),
                )
            })
        })
        .collect()
}
