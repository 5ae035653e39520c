//! Ingest's replies family: reads, syncs and marks, whose tasks a caller waits on (a read whose
//! binding does not resolve is answered with the error at once).

use super::drain::Ingest;
use crate::backend::{Backend, DeviceEvent};
use crate::binding::Binding;
use crate::error::Result;
use crate::ids::StreamId;
use crate::inbox::{ReadReply, Reply};
use crate::staging::StagingAllocator;
use crate::world::*;
use smallvec::SmallVec;
use std::sync::Arc;

impl<B: Backend> Ingest<'_, '_, '_, B> {
    /// A read of `sources` on `stream`, answered with the error at once if one does not resolve.
    pub(super) fn read(
        &mut self,
        sources: &[Binding],
        stream: StreamId,
        reply: Reply<ReadReply>,
        staging: Option<Arc<dyn StagingAllocator>>,
    ) {
        let stream = self.stream_entity(stream);
        // A loop, not `collect`: collecting into a `SmallVec` costs hundreds of
        // instructions for the one or two sources a read has.
        let mut bindings = SmallVec::<[TaskBinding; 4]>::new();
        let resolved = sources.iter().try_for_each(|b| {
            bindings.push(self.resolve(b, false, stream)?);
            Ok(())
        });
        match resolved.map(|()| bindings) {
            Ok(bindings) => {
                let read = TaskWork::Read(ReadRequest { reply, staging });
                self.spawn_task(stream, read, bindings);
            }
            Err(error) => {
                self.outbox.read(reply, Err(error));
            }
        }
    }

    /// A sync of `stream`, answered once its work so far has run.
    pub(super) fn sync(&mut self, stream: StreamId, reply: Reply<Result<()>>) {
        let stream = self.stream_entity(stream);
        self.spawn_task(stream, TaskWork::Sync(reply), SmallVec::new());
    }

    /// A mark on `stream`, answered with the backend's mark when its task is submitted.
    pub(super) fn mark(&mut self, stream: StreamId, reply: Reply<Result<DeviceEvent>>) {
        let stream = self.stream_entity(stream);
        self.spawn_task(stream, TaskWork::Mark(reply), SmallVec::new());
    }
}
