//! The per-kernel table `gpuworld demo` prints at the end: launches, bytes bound and device
//! time (total, mean, p50, p99) of each kernel, from `ComputeClient::kernel_stats`.

use gpuworld::KernelStat;
use std::fmt;
use std::time::Duration;

/// The kernel statistics of a run, as a table.
pub struct KernelTable(pub Vec<KernelStat>);

fn micros(duration: Duration) -> String {
    format!("{:.1} us", duration.as_secs_f64() * 1e6)
}

impl fmt::Display for KernelTable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "{:<16} {:>9} {:>12} {:>12} {:>11} {:>11} {:>11}",
            "kernel", "launches", "bytes bound", "total", "mean", "p50", "p99"
        )?;
        for stat in &self.0 {
            let times = match stat.device_time {
                Some(t) => [t.total, t.mean, t.p50, t.p99].map(micros),
                None => ["untimed".to_string(), "-".into(), "-".into(), "-".into()],
            };
            writeln!(
                f,
                "{:<16} {:>9} {:>12} {:>12} {:>11} {:>11} {:>11}",
                stat.name, stat.launches, stat.bytes_bound, times[0], times[1], times[2], times[3]
            )?;
        }
        Ok(())
    }
}
