use gpuworld_macros::kernel;

#[kernel]
fn mixed(x: &mut [f32], n: u32) {
    let i = global_index();
    x[i] = x[i] + n;
}

fn main() {}
