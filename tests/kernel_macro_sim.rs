//! A user's `#[gpuworld::kernel]`, tick by tick on the sim: the kernel that the deterministic
//! tests step through is the same source the GPU backends compile.

use gpuworld::testing::TestRuntime;
use gpuworld::{Bindings, CubeCount};

/// `out[i] = x[i] * x[i] + 1`.
#[gpuworld::kernel(cube_dim = 4)]
fn square_plus_one(x: &[f32], out: &mut [f32]) {
    let i = global_index();
    if i < out.len() {
        out[i] = x[i] * x[i] + 1.0;
    }
}

#[test]
fn a_macro_kernel_steps_tick_by_tick_on_the_sim() {
    let sim = TestRuntime::new();
    let (x, out) = (sim.create_from_pod(&[1.0f32, 2.0, 3.0]), sim.empty(12));
    let bindings = Bindings::new().buffer(&x).buffer(&out);
    sim.launch(&square_plus_one, CubeCount::new_1d(1), bindings)
        .unwrap();
    sim.step();
    insta::assert_snapshot!(sim.tick_snapshot().to_string());
    assert_eq!(sim.read_one_as::<f32>(&out).unwrap(), [2.0, 5.0, 10.0]);
}
