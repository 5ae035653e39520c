//! The convenience constructors read `gpuworld.toml` through `GPUWORLD_CONFIG` (a test binary of
//! its own: it sets a process-wide variable, so its tests take turns through `ENV`), and a
//! configuration they cannot read is the constructor's error, never a log line and the defaults.

use gpuworld::error::{ConfigError, MemoryError};
use gpuworld::{Driver, Error, RuntimeConfig, SchedulingStrategy};
use std::path::PathBuf;
use std::sync::Mutex;

/// Held by each test while it sets `GPUWORLD_CONFIG`.
static ENV: Mutex<()> = Mutex::new(());

/// Writes `text` to a fresh `gpuworld.toml` in a directory of this test, and points
/// `GPUWORLD_CONFIG` at it.
fn config_file(test: &str, text: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "gpuworld-config-clients-{}-{test}",
        std::process::id()
    ));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let file = dir.join("gpuworld.toml");
    std::fs::write(&file, text).expect("write");
    // SAFETY: tests of this binary set the variable only while holding `ENV`, and nothing else
    // reads the environment meanwhile.
    unsafe { std::env::set_var("GPUWORLD_CONFIG", &file) };
    file
}

fn forget(file: &std::path::Path) {
    // SAFETY: as in `config_file`.
    unsafe { std::env::remove_var("GPUWORLD_CONFIG") };
    if let Some(dir) = file.parent() {
        let _ = std::fs::remove_dir_all(dir);
    }
}

#[test]
fn cpu_client_takes_the_scheduler_settings_and_memory_limit_of_the_configuration_file() {
    let _env = ENV.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    let file = config_file(
        "good",
        "[scheduler]\nmax_tasks = 7\nstrategy = \"sequential\"\n[cpu]\nmemory_limit = 1048576\n",
    );
    let client = gpuworld::cpu_client(Driver::Manual).unwrap();
    let config = client.with_runtime(|rt| rt.world().resource::<RuntimeConfig>().clone());
    assert_eq!(config.max_tasks, 7);
    assert_eq!(config.strategy, SchedulingStrategy::Sequential);
    assert_eq!(client.properties().memory_bytes, 1 << 20);
    let past_limit = client.empty(2 << 20);
    assert!(matches!(
        client.read_one(&past_limit),
        Err(Error::Memory(MemoryError::OutOfMemory {
            capacity: Some(1048576),
            ..
        }))
    ));
    forget(&file);
}

#[test]
fn cpu_client_returns_a_bad_value_in_the_configuration_file_as_an_error_naming_file_and_key() {
    let _env = ENV.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    let file = config_file("bad-value", "[scheduler]\nmax_tasks = 0\n");
    let error = gpuworld::cpu_client(Driver::Manual)
        .expect_err("a bad configuration is the constructor's error");
    assert!(
        matches!(error, Error::Config(ConfigError::InvalidSetting { .. })),
        "{error:?}"
    );
    let message = error.to_string();
    assert!(message.contains(&file.display().to_string()), "{message}");
    assert!(message.contains("scheduler.max_tasks"), "{message}");
    forget(&file);
}

#[test]
fn cpu_client_returns_malformed_toml_and_unknown_keys_as_errors_naming_the_file() {
    let _env = ENV.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    let file = config_file("malformed", "[scheduler\nmax_tasks = 4\n");
    let error = gpuworld::cpu_client(Driver::Manual)
        .expect_err("malformed TOML is the constructor's error");
    assert!(
        matches!(error, Error::Config(ConfigError::InvalidSetting { .. })),
        "{error:?}"
    );
    assert!(
        error.to_string().contains(&file.display().to_string()),
        "{error}"
    );
    std::fs::write(&file, "[scheduler]\nmax_task = 4\n").expect("write");
    let error = gpuworld::cpu_client(Driver::Manual)
        .expect_err("a misspelt key is the constructor's error");
    assert!(error.to_string().contains("max_task"), "{error}");
    forget(&file);
}

#[test]
fn cpu_client_returns_a_missing_configuration_file_as_an_error_naming_the_variable() {
    let _env = ENV.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    let file = config_file("missing", "");
    std::fs::remove_file(&file).expect("remove");
    let error = gpuworld::cpu_client(Driver::Manual)
        .expect_err("a configuration file that is not there is the constructor's error");
    assert!(error.to_string().contains("GPUWORLD_CONFIG"), "{error}");
    forget(&file);
}
