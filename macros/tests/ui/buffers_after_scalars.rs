use gpuworld_macros::kernel;

#[kernel]
fn out_of_order(scale: f32, x: &mut [f32]) {
    let i = global_index();
    x[i] = scale;
}

fn main() {}
