//! `TunableSet`: the named candidate operations for one job, with a key generator, a generator
//! of benchmark inputs, optional groups with per-key priorities, and an optional output check.

use super::key::TuneKey;
use crate::ComputeClient;
use gpuworld_systems::{Backend, Result};
use std::sync::Arc;

/// A candidate operation: runs the job on `client` for `input` and returns its output.
pub type TuneOp<B, I, O> = Arc<dyn Fn(&ComputeClient<B>, &I) -> Result<O> + Send + Sync>;
/// Makes the key of an input.
pub type KeyFn<I> = Arc<dyn Fn(&I) -> TuneKey + Send + Sync>;
/// Makes benchmark inputs for a key from the caller's input.
pub type InputFn<B, I> = Arc<dyn Fn(&ComputeClient<B>, &TuneKey, &I) -> Result<I> + Send + Sync>;
/// The priority of a group for a key; a negative priority leaves the group out for that key.
pub type GroupPriorityFn = Arc<dyn Fn(&TuneKey) -> i32 + Send + Sync>;
/// Compares a candidate's output with the first candidate's; `Err` says how they differ.
pub type OutputCheckFn<B, O> =
    Arc<dyn Fn(&ComputeClient<B>, &O, &O) -> std::result::Result<(), String> + Send + Sync>;

/// One candidate of a set.
pub struct Tunable<B: Backend, I, O> {
    name: String,
    op: TuneOp<B, I, O>,
    group: Option<String>,
    priority: i32,
}

impl<B: Backend, I, O> std::fmt::Debug for Tunable<B, I, O> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tunable")
            .field("name", &self.name)
            .field("group", &self.group)
            .field("priority", &self.priority)
            .finish_non_exhaustive()
    }
}

impl<B: Backend, I, O> Tunable<B, I, O> {
    /// A candidate named `name` (names are the identity the cache checksums).
    pub fn new(
        name: impl Into<String>,
        op: impl Fn(&ComputeClient<B>, &I) -> Result<O> + Send + Sync + 'static,
    ) -> Tunable<B, I, O> {
        Tunable {
            name: name.into(),
            op: Arc::new(op),
            group: None,
            priority: 0,
        }
    }

    /// Puts the candidate in group `group` (declared with [`TunableSet::group`]).
    pub fn in_group(mut self, group: impl Into<String>) -> Tunable<B, I, O> {
        self.group = Some(group.into());
        self
    }

    /// Orders the candidate within its group (higher first); a negative priority excludes it.
    pub fn with_priority(mut self, priority: i32) -> Tunable<B, I, O> {
        self.priority = priority;
        self
    }

    /// The candidate's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The candidate's operation.
    pub fn op(&self) -> &TuneOp<B, I, O> {
        &self.op
    }
}

/// The candidates of one job, how to key an input, and how to make benchmark inputs.
pub struct TunableSet<B: Backend, I, O> {
    name: &'static str,
    candidates: Vec<Tunable<B, I, O>>,
    key: KeyFn<I>,
    inputs: InputFn<B, I>,
    groups: Vec<(String, GroupPriorityFn)>,
    output_check: Option<OutputCheckFn<B, O>>,
    checksum: u64,
    identity: u64,
}

impl<B: Backend, I, O> std::fmt::Debug for TunableSet<B, I, O> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TunableSet")
            .field("name", &self.name)
            .field("candidates", &self.candidates)
            .field("checksum", &self.checksum)
            .finish_non_exhaustive()
    }
}

/// Why a candidate is not benchmarked for a key.
const EXCLUDED_BY_PRIORITY: &str = "not benchmarked: its priority or its group's is negative";

impl<B: Backend, I, O> TunableSet<B, I, O> {
    /// An empty set named `name`, keyed by `key`, benchmarked on inputs made by `inputs`.
    pub fn new(
        name: &'static str,
        key: impl Fn(&I) -> TuneKey + Send + Sync + 'static,
        inputs: impl Fn(&ComputeClient<B>, &TuneKey, &I) -> Result<I> + Send + Sync + 'static,
    ) -> TunableSet<B, I, O> {
        let mut set = TunableSet {
            name,
            candidates: Vec::new(),
            key: Arc::new(key),
            inputs: Arc::new(inputs),
            groups: Vec::new(),
            output_check: None,
            checksum: 0,
            identity: 0,
        };
        set.update_checksum();
        set
    }

    /// Adds a candidate; the first one added is the fallback used while a key is pending.
    pub fn with(mut self, candidate: Tunable<B, I, O>) -> TunableSet<B, I, O> {
        self.candidates.push(candidate);
        self.update_checksum();
        self
    }

