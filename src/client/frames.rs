//! Frames and what is in flight: a host loop (a game's frame, a simulation step) ends each frame
//! with a fence, a sync of its stream, and limits how many frames run ahead of the device, as a
//! swapchain does; `in_flight` says what the runtime has not finished. Nothing here ticks but
//! `wait_for_frames`, which waits like a blocking call.

mod fences;

pub(super) use fences::FrameFences;

use super::ComputeClient;
use gpuworld_systems::published::InFlight;
use gpuworld_systems::{Backend, Result};

impl<B: Backend> ComputeClient<B> {
    /// Ends a frame: enqueues a fence after everything this client's stream was given so far
    /// (a sync, answered by the tick that sees the work done). Never ticks.
    pub fn end_frame(&self) {
        let fence = self.enqueue_sync();
        self.shared.frames.lock().push(fence);
    }

    /// Frames ended with [`ComputeClient::end_frame`] whose work the ticks so far have not seen
    /// finish. Never ticks.
    pub fn frames_in_flight(&self) -> usize {
        self.shared.frames.lock().retire_finished()
    }

    /// Waits, oldest first, until at most `limit` frames are in flight; returns the fault of a
    /// frame it waited for, if any. May tick: it waits as a blocking call does (under
    /// `Driver::Manual` it ticks until the oldest frame's fence is answered).
    pub fn wait_for_frames(&self, limit: usize) -> Result<()> {
        loop {
            let oldest = {
                let mut frames = self.shared.frames.lock();
                if frames.retire_finished() <= limit {
                    return Ok(());
                }
                frames.pop_oldest()
            };
            if let Some(fence) = oldest {
                self.wait(fence)?;
            }
        }
    }

    /// What the runtime has not finished: commands not yet ingested (counted now), frames in
    /// flight, and what the last tick left (tasks queued, reads, syncs, memory behind events,
    /// commands waiting for memory). Never ticks and takes no runtime lock.
    pub fn in_flight(&self) -> InFlight {
        InFlight {
            commands: self.shared.inbox.queued_commands(),
            frames: self.frames_in_flight(),
            ..self.shared.published.in_flight()
        }
    }

    /// Number of ticks the runtime has finished. Never ticks and takes no runtime lock.
    pub fn tick_count(&self) -> u64 {
        self.shared.published.ticks_finished()
    }
}
