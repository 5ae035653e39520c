//! The conformance cases: what every backend must do, written once, generic over the backend.

use crate::common::{Pending, bytes_of, f32s, scale_first_cube};
use gpuworld::error::BindingError;
use gpuworld::{Backend, Bindings, ComputeClient, CubeCount, library};

fn f32_handle<B: Backend>(client: &ComputeClient<B>, values: &[f32]) -> gpuworld::Handle {
    client.create(bytes_of(values))
}

fn read_f32<B: Backend>(client: &ComputeClient<B>, handle: &gpuworld::Handle) -> Vec<f32> {
    f32s(&client.read_one(handle).expect("read succeeds"))
}

pub fn fill_writes_every_element<B: Backend>(client: ComputeClient<B>) {
    let len = 1000;
    let out = client.empty(len * 4);
    client
        .launch(
            &library::FILL,
            CubeCount::covering(len, library::LINEAR_CUBE),
            Bindings::new().buffer(&out).scalar_f32(1.25),
        )
        .unwrap();
    assert_eq!(read_f32(&client, &out), vec![1.25; len as usize]);
}

pub fn copy_copies_every_element<B: Backend>(client: ComputeClient<B>) {
    let values: Vec<f32> = (0..777).map(|i| i as f32 * 1.5).collect();
    let src = f32_handle(&client, &values);
    let dst = client.empty(777 * 4);
    client
        .launch(
            &library::COPY,
            CubeCount::covering(777, library::LINEAR_CUBE),
            Bindings::new().buffer(&src).buffer(&dst),
        )
        .unwrap();
    assert_eq!(read_f32(&client, &dst), values);
}

pub fn add_adds_elementwise<B: Backend>(client: ComputeClient<B>) {
    let a: Vec<f32> = (0..600).map(|i| i as f32).collect();
    let b: Vec<f32> = (0..600).map(|i| 1000.0 - i as f32 * 2.0).collect();
    let (ha, hb, out) = (
        f32_handle(&client, &a),
        f32_handle(&client, &b),
        client.empty(2400),
    );
    client
        .launch(
            &library::ADD,
            CubeCount::covering(600, library::LINEAR_CUBE),
            Bindings::new().buffer(&ha).buffer(&hb).buffer(&out),
        )
        .unwrap();
    let expected: Vec<f32> = a.iter().zip(&b).map(|(x, y)| x + y).collect();
    assert_eq!(read_f32(&client, &out), expected);
}

pub fn scale_multiplies_by_the_scalar<B: Backend>(client: ComputeClient<B>) {
    let x: Vec<f32> = (0..300).map(|i| i as f32 - 150.0).collect();
    let (hx, out) = (f32_handle(&client, &x), client.empty(1200));
    client
        .launch(
            &library::SCALE,
            CubeCount::covering(300, library::LINEAR_CUBE),
            Bindings::new().buffer(&hx).buffer(&out).scalar_f32(-0.5),
        )
        .unwrap();
    let expected: Vec<f32> = x.iter().map(|v| v * -0.5).collect();
    assert_eq!(read_f32(&client, &out), expected);
}

fn stencil_on_host(u: &[f32], width: usize, height: usize, alpha: f32) -> Vec<f32> {
    let mut out = u.to_vec();
    for y in 1..height - 1 {
        for x in 1..width - 1 {
            let i = y * width + x;
            let sum = u[i - 1] + u[i + 1] + u[i - width] + u[i + width];
            out[i] = u[i] + alpha * (sum - 4.0 * u[i]);
        }
    }
    out
}

