//! Autotune: a [`TunableSet`] names the candidate operations of one job; a [`Tuner`] picks one
//! per key — a cached winner, the first candidate while the key is pending, or the winner of a
//! benchmark — and sends results to the tick's tune stage (stage 7), which caches them; a
//! [`PersistentCache`] file keeps them across runs. The library's sets: reduce-sum and matmul.

mod benchmark;
mod cache;
/// The output checks of the library's sets: public for the workspace's tests, documented only
/// with the `internals` feature.
#[cfg_attr(not(feature = "internals"), doc(hidden))]
pub mod checks;
mod key;
mod matmul;
mod reduce_sum;
mod settings;
mod tunable;
mod tuner;

pub use cache::default_cache_dir;
/// The cache file's format: public for the workspace's tests of it, documented only with the
/// `internals` feature (the file is the `Tuner`'s to read and write).
#[cfg_attr(not(feature = "internals"), doc(hidden))]
pub use cache::{PersistentCache, StoredEntry, StoredOutcome};
pub use gpuworld_systems::error::CandidateFailure;
pub use gpuworld_systems::tune::{CandidateOutcome, TuneCache, TuneEntry, TuneMessage, TuneResult};
pub use key::{MAX_KEY_PARTS, TuneKey, pow2_bucket};
pub use matmul::{MATMUL_SET, MatmulInput, matmul_key, matmul_set};
pub use reduce_sum::{REDUCE_SUM_SET, ReduceInput, STRIDED_CUBES, reduce_key, reduce_sum_set};
pub use settings::{BenchmarkConfig, CACHE_DIR_ENV, CacheLocation, TuneMode, TunerConfig};
pub use tunable::{GroupPriorityFn, InputFn, KeyFn, OutputCheckFn, Tunable, TunableSet, TuneOp};
pub use tuner::{FALLBACK_CANDIDATE, Tuner};
