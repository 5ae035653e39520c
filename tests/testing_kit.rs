//! The public testing kit (`gpuworld::testing`): redactable snapshots, record and replay across
//! backends, the fault sweep, and the virtual-time cost model.

mod common;

use common::{Skip, f32s};
use gpuworld::error::{ExecutionError, MemoryError};

test_main![
    a_snapshot_serializes_to_yaml_and_redacts_like_any_value,
    pools_and_contents_show_only_when_asked,
    a_cpu_recording_replays_on_the_sim_with_the_same_waits_and_reclamations,
    a_user_kernel_must_be_registered_to_be_replayed,
    an_unchecked_launch_replays_checked_unless_unsafe_code_asks_for_it_unchecked,
    uploads_over_the_cap_are_left_out_and_replayed_as_zeros,
    a_recording_of_another_format_or_version_is_refused,
    every_failure_point_of_a_fixed_program_ends_in_a_typed_error_without_leak_or_panic,
    a_fault_on_one_stream_leaves_the_other_streams_working,
    a_seeded_plan_is_the_same_on_every_run,
    independent_streams_overlap_in_virtual_time_and_a_wait_serializes_them,
    the_cli_replays_a_recording_and_compares_the_cpu_with_the_sim,
    the_documented_test_of_a_new_kernel_is_at_most_20_lines,
    a_hung_stream_ends_in_the_watchdog_error_while_another_stream_keeps_working,
    a_lost_device_fails_every_stream_and_still_reclaims_memory,
    #[cfg(feature = "wgpu")]
    a_wgpu_recording_replays_on_the_sim_and_on_wgpu_with_the_same_results,
    #[cfg(feature = "cuda")]
    a_cuda_recording_replays_on_the_sim_and_on_cuda_with_the_same_results,
    a_run_ticked_by_its_device_thread_is_recorded_and_replays_with_the_same_values,
];

use gpuworld::testing::{
    CostModel, Element, Fault, FaultPlan, KernelRate, Recorder, Recording, Replayer,
    SnapshotOptions, TestRuntime, fault_sweep,
};
use gpuworld::{
    Bindings, ComputeClient, CubeCount, Driver, Error, RuntimeConfig, SimBackend, SimConfig,
    StreamId, library,
};

fn f32_bytes(values: &[f32]) -> Vec<u8> {
    bytemuck::cast_slice(values).to_vec()
}

fn a_snapshot_serializes_to_yaml_and_redacts_like_any_value() {
    let rt = TestRuntime::new();
    let x = rt.create(f32_bytes(&[1.0, 2.0, 3.0, 4.0]));
    rt.launch(
        &library::FILL,
        CubeCount::new_1d(1),
        Bindings::new().buffer(&x).scalar_f32(7.0),
    )
    .unwrap();
    rt.step();
    rt.step();
    let options = SnapshotOptions::default().with_contents(3, Element::F32);
    insta::assert_yaml_snapshot!("yaml_with_contents", rt.tick_snapshot_with(&options), {
        ".handles[].memory" => "[where]",
    });
}

fn pools_and_contents_show_only_when_asked() {
    let rt = TestRuntime::new();
    let _x = rt.create(f32_bytes(&[1.5; 8]));
    rt.step();
    rt.step();
    let plain = rt.tick_snapshot().to_string();
    assert!(!plain.contains("pool 0"), "{plain}");
    assert!(!plain.contains("= ["), "{plain}");
    let full = rt
        .tick_snapshot_with(
            &SnapshotOptions::default()
                .with_pools()
                .with_contents(2, Element::F32),
        )
        .to_string();
    assert!(full.contains("pool 0"), "{full}");
    assert!(full.contains("    = [1.5, 1.5]"), "{full}");
}

