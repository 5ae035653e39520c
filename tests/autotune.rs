//! Autotune on the sim backend, where each candidate's kernel has a virtual cost: misses
//! benchmark deterministically, hits run the cached winner, results reach the world through the
//! tune stage and the persistent file, failures are reasons rather than panics.

mod common;

use gpuworld::error::{AutotuneError, LayoutError};
use gpuworld::kernel::{CpuSource, KernelDef, Param, Signature};
use gpuworld::tune::{
    CacheLocation, CandidateOutcome, FALLBACK_CANDIDATE, PersistentCache, StoredEntry, TunableSet,
    TuneEntry, TuneKey, TuneMessage, TuneMode, Tuner, TunerConfig,
};
use gpuworld::{Bindings, ComputeClient, CubeCount, Error, Handle, SimBackend, SimConfig};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

static FAST: KernelDef = marker_const("test.fast", "fast");
static MEDIUM: KernelDef = marker_const("test.medium", "medium");
static SLOW: KernelDef = marker_const("test.slow", "slow");
static PANICS: KernelDef = KernelDef {
    sources: &[&CpuSource(|_, _| panic!("the kernel fell over"))],
    ..marker_const("test.panics", "panics")
};

/// A marker kernel's bindings: where it writes, and what.
const MARKER: Signature = Signature {
    buffers: &[Param::u32("out")],
    scalars: &[Param::u32("mark")],
    cube_dim: [1, 1, 1],
};

const fn marker_const(id: &'static str, name: &'static str) -> KernelDef {
    KernelDef {
        id,
        name,
        signature: MARKER,
        sources: &[&CpuSource(|ctx, io| {
            if ctx.cube_index() == 0 {
                io.store_u32(0, 0, io.scalar_u32(0));
            }
        })],
    }
}

/// Virtual nanoseconds per launch: fast 1000, medium 3000, slow 5000, per cube.
fn virtual_cost(kernel: &KernelDef, count: [u32; 3]) -> u64 {
    let per_cube = match kernel.id {
        "test.fast" => 1000,
        "test.medium" => 3000,
        "test.slow" => 5000,
        _ => 10,
    };
    per_cube * u64::from(count[0] * count[1] * count[2])
}

fn sim() -> ComputeClient<SimBackend> {
    gpuworld::sim_client(SimConfig::default().with_kernel_cost(Some(virtual_cost)))
        .expect("the sim opens")
}

