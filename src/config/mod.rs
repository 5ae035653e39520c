//! Configuration outside code: `gpuworld.toml` (the path in `GPUWORLD_CONFIG`, else the first found
//! in the working directory or a parent) and `GPUWORLD_*` environment variables, over the defaults;
//! code overrides both ([`Setting::set`]). Precedence, highest first: code, the environment, the
//! file, the default. Every setting remembers where its value came from, which `gpuworld config`
//! prints. An unknown key or a bad value is `ConfigError::InvalidSetting` naming the file or
//! variable, the key and what is allowed. The file is read with serde and `toml` (unknown keys are
//! refused by `deny_unknown_fields`); log filters are checked where they are used, by the
//! subscriber.

mod file;

pub use file::CpuMemoryLimit;

use crate::tune::{CacheLocation, TuneMode, TunerConfig};
use file::{
    CacheEntry, FileConfig, Level, LimitEntry, Mode, PoolEntry, Positive, Strategy, parse_toml,
};
use gpuworld_systems::backend::DeviceProperties;
use gpuworld_systems::error::ConfigError;
use gpuworld_systems::memory::{CachePolicy, MemoryConfig, PoolConfig, PoolKind};
use gpuworld_systems::open::BackendSettings;
use gpuworld_systems::{Result, RuntimeConfig, SchedulingStrategy};
use serde::Deserialize;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// The configuration file's name, looked for in the working directory and its parents.
pub const CONFIG_FILE: &str = "gpuworld.toml";
/// The variable that names the configuration file explicitly.
pub const CONFIG_ENV: &str = "GPUWORLD_CONFIG";

/// Where a setting's value came from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Source {
    /// gpuworld's default.
    Default,
    /// The configuration file at this path.
    File(PathBuf),
    /// This environment variable.
    Env(&'static str),
    /// The program set it.
    Code,
}

impl fmt::Display for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Source::Default => write!(f, "default"),
            Source::File(path) => write!(f, "file {}", path.display()),
            Source::Env(name) => write!(f, "env {name}"),
            Source::Code => write!(f, "code"),
        }
    }
}

/// One setting's value and where it came from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Setting<T> {
    /// The value.
    pub value: T,
    /// Where it came from.
    pub source: Source,
}

impl<T> Setting<T> {
    fn default(value: T) -> Setting<T> {
        Setting {
            value,
            source: Source::Default,
        }
    }

    /// Sets the value from code, which overrides the file and the environment.
    pub fn set(&mut self, value: T) {
        self.value = value;
        self.source = Source::Code;
    }

    fn put(&mut self, value: Option<T>, source: &Source) {
        if let Some(value) = value {
            self.value = value;
            self.source = source.clone();
        }
    }
}

/// The effective configuration: every setting with its source.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Settings {
    /// The log filter (`tracing` directives: `warn,gpuworld::stream=debug`).
    pub log: Setting<String>,
    /// Blocking or background autotuning.
    pub autotune_mode: Setting<TuneMode>,
    /// The autotune cache's directory; `None`: `target/gpuworld-autotune/`.
    pub autotune_cache: Setting<Option<PathBuf>>,
    /// The CUDA kernel cache's directory; `None`: `~/.cache/gpuworld/cuda`.
    pub cuda_cache: Setting<Option<PathBuf>>,
    /// How much memory the cpu device may allocate.
    pub cpu_memory_limit: Setting<CpuMemoryLimit>,
    /// The memory pools in routing order; `None`: the default ladder.
    pub memory_pools: Setting<Option<Vec<PoolConfig>>>,
    /// Ticks a free page of the default ladder waits before it goes back to the device; `None`
    /// (the default): free pages go back when the pool needs room, never with ticks alone.
    pub release_after_ticks: Setting<Option<u64>>,
    /// The pools' cache policy; `None`: the backend's (`CachePolicy::TIGHT`).
    pub memory_cache: Setting<Option<CachePolicy>>,
    /// Whether the default ladder maps pages for large requests on devices that can (CUDA).
    pub memory_map_pages: Setting<bool>,
    /// Whether the default ladder compacts large requests on devices where making buffers is
    /// slow (wgpu).
    pub memory_compact: Setting<bool>,
    /// Whether the default ladder gives large requests of recently placed sizes buffers of
    /// their own (`MemoryConfig::repeat_buffers`).
    pub memory_repeat_buffers: Setting<bool>,
    /// Tasks a stream queues before submitting; `None`: the backend's default.
    pub max_tasks: Setting<Option<usize>>,
    /// Submission order across streams; `None`: the backend's default.
    pub strategy: Setting<Option<SchedulingStrategy>>,
    /// Compute stream slots.
    pub stream_slots: Setting<usize>,
    /// Where the demo writes its trace; `None`: no trace.
    pub trace_output: Setting<Option<PathBuf>>,
    /// The configuration file read, if any.
    pub file: Option<PathBuf>,
}

