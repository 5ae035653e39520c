//! How a tuner is set up: where it benchmarks, how many runs a candidate gets, where its
//! persistent cache lives. Plain data that the configuration (`gpuworld.toml`, `GPUWORLD_*`)
//! fills in and the tuner reads.

use std::path::PathBuf;

/// The environment variable that names the cache directory.
pub const CACHE_DIR_ENV: &str = "GPUWORLD_AUTOTUNE_CACHE";

/// Where a miss is benchmarked.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum TuneMode {
    /// On the caller's thread; the call returns with the winner.
    Blocking,
    /// On a thread of its own; callers get the fallback until the tick ingested the result.
    Background,
}

/// Where the persistent cache lives.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum CacheLocation {
    /// `GPUWORLD_AUTOTUNE_CACHE`, else `target/gpuworld-autotune/` ([`default_cache_dir`](super::default_cache_dir)).
    Default,
    /// This directory.
    Dir(PathBuf),
    /// No file: results live as long as the runtime.
    Disabled,
}

/// How a tuner benchmarks and where it keeps results.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct TunerConfig {
    /// Warm-up runs and samples per candidate.
    pub benchmark: BenchmarkConfig,
    /// Blocking or background tuning.
    pub mode: TuneMode,
    /// The persistent cache's directory.
    pub cache: CacheLocation,
}

// Builders: the struct is `#[non_exhaustive]`, so other crates start from a constructor or
// `Default` and set fields one by one.
impl TunerConfig {
    /// This configuration with [`benchmark`](Self::benchmark) set to `benchmark`.
    #[must_use]
    pub fn with_benchmark(mut self, benchmark: BenchmarkConfig) -> Self {
        self.benchmark = benchmark;
        self
    }

    /// This configuration with [`mode`](Self::mode) set to `mode`.
    #[must_use]
    pub fn with_mode(mut self, mode: TuneMode) -> Self {
        self.mode = mode;
        self
    }

    /// This configuration with [`cache`](Self::cache) set to `cache`.
    #[must_use]
    pub fn with_cache(mut self, cache: CacheLocation) -> Self {
        self.cache = cache;
        self
    }
}

impl Default for TunerConfig {
    fn default() -> Self {
        TunerConfig {
            benchmark: BenchmarkConfig::default(),
            mode: TuneMode::Blocking,
            cache: CacheLocation::Default,
        }
    }
}

/// How many runs a candidate gets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct BenchmarkConfig {
    /// Runs before timing starts (compiles pipelines, fills caches).
    pub warmup: usize,
    /// Timed runs; the median of them decides.
    pub samples: usize,
}

// Builders: the struct is `#[non_exhaustive]`, so other crates start from a constructor or
// `Default` and set fields one by one.
impl BenchmarkConfig {
    /// This configuration with [`warmup`](Self::warmup) set to `warmup`.
    #[must_use]
    pub fn with_warmup(mut self, warmup: usize) -> Self {
        self.warmup = warmup;
        self
    }

    /// This configuration with [`samples`](Self::samples) set to `samples`.
    #[must_use]
    pub fn with_samples(mut self, samples: usize) -> Self {
        self.samples = samples;
        self
    }
}

impl Default for BenchmarkConfig {
    fn default() -> Self {
        BenchmarkConfig {
            warmup: 1,
            samples: 5,
        }
    }
}
