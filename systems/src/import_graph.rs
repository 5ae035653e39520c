//! A test that keeps every crate's modules free of import cycles: every `crate::`, `super::`,
//! `self::` and child-module path (outside `#[cfg(test)] mod tests`) is an edge from its file's
//! module to the module that defines what it names, following re-exports (`pub use`), and no
//! set of modules may reach each other. A parent and its child count as any two modules; a
//! re-export alone is not a use, but a re-exported name the module also names in its own code is.

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
            // An unreadable file would pass as a module without imports.
            let text = std::fs::read_to_string(&file)
                .unwrap_or_else(|error| panic!("{}: {error}", file.display()));
            out.insert(module, text);
        }
    }
}

/// `text` without its unit tests and line comments.
fn code(text: &str) -> String {
    let text = text
        .find("#[cfg(test)]\nmod ")
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

/// Where a path starts, seen from `module`: `crate::`, `super::` (repeated), `self::`, or the
/// name of one of `module`'s own children; the module path it starts from and the bytes it takes.
fn path_start(
    src: &[u8],
    at: usize,
    module: &Module,
    modules: &BTreeMap<Module, String>,
) -> Option<(Module, usize)> {
    if src[at..].starts_with(b"crate::") {
        return Some((Vec::new(), 7));
    }
    if src[at..].starts_with(b"self::") {
        return Some((module.clone(), 6));
    }
    if src[at..].starts_with(b"super::") {
        let (mut base, mut len) = (module.clone(), 0);
        while src[at + len..].starts_with(b"super::") {
            base.pop()?;
            len += 7;
        }
        return Some((base, len));
    }
    let end = at + src[at..].iter().take_while(|b| is_ident(**b)).count();
    if end == at || !src[end..].starts_with(b"::") {
        return None;
    }
    let mut child = module.clone();
    child.push(String::from_utf8_lossy(&src[at..end]).into_owned());
    modules.contains_key(&child).then_some((module.clone(), 0))
}

/// Whether the use statement around `at` re-exports (`pub use`, `pub(crate) use`, ...).
fn in_reexport(src: &[u8], at: usize) -> bool {
    let line_start = src[..at]
        .iter()
        .rposition(|b| *b == b';' || *b == b'}')
        .map_or(0, |p| p + 1);
    let head = String::from_utf8_lossy(&src[line_start..at]);
    let mut head = head.trim_start();
    // Attributes before the item (`#[cfg_attr(..)]`, `#[doc(..)]`).
    while let Some(rest) = head.strip_prefix("#[") {
        let mut depth = 1;
        let end = rest.char_indices().find_map(|(i, c)| {
            depth += match c {
                '[' => 1,
                ']' => -1,
                _ => 0,
            };
            (depth == 0).then_some(i)
        });
        let Some(end) = end else { break };
        head = rest[end + 1..].trim_start();
    }
    head.starts_with("pub use") || (head.starts_with("pub(") && head.contains(") use"))
}

/// Every path each module names (its re-exports apart), and every name it re-exports with the
/// path the name comes from.
type Paths = (Vec<Module>, Vec<(String, Module)>);

fn paths(module: &Module, text: &str, modules: &BTreeMap<Module, String>) -> Paths {
    let src = code(text);
    let src = src.as_bytes();
    let (mut uses, mut reexports) = (Vec::new(), Vec::new());
    let mut at = 0;
    while at < src.len() {
        if at > 0 && (is_ident(src[at - 1]) || src[at - 1] == b':') {
            at += 1;
            continue;
        }
        // `pub(in crate::m)` names where an item is visible, not what it uses.
        let visibility = src[..at].ends_with(b"pub(in ");
        let Some((mut prefix, skip)) = path_start(src, at, module, modules).filter(|_| !visibility)
        else {
            at += 1;
            continue;
        };
        let mut found = Vec::new();
        let end = use_tree(src, at + skip, &mut prefix, &mut found);
        if in_reexport(src, at) {
            reexports.extend(
                found
                    .into_iter()
                    .filter_map(|p| p.last().cloned().map(|name| (name, p))),
            );
        } else {
            uses.extend(found);
        }
        at = end.max(at + 1);
    }
    // A name the module re-exports and also names in its own code is a use as well.
    let statements = use_statements(src);
    for (name, path) in &reexports {
        if names_outside(src, name, &statements) {
            uses.push(path.clone());
        }
    }
    (uses, reexports)
}

/// The byte ranges of the `use` statements of `src`, from `use` to its `;`.
fn use_statements(src: &[u8]) -> Vec<(usize, usize)> {
    let mut ranges = Vec::new();
    let mut at = 0;
    while let Some(found) = src[at..].windows(4).position(|w| w == b"use ") {
        let start = at + found;
        at = start + 4;
        if start > 0 && is_ident(src[start - 1]) {
            continue;
        }
        let end = src[at..]
            .iter()
            .position(|b| *b == b';')
            .map_or(src.len(), |p| at + p);
        ranges.push((start, end));
        at = end;
    }
    ranges
}

/// Whether `name` stands as an identifier of its own in `src` outside the `use` statements
/// (not the tail of a longer path, not a `mod` declaration of the same name).
fn names_outside(src: &[u8], name: &str, statements: &[(usize, usize)]) -> bool {
    let name = name.as_bytes();
    let mut at = 0;
    while let Some(found) = src[at..].windows(name.len()).position(|w| w == name) {
        let start = at + found;
        let end = start + name.len();
        at = start + 1;
        let bounded =
            (start == 0 || !is_ident(src[start - 1])) && (end >= src.len() || !is_ident(src[end]));
        let in_use = statements.iter().any(|(s, e)| (*s..*e).contains(&start));
        let tail = src[..start].ends_with(b"::");
        let declared = src[..start].ends_with(b"mod ");
        if bounded && !in_use && !tail && !declared {
            return true;
        }
    }
    false
}

/// The module that defines what `path` names: the longest module prefix of the path, followed
/// through that module's re-export of the next name (`crate::error::BindingError` is defined in
/// `error::domains` when `error` re-exports it from there).
fn defining_module(
    path: &Module,
    modules: &BTreeMap<Module, String>,
    reexports: &BTreeMap<Module, BTreeMap<String, Module>>,
    depth: usize,
) -> Option<Module> {
    let target = (1..=path.len())
        .rev()
        .map(|n| path[..n].to_vec())
        .find(|prefix| modules.contains_key(prefix))
        .or_else(|| modules.contains_key(&Vec::new()).then(Vec::new))?;
    let Some(name) = path.get(target.len()) else {
        return Some(target);
    };
    match reexports.get(&target).and_then(|names| names.get(name)) {
        Some(source) if depth < 16 && source != path => {
            defining_module(source, modules, reexports, depth + 1).or(Some(target))
        }
        _ => Some(target),
    }
}

/// The modules each module uses items of, resolved to the module defining each item: a module's
/// own parent and children count as any other (a parent that only declares and re-exports its
/// children names none of them; a child that uses its parent's own items depends on it).
fn imports(modules: &BTreeMap<Module, String>) -> BTreeMap<Module, BTreeSet<Module>> {
    let mut uses = BTreeMap::new();
    let mut reexports: BTreeMap<Module, BTreeMap<String, Module>> = BTreeMap::new();
    for (module, text) in modules {
        let (used, exported) = paths(module, text, modules);
        uses.insert(module.clone(), used);
        reexports.insert(module.clone(), exported.into_iter().collect());
    }
    let mut edges: BTreeMap<Module, BTreeSet<Module>> = BTreeMap::new();
    for (module, used) in &uses {
        for path in used {
            let Some(target) = defining_module(path, modules, &reexports, 0) else {
                continue;
            };
            if &target != module {
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

/// The cycles among the modules of the crate whose source root is `dir`.
fn cycles_in(dir: &Path) -> (BTreeMap<Module, BTreeSet<Module>>, Vec<Vec<String>>) {
    let mut all = BTreeMap::new();
    modules(dir, &mut Vec::new(), &mut all);
    assert!(!all.is_empty(), "no modules found under {}", dir.display());
    let edges = imports(&all);
    let found = cycles(&edges);
    (edges, found)
}

#[test]
fn the_crates_modules_import_each_other_one_way() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let (edges, _) = cycles_in(&root.join("src"));
    let gc: Module = vec!["stages".into(), "gc".into()];
    // The parser sees imports at all: the GC stage returns memory to the pool.
    assert!(
        edges
            .get(&gc)
            .is_some_and(|e| e.iter().any(|m| m.first().is_some_and(|m| m == "memory"))),
        "no import of memory found in stages::gc: the parser is broken"
    );
}

/// No crate of the workspace has modules that reach each other (the list of known cycles this
/// test began with on 2026-12-06 was paid off the same day).
#[test]
fn every_workspace_crates_modules_import_each_other_one_way() {
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut found = Vec::new();
    for dir in [
        "hal/src",
        "systems/src",
        "src",
        "macros/src",
        "backends/sim/src",
        "backends/cpu/src",
        "backends/wgpu/src",
        "backends/cuda/src",
    ] {
        let (_, cycles) = cycles_in(&workspace.join(dir));
        found.extend(cycles.into_iter().map(|cycle| format!("{dir}: {cycle:?}")));
    }
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

#[test]
fn a_cycle_through_a_reexport_and_a_child_is_found() {
    // a -> e (re-exported from e::d) -> k -> a: the re-export resolves to e::d.
    let mut all = BTreeMap::new();
    all.insert(Vec::new(), "mod a; mod e; mod k;".to_string());
    all.insert(vec!["a".to_string()], "use crate::e::Error;".to_string());
    all.insert(
        vec!["e".to_string()],
        "mod d;\npub use d::Error;".to_string(),
    );
    all.insert(
        vec!["e".to_string(), "d".to_string()],
        "use crate::k::Elem; pub struct Error;".to_string(),
    );
    all.insert(vec!["k".to_string()], "use crate::a::Binding;".to_string());
    assert_eq!(cycles(&imports(&all)), vec![vec!["a", "e::d", "k"]]);
}

#[test]
fn a_parent_and_child_that_use_each_others_items_are_a_cycle() {
    let mut all = BTreeMap::new();
    all.insert(
        vec!["p".to_string()],
        "mod c;\nfn f() { c::g() }".to_string(),
    );
    all.insert(
        vec!["p".to_string(), "c".to_string()],
        "use super::Item;".to_string(),
    );
    assert_eq!(cycles(&imports(&all)), vec![vec!["p", "p::c"]]);
    // A parent that only re-exports its child is not a use.
    all.insert(vec!["p".to_string()], "mod c;\npub use c::g;".to_string());
    assert!(cycles(&imports(&all)).is_empty());
    // A parent that re-exports its child's item and names it in its own code uses it.
    all.insert(
        vec!["p".to_string()],
        "mod c;\npub use c::g;\nfn f() { g() }".to_string(),
    );
    assert_eq!(cycles(&imports(&all)), vec![vec!["p", "p::c"]]);
}
