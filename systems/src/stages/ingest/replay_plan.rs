//! How a replay runs as one unit: the plan of a run of launches (its distinct bindings, the
//! streams it spans, which launches of other lanes each follows), made at a graph version's
//! first replay and kept.

use crate::binding::Binding;
use crate::graph::PlannedLaunch;
use crate::ids::{HandleId, StreamId};
use crate::inbox::{Launch, Op};
use crate::kernel::CubeCount;
use smallvec::SmallVec;
use std::sync::Arc;

/// Where a run of launches inside a replay puts its index in the key it is planned under: graph
/// numbers stay far below 2^48.
pub(super) const RUN_KEY_SHIFT: u32 = 48;

/// Runs of launches a replay plans as units: their indices fit above [`RUN_KEY_SHIFT`], so no
/// two runs share a key.
pub(super) const MAX_RUNS: u64 = 1 << (64 - RUN_KEY_SHIFT);

/// Replays run as one unit, planned at their first replay, by graph and version (the most
/// recently made last; a graph keeps its latest version only).
#[derive(Default)]
pub(crate) struct ReplayPlans {
    plans: Vec<(u64, u64, Arc<ReplayPlan>)>,
}

/// Plans kept; the oldest goes first.
const REPLAY_PLANS: usize = 64;

impl ReplayPlans {
    pub(super) fn get(&self, graph: u64, version: u64) -> Option<Arc<ReplayPlan>> {
        (self.plans.iter())
            .find(|(g, v, _)| *g == graph && *v == version)
            .map(|(_, _, plan)| plan.clone())
    }

    pub(super) fn insert(&mut self, graph: u64, version: u64, plan: Arc<ReplayPlan>) {
        self.plans.retain(|(g, _, _)| *g != graph);
        if self.plans.len() >= REPLAY_PLANS {
            self.plans.remove(0);
        }
        self.plans.push((graph, version, plan));
    }
}

/// What a replay run as one unit needs besides resolving its bindings.
pub(super) struct ReplayPlan {
    /// The launches, their bindings indexing `bindings`.
    pub(super) launches: Arc<[PlannedLaunch]>,
    /// The frame's distinct bindings in order of first use, and whether a launch writes each.
    pub(super) bindings: Vec<(Binding, bool)>,
    /// The streams, the first launch's first.
    pub(super) lanes: SmallVec<[StreamId; 4]>,
    /// For each lane past the first, the bindings its launches write.
    pub(super) lane_writes: Vec<SmallVec<[u16; 4]>>,
}

impl ReplayPlan {
    /// The plan of `commands`, or `None` when they are not all launches with static grids, or
    /// span several streams where the backend does not replay `across_streams` (or more than
    /// [`MAX_LANES`]).
    pub(super) fn make(commands: &[Op], across_streams: bool) -> Option<ReplayPlan> {
        let mut lanes = SmallVec::<[StreamId; 4]>::new();
        for command in commands {
            let Op::Launch(Launch {
                count: CubeCount::Static(..),
                stream,
                ..
            }) = command
            else {
                return None;
            };
            if !lanes.contains(stream) {
                lanes.push(*stream);
            }
        }
        if lanes.len() > 1 && (!across_streams || lanes.len() > MAX_LANES) {
            return None;
        }
        // A frame binds the same few ranges again and again: each distinct one is resolved and
        // bound once (written if any launch writes it), which keeps the later stages' work per
        // replay to the frame's buffers, not its launches.
        let mut bindings = Vec::<(Binding, bool)>::new();
        let mut seen = rustc_hash::FxHashMap::<(HandleId, u64, u64), u16>::default();
        let mut planned = Vec::with_capacity(commands.len());
        let mut touches: Vec<SmallVec<[(HandleId, bool); 4]>> = Vec::new();
        let mut lane_writes = vec![SmallVec::<[u16; 4]>::new(); lanes.len() - 1];
        for command in commands {
            let Op::Launch(Launch {
                kernel,
                count: CubeCount::Static(x, y, z),
                buffers,
                scalars,
                mode,
                stream,
            }) = command
            else {
                return None;
            };
            let lane = lanes.iter().position(|s| s == stream).unwrap_or(0);
            let params = kernel.signature.buffers;
            let mut indices = SmallVec::new();
            let mut touched = SmallVec::new();
            for (i, binding) in buffers.iter().enumerate() {
                let writes = params.get(i).is_none_or(|p| p.access.writes());
                let key = (
                    binding.handle(),
                    binding.offset_start(),
                    binding.offset_end(),
                );
                let index = match seen.get(&key) {
                    Some(&index) => {
                        bindings[usize::from(index)].1 |= writes;
                        index
                    }
                    None => {
                        let index = u16::try_from(bindings.len()).ok()?;
                        seen.insert(key, index);
                        bindings.push((*binding, writes));
                        index
                    }
                };
                indices.push(index);
                if lanes.len() > 1 {
                    touched.push((binding.handle(), writes));
                    if writes && lane > 0 && !lane_writes[lane - 1].contains(&index) {
                        lane_writes[lane - 1].push(index);
                    }
                }
            }
            let after = if lanes.len() > 1 {
                lane_dependencies(&planned, &touches, lane as u8, &touched)
            } else {
                SmallVec::new()
            };
            planned.push(PlannedLaunch {
                kernel,
                grid: [*x, *y, *z],
                bindings: indices,
                scalars: scalars.clone(),
                mode: *mode,
                lane: lane as u8,
                after,
            });
            if lanes.len() > 1 {
                touches.push(touched);
            }
        }
        Some(ReplayPlan {
            launches: planned.into(),
            bindings,
            lanes,
            lane_writes,
        })
    }
}

