use gpuworld_macros::kernel;

#[kernel]
fn shifts_by_a_signed_amount(x: &mut [i32], amount: i32) {
    let i = global_index();
    x[i] = x[i] << amount;
}

fn main() {}
