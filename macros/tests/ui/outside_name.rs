use gpuworld_macros::kernel;

const SCALE: f32 = 3.0;

#[kernel]
fn scaled(x: &mut [f32]) {
    let i = global_index();
    x[i] = x[i] * SCALE;
}

fn main() {}
