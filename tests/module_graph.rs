//! The module graph drawn in `ARCHITECTURE.md` is the one the code has.
//!
//! Invariants checked: every `crate::` (or, in `main.rs` and `cli/`, `hotcount::`)
//! reference between two of the service's modules is an arrow of the Mermaid
//! diagram, every arrow of the diagram is such a reference, and the graph
//! has no cycle (arrows run one way). Comments and doc links are not
//! references; a module's tests count as the module.
//!
//! At the level of folders too: the top-level rooms of `src/` (each
//! top-level file or folder) never import each other in a circle, nor do
//! those of `loadgen/src/`, so e.g. `store/` never uses `pipeline/` while
//! `pipeline/` uses `store/`.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

type Graph = BTreeMap<String, BTreeSet<String>>;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .expect("read src dir")
        .map(|e| e.expect("dir entry").path())
        .collect();
    entries.sort();
    for path in entries {
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The graph node a source file belongs to: its top-level module, or
/// `pipeline_<stage>` under `src/pipeline/`, or `main` under `src/cli/`
/// (the binary's own modules, which name the library `hotcount::` as
/// `main.rs` does). `None` for `lib.rs` and `pipeline/mod.rs`, which only
/// declare modules.
fn node_of(relative: &Path) -> Option<String> {
    let parts: Vec<String> = relative
        .components()
        .map(|c| {
            c.as_os_str()
                .to_string_lossy()
                .trim_end_matches(".rs")
                .to_string()
        })
        .collect();
    match parts.as_slice() {
        [lib] if lib == "lib" => None,
        [file] => Some(file.clone()),
        [cli, ..] if cli == "cli" => Some("main".into()),
        [pipeline, stage, ..] if pipeline == "pipeline" => {
            (stage != "mod").then(|| format!("pipeline_{stage}"))
        }
        [module, ..] => Some(module.clone()),
        [] => None,
    }
}

/// Strips `//` comments (doc comments included) so doc links are not
/// counted. Good enough for this code base: no `//` inside string literals
/// that also holds a `crate::` path.
fn code_only(text: &str) -> String {
    text.lines()
        .map(|line| match line.find("//") {
            Some(at) => &line[..at],
            None => line,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

fn ident_at(text: &str) -> &str {
    let end = text
        .find(|c: char| !(c.is_alphanumeric() || c == '_'))
        .unwrap_or(text.len());
    &text[..end]
}

/// The module a path after `crate::` names, e.g. `pipeline::flusher::X`
/// -> `pipeline_flusher`, `store::firestore` -> `store`.
fn target_of(path: &str) -> Vec<String> {
    let head = ident_at(path);
    if head == "pipeline" {
        let rest = &path["pipeline".len()..];
        if let Some(rest) = rest.strip_prefix("::") {
            if let Some(group) = rest.strip_prefix('{') {
                return group_items(group)
                    .into_iter()
                    .map(|stage| format!("pipeline_{}", ident_at(&stage)))
                    .collect();
            }
            return vec![format!("pipeline_{}", ident_at(rest))];
        }
        return vec!["pipeline".into()];
    }
    if let Some(group) = path.strip_prefix('{') {
        return group_items(group)
            .into_iter()
            .flat_map(|item| target_of(&item))
            .collect();
    }
    vec![head.to_string()]
}

/// The items of a `{a, b::c, d::{e, f}}` group (text after the `{`), each
/// as written, up to the matching `}`.
fn group_items(text: &str) -> Vec<String> {
    let mut items = Vec::new();
    let mut depth = 0;
    let mut current = String::new();
    for c in text.chars() {
        match c {
            '{' => depth += 1,
            '}' if depth == 0 => break,
            '}' => depth -= 1,
            ',' if depth == 0 => {
                items.push(std::mem::take(&mut current));
                continue;
            }
            _ => {}
        }
        current.push(c);
    }
    items.push(current);
    items
        .into_iter()
        .map(|i| i.split_whitespace().collect::<String>())
        .filter(|i| !i.is_empty() && i != "self")
        .collect()
}

fn code_graph() -> Graph {
    let src = root().join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let mut graph = Graph::new();
    for file in files {
        let relative = file.strip_prefix(&src).expect("under src");
        let Some(from) = node_of(relative) else {
            continue;
        };
        let text = code_only(&std::fs::read_to_string(&file).expect("read source"));
        let prefix = if from == "main" {
            "hotcount::"
        } else {
            "crate::"
        };
        let edges = graph.entry(from.clone()).or_default();
        for (at, _) in text.match_indices(prefix) {
            let before = text[..at].chars().next_back();
            if before.is_some_and(|c| c.is_alphanumeric() || c == '_') {
                continue;
            }
            for to in target_of(&text[at + prefix.len()..]) {
                if to != from && !to.is_empty() {
                    edges.insert(to);
                }
            }
        }
    }
    graph
}

/// The arrows `a --> b` of the first ```mermaid block of ARCHITECTURE.md
/// (node labels such as `a["text"]` allowed on either side).
fn drawn_graph() -> Graph {
    let text = std::fs::read_to_string(root().join("ARCHITECTURE.md")).expect("ARCHITECTURE.md");
    let block = text
        .split("```mermaid")
        .nth(1)
        .and_then(|rest| rest.split("```").next())
        .expect("ARCHITECTURE.md has a ```mermaid block");
    let mut graph = Graph::new();
    for line in block.lines() {
        let Some((from, to)) = line.split_once("-->") else {
            continue;
        };
        let name = |side: &str| ident_at(side.trim()).to_string();
        graph.entry(name(from)).or_default().insert(name(to));
    }
    graph
}

fn edges(graph: &Graph) -> BTreeSet<(String, String)> {
    graph
        .iter()
        .flat_map(|(from, tos)| tos.iter().map(move |to| (from.clone(), to.clone())))
        .collect()
}

#[test]
fn the_architecture_diagram_draws_exactly_the_module_references_of_the_code() {
    let code = edges(&code_graph());
    let drawn = edges(&drawn_graph());
    let missing: Vec<_> = code.difference(&drawn).collect();
    let stale: Vec<_> = drawn.difference(&code).collect();
    assert!(
        missing.is_empty() && stale.is_empty(),
        "ARCHITECTURE.md's module graph differs from the code.\n\
         used in code, not drawn: {missing:?}\n\
         drawn, not used in code: {stale:?}"
    );
}

/// The first cycle of `graph` found by a depth-first search, as the path
/// that closes it; `None` when every arrow runs one way.
fn find_cycle(graph: &Graph) -> Option<Vec<String>> {
    fn visit(
        node: &str,
        graph: &Graph,
        state: &mut BTreeMap<String, u8>,
        path: &mut Vec<String>,
    ) -> Option<Vec<String>> {
        match state.get(node) {
            Some(2) => return None,
            Some(1) => {
                let start = path.iter().position(|n| n == node).unwrap_or(0);
                let mut cycle = path[start..].to_vec();
                cycle.push(node.to_string());
                return Some(cycle);
            }
            _ => {}
        }
        state.insert(node.to_string(), 1);
        path.push(node.to_string());
        for next in graph.get(node).into_iter().flatten() {
            if let Some(cycle) = visit(next, graph, state, path) {
                return Some(cycle);
            }
        }
        path.pop();
        state.insert(node.to_string(), 2);
        None
    }
    let mut state = BTreeMap::new();
    graph
        .keys()
        .find_map(|node| visit(node, graph, &mut state, &mut Vec::new()))
}

#[test]
fn module_references_run_one_way() {
    let cycle = find_cycle(&code_graph());
    assert!(cycle.is_none(), "module references form a cycle: {cycle:?}");
}

/// The room of a file under a crate's `src/`: its top-level file or
/// folder (`store/firestore/db.rs` -> `store`); `None` for `lib.rs`,
/// which only declares the rooms.
fn room_of(relative: &Path) -> Option<String> {
    let first = relative.components().next()?.as_os_str().to_string_lossy();
    let room = first.trim_end_matches(".rs");
    (room != "lib").then(|| room.to_string())
}

/// The rooms of the crate whose sources are `src` (its top-level files and
/// folders) and the arrows between them: room A -> room B when a file of A
/// names `crate::B` or `{lib_name}::B` (the binary's files name the
/// library by its crate name), groups `crate::{B, C}` expanded. Comments
/// are not references.
fn room_graph(src: &Path, lib_name: &str) -> Graph {
    let mut files = Vec::new();
    rust_files(src, &mut files);
    let rooms: BTreeSet<String> = files
        .iter()
        .filter_map(|f| room_of(f.strip_prefix(src).expect("under src")))
        .collect();
    let mut graph = Graph::new();
    for file in &files {
        let Some(from) = room_of(file.strip_prefix(src).expect("under src")) else {
            continue;
        };
        let text = code_only(&std::fs::read_to_string(file).expect("read source"));
        let edges = graph.entry(from.clone()).or_default();
        for prefix in ["crate::".to_string(), format!("{lib_name}::")] {
            for (at, _) in text.match_indices(prefix.as_str()) {
                let before = text[..at].chars().next_back();
                if before.is_some_and(|c| c.is_alphanumeric() || c == '_') {
                    continue;
                }
                let rest = &text[at + prefix.len()..];
                let heads = match rest.strip_prefix('{') {
                    Some(group) => group_items(group)
                        .iter()
                        .map(|item| ident_at(item).to_string())
                        .collect(),
                    None => vec![ident_at(rest).to_string()],
                };
                for to in heads {
                    if to != from && rooms.contains(&to) {
                        edges.insert(to);
                    }
                }
            }
        }
    }
    graph
}

#[test]
fn no_two_rooms_of_the_service_import_each_other() {
    let graph = room_graph(&root().join("src"), "hotcount");
    assert!(graph.contains_key("store") && graph.contains_key("pipeline"));
    let cycle = find_cycle(&graph);
    assert!(
        cycle.is_none(),
        "the top-level rooms of src/ import each other: {cycle:?}"
    );
}

#[test]
fn no_two_rooms_of_the_load_generator_import_each_other() {
    let graph = room_graph(&root().join("loadgen/src"), "hotcount_loadgen");
    assert!(graph.contains_key("bench") && graph.contains_key("workload"));
    let cycle = find_cycle(&graph);
    assert!(
        cycle.is_none(),
        "the top-level rooms of loadgen/src/ import each other: {cycle:?}"
    );
}

#[test]
fn a_back_arrow_planted_between_two_rooms_is_found() {
    let mut graph = room_graph(&root().join("src"), "hotcount");
    assert!(
        graph["pipeline"].contains("store"),
        "the arrow this test reverses"
    );
    assert_eq!(find_cycle(&graph), None);
    graph
        .entry("store".into())
        .or_default()
        .insert("pipeline".into());
    let cycle = find_cycle(&graph).expect("a store -> pipeline arrow closes a cycle");
    assert!(cycle.contains(&"store".to_string()) && cycle.contains(&"pipeline".to_string()));
}

#[test]
fn the_check_sees_grouped_nested_and_pipeline_imports() {
    assert_eq!(
        target_of("pipeline::{batch::Batch, acker::{AckHandle, Acker}};"),
        vec!["pipeline_batch", "pipeline_acker"]
    );
    assert_eq!(
        target_of("{config::Config, store::firestore::Layout};"),
        vec!["config", "store"]
    );
    assert_eq!(target_of("telemetry::Stats"), vec!["telemetry"]);
    assert_eq!(
        node_of(Path::new("pipeline/flusher/decide.rs")).as_deref(),
        Some("pipeline_flusher")
    );
    assert_eq!(
        node_of(Path::new("store/firestore/db.rs")).as_deref(),
        Some("store")
    );
    assert_eq!(node_of(Path::new("pipeline/mod.rs")), None);
    assert_eq!(node_of(Path::new("cli/users.rs")).as_deref(), Some("main"));
    assert_eq!(
        code_only("use crate::a; // see [`crate::b`]\n/// [`crate::c`]"),
        "use crate::a; \n"
    );
}
