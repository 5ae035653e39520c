//! Finding a device: the backend's configuration, the adapters wgpu can see, the choice of one
//! by index or by type, and what the opened device offers. The only blocking in the crate is
//! here, at construction.

use gpuworld_hal::backend::{DeviceProperties, MemoryLayout};
use gpuworld_hal::error::{DeviceError, Error};
use parking_lot::Mutex;

/// Which adapter the backend drives.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum AdapterSelection {
    /// wgpu's choice, preferring a high-performance device.
    #[default]
    Default,
    /// The adapter at this position in [`list_adapters`].
    Index(usize),
    /// The first adapter of this type in [`list_adapters`].
    Type(wgpu::DeviceType),
}

/// How the wgpu backend is set up.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct WgpuConfig {
    /// Graphics APIs to look for adapters on.
    pub backends: wgpu::Backends,
    /// Which adapter to use.
    pub adapter: AdapterSelection,
    /// Most bytes of upload staging the backend holds; beyond it writes go through the queue.
    pub upload_budget: u64,
    /// Size of one upload staging chunk.
    pub upload_chunk: u64,
    /// Whether to time every dispatch with timestamp queries, when the adapter has them.
    pub timestamps: bool,
    /// Whether marks write timestamps, so `device_elapsed` measures the device time between
    /// two of them, when the adapter has timestamp queries.
    pub mark_timestamps: bool,
    /// Memory the runtime may allocate, if it should be limited below the device's.
    pub memory_capacity: Option<u64>,
}

// Builders: the struct is `#[non_exhaustive]`, so other crates start from a constructor or
// `Default` and set fields one by one.
impl WgpuConfig {
    /// This configuration with [`backends`](Self::backends) set to `backends`.
    #[must_use]
    pub fn with_backends(mut self, backends: wgpu::Backends) -> Self {
        self.backends = backends;
        self
    }

    /// This configuration with [`adapter`](Self::adapter) set to `adapter`.
    #[must_use]
    pub fn with_adapter(mut self, adapter: AdapterSelection) -> Self {
        self.adapter = adapter;
        self
    }

    /// This configuration with [`upload_budget`](Self::upload_budget) set to `upload_budget`.
    #[must_use]
    pub fn with_upload_budget(mut self, upload_budget: u64) -> Self {
        self.upload_budget = upload_budget;
        self
    }

    /// This configuration with [`upload_chunk`](Self::upload_chunk) set to `upload_chunk`.
    #[must_use]
    pub fn with_upload_chunk(mut self, upload_chunk: u64) -> Self {
        self.upload_chunk = upload_chunk;
        self
    }

    /// This configuration with [`timestamps`](Self::timestamps) set to `timestamps`.
    #[must_use]
    pub fn with_timestamps(mut self, timestamps: bool) -> Self {
        self.timestamps = timestamps;
        self
    }

    /// This configuration with [`mark_timestamps`](Self::mark_timestamps) set to `mark_timestamps`.
    #[must_use]
    pub fn with_mark_timestamps(mut self, mark_timestamps: bool) -> Self {
        self.mark_timestamps = mark_timestamps;
        self
    }

    /// This configuration with [`memory_capacity`](Self::memory_capacity) set to `memory_capacity`.
    #[must_use]
    pub fn with_memory_capacity(mut self, memory_capacity: Option<u64>) -> Self {
        self.memory_capacity = memory_capacity;
        self
    }
}

impl Default for WgpuConfig {
    fn default() -> Self {
        WgpuConfig {
            backends: wgpu::Backends::from_env().unwrap_or(wgpu::Backends::PRIMARY),
            adapter: AdapterSelection::Default,
            upload_budget: 64 << 20,
            upload_chunk: 1 << 20,
            timestamps: false,
            mark_timestamps: true,
            memory_capacity: None,
        }
    }
}

