//! Captured graphs replayed as a recorded plan (issue 28). A replay of launches on one stream
//! with static grids is one native task (`Queue::graph_replay`); at the first replay of a graph
//! at a version over a set of buffers the backend builds its plan: each launch's pipeline, one
//! bind group per distinct (pipeline, bindings) of the frame, and the scalars of every launch in
//! one uniform buffer of the plan's own, at fixed dynamic offsets. Every replay then records the
//! plan's dispatches into the stream's open compute pass, with no per-launch lookup, binding
//! check or uniform push. A launch that cannot be bound in place (an unaligned or empty view), or
//! a replay while dispatches are timed, records launch by launch as eager work does.

mod record;

use crate::pipelines::KernelPipeline;
use gpuworld_hal::backend::{Region, StorageId};
use gpuworld_hal::graph::PlannedLaunch;
use gpuworld_hal::native::{NativeOp, NativeWork};
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
