use gpuworld_macros::kernel;

#[kernel]
fn accumulates_into_its_output(x: &[f32], #[write_only] out: &mut [f32]) {
    let i = global_index();
    out[i] += x[i];
}

fn main() {}
