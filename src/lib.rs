//! gpuworld: a GPU compute runtime whose whole state is a `bevy_ecs` World, advanced one tick at
//! a time by an ordered schedule of systems.
//!
//! ```
//! use gpuworld::{Bindings, ComputeClient, CubeCount, Driver, library};
//!
//! let client = gpuworld::cpu_client(Driver::Manual);
//! let input = client.create_from_slice(bytemuck::cast_slice(&[1.0f32, 2.0, 3.0, 4.0]));
//! let output = client.empty(16);
//! let bindings = Bindings::new().buffer(&input).buffer(&output).scalar_f32(10.0);
//! client.launch(&library::SCALE, CubeCount::new_1d(1), bindings)?;
//! let values: Vec<f32> = client.read_one_as(&output)?;
//! assert_eq!(values, [10.0, 20.0, 30.0, 40.0]);
//! # Ok::<(), gpuworld::Error>(())
//! ```

mod client;

pub use client::{Bindings, ComputeClient, Driver};
pub use gpuworld_systems::sim::{SimBackend, SimCall, SimConfig};
pub use gpuworld_systems::stages::tune::TuneResult;
pub use gpuworld_systems::{
    Backend, Binding, CubeCount, DeviceProperties, Error, ExecutionMode, Handle, HandleId, Kernel,
    KernelDef, MemoryUsage, Result, Runtime, RuntimeConfig, RuntimeId, SchedulingStrategy,
    StreamId, kernel, library,
};

#[cfg(feature = "cpu")]
pub use gpuworld_cpu::CpuBackend;

/// A client of a new runtime on the CPU backend with the default configuration.
#[cfg(feature = "cpu")]
pub fn cpu_client(driver: Driver) -> ComputeClient<CpuBackend> {
    ComputeClient::new(CpuBackend::new(), RuntimeConfig::default(), driver)
}

/// A client of a new runtime on the sim backend, ticked by hand.
pub fn sim_client(config: SimConfig) -> ComputeClient<SimBackend> {
    ComputeClient::new(
        SimBackend::new(config),
        RuntimeConfig::default(),
        Driver::Manual,
    )
}

/// The README's examples, compiled and run as doctests so they stay true.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;
