#[gpuworld_macros::kernels]
mod factorials {
    #[gpuworld_macros::func]
    fn factorial(n: u32) -> u32 {
        if n == 0 { 1 } else { n * factorial(n - 1) }
    }

    #[gpuworld_macros::kernel]
    fn factorials(out: &mut [u32]) {
        let i = global_index();
        out[i] = factorial(i);
    }
}

fn main() {}
