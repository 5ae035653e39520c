//! WGSL of the matmul tilings (`gpuworld_hal::library::matmul`): `c = a · b`, elements
//! outside the matrices read as zero and are never written. Every tiling loads through the same
//! two bounds-checked helpers.

use super::tile_main;
use crate::wgsl::WgslSource;

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

/// One output element per unit.
pub(super) const NAIVE: WgslSource = WgslSource(concat!(
    loads!(),
    tile_main!(),
    "    let row = cube.y * 16u + unit.y;
    let col = cube.x * 16u + unit.x;
    if row >= scalars.m || col >= scalars.n {
        return;
    }
    var acc = 0.0;
    for (var kk = 0u; kk < scalars.k; kk = kk + 1u) {
        acc = acc + load_a(row, kk) * load_b(kk, col);
    }
    let i = row * scalars.n + col;
    if i < arrayLength(&c) {
        c[i] = acc;
    }
}
"
));

/// A 4×4 block of outputs per unit, 64×64 per cube.
pub(super) const FOUR_BY_FOUR: WgslSource = WgslSource(concat!(
    loads!(),
    tile_main!(),
    "    // Unit (x, y) owns rows y, y+16, y+32, y+48 and the same columns of its cube's 64x64 block,
    // so neighbouring units read neighbouring addresses.
    let row0 = cube.y * 64u + unit.y;
    let col0 = cube.x * 64u + unit.x;
    var acc: array<f32, 16>;
    for (var t = 0u; t < 16u; t = t + 1u) {
        acc[t] = 0.0;
    }
    for (var kk = 0u; kk < scalars.k; kk = kk + 1u) {
        var av: array<f32, 4>;
        var bv: array<f32, 4>;
        for (var r = 0u; r < 4u; r = r + 1u) {
            av[r] = load_a(row0 + r * 16u, kk);
            bv[r] = load_b(kk, col0 + r * 16u);
        }
        for (var r = 0u; r < 4u; r = r + 1u) {
            for (var s = 0u; s < 4u; s = s + 1u) {
                acc[r * 4u + s] = acc[r * 4u + s] + av[r] * bv[s];
            }
        }
    }
    for (var r = 0u; r < 4u; r = r + 1u) {
        for (var s = 0u; s < 4u; s = s + 1u) {
            let row = row0 + r * 16u;
            let col = col0 + s * 16u;
            let i = row * scalars.n + col;
            if row < scalars.m && col < scalars.n && i < arrayLength(&c) {
                c[i] = acc[r * 4u + s];
            }
        }
    }
}
"
));

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
