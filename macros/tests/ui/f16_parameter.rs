use gpuworld_macros::kernel;

#[kernel]
fn halves(x: &[f16], out: &mut [f32]) {
    let i = global_index();
    out[i] = 0.0;
}

fn main() {}
