//! Stage 7, tune-result ingestion: moves autotune messages that arrived from a blocking or a
//! background benchmark (a key became pending, was tuned, or failed) into the tune cache.
//! Owns `TuneCache`, which clients share read-only through an `Arc`. Never blocks on tuning.

use super::tick::TickStage;
use bevy_ecs::prelude::*;
use parking_lot::{Mutex, RwLock};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

/// How one candidate fared when a key was tuned.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CandidateOutcome {
    /// The candidate's name.
    pub name: String,
    /// The median time of one run, or why the candidate failed or was not run.
    pub result: std::result::Result<Duration, String>,
}

/// The outcome of tuning one key of one tunable set.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TuneResult {
    /// The tunable set's name.
    pub set: String,
    /// The key within the set.
    pub key: String,
    /// Index of the winning candidate.
    pub winner: usize,
    /// Checksum of the candidates' names; an entry whose checksum changed is stale.
    pub checksum: u64,
    /// Every candidate's outcome, in the set's order (empty when nothing was benchmarked).
    pub outcomes: Vec<CandidateOutcome>,
}

/// A message from a tuner to the tune stage.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TuneMessage {
    /// Tuning of `key` started in the background; callers use the fallback meanwhile.
    Pending {
        /// The tunable set's name.
        set: String,
        /// The key being tuned.
        key: String,
    },
    /// Tuning finished with a winner.
    Done(TuneResult),
    /// Tuning finished without a winner (every candidate failed): the pending mark goes.
    Failed {
        /// The tunable set's name.
        set: String,
        /// The key that failed.
        key: String,
    },
}

/// Messages waiting for the next tick.
#[derive(Debug, Resource, Clone, Default)]
pub struct TuneResults(pub Arc<Mutex<Vec<TuneMessage>>>);

impl TuneResults {
    /// Queues a message for the next tick.
    pub fn send(&self, message: TuneMessage) {
        self.0.lock().push(message);
    }
}

/// What the cache knows about one (set, key).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TuneEntry {
    /// A tuner is benchmarking it.
    Pending,
    /// Tuned: the winner among candidates whose names have checksum `checksum`.
    Tuned {
        /// Index of the winning candidate.
        winner: usize,
        /// Checksum of the candidates' names.
        checksum: u64,
        /// Every candidate's outcome.
        outcomes: Vec<CandidateOutcome>,
    },
}

/// The winner per (set, key), shared with clients: readers never take the runtime lock. The
/// tune stage is its only writer, through `ResMut` (writing needs `&mut self`), so the
/// schedule's ambiguity check sees the write.
#[derive(Resource, Clone, Default, Debug)]
pub struct TuneCache(Arc<RwLock<HashMap<(String, String), TuneEntry>>>);

impl TuneCache {
    /// The winner for `key` of `set`, if tuned with candidates of checksum `checksum`.
    pub fn winner(&self, set: &str, key: &str, checksum: u64) -> Option<usize> {
        match self.entry(set, key)? {
            TuneEntry::Tuned {
                winner,
                checksum: c,
                ..
            } if c == checksum => Some(winner),
            _ => None,
        }
    }

    /// What the cache holds for `key` of `set`.
    pub fn entry(&self, set: &str, key: &str) -> Option<TuneEntry> {
        self.0
            .read()
            .get(&(set.to_string(), key.to_string()))
            .cloned()
    }

    /// Whether a tuner is benchmarking `key` of `set`.
    pub fn is_pending(&self, set: &str, key: &str) -> bool {
        matches!(self.entry(set, key), Some(TuneEntry::Pending))
    }

    /// Number of (set, key) entries, pending ones included.
    pub fn len(&self) -> usize {
        self.0.read().len()
    }

    /// Whether the cache holds nothing.
    pub fn is_empty(&self) -> bool {
        self.0.read().is_empty()
    }

    /// Every entry, sorted by set and key.
    pub fn entries(&self) -> Vec<((String, String), TuneEntry)> {
        let mut entries: Vec<_> = self
            .0
            .read()
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        entries.sort_by(|a, b| a.0.cmp(&b.0));
        entries
    }

    fn apply(&mut self, message: TuneMessage) {
        let mut map = self.0.write();
        match message {
            TuneMessage::Pending { set, key } => {
                // A finished entry stays usable until a new result replaces it.
                map.entry((set, key)).or_insert(TuneEntry::Pending);
            }
            TuneMessage::Done(result) => {
                map.insert(
                    (result.set, result.key),
                    TuneEntry::Tuned {
                        winner: result.winner,
                        checksum: result.checksum,
                        outcomes: result.outcomes,
                    },
                );
            }
            TuneMessage::Failed { set, key } => {
                let slot = (set, key);
                if map.get(&slot) == Some(&TuneEntry::Pending) {
                    map.remove(&slot);
                }
            }
        }
    }
}

/// Registers the tune stage: its message queue, its cache and its system.
pub fn build(world: &mut World, schedule: &mut Schedule) {
    world.init_resource::<TuneResults>();
    world.init_resource::<TuneCache>();
    schedule.add_systems(ingest_tune_results.in_set(TickStage::TuneIngestion));
}

/// The stage's handle on [`TuneResults`], cloned when the tick is built.
#[derive(Debug)]
pub struct TuneQueue(TuneResults);

impl FromWorld for TuneQueue {
    fn from_world(world: &mut World) -> TuneQueue {
        TuneQueue(world.resource::<TuneResults>().clone())
    }
}

/// Moves arrived messages into the cache. The queue is a shared handle, cloned at the system's
/// first run: a tick without messages (nearly all of them) reads only it.
pub fn ingest_tune_results(queue: Local<TuneQueue>, mut cache: ResMut<TuneCache>) {
    let _span = tracing::trace_span!(target: "gpuworld::tune", "tune ingestion").entered();
    let messages = std::mem::take(&mut *queue.0.0.lock());
    if messages.is_empty() {
        return;
    }
    for message in messages {
        match &message {
            TuneMessage::Pending { set, key } => {
                tracing::debug!(target: "gpuworld::tune", %set, %key, "tuning pending");
            }
            TuneMessage::Done(result) => {
                tracing::info!(target: "gpuworld::tune", set = %result.set, key = %result.key, winner = result.winner, "tune result cached");
            }
            TuneMessage::Failed { set, key } => {
                tracing::warn!(target: "gpuworld::tune", %set, %key, "tuning failed; nothing cached");
            }
        }
        cache.apply(message);
    }
}