impl Default for Settings {
    fn default() -> Self {
        let runtime = RuntimeConfig::default();
        Settings {
            log: Setting::default("warn".to_string()),
            autotune_mode: Setting::default(TuneMode::Blocking),
            autotune_cache: Setting::default(None),
            cuda_cache: Setting::default(None),
            cpu_memory_limit: Setting::default(CpuMemoryLimit::FromPhysicalMemory),
            memory_pools: Setting::default(None),
            release_after_ticks: Setting::default(None),
            memory_cache: Setting::default(None),
            memory_map_pages: Setting::default(true),
            memory_compact: Setting::default(true),
            memory_repeat_buffers: Setting::default(true),
            max_tasks: Setting::default(None),
            strategy: Setting::default(None),
            stream_slots: Setting::default(runtime.stream_slots),
            trace_output: Setting::default(None),
            file: None,
        }
    }
}

// ---- loading ----

fn config_error(origin: impl fmt::Display, problem: impl Into<String>) -> ConfigError {
    ConfigError::InvalidSetting {
        origin: Arc::from(origin.to_string()),
        problem: Arc::from(problem.into()),
    }
}

impl Settings {
    /// Defaults, then `gpuworld.toml`, then the `GPUWORLD_*` variables of this process.
    pub fn load() -> Result<Settings, ConfigError> {
        let cwd = std::env::current_dir().unwrap_or_default();
        Settings::load_with(&cwd, &|name| std::env::var(name).ok())
    }

