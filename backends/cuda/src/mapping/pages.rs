//! The backend's reservations and the pages it maps under them.

use super::{Range, allocation_prop, refusal, succeeded};
use crate::device::CudaBackend;
use cudarc::driver::sys;
use gpuworld_hal::backend::{AllocError, StorageId};

impl CudaBackend {
    pub(crate) fn reserve_address_range(&mut self, size: u64) -> Result<StorageId, AllocError> {
        self.bind();
        if let Some(reason) = &self.poisoned {
            return Err(AllocError::DeviceFailed {
                reason: reason.clone(),
            });
        }
        let page = self.mapping.page.max(1);
        let size = size.max(page).next_multiple_of(page);
        let bytes = usize::try_from(size).map_err(|_| AllocError::OutOfMemory)?;
        let mut base = 0;
        // SAFETY: reserves addresses only (no memory); freed in `free_address_range`/`Drop`.
        let code = unsafe { sys::cuMemAddressReserve(&mut base, bytes, page as usize, 0, 0) };
        if code != sys::CUresult::CUDA_SUCCESS {
            return Err(refusal("cuMemAddressReserve", code));
        }
        let id = self.next_storage;
        self.next_storage += 1;
        // Launches and copies find the range's addresses as any buffer's.
        self.buffers.insert(id, (base, size));
        self.mapping.ranges.insert(
            id,
            Range {
                base,
                size,
                chunks: Default::default(),
            },
        );
        Ok(StorageId(id))
    }

    pub(crate) fn map_range_pages(
        &mut self,
        storage: StorageId,
        offset: u64,
        len: u64,
    ) -> Result<(), AllocError> {
        self.bind();
        if let Some(reason) = &self.poisoned {
            return Err(AllocError::DeviceFailed {
                reason: reason.clone(),
            });
        }
        let page = self.mapping.page.max(1);
        let Some(range) = self.mapping.ranges.get(&storage.0) else {
            return Err(AllocError::DeviceFailed {
                reason: format!("no reserved address range {}", storage.0).into(),
            });
        };
        if !offset.is_multiple_of(page) || offset.saturating_add(len) > range.size {
            return Err(AllocError::DeviceFailed {
                reason: format!(
                    "pages at {offset} (+{len}) do not lie on pages of range {} ({} bytes)",
                    storage.0, range.size
                )
                .into(),
            });
        }
        if len == 0 || !len.is_multiple_of(page) {
            return Err(AllocError::DeviceFailed {
                reason: format!("{len} bytes is not a whole number of {page}-byte pages").into(),
            });
        }
        if range
            .chunks
            .range(..offset + len)
            .next_back()
            .is_some_and(|(&at, &(_, size))| at + size > offset)
        {
            return Err(AllocError::DeviceFailed {
                reason: format!(
                    "pages at {offset} (+{len}) of range {} are mapped already",
                    storage.0
                )
                .into(),
            });
        }
        let base = range.base;
        let handle = self.page_memory(len)?;
        // SAFETY: `[offset, offset + len)` lies in the reserved range with nothing mapped there.
        let code = unsafe { sys::cuMemMap(base + offset, len as usize, 0, handle, 0) };
        if code != sys::CUresult::CUDA_SUCCESS {
            // Mapped nowhere: back to the spares, returned at the next trim.
            self.mapping.spares.push((handle, len));
            return Err(refusal("cuMemMap", code));
        }
        let descs: Vec<sys::CUmemAccessDesc> = self
            .mapping
            .access
            .iter()
            .map(|&device| {
                // SAFETY: a plain C struct for which all zeroes is valid.
                let mut desc: sys::CUmemAccessDesc = unsafe { std::mem::zeroed() };
                desc.location.type_ = sys::CUmemLocationType::CU_MEM_LOCATION_TYPE_DEVICE;
                desc.location.id = device;
                desc.flags = sys::CUmemAccess_flags::CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
                desc
            })
            .collect();
        // SAFETY: `[offset, offset + len)` was just mapped.
        let code = unsafe {
            sys::cuMemSetAccess(base + offset, len as usize, descs.as_ptr(), descs.len())
        };
        if code != sys::CUresult::CUDA_SUCCESS {
            // SAFETY: mapped by this call and never handed out.
            let unmapped = unsafe { sys::cuMemUnmap(base + offset, len as usize) };
            // Still mapped, it must not be mapped elsewhere: it stays allocated, unused.
            if succeeded(
                unmapped,
                "cuMemUnmap after a refused access: the memory is lost",
            ) {
                self.mapping.spares.push((handle, len));
            }
            return Err(refusal("cuMemSetAccess", code));
        }
        if let Some(range) = self.mapping.ranges.get_mut(&storage.0) {
            range.chunks.insert(offset, (handle, len));
        }
        Ok(())
    }

