//! `gpuworld config`: prints the effective configuration, each value with where it came from
//! (default, `gpuworld.toml`, a `GPUWORLD_*` variable).

use super::CliError;
use gpuworld::config::Settings;
use std::io::Write;

/// Loads the configuration and prints it; a bad file or variable is the error.
pub fn run() -> Result<(), CliError> {
    let settings = Settings::load()?;
    write!(std::io::stdout().lock(), "{}", settings.describe())?;
    Ok(())
}