    /// Adds a candidate named `name` running `op`, in no group, priority 0.
    pub fn candidate(
        self,
        name: impl Into<String>,
        op: impl Fn(&ComputeClient<B>, &I) -> Result<O> + Send + Sync + 'static,
    ) -> TunableSet<B, I, O> {
        self.with(Tunable::new(name, op))
    }

    /// Declares group `name` with its priority per key: groups are benchmarked from the highest
    /// priority down, stopping at the first priority level where a candidate succeeded.
    pub fn group(
        mut self,
        name: impl Into<String>,
        priority: impl Fn(&TuneKey) -> i32 + Send + Sync + 'static,
    ) -> TunableSet<B, I, O> {
        self.groups.push((name.into(), Arc::new(priority)));
        self
    }

    /// Sets how outputs are compared under the `autotune-checks` feature.
    pub fn output_check(
        mut self,
        check: impl Fn(&ComputeClient<B>, &O, &O) -> std::result::Result<(), String>
        + Send
        + Sync
        + 'static,
    ) -> TunableSet<B, I, O> {
        self.output_check = Some(Arc::new(check));
        self
    }

    /// The set's name.
    pub fn name(&self) -> &'static str {
        self.name
    }

    /// The candidates, in the order they were added.
    pub fn candidates(&self) -> &[Tunable<B, I, O>] {
        &self.candidates
    }

    /// The key of `input`.
    pub fn key(&self, input: &I) -> TuneKey {
        (self.key)(input)
    }

    /// Benchmark inputs for `key`, made from the caller's `input`.
    pub fn generate_inputs(
        &self,
        client: &ComputeClient<B>,
        key: &TuneKey,
        input: &I,
    ) -> Result<I> {
        (self.inputs)(client, key, input)
    }

    /// The output check, if one was set.
    pub fn output_checker(&self) -> Option<&OutputCheckFn<B, O>> {
        self.output_check.as_ref()
    }

    /// A stable checksum of the candidates' names, in order: a cached winner is only trusted
    /// for the same candidates.
    pub fn checksum(&self) -> u64 {
        self.checksum
    }

    /// The set's name and checksum in one number: the tuner's in-memory key.
    pub fn identity(&self) -> u64 {
        self.identity
    }

    /// The candidates to benchmark for `key`, as priority levels from the highest down, each
    /// ordered by candidate priority (then by position); the excluded ones with the reason.
    pub fn plan(&self, key: &TuneKey) -> (Vec<Vec<usize>>, Vec<(usize, &'static str)>) {
        let mut eligible: Vec<(i32, i32, usize)> = Vec::new();
        let mut excluded = Vec::new();
        for (index, candidate) in self.candidates.iter().enumerate() {
            let group_priority = candidate.group.as_deref().map_or(0, |group| {
                self.groups
                    .iter()
                    .find(|(name, _)| name == group)
                    .map_or(0, |(_, priority)| priority(key))
            });
            if group_priority < 0 || candidate.priority < 0 {
                excluded.push((index, EXCLUDED_BY_PRIORITY));
            } else {
                eligible.push((group_priority, candidate.priority, index));
            }
        }
        eligible.sort_by(|a, b| b.0.cmp(&a.0).then(b.1.cmp(&a.1)).then(a.2.cmp(&b.2)));
        let mut levels: Vec<Vec<usize>> = Vec::new();
        let mut current = None;
        for (group_priority, _, index) in eligible {
            match levels.last_mut() {
                Some(level) if current == Some(group_priority) => level.push(index),
                _ => {
                    levels.push(vec![index]);
                    current = Some(group_priority);
                }
            }
        }
        (levels, excluded)
    }

    fn update_checksum(&mut self) {
        let mut hash = Fnv1a::new();
        for candidate in &self.candidates {
            hash.write(candidate.name.as_bytes());
            hash.write(&[0]);
        }
        self.checksum = hash.finish();
        let mut identity = Fnv1a::new();
        identity.write(self.name.as_bytes());
        identity.write(&[0]);
        identity.write(&self.checksum.to_le_bytes());
        self.identity = identity.finish();
    }
}

/// FNV-1a, 64 bits: stable across processes and Rust versions, unlike `DefaultHasher`, so a
/// checksum written to the cache file means the same thing when read back.
struct Fnv1a(u64);

impl Fnv1a {
    fn new() -> Fnv1a {
        Fnv1a(0xcbf2_9ce4_8422_2325)
    }

    fn write(&mut self, bytes: &[u8]) {
        for byte in bytes {
            self.0 ^= u64::from(*byte);
            self.0 = self.0.wrapping_mul(0x0000_0100_0000_01b3);
        }
    }

    fn finish(&self) -> u64 {
        self.0
    }
}
