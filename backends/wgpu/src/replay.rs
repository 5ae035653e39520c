//! Captured graphs replayed as a recorded plan (issue 28). A replay of launches on one stream
//! with static grids is one native task (`Backend::graph_replay`); at the first replay of a graph
//! at a version over a set of buffers the backend builds its plan: each launch's pipeline, one
//! bind group per distinct (pipeline, bindings) of the frame, and the scalars of every launch in
//! one uniform buffer of the plan's own, at fixed dynamic offsets. Every replay then records the
//! plan's dispatches into the stream's open compute pass, with no per-launch lookup, binding
//! check or uniform push. A launch that cannot be bound in place (an unaligned or empty view), or
//! a replay while dispatches are timed, records launch by launch as eager work does.

use crate::WgpuBackend;
use crate::launch::Bound;
use crate::pipelines::KernelPipeline;
use crate::wgsl::Declared;
use gpuworld_hal::backend::{LaunchCount, Region, StorageId};
use gpuworld_hal::error::Error;
use gpuworld_hal::graph::PlannedLaunch;
use gpuworld_hal::ids::StreamId;
use gpuworld_hal::native::{NativeOp, NativeWork};
use smallvec::SmallVec;
use std::collections::HashMap;
use std::sync::Arc;

/// Plans kept per device; the least recently made goes first.
const PLANS: usize = 64;

/// Dispatches of a long replay's first segment (see `run_replay`).
const REPLAY_FIRST_SEGMENT: usize = 64;

/// A replay of launches on one stream, run from a recorded plan.
#[derive(Debug)]
pub struct WgpuReplay {
    graph: u64,
    version: u64,
    launches: Arc<[PlannedLaunch]>,
}

impl WgpuReplay {
    /// The op for `launches` of graph `graph` at `version`.
    pub fn work(graph: u64, version: u64, launches: Arc<[PlannedLaunch]>) -> NativeWork {
        Box::new(WgpuReplay {
            graph,
            version,
            launches,
        })
    }
}

impl NativeOp for WgpuReplay {
    fn name(&self) -> &'static str {
        "wgpu graph replay"
    }

    fn as_any(&self) -> &dyn std::any::Any {
        self
    }
}

/// `work` as a replay, if it is one.
pub(crate) fn as_replay(work: &NativeWork) -> Option<&WgpuReplay> {
    work.as_any().downcast_ref::<WgpuReplay>()
}

/// One dispatch of a plan.
struct Step {
    pipeline: Arc<KernelPipeline>,
    group: Option<wgpu::BindGroup>,
    /// The dynamic offset of its scalars in the plan's uniform buffer.
    offset: Option<u32>,
    grid: [u32; 3],
}

/// A graph's launches at one version over one set of buffers, ready to record.
struct Plan {
    graph: u64,
    version: u64,
    regions: Vec<Region>,
    steps: Vec<Step>,
    /// The launches' scalars, which the bind groups bind.
    _uniform: Option<wgpu::Buffer>,
}

/// The plans of one device, the most recently made last.
#[derive(Default)]
pub(crate) struct PlanCache {
    plans: Vec<Plan>,
    made: u64,
}

impl PlanCache {
    /// Number of plans made so far (a replay that finds its plan makes none).
    pub fn made(&self) -> u64 {
        self.made
    }

    fn position(&self, op: &WgpuReplay, regions: &[Region]) -> Option<usize> {
        self.plans.iter().position(|plan| {
            plan.graph == op.graph && plan.version == op.version && plan.regions == regions
        })
    }

    /// Keeps `plan`, dropping the graph's plans of older versions and the oldest past the cap.
    fn insert(&mut self, plan: Plan) -> usize {
        self.plans
            .retain(|kept| kept.graph != plan.graph || kept.version > plan.version);
        if self.plans.len() >= PLANS {
            self.plans.remove(0);
        }
        self.made += 1;
        self.plans.push(plan);
        self.plans.len() - 1
    }

    /// Drops the plans that bind `storage` (their bind groups would keep its buffer alive).
    pub fn forget(&mut self, storage: StorageId) {
        self.plans
            .retain(|plan| plan.regions.iter().all(|r| r.storage != storage));
    }
}

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
        let segmented = steps > (crate::AUTO_SUBMIT_COMMANDS / 2) as usize;
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
                segment = (segment * 2).min((crate::AUTO_SUBMIT_COMMANDS / 2) as usize);
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
            staged.push((launch, declared, pipeline, in_place, offset));
        }
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
        // One bind group per distinct pipeline and bindings: a frame binds the same few.
        let mut groups = HashMap::<(&'static str, Declared, Vec<Region>), wgpu::BindGroup>::new();
        let mut steps = Vec::with_capacity(staged.len());
        for (launch, declared, pipeline, in_place, offset) in staged {
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
                        let uniform = uniform.as_ref().filter(|_| uses_uniform);
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
        Ok(Some(Plan {
            graph: op.graph,
            version: op.version,
            regions: buffers.to_vec(),
            steps,
            _uniform: uniform,
        }))
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
