//! The fences of the frames in flight, oldest first: what a client's frames leave for the ticks
//! to answer.

use futures_channel::oneshot;
use gpuworld_systems::Result;
use std::collections::VecDeque;

/// The fences of the frames ended and not yet seen finished, oldest first.
#[derive(Default)]
pub(in crate::client) struct FrameFences {
    fences: VecDeque<oneshot::Receiver<Result<()>>>,
}

impl FrameFences {
    /// Drops the fences of finished frames from the front (frames finish in order on one
    /// stream; a later frame finished early waits for the ones before it); how many are left.
    pub(in crate::client) fn retire_finished(&mut self) -> usize {
        while let Some(oldest) = self.fences.front_mut() {
            match oldest.try_recv() {
                Ok(None) => break,
                // Finished, with or without a fault: the fault is the stream's, and its next
                // read or sync reports it.
                Ok(Some(_)) | Err(oneshot::Canceled) => {
                    self.fences.pop_front();
                }
            }
        }
        self.fences.len()
    }

    /// Adds the fence of the frame just ended.
    pub(in crate::client) fn push(&mut self, fence: oneshot::Receiver<Result<()>>) {
        self.fences.push_back(fence);
    }

    /// Takes the fence of the oldest frame in flight, to wait for it.
    pub(in crate::client) fn pop_oldest(&mut self) -> Option<oneshot::Receiver<Result<()>>> {
        self.fences.pop_front()
    }
}
