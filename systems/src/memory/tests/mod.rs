//! Unit tests of the pools behind `MemoryPool`, on the sim backend, one file per concern: where a
//! request lands (`placement.rs`), caps, spill, cleanup and stale keys (`limits.rs`), allocation
//! modes and periodic release (`modes.rs`), parked memory (`parked.rs`), and growth with the
//! ladder's accounting (`growth.rs`). The shared fixtures are here.

use super::*;
use crate::backend::MemoryLayout;
use crate::error::MemoryError;
use crate::sim::{SimBackend, SimConfig};
use bevy_ecs::entity::Entity;

const KIB: u64 = 1 << 10;
const MIB: u64 = 1 << 20;
const AUTO: AllocationMode = AllocationMode::Auto;

fn device(memory_bytes: u64) -> SimBackend {
    SimBackend::new(
        SimConfig::default()
            .with_memory_bytes(memory_bytes)
            .with_record(false),
    )
}

fn properties(alignment: u64, memory_layout: MemoryLayout) -> DeviceProperties {
    DeviceProperties {
        name: "unit".into(),
        memory_bytes: 1 << 30,
        alignment,
        memory_layout,
        limits: Default::default(),
        features: Vec::new(),
        max_cube_count: [1; 3],
        max_cube_dim: [1; 3],
        max_units_per_cube: 1,
        max_buffer_bytes: None,
        page_mapping: None,
        split_mappings: false,
        slow_buffers: false,
    }
}

fn sliced(page_size: u64, max_slice: u64, max_alloc: u64) -> PoolConfig {
    PoolConfig {
        kind: PoolKind::Sliced {
            page_size,
            max_slice,
            first_page: page_size,
        },
        max_alloc,
        max_reserved: None,
        release_after_ticks: None,
    }
}

fn exclusive(max_alloc: u64) -> PoolConfig {
    PoolConfig {
        kind: PoolKind::Exclusive,
        max_alloc,
        max_reserved: None,
        release_after_ticks: None,
    }
}

/// A pool with one sliced pool of 64 KiB pages on a 256-byte-aligned device.
fn one_sliced_pool() -> MemoryPool {
    MemoryPool::new(
        &properties(256, MemoryLayout::Sliced),
        &MemoryConfig::with_pools(vec![sliced(64 * KIB, 64 * KIB, u64::MAX)]),
    )
}

/// `handles` handles' parked memory returned, no cleanup waiting for it.
fn returned(handles: u64) -> ParkedReturn {
    ParkedReturn {
        handles,
        awaited: false,
    }
}

fn stream_entities() -> (Entity, Entity) {
    (
        Entity::from_raw_u32(1).unwrap(),
        Entity::from_raw_u32(2).unwrap(),
    )
}

mod growth;
mod limits;
mod modes;
mod parked;
mod placement;
