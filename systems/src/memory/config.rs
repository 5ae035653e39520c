//! Which pools a runtime's memory has: the default ladder sized from the device's memory, or a
//! programmatic list of pools. Each pool serves requests up to its `max_alloc`; a capped pool that
//! is full spills to the next one.

use crate::backend::{DeviceProperties, MemoryLayout};
use crate::memory::layout::TensorLayout;

const MIB: u64 = 1 << 20;

/// Largest shared page of the default ladder. Measured on the training trace of
/// `benches/memory.rs`: more size classes or larger pages reserve more
/// (`docs/benchmarks-history.md`, Memory).
const MAX_PAGE: u64 = 64 * MIB;
/// Requests over this fraction of a large page get a buffer of their own (256 KiB of a 64 MiB
/// page, the small-slice pool's limit: the large pool shares no page). Slices of shared pages pin
/// whole pages: on the trace family of `benches/alloc_traces.rs` (cpu, scale 32) a quarter gave
/// peak reserved / peak in use of 1.24–3.05 on the log-uniform, KV-cache, game and mixed shapes,
/// a sixteenth 1.07–2.03, a sixty-fourth 1.01–1.22; with idle memory kept up to the recent peak
/// (`budget.rs`, 16 seeds) a sixty-fourth gave up to 1.174 on the mixes, a 128th 1.109, a 256th
/// 1.090 (also over 40 seeds). Buffers of their own go back to the device exactly when idle
/// memory passes the budget (`MemoryPool::make_room`).
const LARGE_SLICE_DIVISOR: u64 = 256;
/// Where the device maps pages, requests over this fraction of a large page (32 MiB of 64) go
/// to the mapped pool; smaller ones keep the large pool's pages of their own. A mapped hole costs
/// the partial pages at its ends, which small requests make often: on the trace family of
/// `benches/alloc_traces.rs` (scale 1, seeds 1-8, 2 MiB pages) mapping every request over 256 KiB
/// gave peak reserved / peak in use up to 1.038 on the mixed streams, from 16 MiB 1.012, from
/// 32 MiB 1.013 with 8-10% fewer pages mapped on the log-uniform shape than from 64 MiB; every
/// other shape 1.006-1.009 (unmapped: up to 1.024 on the log-uniform one).
const MAPPED_FROM_DIVISOR: u64 = 2;
/// The default mapped pool maps one page per device call (2 MiB). Each call costs ~85 µs over its
/// life on an H200 (`cuMemCreate` 13, `cuMemSetAccess` 30, `cuMemUnmap` 25, `cuMemRelease` 15;
/// memory unmapped while making room and mapped again by the same reservation skips the create
/// and the release), so chunks set the time of a churning workload, and a chunk goes back only
/// once none of its pages is used. On the trace family (scale 1, seeds 1-6, pool-level replay,
/// a 512th of slack) one page per call gave peak reserved / peak in use 1.001-1.011 (log-uniform
/// 1.004-1.006) with 26.6k calls per log-uniform replay; two 1.001-1.016 with 13.3k; four up to
/// 1.026 with 7.2k; sixteen up to 1.033.
const MAPPED_CHUNK_PAGES: u64 = 1;
/// Device pages at most this large are host pages (4 KiB on x86-64 Linux, 16 KiB on Apple
/// silicon; CUDA's are 2 MiB, and 64 KiB pages, as some arm64 Linux hosts have, keep the ladder of
/// coarse pages), each mapped by a system call of about a µs (the cpu backend; CUDA's calls cost
/// ~85 µs over their life): the default ladder then maps every request over a page, one page per
/// call, and gives no buffers of their own to repeated sizes, which exist to save coarse pages'
/// calls. A mapped hole costs at most the pages at its ends, so with pages this fine the mapped
/// pool holds what is live more closely than sliced pages and buffers of their own, whose reuse
/// wastes up to an eighth. On the trace family of `benches/alloc_traces.rs` (pool-level replay,
/// scale 32, seeds 1-16, 4 KiB pages): peak reserved / peak in use 1.000-1.006 (the sliced
/// ladder, seeds 1-5: 1.002-1.088); 16 KiB pages up to 1.018 on the mixed streams; mapping only
/// requests over 64 KiB up to 1.018, over 256 KiB up to 1.098; repeat buffers up to 1.042 on the
/// training shape; 4 pages per call up to 1.014 (16: 1.031).
const FINE_PAGE_MAX: u64 = 16 << 10;
/// Pages of one address range of a mapped pool with fine pages (512 MiB of 4 KiB pages) where
/// mappings do not split: that pool keeps a record per page of a range, made when the range is
/// reserved, so ranges follow the program instead of covering the device's memory (a larger
/// request gets a range of its own). Where they split (the cpu backend) the pool keeps runs of
/// pages (`mapped_runs.rs`), and one range covers the device's memory, as on CUDA.
const FINE_RANGE_PAGES: u64 = 1 << 17;
/// Where making buffers is slow ([`DeviceProperties::slow_buffers`]), requests over this fraction
/// of a large page (32 MiB of 64) go to the compacting pool; smaller ones keep the large pool's
/// pages of their own.
const COMPACTING_FROM_DIVISOR: u64 = 2;
/// Pages of the default compacting pool: a 64th of device memory, from 256 MiB to 1 GiB (and
/// within the device's largest buffer).
const COMPACTING_PAGE_DIVISOR: u64 = 64;
const COMPACTING_PAGE_MIN: u64 = 256 * MIB;
const COMPACTING_PAGE_MAX: u64 = 1024 * MIB;
/// Smallest page of the small-slice pool; below it the pool would not pay for itself.
const MIN_SMALL_PAGE: u64 = 64 << 10;
/// Device memory assumed when a backend reports none (host backends without a cap).
const ASSUMED_MEMORY: u64 = 64 << 30;

