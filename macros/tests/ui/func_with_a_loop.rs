#[gpuworld_macros::kernels]
mod sums {
    #[gpuworld_macros::func]
    fn sum_to(n: u32) -> u32 {
        let mut total = 0;
        for k in 0..n {
            total += k;
        }
        total
    }

    #[gpuworld_macros::kernel]
    fn sums(out: &mut [u32]) {
        let i = global_index();
        out[i] = sum_to(i);
    }
}

fn main() {}
