//! A test that keeps the workspace's source in rooms a reader can hold (issue 50): no file over
//! [`MAX_FILE_LINES`] lines in the crates' sources (`hal/src`, `systems/src`, `backends/*/src`,
//! `macros/src`, `src`), and no function over [`MAX_FN_LINES`] lines in the core (`hal/src`, `systems/src`,
//! `backends/sim/src`). Each offender is named with its length.
//!
//! What is counted, as the import-graph test reads the same files (`import_graph.rs`):
//! - A file's lines up to its unit tests (`#[cfg(test)]` followed by `mod ...`), which are left
//!   out; files named `tests.rs` and every file under a folder named `tests` are test code and
//!   are left out whole.
//! - A function's lines from the line of its `fn` to the line of its body's closing brace, both
//!   included (doc comments and attributes above it are not counted). The body is found by
//!   matching braces after the `fn`, skipping comments, string literals (raw ones too) and
//!   character literals. Limits of so simple a reader: a function nested in another counts inside
//!   its parent's lines as well as on its own; a `fn` inside a macro's body is measured like any
//!   other; a `{` in the signature before the body (a const generic block such as
//!   `Foo<{ N }>`) would be taken for the body's start. None of these occur in the core today.

use std::path::{Path, PathBuf};

/// The most lines a source file may have.
const MAX_FILE_LINES: usize = 800;
/// The most lines a function of the core may have.
const MAX_FN_LINES: usize = 100;

/// The crates' source folders whose files are measured, relative to the workspace.
const SOURCE_DIRS: &[&str] = &[
    "hal/src",
    "systems/src",
    "src",
    "backends/sim/src",
    "backends/cpu/src",
    "backends/wgpu/src",
    "backends/cuda/src",
    "macros/src",
];

/// The core's source folders, whose functions are measured as well.
const CORE_DIRS: &[&str] = &["hal/src", "systems/src", "backends/sim/src"];

/// Offenders that were there when this test began (2026-12-06), as `(file, function)` (the
/// function empty for a file's length): each is debt to pay by splitting it into named steps. An
/// offender not listed fails the test, and a listed one that no longer offends must be removed,
/// so the list only shrinks.
const KNOWN_OFFENDERS: &[(&str, &str)] = &[];

/// Every `.rs` file under `dir`, test files and folders left out.
fn source_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        let name = entry.file_name();
        if path.is_dir() {
            if name != "tests" {
                source_files(&path, out);
            }
        } else if path.extension().is_some_and(|e| e == "rs") && name != "tests.rs" {
            out.push(path);
        }
    }
}

/// `text` up to its unit tests.
fn without_tests(text: &str) -> &str {
    text.find("#[cfg(test)]\nmod ")
        .map_or(text, |at| &text[..at])
}

/// Where the literal or comment starting at `at` ends (the byte after it), if one starts there.
fn skip_literal(src: &[u8], at: usize) -> Option<usize> {
    let rest = &src[at..];
    if rest.starts_with(b"//") {
        return Some(at + rest.iter().position(|b| *b == b'\n').unwrap_or(rest.len()));
    }
    if rest.starts_with(b"/*") {
        let (mut depth, mut i) = (0usize, at);
        while i < src.len() {
            if src[i..].starts_with(b"/*") {
                depth += 1;
                i += 2;
            } else if src[i..].starts_with(b"*/") {
                depth -= 1;
                i += 2;
                if depth == 0 {
                    return Some(i);
                }
            } else {
                i += 1;
            }
        }
        return Some(src.len());
    }
    let ident_before = at > 0 && (src[at - 1].is_ascii_alphanumeric() || src[at - 1] == b'_');
    // Raw strings: r"..", r#".."#, br#".."#.
    if !ident_before && (rest.starts_with(b"r\"") || rest.starts_with(b"r#")) {
        let hashes = rest[1..].iter().take_while(|b| **b == b'#').count();
        if rest.get(1 + hashes) == Some(&b'"') {
            let mut close = vec![b'"'];
            close.extend(std::iter::repeat_n(b'#', hashes));
            let body = at + 2 + hashes;
            let end = src[body..]
                .windows(close.len())
                .position(|w| w == close.as_slice())
                .map_or(src.len(), |p| body + p + close.len());
            return Some(end);
        }
    }
    if rest[0] == b'"' {
        let mut i = at + 1;
        while i < src.len() {
            match src[i] {
                b'\\' => i += 2,
                b'"' => return Some(i + 1),
                _ => i += 1,
            }
        }
        return Some(src.len());
    }
    // A character literal ('x', '\n', '\u{..}'), not a lifetime ('a).
    if rest[0] == b'\'' {
        if rest.get(1) == Some(&b'\\') {
            let close = rest[2..].iter().position(|b| *b == b'\'')?;
            return Some(at + 2 + close + 1);
        }
        let width = std::str::from_utf8(&rest[1..rest.len().min(5)])
            .or_else(|e| std::str::from_utf8(&rest[1..1 + e.valid_up_to()]))
            .ok()
            .and_then(|s| s.chars().next())
            .map_or(1, char::len_utf8);
        if rest.get(1 + width) == Some(&b'\'') {
            return Some(at + 2 + width);
        }
    }
    None
}