/// A period for pools configured to return free pages after some ticks unused
/// (`PoolConfig::release_after_ticks`, or `memory.release_after_ticks` in `gpuworld.toml`): at
/// 60 ticks a second, ten seconds. The default ladder does not count ticks: its free pages go
/// back when the pool needs room (`MemoryPool::make_room`), so what it holds does not depend on
/// how often ticks run, and an idle tick makes no device call (issue 25).
pub const DEFAULT_RELEASE_AFTER_TICKS: u64 = 600;

/// How one pool places allocations in backend buffers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum PoolKind {
    /// Pages of `page_size` bytes split into slices; requests over `max_slice` get a page of
    /// their own, which later requests may reuse only if they waste at most an eighth of it.
    Sliced {
        /// Bytes of a full page.
        page_size: u64,
        /// Largest request placed in a shared page.
        max_slice: u64,
        /// Bytes of the first shared page: each new shared page is as large as the shared pages
        /// already held, from `first_page` up to `page_size` (equal to it for fixed pages), so a
        /// pool that serves a few buffers reserves about what they need.
        first_page: u64,
    },
    /// One backend buffer per allocation (backends such as wgpu need it).
    Exclusive,
    /// Address ranges of `range_size` bytes reserved once, with device pages of `page_size`
    /// bytes mapped only under live allocations, packed best fit (`mapped.rs`): what it reserves
    /// follows what is live within two pages per hole, whatever the sizes. Needs a device with
    /// [`DeviceProperties::page_mapping`]; elsewhere it becomes `Exclusive`, with a warning. With
    /// chunks of one page on a device whose mappings split
    /// ([`DeviceProperties::split_mappings`]: host pages), the pool keeps its pages as runs and
    /// maps a run of them per call (`mapped_runs.rs`), so a request costs about the same whatever
    /// its page count.
    Mapped {
        /// Bytes of a mapped page (rounded up to a multiple of the device's).
        page_size: u64,
        /// Most bytes one device call maps (whole pages): the unit that goes back.
        chunk_size: u64,
        /// Bytes of addresses reserved at a time (a larger request gets a range of its own).
        range_size: u64,
    },
    /// Pages of at least `page_size` bytes shared best fit by requests of every size, whose live
    /// allocations the runtime moves (a copy on the device) to make room for a request that
    /// finds no free range when the pools are at their budget (`compacting.rs`): for devices
    /// where making buffers costs more than copying them ([`DeviceProperties::slow_buffers`]).
    Compacting {
        /// Bytes of a new page (a larger request gets a page of its own); with `follow_peak`,
        /// the most a page holds.
        page_size: u64,
        /// Pages follow the program instead: a sixteenth of the most in use recently (at least
        /// a quarter of that where the budget leaves less), and requests over a tenth of it get
        /// pages of their own. The default ladder's pool does.
        follow_peak: bool,
    },
}

