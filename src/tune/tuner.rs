//! `Tuner`: picks a tunable set's candidate for an input. A hit is one read-locked hash lookup
//! in the tuner's own map (the runtime is never locked). A miss consults the world's tune
//! cache (shared through an `Arc`), then the persistent file, then benchmarks the candidates —
//! on the caller's thread or in the background — and sends the result to the tick's tune stage
//! as a message. While a key is pending, callers get the first candidate.

use super::benchmark::{Measured, measure};
use super::cache::{PersistentCache, StoredEntry, StoredOutcome, default_cache_dir};
use super::checks::{OUTPUT_CHECKS_ENABLED, check_outputs};
use super::key::TuneKey;
use super::settings::{CacheLocation, TuneMode, TunerConfig};
use super::tunable::TunableSet;
use crate::ComputeClient;
use gpuworld_systems::error::{AutotuneError, CandidateFailure};
use gpuworld_systems::kernel::panic_message;
use gpuworld_systems::tune::{CandidateOutcome, TuneCache, TuneEntry, TuneMessage, TuneResult};
use gpuworld_systems::{Backend, Error, Result};
use parking_lot::{Mutex, RwLock};
use rustc_hash::FxHashMap;
use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

/// The candidate callers get while their key is being tuned: the first one of the set.
pub const FALLBACK_CANDIDATE: usize = 0;

/// Which (set, key) a winner belongs to in the tuner's own map.
type Slot = (u64, TuneKey);

/// The autotuner of one device: cheap to clone, usable from many threads.
pub struct Tuner<B: Backend> {
    inner: Arc<TunerInner<B>>,
}

impl<B: Backend> std::fmt::Debug for Tuner<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tuner")
            .field("client", &self.inner.client)
            .field("config", &self.inner.config)
            .finish_non_exhaustive()
    }
}

impl<B: Backend> Clone for Tuner<B> {
    fn clone(&self) -> Self {
        Tuner {
            inner: self.inner.clone(),
        }
    }
}

struct TunerInner<B: Backend> {
    client: ComputeClient<B>,
    config: TunerConfig,
    /// Winners this tuner knows; read on every call, written once per key. Fx hashing: the
    /// key is a few words chosen by the program, not by an attacker.
    winners: RwLock<FxHashMap<Slot, usize>>,
    /// Keys this tuner is benchmarking or waiting for the tick to ingest.
    in_flight: Mutex<HashSet<Slot>>,
    /// The world's tune cache, written only by the tick's tune stage.
    shared: TuneCache,
    persistent: Option<PersistentCache>,
    /// What the persistent file held when the tuner was made, by (set, key).
    stored: Mutex<HashMap<(String, String), StoredEntry>>,
    load_problem: Option<String>,
}

/// How a finished tuning reaches the caller.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Delivery {
    /// The caller waits: it learns the winner at once.
    Caller,
    /// A background thread: callers learn the winner from the world once the tick ingested it.
    World,
}

impl<B: Backend> Tuner<B> {
    /// A tuner for `client`'s device; loads the persistent cache file, reporting (through
    /// `tracing` and [`Tuner::cache_problem`]) and ignoring one that cannot be used. Never ticks.
    pub fn new(client: &ComputeClient<B>, config: TunerConfig) -> Tuner<B> {
        let dir = match &config.cache {
            CacheLocation::Default => Some(default_cache_dir()),
            CacheLocation::Dir(dir) => Some(dir.clone()),
            CacheLocation::Disabled => None,
        };
        let device = format!("{}-{}", B::NAME, client.properties().name);
        let persistent = dir.map(|dir| PersistentCache::new(&dir, &device));
        let (stored, load_problem) = match persistent.as_ref().map(PersistentCache::load) {
            None => (HashMap::new(), None),
            Some(Ok(entries)) => (
                entries
                    .into_iter()
                    .map(|e| ((e.set.clone(), e.key.clone()), e))
                    .collect(),
                None,
            ),
            Some(Err(problem)) => {
                tracing::warn!(target: "gpuworld::tune", %problem, "ignoring the autotune cache file");
                (HashMap::new(), Some(problem))
            }
        };
        Tuner {
            inner: Arc::new(TunerInner {
                shared: client.tune_cache(),
                client: client.clone(),
                config,
                winners: RwLock::new(FxHashMap::default()),
                in_flight: Mutex::new(HashSet::new()),
                persistent,
                stored: Mutex::new(stored),
                load_problem,
            }),
        }
    }