pub fn stencil_matches_the_host_reference<B: Backend>(client: ComputeClient<B>) {
    let (width, height, alpha) = (37usize, 21usize, 0.2f32);
    let mut field = vec![0.0f32; width * height];
    field[10 * width + 18] = 100.0;
    field[..width].fill(1.0);
    let mut ping = f32_handle(&client, &field);
    let mut pong = client.empty((width * height * 4) as u64);
    let count = CubeCount::new_2d(
        (width as u32).div_ceil(library::STENCIL_TILE),
        (height as u32).div_ceil(library::STENCIL_TILE),
    );
    for _ in 0..5 {
        client
            .launch(
                &library::STENCIL,
                count,
                Bindings::new()
                    .buffer(&ping)
                    .buffer(&pong)
                    .scalar_u32(width as u32)
                    .scalar_u32(height as u32)
                    .scalar_f32(alpha),
            )
            .unwrap();
        std::mem::swap(&mut ping, &mut pong);
        field = stencil_on_host(&field, width, height, alpha);
    }
    let device = read_f32(&client, &ping);
    for (i, (d, h)) in device.iter().zip(&field).enumerate() {
        assert!(
            (d - h).abs() <= 1e-5 * h.abs().max(1.0),
            "cell {i}: device {d} host {h}"
        );
    }
}

pub fn offsets_bind_only_the_sub_range<B: Backend>(client: ComputeClient<B>) {
    let handle = f32_handle(&client, &[0.0; 8]);
    let middle = handle.clone().offset_start(8).offset_end(12);
    assert_eq!(middle.size(), 12);
    client
        .launch(
            &library::FILL,
            CubeCount::new_1d(1),
            Bindings::new().buffer(&middle).scalar_f32(7.0),
        )
        .unwrap();
    assert_eq!(
        read_f32(&client, &handle),
        vec![0.0, 0.0, 7.0, 7.0, 7.0, 0.0, 0.0, 0.0]
    );
    assert_eq!(read_f32(&client, &middle), vec![7.0; 3]);
}

pub fn a_dynamic_cube_count_is_read_from_device_memory<B: Backend>(client: ComputeClient<B>) {
    // Zeroed: the contents of `empty` memory are undefined (reused memory keeps old bytes).
    let out = client.create(vec![0; 1024 * 4]);
    let count = client.create(bytemuck::cast_slice(&[2u32, 1, 1]).to_vec());
    client
        .launch(
            &library::FILL,
            CubeCount::Dynamic(count.binding()),
            Bindings::new().buffer(&out).scalar_f32(3.0),
        )
        .unwrap();
    let values = read_f32(&client, &out);
    assert!(values[..512].iter().all(|v| *v == 3.0));
    assert!(values[512..].iter().all(|v| *v == 0.0));
}

pub fn a_dynamic_cube_count_may_share_an_allocation_with_the_bindings<B: Backend>(
    client: ComputeClient<B>,
) {
    // One allocation: 256 floats, then the cube count. Found by the fuzzer: wgpu refused to use
    // a buffer as indirect arguments and as storage in one dispatch, and lost the whole batch.
    let mut bytes = bytes_of(&[2.0; 256]);
    bytes.extend_from_slice(bytemuck::cast_slice(&[1u32, 1, 1]));
    let shared = client.create(bytes);
    let values = shared.clone().offset_end(12);
    let count = shared.clone().offset_start(256 * 4);
    let out = client.create(vec![0; 256 * 4]);
    client
        .launch(
            &library::SCALE,
            CubeCount::Dynamic(count.binding()),
            Bindings::new().buffer(&values).buffer(&out).scalar_f32(3.0),
        )
        .unwrap();
    assert_eq!(read_f32(&client, &out), vec![6.0; 256]);
    client
        .launch(
            &library::FILL,
            CubeCount::Dynamic(count.binding()),
            Bindings::new().buffer(&values).scalar_f32(5.0),
        )
        .unwrap();
    assert_eq!(read_f32(&client, &values), vec![5.0; 256]);
    let count_after: Vec<u32> = client.read_one_as(&count).unwrap();
    assert_eq!(count_after, [1, 1, 1]);
}

pub fn a_read_of_many_bindings_returns_each_in_order<B: Backend>(client: ComputeClient<B>) {
    let handles: Vec<_> = (0..5)
        .map(|i| f32_handle(&client, &[i as f32; 3]))
        .collect();
    let bindings: Vec<_> = handles.iter().map(|h| h.binding()).collect();
    let bytes = client.read(&bindings).unwrap();
    for (i, b) in bytes.iter().enumerate() {
        assert_eq!(f32s(b), vec![i as f32; 3]);
    }
}

