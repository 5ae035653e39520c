use gpuworld_macros::kernel;

#[kernel]
fn scatter(cell: &[u32], out: &mut [u32]) {
    let i = global_index();
    let mut k = i;
    if i > 10 {
        k = cell[i];
    }
    out[k] = i;
}

fn main() {}
