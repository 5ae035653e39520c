//! Device pages mapped under reserved addresses: CUDA's virtual memory management, as PyTorch's
//! expandable segments use it. The runtime's mapped pool (`PoolKind::Mapped`) reserves an
//! address range once (`cuMemAddressReserve`) and maps device memory (`cuMemCreate` + `cuMemMap`,
//! one allocation per `map_pages` call, so each chunk can go back alone) under the pages live
//! allocations touch. An unmapped chunk's memory (`cuMemUnmap`) is kept as a spare until the
//! next `trim_pages`: a mapping of the same size in the same reservation takes it instead of a
//! new `cuMemCreate`, and the trim returns the rest (`cuMemRelease`). Every mapped page is
//! readable and writable by this device and by every device that can access it as a peer
//! (`cuMemSetAccess`), so peer copies and NCCL see it as they see `cuMemAlloc` memory.

use crate::{CudaBackend, faults, loader};
use cudarc::driver::sys;
use gpuworld_hal::backend::{AllocError, StorageId};
use rustc_hash::FxHashMap as HashMap;

/// The reserved address ranges of one device and the pages mapped in them.
#[derive(Debug, Default)]
pub(crate) struct AddressRanges {
    /// Bytes of a page (the device's minimum mapping granularity).
    page: u64,
    /// The devices every mapped page is made accessible to: this one, then its peers.
    access: Vec<sys::CUdevice>,
    ranges: HashMap<u64, Range>,
    /// Memory unmapped since the last trim, and its bytes: still allocated, mapped nowhere.
    spares: Vec<(sys::CUmemGenericAllocationHandle, u64)>,
}

#[derive(Debug)]
struct Range {
    base: sys::CUdeviceptr,
    size: u64,
    /// The physical allocation mapped at each offset by one `map_pages` call, and its bytes.
    chunks: std::collections::BTreeMap<u64, (sys::CUmemGenericAllocationHandle, u64)>,
}

/// Where page memory lives: on `device`.
fn allocation_prop(device: sys::CUdevice) -> sys::CUmemAllocationProp {
    // SAFETY: a plain C struct for which all zeroes is a valid (empty) value.
    let mut prop: sys::CUmemAllocationProp = unsafe { std::mem::zeroed() };
    prop.type_ = sys::CUmemAllocationType::CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type_ = sys::CUmemLocationType::CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = device;
    prop
}

/// The page size `device` maps, if it supports virtual memory management; the devices that can
/// access its memory as peers come with it.
pub(crate) fn page_mapping(device: sys::CUdevice) -> Option<(u64, Vec<sys::CUdevice>)> {
    let mut supported = 0;
    // SAFETY: a valid device handle and out-pointer.
    let code = unsafe {
        sys::cuDeviceGetAttribute(
            &mut supported,
            sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED,
            device,
        )
    };
    if !succeeded(
        code,
        "cuDeviceGetAttribute(virtual memory management): no page mapping",
    ) || supported == 0
    {
        return None;
    }
    let prop = allocation_prop(device);
    let mut granularity = 0usize;
    // SAFETY: valid out-pointer and property struct.
    let code = unsafe {
        sys::cuMemGetAllocationGranularity(
            &mut granularity,
            &prop,
            sys::CUmemAllocationGranularity_flags::CU_MEM_ALLOC_GRANULARITY_MINIMUM,
        )
    };
    if !succeeded(code, "cuMemGetAllocationGranularity: no page mapping") || granularity == 0 {
        return None;
    }
    let mut access = vec![device];
    let mut count = 0;
    // SAFETY: a valid out-pointer.
    let code = unsafe { sys::cuDeviceGetCount(&mut count) };
    if !succeeded(
        code,
        "cuDeviceGetCount: mapped pages readable by this device only",
    ) {
        return Some((granularity as u64, access));
    }
    for other in (0..count).filter(|&other| other != device) {
        let mut can = 0;
        // SAFETY: valid device ordinals (cuDeviceGet hands back the ordinal) and out-pointer.
        let code = unsafe { sys::cuDeviceCanAccessPeer(&mut can, other, device) };
        if succeeded(
            code,
            "cuDeviceCanAccessPeer: mapped pages not readable by that peer",
        ) && can != 0
        {
            access.push(other);
        }
    }
    Some((granularity as u64, access))
}

/// Whether a driver call succeeded; a failure is logged at warn with `what` it means.
fn succeeded(code: sys::CUresult, what: &str) -> bool {
    if code == sys::CUresult::CUDA_SUCCESS {
        return true;
    }
    tracing::warn!(target: "gpuworld::memory", ?code, "{what}");
    false
}

impl AddressRanges {
    /// Ranges of pages of `page` bytes, accessible to `access`.
    pub(crate) fn new(page: u64, access: Vec<sys::CUdevice>) -> AddressRanges {
        AddressRanges {
            page,
            access,
            ranges: HashMap::default(),
            spares: Vec::new(),
        }
    }
}

/// A driver refusal as the pool sees it: no room, or a failed device.
fn refusal(what: &str, code: sys::CUresult) -> AllocError {
    if code == sys::CUresult::CUDA_ERROR_OUT_OF_MEMORY {
        tracing::warn!(target: "gpuworld::memory", "{what}: out of memory");
        return AllocError::OutOfMemory;
    }
    AllocError::DeviceFailed {
        reason: format!("{what}: {}", loader::describe(faults::sys_error(code))).into(),
    }
}

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
