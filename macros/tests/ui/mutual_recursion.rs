#[gpuworld_macros::kernels]
mod parity {
    #[gpuworld_macros::func]
    fn even(n: u32) -> bool {
        if n == 0 { true } else { odd(n - 1) }
    }

    #[gpuworld_macros::func]
    fn odd(n: u32) -> bool {
        if n == 0 { false } else { even(n - 1) }
    }

    #[gpuworld_macros::kernel]
    fn parities(out: &mut [u32]) {
        let i = global_index();
        out[i] = even(i) as u32;
    }
}

fn main() {}