/// One pool of the ladder.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct PoolConfig {
    /// How it places allocations.
    pub kind: PoolKind,
    /// Largest request (after padding to the device alignment) routed to it.
    pub max_alloc: u64,
    /// Most bytes it may hold from the device; when full, requests spill to the next pool.
    pub max_reserved: Option<u64>,
    /// Free pages unused for this many ticks go back to the device; `None` keeps them.
    pub release_after_ticks: Option<u64>,
}

// Builders: the struct is `#[non_exhaustive]`, so other crates start from a constructor or
// `Default` and set fields one by one.
impl PoolConfig {
    /// A pool of `kind` for requests up to `max_alloc` bytes, with no cap on what it reserves
    /// and no release of idle pages.
    pub fn new(kind: PoolKind, max_alloc: u64) -> PoolConfig {
        PoolConfig {
            kind,
            max_alloc,
            max_reserved: None,
            release_after_ticks: None,
        }
    }

    /// This configuration with [`kind`](Self::kind) set to `kind`.
    #[must_use]
    pub fn with_kind(mut self, kind: PoolKind) -> Self {
        self.kind = kind;
        self
    }

    /// This configuration with [`max_alloc`](Self::max_alloc) set to `max_alloc`.
    #[must_use]
    pub fn with_max_alloc(mut self, max_alloc: u64) -> Self {
        self.max_alloc = max_alloc;
        self
    }

    /// This configuration with [`max_reserved`](Self::max_reserved) set to `max_reserved`.
    #[must_use]
    pub fn with_max_reserved(mut self, max_reserved: Option<u64>) -> Self {
        self.max_reserved = max_reserved;
        self
    }

    /// This configuration with [`release_after_ticks`](Self::release_after_ticks) set to `release_after_ticks`.
    #[must_use]
    pub fn with_release_after_ticks(mut self, release_after_ticks: Option<u64>) -> Self {
        self.release_after_ticks = release_after_ticks;
        self
    }
}

/// How much idle memory the pools keep for reuse, and how loosely a request may reuse an idle
/// buffer of its own: memory held against buffers made and destroyed (issue 25). Making a buffer
/// costs little on CUDA (`cuMemAlloc`) and on the host, but NVIDIA's Vulkan driver charges about
/// 33 ms per GiB made and destroyed, which on a workload of large, varying buffers is most of
/// its time: [`CachePolicy::ROOMY`] trades memory for it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct CachePolicy {
    /// Idle memory is kept up to a `slack_divisor`th over the most that was in use recently
    /// (`budget.rs`); past it, idle memory goes back before the device is asked for more. At
    /// least 1.
    pub slack_divisor: u64,
    /// A request reuses an idle buffer of its own only if it wastes at most a `fit_divisor`th of
    /// it. At least 2.
    pub fit_divisor: u64,
}

impl CachePolicy {
    /// The default: idle memory up to a 512th over the recent peak, reuse wasting at most an
    /// eighth. Peak reserved stays within 1.001–1.020 of peak in use on the trace family of
    /// `benches/alloc_traces.rs` at scale 1 (1.002–1.011 where pages are mapped, on CUDA); a
    /// 128th held 1.006–1.024 for 1–2% fewer device allocations.
    pub const TIGHT: CachePolicy = CachePolicy {
        slack_divisor: 512,
        fit_divisor: 8,
    };
    /// Idle memory up to a third over the recent peak, reuse wasting up to half a buffer: on
    /// the log-uniform traces (sizes up to 512 MiB) about 1.33 of peak in use for a fifth to a
    /// third of the bytes made (`docs/benchmarks.md`). For devices where making buffers is slow
    /// (wgpu on NVIDIA).
    pub const ROOMY: CachePolicy = CachePolicy {
        slack_divisor: 3,
        fit_divisor: 2,
    };

