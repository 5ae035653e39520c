//! Traces: on the sim, the trace of a fixed multi-stream program is a snapshot (virtual time
//! makes it stable); on cpu and wgpu, the Chrome JSON parses and its structure holds: every
//! kernel slice on its stream's track, every wait with both ends, counters never negative.

mod common;

test_main![
    the_trace_of_a_multi_stream_program_on_the_sim,
    stopping_a_trace_that_was_not_started_is_an_error,
    the_trace_of_a_multi_stream_program_on_the_cpu_is_well_formed_chrome_json,
    #[cfg(feature = "wgpu")]
    the_trace_of_a_multi_stream_program_on_wgpu_is_well_formed_chrome_json,
    #[cfg(feature = "cuda")]
    the_trace_of_a_multi_stream_program_on_cuda_is_well_formed_chrome_json,
];

use gpuworld::error::ProfileError;
use gpuworld::{
    Backend, Bindings, ComputeClient, CubeCount, KernelDef, SimConfig, StreamId, Trace, TraceClock,
    library,
};
use serde_json::Value;

/// Virtual nanoseconds per launch: 100 per cube, so each kernel's slice has its own length.
fn cost(kernel: &KernelDef, cubes: [u32; 3]) -> u64 {
    let per_cube = match kernel.id {
        id if id == library::FILL.id => 100,
        _ => 250,
    };
    per_cube * u64::from(cubes[0] * cubes[1] * cubes[2])
}

/// Two streams: stream 0 fills `a`; stream 1 adds `a` (written on stream 0: a wait) to `b`,
/// reads the sum; `a` is dropped after both used it, so the GC stage reclaims it.
fn multi_stream_program<B: Backend>(client: &ComputeClient<B>) -> Vec<f32> {
    let client = &client.with_stream(StreamId { value: 0 });
    let other = client.with_stream(StreamId { value: 1 });
    let n = 512u32;
    let a = client.empty(u64::from(n) * 4);
    let b = other.create_from_slice(bytemuck::cast_slice(&vec![1.0f32; n as usize]));
    let sum = other.empty(u64::from(n) * 4);
    client
        .launch(
            &library::FILL,
            CubeCount::new_1d(n.div_ceil(256)),
            Bindings::new().buffer(&a).scalar_f32(2.0),
        )
        .unwrap();
    other
        .launch(
            &library::ADD,
            CubeCount::new_1d(n.div_ceil(256)),
            Bindings::new().buffer(&a).buffer(&b).buffer(&sum),
        )
        .unwrap();
    drop(a);
    let values: Vec<f32> = other.read_one_as(&sum).unwrap();
    client.sync().unwrap();
    other.sync().unwrap();
    values
}

/// The trace's stream tracks, waits, reclamations and counters as text; host times are left
/// out (they are wall-clock), the stages of each tick are listed by name.
fn render_device_side(trace: &Trace) -> String {
    let mut text = format!("backend {} ({})\n", trace.backend, trace.clock.name());
    for (stream, name) in &trace.streams {
        text += &format!("track {stream}: {name}\n");
    }
    for s in &trace.slices {
        text += &format!(
            "d{} {} [{}] {}..{} ns, {} B\n",
            s.stream, s.name, s.category, s.start_ns, s.end_ns, s.bytes
        );
    }
    for w in &trace.waits {
        text += &format!(
            "wait d{} at {} ns -> d{} at {} ns\n",
            w.origin, w.origin_ns, w.consumer, w.consumer_ns
        );
    }
    for r in &trace.reclaims {
        text += &format!("t{} gc reclaimed {} handle(s)\n", r.tick, r.handles);
    }
    for (tick, _, c) in &trace.counters {
        text += &format!(
            "t{tick} in use {} B, reserved {} B, queued {}\n",
            c.bytes_in_use, c.bytes_reserved, c.tasks_queued
        );
    }
    for tick in &trace.ticks {
        let stages: Vec<&str> = tick.stages.iter().map(|s| s.stage.name()).collect();
        text += &format!("t{} stages: {}\n", tick.tick, stages.join(", "));
    }
    text
}

fn the_trace_of_a_multi_stream_program_on_the_sim() {
    let client = gpuworld::sim_client(SimConfig::default().with_kernel_cost(Some(cost)))
        .expect("the sim opens");
    client.start_trace();
    let values = multi_stream_program(&client);
    assert_eq!(values, vec![3.0; 512]);
    let trace = client.stop_trace().unwrap();
    assert_eq!(trace.clock, TraceClock::Virtual);
    check_chrome_structure(&trace);
    insta::assert_snapshot!(render_device_side(&trace));
}

fn stopping_a_trace_that_was_not_started_is_an_error() {
    let client = gpuworld::sim_client(SimConfig::default()).expect("the sim opens");
    assert_eq!(
        client.stop_trace().unwrap_err(),
        gpuworld::Error::Profile(ProfileError::TraceNotStarted)
    );
    client.start_trace();
    client.stop_trace().unwrap();
    assert_eq!(
        client.stop_trace().unwrap_err(),
        gpuworld::Error::Profile(ProfileError::TraceNotStarted)
    );
}