pub fn writes_land_in_order_with_launches<B: Backend>(client: ComputeClient<B>) {
    let handle = client.empty(16);
    client
        .write(&handle, &bytes_of(&[1.0, 2.0, 3.0, 4.0]))
        .unwrap();
    let doubled = client.empty(16);
    client
        .launch(
            &library::SCALE,
            CubeCount::new_1d(1),
            Bindings::new()
                .buffer(&handle)
                .buffer(&doubled)
                .scalar_f32(2.0),
        )
        .unwrap();
    client
        .write(&handle.clone().offset_start(4), &bytes_of(&[9.0]))
        .unwrap();
    assert_eq!(read_f32(&client, &doubled), vec![2.0, 4.0, 6.0, 8.0]);
    assert_eq!(read_f32(&client, &handle), vec![1.0, 9.0, 3.0, 4.0]);
}

/// A launch may bind one buffer both read-only and written: in place (`x += y` into `x`, and `x +
/// x` into `x`), and through views of one allocation, the read-only one beside the written one.
/// Element-wise kernels read each element before writing it, so every backend gives the same.
pub fn a_launch_may_read_and_write_one_buffer<B: Backend>(client: ComputeClient<B>) {
    // Halves of 512 bytes: aligned for binding in place wherever storage offsets must be.
    let len = 256;
    let start: Vec<f32> = (0..len).map(|i| i as f32).collect();
    let x = f32_handle(&client, &start);
    let ones = f32_handle(&client, &vec![1.0; len]);
    let cubes = CubeCount::covering(len as u64, library::LINEAR_CUBE);
    for _ in 0..10 {
        client
            .launch(
                &library::ADD,
                cubes,
                Bindings::new().buffer(&x).buffer(&ones).buffer(&x),
            )
            .unwrap();
    }
    client
        .launch(
            &library::ADD,
            cubes,
            Bindings::new().buffer(&x).buffer(&x).buffer(&x),
        )
        .unwrap();
    let expected: Vec<f32> = start.iter().map(|v| (v + 10.0) * 2.0).collect();
    assert_eq!(read_f32(&client, &x), expected);

    // Two halves of one allocation: the first half read, the second written.
    let halves = f32_handle(&client, &start);
    let half = (len / 2 * 4) as u64;
    let (first, second) = (
        halves.clone().offset_end(half),
        halves.clone().offset_start(half),
    );
    client
        .launch(
            &library::COPY,
            CubeCount::covering(len as u64 / 2, library::LINEAR_CUBE),
            Bindings::new().buffer(&first).buffer(&second),
        )
        .unwrap();
    let expected: Vec<f32> = (0..len).map(|i| (i % (len / 2)) as f32).collect();
    assert_eq!(read_f32(&client, &halves), expected);
}

pub fn a_chain_of_launches_runs_in_order<B: Backend>(client: ComputeClient<B>) {
    let mut a = f32_handle(&client, &[1.0; 64]);
    let mut b = client.empty(256);
    for _ in 0..20 {
        scale_first_cube(&client, &a, &b, 2.0);
        std::mem::swap(&mut a, &mut b);
    }
    assert_eq!(read_f32(&client, &a), vec![1_048_576.0; 64]);
}

pub fn unchecked_launches_compute_the_same<B: Backend>(client: ComputeClient<B>) {
    let x = f32_handle(&client, &[1.0, 2.0, 3.0, 4.0]);
    let out = client.empty(16);
    // SAFETY: scale touches exactly the 4 elements both bindings hold.
    unsafe {
        client
            .launch_unchecked(
                &library::SCALE,
                CubeCount::new_1d(1),
                Bindings::new().buffer(&x).buffer(&out).scalar_f32(4.0),
            )
            .unwrap();
    }
    assert_eq!(read_f32(&client, &out), vec![4.0, 8.0, 12.0, 16.0]);
}

