//! Opening a CUDA device: the driver is proven loadable first, then the primary context is retained
//! and the device's properties read; every failure is `DeviceError::BackendUnavailable` with the
//! reason, never a panic.

use crate::config::CudaConfig;
use crate::device::CudaBackend;
use crate::events::EventTable;
use crate::pinned::PinnedHome;
use crate::{compiler, loader, mapping, op_timing};
use cudarc::driver::sys;
use gpuworld_hal::backend::{DeviceProperties, MemoryLayout};
use gpuworld_hal::error::{DeviceError, Error};
use rustc_hash::FxHashMap as HashMap;
use std::sync::Arc;

fn unavailable(reason: impl Into<Arc<str>>) -> Error {
    Error::Device(DeviceError::BackendUnavailable {
        backend: "cuda",
        reason: reason.into(),
    })
}

fn attribute(device: sys::CUdevice, which: sys::CUdevice_attribute) -> Result<i32, Error> {
    let mut value = 0;
    // SAFETY: `device` is a valid device handle and `value` a valid out-pointer.
    let code = unsafe { sys::cuDeviceGetAttribute(&mut value, which, device) };
    code.result().map_err(|error| {
        unavailable(format!(
            "cannot read {which:?}: {}",
            loader::describe(error)
        ))
    })?;
    Ok(value)
}

impl CudaBackend {
    /// Opens the device `config` names; `DeviceError::BackendUnavailable` (never a panic) when
    /// there is no CUDA driver or no such device.
    pub fn new(config: CudaConfig) -> Result<CudaBackend, Error> {
        loader::driver().map_err(unavailable)?;
        let mut count = 0;
        // SAFETY: the driver is loaded and initialised; `count` is a valid out-pointer.
        let code = unsafe { sys::cuDeviceGetCount(&mut count) };
        code.result()
            .map_err(|e| unavailable(format!("cannot count devices: {}", loader::describe(e))))?;
        let ordinal = i32::try_from(config.device).unwrap_or(i32::MAX);
        if ordinal >= count {
            return Err(unavailable(format!(
                "no CUDA device {} (the driver sees {count})",
                config.device
            )));
        }
        let mut device = 0;
        // SAFETY: `ordinal` is below the device count.
        let code = unsafe { sys::cuDeviceGet(&mut device, ordinal) };
        code.result()
            .map_err(|e| unavailable(format!("cannot open device: {}", loader::describe(e))))?;
        let mut context = std::ptr::null_mut();
        // SAFETY: retains the device's primary context, released in `Drop`.
        let code = unsafe { sys::cuDevicePrimaryCtxRetain(&mut context, device) };
        code.result().map_err(|e| {
            unavailable(format!("cannot create a context: {}", loader::describe(e)))
        })?;
        // SAFETY: `context` was just retained.
        let code = unsafe { sys::cuCtxSetCurrent(context) };
        if let Err(e) = code.result() {
            // SAFETY: releases the retain above.
            unsafe { sys::cuDevicePrimaryCtxRelease_v2(device) };
            return Err(unavailable(format!(
                "cannot make the context current: {}",
                loader::describe(e)
            )));
        }
        let properties = Self::read_properties(device);
        let page_mapping = mapping::page_mapping(device);
        let properties = properties.map(|p| DeviceProperties {
            page_mapping: page_mapping.as_ref().map(|(page, _)| *page),
            // Each `map_pages` call maps one `cuMemCreate` allocation, which goes back whole.
            split_mappings: false,
            slow_buffers: false,
            ..p
        });
        let properties = match properties {
            Ok(p) => p,
            Err(error) => {
                // SAFETY: releases the retain above.
                unsafe { sys::cuDevicePrimaryCtxRelease_v2(device) };
                return Err(error);
            }
        };
        let Some(pinned) = PinnedHome::new(device, config.max_free_staging) else {
            // SAFETY: releases the retain above.
            unsafe { sys::cuDevicePrimaryCtxRelease_v2(device) };
            return Err(unavailable("cannot retain the context for pinned staging"));
        };
        use sys::CUdevice_attribute::*;
        let arch = (
            attribute(device, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)?,
            attribute(device, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)?,
        );
        let multiprocessors =
            attribute(device, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)?.max(1) as u32;
        tracing::info!(target: "gpuworld::stream", device = %properties.name, ?arch, multiprocessors, "CUDA device opened");
        Ok(CudaBackend {
            device,
            context,
            properties,
            arch,
            multiprocessors,
            buffers: HashMap::default(),
            next_storage: 1,
            allocated: 0,
            streams: Vec::new(),
            events: EventTable::default(),
            op_timing: op_timing::OpTiming::default(),
            kernels: compiler::KernelCache::new(arch, config.cache_dir),
            pinned,
            uploads: Vec::new(),
            reads: HashMap::default(),
            finished_reads: HashMap::default(),
            next_ticket: 0,
            poisoned: None,
            cliques: Vec::new(),
            graphs: Default::default(),
            peers_enabled: Vec::new(),
            mapping: page_mapping
                .map(|(page, access)| mapping::AddressRanges::new(page, access))
                .unwrap_or_default(),
            read_flags: Default::default(),
            flag_turns: 0,
        })
    }

