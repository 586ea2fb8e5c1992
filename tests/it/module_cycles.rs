//! No import cycle between the modules (source files) of any crate of the workspace.

// A module is a file reached by `mod NAME;` from a crate root (src/lib.rs, src/main.rs). Module
// A has an edge to B if its code (outside comments, literals and `#[cfg(test)] mod .. {}`) has
// a `use` leaf or an inline path starting with `crate`, `$crate`, `self`, `super` or a module
// declared in A, whose longest module prefix is B. Declaring `mod b;` is no edge.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};

/// The workspace's crates, as directories of the workspace root.
const CRATES: [&str; 4] = [".", "engine", "catalog", "udfs"];

/// A module's path from its crate root (empty for the root).
type ModPath = Vec<String>;
/// A path as written, and its line.
type Written = (Vec<String>, usize);

#[derive(Clone)]
struct Tok {
    text: String,
    line: usize,
    ident: bool,
}

fn at(toks: &[Tok], j: usize) -> &str {
    toks.get(j).map_or("", |t| t.text.as_str())
}

fn is_ident(toks: &[Tok], j: usize) -> bool {
    toks.get(j).is_some_and(|t| t.ident)
}

fn is_id_char(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}

fn ch(s: &[char], k: usize) -> char {
    s.get(k).copied().unwrap_or('\0')
}

fn ident_end(s: &[char], k: usize) -> usize {
    k + s[k..].iter().take_while(|&&c| is_id_char(c)).count()
}

/// The index just after the first `pat` at or after `from` (the end of `s` if none).
fn after(s: &[char], from: usize, pat: &[char]) -> usize {
    (from..s.len())
        .find(|&j| s[j..].starts_with(pat))
        .map_or(s.len(), |j| j + pat.len())
}

/// The end of the string or char literal that `s[k]` (`"` or `'`) opens.
fn quoted_end(s: &[char], mut k: usize) -> usize {
    let quote = s[k];
    k += 1;
    while k < s.len() && s[k] != quote {
        k += if s[k] == '\\' { 2 } else { 1 };
    }
    (k + 1).min(s.len())
}

/// The end of the (nesting) block comment that `s[k..]` opens.
fn block_end(s: &[char], mut k: usize) -> usize {
    let mut depth = 0;
    while k < s.len() {
        match (s[k], ch(s, k + 1)) {
            ('/', '*') => (depth, k) = (depth + 1, k + 2),
            ('*', '/') if depth == 1 => return k + 2,
            ('*', '/') => (depth, k) = (depth - 1, k + 2),
            _ => k += 1,
        }
    }
    s.len()
}

/// At an identifier's first char: the word's end and the identifier, or `None` for a prefixed
/// literal (`r#".."#`, `br".."`, `b".."`, `c".."`, `b'x'`); `r#name` is `name`.
fn word(s: &[char], i: usize) -> (usize, Option<String>) {
    let end = ident_end(s, i);
    let (word, next): (String, char) = (s[i..end].iter().collect(), ch(s, end));
    let hashes = s[end..].iter().take_while(|&&c| c == '#').count();
    if matches!(word.as_str(), "r" | "br" | "cr") && ch(s, end + hashes) == '"' {
        let close: Vec<char> = std::iter::once('"').chain(vec!['#'; hashes]).collect();
        (after(s, end + hashes + 1, &close), None)
    } else if word == "r" && next == '#' && is_id_char(ch(s, end + 1)) {
        let name_end = ident_end(s, end + 1);
        (name_end, Some(s[end + 1..name_end].iter().collect()))
    } else if matches!((word.as_str(), next), ("b" | "c", '"') | ("b", '\'')) {
        (quoted_end(s, end), None)
    } else {
        (end, Some(word))
    }
}

/// Identifiers and punctuation (`::` as one token, `$crate` as one identifier) with their
/// lines; comments, literals, lifetimes and numbers are dropped.
fn tokenize(src: &str) -> Vec<Tok> {
    let s: Vec<char> = src.chars().collect();
    let (mut toks, mut i, mut line) = (Vec::new(), 0, 1);
    while let Some(&c) = s.get(i) {
        let next = ch(&s, i + 1);
        let (end, text, ident) = match c {
            '/' if next == '/' => (after(&s, i, &['\n']), None, false),
            '/' if next == '*' => (block_end(&s, i), None, false),
            '"' => (quoted_end(&s, i), None, false),
            '\'' if next == '\\' || ch(&s, i + 2) == '\'' => (quoted_end(&s, i), None, false),
            '\'' => (ident_end(&s, i + 1), None, false), // a lifetime or a label
            ':' if next == ':' => (i + 2, Some("::".to_string()), false),
            '$' if is_id_char(next) => {
                let end = ident_end(&s, i + 1);
                (end, Some(s[i..end].iter().collect()), true)
            }
            c if c.is_ascii_digit() => (ident_end(&s, i), None, false),
            c if c.is_alphabetic() || c == '_' => {
                let (end, text) = word(&s, i);
                (end, text, true)
            }
            c if c.is_whitespace() => (i + 1, None, false),
            c => (i + 1, Some(c.to_string()), false),
        };
        if let Some(text) = text {
            toks.push(Tok { text, line, ident });
        }
        line += s[i..end].iter().filter(|&&c| c == '\n').count();
        i = end;
    }
    toks
}

