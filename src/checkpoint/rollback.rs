//! Rollback in device memory: a ring of `depth` slots per buffer, saved into and rolled back
//! from with the library's `COPY` kernel on the client's stream, so a save or rollback is a few
//! launches with no host round trip and no wait (stream order puts each copy after the work
//! queued before it and before the work queued after).

use crate::client::{Bindings, ComputeClient};
use gpuworld_systems::error::CheckpointError;
use gpuworld_systems::library::{COPY, LINEAR_CUBE};
use gpuworld_systems::{Backend, Binding, CubeCount, Handle, Result};

/// The last `depth` saved frames of a set of buffers, in device memory: `save(frame)` copies
/// the buffers into a slot, `rollback(frame)` copies a slot back ([`ComputeClient::rollback_ring`]).
pub struct RollbackRing<B: Backend> {
    client: ComputeClient<B>,
    buffers: Vec<Binding>,
    /// `slots[slot][buffer]`: the copies.
    slots: Vec<Vec<Handle>>,
    /// The frame each slot holds.
    frames: Vec<Option<u64>>,
}

impl<B: Backend> std::fmt::Debug for RollbackRing<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RollbackRing")
            .field("buffers", &self.buffers.len())
            .field("depth", &self.slots.len())
            .field("held", &self.held())
            .finish_non_exhaustive()
    }
}

impl<B: Backend> ComputeClient<B> {
    /// A ring holding up to `depth` frames (at least 1) of `buffers` in device memory, on this
    /// client's stream: `depth` copies of each buffer are allocated now.
    /// `CheckpointError::NotWholeWords` for a buffer that is not whole 4-byte words from a
    /// 4-byte offset (the device copy moves words). Never ticks.
    pub fn rollback_ring<I>(&self, buffers: I, depth: usize) -> Result<RollbackRing<B>>
    where
        I: IntoIterator,
        I::Item: Into<Binding>,
    {
        let buffers: Vec<Binding> = buffers.into_iter().map(Into::into).collect();
        for (index, binding) in buffers.iter().enumerate() {
            let (start, end) = binding.validate(self.runtime_id())?;
            if start % 4 != 0 || (end - start) % 4 != 0 {
                return Err(CheckpointError::NotWholeWords {
                    index,
                    size: end - start,
                    offset: start,
                }
                .into());
            }
        }
        let depth = depth.max(1);
        let slots = (0..depth)
            .map(|_| buffers.iter().map(|b| self.empty(b.size())).collect())
            .collect();
        Ok(RollbackRing {
            client: self.clone(),
            buffers,
            slots,
            frames: vec![None; depth],
        })
    }
}

impl<B: Backend> RollbackRing<B> {
    /// Copies the buffers, as the work queued before this call leaves them, into the slot of
    /// `frame`: the slot already holding it, else a free one, else the oldest frame's. Only
    /// enqueues: never ticks.
    pub fn save(&mut self, frame: u64) -> Result<()> {
        let slot = self
            .slot_of(frame)
            .or_else(|| self.frames.iter().position(Option::is_none))
            .or_else(|| (0..self.frames.len()).min_by_key(|&slot| self.frames[slot].unwrap_or(0)))
            .unwrap_or(0);
        // Marked free first: a failed copy leaves no frame that was not saved.
        self.frames[slot] = None;
        for (buffer, copy) in self.buffers.iter().zip(&self.slots[slot]) {
            self.copy_words(*buffer, copy.binding())?;
        }
        self.frames[slot] = Some(frame);
        Ok(())
    }

    /// Copies the buffers back as they were at `frame`, and forgets the frames after it (the
    /// run goes on from `frame` again). `CheckpointError::FrameNotHeld` when the ring does not
    /// hold `frame`. Only enqueues: never ticks.
    pub fn rollback(&mut self, frame: u64) -> Result<()> {
        let Some(slot) = self.slot_of(frame) else {
            return Err(CheckpointError::FrameNotHeld {
                frame,
                held: describe(&self.held()).into(),
            }
            .into());
        };
        for (buffer, copy) in self.buffers.iter().zip(&self.slots[slot]) {
            self.copy_words(copy.binding(), *buffer)?;
        }
        for held in &mut self.frames {
            if held.is_some_and(|held| held > frame) {
                *held = None;
            }
        }
        Ok(())
    }

    /// The frames held, oldest first.
    pub fn held(&self) -> Vec<u64> {
        let mut frames: Vec<u64> = self.frames.iter().flatten().copied().collect();
        frames.sort_unstable();
        frames
    }

    /// Frames the ring holds at most.
    pub fn depth(&self) -> usize {
        self.slots.len()
    }

    fn slot_of(&self, frame: u64) -> Option<usize> {
        self.frames.iter().position(|held| *held == Some(frame))
    }

    /// Copies `src` to `dst` (equal sizes, whole words) with `COPY` launches of at most the
    /// device's largest 1-D cube count each.
    fn copy_words(&self, src: Binding, dst: Binding) -> Result<()> {
        let max_cubes = u64::from(self.client.properties().max_cube_count[0].clamp(1, 65_535));
        let step = max_cubes * u64::from(LINEAR_CUBE) * 4;
        for (from, to) in src.chunks(step)?.zip(dst.chunks(step)?) {
            let count = CubeCount::covering(from.size() / 4, LINEAR_CUBE);
            self.client
                .launch(&COPY, count, Bindings::new().buffer(from).buffer(to))?;
        }
        Ok(())
    }
}

/// The frames `held` as text: `none`, `7`, `12..=19`, or a list.
fn describe(held: &[u64]) -> String {
    match held {
        [] => "none".into(),
        [one] => one.to_string(),
        [first, .., last] if last - first + 1 == held.len() as u64 => format!("{first}..={last}"),
        _ => held
            .iter()
            .map(u64::to_string)
            .collect::<Vec<_>>()
            .join(", "),
    }
}