    /// Device memory for `len` bytes of pages, counted in `allocated`: a spare of that size (memory
    /// unmapped since the last trim), else a new allocation; when the device has no room and
    /// spares hold some, they go back and the allocation is asked once more.
    fn page_memory(&mut self, len: u64) -> Result<sys::CUmemGenericAllocationHandle, AllocError> {
        if let Some(index) = self
            .mapping
            .spares
            .iter()
            .position(|&(_, size)| size == len)
        {
            return Ok(self.mapping.spares.swap_remove(index).0);
        }
        let prop = allocation_prop(self.device);
        let mut handle = 0;
        // SAFETY: valid out-pointer and property struct; the handle is released by a trim.
        let mut code = unsafe { sys::cuMemCreate(&mut handle, len as usize, &prop, 0) };
        if code == sys::CUresult::CUDA_ERROR_OUT_OF_MEMORY && !self.mapping.spares.is_empty() {
            self.trim_spares();
            // SAFETY: as above.
            code = unsafe { sys::cuMemCreate(&mut handle, len as usize, &prop, 0) };
        }
        if code != sys::CUresult::CUDA_SUCCESS {
            return Err(refusal("cuMemCreate", code));
        }
        self.allocated += len;
        Ok(handle)
    }

    /// Returns the spares' memory to the device.
    pub(crate) fn trim_spares(&mut self) {
        if self.mapping.spares.is_empty() {
            return;
        }
        self.bind();
        for (handle, size) in self.mapping.spares.drain(..) {
            // SAFETY: a spare is mapped nowhere.
            let code = unsafe { sys::cuMemRelease(handle) };
            succeeded(
                code,
                "cuMemRelease of unmapped pages: the memory may not be returned",
            );
            self.allocated -= size;
        }
    }

    pub(crate) fn unmap_range_pages(&mut self, storage: StorageId, offset: u64, len: u64) {
        self.bind();
        let Some(range) = self.mapping.ranges.get_mut(&storage.0) else {
            tracing::warn!(target: "gpuworld::memory", range = storage.0, "unmap asked of an address range that does not exist");
            return;
        };
        match range.chunks.get(&offset) {
            Some(&(handle, size)) if size == len => {
                // SAFETY: the caller guarantees no work uses the pages any more.
                let code = unsafe { sys::cuMemUnmap(range.base + offset, size as usize) };
                // Left mapped, the chunk stays on record: a later mapping there is refused with
                // an error instead of mapping twice.
                if succeeded(code, "cuMemUnmap: pages left mapped") {
                    range.chunks.remove(&offset);
                    // Kept until the next trim: a mapping of the same size takes it first.
                    self.mapping.spares.push((handle, size));
                }
            }
            other => {
                tracing::warn!(target: "gpuworld::memory", range = storage.0, offset, len, mapped = ?other.map(|(_, size)| size), "unmap asked of pages not mapped by one call: left mapped");
            }
        }
    }

    pub(crate) fn free_address_range(&mut self, storage: StorageId) {
        self.bind();
        if let Some(range) = self.mapping.ranges.remove(&storage.0) {
            self.buffers.remove(&storage.0);
            for (at, (handle, size)) in range.chunks {
                tracing::warn!(target: "gpuworld::memory", range = storage.0, at, "address range returned with pages mapped: unmapped now");
                // SAFETY: the caller guarantees no work uses the range any more.
                let (unmapped, released) = unsafe {
                    (
                        sys::cuMemUnmap(range.base + at, size as usize),
                        sys::cuMemRelease(handle),
                    )
                };
                succeeded(unmapped, "cuMemUnmap of a returned range");
                succeeded(released, "cuMemRelease of a returned range");
                self.allocated -= size;
            }
            // SAFETY: nothing is mapped in the range any more.
            let code = unsafe { sys::cuMemAddressFree(range.base, range.size as usize) };
            succeeded(code, "cuMemAddressFree: addresses not returned");
        }
    }

    /// Unmaps every page and returns every range (the context is idle: `Drop`).
    pub(crate) fn release_address_ranges(&mut self) {
        let ids: Vec<u64> = self.mapping.ranges.keys().copied().collect();
        for id in ids {
            let chunks: Vec<(u64, u64)> = self
                .mapping
                .ranges
                .get(&id)
                .map(|range| {
                    range
                        .chunks
                        .iter()
                        .map(|(&at, &(_, size))| (at, size))
                        .collect()
                })
                .unwrap_or_default();
            for (at, size) in chunks {
                self.unmap_range_pages(StorageId(id), at, size);
            }
            self.free_address_range(StorageId(id));
        }
        self.trim_spares();
    }
}