/// The tokens without `#[cfg(test)] .. mod NAME { .. }` (or `.. mod NAME;`).
fn strip_cfg_test(toks: &[Tok]) -> Vec<Tok> {
    const CFG_TEST: [&str; 7] = ["#", "[", "cfg", "(", "test", ")", "]"];
    let (mut out, mut i) = (Vec::with_capacity(toks.len()), 0);
    while i < toks.len() {
        if CFG_TEST
            .iter()
            .enumerate()
            .all(|(k, t)| at(toks, i + k) == *t)
        {
            // The item's first `{` or `;`: a test module if `mod NAME` is just before it.
            let j = (i..toks.len())
                .find(|&j| matches!(at(toks, j), "{" | ";"))
                .unwrap_or(i);
            if j >= i + 2 && at(toks, j - 2) == "mod" && is_ident(toks, j - 1) {
                let mut depth = 0;
                let end = (j..toks.len()).find(|&k| {
                    depth += i32::from(at(toks, k) == "{") - i32::from(at(toks, k) == "}");
                    depth == 0
                });
                i = end.map_or(toks.len(), |k| k + 1);
                continue;
            }
        }
        out.push(toks[i].clone());
        i += 1;
    }
    out
}

/// Pushes the leaves of the use tree at `i` to `out`; returns the index after the tree.
fn use_tree(toks: &[Tok], mut i: usize, prefix: &[String], out: &mut Vec<Written>) -> usize {
    let mut segs = prefix.to_vec();
    while let Some(t) = toks.get(i) {
        match t.text.as_str() {
            "{" => {
                i += 1;
                while !matches!(at(toks, i), "}" | "") {
                    i = use_tree(toks, i, &segs, out).max(i + 1);
                    i += usize::from(at(toks, i) == ",");
                }
                return i + 1;
            }
            "*" => {
                out.push((segs, t.line));
                return i + 1;
            }
            "::" if segs.is_empty() => segs.push("::".into()), // `use ::extern_crate::..`
            "::" => {}
            _ if !t.ident => return i,
            "self" if !segs.is_empty() => {} // `{self, ..}` names the prefix itself
            _ => segs.push(t.text.clone()),
        }
        i += 1;
        if t.ident && at(toks, i) != "::" {
            out.push((segs, t.line));
            return i + if at(toks, i) == "as" { 2 } else { 0 };
        }
    }
    i
}

/// A file's `use` leaves and inline paths `a::b::..` (not preceded by `::` or `.`).
fn paths(toks: &[Tok]) -> Vec<Written> {
    let (mut out, mut i) = (Vec::new(), 0);
    while let Some(t) = toks.get(i) {
        let starts_path = !matches!(at(toks, i.wrapping_sub(1)), "::" | ".");
        if t.ident && t.text == "use" {
            i = use_tree(toks, i + 1, &[], &mut out);
            i += toks[i.min(toks.len())..]
                .iter()
                .take_while(|t| t.text != ";")
                .count();
        } else if t.ident && at(toks, i + 1) == "::" && starts_path {
            let mut segs = vec![t.text.clone()];
            while at(toks, i + 1) == "::" && is_ident(toks, i + 2) {
                segs.push(toks[i + 2].text.clone());
                i += 2;
            }
            out.push((segs, t.line));
        }
        i += 1;
    }
    out
}

/// The modules of one crate root, with their files and tokens (test modules stripped).
struct Tree {
    label: String,
    modules: BTreeMap<ModPath, (PathBuf, Vec<Tok>)>,
}