    /// Runs the candidate of `set` chosen for `input`'s key (tuning it first on a miss). May
    /// tick: a blocking tune on a miss syncs; the candidate ticks if it blocks.
    pub fn execute<I, O>(&self, set: &Arc<TunableSet<B, I, O>>, input: &I) -> Result<O>
    where
        I: Clone + Send + Sync + 'static,
        O: Send + 'static,
    {
        let index = self.select(set, input)?;
        match set.candidates().get(index) {
            Some(candidate) => (candidate.op())(&self.inner.client, input),
            None => Err(no_candidates(set, set.key(input))),
        }
    }

    /// The index of the candidate of `set` to run for `input`: the cached winner, the fallback
    /// while the key is pending, or the winner of a benchmark run now. A hit never ticks; a miss
    /// in `TuneMode::Blocking` benchmarks, whose syncs tick.
    #[inline]
    pub fn select<I, O>(&self, set: &Arc<TunableSet<B, I, O>>, input: &I) -> Result<usize>
    where
        I: Clone + Send + Sync + 'static,
        O: Send + 'static,
    {
        let key = set.key(input);
        if let Some(&winner) = self.inner.winners.read().get(&(set.identity(), key)) {
            return Ok(winner);
        }
        self.inner.resolve_miss(set, key, input)
    }

    /// Why the persistent cache file could not be used when the tuner was made, if it could not.
    /// Never ticks.
    pub fn cache_problem(&self) -> Option<&str> {
        self.inner.load_problem.as_deref()
    }

    /// The persistent cache file, unless disabled. Never ticks.
    pub fn cache_path(&self) -> Option<&Path> {
        self.inner.persistent.as_ref().map(PersistentCache::path)
    }

    /// The client the tuner benchmarks and runs candidates on. Never ticks.
    pub fn client(&self) -> &ComputeClient<B> {
        &self.inner.client
    }
}

impl<B: Backend> TunerInner<B> {
    fn resolve_miss<I, O>(
        self: &Arc<Self>,
        set: &Arc<TunableSet<B, I, O>>,
        key: TuneKey,
        input: &I,
    ) -> Result<usize>
    where
        I: Clone + Send + Sync + 'static,
        O: Send + 'static,
    {
        let slot = (set.identity(), key);
        let key_text = key.to_string();
        let candidates = set.candidates().len();
        if candidates == 0 {
            return Err(no_candidates(set, key));
        }
        match self.shared.entry(set.name(), &key_text) {
            Some(TuneEntry::Tuned {
                winner, checksum, ..
            }) if checksum == set.checksum() && winner < candidates => {
                self.in_flight.lock().remove(&slot);
                self.winners.write().insert(slot, winner);
                return Ok(winner);
            }
            Some(TuneEntry::Pending) => return Ok(FALLBACK_CANDIDATE),
            _ => {}
        }
        if self.in_flight.lock().contains(&slot) {
            return Ok(FALLBACK_CANDIDATE);
        }
        if let Some(winner) = self.winner_from_file(set, &key_text, slot) {
            return Ok(winner);
        }
        if !self.in_flight.lock().insert(slot) {
            // Another thread started tuning this key a moment ago.
            return Ok(FALLBACK_CANDIDATE);
        }
        self.client.send_tune_message(TuneMessage::Pending {
            set: set.name().to_string(),
            key: key_text.clone(),
        });
        match self.config.mode {
            TuneMode::Blocking => self.tune(set, key, input, Delivery::Caller),
            TuneMode::Background => {
                let (inner, set_for_thread, owned_input) =
                    (self.clone(), set.clone(), input.clone());
                let spawned = std::thread::Builder::new()
                    .name("gpuworld-autotune".into())
                    .spawn(move || {
                        // The result travels as a message; a failure was logged and sent.
                        let _ = inner.tune(&set_for_thread, key, &owned_input, Delivery::World);
                    });
                match spawned {
                    Ok(_) => Ok(FALLBACK_CANDIDATE),
                    Err(error) => {
                        tracing::warn!(target: "gpuworld::tune", %error, "no autotune thread; tuning on the caller's thread");
                        self.tune(set, key, input, Delivery::Caller)
                    }
                }
            }
        }
    }