    /// [`Settings::load`] from the directory `cwd` with the variables `env` returns.
    pub fn load_with(
        cwd: &Path,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Settings, ConfigError> {
        let mut settings = Settings::default();
        let file = match env(CONFIG_ENV) {
            Some(path) => {
                let path = cwd.join(path);
                if !path.is_file() {
                    return Err(config_error(
                        format!("env {CONFIG_ENV}"),
                        format!("no configuration file at {}", path.display()),
                    ));
                }
                Some(path)
            }
            None => cwd
                .ancestors()
                .map(|dir| dir.join(CONFIG_FILE))
                .find(|path| path.is_file()),
        };
        if let Some(path) = file {
            let text = std::fs::read_to_string(&path).map_err(|error| {
                config_error(path.display(), format!("cannot read the file: {error}"))
            })?;
            settings.apply_file(&path, &text)?;
        }
        settings.apply_env(env)?;
        Ok(settings)
    }

    /// Applies the settings of the TOML `text` read from `path`.
    fn apply_file(&mut self, path: &Path, text: &str) -> Result<(), ConfigError> {
        let parsed: FileConfig =
            parse_toml(text).map_err(|problem| config_error(path.display(), problem))?;
        let source = Source::File(path.to_path_buf());
        if let Some(log) = parsed.log {
            let mut filter = log.level.unwrap_or(Level::Warn).name().to_string();
            for (target, level) in log.targets.unwrap_or_default() {
                filter += &format!(",{target}={}", level.name());
            }
            self.log.put(Some(filter), &source);
        }
        if let Some(autotune) = parsed.autotune {
            self.autotune_mode
                .put(autotune.mode.map(tune_mode), &source);
            self.autotune_cache.put(autotune.cache.map(Some), &source);
        }
        if let Some(memory) = parsed.memory {
            self.release_after_ticks
                .put(memory.release_after_ticks.map(Some), &source);
            let pools = memory
                .pools
                .map(|p| Some(p.into_iter().map(PoolEntry::pool).collect()));
            self.memory_pools.put(pools, &source);
            self.memory_cache
                .put(memory.cache.map(|c| Some(c.0)), &source);
            self.memory_map_pages.put(memory.map_pages, &source);
            self.memory_compact.put(memory.compact, &source);
            self.memory_repeat_buffers
                .put(memory.repeat_buffers, &source);
        }
        if let Some(scheduler) = parsed.scheduler {
            self.max_tasks
                .put(scheduler.max_tasks.map(|p| Some(p.0)), &source);
            self.strategy
                .put(scheduler.strategy.map(|s| Some(s.strategy())), &source);
            self.stream_slots
                .put(scheduler.stream_slots.map(|p| p.0), &source);
        }
        if let Some(trace) = parsed.trace {
            self.trace_output.put(trace.output.map(Some), &source);
        }
        if let Some(cuda) = parsed.cuda {
            self.cuda_cache.put(cuda.cache.map(Some), &source);
        }
        if let Some(cpu) = parsed.cpu {
            self.cpu_memory_limit
                .put(cpu.memory_limit.map(|limit| limit.0), &source);
        }
        self.file = Some(path.to_path_buf());
        Ok(())
    }

    /// Applies the `GPUWORLD_*` variables `env` returns.
    fn apply_env(&mut self, env: &dyn Fn(&str) -> Option<String>) -> Result<(), ConfigError> {
        fn var(
            env: &dyn Fn(&str) -> Option<String>,
            name: &'static str,
        ) -> Option<(String, Source)> {
            env(name)
                .filter(|value| !value.is_empty())
                .map(|value| (value, Source::Env(name)))
        }
        if let Some((value, source)) = var(env, "GPUWORLD_LOG").or_else(|| var(env, "RUST_LOG")) {
            self.log.put(Some(value), &source);
        }
        if let Some((value, source)) = var(env, "GPUWORLD_AUTOTUNE_MODE") {
            let mode: Mode = parse_env_value(&source, "autotune.mode", &value)?;
            self.autotune_mode.put(Some(tune_mode(mode)), &source);
        }
        if let Some((value, source)) = var(env, crate::tune::CACHE_DIR_ENV) {
            self.autotune_cache
                .put(Some(Some(PathBuf::from(value))), &source);
        }
        if let Some((value, source)) = var(env, "GPUWORLD_CUDA_CACHE") {
            self.cuda_cache
                .put(Some(Some(PathBuf::from(value))), &source);
        }
        if let Some((value, source)) = var(env, "GPUWORLD_CPU_MEMORY_LIMIT") {
            let limit: LimitEntry = parse_env_value(&source, "cpu.memory_limit", &value)?;
            self.cpu_memory_limit.put(Some(limit.0), &source);
        }
        if let Some((value, source)) = var(env, "GPUWORLD_MEMORY_POOLS") {
            let pools: Vec<PoolEntry> = parse_env_value(&source, "memory.pools", &value)?;
            self.memory_pools.put(
                Some(Some(pools.into_iter().map(PoolEntry::pool).collect())),
                &source,
            );
        }
        if let Some((value, source)) = var(env, "GPUWORLD_MEMORY_RELEASE_AFTER_TICKS") {
            let ticks: u64 = parse_env_value(&source, "memory.release_after_ticks", &value)?;
            self.release_after_ticks.put(Some(Some(ticks)), &source);
        }
        if let Some((value, source)) = var(env, "GPUWORLD_MEMORY_CACHE") {
            let cache: CacheEntry = parse_env_value(&source, "memory.cache", &value)?;
            self.memory_cache.put(Some(Some(cache.0)), &source);
        }
        if let Some((value, source)) = var(env, "GPUWORLD_MEMORY_MAP_PAGES") {
            let map: bool = parse_env_value(&source, "memory.map_pages", &value)?;
            self.memory_map_pages.put(Some(map), &source);
        }
        if let Some((value, source)) = var(env, "GPUWORLD_MEMORY_COMPACT") {
            let compact: bool = parse_env_value(&source, "memory.compact", &value)?;
            self.memory_compact.put(Some(compact), &source);
        }
        if let Some((value, source)) = var(env, "GPUWORLD_MEMORY_REPEAT_BUFFERS") {
            let repeat: bool = parse_env_value(&source, "memory.repeat_buffers", &value)?;
            self.memory_repeat_buffers.put(Some(repeat), &source);
        }
        if let Some((value, source)) = var(env, "GPUWORLD_SCHEDULER_MAX_TASKS") {
            let tasks: Positive = parse_env_value(&source, "scheduler.max_tasks", &value)?;
            self.max_tasks.put(Some(Some(tasks.0)), &source);
        }
        if let Some((value, source)) = var(env, "GPUWORLD_SCHEDULER_STRATEGY") {
            let strategy: Strategy = parse_env_value(&source, "scheduler.strategy", &value)?;
            self.strategy.put(Some(Some(strategy.strategy())), &source);
        }
        if let Some((value, source)) = var(env, "GPUWORLD_SCHEDULER_STREAM_SLOTS") {
            let slots: Positive = parse_env_value(&source, "scheduler.stream_slots", &value)?;
            self.stream_slots.put(Some(slots.0), &source);
        }
        if let Some((value, source)) = var(env, "GPUWORLD_TRACE_OUTPUT") {
            self.trace_output
                .put(Some(Some(PathBuf::from(value))), &source);
        }
        Ok(())
    }

    /// `base` (the backend's defaults) with the configured scheduler and memory settings; the
    /// default ladder for `device` takes the configured release period.
    pub fn runtime_config(&self, device: &DeviceProperties, base: RuntimeConfig) -> RuntimeConfig {
        let map_pages = self.memory_map_pages.value;
        let compact = self.memory_compact.value;
        let pools = match &self.memory_pools.value {
            Some(pools) => Some(pools.clone()),
            None if self.release_after_ticks.source != Source::Default => Some(
                MemoryConfig::default()
                    .with_map_pages(map_pages)
                    .with_compact(compact)
                    .default_pools(device)
                    .into_iter()
                    .map(|pool| pool.with_release_after_ticks(self.release_after_ticks.value))
                    .collect(),
            ),
            None => base.memory.pools.clone(),
        };
        let mut memory = base
            .memory
            .with_ladder(pools)
            .with_map_pages(map_pages)
            .with_compact(compact)
            .with_repeat_buffers(self.memory_repeat_buffers.value);
        if let Some(cache) = self.memory_cache.value {
            memory = memory.with_cache(cache);
        }
        RuntimeConfig::default()
            .with_stream_slots(self.stream_slots.value)
            .with_max_tasks(self.max_tasks.value.unwrap_or(base.max_tasks))
            .with_strategy(self.strategy.value.unwrap_or(base.strategy))
            .with_memory(memory)
    }

    /// What the configuration says about the devices of the backend named `backend`
    /// ([`Kernels::NAME`](gpuworld_systems::backend::Kernels::NAME)): `[cpu] memory_limit` for
    /// `"cpu"`, nothing yet for the others.
    pub fn backend_settings(&self, backend: &str) -> BackendSettings {
        match backend {
            "cpu" => match self.cpu_memory_limit.value {
                CpuMemoryLimit::FromPhysicalMemory => BackendSettings::default(),
                CpuMemoryLimit::Bytes(bytes) => BackendSettings::with_memory_limit(Some(bytes)),
                CpuMemoryLimit::Unlimited => BackendSettings::with_memory_limit(None),
            },
            _ => BackendSettings::default(),
        }
    }

    /// The tuner's configuration: the configured mode and cache directory.
    pub fn tuner_config(&self) -> TunerConfig {
        TunerConfig {
            mode: self.autotune_mode.value,
            cache: match &self.autotune_cache.value {
                Some(dir) => CacheLocation::Dir(dir.clone()),
                None => CacheLocation::Default,
            },
            ..TunerConfig::default()
        }
    }

    /// Each setting as `key = value` with its source, one a line.
    pub fn describe(&self) -> String {
        let path = |p: &Option<PathBuf>| {
            p.as_ref()
                .map_or("(none)".to_string(), |p| p.display().to_string())
        };
        let rows: Vec<(&str, String, &Source)> = vec![
            ("log", self.log.value.clone(), &self.log.source),
            (
                "autotune.mode",
                format!("{:?}", self.autotune_mode.value).to_lowercase(),
                &self.autotune_mode.source,
            ),
            (
                "autotune.cache",
                path(&self.autotune_cache.value),
                &self.autotune_cache.source,
            ),
            (
                "cuda.cache",
                path(&self.cuda_cache.value),
                &self.cuda_cache.source,
            ),
            (
                "cpu.memory_limit",
                match self.cpu_memory_limit.value {
                    CpuMemoryLimit::FromPhysicalMemory => "(from physical memory)".to_string(),
                    CpuMemoryLimit::Bytes(bytes) => bytes.to_string(),
                    CpuMemoryLimit::Unlimited => "unlimited".to_string(),
                },
                &self.cpu_memory_limit.source,
            ),
            (
                "memory.pools",
                match &self.memory_pools.value {
                    None => "(default ladder)".to_string(),
                    Some(pools) => pools
                        .iter()
                        .map(describe_pool)
                        .collect::<Vec<_>>()
                        .join("; "),
                },
                &self.memory_pools.source,
            ),
            (
                "memory.release_after_ticks",
                self.release_after_ticks.value.map_or_else(
                    || "never (free pages go back when the pool needs room)".to_string(),
                    |ticks| ticks.to_string(),
                ),
                &self.release_after_ticks.source,
            ),
            (
                "memory.cache",
                match self.memory_cache.value {
                    None => "tight (default)".to_string(),
                    Some(CachePolicy::ROOMY) => "roomy".to_string(),
                    Some(CachePolicy::TIGHT) => "tight".to_string(),
                    Some(policy) => format!(
                        "{{ slack_divisor = {}, fit_divisor = {} }}",
                        policy.slack_divisor, policy.fit_divisor
                    ),
                },
                &self.memory_cache.source,
            ),
            (
                "memory.map_pages",
                self.memory_map_pages.value.to_string(),
                &self.memory_map_pages.source,
            ),
            (
                "memory.compact",
                self.memory_compact.value.to_string(),
                &self.memory_compact.source,
            ),
            (
                "memory.repeat_buffers",
                self.memory_repeat_buffers.value.to_string(),
                &self.memory_repeat_buffers.source,
            ),
            (
                "scheduler.max_tasks",
                self.max_tasks
                    .value
                    .map_or("(backend default)".to_string(), |v| v.to_string()),
                &self.max_tasks.source,
            ),
            (
                "scheduler.strategy",
                self.strategy
                    .value
                    .map_or("(backend default)".to_string(), |s| {
                        format!("{s:?}").to_lowercase()
                    }),
                &self.strategy.source,
            ),
            (
                "scheduler.stream_slots",
                self.stream_slots.value.to_string(),
                &self.stream_slots.source,
            ),
            (
                "trace.output",
                path(&self.trace_output.value),
                &self.trace_output.source,
            ),
        ];
        let width = rows
            .iter()
            .map(|(k, v, _)| k.len() + v.len() + 3)
            .max()
            .unwrap_or(0);
        let mut text = match &self.file {
            Some(path) => format!("# configuration file: {}\n", path.display()),
            None => format!(
                "# no configuration file ({CONFIG_FILE} in this directory or a parent, or {CONFIG_ENV})\n"
            ),
        };
        for (key, value, source) in rows {
            let line = format!("{key} = {value}");
            text += &format!("{line:<width$}  # {source}\n");
        }
        text
    }
}

fn tune_mode(mode: Mode) -> TuneMode {
    match mode {
        Mode::Blocking => TuneMode::Blocking,
        Mode::Background => TuneMode::Background,
    }
}

fn describe_pool(pool: &PoolConfig) -> String {
    let kind = match pool.kind {
        PoolKind::Sliced {
            page_size,
            max_slice,
            first_page,
        } => {
            format!("sliced page_size={page_size} max_slice={max_slice} first_page={first_page}")
        }
        PoolKind::Exclusive => "exclusive".to_string(),
        PoolKind::Mapped {
            page_size,
            chunk_size,
            range_size,
        } => {
            format!("mapped page_size={page_size} chunk_size={chunk_size} range_size={range_size}")
        }
        PoolKind::Compacting {
            page_size,
            follow_peak,
        } => format!("compacting page_size={page_size} follow_peak={follow_peak}"),
        other => format!("{other:?}"),
    };
    let mut text = format!("{kind} max_alloc={}", pool.max_alloc);
    if let Some(max) = pool.max_reserved {
        text += &format!(" max_reserved={max}");
    }
    if let Some(ticks) = pool.release_after_ticks {
        text += &format!(" release_after_ticks={ticks}");
    }
    text
}

/// Parses a variable's `value` as the TOML value of `key`: a string where the key takes
/// words, the text itself where it takes numbers or arrays.
fn parse_env_value<T: serde::de::DeserializeOwned>(
    source: &Source,
    key: &str,
    value: &str,
) -> Result<T, ConfigError> {
    #[derive(Deserialize)]
    struct Wrapper<T> {
        value: T,
    }
    let parse = |text: String| parse_toml::<Wrapper<T>>(&text).map(|w| w.value);
    parse(format!("value = {value}"))
        .or_else(|first| {
            // Not TOML as written (a bare word): read it as a string, and report that reading
            // unless the text was TOML of the wrong kind for the key.
            parse(format!("value = {value:?}")).map_err(|second| {
                if first.starts_with("key `") {
                    first
                } else {
                    second
                }
            })
        })
        .map_err(|problem| {
            let problem = problem.replace("key `value`: ", "").replace("line 1: ", "");
            config_error(source, format!("`{key}`: {problem} (got `{value}`)"))
        })
}
