//! `gpuworld demo --devices N`: the field split over N cpu or sim devices, halos exchanged every
//! step, equals the one-device run bit for bit (the binary checks it and fails otherwise).

use std::process::Command;

fn demo(args: &[&str]) -> (bool, String, String) {
    let dir = std::env::temp_dir().join(format!("gpuworld-demo-devices-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let output = dir.join(format!("{}.png", args.join("_").replace("--", "")));
    let run = Command::new(env!("CARGO_BIN_EXE_gpuworld"))
        .arg("demo")
        .args(args)
        .args(["--quiet", "--output"])
        .arg(&output)
        .output()
        .expect("the demo binary runs");
    (
        run.status.success(),
        String::from_utf8_lossy(&run.stdout).into_owned(),
        String::from_utf8_lossy(&run.stderr).into_owned(),
    )
}

#[test]
fn the_field_split_over_devices_equals_the_one_device_run_bit_for_bit() {
    for backend in ["cpu", "sim"] {
        for devices in ["2", "3", "4"] {
            let args = [
                "--backend",
                backend,
                "--devices",
                devices,
                "--size",
                "37",
                "--ticks",
                "25",
            ];
            let (ok, stdout, stderr) = demo(&args);
            assert!(ok, "{args:?} failed: {stderr}");
            assert!(
                stdout.contains(&format!("on {backend} ({devices} devices: {backend}:0")),
                "{stdout}"
            );
            assert!(stdout.contains("equal bit for bit"), "{stdout}");
        }
    }
}

#[test]
fn more_devices_than_rows_is_refused() {
    let (ok, _, stderr) = demo(&["--devices", "6", "--size", "5", "--ticks", "1"]);
    assert!(!ok);
    assert!(
        stderr.contains("6 devices for a field of 5 rows"),
        "{stderr}"
    );
}

/// `gpuworld launch --nproc-per-node N -- gpuworld demo --distributed ...`: one slab per
/// process, halos through the process group (TCP for cpu and sim ranks), checked on rank 0.
fn demo_across_processes(ranks: &str, args: &[&str]) -> (bool, String, String) {
    let dir = std::env::temp_dir().join(format!("gpuworld-demo-ranks-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let output = dir.join(format!("{ranks}-{}.png", args.join("_").replace("--", "")));
    let binary = env!("CARGO_BIN_EXE_gpuworld");
    let run = Command::new(binary)
        .args(["launch", "--nproc-per-node", ranks, "--", binary, "demo"])
        .arg("--distributed")
        .args(args)
        .args(["--quiet", "--output"])
        .arg(&output)
        .output()
        .expect("the launcher runs");
    (
        run.status.success(),
        String::from_utf8_lossy(&run.stdout).into_owned(),
        String::from_utf8_lossy(&run.stderr).into_owned(),
    )
}

#[test]
fn the_field_split_across_processes_equals_the_one_device_run_bit_for_bit() {
    for backend in ["cpu", "sim"] {
        for ranks in ["2", "3"] {
            let args = ["--backend", backend, "--size", "37", "--ticks", "25"];
            let (ok, stdout, stderr) = demo_across_processes(ranks, &args);
            assert!(ok, "{ranks} ranks, {args:?} failed: {stderr}");
            assert!(stdout.contains(&format!("({ranks} processes")), "{stdout}");
            assert!(stdout.contains("equal bit for bit"), "{stdout}");
            assert!(stdout.contains("halos over TCP"), "{stdout}");
        }
    }
}

#[test]
fn more_processes_than_rows_fail_every_rank() {
    let (ok, _, stderr) =
        demo_across_processes("4", &["--backend", "cpu", "--size", "3", "--ticks", "1"]);
    assert!(!ok);
    assert!(
        stderr.contains("4 devices for a field of 3 rows"),
        "{stderr}"
    );
}