    /// This policy with [`slack_divisor`](Self::slack_divisor) set to `slack_divisor`.
    #[must_use]
    pub fn with_slack_divisor(mut self, slack_divisor: u64) -> Self {
        self.slack_divisor = slack_divisor;
        self
    }

    /// This policy with [`fit_divisor`](Self::fit_divisor) set to `fit_divisor`.
    #[must_use]
    pub fn with_fit_divisor(mut self, fit_divisor: u64) -> Self {
        self.fit_divisor = fit_divisor;
        self
    }

    /// The policy within its bounds (`slack_divisor` at least 1, `fit_divisor` at least 2),
    /// with a warning for each value raised.
    pub(crate) fn checked(self) -> CachePolicy {
        let checked = CachePolicy {
            slack_divisor: self.slack_divisor.max(1),
            fit_divisor: self.fit_divisor.max(2),
        };
        if checked != self {
            tracing::warn!(target: "gpuworld::memory", asked = ?self, used = ?checked, "cache policy out of bounds: raised to the smallest allowed");
        }
        checked
    }
}

impl Default for CachePolicy {
    fn default() -> Self {
        CachePolicy::TIGHT
    }
}

/// A runtime's memory settings (part of `RuntimeConfig`).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct MemoryConfig {
    /// The pools in routing order; `None` builds [`MemoryConfig::default_ladder`] from the device.
    pub pools: Option<Vec<PoolConfig>>,
    /// How `create_tensor`/`empty_tensor` lay tensors out.
    pub tensor_layout: TensorLayout,
    /// How much idle memory the pools keep, and how loosely requests reuse it.
    pub cache: CachePolicy,
    /// Whether the default ladder places large requests in mapped address ranges on a device
    /// that can map pages ([`DeviceProperties::page_mapping`]; CUDA). On by default; off gives
    /// large requests buffers of their own, as on other devices.
    pub map_pages: bool,
    /// Whether the default ladder places large requests in compacting pages on a device where
    /// making buffers is slow ([`DeviceProperties::slow_buffers`]; wgpu). On by default; off
    /// gives large requests buffers of their own.
    pub compact: bool,
    /// Whether a large request whose size was placed recently gets a buffer of its own in the
    /// sliced pool before the mapped or compacting one, reused whole by the next request of its
    /// size, instead of mapped pages (a device call per page) or a share of compacting pages
    /// ([`Ladder::with_repeat_buffers`](crate::memory::Ladder::with_repeat_buffers)). On by
    /// default, except in the default ladder of a device that maps host pages (the cpu
    /// backend), where mapping costs little; off leaves every large request to its pool.
    pub repeat_buffers: bool,
}

impl Default for MemoryConfig {
    fn default() -> Self {
        MemoryConfig {
            pools: None,
            tensor_layout: TensorLayout::default(),
            cache: CachePolicy::default(),
            map_pages: true,
            compact: true,
            repeat_buffers: true,
        }
    }
}

// Builders: the struct is `#[non_exhaustive]`, so other crates start from a constructor or
// `Default` and set fields one by one.
impl MemoryConfig {
    /// This configuration with [`pools`](Self::pools) set to `pools` (`None`: the default
    /// ladder).
    #[must_use]
    pub fn with_ladder(mut self, pools: Option<Vec<PoolConfig>>) -> Self {
        self.pools = pools;
        self
    }

    /// This configuration with [`tensor_layout`](Self::tensor_layout) set to `tensor_layout`.
    #[must_use]
    pub fn with_tensor_layout(mut self, tensor_layout: TensorLayout) -> Self {
        self.tensor_layout = tensor_layout;
        self
    }

