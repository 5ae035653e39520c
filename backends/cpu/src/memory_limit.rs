//! The cpu device's default memory limit: three quarters of the memory this process may use (the
//! machine's `MemTotal`, lowered by its cgroup's limit in a container), so that running out is
//! `MemoryError::OutOfMemory` through the pool's cleanup and retry, not the process killed by the
//! operating system. Where that memory cannot be read (not Linux), there is no limit, and a warning
//! says so once.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// The share of physical memory the device may take, in percent. The rest is the program's: its
/// own data, the staging of uploads and readbacks, and the copy each read returns.
pub const DEFAULT_LIMIT_PERCENT: u64 = 75;

/// The limit [`crate::CpuBackend::new`] gives a device: [`DEFAULT_LIMIT_PERCENT`] of
/// [`physical_memory`], `None` (no limit) where it cannot be read. Read once per process.
pub fn default_memory_limit() -> Option<u64> {
    static LIMIT: OnceLock<Option<u64>> = OnceLock::new();
    *LIMIT.get_or_init(|| {
        let limit = physical_memory().map(|bytes| bytes / 100 * DEFAULT_LIMIT_PERCENT);
        if limit.is_none() {
            tracing::warn!(target: "gpuworld::memory", "cannot read the machine's memory (/proc/meminfo): the cpu device has no memory limit, and allocating more than the machine has may get the process killed; set one with `[cpu] memory_limit` or `CpuBackend::with_capacity`");
        }
        limit
    })
}

/// The memory this process may use, in bytes: `MemTotal` of `/proc/meminfo`, or the memory
/// limit of its cgroup or a parent's when lower; `None` where `/proc/meminfo` cannot be read.
pub fn physical_memory() -> Option<u64> {
    let total = mem_total(&std::fs::read_to_string("/proc/meminfo").ok()?)?;
    let cgroups = std::fs::read_to_string("/proc/self/cgroup").unwrap_or_default();
    let lowest = cgroup_limit_files(&cgroups, Path::new("/sys/fs/cgroup"))
        .iter()
        .filter_map(|file| std::fs::read_to_string(file).ok())
        .filter_map(|text| cgroup_limit(&text))
        .min();
    Some(lowest.map_or(total, |limit| limit.min(total)))
}

/// The `MemTotal` line of `/proc/meminfo` text, in bytes.
fn mem_total(meminfo: &str) -> Option<u64> {
    let line = meminfo.lines().find(|line| line.starts_with("MemTotal:"))?;
    let mut words = line["MemTotal:".len()..].split_whitespace();
    let number: u64 = words.next()?.parse().ok()?;
    match words.next() {
        Some("kB") => number.checked_mul(1024),
        None => Some(number),
        Some(_) => None,
    }
}

/// The files holding the memory limits of this process's cgroups and their parents, from the
/// text of `/proc/self/cgroup`: `memory.max` (cgroup v2, `0::/path`) and
/// `memory.limit_in_bytes` (v1, `N:memory:/path`) under `root`.
fn cgroup_limit_files(proc_self_cgroup: &str, root: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    for line in proc_self_cgroup.lines() {
        let mut fields = line.splitn(3, ':');
        let (Some(_), Some(controllers), Some(path)) =
            (fields.next(), fields.next(), fields.next())
        else {
            continue;
        };
        let (dir, file) = match controllers {
            "" => (root.to_path_buf(), "memory.max"),
            list if list.split(',').any(|c| c == "memory") => {
                (root.join("memory"), "memory.limit_in_bytes")
            }
            _ => continue,
        };
        let relative = Path::new(path.trim_start_matches('/'));
        for ancestor in relative.ancestors() {
            files.push(dir.join(ancestor).join(file));
        }
    }
    files
}

/// A cgroup memory limit file's value in bytes; `None` for no limit (`max`, or v1's
/// page-rounded `i64::MAX`).
fn cgroup_limit(text: &str) -> Option<u64> {
    let bytes: u64 = text.trim().parse().ok()?;
    (bytes < (i64::MAX as u64) / 2).then_some(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mem_total_is_read_in_bytes() {
        let meminfo = "MemTotal:       24683656 kB\nMemFree:        20842592 kB\n";
        assert_eq!(mem_total(meminfo), Some(24_683_656 * 1024));
        assert_eq!(mem_total("MemFree: 1 kB\n"), None);
        assert_eq!(mem_total("MemTotal: lots kB\n"), None);
    }

    #[test]
    fn cgroup_limits_are_looked_for_in_the_process_cgroup_and_its_parents() {
        let root = Path::new("/cg");
        let v2 = cgroup_limit_files("0::/user.slice/app\n", root);
        assert_eq!(
            v2,
            [
                "/cg/user.slice/app/memory.max",
                "/cg/user.slice/memory.max",
                "/cg/memory.max"
            ]
            .map(PathBuf::from)
        );
        let v1 = cgroup_limit_files("5:cpu,cpuacct:/a\n4:memory:/box\n0::/\n", root);
        assert_eq!(
            v1,
            [
                "/cg/memory/box/memory.limit_in_bytes",
                "/cg/memory/memory.limit_in_bytes",
                "/cg/memory.max"
            ]
            .map(PathBuf::from)
        );
    }

    #[test]
    fn an_unlimited_cgroup_is_no_limit() {
        assert_eq!(cgroup_limit("max\n"), None);
        assert_eq!(cgroup_limit("9223372036854771712\n"), None);
        assert_eq!(cgroup_limit("2147483648\n"), Some(2 << 30));
    }

    #[test]
    #[cfg(target_os = "linux")]
    fn the_default_limit_is_its_share_of_the_memory_this_process_may_use() {
        let physical = physical_memory().expect("/proc/meminfo on Linux");
        let limit = default_memory_limit().expect("a limit where memory can be read");
        assert!(limit > 0);
        assert!(limit <= physical, "{limit} > {physical}");
        assert_eq!(limit, physical / 100 * DEFAULT_LIMIT_PERCENT);
    }
}
