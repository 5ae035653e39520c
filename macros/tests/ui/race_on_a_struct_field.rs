#[gpuworld_macros::kernels]
mod cells {
    #[repr(C)]
    pub struct Cell {
        pub count: u32,
        pub mass: f32,
    }

    #[gpuworld_macros::kernel]
    fn deposit(cell_of: &[u32], cells: &mut [Cell]) {
        let i = global_index();
        cells[cell_of[i]].count += 1;
    }
}

fn main() {}