    /// This configuration with [`cache`](Self::cache) set to `cache`.
    #[must_use]
    pub fn with_cache(mut self, cache: CachePolicy) -> Self {
        self.cache = cache;
        self
    }

    /// This configuration with [`map_pages`](Self::map_pages) set to `map_pages`.
    #[must_use]
    pub fn with_map_pages(mut self, map_pages: bool) -> Self {
        self.map_pages = map_pages;
        self
    }

    /// This configuration with [`compact`](Self::compact) set to `compact`.
    #[must_use]
    pub fn with_compact(mut self, compact: bool) -> Self {
        self.compact = compact;
        self
    }

    /// This configuration with [`repeat_buffers`](Self::repeat_buffers) set to `repeat_buffers`.
    #[must_use]
    pub fn with_repeat_buffers(mut self, repeat_buffers: bool) -> Self {
        self.repeat_buffers = repeat_buffers;
        self
    }
}

impl MemoryConfig {
    /// Whether a runtime on `device` gets buffers of their own for repeated sizes: where
    /// [`repeat_buffers`](Self::repeat_buffers) is on, but not in the default ladder of a device
    /// that maps host pages (a page of at most 16 KiB; the cpu backend), whose mapping calls
    /// cost a µs and whose holes cost little.
    pub(crate) fn repeats_on(&self, device: &DeviceProperties) -> bool {
        let default_ladder = self.pools.as_ref().is_none_or(Vec::is_empty);
        let fine_pages = self
            .mapped_page(device)
            .is_some_and(|page| page <= FINE_PAGE_MAX);
        self.repeat_buffers && !(default_ladder && fine_pages)
    }

    /// The page of the default ladder's mapped pool on `device`: the device's mapping page (at
    /// least its alignment) where it maps pages, its memory is sliced and
    /// [`map_pages`](Self::map_pages) is on.
    fn mapped_page(&self, device: &DeviceProperties) -> Option<u64> {
        let page = device.page_mapping?;
        (self.map_pages && device.memory_layout == MemoryLayout::Sliced)
            .then(|| page.max(device.alignment.max(1)))
    }

    /// Settings with exactly these pools.
    pub fn with_pools(pools: Vec<PoolConfig>) -> MemoryConfig {
        MemoryConfig {
            pools: Some(pools),
            ..MemoryConfig::default()
        }
    }

    /// The pools a runtime on `device` gets: the configured list, or the default ladder; on a
    /// device with [`MemoryLayout::Exclusive`] every pool is exclusive, and no page is larger
    /// than the device's largest buffer.
    pub fn resolve(&self, device: &DeviceProperties) -> Vec<PoolConfig> {
        let mut pools = match &self.pools {
            Some(pools) if !pools.is_empty() => pools.clone(),
            _ => self.default_pools(device),
        };
        let alignment = device.alignment.max(1);
        let largest_page = device.max_buffer_bytes.map_or(u64::MAX, |limit| {
            (limit / alignment * alignment).max(alignment)
        });
        for pool in &mut pools {
            pool.max_alloc = pool.max_alloc.max(alignment);
            match &mut pool.kind {
                PoolKind::Sliced { .. } if device.memory_layout == MemoryLayout::Exclusive => {
                    tracing::warn!(target: "gpuworld::memory", ?pool, "the device needs one buffer per allocation: sliced pool made exclusive");
                    pool.kind = PoolKind::Exclusive;
                }
                PoolKind::Sliced {
                    page_size,
                    max_slice,
                    first_page,
                } => {
                    *page_size = (*page_size)
                        .max(alignment)
                        .next_multiple_of(alignment)
                        .min(largest_page);
                    *max_slice = (*max_slice).clamp(alignment, *page_size);
                    *first_page = (*first_page)
                        .clamp(alignment, *page_size)
                        .next_multiple_of(alignment);
                }
                PoolKind::Mapped { .. } if device.memory_layout == MemoryLayout::Exclusive => {
                    tracing::warn!(target: "gpuworld::memory", ?pool, "the device needs one buffer per allocation: mapped pool made exclusive");
                    pool.kind = PoolKind::Exclusive;
                }
                PoolKind::Mapped {
                    page_size,
                    chunk_size,
                    range_size,
                } => match device.page_mapping {
                    Some(device_page) => {
                        let device_page = device_page.max(alignment);
                        *page_size = (*page_size).max(device_page).next_multiple_of(device_page);
                        *chunk_size = (*chunk_size).max(*page_size).next_multiple_of(*page_size);
                        *range_size = (*range_size).max(*page_size).next_multiple_of(*page_size);
                    }
                    None => {
                        tracing::warn!(target: "gpuworld::memory", ?pool, device = %device.name, "the device cannot map pages: mapped pool made exclusive");
                        pool.kind = PoolKind::Exclusive;
                    }
                },
                PoolKind::Compacting { .. } if device.memory_layout == MemoryLayout::Exclusive => {
                    tracing::warn!(target: "gpuworld::memory", ?pool, "the device needs one buffer per allocation: compacting pool made exclusive");
                    pool.kind = PoolKind::Exclusive;
                }
                PoolKind::Compacting { page_size, .. } => {
                    *page_size = (*page_size)
                        .max(alignment)
                        .next_multiple_of(alignment)
                        .min(largest_page);
                }
                PoolKind::Exclusive => {}
            }
        }
        pools
    }

