//! Ingest's graph family: the pins a captured graph holds on its handles (a release waits for
//! the last unpin), and replays, each run of launches one native task from the plan kept per
//! graph version (`replay_plan.rs`), every other command issued as it was captured.

use super::drain::Ingest;
use super::replay_plan::{MAX_RUNS, RUN_KEY_SHIFT, ReplayPlan};
use crate::backend::Backend;
use crate::error::{Error, GraphError};
use crate::graph::ReplayLaneEnd;
use crate::ids::HandleId;
use crate::inbox::{Launch, Op, PinHolder};
use crate::kernel::CubeCount;
use crate::world::*;
use smallvec::SmallVec;
use std::sync::Arc;

impl<B: Backend> Ingest<'_, '_, '_, B> {
    /// A captured graph or a render lease holds `handle`.
    pub(super) fn pin(&mut self, handle: HandleId, holder: PinHolder) {
        if let Some(entry) = self.index.get_mut(&handle) {
            entry.pins += 1;
            if holder == PinHolder::Lease {
                entry.lease_pins += 1;
            }
        }
    }

    /// A captured graph or a render lease lets go of `handle`: the last unpin of a handle its
    /// user released releases it.
    pub(super) fn unpin(&mut self, handle: HandleId, holder: PinHolder) {
        if let Some(entry) = self.index.get_mut(&handle) {
            entry.pins = entry.pins.saturating_sub(1);
            if holder == PinHolder::Lease {
                entry.lease_pins = entry.lease_pins.saturating_sub(1);
            }
            if entry.pins == 0 && entry.released_while_pinned {
                self.release(handle);
            }
        }
    }

    /// A replay of `graph` at `version`, traced if a trace is on.
    pub(super) fn replay(&mut self, graph: u64, version: u64, commands: &[Op]) {
        tracing::trace!(target: "gpuworld::graph", graph, commands = commands.len(), "replay");
        if let Some(recorder) = self.recorder.as_deref_mut()
            && recorder.is_tracing()
        {
            let lines = commands.iter().map(Op::describe).collect();
            recorder.replayed(self.tick, graph, lines);
        }
        self.replay_in_runs(graph, version, commands);
    }

    /// A replay of launches only, with static grids, as one native task the backend runs itself
    /// (`Queue::graph_replay`: a CUDA graph, a wgpu plan, one operation of a cpu worker); on
    /// one stream, or on several where the backend replays across streams: then the task goes
    /// on the first launch's stream with each launch's lane and the launches of other lanes it
    /// follows, and each other stream gets a [`ReplayLaneEnd`] after it. The plan of a graph at
    /// a version is made at its first replay and kept ([`ReplayPlans`]): a replay resolves the
    /// frame's distinct bindings and shares the launches. Whether it was.
    fn replay_as_one(&mut self, graph: u64, version: u64, commands: &[Op]) -> bool {
        let capabilities = self.device.capabilities();
        if !capabilities.graph_replay || commands.len() < 2 {
            return false;
        }
        let plan = match self.plans.get(graph, version) {
            Some(plan) => plan,
            None => {
                let Some(plan) =
                    ReplayPlan::make(commands, capabilities.graph_replay_across_streams)
                else {
                    return false;
                };
                let plan = Arc::new(plan);
                self.plans.insert(graph, version, plan.clone());
                plan
            }
        };
        let stream = self.stream_entity(plan.lanes[0]);
        let mut bindings = SmallVec::<[TaskBinding; 4]>::new();
        for (binding, writes) in &plan.bindings {
            // A binding that does not resolve: the launches one by one report it.
            let Ok(resolved) = self.resolve(binding, *writes, stream) else {
                return false;
            };
            bindings.push(resolved);
        }
        let Some(work) = B::graph_replay(graph, version, plan.launches.clone()) else {
            return false;
        };
        self.spawn_task(stream, TaskWork::Native(work), bindings);
        // Each other lane's stream follows the replay where its launches wrote: a lane end
        // binding those buffers, after the replay task that wrote them.
        for (lane_stream, written) in plan.lanes.iter().skip(1).zip(&plan.lane_writes) {
            let entity = self.stream_entity(*lane_stream);
            // The same handles resolved for the replay task just above: none fails here.
            let ends = (written.iter())
                .filter_map(|&i| {
                    let (binding, _) = &plan.bindings[usize::from(i)];
                    self.resolve(binding, true, entity).ok()
                })
                .collect();
            self.spawn_task(entity, TaskWork::Native(Box::new(ReplayLaneEnd)), ends);
        }
        true
    }

    /// A replay: each run of two or more launches with static grids is one unit as in
    /// [`Self::replay_as_one`] (a replay of launches only is one run), and every other command is
    /// issued as it was captured. Run `r` is planned under the graph's number with `r` in its top
    /// bits (the first run under the graph's own); a run past [`MAX_RUNS`] runs launch by launch.
    fn replay_in_runs(&mut self, graph: u64, version: u64, commands: &[Op]) {
        let unit = |command: &Op| {
            matches!(
                command,
                Op::Launch(Launch {
                    count: CubeCount::Static(..),
                    ..
                })
            )
        };
        let (mut start, mut run) = (0, 0u64);
        while start < commands.len() {
            let end = start + commands[start..].iter().take_while(|c| unit(c)).count();
            if end - start >= 2 {
                let key = graph ^ (run << RUN_KEY_SHIFT);
                run += 1;
                if run <= MAX_RUNS && self.replay_as_one(key, version, &commands[start..end]) {
                    start = end;
                    continue;
                }
            }
            // The launches one by one (none, or a run that cannot be one unit), then the
            // command that ended the run.
            let stop = (end + 1).min(commands.len());
            for recorded in &commands[start..stop] {
                self.replay_one(recorded);
            }
            start = stop;
        }
    }

    /// One op of a replayed graph, as the op it was captured from. A capture records only
    /// launches, writes and flushes; any other op in a replay command came from elsewhere, and
    /// is the stream's fault (or a warning, for an op on no stream) rather than a silent skip.
    fn replay_one(&mut self, op: &Op) {
        match op {
            Op::Launch(launch) => {
                let stream = self.stream_entity(launch.stream);
                self.launch(stream, launch.clone());
            }
            Op::Write { dst, data, stream } => {
                let stream = self.stream_entity(*stream);
                self.write(stream, dst, data.clone());
            }
            Op::Flush { stream } => {
                let stream = self.stream_entity(*stream);
                self.spawn_task(stream, TaskWork::Flush, SmallVec::new());
            }
            other => {
                let call = other.kind();
                tracing::warn!(target: "gpuworld::graph", call, "not replayed: a graph replays launches, writes and flushes");
                let stream = match other {
                    Op::Create { stream, .. }
                    | Op::OpenAllocationMode { stream, .. }
                    | Op::CloseAllocationMode { stream } => Some(*stream),
                    _ => None,
                };
                if let Some(stream) = stream {
                    let stream = self.stream_entity(stream);
                    self.record_fault(stream, Error::Graph(GraphError::NotCapturable { call }));
                }
            }
        }
    }
}
