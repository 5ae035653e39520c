//! How a CUDA device is opened.

use crate::compiler::default_cache_dir;
use std::path::PathBuf;

/// How to open a CUDA device.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct CudaConfig {
    /// The device's ordinal.
    pub device: usize,
    /// Where compiled kernels are cached on disk; `None` keeps them in memory only.
    pub cache_dir: Option<PathBuf>,
    /// Free pinned staging bytes kept for reuse; more is returned to the driver.
    pub max_free_staging: usize,
}

// Builders: the struct is `#[non_exhaustive]`, so other crates start from a constructor or
// `Default` and set fields one by one.
impl CudaConfig {
    /// This configuration with [`device`](Self::device) set to `device`.
    #[must_use]
    pub fn with_device(mut self, device: usize) -> Self {
        self.device = device;
        self
    }

    /// This configuration with [`cache_dir`](Self::cache_dir) set to `cache_dir`.
    #[must_use]
    pub fn with_cache_dir(mut self, cache_dir: Option<PathBuf>) -> Self {
        self.cache_dir = cache_dir;
        self
    }

    /// This configuration with [`max_free_staging`](Self::max_free_staging) set to
    /// `max_free_staging`.
    #[must_use]
    pub fn with_max_free_staging(mut self, max_free_staging: usize) -> Self {
        self.max_free_staging = max_free_staging;
        self
    }
}

impl Default for CudaConfig {
    fn default() -> Self {
        CudaConfig {
            device: 0,
            cache_dir: default_cache_dir(),
            max_free_staging: 1 << 30,
        }
    }
}