    /// The winner the persistent file holds for the key, if its checksum still matches; it is
    /// also sent to the world so the runtime's cache knows it.
    fn winner_from_file<I, O>(
        &self,
        set: &TunableSet<B, I, O>,
        key_text: &str,
        slot: Slot,
    ) -> Option<usize> {
        let stored = self.stored.lock();
        let entry = stored.get(&(set.name().to_string(), key_text.to_string()))?;
        if entry.checksum != set.checksum() || entry.winner >= set.candidates().len() {
            tracing::debug!(target: "gpuworld::tune", set = set.name(), key = key_text, "cached entry is for other candidates; ignored");
            return None;
        }
        let result = result_from_stored(entry);
        drop(stored);
        let winner = result.winner;
        self.winners.write().insert(slot, winner);
        self.client.send_tune_message(TuneMessage::Done(result));
        Some(winner)
    }

    /// Benchmarks the key and delivers the result.
    fn tune<I, O>(
        &self,
        set: &TunableSet<B, I, O>,
        key: TuneKey,
        input: &I,
        delivery: Delivery,
    ) -> Result<usize> {
        let slot = (set.identity(), key);
        let outcome = self.benchmark(set, key, input);
        match outcome {
            Ok(result) => {
                let winner = result.winner;
                self.persist(&result);
                self.client.send_tune_message(TuneMessage::Done(result));
                if delivery == Delivery::Caller {
                    self.winners.write().insert(slot, winner);
                    self.in_flight.lock().remove(&slot);
                }
                Ok(winner)
            }
            Err(error) => {
                self.client.send_tune_message(TuneMessage::Failed {
                    set: set.name().to_string(),
                    key: key.to_string(),
                });
                self.in_flight.lock().remove(&slot);
                tracing::warn!(target: "gpuworld::tune", %error, "autotune failed");
                Err(error)
            }
        }
    }

