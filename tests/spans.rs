//! The `tracing` spans a subscriber sees: the tick, each stage, launches, waits and GC. Alone
//! in its test binary: tracing caches per callsite whether anyone listens, and other
//! tests' threads registering callsites meanwhile would race with this test's subscriber.

use gpuworld::{Bindings, CubeCount, SimConfig, StreamId, library};

/// Two streams, the second using what the first wrote (a wait), a released handle (GC).
fn multi_stream_program() {
    let client = gpuworld::sim_client(SimConfig::default())
        .expect("the sim opens")
        .with_stream(StreamId { value: 0 });
    let other = client.with_stream(StreamId { value: 1 });
    let a = client.empty(1024);
    let sum = other.empty(1024);
    client
        .launch(
            &library::FILL,
            CubeCount::new_1d(1),
            Bindings::new().buffer(&a).scalar_f32(2.0),
        )
        .unwrap();
    other
        .launch(
            &library::ADD,
            CubeCount::new_1d(1),
            Bindings::new().buffer(&a).buffer(&a).buffer(&sum),
        )
        .unwrap();
    drop(a);
    assert_eq!(other.read_one_as::<f32>(&sum).unwrap(), vec![4.0; 256]);
    client.sync().unwrap();
    other.sync().unwrap();
}

/// A subscriber that keeps the name of every span created, for the test below.
struct SpanNames(std::sync::Mutex<Vec<&'static str>>);

impl tracing::Subscriber for SpanNames {
    fn enabled(&self, _: &tracing::Metadata<'_>) -> bool {
        true
    }
    fn new_span(&self, span: &tracing::span::Attributes<'_>) -> tracing::span::Id {
        let mut names = self.0.lock().unwrap();
        names.push(span.metadata().name());
        tracing::span::Id::from_u64(names.len() as u64)
    }
    fn record(&self, _: &tracing::span::Id, _: &tracing::span::Record<'_>) {}
    fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}
    fn event(&self, _: &tracing::Event<'_>) {}
    fn enter(&self, _: &tracing::span::Id) {}
    fn exit(&self, _: &tracing::span::Id) {}
}

#[test]
fn a_subscriber_sees_spans_of_the_tick_its_stages_launches_waits_and_gc() {
    let subscriber = std::sync::Arc::new(SpanNames(std::sync::Mutex::new(Vec::new())));
    tracing::subscriber::with_default(subscriber.clone(), || {
        multi_stream_program();
    });
    let names = subscriber.0.lock().unwrap();
    for expected in [
        "tick",
        "ingest",
        "alignment analysis",
        "flush/wait",
        "scheduling",
        "interleave",
        "launch",
        "wait",
        "gc.poll_device",
        "gc.reclaim_finished_gc",
        "tune ingestion",
    ] {
        assert!(
            names.contains(&expected),
            "no `{expected}` span in {names:?}"
        );
    }
}