/// A program on three streams: uploads, a launch that reads another stream's buffer (a wait),
/// buffers dropped while in use on two streams (reclaimed behind events), reads.
fn multi_stream_program<B: gpuworld::Backend>(client: &ComputeClient<B>, mut tick: impl FnMut()) {
    let (s0, s1, s2) = (
        client.with_stream(StreamId { value: 0 }),
        client.with_stream(StreamId { value: 1 }),
        client.with_stream(StreamId { value: 2 }),
    );
    let a = s0.create(f32_bytes(&[1.0; 64]));
    let b = s1.create(f32_bytes(&[2.0; 64]));
    let out = s2.empty(256);
    tick();
    s2.launch(
        &library::ADD,
        CubeCount::new_1d(1),
        Bindings::new().buffer(&a).buffer(&b).buffer(&out),
    )
    .unwrap();
    drop((a, b));
    tick();
    s0.launch(
        &library::SCALE,
        CubeCount::new_1d(1),
        Bindings::new().buffer(&out).buffer(&out).scalar_f32(0.5),
    )
    .unwrap();
    let c = s1.create(f32_bytes(&[4.0; 64]));
    tick();
    let _read_out = s0.read_async(&[out.binding()]);
    let _read_c = s1.read_async(&[c.binding()]);
    drop((out, c));
    tick();
}

/// The streams and tasks lines of a snapshot: what the commands decide (cursors, submissions,
/// which streams waited for which), as opposed to when the device finished.
fn decisions(snapshot: &str) -> String {
    snapshot
        .lines()
        .take_while(|line| *line != "in flight:")
        .collect::<Vec<_>>()
        .join("\n")
}

fn a_cpu_recording_replays_on_the_sim_with_the_same_waits_and_reclamations() {
    let cpu = gpuworld::cpu_client(Driver::Manual).unwrap();
    let recorder = Recorder::attach(&cpu, u64::MAX);
    let mut original = Vec::new();
    multi_stream_program(&cpu, || {
        cpu.tick();
        original.push(cpu.snapshot());
    });
    let recording = recorder.finish();
    assert_eq!(recording.backend, "cpu");
    assert_eq!(recording.ticks, 4);

    // Through the file format and back.
    let path = std::env::temp_dir().join(format!("gpuworld-rec-{}.json", std::process::id()));
    recording.save(&path).unwrap();
    let recording = Recording::load(&path).unwrap();
    let _ = std::fs::remove_file(&path);

    let replay_on_sim = || {
        let sim = gpuworld::sim_client(SimConfig::default()).expect("the sim opens");
        let mut snapshots = Vec::new();
        let mut waits = Vec::new();
        let report = Replayer::new(recording.clone())
            .replay(&sim, |_| {
                snapshots.push(sim.snapshot());
                sim.with_runtime(|rt| {
                    let sim = rt.backend_mut();
                    let log = sim.take_log();
                    waits.extend(
                        log.iter()
                            .filter(|(_, c)| matches!(c, gpuworld::SimCall::Wait { .. }))
                            .map(|(t, c)| format!("t{t} {}", sim.call_text(c))),
                    );
                });
            })
            .unwrap();
        let reclaimed = sim.with_runtime(|rt| rt.stats().handles_reclaimed);
        (snapshots, waits, report, reclaimed)
    };
    let (snapshots, waits, report, reclaimed) = replay_on_sim();

    // Tick for tick, the same decisions: cursors, submissions, and the waits between streams.
    assert_eq!(snapshots.len(), original.len());
    for (tick, (replayed, recorded)) in snapshots.iter().zip(&original).enumerate() {
        assert_eq!(
            decisions(replayed),
            decisions(recorded),
            "tick {}",
            tick + 1
        );
    }
    insta::assert_snapshot!("replayed_waits", waits.join("\n"));
    // The same reclamations: the replay reclaims every buffer the program released; the
    // recorded run had reclaimed no more by its last tick (when depends on the device's timing).
    let original_reclaimed = cpu.with_runtime(|rt| rt.stats().handles_reclaimed);
    assert_eq!(reclaimed, 4, "a, b, out and c all returned to the pool");
    assert!(original_reclaimed <= reclaimed);
    // The same values: out = (1 + 2) * 0.5, c = 4.
    let floats = |bytes: &[u8]| -> Vec<f32> { bytemuck::cast_slice(bytes).to_vec() };
    assert_eq!(report.reads.len(), 2);
    assert_eq!(
        floats(&report.reads[0].result.as_ref().unwrap()[0]),
        vec![1.5; 64]
    );
    assert_eq!(
        floats(&report.reads[1].result.as_ref().unwrap()[0]),
        vec![4.0; 64]
    );

    // On the sim, the replay is the same on every run, tick by tick.
    let (again, again_waits, _, _) = replay_on_sim();
    assert_eq!(again, snapshots);
    assert_eq!(again_waits, waits);

    // Replayed on the CPU backend, the results agree with the sim's.
    let cpu_again = gpuworld::cpu_client(Driver::Manual).unwrap();
    let on_cpu = Replayer::new(recording).replay(&cpu_again, |_| {}).unwrap();
    assert!(on_cpu.same_results(&report));
}