    fn read_properties(device: sys::CUdevice) -> Result<DeviceProperties, Error> {
        let mut name = [0 as std::ffi::c_char; 256];
        // SAFETY: `name` holds the 256 bytes the call may write.
        let code = unsafe { sys::cuDeviceGetName(name.as_mut_ptr(), name.len() as i32, device) };
        code.result()
            .map_err(|e| unavailable(format!("cannot read the name: {}", loader::describe(e))))?;
        // SAFETY: the driver wrote a NUL-terminated string into `name`.
        let name = unsafe { std::ffi::CStr::from_ptr(name.as_ptr()) }
            .to_string_lossy()
            .into_owned();
        let mut memory = 0usize;
        // SAFETY: `memory` is a valid out-pointer.
        let code = unsafe { sys::cuDeviceTotalMem_v2(&mut memory, device) };
        code.result()
            .map_err(|e| unavailable(format!("cannot read the memory: {}", loader::describe(e))))?;
        use sys::CUdevice_attribute::*;
        let grid = [
            attribute(device, CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X)?,
            attribute(device, CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y)?,
            attribute(device, CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z)?,
        ];
        let block = [
            attribute(device, CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X)?,
            attribute(device, CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y)?,
            attribute(device, CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z)?,
        ];
        let threads = attribute(device, CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK)?;
        let mut limits = std::collections::BTreeMap::new();
        for (label, which) in [
            (
                "compute_capability_major",
                CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR,
            ),
            (
                "compute_capability_minor",
                CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR,
            ),
            ("multiprocessors", CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT),
            (
                "max_threads_per_block",
                CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK,
            ),
            ("max_block_dim_x", CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X),
            ("max_block_dim_y", CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y),
            ("max_block_dim_z", CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z),
            (
                "max_shared_memory_per_block",
                CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK,
            ),
            ("warp_size", CU_DEVICE_ATTRIBUTE_WARP_SIZE),
            ("max_grid_dim_x", CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X),
            ("max_grid_dim_y", CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y),
            ("max_grid_dim_z", CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z),
        ] {
            limits.insert(label.to_string(), attribute(device, which)?.max(0) as u64);
        }
        let mut features = Vec::new();
        for (label, which) in [
            ("concurrent_kernels", CU_DEVICE_ATTRIBUTE_CONCURRENT_KERNELS),
            ("memory_pools", CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED),
            ("unified_addressing", CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING),
        ] {
            if attribute(device, which)? != 0 {
                features.push(label.to_string());
            }
        }
        Ok(DeviceProperties {
            name,
            memory_bytes: memory as u64,
            alignment: 256,
            memory_layout: MemoryLayout::Sliced,
            limits,
            features,
            max_cube_count: grid.map(|g| g.max(1) as u32),
            max_cube_dim: block.map(|b| b.max(1) as u32),
            max_units_per_cube: threads.max(1) as u32,
            // `cuMemAlloc` takes any size the memory can hold.
            max_buffer_bytes: None,
            page_mapping: None,
            split_mappings: false,
            slow_buffers: false,
        })
    }
}

/// How many CUDA devices the driver sees; `DeviceError::BackendUnavailable` without a driver.
pub fn device_count() -> Result<usize, Error> {
    loader::driver().map_err(unavailable)?;
    let mut count = 0;
    // SAFETY: the driver is loaded and initialised; `count` is a valid out-pointer.
    let code = unsafe { sys::cuDeviceGetCount(&mut count) };
    code.result()
        .map_err(|e| unavailable(format!("cannot count devices: {}", loader::describe(e))))?;
    Ok(usize::try_from(count).unwrap_or(0))
}

/// Whether a CUDA driver and a device can be used here; the reason when not.
pub fn availability() -> Result<(), Error> {
    loader::driver().map_err(unavailable)?;
    let mut count = 0;
    // SAFETY: the driver is loaded and initialised; `count` is a valid out-pointer.
    let code = unsafe { sys::cuDeviceGetCount(&mut count) };
    code.result()
        .map_err(|e| unavailable(format!("cannot count devices: {}", loader::describe(e))))?;
    if count == 0 {
        return Err(unavailable("the CUDA driver sees no device"));
    }
    Ok(())
}
