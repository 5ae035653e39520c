//! The backend conformance suite: the same cases on every backend built into this test binary.
//! A backend is added with one line of the `backend_suite!` below; `optional` takes a
//! `Result<_, Skip>` of a client, for backends that may have no device on this machine (a `Skip`
//! reports the case ignored). `foreign_sim` is a backend defined here, outside gpuworld
//! (`conformance/foreign.rs`), opened through `ComputeClient::open` like the others.

mod common;
mod conformance {
    pub mod cases;
    pub mod foreign;
    pub mod memory;
}

use conformance::{cases, memory};

backend_suite! {
    cases: [
        cases::fill_writes_every_element,
        cases::copy_copies_every_element,
        cases::add_adds_elementwise,
        cases::scale_multiplies_by_the_scalar,
        cases::stencil_matches_the_host_reference,
        cases::offsets_bind_only_the_sub_range,
        cases::a_dynamic_cube_count_is_read_from_device_memory,
        cases::a_dynamic_cube_count_may_share_an_allocation_with_the_bindings,
        cases::a_read_of_many_bindings_returns_each_in_order,
        cases::writes_land_in_order_with_launches,
        cases::a_chain_of_launches_runs_in_order,
        cases::a_launch_may_read_and_write_one_buffer,
        cases::unchecked_launches_compute_the_same,
        cases::an_empty_handle_reads_back_empty,
        cases::read_async_completes_as_the_runtime_ticks,
        cases::sync_returns_after_all_work_ran,
        cases::memory_is_reclaimed_and_returned_by_cleanup,
        cases::a_mark_follows_the_work_before_it,
        cases::the_capabilities_say_what_the_optional_parts_answer,
        cases::staging_buffers_upload_and_read_back,
        cases::a_staged_write_too_large_is_refused_and_nothing_is_lost,
        cases::reads_outlive_the_client,
        cases::large_uploads_arrive_whole_at_odd_sizes_and_offsets,
        cases::every_library_kernel_has_a_source_and_launches,
        cases::the_reduce_variants_and_matmul_give_the_hosts_bits,
        memory::a_drop_and_allocate_loop_reserves_what_is_live,
        memory::a_ring_of_live_buffers_stops_growing,
    ];
    cpu: gpuworld::cpu_client(gpuworld::Driver::Manual).unwrap();
    cpu_device_thread: gpuworld::cpu_client(gpuworld::Driver::DeviceThread).unwrap();
    sim: gpuworld::sim_client(gpuworld::SimConfig::default()).expect("the sim opens");
    sim_slow: gpuworld::sim_client(gpuworld::SimConfig::default().with_latency_ticks(3)).expect("the sim opens");
    foreign_sim: gpuworld::ComputeClient::<crate::conformance::foreign::ForeignSim>::open(
        gpuworld::SimConfig::default(),
        gpuworld::Driver::Manual,
    )
    .unwrap();
    sim_single_queue: gpuworld::ComputeClient::new(
        gpuworld::SimBackend::new(gpuworld::SimConfig::default().with_model(gpuworld::SimModel::SingleQueue)),
        gpuworld::RuntimeConfig::default().with_max_tasks(4),
        gpuworld::Driver::Manual,
    );
    sim_batched_sequential: gpuworld::ComputeClient::new(
        gpuworld::SimBackend::new(gpuworld::SimConfig::default()),
        gpuworld::RuntimeConfig::default().with_max_tasks(8).with_strategy(gpuworld::SchedulingStrategy::Sequential),
        gpuworld::Driver::Manual,
    );
    #[cfg(feature = "wgpu")]
    wgpu: optional crate::common::wgpu_client_or_skip();
    #[cfg(feature = "wgpu")]
    wgpu_manual: optional crate::common::wgpu_backend_or_skip().map(|backend| {
        gpuworld::ComputeClient::new(
            backend,
            gpuworld::RuntimeConfig::default(),
            gpuworld::Driver::Manual,
        )
    });
    #[cfg(feature = "cuda")]
    cuda: optional crate::common::cuda_client_or_skip();
    #[cfg(feature = "cuda")]
    cuda_manual: optional crate::common::cuda_backend_or_skip().map(|backend| {
        gpuworld::ComputeClient::new(
            backend,
            gpuworld::RuntimeConfig::default(),
            gpuworld::Driver::Manual,
        )
    });
    #[cfg(feature = "cuda")]
    cuda_batched: optional crate::common::cuda_backend_or_skip().map(|backend| {
        gpuworld::ComputeClient::new(
            backend,
            gpuworld::RuntimeConfig::default().with_max_tasks(16).with_strategy(gpuworld::SchedulingStrategy::Interleave),
            gpuworld::Driver::DeviceThread,
        )
    });
}
