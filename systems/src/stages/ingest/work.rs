//! Ingest's work family: launches, native operations and flushes become tasks on their stream,
//! with their bindings resolved to device memory (a binding that does not resolve is the
//! stream's fault, or the native operation's to pass on).

use super::drain::Ingest;
use crate::backend::{Backend, LaunchCount, NativeWork};
use crate::binding::Binding;
use crate::error::Error;
use crate::ids::StreamId;
use crate::inbox::{Command, Launch};
use crate::kernel::CubeCount;
use crate::world::*;
use bevy_ecs::prelude::*;
use smallvec::SmallVec;
use std::task::Context;

impl<B: Backend> Ingest<'_, '_, '_, B> {
    /// A launch's task on `stream`, or its binding's error as the stream's fault.
    pub(super) fn launch(&mut self, stream: Entity, launch: Launch) {
        let Launch {
            kernel,
            count,
            buffers,
            scalars,
            mode,
            ..
        } = launch;
        let mut bindings = SmallVec::<[TaskBinding; 4]>::new();
        let mut launch_count = LaunchCount::Static([0; 3]);
        // A binding the signature declares read-only is ordered as a read: readers of one
        // buffer on different streams do not wait for each other.
        let params = kernel.signature.buffers;
        let resolved = buffers
            .iter()
            .enumerate()
            .try_for_each(|(i, b)| {
                let writes = params.get(i).is_none_or(|p| p.access.writes());
                self.resolve(b, writes, stream).map(|tb| bindings.push(tb))
            })
            .and_then(|()| match count {
                CubeCount::Static(x, y, z) => {
                    launch_count = LaunchCount::Static([x, y, z]);
                    Ok(())
                }
                CubeCount::Dynamic(b) => self.resolve(&b, false, stream).map(|tb| {
                    launch_count = LaunchCount::Dynamic(tb.region);
                    bindings.push(tb);
                }),
            });
        match resolved {
            Ok(()) => self.spawn_task(
                stream,
                TaskWork::Launch {
                    kernel,
                    count: launch_count,
                    scalars,
                    mode,
                },
                bindings,
            ),
            Err(error) => self.record_fault(stream, error),
        }
    }

    /// A native operation's task once it is ready (it may wait for another runtime: the
    /// command back); a binding that does not resolve is its error to pass on, or the stream's.
    pub(super) fn native(
        &mut self,
        work: NativeWork,
        buffers: SmallVec<[Binding; 4]>,
        stream: StreamId,
    ) -> Option<Command> {
        let ready = work.poll_ready(&mut Context::from_waker(self.waker));
        if ready.is_pending() {
            return Some(Command::Native {
                work,
                buffers,
                stream,
            });
        }
        let stream = self.stream_entity(stream);
        if let std::task::Poll::Ready(Err(error)) = ready {
            if !work.pass_on(&error) {
                self.record_fault(stream, error);
            }
            return None;
        }
        let resolved: Result<SmallVec<[TaskBinding; 4]>, Error> = buffers
            .iter()
            .map(|b| self.resolve(b, true, stream))
            .collect();
        match resolved {
            Ok(bindings) => self.spawn_task(stream, TaskWork::Native(work), bindings),
            Err(error) => {
                if !work.pass_on(&error) {
                    self.record_fault(stream, error);
                }
            }
        }
        None
    }

    /// A flush of `stream`: its queue is submitted through it.
    pub(super) fn flush(&mut self, stream: StreamId) {
        let stream = self.stream_entity(stream);
        self.spawn_task(stream, TaskWork::Flush, SmallVec::new());
    }
}
