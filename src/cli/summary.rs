//! The closing report of `gpuworld demo`: what ran, on which device, what it cost, and what the
//! final field looks like, printed as an aligned block on stdout.

use super::field_stats::FieldStats;
use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

/// Everything the closing report shows.
pub struct RunSummary {
    /// Grid side in cells.
    pub size: u32,
    /// Backend name, e.g. `cpu`.
    pub backend: &'static str,
    /// Device name from its properties.
    pub device: String,
    /// Simulation steps asked for.
    pub steps: u64,
    /// Who advanced the runtime, e.g. `device-thread`.
    pub driver: &'static str,
    /// Runtime ticks run, including the ones spent on uploads, sync and readback.
    pub ticks: u64,
    /// Kernel launches submitted.
    pub launches: u64,
    /// Bytes copied host-to-device.
    pub bytes_written: u64,
    /// Bytes copied device-to-host.
    pub bytes_read: u64,
    /// Highest device memory in use.
    pub peak_memory: u64,
    /// Time from the first upload until the last step had run.
    pub elapsed: Duration,
    /// Statistics of the final field.
    pub field: FieldStats,
    /// Where the PNG went.
    pub output: PathBuf,
}

impl fmt::Display for RunSummary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let seconds = self.elapsed.as_secs_f64();
        writeln!(
            f,
            "gpuworld demo: heat diffusion {size}x{size} on {} ({})",
            self.backend,
            self.device,
            size = self.size
        )?;
        writeln!(
            f,
            "  steps            {} ({} driver)",
            self.steps, self.driver
        )?;
        writeln!(f, "  ticks            {}", self.ticks)?;
        writeln!(f, "  launches         {}", self.launches)?;
        writeln!(
            f,
            "  bytes moved      {} written, {} read",
            format_bytes(self.bytes_written),
            format_bytes(self.bytes_read)
        )?;
        writeln!(f, "  peak memory      {}", format_bytes(self.peak_memory))?;
        write!(f, "  wall time        {seconds:.2} s")?;
        if self.steps > 0 {
            write!(f, " ({:.2} ms/step)", seconds * 1e3 / self.steps as f64)?;
        }
        writeln!(f)?;
        writeln!(
            f,
            "  field            min {:.3} max {:.3} mean {:.4}",
            self.field.min, self.field.max, self.field.mean
        )?;
        writeln!(f, "  wrote            {}", self.output.display())
    }
}

/// `bytes` in the largest binary unit that keeps the number at or above 1, e.g. `2.0 MiB`.
pub fn format_bytes(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["KiB", "MiB", "GiB", "TiB", "PiB"];
    if bytes < 1024 {
        return format!("{bytes} B");
    }
    let mut value = bytes as f64 / 1024.0;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    format!("{value:.1} {}", UNITS[unit])
}