pub fn an_empty_handle_reads_back_empty<B: Backend>(client: ComputeClient<B>) {
    let empty = client.create(Vec::new());
    assert_eq!(client.read_one(&empty).unwrap(), Vec::<u8>::new());
}

pub fn read_async_completes_as_the_runtime_ticks<B: Backend>(client: ComputeClient<B>) {
    let handle = f32_handle(&client, &[5.0; 4]);
    let mut read = Pending::new(client.read_async(&[handle.binding()]));
    let started = std::time::Instant::now();
    let bytes = loop {
        if let Some(result) = read.poll() {
            break result.unwrap();
        }
        assert!(started.elapsed().as_secs() < 10, "the read never completed");
        // A host loop: tick, and let a real device make progress before the next tick.
        client.with_runtime(|rt| {
            rt.tick();
            if rt.has_work_in_flight() {
                rt.wait_for_device(std::time::Duration::from_millis(1));
            }
        });
    };
    assert_eq!(f32s(&bytes[0]), vec![5.0; 4]);
}

pub fn sync_returns_after_all_work_ran<B: Backend>(client: ComputeClient<B>) {
    let out = client.empty(4096);
    for i in 0..10 {
        client
            .launch(
                &library::FILL,
                CubeCount::new_1d(4),
                Bindings::new().buffer(&out).scalar_f32(i as f32),
            )
            .unwrap();
    }
    client.sync().unwrap();
    assert!(client.with_runtime(|rt| rt.stats()).launches >= 10);
    assert_eq!(read_f32(&client, &out), vec![9.0; 1024]);
}

pub fn memory_is_reclaimed_and_returned_by_cleanup<B: Backend>(client: ComputeClient<B>) {
    {
        let handles: Vec<_> = (1..20).map(|i| client.empty(i * 100)).collect();
        for h in &handles {
            client
                .launch(
                    &library::FILL,
                    CubeCount::new_1d(1),
                    Bindings::new().buffer(h).scalar_f32(1.0),
                )
                .unwrap();
        }
        client.sync().unwrap();
        assert_eq!(client.memory_usage().number_allocs, 19);
    }
    client.sync().unwrap();
    for _ in 0..10 {
        client.tick();
    }
    let usage = client.memory_usage();
    assert_eq!(
        (usage.number_allocs, usage.bytes_in_use),
        (0, 0),
        "{usage:?}"
    );
    client.memory_cleanup();
    client.sync().unwrap();
    assert_eq!(client.memory_usage().bytes_reserved, 0);
}

pub fn a_mark_follows_the_work_before_it<B: Backend>(client: ComputeClient<B>) {
    let out = client.empty(4096);
    client
        .launch(
            &library::FILL,
            CubeCount::new_1d(4),
            Bindings::new().buffer(&out).scalar_f32(2.0),
        )
        .unwrap();
    let start = client.mark().unwrap();
    client
        .launch(
            &library::FILL,
            CubeCount::new_1d(4),
            Bindings::new().buffer(&out).scalar_f32(3.0),
        )
        .unwrap();
    let end = client.mark().unwrap();
    client.sync().unwrap();
    assert!(client.with_runtime(|rt| rt.backend_mut().event_done(end)));
    // Where the backend measures device time it is a duration; elsewhere there is none.
    if let Some(elapsed) = client.device_elapsed(start, end) {
        assert!(elapsed < std::time::Duration::from_secs(10), "{elapsed:?}");
    }
    assert_eq!(read_f32(&client, &out), vec![3.0; 1024]);
}

pub fn the_capabilities_say_what_the_optional_parts_answer<B: Backend>(client: ComputeClient<B>) {
    let capabilities = client.capabilities();
    let (backend_says, clock) = client.with_runtime(|rt| {
        let backend = rt.backend();
        (backend.capabilities(), backend.device_clock())
    });
    assert_eq!(
        capabilities, backend_says,
        "the client's copy is the backend's"
    );
    assert_eq!(
        capabilities.device_clock,
        clock.is_some(),
        "{capabilities:?}"
    );
    // A backend that replays graphs as one op makes one for any launches it is given.
    if capabilities.graph_replay {
        assert!(B::graph_replay(1, 0, std::sync::Arc::<[_]>::from(Vec::new())).is_some());
    }
    // Without replays as one op, there are none across streams either.
    assert!(capabilities.graph_replay || !capabilities.graph_replay_across_streams);
}