fn a_user_kernel_must_be_registered_to_be_replayed() {
    use gpuworld::{CpuSource, KernelDef, Param, Signature};
    static NEGATE: KernelDef = KernelDef {
        id: "test.negate",
        name: "negate",
        signature: Signature {
            buffers: &[Param::f32("x")],
            scalars: &[],
            cube_dim: [64, 1, 1],
        },
        sources: &[&CpuSource(|cube, io| {
            for i in cube.units_1d(io.len32(0)) {
                io.store_f32(0, i, -io.load_f32(0, i));
            }
        })],
    };
    let rt = TestRuntime::new();
    let recorder = Recorder::attach(rt.client(), u64::MAX);
    let x = rt.create(f32_bytes(&[1.0, 2.0]));
    rt.launch(&NEGATE, CubeCount::new_1d(1), Bindings::new().buffer(&x))
        .unwrap();
    let _ = rt.read_one(&x).unwrap();
    let recording = recorder.finish();

    let sim = gpuworld::sim_client(SimConfig::default()).expect("the sim opens");
    let error = Replayer::new(recording.clone())
        .replay(&sim, |_| {})
        .unwrap_err();
    assert_eq!(
        error,
        gpuworld::testing::ReplayError::UnknownKernel {
            kernel: "test.negate".into()
        }
    );
    // The message says what to run instead, since the CLI cannot register a kernel.
    let message = error.to_string();
    assert!(
        message.contains("`test.negate`") && message.contains(".kernel(&KERNEL)"),
        "{message}"
    );
    let report = Replayer::new(recording)
        .kernel(&NEGATE)
        .replay(&sim, |_| {})
        .unwrap();
    let bytes = report.reads[0].result.as_ref().unwrap()[0].clone();
    assert_eq!(bytemuck::cast_slice::<u8, f32>(&bytes), [-1.0, -2.0]);
}

fn an_unchecked_launch_replays_checked_unless_unsafe_code_asks_for_it_unchecked() {
    let cpu = gpuworld::cpu_client(Driver::Manual).unwrap();
    let recorder = Recorder::attach(&cpu, u64::MAX);
    let x = cpu.create(f32_bytes(&[1.0, 2.0, 3.0, 4.0]));
    let out = cpu.empty(16);
    // SAFETY: scale touches exactly the 4 elements both bindings hold.
    unsafe {
        cpu.launch_unchecked(
            &library::SCALE,
            CubeCount::new_1d(1),
            Bindings::new().buffer(&x).buffer(&out).scalar_f32(3.0),
        )
        .unwrap();
    }
    assert_eq!(f32s(&cpu.read_one(&out).unwrap()), [3.0, 6.0, 9.0, 12.0]);
    let recording = recorder.finish();

    let replay = |replayer: Replayer| {
        let again = gpuworld::cpu_client(Driver::Manual).unwrap();
        replayer.replay(&again, |_| {}).unwrap()
    };
    let checked = replay(Replayer::new(recording.clone()));
    assert_eq!(checked.checked_instead, 1);
    assert_eq!(
        f32s(checked.reads[0].result.as_ref().unwrap()[0].as_slice()),
        [3.0, 6.0, 9.0, 12.0]
    );
    // SAFETY: the one unchecked launch recorded stays inside its bindings (see above).
    let unchecked = replay(unsafe { Replayer::new(recording).unchecked_as_recorded() });
    assert_eq!(unchecked.checked_instead, 0);
    assert!(unchecked.same_results(&checked));
}

