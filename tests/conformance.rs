//! The backend conformance suite: the same cases on every backend built into this test binary.
//! A backend is added with one `conformance!` line; `optional` takes an `Option` of a client,
//! for backends that may have no device on this machine (a `None` skips the case).

mod common;
mod conformance {
    pub mod cases;
    pub mod memory;
}

use conformance::{cases, memory};

macro_rules! conformance {
    ($backend:ident, $make:expr) => {
        conformance!($backend, optional Some($make));
    };
    ($backend:ident, optional $make:expr) => {
        mod $backend {
            use super::{cases, memory};

            macro_rules! case {
                ($name:ident) => {
                    case!(cases, $name);
                };
                ($module:ident, $name:ident) => {
                    #[test]
                    fn $name() {
                        if let Some(client) = $make {
                            $module::$name(client);
                        }
                    }
                };
            }

            case!(fill_writes_every_element);
            case!(copy_copies_every_element);
            case!(add_adds_elementwise);
            case!(scale_multiplies_by_the_scalar);
            case!(stencil_matches_the_host_reference);
            case!(offsets_bind_only_the_sub_range);
            case!(a_dynamic_cube_count_is_read_from_device_memory);
            case!(a_dynamic_cube_count_may_share_an_allocation_with_the_bindings);
            case!(a_read_of_many_bindings_returns_each_in_order);
            case!(writes_land_in_order_with_launches);
            case!(a_chain_of_launches_runs_in_order);
            case!(unchecked_launches_compute_the_same);
            case!(an_empty_handle_reads_back_empty);
            case!(read_async_completes_as_the_runtime_ticks);
            case!(sync_returns_after_all_work_ran);
            case!(memory_is_reclaimed_and_returned_by_cleanup);
            case!(a_mark_follows_the_work_before_it);
            case!(staging_buffers_upload_and_read_back);
            case!(a_staged_write_too_large_is_refused_and_nothing_is_lost);
            case!(reads_outlive_the_client);
            case!(large_uploads_arrive_whole_at_odd_sizes_and_offsets);
            case!(memory, a_drop_and_allocate_loop_reserves_what_is_live);
            case!(memory, a_ring_of_live_buffers_stops_growing);
        }
    };
}

conformance!(cpu, gpuworld::cpu_client(gpuworld::Driver::Manual));
conformance!(
    cpu_device_thread,
    gpuworld::cpu_client(gpuworld::Driver::DeviceThread)
);
conformance!(sim, gpuworld::sim_client(gpuworld::SimConfig::default()));
conformance!(
    sim_slow,
    gpuworld::sim_client(gpuworld::SimConfig {
        latency_ticks: 3,
        ..Default::default()
    })
);
conformance!(
    sim_single_queue,
    gpuworld::ComputeClient::new(
        gpuworld::SimBackend::new(gpuworld::SimConfig {
            model: gpuworld::SimModel::SingleQueue,
            ..Default::default()
        }),
        gpuworld::RuntimeConfig {
            max_tasks: 4,
            ..Default::default()
        },
        gpuworld::Driver::Manual,
    )
);
conformance!(
    sim_batched_sequential,
    gpuworld::ComputeClient::new(
        gpuworld::SimBackend::new(gpuworld::SimConfig::default()),
        gpuworld::RuntimeConfig {
            max_tasks: 8,
            strategy: gpuworld::SchedulingStrategy::Sequential,
            ..Default::default()
        },
        gpuworld::Driver::Manual,
    )
);
#[cfg(feature = "wgpu")]
conformance!(wgpu, optional crate::common::wgpu_client_or_skip());
#[cfg(feature = "wgpu")]
conformance!(
    wgpu_manual,
    optional crate::common::wgpu_backend_or_skip().map(|backend| {
        gpuworld::ComputeClient::new(
            backend,
            gpuworld::RuntimeConfig::default(),
            gpuworld::Driver::Manual,
        )
    })
);
#[cfg(feature = "cuda")]
conformance!(cuda, optional crate::common::cuda_client_or_skip());
#[cfg(feature = "cuda")]
conformance!(
    cuda_manual,
    optional crate::common::cuda_backend_or_skip().map(|backend| {
        gpuworld::ComputeClient::new(
            backend,
            gpuworld::RuntimeConfig::default(),
            gpuworld::Driver::Manual,
        )
    })
);
#[cfg(feature = "cuda")]
conformance!(
    cuda_batched,
    optional crate::common::cuda_backend_or_skip().map(|backend| {
        gpuworld::ComputeClient::new(
            backend,
            gpuworld::RuntimeConfig {
                max_tasks: 16,
                strategy: gpuworld::SchedulingStrategy::Interleave,
                ..Default::default()
            },
            gpuworld::Driver::DeviceThread,
        )
    })
);
