//! Configuration: `gpuworld.toml` and `GPUWORLD_*` variables over the defaults, code over both;
//! every unknown key or bad value is an error naming the file or variable, the key and what is
//! allowed.

use gpuworld::config::{CpuMemoryLimit, Settings, Source};
use gpuworld::error::ConfigError;
use gpuworld::tune::TuneMode;
use gpuworld::{Backend, PoolConfig, PoolKind, RuntimeConfig, SchedulingStrategy};
use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// A directory that is removed when the test is done with it.
struct TempDir(PathBuf);

impl std::ops::Deref for TempDir {
    type Target = Path;

    fn deref(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A fresh directory holding `gpuworld.toml` with `text`, in `sub` below it when given.
fn dir_with_config(name: &str, text: Option<&str>) -> TempDir {
    let dir = std::env::temp_dir().join(format!("gpuworld-config-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("nested/deeper")).unwrap();
    if let Some(text) = text {
        std::fs::write(dir.join("gpuworld.toml"), text).unwrap();
    }
    TempDir(dir)
}

fn load(cwd: &Path, env: &[(&str, &str)]) -> Result<Settings, ConfigError> {
    let env: HashMap<String, String> = env
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    Settings::load_with(cwd, &|name| env.get(name).cloned())
}

fn problem(error: ConfigError) -> (String, String) {
    match error {
        ConfigError::InvalidSetting { origin, problem } => {
            (origin.to_string(), problem.to_string())
        }
        other => panic!("expected a configuration error, got {other}"),
    }
}

const FILE: &str = r#"
[log]
level = "info"
targets = { "gpuworld::stream" = "debug" }

[autotune]
mode = "background"
cache = "/tmp/tune-cache"

[memory]
release_after_ticks = 60
pools = [
    { kind = "exclusive", max_alloc = 256 },
    { kind = "sliced", max_alloc = 1048576, page_size = 4194304, max_reserved = 67108864 },
]

[scheduler]
max_tasks = 8
strategy = "sequential"
stream_slots = 2

[trace]
output = "run.json"

[cpu]
memory_limit = 1048576
"#;

#[test]
fn without_file_or_variables_every_setting_is_its_default() {
    let dir = dir_with_config("defaults", None);
    let settings = load(&dir, &[]).unwrap();
    assert_eq!(settings, Settings::default());
    assert_eq!(settings.log.value, "warn");
    assert!(
        settings
            .describe()
            .contains("scheduler.max_tasks = (backend default)")
    );
    assert_eq!(
        settings.cpu_memory_limit.value,
        CpuMemoryLimit::FromPhysicalMemory
    );
    assert!(
        settings
            .describe()
            .contains("cpu.memory_limit = (from physical memory)")
    );
}

#[test]
fn the_file_is_found_in_the_working_directory_or_a_parent() {
    let dir = dir_with_config("parent", Some(FILE));
    let settings = load(&dir.join("nested/deeper"), &[]).unwrap();
    let file = Source::File(dir.join("gpuworld.toml"));
    assert_eq!(
        settings.file.as_deref(),
        Some(dir.join("gpuworld.toml").as_path())
    );
    assert_eq!(settings.log.value, "info,gpuworld::stream=debug");
    assert_eq!(settings.log.source, file);
    assert_eq!(settings.autotune_mode.value, TuneMode::Background);
    assert_eq!(
        settings.autotune_cache.value,
        Some(PathBuf::from("/tmp/tune-cache"))
    );
    assert_eq!(settings.max_tasks.value, Some(8));
    assert_eq!(
        settings.strategy.value,
        Some(SchedulingStrategy::Sequential)
    );
    assert_eq!(settings.stream_slots.value, 2);
    assert_eq!(settings.trace_output.value, Some(PathBuf::from("run.json")));
    assert_eq!(
        settings.cpu_memory_limit.value,
        CpuMemoryLimit::Bytes(1 << 20)
    );
    assert_eq!(settings.cpu_memory_limit.value.capacity(), Some(1 << 20));
    assert_eq!(settings.release_after_ticks.value, Some(60));
    assert_eq!(
        settings.memory_pools.value,
        Some(vec![
            PoolConfig::new(PoolKind::Exclusive, 256)
                .with_max_reserved(None)
                .with_release_after_ticks(None),
            PoolConfig::new(
                PoolKind::Sliced {
                    page_size: 4 << 20,
                    max_slice: 4 << 20,
                    first_page: 4 << 20,
                },
                1 << 20
            )
            .with_max_reserved(Some(64 << 20))
            .with_release_after_ticks(None),
        ])
    );
    assert_eq!(settings.max_tasks.source, file);
    let config = settings.runtime_config(
        &gpuworld::SimBackend::new(Default::default()).properties(),
        RuntimeConfig::default(),
    );
    assert_eq!(config.max_tasks, 8);
    assert_eq!(config.strategy, SchedulingStrategy::Sequential);
    assert_eq!(config.stream_slots, 2);
    assert_eq!(config.memory.pools.as_ref().map(Vec::len), Some(2));
}

#[test]
fn code_overrides_environment_overrides_file_overrides_default() {
    let dir = dir_with_config("precedence", Some(FILE));
    let env = [
        ("GPUWORLD_SCHEDULER_MAX_TASKS", "32"),
        ("GPUWORLD_SCHEDULER_STRATEGY", "interleave"),
        ("GPUWORLD_LOG", "error,gpuworld::memory=trace"),
        ("GPUWORLD_AUTOTUNE_CACHE", "/tmp/env-cache"),
        (
            "GPUWORLD_MEMORY_POOLS",
            r#"[{ kind = "exclusive", max_alloc = 1024 }]"#,
        ),
        ("GPUWORLD_CPU_MEMORY_LIMIT", "unlimited"),
    ];
    let mut settings = load(&dir, &env).unwrap();
    // Environment over file.
    assert_eq!(settings.max_tasks.value, Some(32));
    assert_eq!(
        settings.max_tasks.source,
        Source::Env("GPUWORLD_SCHEDULER_MAX_TASKS")
    );
    assert_eq!(
        settings.strategy.value,
        Some(SchedulingStrategy::Interleave)
    );
    assert_eq!(settings.log.value, "error,gpuworld::memory=trace");
    assert_eq!(
        settings.autotune_cache.value,
        Some(PathBuf::from("/tmp/env-cache"))
    );
    assert_eq!(settings.memory_pools.value.as_ref().map(Vec::len), Some(1));
    assert_eq!(settings.cpu_memory_limit.value, CpuMemoryLimit::Unlimited);
    assert_eq!(settings.cpu_memory_limit.value.capacity(), None);
    // File over default where no variable is set.
    assert_eq!(settings.stream_slots.value, 2);
    assert!(matches!(settings.stream_slots.source, Source::File(_)));
    // Default where neither says.
    assert_eq!(settings.cuda_cache.source, Source::Default);
    // Code over all.
    settings.max_tasks.set(Some(4));
    assert_eq!(settings.max_tasks.source, Source::Code);
    let config = settings.runtime_config(
        &gpuworld::SimBackend::new(Default::default()).properties(),
        RuntimeConfig::default(),
    );
    assert_eq!(config.max_tasks, 4);
    let described = settings.describe();
    assert!(described.contains("scheduler.max_tasks = 4"), "{described}");
    assert!(described.contains("# code"), "{described}");
    assert!(
        described.contains("# env GPUWORLD_SCHEDULER_STRATEGY"),
        "{described}"
    );
    assert!(described.contains(&format!("# file {}", dir.join("gpuworld.toml").display())));
    assert!(described.contains("cuda.cache = (none)"), "{described}");
    assert!(
        described.contains("cpu.memory_limit = unlimited"),
        "{described}"
    );
    let bytes = load(&dir, &[("GPUWORLD_CPU_MEMORY_LIMIT", "4096")]).unwrap();
    assert_eq!(bytes.cpu_memory_limit.value, CpuMemoryLimit::Bytes(4096));
}

#[test]
fn gpuworld_config_names_the_file_to_read() {
    let dir = dir_with_config("explicit", None);
    std::fs::write(dir.join("other.toml"), "[scheduler]\nmax_tasks = 3\n").unwrap();
    let settings = load(&dir, &[("GPUWORLD_CONFIG", "other.toml")]).unwrap();
    assert_eq!(settings.max_tasks.value, Some(3));
    let (origin, problem) =
        problem(load(&dir, &[("GPUWORLD_CONFIG", "missing.toml")]).unwrap_err());
    assert_eq!(origin, "env GPUWORLD_CONFIG");
    assert!(problem.contains("no configuration file at") && problem.contains("missing.toml"));
}

#[test]
fn a_release_period_without_pools_applies_to_the_default_ladder() {
    let dir = dir_with_config("release", Some("[memory]\nrelease_after_ticks = 5\n"));
    let settings = load(&dir, &[]).unwrap();
    let device = gpuworld::SimBackend::new(Default::default()).properties();
    let config = settings.runtime_config(&device, RuntimeConfig::default());
    let pools = config.memory.pools.unwrap();
    assert_eq!(
        pools.len(),
        gpuworld::MemoryConfig::default_ladder(&device).len()
    );
    assert!(pools.iter().all(|p| p.release_after_ticks == Some(5)));
}

#[test]
fn the_cache_policy_comes_from_the_file_or_its_variable() {
    let device = gpuworld::SimBackend::new(Default::default()).properties();
    let cache = |settings: &Settings| {
        settings
            .runtime_config(&device, RuntimeConfig::default())
            .memory
            .cache
    };
    let dir = dir_with_config("cache_roomy", Some("[memory]\ncache = \"roomy\"\n"));
    let settings = load(&dir, &[]).unwrap();
    assert_eq!(cache(&settings), gpuworld::CachePolicy::ROOMY);
    let custom = "[memory]\ncache = { slack_divisor = 16, fit_divisor = 4 }\n";
    let dir = dir_with_config("cache_custom", Some(custom));
    let settings = load(&dir, &[]).unwrap();
    assert_eq!(
        cache(&settings),
        gpuworld::CachePolicy::TIGHT
            .with_slack_divisor(16)
            .with_fit_divisor(4)
    );
    let settings = load(&dir, &[("GPUWORLD_MEMORY_CACHE", "tight")]).unwrap();
    assert_eq!(cache(&settings), gpuworld::CachePolicy::TIGHT);
    let dir = dir_with_config("cache_none", None);
    assert_eq!(
        cache(&load(&dir, &[]).unwrap()),
        RuntimeConfig::default().memory.cache
    );
    for bad in [
        "cache = \"huge\"",
        "cache = { slack_divisor = 0, fit_divisor = 4 }",
        "cache = { slack_divisor = 3, fit_divisor = 1 }",
        "cache = { slack_divisor = 3 }",
        "cache = { slack_divisor = 3, fit_divisor = 2, keep = 1 }",
    ] {
        let dir = dir_with_config("cache_bad", Some(&format!("[memory]\n{bad}\n")));
        let error = load(&dir, &[]).expect_err(bad).to_string();
        assert!(
            error.contains("memory.cache") && error.contains("\"roomy\""),
            "{bad}: {error}"
        );
    }
    let error = load(&dir, &[("GPUWORLD_MEMORY_CACHE", "fast")])
        .expect_err("a bad variable")
        .to_string();
    assert!(error.contains("GPUWORLD_MEMORY_CACHE"), "{error}");
}

#[test]
fn page_mapping_and_mapped_pools_come_from_the_file_or_the_environment() {
    let device = gpuworld::DeviceProperties {
        page_mapping: Some(2 << 20),
        slow_buffers: false,
        ..gpuworld::SimBackend::new(Default::default()).properties()
    };
    let pools = |settings: &Settings| {
        let config = settings.runtime_config(&device, RuntimeConfig::default());
        config.memory.resolve(&device)
    };
    let mapped = |pools: &[gpuworld::PoolConfig]| {
        pools
            .iter()
            .any(|pool| matches!(pool.kind, gpuworld::PoolKind::Mapped { .. }))
    };
    let dir = dir_with_config("map_pages_none", None);
    let settings = load(&dir, &[]).unwrap();
    assert!(settings.memory_map_pages.value, "on by default");
    assert!(
        mapped(&pools(&settings)),
        "a device that maps pages gets a mapped pool"
    );
    let dir = dir_with_config("map_pages_off", Some("[memory]\nmap_pages = false\n"));
    let settings = load(&dir, &[]).unwrap();
    assert!(!mapped(&pools(&settings)));
    assert!(settings.describe().contains("memory.map_pages = false"));
    let settings = load(&dir, &[("GPUWORLD_MEMORY_MAP_PAGES", "true")]).unwrap();
    assert!(mapped(&pools(&settings)), "the variable wins over the file");
    let error = load(&dir, &[("GPUWORLD_MEMORY_MAP_PAGES", "yes")])
        .expect_err("not a boolean")
        .to_string();
    assert!(error.contains("GPUWORLD_MEMORY_MAP_PAGES"), "{error}");
    // A configured mapped pool: kept where the device maps pages, exclusive elsewhere.
    let file =
        "[memory]\npools = [{ kind = \"mapped\", max_alloc = 1099511627776, page_size = 65536 }]\n";
    let dir = dir_with_config("mapped_pool", Some(file));
    let settings = load(&dir, &[]).unwrap();
    match pools(&settings)[..] {
        [pool] => assert_eq!(
            pool.kind,
            gpuworld::PoolKind::Mapped {
                page_size: 2 << 20,
                chunk_size: 2 << 20,
                range_size: 64 << 30
            },
            "the page rounded up to the device's"
        ),
        ref other => panic!("{other:?}"),
    }
    let sim = gpuworld::SimBackend::new(Default::default()).properties();
    let config = settings.runtime_config(&sim, RuntimeConfig::default());
    assert_eq!(
        config.memory.resolve(&sim)[0].kind,
        gpuworld::PoolKind::Exclusive
    );
}

#[test]
fn the_compacting_pool_comes_from_the_file_or_the_environment() {
    let device = gpuworld::DeviceProperties {
        slow_buffers: true,
        ..gpuworld::SimBackend::new(Default::default()).properties()
    };
    let pools = |settings: &Settings| {
        let config = settings.runtime_config(&device, RuntimeConfig::default());
        config.memory.resolve(&device)
    };
    let compacting = |pools: &[gpuworld::PoolConfig]| {
        pools.iter().any(|pool| {
            matches!(
                pool.kind,
                gpuworld::PoolKind::Compacting {
                    follow_peak: true,
                    ..
                }
            )
        })
    };
    let dir = dir_with_config("compact_none", None);
    let settings = load(&dir, &[]).unwrap();
    assert!(settings.memory_compact.value, "on by default");
    assert!(
        compacting(&pools(&settings)),
        "a device that makes buffers slowly gets a compacting pool"
    );
    let dir = dir_with_config("compact_off", Some("[memory]\ncompact = false\n"));
    let settings = load(&dir, &[]).unwrap();
    assert!(!compacting(&pools(&settings)));
    assert!(settings.describe().contains("memory.compact = false"));
    let settings = load(&dir, &[("GPUWORLD_MEMORY_COMPACT", "true")]).unwrap();
    assert!(
        compacting(&pools(&settings)),
        "the variable wins over the file"
    );
    let error = load(&dir, &[("GPUWORLD_MEMORY_COMPACT", "maybe")])
        .expect_err("not a boolean")
        .to_string();
    assert!(error.contains("GPUWORLD_MEMORY_COMPACT"), "{error}");
    // A configured compacting pool keeps its fixed pages unless it follows the peak.
    let file = "[memory]\npools = [{ kind = \"compacting\", max_alloc = 1099511627776, page_size = 8388608 }]\n";
    let dir = dir_with_config("compacting_pool", Some(file));
    let settings = load(&dir, &[]).unwrap();
    match pools(&settings)[..] {
        [pool] => assert_eq!(
            pool.kind,
            gpuworld::PoolKind::Compacting {
                page_size: 8 << 20,
                follow_peak: false
            }
        ),
        ref other => panic!("{other:?}"),
    }
}

#[test]
fn buffers_for_repeated_sizes_come_from_the_file_or_the_environment() {
    let sim = gpuworld::SimBackend::new(Default::default()).properties();
    let repeats = |settings: &Settings| {
        settings
            .runtime_config(&sim, RuntimeConfig::default())
            .memory
            .repeat_buffers
    };
    let dir = dir_with_config("repeat_none", None);
    let settings = load(&dir, &[]).unwrap();
    assert!(repeats(&settings), "on by default");
    let dir = dir_with_config("repeat_off", Some("[memory]\nrepeat_buffers = false\n"));
    let settings = load(&dir, &[]).unwrap();
    assert!(!repeats(&settings));
    assert!(
        settings
            .describe()
            .contains("memory.repeat_buffers = false")
    );
    let settings = load(&dir, &[("GPUWORLD_MEMORY_REPEAT_BUFFERS", "true")]).unwrap();
    assert!(repeats(&settings), "the variable wins over the file");
    let error = load(&dir, &[("GPUWORLD_MEMORY_REPEAT_BUFFERS", "often")])
        .expect_err("not a boolean")
        .to_string();
    assert!(error.contains("GPUWORLD_MEMORY_REPEAT_BUFFERS"), "{error}");
}

/// Each bad file gives an error naming the file, the key and what is allowed.
#[test]
fn every_bad_file_is_an_error_naming_file_key_and_what_is_allowed() {
    let cases: &[(&str, &str, &[&str])] = &[
        (
            "unknown_section",
            "[schedule]\nmax_tasks = 2\n",
            &["unknown field `schedule`", "expected one of", "`scheduler`"],
        ),
        (
            "unknown_key",
            "[scheduler]\nmax_task = 2\n",
            &[
                "`scheduler.max_task`",
                "unknown field `max_task`",
                "`max_tasks`",
            ],
        ),
        (
            "zero_tasks",
            "[scheduler]\nmax_tasks = 0\n",
            &["`scheduler.max_tasks`", "at least 1, got 0"],
        ),
        (
            "wrong_type",
            "[scheduler]\nstream_slots = \"two\"\n",
            &[
                "`scheduler.stream_slots`",
                "invalid type: string \"two\", expected i64",
            ],
        ),
        (
            "bad_strategy",
            "[scheduler]\nstrategy = \"fastest\"\n",
            &[
                "`scheduler.strategy`",
                "unknown variant `fastest`",
                "expected `interleave` or `sequential`",
            ],
        ),
        (
            "bad_level",
            "[log]\nlevel = \"loud\"\n",
            &["`log.level`", "unknown variant `loud`", "`warn`"],
        ),
        (
            "bad_target_level",
            "[log.targets]\n\"gpuworld::stream\" = \"chatty\"\n",
            &["log.targets", "unknown variant `chatty`"],
        ),
        (
            "bad_mode",
            "[autotune]\nmode = \"later\"\n",
            &["`autotune.mode`", "expected `blocking` or `background`"],
        ),
        (
            "bad_pool_kind",
            "[memory]\npools = [{ kind = \"paged\", max_alloc = 1 }]\n",
            &[
                "memory.pools",
                "unknown variant `paged`",
                "expected one of `sliced`, `exclusive`, `mapped`",
            ],
        ),
        (
            "pool_missing_page",
            "[memory]\npools = [{ kind = \"sliced\", max_alloc = 1 }]\n",
            &["memory.pools", "missing field `page_size`"],
        ),
        (
            "pool_unknown_field",
            "[memory]\npools = [{ kind = \"exclusive\", max_alloc = 1, page_size = 4 }]\n",
            &["memory.pools", "unknown field `page_size`"],
        ),
        (
            "negative_ticks",
            "[memory]\nrelease_after_ticks = -1\n",
            &["`memory.release_after_ticks`"],
        ),
        (
            "zero_memory_limit",
            "[cpu]\nmemory_limit = 0\n",
            &[
                "`cpu.memory_limit`",
                "expected a number of bytes of at least 1, or \"unlimited\", got 0",
            ],
        ),
        (
            "word_memory_limit",
            "[cpu]\nmemory_limit = \"lots\"\n",
            &["`cpu.memory_limit`", "got \"lots\""],
        ),
        (
            "unknown_cpu_key",
            "[cpu]\nmemory = 1\n",
            &["`cpu.memory`", "unknown field `memory`", "`memory_limit`"],
        ),
        ("not_toml", "[scheduler\nmax_tasks = 2\n", &["line 1"]),
    ];
    for (name, text, expected) in cases {
        let dir = dir_with_config(name, Some(text));
        let error = load(&dir, &[]).expect_err(name);
        let message = error.to_string();
        let (origin, _) = problem(error);
        assert_eq!(
            origin,
            dir.join("gpuworld.toml").display().to_string(),
            "{name}"
        );
        for part in *expected {
            assert!(
                message.contains(part),
                "{name}: {part:?} not in {message:?}"
            );
        }
    }
}

#[test]
fn every_bad_variable_is_an_error_naming_it_the_key_and_what_is_allowed() {
    let dir = dir_with_config("bad_env", None);
    let cases: &[(&str, &str, &[&str])] = &[
        (
            "GPUWORLD_SCHEDULER_MAX_TASKS",
            "many",
            &["`scheduler.max_tasks`", "got `many`"],
        ),
        ("GPUWORLD_SCHEDULER_MAX_TASKS", "0", &["at least 1"]),
        (
            "GPUWORLD_SCHEDULER_STREAM_SLOTS",
            "-3",
            &["`scheduler.stream_slots`"],
        ),
        (
            "GPUWORLD_SCHEDULER_STRATEGY",
            "fastest",
            &[
                "`scheduler.strategy`",
                "expected `interleave` or `sequential`",
            ],
        ),
        (
            "GPUWORLD_AUTOTUNE_MODE",
            "now",
            &["`autotune.mode`", "expected `blocking` or `background`"],
        ),
        (
            "GPUWORLD_MEMORY_RELEASE_AFTER_TICKS",
            "soon",
            &["`memory.release_after_ticks`"],
        ),
        (
            "GPUWORLD_MEMORY_POOLS",
            "[{ kind = \"paged\" }]",
            &[
                "`memory.pools`",
                "expected one of `sliced`, `exclusive`, `mapped`",
            ],
        ),
        (
            "GPUWORLD_CPU_MEMORY_LIMIT",
            "lots",
            &["`cpu.memory_limit`", "or \"unlimited\"", "got `lots`"],
        ),
    ];
    for (name, value, expected) in cases {
        let error = load(&dir, &[(name, value)]).expect_err(name);
        let message = error.to_string();
        assert_eq!(problem(error).0, format!("env {name}"));
        for part in *expected {
            assert!(
                message.contains(part),
                "{name}={value}: {part:?} not in {message:?}"
            );
        }
    }
}
