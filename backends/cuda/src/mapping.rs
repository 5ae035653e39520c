//! Device pages mapped under reserved addresses: CUDA's virtual memory management, as PyTorch's
//! expandable segments use it. The runtime's mapped pool (`PoolKind::Mapped`) reserves an
//! address range once (`cuMemAddressReserve`) and maps device memory (`cuMemCreate` + `cuMemMap`,
//! one allocation per `map_pages` call, so each chunk can go back alone) under the pages live
//! allocations touch. An unmapped chunk's memory (`cuMemUnmap`) is kept as a spare until the
//! next `trim_pages`: a mapping of the same size in the same reservation takes it instead of a
//! new `cuMemCreate`, and the trim returns the rest (`cuMemRelease`). Every mapped page is
//! readable and writable by this device and by every device that can access it as a peer
//! (`cuMemSetAccess`), so peer copies and NCCL see it as they see `cuMemAlloc` memory.

mod pages;

use crate::loader;
use cudarc::driver::sys;
use gpuworld_hal::backend::AllocError;
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
        reason: format!("{what}: {}", loader::describe(loader::sys_error(code))).into(),
    }
}
