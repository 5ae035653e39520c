//! Replies a tick produced, held until the tick has published its state and sent at its very
//! end. A caller woken by its reply then finds the tick over: a getter it calls next
//! (`memory_usage`) already sees that tick, and it never waits out the rest of somebody else's
//! tick, which spinning callers did when threads outnumbered cores (issue 31).

use crate::backend::DeviceEvent;
use crate::error::Result;
use crate::inbox::{ReadReply, Reply};
use bevy_ecs::prelude::Resource;

/// One reply and its value.
#[derive(Debug)]
enum Outgoing {
    Read(Reply<ReadReply>, ReadReply),
    Sync(Reply<Result<()>>, Result<()>),
    Mark(Reply<Result<DeviceEvent>>, Result<DeviceEvent>),
}

/// The replies of the tick running now, in the order the stages produced them.
#[derive(Debug, Resource, Default)]
pub struct Outbox {
    outgoing: Vec<Outgoing>,
}

impl Outbox {
    /// Answers a read once the tick ends.
    pub fn read(&mut self, reply: Reply<ReadReply>, value: ReadReply) {
        self.outgoing.push(Outgoing::Read(reply, value));
    }

    /// Answers a sync once the tick ends.
    pub fn sync(&mut self, reply: Reply<Result<()>>, value: Result<()>) {
        self.outgoing.push(Outgoing::Sync(reply, value));
    }

    /// Answers a mark once the tick ends.
    pub fn mark(&mut self, reply: Reply<Result<DeviceEvent>>, value: Result<DeviceEvent>) {
        self.outgoing.push(Outgoing::Mark(reply, value));
    }

    /// Whether no reply waits to be sent.
    pub fn is_empty(&self) -> bool {
        self.outgoing.is_empty()
    }

    /// Sends every reply held, in order. A receiver that is gone (its caller dropped the
    /// future) needs nothing.
    pub fn send_all(&mut self) {
        for outgoing in self.outgoing.drain(..) {
            match outgoing {
                Outgoing::Read(reply, value) => {
                    let _ = reply.send(value);
                }
                Outgoing::Sync(reply, value) => {
                    let _ = reply.send(value);
                }
                Outgoing::Mark(reply, value) => {
                    let _ = reply.send(value);
                }
            }
        }
    }
}

impl Drop for Outbox {
    /// A world torn down with replies unsent (a tick that panicked) still answers them.
    fn drop(&mut self) {
        self.send_all();
    }
}
