//! The commands ingest did not take in the tick that drained them: those waiting for memory or
//! another runtime, and those carried behind a read or sync. Ingest alone changes them; the
//! scheduling and GC stages, snapshots and the runtime's drop read them through this API.

use crate::inbox::Command;
use crate::snapshot::Capture;
use bevy_ecs::prelude::*;
use std::collections::VecDeque;

/// Commands ingest did not take in the tick that drained them, in arrival order.
#[derive(Debug, Resource, Default)]
pub struct DeferredCommands {
    /// Commands ingest could not take yet: an allocation that found no memory while released
    /// memory was still on its way back, or a command waiting for another runtime (bytes
    /// arriving, a peer copy's other part), and every command after it. Ingest retries them
    /// first at the next tick, from the front, and appends what arrives meanwhile, so a long
    /// wait costs each tick only the commands it takes; meanwhile every queue is submitted so
    /// that released memory can retire.
    pub(super) waiting: VecDeque<Command>,
    /// Commands drained behind the first one a caller may block on (a read, a sync) from the
    /// [`super::CUT_FROM`]th on (or past the commands carried into the tick, if more): the next
    /// tick takes them first, and whole. A tick then takes a bounded share of what many callers
    /// queued, and a reply comes from a tick that ends soon after its command instead of one
    /// that ingests and submits everything queued behind it (issue 31: with 32 callers, a read's
    /// p99 was two whole drains). `ingest_commands` keeps whether any wait in a local, so a tick
    /// with none does not look the resource up.
    pub(super) carried: VecDeque<Command>,
}

impl DeferredCommands {
    /// Whether commands wait for memory (or another runtime): the scheduling stage then submits
    /// every queue, so that released memory can retire.
    pub fn wait_for_memory(&self) -> bool {
        !self.waiting.is_empty()
    }

    /// Commands waiting or carried to the next tick.
    pub fn len(&self) -> usize {
        self.waiting.len() + self.carried.len()
    }

    /// Whether no command waits or is carried.
    #[cfg_attr(not(feature = "internals"), allow(dead_code))]
    pub fn is_empty(&self) -> bool {
        self.waiting.is_empty() && self.carried.is_empty()
    }

    /// Every command left, in arrival order, taken: what a runtime being dropped fails.
    pub fn take_all(&mut self) -> impl Iterator<Item = Command> + use<> {
        let waiting = std::mem::take(&mut self.waiting);
        let carried = std::mem::take(&mut self.carried);
        waiting.into_iter().chain(carried)
    }
}

/// The number of commands waiting.
pub(in crate::stages) fn snapshot_lines(world: &mut World, capture: &mut Capture<'_>) {
    capture.set_deferred_commands(world.resource::<DeferredCommands>().len());
}