/// A directory of its own for one test's cache file.
fn fresh_dir(test: &str) -> PathBuf {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let dir = std::env::temp_dir()
        .join("gpuworld-autotune-tests")
        .join(format!("{test}-{}-{nanos}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

fn tuner(client: &ComputeClient<SimBackend>, dir: &Path) -> Tuner<SimBackend> {
    common::quick_tuner(client, CacheLocation::Dir(dir.to_path_buf()))
}

/// The job's input: a size that picks the key.
#[derive(Clone)]
struct Job {
    size: u32,
}

fn launch_marker(
    client: &ComputeClient<SimBackend>,
    kernel: &'static KernelDef,
    _job: &Job,
    value: u32,
) -> gpuworld::Result<Handle> {
    // Each run writes an output of its own, so outputs can be compared.
    let out = client.empty(4);
    client.launch(
        kernel,
        CubeCount::new_1d(1),
        Bindings::new().buffer(&out).scalar_u32(value),
    )?;
    Ok(out)
}

fn job_inputs(
    _client: &ComputeClient<SimBackend>,
    key: &TuneKey,
    _job: &Job,
) -> gpuworld::Result<Job> {
    Ok(Job { size: key.part(0) })
}

/// Three candidates in the order slow, fast, medium: the winner is not the first.
fn marker_set() -> Arc<TunableSet<SimBackend, Job, Handle>> {
    Arc::new(
        TunableSet::new(
            "test.markers",
            |job: &Job| TuneKey::new([job.size]),
            job_inputs,
        )
        .candidate("slow", |c, j: &Job| launch_marker(c, &SLOW, j, 1))
        .candidate("fast", |c, j: &Job| launch_marker(c, &FAST, j, 1))
        .candidate("medium", |c, j: &Job| launch_marker(c, &MEDIUM, j, 1)),
    )
}

fn launches(client: &ComputeClient<SimBackend>) -> u64 {
    client.with_runtime(|runtime| runtime.stats().launches)
}

fn job(_client: &ComputeClient<SimBackend>, size: u32) -> Job {
    Job { size }
}

fn tuned_outcomes(
    client: &ComputeClient<SimBackend>,
    set: &str,
    key: &str,
) -> Vec<CandidateOutcome> {
    match client.with_tune_cache(|cache| cache.entry(set, key)) {
        Some(TuneEntry::Tuned { outcomes, .. }) => outcomes,
        other => panic!("expected a tuned entry for {set}/{key}, found {other:?}"),
    }
}

#[test]
fn a_miss_benchmarks_every_candidate_and_picks_the_lowest_virtual_median() {
    let client = sim();
    let tuner = tuner(&client, &fresh_dir("miss"));
    let set = marker_set();

    let winner = tuner.select(&set, &job(&client, 8)).unwrap();
    client.tick();

    assert_eq!(winner, 1, "`fast` wins");
    let outcomes = tuned_outcomes(&client, "test.markers", "8");
    let medians: Vec<_> = outcomes
        .iter()
        .map(|o| (o.name.as_str(), o.result.clone()))
        .collect();
    assert_eq!(
        medians,
        [
            ("slow", Ok(Duration::from_nanos(5000))),
            ("fast", Ok(Duration::from_nanos(1000))),
            ("medium", Ok(Duration::from_nanos(3000))),
        ],
        "the medians are the candidates' virtual durations"
    );
}

#[test]
fn tuning_on_the_sim_gives_the_same_result_on_every_run() {
    let run = || {
        let client = sim();
        let tuner = tuner(&client, &fresh_dir("deterministic"));
        tuner.select(&marker_set(), &job(&client, 8)).unwrap();
        client.tick();
        tuned_outcomes(&client, "test.markers", "8")
    };
    assert_eq!(run(), run());
}

#[test]
fn a_hit_runs_the_cached_winner_without_benchmarking() {
    let client = sim();
    let tuner = tuner(&client, &fresh_dir("hit"));
    let set = marker_set();
    let input = job(&client, 8);
    tuner.execute(&set, &input).unwrap();
    client.tick();
    client.with_runtime(|rt| rt.backend_mut().take_log());
    let before = launches(&client);

    tuner.execute(&set, &input).unwrap();
    client.sync().unwrap();

    assert_eq!(launches(&client) - before, 1, "one launch: the winner's");
    let log = client.with_runtime(|rt| rt.backend().log_text());
    assert!(log.contains("launch fast"), "the winner ran:\n{log}");
}

#[test]
fn another_key_misses_and_is_tuned_on_its_own() {
    let client = sim();
    let tuner = tuner(&client, &fresh_dir("miss-by-key"));
    let set = marker_set();
    tuner.select(&set, &job(&client, 8)).unwrap();
    let before = launches(&client);

    tuner.select(&set, &job(&client, 16)).unwrap();
    client.tick();

    assert!(launches(&client) > before, "key 16 was benchmarked");
    assert!(matches!(
        client.with_tune_cache(|c| c.entry("test.markers", "16")),
        Some(TuneEntry::Tuned { winner: 1, .. })
    ));
}

#[test]
fn changed_candidates_miss_by_checksum_and_are_tuned_again() {
    let client = sim();
    let dir = fresh_dir("miss-by-checksum");
    let first_tuner = tuner(&client, &dir);
    first_tuner.select(&marker_set(), &job(&client, 8)).unwrap();
    client.tick();
    // Same set name, a candidate renamed and the order changed: the cached index means nothing.
    let changed: Arc<TunableSet<SimBackend, Job, Handle>> = Arc::new(
        TunableSet::new(
            "test.markers",
            |job: &Job| TuneKey::new([job.size]),
            job_inputs,
        )
        .candidate("medium", |c, j: &Job| launch_marker(c, &MEDIUM, j, 1))
        .candidate("slow-renamed", |c, j: &Job| launch_marker(c, &SLOW, j, 1))
        .candidate("fast", |c, j: &Job| launch_marker(c, &FAST, j, 1)),
    );
    let before = launches(&client);

    let winner = first_tuner.select(&changed, &job(&client, 8)).unwrap();

    assert!(
        launches(&client) > before,
        "the changed set was benchmarked"
    );
    assert_eq!(winner, 2, "`fast` is now third");
    let second_runtime = sim();
    let from_file = tuner(&second_runtime, &dir).select(&changed, &job(&second_runtime, 8));
    assert_eq!(from_file.unwrap(), 2, "the file holds the new entry");
}

#[test]
fn a_winner_persists_across_two_runtimes() {
    let dir = fresh_dir("persist");
    let first = sim();
    tuner(&first, &dir)
        .select(&marker_set(), &job(&first, 8))
        .unwrap();

    let second = sim();
    let tuner = tuner(&second, &dir);
    let winner = tuner.select(&marker_set(), &job(&second, 8)).unwrap();
    second.tick();

    assert_eq!(winner, 1);
    assert_eq!(launches(&second), 0, "nothing was benchmarked");
    assert!(
        matches!(
            second.with_tune_cache(|c| c.entry("test.markers", "8")),
            Some(TuneEntry::Tuned { winner: 1, .. })
        ),
        "the entry from the file reached the second runtime's world"
    );
    assert!(tuner.cache_path().is_some_and(|p| p.starts_with(&dir)));
}

#[test]
fn a_corrupt_cache_file_is_reported_and_ignored() {
    let dir = fresh_dir("corrupt");
    let client = sim();
    let path = tuner(&client, &dir).cache_path().unwrap().to_path_buf();
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(&path, b"{ this is not json").unwrap();

    let tuner = tuner(&client, &dir);
    let winner = tuner.select(&marker_set(), &job(&client, 8));

    assert!(tuner.cache_problem().is_some_and(|p| p.contains("corrupt")));
    assert_eq!(winner.unwrap(), 1, "tuning works without the file");
    let device = format!("sim-{}", client.properties().name);
    let rewritten = PersistentCache::new(&dir, &device).load().unwrap();
    assert_eq!(rewritten.len(), 1, "the file was replaced by a valid one");
}

#[test]
fn two_writers_at_once_keep_every_entry_and_a_valid_file() {
    let dir = fresh_dir("two-writers");
    let writers: Vec<_> = (0..2)
        .map(|writer| {
            let cache = PersistentCache::new(&dir, "shared device");
            std::thread::spawn(move || {
                for i in 0..40 {
                    let entry = StoredEntry {
                        set: format!("writer{writer}"),
                        key: i.to_string(),
                        checksum: 7,
                        winner: i % 3,
                        outcomes: Vec::new(),
                    };
                    cache.store(&[entry]).unwrap();
                }
            })
        })
        .collect();
    for writer in writers {
        writer.join().unwrap();
    }

    let entries = PersistentCache::new(&dir, "shared device").load().unwrap();
    assert_eq!(entries.len(), 80);
}

#[test]
fn failing_candidates_are_skipped_with_their_reasons() {
    let client = sim();
    let tuner = tuner(&client, &fresh_dir("failing"));
    let set: Arc<TunableSet<SimBackend, Job, Handle>> = Arc::new(
        TunableSet::new(
            "test.failing",
            |job: &Job| TuneKey::new([job.size]),
            job_inputs,
        )
        .candidate("errs", |_, _: &Job| {
            Err(Error::Layout(LayoutError::InvalidTensor {
                reason: "no such shape".into(),
            }))
        })
        .candidate("panics", |_, _: &Job| panic!("the host code fell over"))
        .candidate("kernel-panics", |c, j: &Job| {
            launch_marker(c, &PANICS, j, 1)
        })
        .candidate("works", |c, j: &Job| launch_marker(c, &MEDIUM, j, 1)),
    );

    let winner = tuner.select(&set, &job(&client, 4)).unwrap();
    client.tick();

    assert_eq!(winner, 3);
    let outcomes = tuned_outcomes(&client, "test.failing", "4");
    let reason = |i: usize| outcomes[i].result.clone().unwrap_err();
    assert!(reason(0).contains("no such shape"), "{}", reason(0));
    assert!(
        reason(1).contains("the host code fell over"),
        "{}",
        reason(1)
    );
    assert!(reason(2).contains("the kernel fell over"), "{}", reason(2));
    assert_eq!(outcomes[3].result, Ok(Duration::from_nanos(3000)));
}

#[test]
fn when_every_candidate_fails_the_error_carries_every_reason() {
    let client = sim();
    let tuner = tuner(&client, &fresh_dir("all-fail"));
    let set: Arc<TunableSet<SimBackend, Job, Handle>> = Arc::new(
        TunableSet::new(
            "test.all_fail",
            |job: &Job| TuneKey::new([job.size]),
            job_inputs,
        )
        .candidate("panics", |_, _: &Job| panic!("first reason"))
        .candidate("kernel-panics", |c, j: &Job| {
            launch_marker(c, &PANICS, j, 1)
        }),
    );

    let error = tuner.execute(&set, &job(&client, 2)).unwrap_err();
    client.tick();

    let Error::Autotune(AutotuneError::AllCandidatesFailed {
        set: name,
        key,
        reasons,
    }) = &error
    else {
        panic!("expected AutotuneFailed, got {error:?}");
    };
    assert_eq!((&**name, &**key), ("test.all_fail", "2"));
    let names: Vec<&str> = reasons.iter().map(|r| &*r.candidate).collect();
    assert_eq!(names, ["panics", "kernel-panics"]);
    let message = error.to_string();
    assert!(
        message.contains("first reason") && message.contains("the kernel fell over"),
        "{message}"
    );
    assert_eq!(
        client.with_tune_cache(|c| c.entry("test.all_fail", "2")),
        None,
        "nothing cached"
    );
    client.sync().expect("the runtime stays usable");
}

#[test]
fn a_single_candidate_is_chosen_without_a_benchmark() {
    let client = sim();
    let tuner = tuner(&client, &fresh_dir("single"));
    let set: Arc<TunableSet<SimBackend, Job, Handle>> = Arc::new(
        TunableSet::new(
            "test.single",
            |job: &Job| TuneKey::new([job.size]),
            job_inputs,
        )
        .candidate("only", |c, j: &Job| launch_marker(c, &SLOW, j, 1)),
    );

    assert_eq!(tuner.select(&set, &job(&client, 4)).unwrap(), 0);
    client.tick();

    assert_eq!(launches(&client), 0);
    assert!(tuned_outcomes(&client, "test.single", "4").is_empty());
}

#[test]
fn a_pending_key_gets_the_first_candidate_and_a_tick_never_waits_for_tuning() {
    let client = sim();
    let tuner = tuner(&client, &fresh_dir("pending-mark"));
    let set = marker_set();
    client.send_tune_message(TuneMessage::Pending {
        set: "test.markers".into(),
        key: "8".into(),
    });
    client.tick();

    let choice = tuner.select(&set, &job(&client, 8)).unwrap();

    assert_eq!(choice, FALLBACK_CANDIDATE);
    assert_eq!(
        launches(&client),
        0,
        "a pending key is not benchmarked twice"
    );
}

#[test]
fn background_tuning_serves_the_fallback_until_the_tick_ingests_the_winner() {
    let client = sim();
    let tuner = Tuner::new(
        &client,
        TunerConfig::default()
            .with_mode(TuneMode::Background)
            .with_cache(CacheLocation::Dir(fresh_dir("background"))),
    );
    let set = marker_set();
    let input = job(&client, 8);

    assert_eq!(tuner.select(&set, &input).unwrap(), FALLBACK_CANDIDATE);
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut choice = FALLBACK_CANDIDATE;
    while Instant::now() < deadline {
        client.tick();
        choice = tuner.select(&set, &input).unwrap();
        if choice != FALLBACK_CANDIDATE {
            break;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    assert_eq!(choice, 1, "the background winner arrives through the tick");
}

#[test]
fn a_group_with_negative_priority_is_not_benchmarked_for_that_key() {
    let client = sim();
    let tuner = tuner(&client, &fresh_dir("groups"));
    let set: Arc<TunableSet<SimBackend, Job, Handle>> = Arc::new(
        TunableSet::new(
            "test.groups",
            |job: &Job| TuneKey::new([job.size]),
            job_inputs,
        )
        .group(
            "large-only",
            |key: &TuneKey| if key.part(0) >= 64 { 1 } else { -1 },
        )
        .candidate("slow", |c, j: &Job| launch_marker(c, &SLOW, j, 1))
        .candidate("medium", |c, j: &Job| launch_marker(c, &MEDIUM, j, 1))
        .with(
            gpuworld::tune::Tunable::new("fast", |c, j: &Job| launch_marker(c, &FAST, j, 1))
                .in_group("large-only"),
        ),
    );

    let small = tuner.select(&set, &job(&client, 8)).unwrap();
    let large = tuner.select(&set, &job(&client, 64)).unwrap();
    client.tick();

    assert_eq!(small, 1, "`fast` is excluded for small keys: `medium` wins");
    assert!(
        tuned_outcomes(&client, "test.groups", "8")[2]
            .result
            .is_err()
    );
    assert_eq!(
        large, 2,
        "for large keys the group goes first and `fast` alone is timed"
    );
}

#[cfg(feature = "autotune-checks")]
#[test]
fn a_candidate_whose_output_differs_from_the_first_fails_the_check() {
    let client = sim();
    let tuner = tuner(&client, &fresh_dir("checks"));
    let set: Arc<TunableSet<SimBackend, Job, Handle>> = Arc::new(
        TunableSet::new(
            "test.checks",
            |job: &Job| TuneKey::new([job.size]),
            job_inputs,
        )
        .candidate("reference", |c, j: &Job| launch_marker(c, &SLOW, j, 1))
        .candidate("wrong", |c, j: &Job| launch_marker(c, &FAST, j, 2))
        .output_check(|c, a: &Handle, b: &Handle| {
            let (a, b) = (
                c.read_one(a).map_err(|e| e.to_string())?,
                c.read_one(b).map_err(|e| e.to_string())?,
            );
            if a == b {
                Ok(())
            } else {
                Err(format!("{b:?} instead of {a:?}"))
            }
        }),
    );

    let winner = tuner.select(&set, &job(&client, 4)).unwrap();
    client.tick();

    assert_eq!(winner, 0, "the faster but wrong candidate cannot win");
    let outcomes = tuned_outcomes(&client, "test.checks", "4");
    assert!(
        outcomes[1]
            .result
            .as_ref()
            .is_err_and(|r| r.contains("instead of"))
    );
}

#[test]
fn a_set_without_candidates_fails_with_a_clear_error() {
    let client = sim();
    let tuner = tuner(&client, &fresh_dir("empty"));
    let set: Arc<TunableSet<SimBackend, Job, Handle>> = Arc::new(TunableSet::new(
        "test.empty",
        |job: &Job| TuneKey::new([job.size]),
        job_inputs,
    ));

    let error = tuner.execute(&set, &job(&client, 1)).unwrap_err();

    assert_eq!(
        error.to_string(),
        "autotune of `test.empty` for key 1 failed: the set has no candidate"
    );
}

#[test]
fn a_key_for_which_every_candidate_is_excluded_fails_without_running_any() {
    let client = sim();
    let tuner = tuner(&client, &fresh_dir("all-excluded"));
    let set: Arc<TunableSet<SimBackend, Job, Handle>> = Arc::new(
        TunableSet::new(
            "test.excluded",
            |job: &Job| TuneKey::new([job.size]),
            job_inputs,
        )
        .with(
            gpuworld::tune::Tunable::new("off", |c, j: &Job| launch_marker(c, &FAST, j, 1))
                .with_priority(-1),
        )
        .with(
            gpuworld::tune::Tunable::new("also-off", |c, j: &Job| launch_marker(c, &SLOW, j, 1))
                .with_priority(-1),
        ),
    );

    let error = tuner.select(&set, &job(&client, 1)).unwrap_err();

    assert!(
        matches!(
            &error,
            Error::Autotune(AutotuneError::AllCandidatesFailed { reasons, .. })
                if reasons.len() == 2
        ),
        "{error}"
    );
    assert_eq!(launches(&client), 0);
}