impl Tree {
    fn discover(&mut self, file: &Path, module: ModPath) {
        let src = fs::read_to_string(file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        let toks = strip_cfg_test(&tokenize(&src));
        let mut dir = file.parent().expect("a file's directory").to_path_buf();
        let name = file.file_name().and_then(|n| n.to_str());
        if !matches!(name, Some("lib.rs" | "main.rs" | "mod.rs")) {
            dir.push(file.file_stem().expect("a .rs file's stem"));
        }
        let children: Vec<String> = toks
            .windows(3)
            .filter(|w| w[0].text == "mod" && w[1].ident && w[2].text == ";")
            .map(|w| w[1].text.clone())
            .collect();
        self.modules
            .insert(module.clone(), (file.to_path_buf(), toks));
        for child in children {
            let candidates = [
                dir.join(format!("{child}.rs")),
                dir.join(&child).join("mod.rs"),
            ];
            if let Some(found) = candidates.into_iter().find(|p| p.is_file()) {
                let mut path = module.clone();
                path.push(child);
                self.discover(&found, path);
            }
        }
    }

    /// The module that a path written in module `cur` names, or names an item of: the longest
    /// module prefix of the path made absolute, or, for an item that module re-exports with
    /// `pub use`, the module the item comes from. `None` for a path out of this crate.
    fn resolve(&self, cur: &[String], segs: &[String]) -> Option<ModPath> {
        self.resolve_within(cur, segs, 0)
    }

    fn resolve_within(&self, cur: &[String], segs: &[String], depth: usize) -> Option<ModPath> {
        let (first, mut rest) = segs.split_first()?;
        let child: ModPath = [cur, std::slice::from_ref(first)].concat();
        let mut full = match first.as_str() {
            "crate" | "$crate" => Vec::new(),
            "self" => cur.to_vec(),
            "super" => {
                let up = rest.iter().take_while(|s| *s == "super").count();
                rest = &rest[up..];
                cur[..cur.len().saturating_sub(up + 1)].to_vec()
            }
            _ if self.modules.contains_key(&child) => child,
            _ => return None,
        };
        full.extend(rest.iter().cloned());
        let mut item = None;
        while !self.modules.contains_key(&full) {
            item = full.pop(); // ends at the root, a module
        }
        if let Some(name) = item
            && depth < 8
            && let Some(from) = self.reexported(&full, &name, depth)
        {
            return from;
        }
        Some(full)
    }

    /// Where `name`, re-exported by `module` with `pub use`, comes from (`Some(None)`: from
    /// outside the crate); `None` when `module` does not re-export it.
    fn reexported(&self, module: &ModPath, name: &str, depth: usize) -> Option<Option<ModPath>> {
        let (_, toks) = self.modules.get(module)?;
        let mut leaves = Vec::new();
        for (i, t) in toks.iter().enumerate() {
            if t.ident && t.text == "use" && matches!(at(toks, i.wrapping_sub(1)), "pub" | ")") {
                use_tree(toks, i + 1, &[], &mut leaves);
            }
        }
        leaves
            .into_iter()
            .find(|(segs, _)| segs.last().is_some_and(|s| s == name))
            .map(|(segs, _)| self.resolve_within(module, &segs, depth + 1))
    }

    /// The edges between distinct modules, each with the first line that makes it.
    fn edges(&self) -> BTreeMap<(ModPath, ModPath), usize> {
        let mut edges = BTreeMap::new();
        for (cur, (_, toks)) in &self.modules {
            for (segs, line) in paths(toks) {
                if let Some(target) = self.resolve(cur, &segs)
                    && target != *cur
                {
                    let first = edges.entry((cur.clone(), target)).or_insert(line);
                    *first = (*first).min(line);
                }
            }
        }
        edges
    }
}

/// Tarjan's strongly connected components of more than one node, each sorted.
fn cycles(succ: &[Vec<usize>]) -> Vec<Vec<usize>> {
    struct Tarjan<'a> {
        succ: &'a [Vec<usize>],
        index: Vec<usize>,
        low: Vec<usize>,
        stack: Vec<usize>,
        out: Vec<Vec<usize>>,
    }
    impl Tarjan<'_> {
        fn visit(&mut self, v: usize, next: &mut usize) {
            (self.index[v], self.low[v], *next) = (*next, *next, *next + 1);
            self.stack.push(v);
            let succ = self.succ;
            for &w in &succ[v] {
                if self.index[w] == usize::MAX {
                    self.visit(w, next);
                    self.low[v] = self.low[v].min(self.low[w]);
                } else if self.stack.contains(&w) {
                    self.low[v] = self.low[v].min(self.index[w]);
                }
            }
            if self.low[v] == self.index[v] {
                let pos = self
                    .stack
                    .iter()
                    .rposition(|&w| w == v)
                    .expect("v is on the stack");
                let mut comp = self.stack.split_off(pos);
                comp.sort_unstable();
                self.out.push(comp);
            }
        }
    }
    let n = succ.len();
    let (index, low, stack, out) = (vec![usize::MAX; n], vec![0; n], Vec::new(), Vec::new());
    let (mut tarjan, mut next) = (
        Tarjan {
            succ,
            index,
            low,
            stack,
            out,
        },
        0,
    );
    for v in 0..n {
        if tarjan.index[v] == usize::MAX {
            tarjan.visit(v, &mut next);
        }
    }
    let mut out: Vec<_> = tarjan.out.into_iter().filter(|c| c.len() > 1).collect();
    out.sort();
    out
}