/// One adapter as `gpuworld info` lists it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AdapterSummary {
    /// Position for [`AdapterSelection::Index`].
    pub index: usize,
    /// The adapter's name.
    pub name: String,
    /// The graphics API it is reached through.
    pub backend: wgpu::Backend,
    /// Discrete, integrated, virtual, CPU or other.
    pub device_type: wgpu::DeviceType,
    /// Driver name and version.
    pub driver: String,
}

impl std::fmt::Display for AdapterSummary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "#{} {} ({:?}, {:?})",
            self.index, self.name, self.backend, self.device_type
        )?;
        if !self.driver.is_empty() {
            write!(f, ", driver {}", self.driver)?;
        }
        Ok(())
    }
}

/// The process's wgpu instance for `backends`, made on first use and kept: with NVIDIA's Vulkan
/// driver (580) the 30th instance a process makes after dropping the earlier ones finds no
/// adapter ("vulkan drivers/libraries could not be loaded"), so backends share one instance and
/// each opens a device of its own on it.
pub(crate) fn instance(backends: wgpu::Backends) -> wgpu::Instance {
    static INSTANCES: Mutex<Vec<(wgpu::Backends, wgpu::Instance)>> = Mutex::new(Vec::new());
    let mut instances = INSTANCES.lock();
    if let Some((_, instance)) = instances.iter().find(|(b, _)| *b == backends) {
        return instance.clone();
    }
    let mut descriptor = wgpu::InstanceDescriptor::new_without_display_handle_from_env();
    descriptor.backends = backends;
    let instance = wgpu::Instance::new(descriptor);
    instances.push((backends, instance.clone()));
    instance
}

/// Every adapter wgpu finds on `backends`, in the order [`AdapterSelection::Index`] counts.
pub fn list_adapters(backends: wgpu::Backends) -> Vec<AdapterSummary> {
    let instance = instance(backends);
    pollster::block_on(instance.enumerate_adapters(backends))
        .iter()
        .enumerate()
        .map(|(index, adapter)| summary(index, adapter))
        .collect()
}

/// The index of the adapter described by `info` in [`list_adapters`]' order (0 if not found).
pub(crate) fn index_of(
    instance: &wgpu::Instance,
    backends: wgpu::Backends,
    info: &wgpu::AdapterInfo,
) -> u32 {
    pollster::block_on(instance.enumerate_adapters(backends))
        .iter()
        .position(|adapter| adapter.get_info() == *info)
        .map_or(0, |index| index as u32)
}

fn summary(index: usize, adapter: &wgpu::Adapter) -> AdapterSummary {
    let info = adapter.get_info();
    AdapterSummary {
        index,
        name: info.name,
        backend: info.backend,
        device_type: info.device_type,
        driver: [info.driver, info.driver_info]
            .into_iter()
            .filter(|s| !s.is_empty())
            .collect::<Vec<_>>()
            .join(" "),
    }
}

fn unavailable(reason: String) -> Error {
    Error::Device(DeviceError::BackendUnavailable {
        backend: "wgpu",
        reason: reason.into(),
    })
}

/// The adapter `config` selects, or why there is none.
pub(crate) fn select_adapter(
    instance: &wgpu::Instance,
    config: &WgpuConfig,
) -> Result<wgpu::Adapter, Error> {
    let hint = "install a Vulkan driver (on Linux, `mesa-vulkan-drivers` gives a software one) \
                or set WGPU_BACKEND";
    match config.adapter {
        AdapterSelection::Default => {
            pollster::block_on(instance.request_adapter(&wgpu::RequestAdapterOptions {
                power_preference: wgpu::PowerPreference::HighPerformance,
                ..Default::default()
            }))
            .map_err(|error| {
                unavailable(format!(
                    "no adapter on {:?}: {error}; {hint}",
                    config.backends
                ))
            })
        }
        AdapterSelection::Index(index) => {
            let adapters = pollster::block_on(instance.enumerate_adapters(config.backends));
            let count = adapters.len();
            adapters.into_iter().nth(index).ok_or_else(|| {
                unavailable(format!(
                    "no adapter #{index}: {count} adapter(s) on {:?}; {hint}",
                    config.backends
                ))
            })
        }
        AdapterSelection::Type(device_type) => {
            let adapters = pollster::block_on(instance.enumerate_adapters(config.backends));
            let found: Vec<String> = adapters
                .iter()
                .enumerate()
                .map(|(i, a)| summary(i, a).to_string())
                .collect();
            adapters
                .into_iter()
                .find(|a| a.get_info().device_type == device_type)
                .ok_or_else(|| {
                    unavailable(format!(
                        "no {device_type:?} adapter on {:?} (found: {})",
                        config.backends,
                        if found.is_empty() {
                            "none".to_string()
                        } else {
                            found.join("; ")
                        }
                    ))
                })
        }
    }
}