fn the_trace_of_a_multi_stream_program_on_the_cpu_is_well_formed_chrome_json() {
    let client = gpuworld::cpu_client(gpuworld::Driver::DeviceThread).unwrap();
    client.start_trace();
    assert_eq!(multi_stream_program(&client), vec![3.0; 512]);
    let trace = client.stop_trace().unwrap();
    assert_eq!(trace.clock, TraceClock::Device);
    assert!(!trace.waits.is_empty(), "stream 1 waited on stream 0");
    check_chrome_structure(&trace);
}

#[cfg(feature = "wgpu")]
fn the_trace_of_a_multi_stream_program_on_wgpu_is_well_formed_chrome_json()
-> Result<(), common::Skip> {
    let client = common::wgpu_client_or_skip()?;
    client.start_trace();
    assert_eq!(multi_stream_program(&client), vec![3.0; 512]);
    let trace = client.stop_trace().unwrap();
    check_chrome_structure(&trace);
    Ok(())
}

#[cfg(feature = "cuda")]
fn the_trace_of_a_multi_stream_program_on_cuda_is_well_formed_chrome_json()
-> Result<(), common::Skip> {
    let client = common::cuda_client_or_skip()?;
    client.start_trace();
    assert_eq!(multi_stream_program(&client), vec![3.0; 512]);
    let trace = client.stop_trace().unwrap();
    assert_eq!(trace.clock, TraceClock::Device);
    check_chrome_structure(&trace);
    Ok(())
}

/// Parses the trace's Chrome JSON and checks what a viewer relies on.
fn check_chrome_structure(trace: &Trace) {
    let json: Value = serde_json::from_str(&trace.to_chrome_json()).expect("valid JSON");
    let events = json["traceEvents"].as_array().expect("a traceEvents array");
    let named_threads: Vec<(u64, u64, String)> = events
        .iter()
        .filter(|e| e["ph"] == "M" && e["name"] == "thread_name")
        .map(|e| {
            (
                e["pid"].as_u64().unwrap(),
                e["tid"].as_u64().unwrap(),
                e["args"]["name"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    // A stream's track carries the stream's name (`s0`, `gc`).
    let stream_track = |stream: u32| {
        let (_, stream_name) = trace.streams.iter().find(|(s, _)| *s == stream)?;
        named_threads
            .iter()
            .find(|(pid, _, name)| *pid == 2 && name == stream_name)
            .map(|(_, tid, _)| *tid)
    };
    // Every kernel slice is on its stream's track, named for the kernel.
    let kernels: Vec<&Value> = events.iter().filter(|e| e["cat"] == "kernel").collect();
    assert_eq!(kernels.len(), 2, "fill and add: {kernels:?}");
    for (slice, e) in trace
        .slices
        .iter()
        .filter(|s| s.category == "kernel")
        .zip(&kernels)
    {
        assert_eq!(e["ph"], "X");
        assert_eq!(e["pid"], 2);
        assert_eq!(Some(e["tid"].as_u64().unwrap()), stream_track(slice.stream));
        assert_eq!(e["name"], slice.name);
        assert!(e["dur"].as_f64().unwrap() >= 0.0);
    }
    let kernel_names: Vec<&str> = kernels
        .iter()
        .map(|e| e["name"].as_str().unwrap())
        .collect();
    assert!(kernel_names.contains(&"fill") && kernel_names.contains(&"add"));
    // Every wait has both ends, on named stream tracks, with the same id.
    let flow = |ph: &str| -> Vec<&Value> { events.iter().filter(|e| e["ph"] == ph).collect() };
    let (starts, ends) = (flow("s"), flow("f"));
    assert_eq!(starts.len(), trace.waits.len());
    assert_eq!(ends.len(), trace.waits.len());
    for (s, f) in starts.iter().zip(&ends) {
        assert_eq!(s["id"], f["id"]);
        for end in [s, f] {
            let tid = end["tid"].as_u64().unwrap();
            assert!(
                named_threads
                    .iter()
                    .any(|(pid, t, _)| *pid == 2 && *t == tid)
            );
        }
    }
    // Every tick has its seven stages, inside it, on a named host thread.
    let ticks: Vec<&Value> = events.iter().filter(|e| e["cat"] == "tick").collect();
    assert!(!ticks.is_empty());
    let stages = events.iter().filter(|e| e["cat"] == "stage").count();
    assert_eq!(stages, 7 * ticks.len());
    for tick in &trace.ticks {
        for stage in &tick.stages {
            assert!(tick.start_ns <= stage.start_ns && stage.end_ns <= tick.end_ns);
        }
    }
    // Counters are never negative.
    let counters: Vec<&Value> = events.iter().filter(|e| e["ph"] == "C").collect();
    assert_eq!(counters.len(), 2 * trace.counters.len());
    for c in counters {
        for (_, value) in c["args"].as_object().unwrap() {
            assert!(value.as_f64().unwrap() >= 0.0, "{c}");
        }
    }
}
