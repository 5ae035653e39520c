use gpuworld_macros::kernel;

#[kernel]
fn clears_a_counter(#[atomic] counts: &mut [u32]) {
    let i = global_index();
    counts[i] = 0;
}

fn main() {}
