//! The client used from four threads at once on the CPU backend, each on its own stream, with
//! every value read back checked — with blocking calls ticking, and with the device thread.

mod common;

use common::{bytes_of, f32s};
use gpuworld::{Bindings, ComputeClient, CpuBackend, CubeCount, Driver, library};

const THREADS: usize = 4;
const ROUNDS: usize = 50;
const LEN: usize = 1000;

fn hammer(client: ComputeClient<CpuBackend>) {
    std::thread::scope(|scope| {
        for thread in 0..THREADS {
            let client = client.clone();
            scope.spawn(move || {
                for round in 0..ROUNDS {
                    let base = (thread * 1000 + round) as f32;
                    let a: Vec<f32> = (0..LEN).map(|i| base + i as f32).collect();
                    let b: Vec<f32> = (0..LEN).map(|i| i as f32 * 0.5).collect();
                    let ha = client.create(bytes_of(&a));
                    let hb = client.create(bytes_of(&b));
                    let sum = client.empty((LEN * 4) as u64);
                    let scaled = client.empty((LEN * 4) as u64);
                    let count = CubeCount::covering(LEN as u64, library::LINEAR_CUBE);
                    client
                        .launch(
                            &library::ADD,
                            count,
                            Bindings::new().buffer(&ha).buffer(&hb).buffer(&sum),
                        )
                        .unwrap();
                    client
                        .launch(
                            &library::SCALE,
                            count,
                            Bindings::new().buffer(&sum).buffer(&scaled).scalar_f32(2.0),
                        )
                        .unwrap();
                    let bytes = client.read(&[sum.binding(), scaled.binding()]).unwrap();
                    let (sum, scaled) = (f32s(&bytes[0]), f32s(&bytes[1]));
                    for i in 0..LEN {
                        let expected = a[i] + b[i];
                        assert_eq!(sum[i], expected, "thread {thread} round {round} index {i}");
                        assert_eq!(
                            scaled[i],
                            expected * 2.0,
                            "thread {thread} round {round} index {i}"
                        );
                    }
                }
                client.sync().unwrap();
            });
        }
    });
    // Every handle was dropped: once reclaimed, nothing is in use.
    client.sync().unwrap();
    client.tick();
    let usage = client.memory_usage();
    assert_eq!(usage.number_allocs, 0, "{usage:?}");
    assert_eq!(usage.bytes_in_use, 0, "{usage:?}");
    client.memory_cleanup();
    client.sync().unwrap();
    assert_eq!(client.memory_usage().bytes_reserved, 0);
}

#[test]
fn four_threads_with_blocking_calls_each_read_back_their_own_values() {
    hammer(gpuworld::cpu_client(Driver::Manual).unwrap());
}

#[test]
fn four_threads_with_the_device_thread_each_read_back_their_own_values() {
    hammer(gpuworld::cpu_client(Driver::DeviceThread).unwrap());
}