/// Streams a replay may span and still run as one unit.
const MAX_LANES: usize = 8;

/// The launches of other lanes that a launch on `lane` binding `touched` must follow, given the
/// launches `planned` before it (and what each touched): per other lane, the last that writes a
/// handle it binds, or binds a handle it writes (views of one handle count as one, as a
/// conservative stand-in for overlap).
fn lane_dependencies(
    planned: &[PlannedLaunch],
    touches: &[SmallVec<[(HandleId, bool); 4]>],
    lane: u8,
    touched: &[(HandleId, bool)],
) -> SmallVec<[u16; 2]> {
    let mut after = SmallVec::<[u16; 2]>::new();
    let mut lanes_done = SmallVec::<[u8; 4]>::new();
    for (index, (earlier, earlier_touched)) in planned.iter().zip(touches).enumerate().rev() {
        if earlier.lane == lane || lanes_done.contains(&earlier.lane) {
            continue;
        }
        let conflicts = touched.iter().any(|&(handle, writes)| {
            earlier_touched
                .iter()
                .any(|&(other, other_writes)| other == handle && (writes || other_writes))
        });
        if conflicts && let Ok(index) = u16::try_from(index) {
            after.push(index);
            lanes_done.push(earlier.lane);
        }
    }
    after
}

#[cfg(test)]
mod lane_tests {
    use super::lane_dependencies;
    use crate::graph::PlannedLaunch;
    use crate::ids::HandleId;
    use crate::kernel::ExecutionMode;
    use smallvec::SmallVec;

    fn launch(lane: u8) -> PlannedLaunch {
        PlannedLaunch {
            kernel: &crate::library::ADD,
            grid: [1, 1, 1],
            bindings: SmallVec::new(),
            scalars: SmallVec::new(),
            mode: ExecutionMode::Checked,
            lane,
            after: SmallVec::new(),
        }
    }

    #[test]
    fn a_launch_follows_the_last_conflicting_launch_of_each_other_lane() {
        let (a, b, c) = (HandleId(1), HandleId(2), HandleId(3));
        // (lane, what it binds: handle, writes)
        let frame: [(u8, &[(HandleId, bool)]); 6] = [
            (0, &[(a, true)]),              // 0: writes a
            (1, &[(a, false), (b, true)]),  // 1: reads a: follows 0
            (1, &[(c, true)]),              // 2: nothing shared with lane 0
            (0, &[(c, false)]),             // 3: reads c: follows 2
            (0, &[(b, false)]),             // 4: reads b, which lane 1 wrote before 2: follows 1
            (2, &[(a, false), (c, false)]), // 5: readers of what lanes 0 and 1 wrote
        ];
        let mut planned = Vec::new();
        let mut touches: Vec<SmallVec<[(HandleId, bool); 4]>> = Vec::new();
        let mut afters = Vec::new();
        for (lane, touched) in frame {
            let after = lane_dependencies(&planned, &touches, lane, touched);
            afters.push(after.to_vec());
            planned.push(launch(lane));
            touches.push(touched.iter().copied().collect());
        }
        assert_eq!(
            afters,
            vec![vec![], vec![0], vec![], vec![2], vec![1], vec![2, 0]],
            "two readers of one handle on two lanes do not wait for each other"
        );
    }
}
