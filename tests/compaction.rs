//! Compaction through the client (issue 25): a request that finds no free range while the pools
//! are at their budget moves live allocations within a compacting pool's pages instead of asking
//! the device for more. Every byte written stays where its handle says, whichever stream wrote
//! it and whether its work still runs; a handle a captured graph holds never moves.

mod common;

use gpuworld::{
    Backend, Bindings, ComputeClient, CpuBackend, CubeCount, Driver, MemoryConfig, PoolConfig,
    PoolKind, RuntimeConfig, StreamId, library,
};

const MIB: u64 = 1 << 20;

/// One compacting pool of 8 MiB pages for every request.
fn compacting() -> RuntimeConfig {
    RuntimeConfig::default().with_memory(MemoryConfig::with_pools(vec![PoolConfig::new(
        PoolKind::Compacting {
            page_size: 8 * MIB,
            follow_peak: false,
        },
        u64::MAX,
    )]))
}

fn cpu() -> ComputeClient<CpuBackend> {
    ComputeClient::new(CpuBackend::new(), compacting(), Driver::Manual)
}

/// 1 MiB of `value` as `u32` words.
fn words(value: u32) -> Vec<u8> {
    bytemuck::cast_slice(&vec![value; (MIB / 4) as usize]).to_vec()
}

fn fill<B: Backend>(client: &ComputeClient<B>, handle: &gpuworld::Handle, value: f32) {
    client
        .launch(
            &library::FILL,
            CubeCount::new_1d((handle.size() / 4).div_ceil(256) as u32),
            Bindings::new().buffer(handle).scalar_f32(value),
        )
        .unwrap();
}

fn moved<B: Backend>(client: &ComputeClient<B>) -> u64 {
    client.memory_report().iter().map(|r| r.blocks_moved).sum()
}

/// Eight 1 MiB buffers fill one 8 MiB page; three are dropped, leaving three 1 MiB holes. A
/// 2 MiB request then fits no hole, and the pools are at their budget: one live buffer moves
/// into a hole and the request takes its place. Stream 2 wrote one buffer at creation and fills
/// four, still queued when the request arrives on stream 1: the copy waits for them.
fn live_bytes_survive_a_compaction<B: Backend>(client: ComputeClient<B>) {
    let other = client.with_stream(StreamId { value: 2 });
    let mut handles: Vec<Option<gpuworld::Handle>> = (0..8u32)
        .map(|i| {
            let on = if i == 2 { &other } else { &client };
            Some(on.create(words(i + 1)))
        })
        .collect();
    client.sync().unwrap();
    other.sync().unwrap();
    assert_eq!(client.memory_usage().bytes_reserved, 8 * MIB);
    for i in [1, 3, 5] {
        handles[i] = None;
    }
    client.sync().unwrap();
    other.sync().unwrap();
    // Stream 2 fills the even buffers; nobody waits for it before the request, so a copy of
    // one must wait for stream 2's fill.
    for i in [0, 2, 4, 6] {
        fill(&other, handles[i].as_ref().unwrap(), i as f32 + 10.0);
    }
    let big = client.create(vec![7u8; (2 * MIB) as usize]);
    for (i, handle) in handles.iter().enumerate() {
        let Some(handle) = handle else { continue };
        let expected = match i {
            7 => words(8),
            _ => bytemuck::cast_slice(&vec![i as f32 + 10.0; (MIB / 4) as usize]).to_vec(),
        };
        let bytes = client.read_one(handle).unwrap();
        assert!(
            bytes == expected,
            "buffer {i} changed\n{}",
            client.snapshot()
        );
    }
    assert_eq!(
        client.read_one(&big).unwrap(),
        vec![7u8; (2 * MIB) as usize]
    );
    assert!(moved(&client) >= 1, "{:?}", client.memory_report());
    assert_eq!(
        client.memory_usage().bytes_reserved,
        8 * MIB,
        "no page was added\n{}",
        client.snapshot()
    );
}

#[test]
fn live_bytes_survive_a_compaction_on_the_cpu_backend() {
    live_bytes_survive_a_compaction(cpu());
}

#[cfg(feature = "wgpu")]
#[test]
fn live_bytes_survive_a_compaction_on_wgpu() {
    let backend = match common::wgpu_backend_or_skip() {
        Ok(backend) => backend,
        Err(skip) => {
            eprintln!("SKIPPED: {}", skip.0);
            return;
        }
    };
    live_bytes_survive_a_compaction(ComputeClient::new(backend, compacting(), Driver::Manual));
}