fn uploads_over_the_cap_are_left_out_and_replayed_as_zeros() {
    let rt = TestRuntime::new();
    let recorder = Recorder::attach(rt.client(), 8);
    let small = rt.create(vec![1, 2, 3, 4]);
    let large = rt.create(vec![9; 64]);
    rt.step();
    let recording = recorder.finish();
    let json = serde_json::to_string(&recording).unwrap();
    assert!(json.contains(r#""hex":"01020304""#), "{json}");
    assert!(json.contains(r#""omitted":64"#), "{json}");
    drop((small, large));
}

fn a_recording_of_another_format_or_version_is_refused() {
    let error = Recording::from_json(
        r#"{"format":"gpuworld-recording","version":99,"backend":"cpu","device":"x","ticks":0,"commands":[]}"#,
    )
    .unwrap_err();
    assert_eq!(error, "format version 99 (this build reads version 1)");
}

/// A fixed program: two streams, uploads, launches, a cross-stream use, reads; its handles drop
/// when it returns.
fn fixed_program(rt: &TestRuntime) -> Result<(), Error> {
    let other = rt.stream(1);
    let a = rt.create(f32_bytes(&[1.0; 64]));
    let b = other.create(f32_bytes(&[2.0; 64]));
    let out = rt.empty(256);
    rt.launch(
        &library::ADD,
        CubeCount::new_1d(1),
        Bindings::new().buffer(&a).buffer(&b).buffer(&out),
    )?;
    other.launch(
        &library::FILL,
        CubeCount::new_1d(1),
        Bindings::new().buffer(&b).scalar_f32(5.0),
    )?;
    let sum: Vec<f32> = rt.read_one_as(&out)?;
    let filled: Vec<f32> = other.read_one_as(&b)?;
    if sum != vec![3.0; 64] || filled != vec![5.0; 64] {
        return Err(Error::device_fault(rt.stream_id(), "wrong values"));
    }
    Ok(())
}

fn every_failure_point_of_a_fixed_program_ends_in_a_typed_error_without_leak_or_panic() {
    let report = fault_sweep(SimConfig::default(), fixed_program).unwrap();
    println!("{report}");
    assert!(report.outcomes.len() >= 20, "{report}");
    assert!(report.panics().is_empty(), "{report}");
    assert!(report.leaks().is_empty(), "{report}");
    for outcome in &report.outcomes {
        let fault = outcome.fault;
        match (fault, &outcome.error) {
            (Fault::Allocation(_), Some(Error::Memory(MemoryError::OutOfMemory { .. }))) => {}
            (
                Fault::Launch(_) | Fault::Copy(_),
                Some(Error::Execution(ExecutionError::DeviceFault { .. })),
            ) => {}
            // Events and a lost device reach the program only where it waits on them: a fault on
            // an event that only pins memory, or after the program's last read, changes nothing it sees
            // (it checked its values and returned Ok).
            (
                Fault::Event(_) | Fault::EventNeverCompletes(_) | Fault::DeviceLost { .. },
                Some(Error::Execution(ExecutionError::DeviceFault { .. })) | None,
            ) => {}
            (Fault::DeviceLost { .. }, Some(Error::Memory(MemoryError::OutOfMemory { .. }))) => {}
            (fault, error) => panic!("{fault}: unexpected outcome {error:?}\n{report}"),
        }
    }
}

fn a_fault_on_one_stream_leaves_the_other_streams_working() {
    // Launch 1 is stream 0's add; stream 1's fill (launch 2) is untouched.
    let rt =
        TestRuntime::with_sim(SimConfig::default().with_faults(FaultPlan::one(Fault::Launch(1))));
    let other = rt.stream(1);
    let a = rt.create(f32_bytes(&[1.0; 64]));
    let b = other.create(f32_bytes(&[2.0; 64]));
    rt.launch(
        &library::FILL,
        CubeCount::new_1d(1),
        Bindings::new().buffer(&a).scalar_f32(3.0),
    )
    .unwrap();
    other
        .launch(
            &library::FILL,
            CubeCount::new_1d(1),
            Bindings::new().buffer(&b).scalar_f32(4.0),
        )
        .unwrap();
    let error = rt.read_one(&a).unwrap_err();
    assert_eq!(
        error.to_string(),
        "device fault on s0: the launch failed (injected fault)"
    );
    assert_eq!(other.read_one_as::<f32>(&b).unwrap(), vec![4.0; 64]);
    // The faulted stream is usable again once its fault was reported.
    rt.write(&a, &f32_bytes(&[6.0; 64])).unwrap();
    assert_eq!(rt.read_one_as::<f32>(&a).unwrap(), vec![6.0; 64]);
    drop((a, b));
    rt.step_until_idle().unwrap();
    assert_eq!(rt.memory_usage().bytes_in_use, 0);
}

fn a_seeded_plan_is_the_same_on_every_run() {
    let counts = gpuworld::testing::CallCounts {
        allocations: 3,
        launches: 4,
        copies: 5,
        events: 6,
        ticks: 7,
    };
    let plan = FaultPlan::seeded(42, &counts, 3);
    assert_eq!(plan, FaultPlan::seeded(42, &counts, 3));
    assert_eq!(plan.faults.len(), 3);
    assert!(plan.faults.iter().all(|f| counts.every_fault().contains(f)));
}

fn independent_streams_overlap_in_virtual_time_and_a_wait_serializes_them() {
    let costs = CostModel::default().with_kernel(
        library::FILL.id,
        KernelRate {
            fixed_ns: 1_000,
            per_cube_ns: 100,
            per_byte_ns: 0,
        },
    );
    let rt = TestRuntime::with_configs(
        SimConfig::default().with_costs(Some(costs)),
        RuntimeConfig::default(),
    );
    let other = rt.stream(1);
    let a = rt.empty(1024);
    let b = other.empty(1024);
    let fill = |client: &ComputeClient<SimBackend>, h: &gpuworld::Handle| {
        client
            .launch(
                &library::FILL,
                CubeCount::new_1d(10),
                Bindings::new().buffer(h).scalar_f32(1.0),
            )
            .unwrap();
    };
    fill(rt.client(), &a);
    fill(&other, &b);
    rt.step_until_idle().unwrap();
    let spans = rt.sim(|sim| sim.timeline().to_vec());
    assert_eq!(spans.len(), 2);
    assert!(spans[0].overlaps(&spans[1]), "{spans:?}");
    assert_eq!(rt.sim(|sim| sim.virtual_time().as_nanos()), 2_000);

    // Stream 1 now writes what stream 0 wrote: it waits, so its fill starts after stream 0's.
    fill(rt.client(), &a);
    fill(&other, &a);
    rt.step_until_idle().unwrap();
    let spans = rt.sim(|sim| sim.timeline().to_vec());
    let (first, second) = (&spans[2], &spans[3]);
    assert!(!first.overlaps(second), "{spans:?}");
    assert_eq!(second.start_ns, first.end_ns);
    assert_eq!(rt.sim(|sim| sim.virtual_time().as_nanos()), 6_000);
}

fn the_cli_replays_a_recording_and_compares_the_cpu_with_the_sim() {
    let cpu = gpuworld::cpu_client(Driver::Manual).unwrap();
    let recorder = Recorder::attach(&cpu, u64::MAX);
    multi_stream_program(&cpu, || cpu.tick());
    let path = std::env::temp_dir().join(format!("gpuworld-cli-{}.json", std::process::id()));
    recorder.finish().save(&path).unwrap();
    let run = |backend: &str| {
        let output = std::process::Command::new(env!("CARGO_BIN_EXE_gpuworld"))
            .args(["replay", path.to_str().unwrap(), "--backend", backend])
            .output()
            .unwrap();
        assert!(output.status.success(), "{output:?}");
        String::from_utf8(output.stdout).unwrap()
    };
    let on_sim = run("sim");
    let on_cpu = run("cpu");
    let _ = std::fs::remove_file(&path);
    let body = |text: &str| text.lines().skip(1).take(2).collect::<Vec<_>>().join("\n");
    insta::assert_snapshot!("cli_replay_reads", body(&on_sim));
    assert_eq!(body(&on_cpu), body(&on_sim));
    assert!(
        on_cpu.ends_with("results match the sim's replay\n"),
        "{on_cpu}"
    );
}

/// The code lines of the first example of `docs/testing.md` (a user's test of a new kernel):
/// blank lines, hidden (`#`) lines and the expected text of the inline snapshot left out.
fn documented_kernel_test() -> Vec<&'static str> {
    let doc = include_str!("../docs/testing.md");
    let example = doc
        .split("```rust\n")
        .nth(1)
        .and_then(|rest| rest.split("```").next())
        .unwrap_or_default();
    let mut lines = Vec::new();
    let mut in_expected_text = false;
    for line in example.lines() {
        if in_expected_text {
            in_expected_text = line != "\");";
            continue;
        }
        if line.trim().is_empty() || line.starts_with('#') {
            continue;
        }
        in_expected_text = line.ends_with("@r\"");
        lines.push(line);
    }
    lines
}

fn the_documented_test_of_a_new_kernel_is_at_most_20_lines() {
    let lines = documented_kernel_test();
    assert!(
        lines.len() <= 20,
        "{} lines:\n{}",
        lines.len(),
        lines.join("\n")
    );
    assert!(lines.iter().any(|l| l.contains("static DOUBLE: KernelDef")));
    assert!(lines.iter().any(|l| l.contains("tick_snapshot()")));
    assert!(lines.iter().any(|l| l.contains("read_one_as")));
}

fn a_hung_stream_ends_in_the_watchdog_error_while_another_stream_keeps_working() {
    let rt = TestRuntime::with_sim(
        SimConfig::default()
            .with_faults(FaultPlan::one(Fault::EventNeverCompletes(1)).with_watchdog_ticks(5)),
    );
    let other = rt.stream(1);
    let a = rt.create(f32_bytes(&[1.0; 64]));
    rt.flush(); // event 1: after `a`'s upload, on s0; it never completes on its own
    let b = other.create(f32_bytes(&[2.0; 64]));
    assert_eq!(other.read_one_as::<f32>(&b).unwrap(), vec![2.0; 64]);
    let hung_at = rt.with_runtime(|r| r.tick_count());
    let error = rt.read_one(&a).unwrap_err();
    assert_eq!(
        error.to_string(),
        "device fault on s0: the work never completed; the watchdog fired (injected fault)"
    );
    assert!(rt.with_runtime(|r| r.tick_count()) >= hung_at + 3);
    drop((a, b));
    rt.step_until_idle().unwrap();
    assert_eq!(rt.memory_usage().bytes_in_use, 0);
}

fn a_lost_device_fails_every_stream_and_still_reclaims_memory() {
    let rt = TestRuntime::with_sim(
        SimConfig::default().with_faults(FaultPlan::one(Fault::DeviceLost { tick: 2 })),
    );
    let other = rt.stream(1);
    let a = rt.create(f32_bytes(&[1.0; 64]));
    let b = other.create(f32_bytes(&[2.0; 64]));
    rt.step();
    let lost = "device fault on s0: the device was lost (injected fault)";
    assert_eq!(rt.read_one(&a).unwrap_err().to_string(), lost);
    assert_eq!(
        other.read_one(&b).unwrap_err().to_string(),
        lost.replace("s0", "s1")
    );
    let c = rt.create(vec![0; 16]);
    assert!(rt.read_one(&c).is_err_and(|error| error.is_out_of_memory()));
    drop((a, b, c));
    rt.step_until_idle().unwrap();
    assert_eq!(rt.memory_usage().bytes_in_use, 0);
}

/// Records `multi_stream_program` on a client `make` gives (ticked by hand), replays it on the
/// sim, and checks that every tick made the same decisions; then replays it on another client of
/// `make` and checks the reads return what they return on the sim. A [`Skip`] from `make` (no
/// device on this machine) is the test's.
fn recorded_on_replays_on_the_sim<B: gpuworld::Backend>(
    make: impl Fn() -> Result<ComputeClient<B>, Skip>,
) -> Result<(), Skip> {
    let client = make()?;
    let recorder = Recorder::attach(&client, u64::MAX);
    let mut original = Vec::new();
    multi_stream_program(&client, || {
        client.tick();
        original.push(client.snapshot());
    });
    let recording = recorder.finish();
    assert_eq!(recording.backend, B::NAME);
    drop(client);

    let sim = gpuworld::sim_client(SimConfig::default()).expect("the sim opens");
    let mut replayed = Vec::new();
    let on_sim = Replayer::new(recording.clone())
        .replay(&sim, |_| replayed.push(sim.snapshot()))
        .unwrap();
    assert_eq!(replayed.len(), original.len());
    for (tick, (replayed, recorded)) in replayed.iter().zip(&original).enumerate() {
        assert_eq!(
            decisions(replayed),
            decisions(recorded),
            "tick {}",
            tick + 1
        );
    }
    let again = make()?;
    let on_backend = Replayer::new(recording).replay(&again, |_| {}).unwrap();
    assert!(
        on_backend.same_results(&on_sim),
        "{on_backend:?}\n{on_sim:?}"
    );
    Ok(())
}

#[cfg(feature = "wgpu")]
fn a_wgpu_recording_replays_on_the_sim_and_on_wgpu_with_the_same_results() -> Result<(), Skip> {
    recorded_on_replays_on_the_sim(|| {
        common::wgpu_backend_or_skip()
            .map(|backend| ComputeClient::new(backend, RuntimeConfig::default(), Driver::Manual))
    })
}

#[cfg(feature = "cuda")]
fn a_cuda_recording_replays_on_the_sim_and_on_cuda_with_the_same_results() -> Result<(), Skip> {
    recorded_on_replays_on_the_sim(|| {
        common::cuda_backend_or_skip()
            .map(|backend| ComputeClient::new(backend, RuntimeConfig::default(), Driver::Manual))
    })
}

fn a_run_ticked_by_its_device_thread_is_recorded_and_replays_with_the_same_values() {
    let cpu = gpuworld::cpu_client(Driver::DeviceThread).unwrap();
    let recorder = Recorder::attach(&cpu, u64::MAX);
    let other = cpu.with_stream(StreamId { value: 1 });
    let a = cpu.create(f32_bytes(&[1.0; 64]));
    let b = other.create(f32_bytes(&[2.0; 64]));
    let out = other.empty(256);
    other
        .launch(
            &library::ADD,
            CubeCount::new_1d(1),
            Bindings::new().buffer(&a).buffer(&b).buffer(&out),
        )
        .unwrap();
    let original: Vec<f32> = other.read_one_as(&out).unwrap();
    drop((a, b, out));
    cpu.sync().unwrap();
    let recording = recorder.finish();
    assert!(recording.ticks >= 1);

    let sim = gpuworld::sim_client(SimConfig::default()).expect("the sim opens");
    let report = Replayer::new(recording).replay(&sim, |_| {}).unwrap();
    let replayed = &report.reads[0].result.as_ref().unwrap()[0];
    assert_eq!(
        bytemuck::cast_slice::<u8, f32>(replayed),
        original.as_slice()
    );
    assert_eq!(report.syncs.len(), 1);
    assert!(report.syncs[0].1.is_ok());
}
