//! WGSL of the matmul tiling that stays hand-written (`gpuworld_hal::library::matmul`): the
//! 16×16 shared tiles, whose `#[kernel]` WGSL took 1.22–1.27x this one's time on NVIDIA Vulkan
//! (H100 and H200 hosts, `benches/kernels.rs`, 2026-12-06: it checks every shared access and
//! keeps each product unfused). `c = a · b`, elements outside the matrices read as zero and are
//! never written. A driver may fuse its `acc + a * b` into a multiply-add, so its bits may
//! differ from the CPU's.

use super::tile::tile_main;
use gpuworld_hal::kernel::WgslSource;

/// `a[row][col]` and `b[row][col]`, zero outside the matrices and the bindings.
macro_rules! loads {
    () => {
        "fn load_a(row: u32, col: u32) -> f32 {
    let i = row * scalars.k + col;
    if row < scalars.m && col < scalars.k && i < arrayLength(&a) {
        return a[i];
    }
    return 0.0;
}

fn load_b(row: u32, col: u32) -> f32 {
    let i = row * scalars.n + col;
    if row < scalars.k && col < scalars.n && i < arrayLength(&b) {
        return b[i];
    }
    return 0.0;
}

"
    };
}

/// One output per unit, `a` and `b` staged through 16×16 tiles in workgroup memory.
pub(super) const TILED16: WgslSource = WgslSource(concat!(
    loads!(),
    "var<workgroup> tile_a: array<f32, 256>;
var<workgroup> tile_b: array<f32, 256>;

",
    tile_main!(),
    "    let row = cube.y * 16u + unit.y;
    let col = cube.x * 16u + unit.x;
    let tiles = (scalars.k + 15u) / 16u;
    var acc = 0.0;
    for (var t = 0u; t < tiles; t = t + 1u) {
        tile_a[unit.y * 16u + unit.x] = load_a(row, t * 16u + unit.x);
        tile_b[unit.y * 16u + unit.x] = load_b(t * 16u + unit.y, col);
        workgroupBarrier();
        for (var kk = 0u; kk < 16u; kk = kk + 1u) {
            acc = acc + tile_a[unit.y * 16u + kk] * tile_b[kk * 16u + unit.x];
        }
        workgroupBarrier();
    }
    let i = row * scalars.n + col;
    if row < scalars.m && col < scalars.n && i < arrayLength(&c) {
        c[i] = acc;
    }
}
"
));
