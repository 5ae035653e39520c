use gpuworld_macros::kernel;

#[kernel]
fn counts_without_declaring(cell: &[u32], counts: &mut [u32]) {
    let i = global_index();
    counts.atomic_add(cell[i], 1);
}

fn main() {}
