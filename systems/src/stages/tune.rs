//! Stage 7, tune-result ingestion: moves autotune results that arrived as messages (from a
//! blocking or a background benchmark) into the tune cache. Owns `TuneCache`. Never blocks.

use bevy_ecs::prelude::*;
use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::Arc;

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
}

/// Results waiting for the next tick.
#[derive(Resource, Clone, Default)]
pub struct TuneResults(pub Arc<Mutex<Vec<TuneResult>>>);

/// The winner per (set, key), with its checksum.
#[derive(Resource, Default, Debug)]
pub struct TuneCache(pub HashMap<(String, String), (usize, u64)>);

impl TuneCache {
    /// The winner for `key` of `set`, if tuned with candidates of checksum `checksum`.
    pub fn winner(&self, set: &str, key: &str, checksum: u64) -> Option<usize> {
        self.0
            .get(&(set.to_string(), key.to_string()))
            .filter(|(_, c)| *c == checksum)
            .map(|(w, _)| *w)
    }
}

/// Moves arrived results into the cache.
pub fn ingest_tune_results(results: Res<TuneResults>, mut cache: ResMut<TuneCache>) {
    for result in results.0.lock().drain(..) {
        tracing::info!(target: "gpuworld::tune", set = %result.set, key = %result.key, winner = result.winner, "tune result cached");
        cache
            .0
            .insert((result.set, result.key), (result.winner, result.checksum));
    }
}
