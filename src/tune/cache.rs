//! The persistent tune cache: one JSON file per device and crate version, in
//! `GPUWORLD_AUTOTUNE_CACHE` or `target/gpuworld-autotune/`. Writers merge under an advisory
//! lock and replace the file atomically (write a temporary file, then rename), so two processes
//! never lose each other's entries and a reader never sees half a file. A corrupt file is
//! reported and ignored, never fatal.

use super::settings::CACHE_DIR_ENV;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// Version of the file's layout; a file of another version is ignored.
const FORMAT: u32 = 1;

/// One candidate's outcome as the file keeps it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct StoredOutcome {
    /// The candidate's name.
    pub name: String,
    /// Median time of one run, in nanoseconds, when it succeeded.
    pub median_ns: Option<u64>,
    /// Why it failed or was not run.
    pub error: Option<String>,
}

/// One tuned (set, key) as the file keeps it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct StoredEntry {
    /// The tunable set's name.
    pub set: String,
    /// The key, as displayed.
    pub key: String,
    /// Checksum of the candidates' names when it was tuned.
    pub checksum: u64,
    /// Index of the winner.
    pub winner: usize,
    /// Every candidate's outcome.
    pub outcomes: Vec<StoredOutcome>,
}

#[derive(Debug, Serialize, Deserialize)]
struct CacheFile {
    format: u32,
    device: String,
    crate_version: String,
    entries: Vec<StoredEntry>,
}

/// The cache file of one device.
#[derive(Clone, Debug)]
pub struct PersistentCache {
    path: PathBuf,
    device: String,
}

/// The default cache directory: the configured one (`GPUWORLD_AUTOTUNE_CACHE`, else
/// `autotune.cache` in `gpuworld.toml`, see `gpuworld::config`), else `gpuworld-autotune` in
/// `CARGO_TARGET_DIR`, else `target/gpuworld-autotune` under the current directory.
pub fn default_cache_dir() -> PathBuf {
    match crate::config::Settings::load() {
        Ok(settings) => {
            if let Some(dir) = settings.autotune_cache.value {
                return dir;
            }
        }
        Err(error) => {
            tracing::warn!(target: "gpuworld::tune", %error, "configuration ignored for the autotune cache");
            if let Some(dir) = std::env::var_os(CACHE_DIR_ENV).filter(|d| !d.is_empty()) {
                return PathBuf::from(dir);
            }
        }
    }
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .filter(|d| !d.is_empty())
        .map_or_else(|| PathBuf::from("target"), PathBuf::from);
    target.join("gpuworld-autotune")
}

impl PersistentCache {
    /// The cache file for `device` (a backend and device name) in `dir`.
    pub fn new(dir: &Path, device: &str) -> PersistentCache {
        let safe: String = device
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '-' {
                    c
                } else {
                    '_'
                }
            })
            .collect();
        let file = format!("{safe}-{}.json", env!("CARGO_PKG_VERSION"));
        PersistentCache {
            path: dir.join(file),
            device: device.to_string(),
        }
    }

    /// Where the file lives.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The entries in the file: none when it does not exist; `Err` says why a file that exists
    /// could not be used (the caller reports it and goes on without it).
    pub fn load(&self) -> Result<Vec<StoredEntry>, String> {
        match fs::read(&self.path) {
            Ok(bytes) => self.parse(&bytes),
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(Vec::new()),
            Err(error) => Err(format!("cannot read {}: {error}", self.path.display())),
        }
    }

    fn parse(&self, bytes: &[u8]) -> Result<Vec<StoredEntry>, String> {
        let file: CacheFile = serde_json::from_slice(bytes)
            .map_err(|error| format!("{} is corrupt: {error}", self.path.display()))?;
        if file.format != FORMAT {
            return Err(format!(
                "{} has format {}, this gpuworld reads format {FORMAT}",
                self.path.display(),
                file.format
            ));
        }
        Ok(file.entries)
    }

    /// Adds `entries` to the file (replacing entries of the same set and key), keeping what
    /// other writers stored meanwhile: under an exclusive lock on a side file, reads the current
    /// file, merges, writes a temporary file in the same directory and renames it over the file.
    pub fn store(&self, entries: &[StoredEntry]) -> Result<(), String> {
        let dir = self.path.parent().unwrap_or(Path::new("."));
        fs::create_dir_all(dir)
            .map_err(|error| format!("cannot create {}: {error}", dir.display()))?;
        let lock_path = self.path.with_extension("json.lock");
        let lock = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&lock_path)
            .map_err(|error| format!("cannot open {}: {error}", lock_path.display()))?;
        lock.lock()
            .map_err(|error| format!("cannot lock {}: {error}", lock_path.display()))?;
        let result = self.merge_and_replace(dir, entries);
        // Dropping the file releases the lock too; unlocking first makes the order explicit.
        let _ = lock.unlock();
        result
    }

    fn merge_and_replace(&self, dir: &Path, entries: &[StoredEntry]) -> Result<(), String> {
        let current = match self.load() {
            Ok(current) => current,
            Err(problem) => {
                tracing::warn!(target: "gpuworld::tune", %problem, "replacing the unusable autotune cache file");
                Vec::new()
            }
        };
        let mut merged: BTreeMap<(String, String), StoredEntry> = current
            .into_iter()
            .map(|e| ((e.set.clone(), e.key.clone()), e))
            .collect();
        for entry in entries {
            merged.insert((entry.set.clone(), entry.key.clone()), entry.clone());
        }
        let file = CacheFile {
            format: FORMAT,
            device: self.device.clone(),
            crate_version: env!("CARGO_PKG_VERSION").to_string(),
            entries: merged.into_values().collect(),
        };
        let text = serde_json::to_vec_pretty(&file)
            .map_err(|error| format!("cannot encode the autotune cache: {error}"))?;
        static TEMP_COUNTER: AtomicU64 = AtomicU64::new(0);
        let temp = dir.join(format!(
            ".{}.{}.{}.tmp",
            self.path
                .file_name()
                .map_or_else(String::new, |n| n.to_string_lossy().into_owned()),
            std::process::id(),
            TEMP_COUNTER.fetch_add(1, Ordering::Relaxed)
        ));
        let written = File::create(&temp)
            .and_then(|mut f| f.write_all(&text).and_then(|()| f.sync_all()))
            .and_then(|()| fs::rename(&temp, &self.path));
        written.map_err(|error| {
            let _ = fs::remove_file(&temp);
            format!("cannot write {}: {error}", self.path.display())
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_file_is_named_after_the_device_and_the_crate_version() {
        let cache = PersistentCache::new(Path::new("/cache"), "wgpu-NVIDIA H200 (Vulkan)");
        let expected = format!(
            "/cache/wgpu-NVIDIA_H200__Vulkan_-{}.json",
            env!("CARGO_PKG_VERSION")
        );
        assert_eq!(cache.path(), Path::new(&expected));
    }

    #[test]
    fn a_file_of_another_format_is_reported_not_used() {
        let cache = PersistentCache::new(Path::new("/cache"), "sim");
        let other = br#"{"format": 99, "device": "sim", "crate_version": "0", "entries": []}"#;
        assert!(
            cache
                .parse(other)
                .is_err_and(|problem| problem.contains("format 99"))
        );
    }
}
