//! A launch's shape against the device's limits: the cube count per axis and the cube dim (per
//! axis and in all), as [`DeviceProperties`] reports them. The client checks both when a launch
//! is made (a [`LaunchError`] from `launch`, nothing queued); the host backends (cpu and sim)
//! check again where a count is only known on the device (a dynamic count, read from memory when
//! the launch runs) and report it as the stream's fault.

use crate::backend::DeviceProperties;
use crate::error::LaunchError;
use crate::kernel::KernelDef;

/// Cubes per axis the cpu and sim backends run: CUDA's grid limits (2^31 - 1 along x, 65,535
/// along y and z). A 1-D launch of more than 65,535 cubes runs there and on CUDA; wgpu reports
/// its adapter's limit (65,535 per axis by WebGPU's default), and a launch over it is refused at
/// `launch` on that backend alone, each backend enforcing the limits it reports.
pub const HOST_MAX_CUBE_COUNT: [u32; 3] = [i32::MAX as u32, 65_535, 65_535];

/// Units per axis of one cube on the cpu and sim backends: CUDA's and most Vulkan devices'.
pub const HOST_MAX_CUBE_DIM: [u32; 3] = [1_024, 1_024, 64];

/// Units of one cube on the cpu and sim backends: CUDA's, and `#[gpuworld::kernel]`'s bound.
pub const HOST_MAX_UNITS_PER_CUBE: u32 = 1_024;

const AXES: [&str; 3] = ["x", "y", "z"];

/// Checks `kernel`'s cube dim against the device's `max_cube_dim` and `max_units_per_cube`.
pub fn validate_cube_dim(
    kernel: &KernelDef,
    properties: &DeviceProperties,
) -> Result<(), LaunchError> {
    check_cube_dim(
        kernel,
        properties.max_cube_dim,
        properties.max_units_per_cube,
    )
}

/// Checks a cube count known when launching against the device's `max_cube_count`; a count of
/// zero cubes along some axis runs nothing and passes.
pub fn validate_cube_count(
    kernel: &KernelDef,
    count: [u32; 3],
    properties: &DeviceProperties,
) -> Result<(), LaunchError> {
    check_cube_count(kernel, count, properties.max_cube_count, false)
}

/// [`validate_cube_dim`] against explicit limits.
pub(crate) fn check_cube_dim(
    kernel: &KernelDef,
    max_cube_dim: [u32; 3],
    max_units: u32,
) -> Result<(), LaunchError> {
    let dim = kernel.signature.cube_dim;
    for axis in 0..3 {
        if dim[axis] > max_cube_dim[axis] {
            return Err(LaunchError::CubeDimOverLimit {
                kernel: kernel.name,
                cube_dim: dim,
                what: AXES[axis],
                value: u64::from(dim[axis]),
                limit: u64::from(max_cube_dim[axis]),
            });
        }
    }
    let units: u64 = dim.iter().map(|&d| u64::from(d)).product();
    if units > u64::from(max_units) {
        return Err(LaunchError::CubeDimOverLimit {
            kernel: kernel.name,
            cube_dim: dim,
            what: "units per cube",
            value: units,
            limit: u64::from(max_units),
        });
    }
    Ok(())
}

/// [`validate_cube_count`] against explicit limits; `dynamic` when the count was read from a
/// buffer as the launch ran.
pub(crate) fn check_cube_count(
    kernel: &KernelDef,
    count: [u32; 3],
    max_cube_count: [u32; 3],
    dynamic: bool,
) -> Result<(), LaunchError> {
    if count.contains(&0) {
        return Ok(());
    }
    match (0..3).find(|&axis| count[axis] > max_cube_count[axis]) {
        Some(axis) => Err(LaunchError::CubeCountOverLimit {
            kernel: kernel.name,
            count,
            axis: AXES[axis],
            limit: max_cube_count[axis],
            dynamic,
        }),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernel::{Param, Signature};

    static WIDE: KernelDef = KernelDef {
        id: "test.wide",
        name: "wide",
        signature: Signature {
            buffers: &[Param::f32("x")],
            scalars: &[],
            cube_dim: [64, 32, 1],
        },
        sources: &[],
    };

    #[test]
    fn a_count_over_the_limit_names_its_axis_and_the_limit() {
        let refused = check_cube_count(&WIDE, [4, 70_000, 1], HOST_MAX_CUBE_COUNT, false);
        let error = refused.expect_err("70,000 cubes along y is over 65,535");
        assert_eq!(
            error.to_string(),
            "kernel `wide` is launched over [4, 70000, 1] cubes: 70000 along y, over the \
             device's limit of 65535 per axis (DeviceProperties::max_cube_count); split the \
             launch or spread its cubes over more axes"
        );
        assert_eq!(
            check_cube_count(&WIDE, [65_535, 65_535, 65_535], HOST_MAX_CUBE_COUNT, false),
            Ok(())
        );
        assert_eq!(
            check_cube_count(&WIDE, [0, 70_000, 1], HOST_MAX_CUBE_COUNT, false),
            Ok(()),
            "a launch of no cube runs nothing"
        );
    }

    #[test]
    fn a_cube_dim_over_the_limits_names_the_side_or_the_units() {
        assert_eq!(check_cube_dim(&WIDE, [64, 32, 1], 2_048), Ok(()));
        let side = check_cube_dim(&WIDE, [1_024, 16, 64], 2_048).expect_err("32 > 16 along y");
        assert_eq!(
            side.to_string(),
            "kernel `wide` declares a cube dim of [64, 32, 1]: 32 units along y, over the \
             device's limit of 16 (DeviceProperties::max_cube_dim and max_units_per_cube)"
        );
        let units = check_cube_dim(&WIDE, HOST_MAX_CUBE_DIM, 1_000).expect_err("2,048 > 1,000");
        assert!(
            units
                .to_string()
                .contains("2048 units per cube, over the device's limit of 1000"),
            "{units}"
        );
    }
}
