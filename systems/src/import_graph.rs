//! A test that keeps the crate's modules free of import cycles: every `crate::` and `super::`
//! path in `src/` (outside `#[cfg(test)] mod tests`) is an edge from its file's module to the
//! module it names, and no set of modules may reach each other. A module and its own parent or
//! child do not count: a parent re-exports its children, a child uses its parent's items.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// A module, as its path below the crate root (`["stages", "gc"]`; the root is empty).
type Module = Vec<String>;

/// Every module of `src/` and the text of its file.
fn modules(dir: &Path, path: &mut Module, out: &mut BTreeMap<Module, String>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let file = entry.path();
        let Some(name) = file
            .file_stem()
            .and_then(|s| s.to_str())
            .map(str::to_string)
        else {
            continue;
        };
        if file.is_dir() {
            path.push(name);
            modules(&file, path, out);
            path.pop();
        } else if file.extension().is_some_and(|e| e == "rs") && name != "tests" {
            let mut module = path.clone();
            if name != "mod" && name != "lib" {
                module.push(name);
            }
            out.insert(module, std::fs::read_to_string(&file).unwrap_or_default());
        }
    }
}

/// `text` without its unit tests and line comments.
fn code(text: &str) -> String {
    let text = text
        .find("#[cfg(test)]\nmod tests")
        .map_or(text, |at| &text[..at]);
    text.lines()
        .map(|line| line.find("//").map_or(line, |at| &line[..at]))
        .collect::<Vec<_>>()
        .join("\n")
}

fn is_ident(byte: u8) -> bool {
    byte.is_ascii_alphanumeric() || byte == b'_'
}

/// Reads the use tree at `at` (after `prefix::`) into `out`, one path per leaf; where it ends.
fn use_tree(src: &[u8], mut at: usize, prefix: &mut Module, out: &mut Vec<Module>) -> usize {
    let depth = prefix.len();
    loop {
        while at < src.len() && src[at].is_ascii_whitespace() {
            at += 1;
        }
        if src.get(at) == Some(&b'{') {
            at += 1;
            loop {
                while at < src.len() && (src[at].is_ascii_whitespace() || src[at] == b',') {
                    at += 1;
                }
                if at >= src.len() || src[at] == b'}' {
                    break;
                }
                at = use_tree(src, at, prefix, out);
            }
            prefix.truncate(depth);
            return at + 1;
        }
        let start = at;
        while at < src.len() && is_ident(src[at]) {
            at += 1;
        }
        if at > start {
            prefix.push(String::from_utf8_lossy(&src[start..at]).into_owned());
        }
        if src[at..].starts_with(b"::") {
            at += 2;
            continue;
        }
        out.push(prefix.clone());
        prefix.truncate(depth);
        return at.max(start + 1);
    }
}

/// The modules each module names, parents and children left out.
fn imports(modules: &BTreeMap<Module, String>) -> BTreeMap<Module, BTreeSet<Module>> {
    let mut edges: BTreeMap<Module, BTreeSet<Module>> = BTreeMap::new();
    for (module, text) in modules {
        let src = code(text);
        let src = src.as_bytes();
        let mut paths = Vec::new();
        for at in 0..src.len() {
            if at > 0 && (is_ident(src[at - 1]) || src[at - 1] == b':') {
                continue;
            }
            let mut prefix = if src[at..].starts_with(b"crate::") {
                Vec::new()
            } else if src[at..].starts_with(b"super::") && !module.is_empty() {
                module[..module.len() - 1].to_vec()
            } else {
                continue;
            };
            use_tree(src, at + 7, &mut prefix, &mut paths);
        }
        for path in paths {
            let Some(target) = (1..=path.len())
                .rev()
                .map(|n| path[..n].to_vec())
                .find(|prefix| modules.contains_key(prefix))
            else {
                continue;
            };
            if !target.starts_with(module) && !module.starts_with(&target) {
                edges.entry(module.clone()).or_default().insert(target);
            }
        }
    }
    edges
}

/// The sets of two or more modules that reach each other (Tarjan's strongly connected
/// components).
fn cycles(edges: &BTreeMap<Module, BTreeSet<Module>>) -> Vec<Vec<String>> {
    struct Search<'a> {
        edges: &'a BTreeMap<Module, BTreeSet<Module>>,
        index: BTreeMap<&'a Module, (usize, usize)>,
        stack: Vec<&'a Module>,
        found: Vec<Vec<String>>,
    }
    impl<'a> Search<'a> {
        fn visit(&mut self, module: &'a Module) -> usize {
            let number = self.index.len();
            self.index.insert(module, (number, number));
            self.stack.push(module);
            let mut low = number;
            for next in self.edges.get(module).into_iter().flatten() {
                match self.index.get(next) {
                    None => low = low.min(self.visit(next)),
                    Some(&(n, _)) if self.stack.contains(&next) => low = low.min(n),
                    Some(_) => {}
                }
            }
            self.index.insert(module, (number, low));
            if low == number {
                let at = self.stack.iter().rposition(|m| *m == module).unwrap_or(0);
                let members: Vec<String> = self.stack.drain(at..).map(|m| m.join("::")).collect();
                if members.len() > 1 {
                    self.found.push(members);
                }
            }
            low
        }
    }
    let mut search = Search {
        edges,
        index: BTreeMap::new(),
        stack: Vec::new(),
        found: Vec::new(),
    };
    for module in edges.keys() {
        if !search.index.contains_key(module) {
            search.visit(module);
        }
    }
    search.found
}

#[test]
fn the_crates_modules_import_each_other_one_way() {
    let mut all = BTreeMap::new();
    modules(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("src"),
        &mut Vec::new(),
        &mut all,
    );
    let edges = imports(&all);
    let gc: Module = vec!["stages".into(), "gc".into()];
    // The parser sees imports at all: the GC stage returns memory to the pool.
    assert!(
        edges
            .get(&gc)
            .is_some_and(|e| e.contains(&vec!["memory".to_string()])),
        "no import of memory found in stages::gc: the parser is broken"
    );
    let found = cycles(&edges);
    assert!(
        found.is_empty(),
        "modules that import each other (move the shared fact to its owner): {found:?}"
    );
}

#[test]
fn a_cycle_between_two_modules_is_found() {
    let mut all = BTreeMap::new();
    all.insert(
        vec!["a".to_string()],
        "use crate::b::{X, c::Y};".to_string(),
    );
    all.insert(
        vec!["b".to_string()],
        "fn f() { super::a::g() }".to_string(),
    );
    all.insert(vec!["b".to_string(), "c".to_string()], String::new());
    assert_eq!(cycles(&imports(&all)), vec![vec!["a", "b"]]);
}
