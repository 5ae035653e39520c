//! Host paths through the client's staging memory: a small upload stays one write, a large one
//! becomes one write per chunk, in order, covering exactly its range, without the runtime lock;
//! reads hand back staging memory that the next read reuses.

use gpuworld::{ComputeClient, Driver, SimBackend, SimCall, SimConfig, StreamId};
use std::time::Duration;

fn sim() -> ComputeClient<SimBackend> {
    gpuworld::sim_client(SimConfig::default())
        .expect("the sim opens")
        .with_stream(StreamId { value: 0 })
}

/// `(bytes, device offset)` of each write the sim received since the last call, in order.
fn writes(client: &ComputeClient<SimBackend>) -> Vec<(u64, u64)> {
    client.tick();
    let log = client.with_runtime(|rt| rt.backend_mut().take_log());
    log.into_iter()
        .filter_map(|(_, call)| match call {
            // "write {len}B to {storage}+{offset}"
            SimCall::Enqueue { what, .. } => {
                let (len, place) = what.strip_prefix("write ")?.split_once("B to ")?;
                let (_, offset) = place.rsplit_once('+')?;
                Some((len.parse().ok()?, offset.parse().ok()?))
            }
            _ => None,
        })
        .collect()
}

/// Checks that `writes` tile `len` bytes from `start` in order, in equal chunks but the last.
fn assert_chunks_tile(writes: &[(u64, u64)], start: u64, len: u64) {
    assert!(
        writes.len() > 1,
        "a large upload is several writes: {writes:?}"
    );
    let mut next = start;
    for &(size, offset) in writes {
        assert_eq!(offset, next, "chunks follow each other: {writes:?}");
        next += size;
    }
    assert_eq!(
        next,
        start + len,
        "chunks cover the data exactly: {writes:?}"
    );
    let chunk = writes[0].0;
    assert!(
        writes[..writes.len() - 1]
            .iter()
            .all(|&(size, _)| size == chunk)
    );
}

#[test]
fn a_small_upload_is_one_write_and_a_large_one_a_write_per_chunk() {
    let client = sim();
    let small = client.create_from_slice(&[7; 1000]);
    let base = match writes(&client)[..] {
        [(1000, offset)] => offset,
        ref other => panic!("one write of the whole slice: {other:?}"),
    };
    client.write(&small, &[1; 999]).unwrap();
    assert_eq!(writes(&client), vec![(999, base)]);

    let len = (20 << 20) + 3;
    let large = client.create_from_slice(&vec![3; len]);
    let created = writes(&client);
    assert_chunks_tile(&created, created[0].1, len as u64);

    let view = large.clone().offset_start(5).offset_end(6);
    client.write(&view, &vec![4; len - 11]).unwrap();
    assert_chunks_tile(&writes(&client), created[0].1 + 5, len as u64 - 11);
    let back = client.read_one(&large).unwrap();
    assert_eq!(
        (back[4], back[5], back[len - 7], back[len - 6]),
        (3, 4, 4, 3)
    );
}

#[test]
fn a_typed_upload_holds_the_bytes_of_its_elements_and_reads_back_as_them() {
    #[derive(Clone, Copy, Debug, PartialEq, bytemuck::Pod, bytemuck::Zeroable)]
    #[repr(C)]
    struct Particle {
        position: [f32; 2],
        id: u32,
    }
    let client = sim();
    let floats: Vec<f32> = (0..1000).map(|i| i as f32 * 0.25).collect();
    let particles = [
        Particle {
            position: [1.0, -2.0],
            id: 7,
        },
        Particle {
            position: [0.5, 3.0],
            id: 9,
        },
    ];
    let (f, p) = (
        client.create_from_pod(&floats),
        client.create_from_pod(&particles),
    );
    assert_eq!((f.size(), p.size()), (4000, 24));
    assert_eq!(client.read_one_as::<f32>(&f).unwrap(), floats);
    assert_eq!(client.read_one_as::<Particle>(&p).unwrap(), particles);
    // A large one goes through staging in chunks, as bytes do.
    let large: Vec<u32> = (0..(4 << 20) / 4).collect();
    let handle = client.create_from_pod(&large);
    assert_eq!(client.read_one_as::<u32>(&handle).unwrap(), large);
}

#[test]
fn a_large_upload_takes_no_runtime_lock() {
    let client = gpuworld::cpu_client(Driver::Manual).unwrap();
    let uploader = client.clone();
    let (done, finished) = std::sync::mpsc::channel();
    let uploaded = client.with_runtime(|_| {
        // While this thread holds the runtime lock, another one uploads 9 MiB.
        std::thread::spawn(move || {
            let data = vec![3u8; 9 << 20];
            let handle = uploader.create_from_slice(&data);
            let written = uploader.write(&handle, &data);
            let staging = uploader.reserve_staging(&[1 << 20]);
            let _ = done.send((handle, written, staging));
        });
        finished.recv_timeout(Duration::from_secs(60))
    });
    let (handle, written, _staging) = uploaded.expect("the upload did not wait for the lock");
    written.unwrap();
    assert!(client.read_one(&handle).unwrap() == vec![3u8; 9 << 20]);
}

#[test]
fn a_read_loop_reuses_one_staging_buffer() {
    let client = gpuworld::cpu_client(Driver::DeviceThread).unwrap();
    let data: Vec<u8> = (0..(3 << 20) + 1).map(|i| (i % 251) as u8).collect();
    let handle = client.create_from_slice(&data);
    let first = client.read_one(&handle).unwrap();
    assert!(first == data);
    let address = first.as_ptr();
    drop(first);
    for _ in 0..3 {
        let again = client.read_one(&handle).unwrap();
        assert_eq!(
            again.as_ptr(),
            address,
            "the buffer the last read gave back"
        );
        assert!(again == data);
    }
}
