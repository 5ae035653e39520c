use gpuworld_macros::kernel;

#[kernel]
fn writes_its_input(x: &[f32]) {
    let i = global_index();
    x[i] = 0.0;
}

fn main() {}
