//! `gpuworld demo --checkpoint-every N --checkpoint PATH`, `--resume PATH` and `gpuworld
//! checkpoint inspect PATH`: a demo interrupted and resumed (on the same backend or another)
//! ends with the very field of an uninterrupted run, and `inspect` shows what a file holds.

use std::path::Path;
use std::process::{Command, Output};

fn gpuworld(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_gpuworld"))
        .args(args)
        .output()
        .expect("the gpuworld binary runs")
}

/// `gpuworld demo` on a small grid with `args`, writing its PNG to `png`; panics on failure.
fn demo(png: &Path, args: &[&str]) {
    let png = png.to_str().expect("a UTF-8 path");
    let mut all = vec!["demo", "--quiet", "--size", "37", "--output", png];
    all.extend_from_slice(args);
    let run = gpuworld(&all);
    assert!(
        run.status.success(),
        "{all:?} failed: {}",
        String::from_utf8_lossy(&run.stderr)
    );
}

fn path(dir: &Path, name: &str) -> String {
    dir.join(name).to_str().expect("a UTF-8 path").to_string()
}

#[test]
fn a_resumed_demo_ends_with_the_field_of_an_uninterrupted_run() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    for (first, second) in [
        ("cpu", "cpu"),
        ("sim", "sim"),
        ("cpu", "sim"),
        ("sim", "cpu"),
    ] {
        let saved = path(d, "saved.ckpt");
        // Interrupted after step 25; the newest checkpoint is of step 20.
        demo(
            &d.join("cut.png"),
            &[
                "--backend",
                first,
                "--ticks",
                "25",
                "--checkpoint-every",
                "10",
                "--checkpoint",
                &saved,
            ],
        );
        let info = gpuworld::checkpoint::inspect(&saved).unwrap();
        assert_eq!(info.meta.tick, 20);
        let resumed = path(d, "resumed.ckpt");
        demo(
            &d.join("resumed.png"),
            &[
                "--backend",
                second,
                "--ticks",
                "40",
                "--resume",
                &saved,
                "--checkpoint",
                &resumed,
            ],
        );
        let whole = path(d, "whole.ckpt");
        demo(
            &d.join("whole.png"),
            &["--backend", first, "--ticks", "40", "--checkpoint", &whole],
        );
        let resumed = gpuworld::checkpoint::inspect(&resumed).unwrap();
        let whole = gpuworld::checkpoint::inspect(&whole).unwrap();
        assert_eq!(resumed.meta.tick, 40);
        let sums = |info: &gpuworld::checkpoint::CheckpointInfo| {
            info.buffers
                .iter()
                .map(|b| (b.name.clone(), b.checksum))
                .collect::<Vec<_>>()
        };
        assert_eq!(sums(&resumed), sums(&whole), "{first} -> {second}");
        assert_eq!(
            std::fs::read(d.join("resumed.png")).unwrap(),
            std::fs::read(d.join("whole.png")).unwrap(),
            "{first} -> {second}: the PNGs differ"
        );
    }
}

#[test]
fn inspect_prints_the_header_metadata_and_buffers() {
    let dir = tempfile::tempdir().unwrap();
    let saved = path(dir.path(), "s.ckpt");
    demo(
        &dir.path().join("s.png"),
        &["--ticks", "5", "--checkpoint", &saved],
    );
    let run = gpuworld(&["checkpoint", "inspect", &saved]);
    let stdout = String::from_utf8_lossy(&run.stdout);
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    let info = gpuworld::checkpoint::inspect(&saved).unwrap();
    assert!(stdout.contains("format:     version 1"), "{stdout}");
    assert!(stdout.contains("tick:       5"), "{stdout}");
    assert!(stdout.contains("taken on:   cpu"), "{stdout}");
    for buffer in &info.buffers {
        assert!(stdout.contains(&buffer.name), "{stdout}");
        assert!(
            stdout.contains(&format!("{:08x}", buffer.checksum)),
            "{stdout}"
        );
        assert!(stdout.contains(&format!("{}", buffer.len)), "{stdout}");
    }
    assert!(stdout.contains("verified"), "{stdout}");

    let mut bytes = std::fs::read(&saved).unwrap();
    let middle = bytes.len() / 2;
    bytes[middle] ^= 0x40;
    std::fs::write(&saved, &bytes).unwrap();
    let run = gpuworld(&["checkpoint", "inspect", &saved]);
    assert!(!run.status.success());
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(stderr.contains("is corrupted"), "{stderr}");
}

#[test]
fn resuming_a_checkpoint_of_another_grid_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let saved = path(dir.path(), "s.ckpt");
    demo(
        &dir.path().join("s.png"),
        &["--ticks", "3", "--checkpoint", &saved],
    );
    let png = path(dir.path(), "r.png");
    let run = gpuworld(&[
        "demo", "--quiet", "--size", "40", "--ticks", "6", "--resume", &saved, "--output", &png,
    ]);
    assert!(!run.status.success());
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(stderr.contains("cannot resume from"), "{stderr}");
    assert!(stderr.contains("side=37"), "{stderr}");
}