pub fn staging_buffers_upload_and_read_back<B: Backend>(client: ComputeClient<B>) {
    let sizes = [4096, 100, 0];
    let mut staging = client.reserve_staging(&sizes);
    let lens: Vec<usize> = staging.iter().map(|b| b.len()).collect();
    assert_eq!(lens, sizes);
    staging[0]
        .iter_mut()
        .enumerate()
        .for_each(|(i, b)| *b = (i % 251) as u8);
    staging[1].fill(9);
    let first_copy = staging[0].to_vec();
    let mut staging = staging.into_iter();
    let a = client.create(staging.next().unwrap());
    let b = client.empty(256);
    let middle = b.clone().offset_start(100).offset_end(56);
    client
        .write_bytes(&middle, staging.next().unwrap())
        .unwrap();
    let empty = client.create(staging.next().unwrap());
    let pinned = client.create_from_slice_pinned(&first_copy[..1000]);

    let back = client
        .read(&[
            a.binding(),
            middle.binding(),
            empty.binding(),
            pinned.binding(),
        ])
        .unwrap();
    assert_eq!(back[0], first_copy);
    assert_eq!(back[1], vec![9u8; 100]);
    assert!(back[2].is_empty());
    assert_eq!(back[3], first_copy[..1000].to_vec());
    drop(back);

    // Buffers come back to the pool and are handed out again, for as many rounds as asked.
    for round in 0..3u8 {
        let mut again = client.reserve_staging(&[4096]);
        again[0].fill(round);
        client.write_bytes(&a, again.pop().unwrap()).unwrap();
        assert_eq!(client.read_one(&a).unwrap(), vec![round; 4096]);
    }
}

pub fn a_staged_write_too_large_is_refused_and_nothing_is_lost<B: Backend>(
    client: ComputeClient<B>,
) {
    let handle = client.create_from_slice_pinned(&[5u8; 64]);
    let mut staging = client.reserve_staging(&[128]);
    staging[0].fill(1);
    let error = client
        .write_bytes(&handle, staging.pop().unwrap())
        .unwrap_err();
    assert!(
        matches!(
            error,
            gpuworld::Error::Binding(BindingError::WriteTooLarge {
                len: 128,
                capacity: 64,
                ..
            })
        ),
        "{error}"
    );
    assert_eq!(client.read_one(&handle).unwrap(), vec![5u8; 64]);
    assert!(client.reserve_staging(&[]).is_empty());
}

pub fn reads_outlive_the_client<B: Backend>(client: ComputeClient<B>) {
    let values: Vec<u8> = (0..=255).cycle().take(1 << 16).collect();
    let handle = client.create_from_slice_pinned(&values);
    let held = client.reserve_staging(&[1 << 12]);
    let back = client.read(&[handle.binding()]).unwrap();
    drop(handle);
    drop(client);
    // The runtime and its backend are gone; bytes it lent stay valid until dropped.
    assert_eq!(back[0], values);
    assert_eq!(held[0].len(), 1 << 12);
}

/// Bytes whose every position differs from its neighbours', so a misplaced chunk shows.
fn pattern(len: usize, seed: usize) -> Vec<u8> {
    (0..len)
        .map(|i| ((i * 31 + seed) ^ (i >> 13)) as u8)
        .collect()
}

