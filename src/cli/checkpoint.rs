//! `gpuworld checkpoint inspect PATH`: what a checkpoint file holds — its header, the user's
//! metadata, and each buffer's name, size, stream and CRC-32 — after verifying every checksum
//! (a file that fails is reported as the error `restore` would give).

use super::CliError;
use clap::{Args, Subcommand};
use gpuworld::checkpoint::{CheckpointInfo, inspect};
use std::io::Write;
use std::path::PathBuf;

/// Arguments of `gpuworld checkpoint`.
#[derive(Args, Debug)]
pub struct CheckpointArgs {
    /// What to do with a checkpoint file.
    #[command(subcommand)]
    pub command: CheckpointCommand,
}

/// The subcommands of `gpuworld checkpoint`.
#[derive(Subcommand, Debug)]
pub enum CheckpointCommand {
    /// Verify a checkpoint file's checksums and print its header, metadata and buffers
    Inspect {
        /// The checkpoint file
        path: PathBuf,
    },
}

/// Runs `gpuworld checkpoint ...`.
pub fn run(args: &CheckpointArgs) -> Result<(), CliError> {
    match &args.command {
        CheckpointCommand::Inspect { path } => {
            let info = inspect(path)?;
            write!(std::io::stdout().lock(), "{}", describe(&info))?;
            Ok(())
        }
    }
}

/// The report `inspect` prints.
fn describe(info: &CheckpointInfo) -> String {
    let mut text = format!("checkpoint: {}\n", info.path.display());
    text += &format!(
        "format:     version {}, {} bytes ({} of metadata)\n",
        info.version, info.file_len, info.metadata_len
    );
    text += &format!("taken on:   {} ({})\n", info.backend, info.device);
    text += &format!("tick:       {}\n", info.meta.tick);
    text += &format!("rng state:  {}\n", bytes_line(&info.meta.rng_state));
    text += &format!("app data:   {}\n", bytes_line(&info.meta.app_data));
    let total: u64 = info.buffers.iter().map(|b| b.len).sum();
    text += &format!("buffers:    {}, {total} bytes\n", info.buffers.len());
    let width = info
        .buffers
        .iter()
        .map(|b| b.name.len())
        .max()
        .unwrap_or(0)
        .max(4);
    text += &format!(
        "  {:>3}  {:<width$}  {:>12}  {:>6}  {:>8}  {:>12}\n",
        "#", "name", "bytes", "stream", "crc32", "offset"
    );
    for (index, buffer) in info.buffers.iter().enumerate() {
        text += &format!(
            "  {:>3}  {:<width$}  {:>12}  {:>6}  {:08x}  {:>12}\n",
            index,
            buffer.name,
            buffer.len,
            format!("s{}", buffer.stream.value),
            buffer.checksum,
            buffer.offset
        );
    }
    text += "checksums:  header, metadata, every buffer and the trailer verified\n";
    text
}

/// `n bytes: "text"` for printable text, else `n bytes: hex…` with the hex cut after 32 bytes.
fn bytes_line(bytes: &[u8]) -> String {
    if bytes.is_empty() {
        return "none".into();
    }
    if let Ok(text) = std::str::from_utf8(bytes)
        && text.chars().all(|c| !c.is_control())
    {
        return format!("{} bytes: {text:?}", bytes.len());
    }
    let shown: String = bytes.iter().take(32).map(|b| format!("{b:02x}")).collect();
    let more = if bytes.len() > 32 { "…" } else { "" };
    format!("{} bytes: {shown}{more}", bytes.len())
}