/// A buffer a captured graph holds keeps its place: the graph's replays use it there. With every
/// other buffer of the page held too, the request gets a new page instead of a move.
#[test]
fn a_buffer_a_graph_holds_never_moves() {
    let client = cpu();
    let mut handles: Vec<Option<gpuworld::Handle>> = (0..8u32)
        .map(|i| Some(client.create(words(i + 1))))
        .collect();
    let held: Vec<&gpuworld::Handle> = [0, 2, 4, 6, 7]
        .iter()
        .map(|&i| handles[i].as_ref().unwrap())
        .collect();
    let graph = client
        .capture(|capture| {
            for handle in &held {
                fill(capture, handle, 3.0);
            }
            Ok(())
        })
        .unwrap();
    drop(held);
    client.sync().unwrap();
    for i in [1, 3, 5] {
        handles[i] = None;
    }
    client.sync().unwrap();
    let big = client.create(vec![7u8; (2 * MIB) as usize]);
    client.sync().unwrap();
    assert_eq!(moved(&client), 0, "{:?}", client.memory_report());
    assert_eq!(client.memory_usage().bytes_reserved, 16 * MIB, "a new page");
    graph.replay().unwrap();
    for i in [0, 2, 4, 6, 7] {
        let bytes = client.read_one(handles[i].as_ref().unwrap()).unwrap();
        assert_eq!(common::f32s(&bytes), vec![3.0; (MIB / 4) as usize]);
    }
    assert_eq!(
        client.read_one(&big).unwrap(),
        vec![7u8; (2 * MIB) as usize]
    );
}

/// A client that never waits: every buffer is written, then dropped, and the next one has
/// another size. Memory work wrote is parked for its stream until an event proves the device
/// done, and no event comes while nothing ticks the device forward (the sim's latency is longer
/// than the loop): without compaction each request finds only parked memory of the wrong size
/// and the pool grows by a page each time. The stream may reuse its own parked memory at once,
/// so a compaction takes it into the request's place: one page serves the whole loop.
#[test]
fn a_stream_that_never_waits_reuses_its_own_released_memory_in_place() {
    let sim = gpuworld::SimBackend::new(gpuworld::SimConfig::default().with_latency_ticks(10_000));
    let client = ComputeClient::new(sim, compacting(), Driver::Manual);
    let mut largest = 0;
    for round in 0..120u64 {
        // 1, 2, ..., 6 MiB, again and again: each request is larger than the parked memory before
        // it, until the cycle starts over.
        let size = (round % 6 + 1) * MIB;
        largest = largest.max(size);
        let handle = client.create(vec![1u8; size as usize]);
        client.tick();
        drop(handle);
    }
    let report = client.memory_report();
    let peak_pages: usize = report.iter().map(|r| r.peak_pages).sum();
    assert_eq!(
        peak_pages, 1,
        "one 8 MiB page serves buffers of at most {largest} bytes, one live at a time: {report:?}"
    );
    let last = client.create(vec![9u8; MIB as usize]);
    assert_eq!(client.read_one(&last).unwrap(), vec![9u8; MIB as usize]);
}

/// A request larger than every page, with the pools at their budget: where the device keeps a
/// buffer that submitted work uses (wgpu), the page holding the fewest live bytes is emptied into
/// the other's holes and goes back to the device once the copies reading it ran; the request
/// waits a tick for it instead of growing past it. Elsewhere (cpu) nothing is emptied. Every byte
/// written survives either way.
fn a_page_emptied_for_a_large_request_goes_back_after_its_copies<B: Backend>(
    client: ComputeClient<B>,
    evacuates: bool,
) {
    let mut handles: Vec<Option<gpuworld::Handle>> = (0..9u32)
        .map(|i| Some(client.create(words(i + 1))))
        .collect();
    client.sync().unwrap();
    assert_eq!(
        client.memory_usage().bytes_reserved,
        16 * MIB,
        "a full page and one more"
    );
    for i in [1, 3, 5] {
        handles[i] = None;
    }
    client.sync().unwrap();
    let big = client.create(vec![5u8; (12 * MIB) as usize]);
    for (i, handle) in handles.iter().enumerate() {
        let Some(handle) = handle else { continue };
        let bytes = client.read_one(handle).unwrap();
        assert!(
            bytes == words(i as u32 + 1),
            "buffer {i} changed\n{}",
            client.snapshot()
        );
    }
    assert_eq!(
        client.read_one(&big).unwrap(),
        vec![5u8; (12 * MIB) as usize]
    );
    client.sync().unwrap();
    let (reserved, moved) = (client.memory_usage().bytes_reserved, moved(&client));
    match evacuates {
        true => assert_eq!(
            (reserved, moved),
            (20 * MIB, 1),
            "the second page went back\n{}",
            client.snapshot()
        ),
        false => assert_eq!((reserved, moved), (28 * MIB, 0), "{}", client.snapshot()),
    }
}

#[test]
fn a_large_request_on_the_cpu_backend_grows_without_emptying_pages() {
    a_page_emptied_for_a_large_request_goes_back_after_its_copies(cpu(), false);
}

#[cfg(feature = "wgpu")]
#[test]
fn a_page_emptied_for_a_large_request_on_wgpu_goes_back_after_its_copies() {
    let backend = match common::wgpu_backend_or_skip() {
        Ok(backend) => backend,
        Err(skip) => {
            eprintln!("SKIPPED: {}", skip.0);
            return;
        }
    };
    a_page_emptied_for_a_large_request_goes_back_after_its_copies(
        ComputeClient::new(backend, compacting(), Driver::Manual),
        true,
    );
}