pub fn large_uploads_arrive_whole_at_odd_sizes_and_offsets<B: Backend>(client: ComputeClient<B>) {
    // Not a multiple of 4 nor of any power-of-two chunk, and several chunks long.
    let len = (17 << 20) + 3;
    let data = pattern(len, 1);
    let created = client.create_from_slice(&data);
    assert!(
        client.read_one(&created).unwrap() == data,
        "create_from_slice"
    );

    // A write into a view that starts and ends off every word boundary leaves its neighbours.
    let (before, after) = (5, 6);
    let around = client.create_from_slice(&vec![0xee; before + len + after]);
    let view = around
        .clone()
        .offset_start(before as u64)
        .offset_end(after as u64);
    let update = pattern(len, 2);
    client.write(&view, &update).unwrap();
    assert!(
        client.read_one(&view).unwrap() == update,
        "write into a view"
    );
    let whole = client.read_one(&around).unwrap();
    assert_eq!(&whole[..before], &[0xee; 5]);
    assert_eq!(&whole[before + len..], &[0xee; 6]);

    // Writes keep their order: a small write after a large one lands on top of it, and a large
    // one after a small one covers it.
    client.write(&view, &[1, 2, 3]).unwrap();
    let back = client.read_one(&view).unwrap();
    assert_eq!(&back[..4], &[1, 2, 3, update[3]]);
    assert!(back[3..] == update[3..]);
    client.write(&view, &data).unwrap();
    assert!(
        client.read_one(&view).unwrap() == data,
        "a large write after a small one"
    );

    // Right at and just above the size from which uploads are staged.
    for len in [(1 << 20) - 1, 1 << 20, (1 << 20) + 1] {
        let data = pattern(len, len);
        assert!(client.read_one(&client.create_from_slice(&data)).unwrap() == data);
    }
}

/// Every kernel of `library::ALL` has a source on the backend, and a small launch of it runs:
/// zeroed buffers of 256 elements, `u32` scalars of 4 (sizes, counts) and `f32` scalars of 1.
pub fn every_library_kernel_has_a_source_and_launches<B: Backend>(client: ComputeClient<B>) {
    use gpuworld::kernel::Elem;
    for kernel in library::ALL {
        assert!(
            B::source_for(kernel).is_some(),
            "library kernel `{}` has no source for the {} backend",
            kernel.id,
            B::NAME
        );
        let buffers: Vec<gpuworld::Handle> = kernel
            .signature
            .buffers
            .iter()
            .map(|param| client.create(vec![0; 256 * param.elem.size() as usize]))
            .collect();
        let mut bindings = buffers.iter().fold(Bindings::new(), Bindings::buffer);
        for scalar in kernel.signature.scalars {
            bindings = match scalar.elem {
                Elem::F32 => bindings.scalar_f32(1.0),
                Elem::U32 => bindings.scalar_u32(4),
                Elem::I32 => bindings.scalar_i32(-4),
            };
        }
        client
            .launch(kernel, CubeCount::new_1d(1), bindings)
            .unwrap_or_else(|error| panic!("launching `{}`: {error}", kernel.id));
        client
            .sync()
            .unwrap_or_else(|error| panic!("running `{}`: {error}", kernel.id));
    }
}

