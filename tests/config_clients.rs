//! The convenience constructors read `gpuworld.toml` through `GPUWORLD_CONFIG` (a test binary of
//! its own: it sets a process-wide variable).

use gpuworld::{Backend, CpuBackend, Driver, Error, RuntimeConfig, SchedulingStrategy};

#[test]
fn cpu_client_takes_the_scheduler_settings_and_memory_limit_of_the_configuration_file() {
    let dir = std::env::temp_dir().join(format!("gpuworld-config-clients-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let file = dir.join("gpuworld.toml");
    std::fs::write(
        &file,
        "[scheduler]\nmax_tasks = 7\nstrategy = \"sequential\"\n[cpu]\nmemory_limit = 1048576\n",
    )
    .expect("write");
    // SAFETY: this binary's only test; no other thread reads the environment meanwhile.
    unsafe { std::env::set_var("GPUWORLD_CONFIG", &file) };
    let client = gpuworld::cpu_client(Driver::Manual);
    let config = client.with_runtime(|rt| rt.world().resource::<RuntimeConfig>().clone());
    assert_eq!(config.max_tasks, 7);
    assert_eq!(config.strategy, SchedulingStrategy::Sequential);
    assert_eq!(client.properties().memory_bytes, 1 << 20);
    let past_limit = client.empty(2 << 20);
    assert!(matches!(
        client.read_one(&past_limit),
        Err(Error::OutOfMemory {
            capacity: Some(1048576),
            ..
        })
    ));
    // A bad value: the checked constructor names it, the plain one falls back to the defaults.
    std::fs::write(&file, "[scheduler]\nmax_tasks = 0\n").expect("write");
    let error = gpuworld::cpu_client_configured(Driver::Manual)
        .err()
        .expect("a bad configuration is an error");
    assert!(error.to_string().contains("scheduler.max_tasks"), "{error}");
    let client = gpuworld::cpu_client(Driver::Manual);
    let config = client.with_runtime(|rt| rt.world().resource::<RuntimeConfig>().clone());
    assert_eq!(config.max_tasks, RuntimeConfig::default().max_tasks);
    assert_eq!(
        client.properties().memory_bytes,
        CpuBackend::new().properties().memory_bytes
    );
    unsafe { std::env::remove_var("GPUWORLD_CONFIG") };
    let _ = std::fs::remove_dir_all(&dir);
}