fn rel(workspace: &Path, file: &Path) -> String {
    let parts = file.strip_prefix(workspace).unwrap_or(file).components();
    parts
        .map(|c| c.as_os_str().to_string_lossy())
        .collect::<Vec<_>>()
        .join("/")
}

fn display(module: &[String]) -> String {
    if module.is_empty() {
        "crate".into()
    } else {
        module.join("::")
    }
}

/// One report per import cycle in `crates` (directories of `workspace`): the cycle's modules,
/// then each edge between them with the file and line that makes it.
fn analyse(workspace: &Path, crates: &[&str]) -> Vec<String> {
    let mut reports = Vec::new();
    let roots = |c: &&str| ["lib.rs", "main.rs"].map(|r| workspace.join(c).join("src").join(r));
    for root in crates.iter().flat_map(roots).filter(|root| root.is_file()) {
        let mut tree = Tree {
            label: rel(workspace, &root),
            modules: BTreeMap::new(),
        };
        tree.discover(&root, Vec::new());
        let names: Vec<&ModPath> = tree.modules.keys().collect();
        let node = |m: &ModPath| {
            names
                .binary_search(&m)
                .expect("an edge joins known modules")
        };
        let edges = tree.edges();
        let mut succ = vec![Vec::new(); names.len()];
        for (a, b) in edges.keys() {
            succ[node(a)].push(node(b));
        }
        for comp in cycles(&succ) {
            let members: Vec<String> = comp.iter().map(|&i| display(names[i])).collect();
            let mut report = format!("cycle in {}: {{{}}}", tree.label, members.join(", "));
            for ((a, b), line) in &edges {
                if comp.contains(&node(a)) && comp.contains(&node(b)) {
                    let file = rel(workspace, &tree.modules[a].0);
                    report += &format!("\n    {} -> {}  ({file}:{line})", display(a), display(b));
                }
            }
            reports.push(report);
        }
    }
    reports
}

#[test]
fn no_import_cycle_between_modules() {
    let cycles = analyse(Path::new(env!("CARGO_MANIFEST_DIR")), &CRATES);
    let report = cycles.join("\n");
    assert!(
        cycles.is_empty(),
        "{} import cycle(s) between modules:\n{report}",
        cycles.len()
    );
}

#[test]
fn detects_a_planted_cycle() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let files = [
        (
            "lib.rs",
            "pub mod a;\npub mod b;\npub mod c;\npub mod d;\npub mod e;\npub use e::E;\n\
             pub struct Root;\n",
        ),
        // `d` names `crate::E`, which the root re-exports from `e`: the edge is `d` -> `e`
        // (a cycle with `e` -> `d`), not `d` -> the root.
        ("d.rs", "use crate::E;\npub struct D;\n"),
        ("e.rs", "pub struct E(pub crate::d::D);\n"),
        (
            "a.rs",
            "use crate::b::B;\nuse crate::{Root, c::C};\npub struct A(pub B);\n",
        ),
        // `b` declares `inner`, which uses `b`: a declaration alone is no edge, so no cycle.
        (
            "b/mod.rs",
            "mod inner;\npub struct B;\n// a comment\npub fn f(_: super::a::A) {}\n",
        ),
        ("b/inner.rs", "use super::B;\n"),
        // Mentions of `a` that are not code: no edge `c` -> `a`, so no cycle.
        (
            "c.rs",
            r##"//! `use crate::a::A;` in a doc comment.
/* a /* nested */ block comment: crate::a::A */
pub struct C<'a>(pub &'a str);
pub const QUOTE: char = '"';
pub const TEXT: &str = "crate::a::A";
pub const RAW: &str = r#"" crate::a::A ""#;
#[cfg(test)]
mod tests {
    use crate::a::A;
}
"##,
        ),
    ];
    for (name, text) in files {
        let path = dir.path().join("src").join(name);
        fs::create_dir_all(path.parent().expect("a parent")).expect("a source directory");
        fs::write(&path, text).expect("a source file");
    }
    let cycles = [
        concat!(
            "cycle in src/lib.rs: {a, b}\n",
            "    a -> b  (src/a.rs:1)\n",
            "    b -> a  (src/b/mod.rs:4)",
        ),
        concat!(
            "cycle in src/lib.rs: {d, e}\n",
            "    d -> e  (src/d.rs:1)\n",
            "    e -> d  (src/e.rs:1)",
        ),
    ];
    assert_eq!(
        analyse(dir.path(), &["."]),
        cycles,
        "these two cycles, only"
    );
}