    /// The default ladder, its large pool mapped where the device maps pages and
    /// [`map_pages`](Self::map_pages) is on (where its pages are host pages, of at most 16 KiB,
    /// every request over a page is mapped): what a runtime on `device` gets without
    /// [`pools`](Self::pools).
    pub fn default_pools(&self, device: &DeviceProperties) -> Vec<PoolConfig> {
        let mut pools = MemoryConfig::default_ladder(device);
        if let Some(page) = self.mapped_page(device)
            && let Some(large) = pools.last_mut()
        {
            let memory = match device.memory_bytes {
                0 | u64::MAX => ASSUMED_MEMORY,
                bytes => bytes,
            };
            let fine = page <= FINE_PAGE_MAX;
            let (chunk_size, range) = match (fine, device.split_mappings) {
                // Host pages (`FINE_PAGE_MAX`): every request over a page is mapped, one page
                // per call.
                (true, false) => (page, memory.min(page * FINE_RANGE_PAGES)),
                (true, true) => (page, memory),
                // One range covers the device's memory: addresses cost nothing until mapped.
                (false, _) => (page * MAPPED_CHUNK_PAGES, memory),
            };
            let mut mapped = *large;
            mapped.kind = PoolKind::Mapped {
                page_size: page,
                chunk_size,
                range_size: range.next_multiple_of(page),
            };
            if fine {
                // The large sliced pool stays only where no small pool takes the rest.
                if pools.len() > 2 {
                    pools.pop();
                }
                for pool in &mut pools {
                    pool.max_alloc = pool.max_alloc.min(page);
                }
            } else if let PoolKind::Sliced { page_size, .. } = large.kind {
                large.max_alloc = (page_size / MAPPED_FROM_DIVISOR).max(page);
            }
            pools.push(mapped);
        } else if let (true, true, MemoryLayout::Sliced) =
            (self.compact, device.slow_buffers, device.memory_layout)
            && let Some(large) = pools.last_mut()
        {
            let memory = match device.memory_bytes {
                0 | u64::MAX => ASSUMED_MEMORY,
                bytes => bytes,
            };
            let alignment = device.alignment.max(1);
            let page = (memory / COMPACTING_PAGE_DIVISOR)
                .clamp(COMPACTING_PAGE_MIN, COMPACTING_PAGE_MAX)
                .min(device.max_buffer_bytes.unwrap_or(u64::MAX))
                / alignment
                * alignment;
            let mut compacting = *large;
            compacting.kind = PoolKind::Compacting {
                page_size: page.max(alignment),
                follow_peak: true,
            };
            if let PoolKind::Sliced { page_size, .. } = large.kind {
                large.max_alloc = (page_size / COMPACTING_FROM_DIVISOR).max(alignment);
            }
            pools.push(compacting);
        }
        pools
    }

