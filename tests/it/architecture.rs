//! ARCHITECTURE.md kept true: every path it cites exists, every code name it cites is defined
//! where it says, and the relay stays as pure as the page says. What counts as a path and as a
//! code name is the page's own convention (its last section): a backticked word that starts
//! with a letter and has a slash or a file extension is a path from the repository root; a
//! backticked Rust path with `::`, from the crate's root, is a code name.

use std::fs;
use std::path::{Path, PathBuf};

const PAGE: &str = "ARCHITECTURE.md";

/// Extensions that make a backticked word a path.
const PATH_ENDINGS: [&str; 5] = [".rs", ".sh", ".py", ".md", ".toml"];

/// Keywords that define a name (`fn name`, `struct Name`, ...).
const DEFINING: [&str; 10] = [
    "fn",
    "struct",
    "enum",
    "trait",
    "type",
    "const",
    "static",
    "mod",
    "union",
    "macro_rules!",
];

/// Words that may stand before a defining keyword.
const MODIFIERS: [&str; 8] = [
    "pub",
    "pub(crate)",
    "pub(super)",
    "async",
    "unsafe",
    "const",
    "extern",
    "default",
];

/// The modules above the relay (and the simulation, which drives it): it imports none.
const ABOVE_RELAY: [&str; 9] = [
    "pool", "client", "shared", "login", "admin", "reload", "app", "sim", "operator",
];

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// What a page cites: paths and code names, in order, each once.
#[derive(Debug, Default)]
struct Cited {
    paths: Vec<String>,
    names: Vec<String>,
}

/// The code spans and link targets of `text`, fenced blocks left out.
fn spans(text: &str) -> Vec<String> {
    let mut prose = String::new();
    let mut fenced = false;
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if !fenced {
            prose.push_str(line);
            prose.push('\n');
        }
    }
    let mut out: Vec<String> = prose
        .split('`')
        .skip(1)
        .step_by(2)
        .map(|s| s.split_whitespace().collect::<Vec<_>>().join(" "))
        .collect();
    // Link targets: `](target)`, web addresses and anchors of the page itself aside.
    for piece in prose.split("](").skip(1) {
        if let Some(end) = piece.find(')') {
            let target = piece[..end].split('#').next().unwrap_or("");
            if !target.is_empty() && !target.contains("://") {
                out.push(target.to_string());
            }
        }
    }
    out
}

fn is_ident(s: &str) -> bool {
    let mut chars = s.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

fn cited(text: &str) -> Cited {
    let mut c = Cited::default();
    for span in spans(text) {
        if !span.starts_with(|c: char| c.is_ascii_alphabetic()) || span.contains(' ') {
            continue;
        }
        let list = if span.contains('/') || PATH_ENDINGS.iter().any(|e| span.ends_with(e)) {
            &mut c.paths
        } else if span.contains("::") && span.split("::").all(is_ident) {
            &mut c.names
        } else {
            continue;
        };
        if !list.contains(&span) {
            list.push(span);
        }
    }
    c
}

/// Every `.rs` file under `dir`, sorted.
fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(entries) = fs::read_dir(&d) else {
            continue;
        };
        for e in entries.flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else if p.extension().is_some_and(|x| x == "rs") {
                out.push(p);
            }
        }
    }
    out.sort();
    out
}

/// The files of module `name` inside module folder `dir`: `name.rs` and everything under
/// `name/`; `None` when there is no such module.
fn module_files(dir: &Path, name: &str) -> Option<Vec<PathBuf>> {
    let file = dir.join(format!("{name}.rs"));
    let folder = dir.join(name);
    let mut files = rust_files(&folder);
    if file.is_file() {
        files.push(file);
    }
    (!files.is_empty()).then_some(files)
}

/// `word` is `name` followed by something that cannot continue an identifier.
fn starts_with_name(word: &str, name: &str) -> bool {
    word.strip_prefix(name)
        .is_some_and(|rest| !rest.starts_with(|c: char| c.is_ascii_alphanumeric() || c == '_'))
}

