use gpuworld_macros::kernel;

#[kernel]
fn histogram(cell: &[u32], counts: &mut [u32]) {
    let i = global_index();
    if i < cell.len() {
        let c = cell[i];
        counts[c] += 1;
    }
}

fn main() {}