    /// Times every eligible candidate and picks the one with the lowest median.
    fn benchmark<I, O>(
        &self,
        set: &TunableSet<B, I, O>,
        key: TuneKey,
        input: &I,
    ) -> Result<TuneResult> {
        let (levels, excluded) = set.plan(&key);
        let names: Vec<&str> = set.candidates().iter().map(|c| c.name()).collect();
        let mut reasons: Vec<Option<String>> = vec![None; names.len()];
        for (index, reason) in excluded {
            reasons[index] = Some(reason.to_string());
        }
        let eligible: usize = levels.iter().map(Vec::len).sum();
        let result = |winner, outcomes| TuneResult {
            set: set.name().to_string(),
            key: key.to_string(),
            winner,
            checksum: set.checksum(),
            outcomes,
        };
        let failure = |outcomes: &[CandidateOutcome]| {
            Error::Autotune(AutotuneError::AllCandidatesFailed {
                set: set.name().into(),
                key: key.to_string().into(),
                reasons: outcomes
                    .iter()
                    .filter_map(|o| {
                        o.result.as_ref().err().map(|reason| CandidateFailure {
                            candidate: o.name.as_str().into(),
                            reason: reason.as_str().into(),
                        })
                    })
                    .collect(),
            })
        };
        if eligible == 0 {
            let outcomes: Vec<CandidateOutcome> = names
                .iter()
                .zip(&reasons)
                .map(|(name, reason)| CandidateOutcome {
                    name: name.to_string(),
                    result: Err(reason.clone().unwrap_or_default()),
                })
                .collect();
            return Err(failure(&outcomes));
        }
        if eligible == 1
            && let Some(&only) = levels.first().and_then(|level| level.first())
        {
            return Ok(result(only, Vec::new()));
        }
        // A fault left on the stream by the caller's earlier work is the caller's, not a
        // candidate's: report it before benchmarking.
        self.client.sync()?;
        let inputs = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            set.generate_inputs(&self.client, &key, input)
        }))
        .map_err(|payload| {
            Error::Autotune(AutotuneError::AllCandidatesFailed {
                set: set.name().into(),
                key: key.to_string().into(),
                reasons: vec![CandidateFailure {
                    candidate: "(input generator)".into(),
                    reason: format!("panicked: {}", panic_message(payload)).into(),
                }],
            })
        })??;
        let mut measured: Vec<Option<Measured<O>>> = names.iter().map(|_| None).collect();
        let mut order = Vec::new();
        for level in &levels {
            for &index in level {
                order.push(index);
                match measure(
                    &self.client,
                    set.candidates()[index].op(),
                    &inputs,
                    self.config.benchmark,
                ) {
                    Ok(m) => measured[index] = Some(m),
                    Err(reason) => reasons[index] = Some(reason),
                }
            }
            if level.iter().any(|&index| measured[index].is_some()) {
                break;
            }
        }
        if OUTPUT_CHECKS_ENABLED && let Some(check) = set.output_checker() {
            let outputs: Vec<Option<&O>> = measured
                .iter()
                .map(|m| m.as_ref().map(|m| &m.output))
                .collect();
            let mismatches = check_outputs(&self.client, check, &outputs);
            for (index, mismatch) in mismatches.into_iter().enumerate() {
                if let Some(reason) = mismatch {
                    measured[index] = None;
                    reasons[index] = Some(reason);
                }
            }
        }
        let outcomes: Vec<CandidateOutcome> = names
            .iter()
            .enumerate()
            .map(|(index, name)| CandidateOutcome {
                name: name.to_string(),
                result: match (&measured[index], &reasons[index]) {
                    (Some(m), _) => Ok(m.median),
                    (None, Some(reason)) => Err(reason.clone()),
                    (None, None) => {
                        Err("not benchmarked: a higher-priority group succeeded".to_string())
                    }
                },
            })
            .collect();
        let mut ranked: Vec<(usize, Duration)> = order
            .iter()
            .filter_map(|&index| measured[index].as_ref().map(|m| (index, m.median)))
            .collect();
        // Stable: equal medians keep the plan's order.
        ranked.sort_by_key(|&(_, median)| median);
        let Some(&(winner, _)) = ranked.first() else {
            return Err(failure(&outcomes));
        };
        let top: Vec<String> = ranked
            .iter()
            .take(3)
            .map(|&(index, median)| format!("{} {median:?}", names[index]))
            .collect();
        tracing::info!(target: "gpuworld::tune", set = set.name(), key = %key, winner = names[winner], top3 = %top.join(", "), "tuned");
        Ok(result(winner, outcomes))
    }

    /// Adds the result to the persistent file; a failure to write is reported, not fatal.
    fn persist(&self, result: &TuneResult) {
        let Some(persistent) = &self.persistent else {
            return;
        };
        let entry = StoredEntry {
            set: result.set.clone(),
            key: result.key.clone(),
            checksum: result.checksum,
            winner: result.winner,
            outcomes: result
                .outcomes
                .iter()
                .map(|o| StoredOutcome {
                    name: o.name.clone(),
                    median_ns: o
                        .result
                        .as_ref()
                        .ok()
                        .map(|d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)),
                    error: o.result.as_ref().err().cloned(),
                })
                .collect(),
        };
        if let Err(problem) = persistent.store(std::slice::from_ref(&entry)) {
            tracing::warn!(target: "gpuworld::tune", %problem, "autotune result not written to the cache file");
        }
        self.stored
            .lock()
            .insert((entry.set.clone(), entry.key.clone()), entry);
    }
}

fn result_from_stored(entry: &StoredEntry) -> TuneResult {
    TuneResult {
        set: entry.set.clone(),
        key: entry.key.clone(),
        winner: entry.winner,
        checksum: entry.checksum,
        outcomes: entry
            .outcomes
            .iter()
            .map(|o| CandidateOutcome {
                name: o.name.clone(),
                result: match o.median_ns {
                    Some(ns) => Ok(Duration::from_nanos(ns)),
                    None => Err(o.error.clone().unwrap_or_default()),
                },
            })
            .collect(),
    }
}

fn no_candidates<B: Backend, I, O>(set: &TunableSet<B, I, O>, key: TuneKey) -> Error {
    Error::Autotune(AutotuneError::AllCandidatesFailed {
        set: set.name().into(),
        key: key.to_string().into(),
        reasons: Vec::new(),
    })
}