/// Whether `line` defines `name`: an item (`pub fn name`, `struct Name<T>`, ...), or a variant
/// or field (`Name,`, `Name(..)`, `Name {`, `name: T`).
fn defines(line: &str, name: &str) -> bool {
    let t = line.trim_start();
    if t.starts_with("//") || t.starts_with('#') {
        return false;
    }
    let words: Vec<&str> = t.split_whitespace().take(6).collect();
    for (i, w) in words.iter().enumerate() {
        if DEFINING.contains(w) && words.get(i + 1).is_some_and(|n| starts_with_name(n, name)) {
            return true;
        }
        if !DEFINING.contains(w) && !MODIFIERS.contains(w) && !w.starts_with("extern") {
            break;
        }
    }
    let rest = MODIFIERS
        .iter()
        .filter(|m| m.starts_with("pub"))
        .find_map(|m| t.strip_prefix(m).map(str::trim_start))
        .unwrap_or(t);
    let Some(after) = rest.strip_prefix(name) else {
        return false;
    };
    let after = after.trim_start();
    after.is_empty()
        || after.starts_with([',', '(', '{'])
        || (after.starts_with(':') && !after.starts_with("::"))
}

fn defined_in(files: &[PathBuf], name: &str) -> bool {
    files.iter().any(|f| {
        fs::read_to_string(f).is_ok_and(|text| text.lines().any(|line| defines(line, name)))
    })
}

/// Why `name` (`module::...::Item::member`) is not where it says, if it is not.
fn check_name(src: &Path, name: &str) -> Option<String> {
    let segments: Vec<&str> = name
        .split("::")
        .skip_while(|s| *s == "crate" || *s == "droid_pool")
        .collect();
    let mut dir = src.to_path_buf();
    let mut scope: Option<Vec<PathBuf>> = None;
    let mut in_modules = true;
    for (i, seg) in segments.iter().enumerate() {
        if in_modules {
            if let Some(files) = module_files(&dir, seg) {
                dir = dir.join(seg);
                scope = Some(files);
                continue;
            }
            in_modules = false;
        }
        let Some(files) = &scope else {
            return Some(format!(
                "`{name}`: `{seg}` is no module under src/ (code names start at the crate's root)"
            ));
        };
        if !defined_in(files, seg) {
            let within = segments[..i].join("::");
            return Some(format!("`{name}`: no `{seg}` defined in `{within}`"));
        }
    }
    None
}

/// Everything `text` cites that does not exist under `root`.
fn stale(root: &Path, text: &str) -> Vec<String> {
    let c = cited(text);
    let mut out = Vec::new();
    for p in &c.paths {
        let full = root.join(p);
        let found = if p.ends_with('/') {
            full.is_dir()
        } else {
            full.exists()
        };
        if !found {
            out.push(format!(
                "`{p}`: no such path (paths are written from the repository root)"
            ));
        }
    }
    let src = root.join("src");
    out.extend(c.names.iter().filter_map(|n| check_name(&src, n)));
    out
}

#[test]
fn architecture_cites_only_what_exists() {
    let root = root();
    let text = fs::read_to_string(root.join(PAGE)).expect("read ARCHITECTURE.md");
    let c = cited(&text);
    // The page cites enough that an extraction broken by an edit shows here.
    assert!(
        c.paths.len() >= 30,
        "only {} paths found: {:?}",
        c.paths.len(),
        c.paths
    );
    assert!(
        c.names.len() >= 8,
        "only {} names found: {:?}",
        c.names.len(),
        c.names
    );
    let stale = stale(&root, &text);
    assert!(
        stale.is_empty(),
        "{PAGE} cites what does not exist; mend the page or the code:\n{}",
        stale.join("\n")
    );
}

