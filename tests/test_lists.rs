//! The test binaries built on `tests/common/harness.rs` (`harness = false`) run only the tests
//! their `test_main!` lists: a `#[test]` function there is compiled out and never runs, without a
//! word. This guard fails on any such file.

use std::path::Path;

#[test]
fn no_test_binary_with_its_own_list_has_a_test_attribute_it_would_never_run() {
    let tests = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests");
    let mut offenders = Vec::new();
    let mut files = vec![tests.clone()];
    while let Some(path) = files.pop() {
        if path.is_dir() {
            let entries = std::fs::read_dir(&path).expect("the tests directory is readable");
            files.extend(entries.map(|entry| entry.expect("a directory entry").path()));
            continue;
        }
        if path.extension().is_none_or(|extension| extension != "rs") {
            continue;
        }
        let text = std::fs::read_to_string(&path).expect("a test file is readable");
        let lists_its_tests = text.lines().any(|line| line.starts_with("test_main!["));
        if lists_its_tests && text.lines().any(|line| line.trim() == "#[test]") {
            offenders.push(path.display().to_string());
        }
    }
    assert!(
        offenders.is_empty(),
        "these files list their tests in test_main! (harness = false) but also mark functions \
         #[test], which would never run; add them to the list instead: {offenders:?}"
    );
}
