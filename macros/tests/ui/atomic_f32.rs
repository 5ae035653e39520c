use gpuworld_macros::kernel;

#[kernel]
fn sums_floats(x: &[f32], #[atomic] total: &mut [f32]) {
    let i = global_index();
    total[0] = x[i];
}

fn main() {}