#[test]
fn a_made_up_path_or_name_is_caught() {
    let text = "\
The relay (`src/relay/`, `src/relay/pin.rs`, `relay::Relay`, `relay::Relay::on_client`,
`server::ServerState`, `sim::model::ModelServer`) stays; `src/relay/teleport.rs`,
`relay/pin.rs`, `relay::Teleporter`, `relay::Relay::teleport`, `teleport::Thing` and
`server::replies::Replies::teleport` do not. Not checked: `Teleporter`, `pool.mode: x`.
```
`relay::InAFence`
```
";
    let mut found = stale(&root(), text);
    found.sort();
    let expect = [
        "`relay/pin.rs`: no such path",
        "`relay::Relay::teleport`: no `teleport` defined in `relay::Relay`",
        "`relay::Teleporter`: no `Teleporter` defined in `relay`",
        "`server::replies::Replies::teleport`: no `teleport` defined in",
        "`src/relay/teleport.rs`: no such path",
        "`teleport::Thing`: `teleport` is no module under src/",
    ];
    assert_eq!(found.len(), expect.len(), "{found:#?}");
    for (f, e) in found.iter().zip(expect) {
        assert!(f.starts_with(e), "{f:?} should start with {e:?}");
    }
}

/// The modules of ours a line of code names: `crate::m` and `crate::{m, n::x}`.
fn crate_modules(code: &str) -> impl Iterator<Item = &str> {
    code.split("crate::").skip(1).flat_map(|after| {
        let names = match after.strip_prefix('{') {
            Some(group) => group.split('}').next().unwrap_or(""),
            None => after,
        };
        let whole = after.starts_with('{');
        names
            .split(',')
            .take(if whole { usize::MAX } else { 1 })
            .map(|n| {
                let n = n.trim_start();
                let end = n
                    .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                    .unwrap_or(n.len());
                &n[..end]
            })
    })
}

/// The relay is a pure machine: no tokio, no `.await`, no import of the layers above it.
#[test]
fn relay_is_pure() {
    let mut found = Vec::new();
    for file in rust_files(&root().join("src/relay")) {
        let text = fs::read_to_string(&file).expect("read a relay file");
        for (n, line) in text.lines().enumerate() {
            let code = line.split("//").next().unwrap_or("");
            let above = crate_modules(code).any(|m| ABOVE_RELAY.contains(&m));
            if code.contains(".await") || code.contains("tokio") || above {
                found.push(format!("{}:{}: {}", file.display(), n + 1, line.trim()));
            }
        }
    }
    assert!(
        found.is_empty(),
        "the relay is not pure:\n{}",
        found.join("\n")
    );
}

/// The most relay methods the driver (`src/client/`) may call: the contract of issue 46
/// (about fifteen). Raising it needs a reason in ARCHITECTURE.md's contract.
const DRIVER_ENTRY_POINTS: usize = 15;

/// Every distinct `relay.<method>(` the driver calls, a call split over lines
/// (`self.relay\n    .hold(`) included.
fn driver_entry_points() -> std::collections::BTreeSet<String> {
    let mut calls = std::collections::BTreeSet::new();
    for file in rust_files(&root().join("src/client")) {
        let text = fs::read_to_string(&file).expect("read a driver file");
        // Comments out, then blanks out: a call reads the same on one line or over several.
        let code: String = text
            .lines()
            .map(|line| line.split("//").next().unwrap_or(""))
            .collect::<Vec<_>>()
            .join(" ")
            .split_whitespace()
            .collect();
        let mut rest = code.as_str();
        while let Some(at) = rest.find("relay.") {
            let after = &rest[at + "relay.".len()..];
            let name: String = after
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            if !name.is_empty() && after[name.len()..].starts_with('(') {
                calls.insert(name);
            }
            rest = after;
        }
    }
    calls
}

#[test]
fn the_driver_contract_does_not_widen() {
    let calls = driver_entry_points();
    assert!(
        calls.contains("on_client") && calls.contains("on_server") && calls.contains("hold"),
        "the scan found the driver's calls: {calls:?}"
    );
    assert!(
        calls.len() <= DRIVER_ENTRY_POINTS,
        "the driver calls {} relay methods, more than {DRIVER_ENTRY_POINTS}: {calls:?}",
        calls.len()
    );
}