/// Opens `adapter` with its full limits, and timestamp queries when dispatch timing or marks
/// ask for them and the adapter offers them.
pub(crate) fn open_device(
    adapter: &wgpu::Adapter,
    config: &WgpuConfig,
) -> Result<(wgpu::Device, wgpu::Queue), Error> {
    let mut features = wgpu::Features::empty();
    let wants_timestamps = config.timestamps || config.mark_timestamps;
    if wants_timestamps && adapter.features().contains(wgpu::Features::TIMESTAMP_QUERY) {
        features |= wgpu::Features::TIMESTAMP_QUERY;
    }
    pollster::block_on(adapter.request_device(&wgpu::DeviceDescriptor {
        label: Some("gpuworld"),
        required_features: features,
        required_limits: adapter.limits(),
        ..Default::default()
    }))
    .map_err(|error| {
        unavailable(format!(
            "adapter {} refused a device: {error}",
            adapter.get_info().name
        ))
    })
}

/// What the runtime learns of an opened device: its name, limits by name, enabled features, its
/// largest buffer and the memory the runtime may use (`memory_capacity`, unbounded by default).
pub(crate) fn device_properties(
    info: &wgpu::AdapterInfo,
    l: &wgpu::Limits,
    enabled: wgpu::Features,
    memory_capacity: Option<u64>,
) -> DeviceProperties {
    let per_axis = l.max_compute_workgroups_per_dimension;
    // Each limit under its field's name, so the list cannot drift from the fields it reads.
    macro_rules! named {
        ($($field:ident),* $(,)?) => {
            [$((stringify!($field).to_string(), u64::from(l.$field))),*]
        };
    }
    let limits = named![
        max_bind_groups,
        max_buffer_size,
        max_compute_invocations_per_workgroup,
        max_compute_workgroup_size_x,
        max_compute_workgroup_size_y,
        max_compute_workgroup_size_z,
        max_compute_workgroup_storage_size,
        max_compute_workgroups_per_dimension,
        max_storage_buffer_binding_size,
        max_storage_buffers_per_shader_stage,
        min_storage_buffer_offset_alignment,
        min_uniform_buffer_offset_alignment,
    ]
    .into_iter()
    .collect();
    let mut features: Vec<String> = enabled
        .iter_names()
        .map(|(name, _)| name.to_string())
        .collect();
    features.sort();
    DeviceProperties {
        name: format!("{} ({:?}, {:?})", info.name, info.backend, info.device_type),
        memory_bytes: memory_capacity.unwrap_or(u64::MAX),
        alignment: u64::from(l.min_storage_buffer_offset_alignment).max(4),
        memory_layout: MemoryLayout::Sliced,
        limits,
        features,
        max_cube_count: [per_axis; 3],
        max_cube_dim: [
            l.max_compute_workgroup_size_x,
            l.max_compute_workgroup_size_y,
            l.max_compute_workgroup_size_z,
        ],
        max_units_per_cube: l.max_compute_invocations_per_workgroup,
        max_buffer_bytes: Some(l.max_buffer_size),
        page_mapping: None,
        split_mappings: false,
        slow_buffers: true,
    }
}
