use gpuworld_macros::kernel;

#[kernel]
fn doubled(x: &mut [f32]) {
    let i = global_index();
    x[i] = x[i] * 2;
}

fn main() {}