    /// The default ladder for `device`, smallest requests first.
    ///
    /// Three pools: requests of at most one alignment unit get exclusive buffers (they need no
    /// offsets and are reused exactly); small requests (up to 1/256 of the large page) share
    /// small pages (1/32 of it); everything else goes to the pool of large pages (a sixteenth of
    /// device memory, at most 64 MiB), where requests over a 256th of a page (all of them where
    /// the small pool exists) get pages of their own. Few size classes keep fragmentation low:
    /// memory freed by one class cannot serve another, and dynamic shapes move tensors between
    /// classes from step to step; a request its pool cannot place still takes a free range of
    /// another sliced pool before the device is asked for more.
    pub fn default_ladder(device: &DeviceProperties) -> Vec<PoolConfig> {
        let alignment = device.alignment.max(1);
        let memory = match device.memory_bytes {
            0 | u64::MAX => ASSUMED_MEMORY,
            bytes => bytes,
        };
        let round = |bytes: u64| bytes / alignment * alignment;
        let large_page = round((memory / 16).clamp(alignment, MAX_PAGE));
        let small_page = round(large_page / 32);
        let small_slice = round(small_page / 8);
        // Pages start at a 64th of their full size: a 64 MiB pool serving two 1 MiB buffers
        // holds 2 MiB, not 64 (cubecl holds 2 MiB there).
        let first_page = |page: u64| round(page / 64).max(alignment);
        let release = None;
        let mut pools = vec![PoolConfig {
            kind: PoolKind::Exclusive,
            max_alloc: alignment,
            max_reserved: None,
            release_after_ticks: release,
        }];
        if small_page >= MIN_SMALL_PAGE && small_slice > alignment {
            pools.push(PoolConfig {
                kind: PoolKind::Sliced {
                    page_size: small_page,
                    max_slice: small_slice,
                    first_page: first_page(small_page),
                },
                max_alloc: small_slice,
                max_reserved: None,
                release_after_ticks: release,
            });
        }
        pools.push(PoolConfig {
            kind: PoolKind::Sliced {
                page_size: large_page,
                max_slice: round(large_page / LARGE_SLICE_DIVISOR).max(alignment),
                first_page: first_page(large_page),
            },
            max_alloc: u64::MAX,
            max_reserved: None,
            release_after_ticks: release,
        });
        if device.memory_layout == MemoryLayout::Exclusive {
            for pool in &mut pools {
                pool.kind = PoolKind::Exclusive;
            }
        }
        pools
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn device(memory_bytes: u64, alignment: u64, memory_layout: MemoryLayout) -> DeviceProperties {
        DeviceProperties {
            name: "test".into(),
            memory_bytes,
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

    #[test]
    fn the_default_ladder_has_three_size_classes_and_ends_unbounded() {
        let ladder = MemoryConfig::default_ladder(&device(1 << 30, 256, MemoryLayout::Sliced));
        let shape: Vec<(PoolKind, u64)> = ladder.iter().map(|p| (p.kind, p.max_alloc)).collect();
        assert_eq!(
            shape,
            vec![
                (PoolKind::Exclusive, 256),
                (
                    PoolKind::Sliced {
                        page_size: 2 * MIB,
                        max_slice: 256 << 10,
                        first_page: 32 << 10,
                    },
                    256 << 10
                ),
                (
                    PoolKind::Sliced {
                        page_size: 64 * MIB,
                        max_slice: 256 << 10,
                        first_page: MIB,
                    },
                    u64::MAX
                ),
            ]
        );
    }

    #[test]
    fn a_device_mapping_host_pages_maps_every_request_over_a_page_without_repeat_buffers() {
        let host = DeviceProperties {
            page_mapping: Some(4 << 10),
            ..device(16 << 30, 64, MemoryLayout::Sliced)
        };
        let config = MemoryConfig::default();
        let pools = config.resolve(&host);
        let shape: Vec<(u64, bool)> = (pools.iter())
            .map(|p| (p.max_alloc, matches!(p.kind, PoolKind::Mapped { .. })))
            .collect();
        assert_eq!(shape, [(64, false), (4 << 10, false), (u64::MAX, true)]);
        assert_eq!(
            pools[2].kind,
            PoolKind::Mapped {
                page_size: 4 << 10,
                chunk_size: 4 << 10,
                range_size: 512 * MIB,
            }
        );
        assert!(!config.repeats_on(&host), "mapping a host page costs a µs");
        // Where host mappings split, the pool keeps runs of pages, in one range of all memory.
        let splitting = DeviceProperties {
            split_mappings: true,
            ..host.clone()
        };
        assert_eq!(
            config.resolve(&splitting)[2].kind,
            PoolKind::Mapped {
                page_size: 4 << 10,
                chunk_size: 4 << 10,
                range_size: 16 << 30,
            }
        );
        assert!(
            config.with_ladder(Some(pools)).repeats_on(&host),
            "pools as configured"
        );
        // CUDA's 2 MiB pages keep the large pool for requests up to 32 MiB, and repeat buffers.
        let gpu = DeviceProperties {
            page_mapping: Some(2 * MIB),
            ..device(16 << 30, 256, MemoryLayout::Sliced)
        };
        let pools = MemoryConfig::default().resolve(&gpu);
        assert_eq!(pools.len(), 4);
        assert_eq!(pools[2].max_alloc, 32 * MIB);
        assert!(MemoryConfig::default().repeats_on(&gpu));
    }

    #[test]
    fn a_small_device_gets_smaller_pages() {
        let ladder = MemoryConfig::default_ladder(&device(256 * MIB, 256, MemoryLayout::Sliced));
        assert_eq!(
            ladder[2].kind,
            PoolKind::Sliced {
                page_size: 16 * MIB,
                max_slice: 64 << 10,
                first_page: 256 << 10,
            }
        );
    }

    #[test]
    fn a_tiny_device_gets_pages_it_can_hold() {
        let ladder = MemoryConfig::default_ladder(&device(1024, 64, MemoryLayout::Sliced));
        assert_eq!(ladder.len(), 2);
        assert_eq!(
            ladder[1].kind,
            PoolKind::Sliced {
                page_size: 64,
                max_slice: 64,
                first_page: 64,
            }
        );
    }

    #[test]
    fn no_page_is_larger_than_the_devices_largest_buffer() {
        let limited = DeviceProperties {
            max_buffer_bytes: Some(3 * MIB + 100),
            ..device(1 << 30, 256, MemoryLayout::Sliced)
        };
        let custom = MemoryConfig::with_pools(vec![PoolConfig {
            kind: PoolKind::Sliced {
                page_size: 64 * MIB,
                max_slice: 16 * MIB,
                first_page: 8 * MIB,
            },
            max_alloc: u64::MAX,
            max_reserved: None,
            release_after_ticks: None,
        }]);
        for config in [MemoryConfig::default(), custom] {
            for pool in config.resolve(&limited) {
                if let PoolKind::Sliced {
                    page_size,
                    max_slice,
                    first_page,
                } = pool.kind
                {
                    assert!(page_size <= 3 * MIB, "{pool:?}");
                    assert!(
                        max_slice <= page_size && first_page <= page_size,
                        "{pool:?}"
                    );
                }
            }
        }
    }

    #[test]
    fn an_exclusive_device_gets_only_exclusive_pools() {
        let exclusive = device(1 << 30, 256, MemoryLayout::Exclusive);
        let custom = MemoryConfig::with_pools(vec![PoolConfig {
            kind: PoolKind::Sliced {
                page_size: MIB,
                max_slice: MIB,
                first_page: MIB,
            },
            max_alloc: u64::MAX,
            max_reserved: None,
            release_after_ticks: None,
        }]);
        for config in [MemoryConfig::default(), custom] {
            let pools = config.resolve(&exclusive);
            assert!(
                pools.iter().all(|p| p.kind == PoolKind::Exclusive),
                "{pools:?}"
            );
        }
    }
}
