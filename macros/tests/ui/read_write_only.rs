use gpuworld_macros::kernel;

#[kernel]
fn reads_its_output(x: &[f32], #[write_only] out: &mut [f32]) {
    let i = global_index();
    out[i] = out[i] + x[i];
}

fn main() {}