/// The reduce variants and matmul tilings of `library` give the bits of their order of additions
/// computed on the host: each unit's share summed in order, then a cube's 256 values added as a
/// tree of halvings (reduce); each output's products `acc + a * b` added in `k` order, two
/// roundings each (matmul). The exception: `MATMUL_TILED16`'s WGSL is hand-written, and a
/// driver may fuse its products into multiply-adds, so on wgpu it is checked within rounding.
pub fn the_reduce_variants_and_matmul_give_the_hosts_bits<B: Backend>(client: ComputeClient<B>) {
    use library::{matmul as mm, reduce as rd};
    /// A cube's 256 values added as the kernels' tree: strides 128, 64, .., 1.
    fn tree(mut values: Vec<f32>) -> f32 {
        let mut stride = 128;
        while stride > 0 {
            for u in 0..stride {
                values[u] += values[u + stride];
            }
            stride /= 2;
        }
        values[0]
    }
    // Normal values of mixed sign and size (no subnormal sums), 5000 elements: not a multiple of
    // a cube's share.
    let n = 5000usize;
    let values: Vec<f32> = (0..n)
        .map(|i| ((i * 7919) % 1013) as f32 * 0.37 - 180.0 + 1.0 / (1.0 + i as f32))
        .collect();
    let input = f32_handle(&client, &values);
    let at = |i: usize| if i < n { values[i] } else { 0.0 };
    let reduce = |kernel, cubes: usize, expected: Vec<f32>| {
        let output = client.empty(4 * cubes as u64);
        let bindings = Bindings::new()
            .buffer(&input)
            .buffer(&output)
            .scalar_u32(n as u32);
        client
            .launch(kernel, CubeCount::new_1d(cubes as u32), bindings)
            .expect("the reduce launches");
        let got: Vec<u32> = read_f32(&client, &output)
            .iter()
            .map(|v| v.to_bits())
            .collect();
        let expected: Vec<u32> = expected.iter().map(|v| v.to_bits()).collect();
        assert_eq!(got, expected, "{} on {}", kernel.id, B::NAME);
    };
    let cubes = n.div_ceil(256);
    reduce(
        &rd::REDUCE_SUM_TREE,
        cubes,
        (0..cubes)
            .map(|c| tree((0..256).map(|u| at(c * 256 + u)).collect()))
            .collect(),
    );
    let cubes = n.div_ceil(1024);
    reduce(
        &rd::REDUCE_SUM_TREE4,
        cubes,
        (0..cubes)
            .map(|c| {
                let unit =
                    |u: usize| (0..4).fold(0.0f32, |acc, j| acc + at(c * 1024 + j * 256 + u));
                tree((0..256).map(unit).collect())
            })
            .collect(),
    );
    let cubes = 3;
    reduce(
        &rd::REDUCE_SUM_STRIDED,
        cubes,
        (0..cubes)
            .map(|c| {
                let unit = |u: usize| {
                    (c * 256 + u..n)
                        .step_by(cubes * 256)
                        .fold(0.0f32, |acc, i| acc + values[i])
                };
                tree((0..256).map(unit).collect())
            })
            .collect(),
    );
    // 37×45 times 45×29: no side a multiple of a tile.
    let (m, k, nn) = (37usize, 45usize, 29usize);
    let a: Vec<f32> = (0..m * k)
        .map(|i| ((i * 31) % 97) as f32 * 0.125 - 6.0)
        .collect();
    let b: Vec<f32> = (0..k * nn)
        .map(|i| ((i * 17) % 89) as f32 * 0.3 - 13.0)
        .collect();
    let expected: Vec<u32> = (0..m * nn)
        .map(|i| {
            let (row, col) = (i / nn, i % nn);
            (0..k)
                .fold(0.0f32, |acc, kk| acc + a[row * k + kk] * b[kk * nn + col])
                .to_bits()
        })
        .collect();
    let (a, b) = (f32_handle(&client, &a), f32_handle(&client, &b));
    for (kernel, tile) in [
        (&mm::MATMUL_NAIVE, mm::MATMUL_CUBE),
        (&mm::MATMUL_4X4, mm::MATMUL_4X4_TILE),
        (&mm::MATMUL_TILED16, mm::MATMUL_CUBE),
    ] {
        let c = client.empty(4 * (m * nn) as u64);
        let bindings = Bindings::new()
            .buffer(&a)
            .buffer(&b)
            .buffer(&c)
            .scalar_u32(m as u32)
            .scalar_u32(nn as u32)
            .scalar_u32(k as u32);
        client
            .launch(
                kernel,
                CubeCount::covering_2d(nn as u32, m as u32, tile),
                bindings,
            )
            .expect("the matmul launches");
        let got = read_f32(&client, &c);
        if std::ptr::eq(kernel, &mm::MATMUL_TILED16) && B::NAME == "wgpu" {
            for (i, (got, expected)) in got.iter().zip(&expected).enumerate() {
                let expected = f32::from_bits(*expected);
                let tolerance = 1e-5 * (1.0 + expected.abs()) * k as f32;
                assert!(
                    (got - expected).abs() <= tolerance,
                    "{} on {}: element {i} is {got}, the host's {expected}",
                    kernel.id,
                    B::NAME
                );
            }
        } else {
            let got: Vec<u32> = got.iter().map(|v| v.to_bits()).collect();
            assert_eq!(got, expected, "{} on {}", kernel.id, B::NAME);
        }
    }
}
