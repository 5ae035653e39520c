use gpuworld_macros::kernel;

#[kernel]
fn rounded(x: &mut [f32]) {
    let i = global_index();
    x[i] = x[i].round();
}

fn main() {}
