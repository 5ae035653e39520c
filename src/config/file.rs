//! `gpuworld.toml` as serde reads it: its sections, the values they take, and the TOML errors
//! as messages naming the key.

use gpuworld_systems::SchedulingStrategy;
use gpuworld_systems::memory::{CachePolicy, PoolConfig, PoolKind};
use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::PathBuf;

/// How much memory the cpu device may allocate (`[cpu] memory_limit`,
/// `GPUWORLD_CPU_MEMORY_LIMIT`): past it an allocation is `MemoryError::OutOfMemory`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum CpuMemoryLimit {
    /// A share of the memory this process may use, read from the machine
    /// (`gpuworld_cpu::default_memory_limit`): what `CpuBackend::new` gives.
    FromPhysicalMemory,
    /// At most this many bytes.
    Bytes(u64),
    /// No limit but the host's: allocating more than it has may get the process killed.
    Unlimited,
}

impl CpuMemoryLimit {
    /// The capacity to give `CpuBackend::with_capacity`.
    #[cfg(feature = "cpu")]
    pub fn capacity(self) -> Option<u64> {
        match self {
            CpuMemoryLimit::FromPhysicalMemory => gpuworld_cpu::default_memory_limit(),
            CpuMemoryLimit::Bytes(bytes) => Some(bytes),
            CpuMemoryLimit::Unlimited => None,
        }
    }
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct FileConfig {
    pub(super) log: Option<LogSection>,
    pub(super) autotune: Option<AutotuneSection>,
    pub(super) memory: Option<MemorySection>,
    pub(super) scheduler: Option<SchedulerSection>,
    pub(super) trace: Option<TraceSection>,
    pub(super) cuda: Option<CudaSection>,
    pub(super) cpu: Option<CpuSection>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct LogSection {
    pub(super) level: Option<Level>,
    pub(super) targets: Option<BTreeMap<String, Level>>,
}

#[derive(Deserialize, Clone, Copy, Debug)]
#[serde(rename_all = "lowercase")]
pub(super) enum Level {
    Off,
    Error,
    Warn,
    Info,
    Debug,
    Trace,
}

impl Level {
    pub(super) fn name(self) -> &'static str {
        match self {
            Level::Off => "off",
            Level::Error => "error",
            Level::Warn => "warn",
            Level::Info => "info",
            Level::Debug => "debug",
            Level::Trace => "trace",
        }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct AutotuneSection {
    pub(super) mode: Option<Mode>,
    pub(super) cache: Option<PathBuf>,
}

#[derive(Deserialize, Clone, Copy)]
#[serde(rename_all = "lowercase")]
pub(super) enum Mode {
    Blocking,
    Background,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct MemorySection {
    pub(super) release_after_ticks: Option<u64>,
    pub(super) pools: Option<Vec<PoolEntry>>,
    pub(super) cache: Option<CacheEntry>,
    pub(super) map_pages: Option<bool>,
    pub(super) compact: Option<bool>,
    pub(super) repeat_buffers: Option<bool>,
}

/// The pools' cache policy as the file writes it: `"tight"`, `"roomy"`, or
/// `{ slack_divisor = N, fit_divisor = M }`.
#[derive(Deserialize, Clone, Copy)]
#[serde(try_from = "toml::Value")]
pub(super) struct CacheEntry(pub(super) CachePolicy);

impl TryFrom<toml::Value> for CacheEntry {
    type Error = String;
    fn try_from(value: toml::Value) -> std::result::Result<Self, String> {
        let expected = "expected \"tight\", \"roomy\" or { slack_divisor = N (at least 1), \
                        fit_divisor = M (at least 2) }";
        match &value {
            toml::Value::String(word) if word == "tight" => Ok(CacheEntry(CachePolicy::TIGHT)),
            toml::Value::String(word) if word == "roomy" => Ok(CacheEntry(CachePolicy::ROOMY)),
            toml::Value::Table(table) => {
                let divisor = |key: &str, least: i64| match table.get(key) {
                    Some(toml::Value::Integer(n)) if *n >= least => Ok(n.unsigned_abs()),
                    Some(other) => Err(format!("{expected}, got {key} = {other}")),
                    None => Err(format!("{expected}, got no {key}")),
                };
                if let Some(key) = table
                    .keys()
                    .find(|k| *k != "slack_divisor" && *k != "fit_divisor")
                {
                    return Err(format!("{expected}, got the unknown key `{key}`"));
                }
                Ok(CacheEntry(
                    CachePolicy::TIGHT
                        .with_slack_divisor(divisor("slack_divisor", 1)?)
                        .with_fit_divisor(divisor("fit_divisor", 2)?),
                ))
            }
            other => Err(format!("{expected}, got {other}")),
        }
    }
}

/// Addresses a configured mapped pool reserves at a time when the file does not say.
pub(super) const DEFAULT_RANGE_SIZE: u64 = 64 << 30;

/// A pool as the file writes it (sizes in bytes).
#[derive(Deserialize, Clone, Copy)]
#[serde(tag = "kind", rename_all = "lowercase", deny_unknown_fields)]
pub(super) enum PoolEntry {
    Sliced {
        max_alloc: u64,
        page_size: u64,
        max_slice: Option<u64>,
        first_page: Option<u64>,
        max_reserved: Option<u64>,
        release_after_ticks: Option<u64>,
    },
    Exclusive {
        max_alloc: u64,
        max_reserved: Option<u64>,
        release_after_ticks: Option<u64>,
    },
    Mapped {
        max_alloc: u64,
        page_size: u64,
        chunk_size: Option<u64>,
        range_size: Option<u64>,
        max_reserved: Option<u64>,
        release_after_ticks: Option<u64>,
    },
    Compacting {
        max_alloc: u64,
        page_size: u64,
        follow_peak: Option<bool>,
        max_reserved: Option<u64>,
        release_after_ticks: Option<u64>,
    },
}

impl PoolEntry {
    pub(super) fn pool(self) -> PoolConfig {
        match self {
            PoolEntry::Sliced {
                max_alloc,
                page_size,
                max_slice,
                first_page,
                max_reserved,
                release_after_ticks,
            } => PoolConfig::new(
                PoolKind::Sliced {
                    page_size,
                    max_slice: max_slice.unwrap_or(page_size),
                    first_page: first_page.unwrap_or(page_size),
                },
                max_alloc,
            )
            .with_max_reserved(max_reserved)
            .with_release_after_ticks(release_after_ticks),
            PoolEntry::Exclusive {
                max_alloc,
                max_reserved,
                release_after_ticks,
            } => PoolConfig::new(PoolKind::Exclusive, max_alloc)
                .with_max_reserved(max_reserved)
                .with_release_after_ticks(release_after_ticks),
            PoolEntry::Mapped {
                max_alloc,
                page_size,
                chunk_size,
                range_size,
                max_reserved,
                release_after_ticks,
            } => PoolConfig::new(
                PoolKind::Mapped {
                    page_size,
                    chunk_size: chunk_size.unwrap_or(page_size),
                    range_size: range_size.unwrap_or(DEFAULT_RANGE_SIZE),
                },
                max_alloc,
            )
            .with_max_reserved(max_reserved)
            .with_release_after_ticks(release_after_ticks),
            PoolEntry::Compacting {
                max_alloc,
                page_size,
                follow_peak,
                max_reserved,
                release_after_ticks,
            } => PoolConfig::new(
                PoolKind::Compacting {
                    page_size,
                    follow_peak: follow_peak.unwrap_or(false),
                },
                max_alloc,
            )
            .with_max_reserved(max_reserved)
            .with_release_after_ticks(release_after_ticks),
        }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct SchedulerSection {
    pub(super) max_tasks: Option<Positive>,
    pub(super) strategy: Option<Strategy>,
    pub(super) stream_slots: Option<Positive>,
}

/// An integer of at least 1.
#[derive(Deserialize, Clone, Copy)]
#[serde(try_from = "i64")]
pub(super) struct Positive(pub(super) usize);

impl TryFrom<i64> for Positive {
    type Error = String;
    fn try_from(value: i64) -> std::result::Result<Self, String> {
        usize::try_from(value)
            .ok()
            .filter(|&v| v >= 1)
            .map(Positive)
            .ok_or_else(|| format!("expected an integer of at least 1, got {value}"))
    }
}

#[derive(Deserialize, Clone, Copy)]
#[serde(rename_all = "lowercase")]
pub(super) enum Strategy {
    Interleave,
    Sequential,
}

impl Strategy {
    pub(super) fn strategy(self) -> SchedulingStrategy {
        match self {
            Strategy::Interleave => SchedulingStrategy::Interleave,
            Strategy::Sequential => SchedulingStrategy::Sequential,
        }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct TraceSection {
    pub(super) output: Option<PathBuf>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct CudaSection {
    pub(super) cache: Option<PathBuf>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct CpuSection {
    pub(super) memory_limit: Option<LimitEntry>,
}

/// A memory limit as the file writes it: a number of bytes, or `"unlimited"`.
#[derive(Deserialize, Clone, Copy)]
#[serde(try_from = "toml::Value")]
pub(super) struct LimitEntry(pub(super) CpuMemoryLimit);

impl TryFrom<toml::Value> for LimitEntry {
    type Error = String;
    fn try_from(value: toml::Value) -> std::result::Result<Self, String> {
        match &value {
            toml::Value::Integer(bytes) if *bytes >= 1 => {
                Ok(LimitEntry(CpuMemoryLimit::Bytes(bytes.unsigned_abs())))
            }
            toml::Value::String(word) if word == "unlimited" => {
                Ok(LimitEntry(CpuMemoryLimit::Unlimited))
            }
            other => Err(format!(
                "expected a number of bytes of at least 1, or \"unlimited\", got {other}"
            )),
        }
    }
}

/// Deserializes `text` as TOML; the error names the key (its dotted path) and the problem.
pub(super) fn parse_toml<T: serde::de::DeserializeOwned>(
    text: &str,
) -> std::result::Result<T, String> {
    let deserializer =
        toml::de::Deserializer::parse(text).map_err(|error| describe_toml_error(text, &error))?;
    serde_path_to_error::deserialize(deserializer).map_err(|error| {
        let key = error.path().to_string();
        let inner = error.into_inner();
        let problem = describe_toml_error(text, &inner);
        match key.as_str() {
            "" | "." => problem,
            _ => format!("key `{key}`: {problem}"),
        }
    })
}

/// A TOML error's message with the line it points at.
pub(super) fn describe_toml_error(text: &str, error: &toml::de::Error) -> String {
    let message = error.message().trim();
    match error.span() {
        Some(span) => {
            let line = text[..span.start.min(text.len())].matches('\n').count() + 1;
            format!("line {line}: {message}")
        }
        None => message.to_string(),
    }
}
