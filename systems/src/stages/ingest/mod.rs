//! Stage 1, ingest: drains the client inbox, in arrival order, into handle entities, tasks and
//! releases, each command handed to its family: memory (`memory.rs`), work (`work.rs`),
//! transfers (`transfers.rs`), replies (`replies.rs`) and graphs (`graphs.rs`, planning in
//! `replay_plan.rs`). Owns `HandleIndex` (`handle_index.rs`) and `DeferredCommands`
//! (`deferred.rs`); fills `NewTasks`; creates stream entities on first use. Its one system
//! (`drain.rs`) declares what it touches.

mod deferred;
mod drain;
mod graphs;
mod handle_index;
mod memory;
mod replay_plan;
mod replies;
mod transfers;
mod work;

// What tools read with the `internals` feature; the stages themselves name fewer.
#[cfg_attr(not(feature = "internals"), allow(unused_imports))]
pub use super::lifetime::UsedOn;
pub use deferred::DeferredCommands;
#[cfg_attr(not(feature = "internals"), allow(unused_imports))]
pub use drain::{CUT_FROM, InboxHandle, IngestAccess, ingest_commands};
#[cfg_attr(not(feature = "internals"), allow(unused_imports))]
pub use handle_index::{HandleEntry, HandleIndex, HandleState};

use super::tick::TickStage;
use crate::backend::Backend;
use crate::snapshot::Capture;
use bevy_ecs::prelude::*;

/// Registers the ingest stage: its handle index, its deferred commands and its system.
pub fn build<B: Backend>(world: &mut World, schedule: &mut Schedule) {
    world.init_resource::<HandleIndex>();
    world.init_resource::<DeferredCommands>();
    schedule.add_systems(ingest_commands::<B>.in_set(TickStage::Ingest));
}

/// The commands waiting, and the lines of the handles no work used yet.
pub(super) fn snapshot_lines(world: &mut World, capture: &mut Capture<'_>) {
    deferred::snapshot_lines(world, capture);
    handle_index::snapshot_lines(world, capture);
}

#[cfg(test)]
mod tests {
    use crate::binding::Binding;
    use crate::error::{BindingError, Error};
    use crate::handle::Handle;
    use crate::ids::StreamId;
    use crate::inbox::Command;
    use crate::runtime::Runtime;
    use crate::sim::{SimBackend, SimConfig};
    use crate::world::RuntimeConfig;
    use futures_channel::oneshot;

    /// A binding can no longer be forged outside the crate, but `resolve` still checks one
    /// against the memory its handle really has, not the capacity it claims (issue 27).
    #[test]
    fn resolve_refuses_a_binding_claiming_more_than_its_handles_memory() {
        let mut runtime = Runtime::new(
            SimBackend::new(SimConfig::default()),
            RuntimeConfig::default(),
        );
        let stream = StreamId { value: 0 };
        let handle = Handle::create(runtime.inbox(), 64, None, stream);
        let real = handle.binding();
        let forged = Binding::of_handle(real.handle(), real.runtime(), 0, 0, 1 << 20);
        let (reply, mut receiver) = oneshot::channel();
        runtime.inbox().push(Command::Read {
            sources: [forged].into_iter().collect(),
            stream,
            reply,
            staging: None,
        });
        for _ in 0..4 {
            runtime.tick();
        }
        match receiver.try_recv() {
            Ok(Some(Err(Error::Binding(BindingError::OutOfRange { size, end, .. })))) => {
                assert_eq!((size, end), (64, 1 << 20));
            }
            other => panic!("expected OutOfRange, got {other:?}"),
        }
    }
}
