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
