use gpuworld_macros::kernel;

#[kernel]
fn reserved(float: &mut [f32]) {
    let i = global_index();
    float[i] = 1.0;
}

fn main() {}