/// Each function of `text` (its unit tests left out) as (name, line of its `fn`, lines long).
fn functions(text: &str) -> Vec<(String, usize, usize)> {
    let src = without_tests(text).as_bytes();
    let line_of = |at: usize| src[..at].iter().filter(|b| **b == b'\n').count() + 1;
    // Depth of braces at each byte is not needed: every `fn` is measured from its own body.
    let mut found = Vec::new();
    let mut at = 0;
    while at < src.len() {
        if let Some(end) = skip_literal(src, at) {
            at = end;
            continue;
        }
        let starts_fn = src[at..].starts_with(b"fn ")
            && (at == 0 || !(src[at - 1].is_ascii_alphanumeric() || src[at - 1] == b'_'));
        if !starts_fn {
            at += 1;
            continue;
        }
        let name_start = at + 3;
        let name: String = src[name_start..]
            .iter()
            .take_while(|b| b.is_ascii_alphanumeric() || **b == b'_')
            .map(|b| *b as char)
            .collect();
        if let Some(end) = body_end(src, name_start) {
            found.push((name, line_of(at), line_of(end) - line_of(at) + 1));
        }
        at = name_start;
    }
    found
}

/// The closing brace of the body of the function whose name starts at `at`; `None` for a
/// function without a body (a trait's declaration, `fn(..)` types never reach here).
fn body_end(src: &[u8], mut at: usize) -> Option<usize> {
    let mut parens = 0i32;
    while at < src.len() {
        if let Some(end) = skip_literal(src, at) {
            at = end;
            continue;
        }
        match src[at] {
            b'(' | b'[' => parens += 1,
            b')' | b']' => parens -= 1,
            b';' if parens == 0 => return None,
            b'{' if parens == 0 => break,
            _ => {}
        }
        at += 1;
    }
    let mut depth = 0usize;
    while at < src.len() {
        if let Some(end) = skip_literal(src, at) {
            at = end;
            continue;
        }
        match src[at] {
            b'{' => depth += 1,
            b'}' => {
                depth -= 1;
                if depth == 0 {
                    return Some(at);
                }
            }
            _ => {}
        }
        at += 1;
    }
    None
}

/// Every offender of the workspace at `workspace`, as (file, function or "", what is wrong).
fn offenders(workspace: &Path) -> Vec<(String, String, String)> {
    let mut found = Vec::new();
    for dir in SOURCE_DIRS {
        let mut files = Vec::new();
        source_files(&workspace.join(dir), &mut files);
        assert!(!files.is_empty(), "no source files under {dir}");
        files.sort();
        for file in files {
            // An unreadable file would pass as empty: the test says which one instead.
            let text = std::fs::read_to_string(&file)
                .unwrap_or_else(|error| panic!("{}: {error}", file.display()));
            let name = file
                .strip_prefix(workspace)
                .unwrap_or(&file)
                .to_string_lossy()
                .replace('\\', "/");
            let lines = without_tests(&text).lines().count();
            if lines > MAX_FILE_LINES {
                found.push((name.clone(), String::new(), format!("{lines} lines")));
            }
            if CORE_DIRS.contains(dir) {
                for (function, line, length) in functions(&text) {
                    if length > MAX_FN_LINES {
                        let what = format!("fn at line {line}: {length} lines");
                        found.push((name.clone(), function, what));
                    }
                }
            }
        }
    }
    found
}

#[test]
fn no_file_or_core_function_outgrows_its_room() {
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let found = offenders(&workspace);
    let new: Vec<String> = found
        .iter()
        .filter(|(file, function, _)| {
            !KNOWN_OFFENDERS.contains(&(file.as_str(), function.as_str()))
        })
        .map(|(file, function, what)| format!("{file} {function} ({what})"))
        .collect();
    let paid: Vec<String> = KNOWN_OFFENDERS
        .iter()
        .filter(|(file, function)| !found.iter().any(|(f, n, _)| f == file && n == function))
        .map(|(file, function)| format!("{file} {function}"))
        .collect();
    assert!(
        new.is_empty(),
        "files over {MAX_FILE_LINES} lines or core functions over {MAX_FN_LINES} lines (split \
         them into named rooms and steps): {new:#?}"
    );
    assert!(
        paid.is_empty(),
        "these known offenders are gone: remove them from KNOWN_OFFENDERS: {paid:?}"
    );
}

#[test]
fn a_functions_length_runs_from_its_fn_to_its_closing_brace() {
    let text = "/// Doc.\nfn a() {\n    let s = \"}\";\n    let c = '{';\n    // }\n    b(|x| { x })\n}\n\
                trait T {\n    fn declared(&self) -> u32;\n}\n\
                fn generic<'a, F: Fn(u8) -> [u8; 2]>(f: &'a F) -> Vec<u8> { vec![] }\n\
                #[cfg(test)]\nmod tests {\n    fn long() {\n\n\n\n}\n}\n";
    assert_eq!(
        functions(text),
        vec![("a".to_string(), 2, 6), ("generic".to_string(), 11, 1)]
    );
}

#[test]
fn a_raw_string_with_braces_does_not_end_a_body() {
    let text = "fn a() {\n    let s = r#\"{ \" }}\"#;\n    let t = b'}';\n}\n";
    assert_eq!(functions(text), vec![("a".to_string(), 1, 4)]);
}
