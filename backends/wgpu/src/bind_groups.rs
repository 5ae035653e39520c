//! Bind groups reused across launches. A launch whose buffers are all bound in place is keyed by
//! its kernel and pipeline variant, its (storage, offset, size) triples and its uniform chunk;
//! the same key gets the same bind group, so a loop of identical launches creates one. Entries naming a freed buffer
//! are dropped with it, and the cache is emptied when it grows past its capacity.

use crate::wgsl::Declared;
use gpuworld_hal::backend::StorageId;
use smallvec::SmallVec;
use std::collections::HashMap;

/// Entries kept before the cache is emptied.
const CAPACITY: usize = 4096;

/// What makes two launches' bind groups interchangeable.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) struct BindKey {
    /// The kernel's id.
    pub kernel: &'static str,
    /// How its pipeline declares the buffers (the two pipelines' layouts differ).
    pub declared: Declared,
    /// Storage, offset and size of each buffer binding.
    pub buffers: SmallVec<[(StorageId, u64, u64); 4]>,
    /// The uniform chunk's number, 0 without scalars.
    pub uniform: u64,
}

/// Bind groups by key.
#[derive(Default)]
pub(crate) struct BindGroupCache {
    groups: HashMap<BindKey, wgpu::BindGroup>,
}

impl BindGroupCache {
    /// The bind group for `key`, made by `create` on a miss.
    pub fn get(
        &mut self,
        key: BindKey,
        create: impl FnOnce() -> wgpu::BindGroup,
    ) -> wgpu::BindGroup {
        if let Some(group) = self.groups.get(&key) {
            return group.clone();
        }
        if self.groups.len() >= CAPACITY {
            self.groups.clear();
        }
        self.groups.entry(key).or_insert_with(create).clone()
    }

    /// Drops the bind groups that bind `storage`.
    pub fn forget(&mut self, storage: StorageId) {
        self.groups
            .retain(|key, _| key.buffers.iter().all(|(s, _, _)| *s != storage));
    }
}
