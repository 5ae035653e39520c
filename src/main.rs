//! The `gpuworld` job binary: parses the command line, sets up logging and runs one subcommand.
//! Every failure ends here as `error: ...` on stderr with the exit code its kind calls for.

mod cli;

use clap::Parser;
use std::io::{IsTerminal, Write};
use std::process::ExitCode;
use tracing_subscriber::EnvFilter;

fn main() -> ExitCode {
    init_tracing();
    let args = cli::Cli::parse();
    match cli::run(args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            // A closed stderr leaves nowhere to report to; the exit code still tells.
            let _ = writeln!(std::io::stderr(), "error: {error}");
            error.exit_code()
        }
    }
}

fn init_tracing() {
    // The log filter: GPUWORLD_LOG, else RUST_LOG, else `log` in gpuworld.toml, else `warn`. A
    // bad configuration is reported by the subcommand that loads it; logging still starts.
    let settings = gpuworld::config::Settings::load().unwrap_or_default();
    let filter = match EnvFilter::try_new(&settings.log.value) {
        Ok(filter) => filter,
        Err(error) => {
            // A malformed filter must not stop the job, but it must not pass silently either.
            let _ = writeln!(
                std::io::stderr(),
                "warning: ignoring the malformed log filter `{}` ({}): {error}; logging at `warn`",
                settings.log.value,
                settings.log.source,
            );
            EnvFilter::new("warn")
        }
    };
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        // Colour codes would only litter a log file or a CI capture.
        .with_ansi(std::io::stderr().is_terminal())
        .init();
}
