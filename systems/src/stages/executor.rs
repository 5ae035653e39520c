//! The tick's executor: runs the schedule's systems one after another on the calling thread, and
//! applies deferred commands at the schedule's sync points and at its end, of the systems that
//! have any. Bevy's `SingleThreadedExecutor` does the same, plus run conditions, per-system panic
//! reports and bookkeeping for both; on the path of every round trip those cost about 3,000
//! instructions a tick (a quarter of the tick, callgrind), for features the tick does not use:
//! it adds no run conditions (`tick_schedule` checks), and a panicking system unwinds through
//! `Runtime::tick` as it would through bevy's executor.

use bevy_ecs::error::{BevyError, ErrorContext};
use bevy_ecs::prelude::*;
use bevy_ecs::schedule::{ApplyDeferred, FixedBitSet, Schedule, SystemExecutor, SystemSchedule};
use bevy_ecs::system::RunSystemError;
use std::any::TypeId;

/// Runs a schedule without run conditions in order, applying deferred commands of only the
/// systems that have some.
#[derive(Debug, Default)]
pub struct TickExecutor {
    /// Systems run since the last sync point whose deferred commands are not applied yet.
    unapplied: Vec<usize>,
    /// Whether the commands left at the end of a run are applied (bevy's default: yes).
    apply_final_deferred: bool,
}

impl TickExecutor {
    /// An executor that applies what is left deferred at the end of each run.
    pub fn new() -> TickExecutor {
        TickExecutor {
            unapplied: Vec::new(),
            apply_final_deferred: true,
        }
    }

    fn apply_deferred(&mut self, schedule: &mut SystemSchedule, world: &mut World) {
        // SAFETY: only methods of `System` are called on the schedule's systems.
        let systems = unsafe { schedule.systems_mut() };
        for index in self.unapplied.drain(..) {
            systems[index].apply_deferred(world);
        }
    }
}

/// Whether any system or set of `schedule` has a run condition, which this executor would ignore.
pub fn has_run_conditions(schedule: &Schedule) -> bool {
    let graph = schedule.graph();
    graph
        .systems
        .iter()
        .any(|(_, _, conditions)| !conditions.is_empty())
        || graph
            .system_sets
            .iter()
            .any(|(_, _, conditions)| !conditions.is_empty())
}

impl SystemExecutor for TickExecutor {
    fn init(&mut self, _schedule: &SystemSchedule) {
        self.unapplied.clear();
    }

    fn run(
        &mut self,
        schedule: &mut SystemSchedule,
        world: &mut World,
        skip_systems: Option<&FixedBitSet>,
        error_handler: fn(BevyError, ErrorContext),
    ) {
        // SAFETY: only methods of `System` are called on the schedule's systems.
        let count = unsafe { schedule.systems_mut() }.len();
        for index in 0..count {
            if skip_systems.is_some_and(|skipped| skipped.contains(index)) {
                continue;
            }
            // SAFETY: as above.
            let system = &mut unsafe { schedule.systems_mut() }[index];
            if system.system_type() == TypeId::of::<ApplyDeferred>() {
                self.apply_deferred(schedule, world);
                continue;
            }
            if let Err(RunSystemError::Failed(error)) =
                system.run_without_applying_deferred((), world)
            {
                error_handler(
                    error,
                    ErrorContext::System {
                        name: system.name(),
                        last_run: system.get_last_run(),
                    },
                );
            }
            if system.has_deferred() {
                self.unapplied.push(index);
            }
        }
        if self.apply_final_deferred {
            self.apply_deferred(schedule, world);
        }
    }

    fn set_apply_final_deferred(&mut self, value: bool) {
        self.apply_final_deferred = value;
    }
}
