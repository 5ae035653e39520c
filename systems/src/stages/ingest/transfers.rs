//! Ingest's transfer family: writes of host bytes, and writes of bytes still arriving from
//! another runtime (the command waits, polled with the tick's waker, until they are here).

use super::drain::Ingest;
use crate::arriving::Arriving;
use crate::backend::Backend;
use crate::binding::Binding;
use crate::bytes::HostBytes;
use crate::ids::StreamId;
use crate::inbox::Command;
use crate::world::*;
use bevy_ecs::prelude::*;
use smallvec::SmallVec;
use std::task::Context;

impl<B: Backend> Ingest<'_, '_, '_, B> {
    /// A write's task on `stream`, or its binding's error as the stream's fault.
    pub(super) fn write(&mut self, stream: Entity, dst: &Binding, data: HostBytes) {
        match self.resolve(dst, true, stream) {
            Ok(binding) => self.spawn_task(
                stream,
                TaskWork::Write(data),
                SmallVec::from_elem(binding, 1),
            ),
            Err(error) => self.record_fault(stream, error),
        }
    }

    /// A write of bytes arriving from another runtime: the command back while they are on their
    /// way, their failure the stream's fault.
    pub(super) fn write_arriving(
        &mut self,
        dst: Binding,
        mut bytes: Arriving,
        stream: StreamId,
    ) -> Option<Command> {
        match bytes.poll_bytes(&mut Context::from_waker(self.waker)) {
            std::task::Poll::Ready(Ok(data)) => {
                let stream = self.stream_entity(stream);
                self.write(stream, &dst, data);
            }
            std::task::Poll::Ready(Err(error)) => {
                let stream = self.stream_entity(stream);
                self.record_fault(stream, error);
            }
            std::task::Poll::Pending => {
                return Some(Command::WriteArriving { dst, bytes, stream });
            }
        }
        None
    }
}
