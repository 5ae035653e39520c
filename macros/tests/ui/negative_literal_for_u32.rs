use gpuworld_macros::kernel;

#[kernel]
fn minus_three(out: &mut [u32]) {
    let i = global_index();
    let d: u32 = -3;
    out[i] = d;
}

fn main() {}
