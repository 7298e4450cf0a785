//! Claims the docs make about the code and the deploy files, checked
//! against them (the code is the truth):
//!
//! - every alert policy in `dashboards/alerts/` is listed in `README.md`
//!   and `docs/OPERATIONS.md`, has a section under "When an alert fires"
//!   that names it, and its runbook text links to that section; the files
//!   said to be PromQL are exactly the ones with a PromQL condition;
//! - the Firestore and PostgreSQL layouts in `ARCHITECTURE.md` name every
//!   collection and field of `src/store/firestore/layout.rs` and every
//!   table and column the migrations create (`src/store/postgres/migrations.rs`
//!   and the files it includes), and nothing else;
//! - every `hotcount …` command the docs give parses against `--help` of
//!   the command it names: the subcommand exists, each flag exists, and in
//!   a code block every required flag and argument is given;
//! - every figure a deploy file cites from a doc is in the part of the doc
//!   it cites;
//! - `deploy/render.sh` writes every name an operator may change into
//!   every manifest, dashboard and alert policy;
//! - `README.md` names each demo command CI (`scripts/readme-demos.sh`)
//!   does not run.
//!
//! Each failure says what is missing or wrong and where, so the line to
//! write is known without reading this file.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Lines outside fenced code blocks, with their 1-based numbers.
fn prose_lines(text: &str) -> Vec<(usize, &str)> {
    let mut out = Vec::new();
    let mut fenced = false;
    for (i, line) in text.lines().enumerate() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if !fenced {
            out.push((i + 1, line));
        }
    }
    out
}

/// Every `code span` of a line.
fn code_spans(line: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut rest = line;
    while let Some(start) = rest.find('`') {
        let tail = &rest[start + 1..];
        let Some(len) = tail.find('`') else { break };
        out.push(&tail[..len]);
        rest = &tail[len + 1..];
    }
    out
}

/// The cells of a Markdown table row, trimmed.
fn cells(line: &str) -> Vec<String> {
    line.trim()
        .trim_start_matches('|')
        .trim_end_matches('|')
        .split('|')
        .map(|c| c.trim().to_string())
        .collect()
}

/// The text of the section under `heading` (the heading line written out
/// whole), up to the next heading of the same or a higher level.
fn section<'a>(text: &'a str, heading: &str) -> Option<&'a str> {
    let level = heading.chars().take_while(|c| *c == '#').count();
    let mut start = None;
    let mut offset = 0;
    let mut fenced = false;
    for line in text.split_inclusive('\n') {
        let trimmed = line.trim_end();
        if trimmed.trim_start().starts_with("```") {
            fenced = !fenced;
        }
        let hashes = trimmed.chars().take_while(|c| *c == '#').count();
        let is_heading = !fenced && hashes > 0 && trimmed[hashes..].starts_with(' ');
        match start {
            None if trimmed == heading => start = Some(offset + line.len()),
            Some(s) if is_heading && hashes <= level => return Some(&text[s..offset]),
            _ => {}
        }
        offset += line.len();
    }
    start.map(|s| &text[s..])
}

/// GitHub's anchor for a heading.
fn slug(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || *c == ' ' || *c == '-' || *c == '_')
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

// ---- alert policies ---------------------------------------------------------

/// The alert policy files, by file name, with their JSON.
fn alert_policies() -> BTreeMap<String, serde_json::Value> {
    let dir = root().join("dashboards/alerts");
    let mut out = BTreeMap::new();
    for entry in std::fs::read_dir(&dir).expect("dashboards/alerts") {
        let path = entry.expect("entry").path();
        if path.extension().is_some_and(|e| e == "json") {
            let name = path
                .file_name()
                .expect("a file name")
                .to_string_lossy()
                .into_owned();
            let policy = serde_json::from_str(&read(&path)).expect("an alert policy is JSON");
            out.insert(name, policy);
        }
    }
    assert!(out.len() >= 4, "alert policies found: {:?}", out.keys());
    out
}

fn is_promql(policy: &serde_json::Value) -> bool {
    policy["conditions"].as_array().is_some_and(|c| {
        c.iter()
            .any(|c| c.get("conditionPrometheusQueryLanguage").is_some())
    })
}

#[test]
fn every_alert_policy_is_listed_and_linked_to_its_runbook_section() {
    let policies = alert_policies();
    let operations = read(&root().join("docs/OPERATIONS.md"));
    let readme = read(&root().join("README.md"));
    let mut problems = Vec::new();

    // README: the line that lists the alert files names each of them.
    let listing: Vec<&str> = readme
        .lines()
        .filter(|l| l.contains("dashboards/alerts/"))
        .collect();
    for name in policies.keys() {
        let stem = name.trim_end_matches(".json");
        if !listing.iter().any(|l| l.contains(name) || l.contains(stem)) {
            problems.push(format!(
                "README.md: the line listing dashboards/alerts/ does not name {name} ({stem})"
            ));
        }
    }

    // OPERATIONS, "Dashboards and alerts": one row per file; the rows
    // marked (PromQL) are exactly the files with a PromQL condition.
    let table = section(&operations, "## Dashboards and alerts").unwrap_or("");
    for (name, policy) in &policies {
        let path = format!("`dashboards/alerts/{name}`");
        match table
            .lines()
            .find(|l| l.starts_with('|') && l.contains(&path))
        {
            None => problems.push(format!(
                "docs/OPERATIONS.md, \"Dashboards and alerts\": no row | {path} | ... |"
            )),
            Some(row) => {
                let marked = row.contains("(PromQL)");
                if marked != is_promql(policy) {
                    problems.push(format!(
                        "docs/OPERATIONS.md, \"Dashboards and alerts\": {name} is {}PromQL, its row says {}",
                        if is_promql(policy) { "" } else { "not " },
                        if marked { "(PromQL)" } else { "nothing" }
                    ));
                }
            }
        }
    }

    // OPERATIONS, "When an alert fires": a section per file, naming it in
    // its heading; the policy's runbook links to that section.
    let fires = section(&operations, "## When an alert fires").unwrap_or("");
    for (name, policy) in &policies {
        let heading = fires
            .lines()
            .find(|l| l.starts_with("### ") && l.contains(&format!("`{name}`")));
        let Some(heading) = heading else {
            problems.push(format!(
                "docs/OPERATIONS.md, \"When an alert fires\": no section `### ... (`{name}`)`"
            ));
            continue;
        };
        let anchor = format!("docs/OPERATIONS.md#{}", slug(&heading[4..]));
        let runbook = policy["documentation"]["content"].as_str().unwrap_or("");
        if !runbook.contains(&anchor) {
            problems.push(format!(
                "dashboards/alerts/{name}: its documentation does not link to its section: {anchor}"
            ));
        }
    }

    // Every place that names the PromQL alerts names all of them.
    let promql: BTreeSet<&String> = policies
        .iter()
        .filter(|(_, p)| is_promql(p))
        .map(|(n, _)| n)
        .collect();
    let podmonitoring = read(&root().join("deploy/gke/podmonitoring.yaml"));
    for name in &promql {
        if !podmonitoring.contains(name.as_str()) {
            problems.push(format!(
                "deploy/gke/podmonitoring.yaml: the PromQL alerts it names lack {name}"
            ));
        }
    }

    assert!(
        problems.is_empty(),
        "the alert policies and the docs disagree:\n  {}",
        problems.join("\n  ")
    );
}

// ---- layouts ----------------------------------------------------------------

/// `pub const NAME: &str = "value";` lines of `text`, values only.
fn str_consts(text: &str) -> Vec<String> {
    text.lines()
        .filter_map(|l| l.trim().strip_prefix("pub const "))
        .filter(|l| l.contains(": &str = \""))
        .filter_map(|l| l.split('"').nth(1))
        .map(String::from)
        .collect()
}

/// The body of `pub mod name { ... }` in `text` (braces matched).
fn module_body<'a>(text: &'a str, name: &str) -> Option<&'a str> {
    let start = text.find(&format!("pub mod {name} {{"))?;
    let open = start + text[start..].find('{')?;
    let mut depth = 0;
    for (i, c) in text[open..].char_indices() {
        match c {
            '{' => depth += 1,
            '}' => {
                depth -= 1;
                if depth == 0 {
                    return Some(&text[open + 1..open + i]);
                }
            }
            _ => {}
        }
    }
    None
}

/// The collection names of a document path (`counters/{post}/shards/{k}`
/// -> counters, shards): every other segment from the first, so a fixed
/// document id (`settings/format`) is not taken for a collection.
fn path_collections(path: &str) -> Vec<String> {
    path.split('/')
        .filter(|s| !s.is_empty())
        .step_by(2)
        .map(String::from)
        .collect()
}

/// A document path as a kind of document: its segments, each `{...}`
/// placeholder as `*` (`counters/{postId}/shards/{k}` and
/// `counters/{post}/shards/{n}` are one kind; `settings/milestones` and
/// `settings/format` are two).
fn path_kind(path: &str) -> Vec<String> {
    path.split('/')
        .filter(|s| !s.is_empty())
        .map(|s| {
            if s.starts_with('{') {
                "*".to_string()
            } else {
                s.to_string()
            }
        })
        .collect()
}

/// layout.rs: collection names, and per kind of document its path (the
/// first code span of the doc comment of its `fields` module) and fields.
struct FirestoreLayout {
    collections: BTreeSet<String>,
    documents: Vec<(String, String, BTreeSet<String>)>, // (module, path, fields)
}

fn firestore_layout() -> FirestoreLayout {
    let text = read(&root().join("src/store/firestore/layout.rs"));
    let collections = str_consts(module_body(&text, "collections").expect("mod collections"))
        .into_iter()
        .collect();
    let fields = module_body(&text, "fields").expect("mod fields");
    let mut documents = Vec::new();
    let mut doc_comment = String::new();
    for line in fields.lines() {
        let trimmed = line.trim();
        if let Some(comment) = trimmed.strip_prefix("///") {
            doc_comment.push_str(comment);
            continue;
        }
        if let Some(rest) = trimmed.strip_prefix("pub mod ") {
            let module = rest.trim_end_matches(" {").to_string();
            let path = code_spans(&doc_comment)
                .first()
                .map(|s| s.to_string())
                .unwrap_or_default();
            let body = module_body(fields, &module).expect("a module body");
            let names = str_consts(body).into_iter().collect();
            documents.push((module, path, names));
        }
        doc_comment.clear();
    }
    FirestoreLayout {
        collections,
        documents,
    }
}

/// The rows of the first Markdown table in `text`: first cell's code
/// span, and the identifiers in the code spans of the second cell.
fn layout_rows(text: &str) -> Vec<(String, BTreeSet<String>)> {
    let mut rows = Vec::new();
    for (_, line) in prose_lines(text) {
        if !line.trim_start().starts_with('|') {
            if !rows.is_empty() {
                break;
            }
            continue;
        }
        let row = cells(line);
        let Some(name) = row.first().and_then(|c| code_spans(c).first().copied()) else {
            continue; // header or separator
        };
        let mut names = BTreeSet::new();
        for cell in row.iter().skip(1) {
            for span in code_spans(cell) {
                for word in span.split(|c: char| !(c.is_alphanumeric() || c == '_')) {
                    if !word.is_empty() && !word.chars().all(|c| c.is_ascii_digit()) {
                        names.insert(word.to_string());
                    }
                }
            }
        }
        rows.push((name.to_string(), names));
    }
    rows
}

const FIRESTORE_HEADING: &str = "## Firestore layout (collection prefix configurable)";
const POSTGRES_HEADING: &str = "### PostgreSQL layout";

#[test]
fn the_architecture_firestore_layout_names_every_collection_and_field_of_layout_rs() {
    let architecture = read(&root().join("ARCHITECTURE.md"));
    let table = section(&architecture, FIRESTORE_HEADING)
        .unwrap_or_else(|| panic!("ARCHITECTURE.md has no heading {FIRESTORE_HEADING:?}"));
    let rows = layout_rows(table);
    let layout = firestore_layout();
    let mut problems = Vec::new();
    let documented: BTreeSet<String> = rows.iter().flat_map(|(p, _)| path_collections(p)).collect();
    for collection in &layout.collections {
        if !documented.contains(collection) {
            problems.push(format!(
                "collection `{collection}` (layout.rs `collections`) has no row"
            ));
        }
    }
    for collection in &documented {
        if !layout.collections.contains(collection) {
            problems.push(format!(
                "a row names collection `{collection}`, which layout.rs `collections` lacks"
            ));
        }
    }
    for (module, path, fields) in &layout.documents {
        if path.is_empty() {
            problems.push(format!(
                "layout.rs `fields::{module}`: its doc comment names no `path` to find its row by"
            ));
            continue;
        }
        let want = path_kind(path);
        let Some((row_path, row_fields)) = rows.iter().find(|(p, _)| path_kind(p) == want) else {
            problems.push(format!(
                "no row for `{path}` (layout.rs `fields::{module}`): | `{path}` | {} |",
                fields
                    .iter()
                    .map(|f| format!("`{f}`"))
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
            continue;
        };
        for field in fields {
            if !row_fields.contains(field) {
                problems.push(format!(
                    "row `{row_path}` lacks field `{field}` (layout.rs `fields::{module}`)"
                ));
            }
        }
        for field in row_fields {
            if !fields.contains(field) {
                problems.push(format!(
                    "row `{row_path}` names `{field}`, which layout.rs `fields::{module}` lacks"
                ));
            }
        }
    }
    assert!(
        problems.is_empty(),
        "ARCHITECTURE.md, \"{}\", disagrees with src/store/firestore/layout.rs:\n  {}",
        FIRESTORE_HEADING.trim_start_matches("# "),
        problems.join("\n  ")
    );
}

/// The tables the PostgreSQL schema creates, with their columns: the
/// `CREATE TABLE` statements of migrations.rs and of the migration files
/// it includes, plus `ALTER TABLE ... ADD COLUMN`.
fn postgres_tables() -> BTreeMap<String, BTreeSet<String>> {
    let dir = root().join("src/store/postgres");
    let migrations = read(&dir.join("migrations.rs"));
    let mut sql = vec![migrations.clone()];
    for part in migrations.split("include_str!(\"").skip(1) {
        let file = part.split('"').next().unwrap_or("");
        sql.push(read(&dir.join(file)));
    }
    let mut tables: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for text in &sql {
        // Comments out, one statement per `;`.
        let text: String = text
            .lines()
            .map(|l| l.split("--").next().unwrap_or(""))
            .collect::<Vec<_>>()
            .join("\n");
        for statement in text.split(';') {
            let upper = statement.to_ascii_uppercase();
            if let Some(at) = upper.find("CREATE TABLE ") {
                create_table(&statement[at + "CREATE TABLE ".len()..], &mut tables);
            } else if let Some(at) = upper.find("ALTER TABLE ") {
                alter_table(&statement[at + "ALTER TABLE ".len()..], &mut tables);
            }
        }
    }
    tables
}

/// Words that may come between `CREATE TABLE` / `ADD COLUMN` and a name.
fn is_keyword(word: &str) -> bool {
    ["IF", "NOT", "EXISTS", "ONLY"].contains(&word.to_ascii_uppercase().as_str())
}

/// `name (column type ..., ..., PRIMARY KEY (...)) ...`: the table and
/// its columns (constraints left out).
fn create_table(rest: &str, tables: &mut BTreeMap<String, BTreeSet<String>>) {
    let Some(open) = rest.find('(') else { return };
    let Some(name) = rest[..open].split_whitespace().find(|w| !is_keyword(w)) else {
        return;
    };
    let columns = tables.entry(name.to_string()).or_default();
    let mut depth = 0;
    let mut item = String::new();
    let mut items = Vec::new();
    for c in rest[open + 1..].chars() {
        match c {
            '(' => depth += 1,
            ')' if depth == 0 => break,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                items.push(std::mem::take(&mut item));
                continue;
            }
            _ => {}
        }
        item.push(c);
    }
    items.push(item);
    for item in items {
        let first = item.split_whitespace().next().unwrap_or("");
        let constraint = [
            "PRIMARY",
            "UNIQUE",
            "CHECK",
            "CONSTRAINT",
            "FOREIGN",
            "EXCLUDE",
        ]
        .contains(&first.to_ascii_uppercase().as_str());
        if !first.is_empty() && !constraint {
            columns.insert(first.to_string());
        }
    }
}

/// `name ADD COLUMN c type, ADD COLUMN d type`: the columns added.
fn alter_table(rest: &str, tables: &mut BTreeMap<String, BTreeSet<String>>) {
    let words: Vec<&str> = rest.split_whitespace().collect();
    let Some(name) = words.iter().find(|w| !is_keyword(w)) else {
        return;
    };
    for (i, pair) in words.windows(2).enumerate() {
        if pair[0].eq_ignore_ascii_case("ADD") && pair[1].eq_ignore_ascii_case("COLUMN") {
            if let Some(column) = words[i + 2..].iter().find(|w| !is_keyword(w)) {
                tables
                    .entry(name.to_string())
                    .or_default()
                    .insert(column.trim_matches(',').to_string());
            }
        }
    }
}

#[test]
fn the_architecture_postgres_layout_names_every_table_and_column_of_the_migrations() {
    let architecture = read(&root().join("ARCHITECTURE.md"));
    let tables = postgres_tables();
    assert!(
        tables.contains_key("memberships") && tables.len() >= 4,
        "parsed tables: {tables:?}"
    );
    let Some(text) = section(&architecture, POSTGRES_HEADING) else {
        panic!(
            "ARCHITECTURE.md has no heading {POSTGRES_HEADING:?} with a table | `table` | `column`, ... | of:\n  {}",
            tables
                .iter()
                .map(|(t, c)| format!(
                    "| `{t}` | {} |",
                    c.iter().map(|c| format!("`{c}`")).collect::<Vec<_>>().join(", ")
                ))
                .collect::<Vec<_>>()
                .join("\n  ")
        );
    };
    let rows: BTreeMap<String, BTreeSet<String>> = layout_rows(text).into_iter().collect();
    let mut problems = Vec::new();
    for (table, columns) in &tables {
        let Some(documented) = rows.get(table) else {
            problems.push(format!(
                "table `{table}` has no row: | `{table}` | {} |",
                columns
                    .iter()
                    .map(|c| format!("`{c}`"))
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
            continue;
        };
        for column in columns {
            if !documented.contains(column) {
                problems.push(format!("row `{table}` lacks column `{column}`"));
            }
        }
        for column in documented {
            if !columns.contains(column) {
                problems.push(format!(
                    "row `{table}` names `{column}`, which the migrations do not create"
                ));
            }
        }
    }
    for table in rows.keys() {
        if !tables.contains_key(table) {
            problems.push(format!(
                "a row names table `{table}`, which no migration creates"
            ));
        }
    }
    assert!(
        problems.is_empty(),
        "ARCHITECTURE.md, \"{}\", disagrees with the PostgreSQL migrations (src/store/postgres/migrations.rs):\n  {}",
        POSTGRES_HEADING.trim_start_matches("# "),
        problems.join("\n  ")
    );
}

// ---- `hotcount …` commands ----------------------------------------------------

/// What `hotcount [path] --help` says about one command.
#[derive(Debug, Default)]
struct Help {
    /// Subcommand names.
    commands: BTreeSet<String>,
    /// Long (and short) flags, and whether each takes a value.
    flags: BTreeMap<String, bool>,
    /// Required flags (each entry: the alternatives, any one of which does).
    required: Vec<Vec<String>>,
    /// Required positional arguments.
    positionals: usize,
}

fn help_of<'a>(
    path: &[String],
    cache: &'a mut BTreeMap<Vec<String>, Option<Help>>,
) -> Option<&'a Help> {
    if !cache.contains_key(path) {
        let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_hotcount"));
        command.args(path).arg("--help");
        for (name, _) in std::env::vars() {
            if name.starts_with("HOTCOUNT_") || name.ends_with("_EMULATOR_HOST") {
                command.env_remove(name);
            }
        }
        let out = command.output().expect("hotcount runs");
        let help = out
            .status
            .success()
            .then(|| parse_help(&String::from_utf8_lossy(&out.stdout)));
        cache.insert(path.to_vec(), help);
    }
    cache.get(path).and_then(Option::as_ref)
}

fn parse_help(text: &str) -> Help {
    let mut help = Help::default();
    let mut in_commands = false;
    for line in text.lines() {
        let trimmed = line.trim();
        if let Some(usage) = trimmed.strip_prefix("Usage: ") {
            parse_usage(usage, &mut help);
            continue;
        }
        if trimmed == "Commands:" {
            in_commands = true;
            continue;
        }
        if trimmed.ends_with(':') && !line.starts_with(' ') {
            in_commands = false;
        }
        if in_commands && line.starts_with("  ") && !line.starts_with("      ") {
            if let Some(name) = trimmed.split_whitespace().next() {
                help.commands.insert(name.to_string());
            }
            continue;
        }
        if trimmed.starts_with('-') {
            let takes_value = trimmed.split("  ").next().unwrap_or("").contains('<');
            for word in trimmed.split("  ").next().unwrap_or("").split([',', ' ']) {
                if word.starts_with('-') {
                    help.flags.insert(word.to_string(), takes_value);
                }
            }
        }
    }
    help
}

/// `hotcount replay [OPTIONS] --from <FROM> <ID>...`: what outside `[...]`
/// is required; `<--a <A>|--b>` is a choice of one.
fn parse_usage(usage: &str, help: &mut Help) {
    let mut depth = 0;
    let mut outside = String::new();
    for c in usage.chars() {
        match c {
            '[' => depth += 1,
            ']' => depth -= 1,
            _ if depth == 0 => outside.push(c),
            _ => {}
        }
    }
    let words: Vec<&str> = outside.split_whitespace().collect();
    let mut i = 0;
    while i < words.len() {
        let word = words[i];
        if let Some(choice) = word.strip_prefix("<--") {
            // `<--a <A>|--b>`: gather until the word closing the choice.
            let mut text = format!("--{choice}");
            while !text.ends_with('>') || text.matches('<').count() >= text.matches('>').count() {
                i += 1;
                match words.get(i) {
                    Some(w) => {
                        text.push(' ');
                        text.push_str(w);
                    }
                    None => break,
                }
            }
            let alternatives = text
                .trim_end_matches('>')
                .split('|')
                .filter_map(|a| a.split_whitespace().next())
                .map(String::from)
                .collect();
            help.required.push(alternatives);
        } else if word.starts_with("--") {
            help.required.push(vec![word.to_string()]);
            if words.get(i + 1).is_some_and(|w| w.starts_with('<')) {
                i += 1; // its value
            }
        } else if word.starts_with('<') {
            help.positionals += 1;
        }
        i += 1;
    }
}

/// Shell words of a command line (quotes removed, `[`/`]` of optional
/// parts dropped), up to a pipe, `&`, `;`, a redirection or a comment.
fn words(command: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut word = String::new();
    let mut quote = None;
    for c in command.chars() {
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (Some(_), c) => word.push(c),
            (None, '"' | '\'') => quote = Some(c),
            (None, '|' | '&' | ';' | '>' | '#') => break,
            (None, '[' | ']') => {}
            (None, c) if c.is_whitespace() => {
                if !word.is_empty() {
                    out.push(std::mem::take(&mut word));
                }
            }
            (None, c) => word.push(c),
        }
    }
    if !word.is_empty() {
        out.push(word);
    }
    out
}

/// The arguments after `hotcount` of a command line, if it runs hotcount:
/// `hotcount ...`, `VAR=x hotcount ...`, `target/release/hotcount ...`,
/// `cargo run ... -p hotcount -- ...`.
fn hotcount_args(line: &str) -> Option<Vec<String>> {
    let words = words(line);
    let mut i = 0;
    while i < words.len() && words[i].contains('=') && !words[i].starts_with('-') {
        i += 1;
    }
    let first = words.get(i)?;
    if first == "hotcount" || first.ends_with("/hotcount") {
        return Some(words[i + 1..].to_vec());
    }
    if first == "cargo" && words.get(i + 1).is_some_and(|w| w == "run") {
        let dash = words.iter().position(|w| w == "--")?;
        let package = words.windows(2).any(|w| w[0] == "-p" && w[1] == "hotcount");
        return package.then(|| words[dash + 1..].to_vec());
    }
    None
}

/// A command the docs give, where, and whether it is a whole command (a
/// code block line) or a fragment (a code span in prose).
struct Documented {
    at: String,
    args: Vec<String>,
    whole: bool,
    /// Variables set for it: exported earlier in its code block, or
    /// assigned before it on its line.
    env: BTreeSet<String>,
}

/// `A=x B=y` words at the start of a line (after `export`), by name.
fn assigned(line: &str) -> Vec<String> {
    let line = line.trim().trim_start_matches("export ");
    line.split_whitespace()
        .take_while(|w| w.contains('=') && !w.starts_with('-'))
        .filter_map(|w| w.split('=').next())
        .map(String::from)
        .collect()
}

fn documented_commands(file: &str, text: &str) -> Vec<Documented> {
    let mut out = Vec::new();
    let mut fenced = false;
    let mut joined = String::new();
    let mut start = 0;
    let mut exported = BTreeSet::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            exported.clear();
            continue;
        }
        if fenced {
            if joined.is_empty() {
                start = i + 1;
            }
            let content = line.trim();
            if let Some(head) = content.strip_suffix('\\') {
                joined.push_str(head);
                joined.push(' ');
                continue;
            }
            joined.push_str(content);
            let command = std::mem::take(&mut joined);
            let mut env = exported.clone();
            env.extend(assigned(&command));
            if command.starts_with("export ") {
                exported.extend(assigned(&command));
            }
            if let Some(args) = hotcount_args(command.trim_start_matches("$ ")) {
                out.push(Documented {
                    at: format!("{file}:{start}"),
                    args,
                    whole: true,
                    env,
                });
            }
            continue;
        }
        for span in code_spans(line) {
            // `list | show ID | redrive ID`: the first alternative only.
            if let Some(args) = hotcount_args(span) {
                out.push(Documented {
                    at: format!("{file}:{}", i + 1),
                    args,
                    whole: false,
                    env: BTreeSet::new(),
                });
            }
        }
    }
    out
}

/// The docs whose `hotcount` commands a reader runs (the benchmark history
/// records commands of past builds as they were run, so it is left out).
fn command_sources() -> Vec<(String, String)> {
    let mut sources = Vec::new();
    for file in [
        "README.md",
        "ARCHITECTURE.md",
        "docs/OPERATIONS.md",
        "docs/RELIABILITY.md",
        "docs/BENCHMARKS.md",
        "emulators/README.md",
    ] {
        let path = root().join(file);
        if path.exists() {
            sources.push((file.to_string(), read(&path)));
        }
    }
    for (name, policy) in alert_policies() {
        if let Some(text) = policy["documentation"]["content"].as_str() {
            // A runbook is prose: its commands are code spans.
            sources.push((
                format!("dashboards/alerts/{name}"),
                text.replace("\\n", "\n"),
            ));
        }
    }
    sources
}

/// Why `args` (after `hotcount`) does not parse, if it does not.
fn check_command(
    args: &[String],
    whole: bool,
    cache: &mut BTreeMap<Vec<String>, Option<Help>>,
) -> Vec<String> {
    let mut problems = Vec::new();
    let mut path: Vec<String> = Vec::new();
    let mut rest = args;
    // Global flags before the subcommand (e.g. --pubsub-emulator-host).
    while let Some(first) = rest.first() {
        let help = help_of(&path, cache).expect("`hotcount --help` works");
        if help.commands.is_empty() {
            break; // a command that takes no subcommand: its own flags follow
        }
        if first.starts_with('-') {
            let name = first.split('=').next().unwrap_or(first);
            match help.flags.get(name) {
                Some(true) if !first.contains('=') => rest = &rest[2.min(rest.len())..],
                Some(_) => rest = &rest[1..],
                None => {
                    problems.push(format!("`hotcount` has no flag {name}"));
                    return problems;
                }
            }
            continue;
        }
        if !help.commands.contains(first) {
            let shown = if path.is_empty() {
                "hotcount".to_string()
            } else {
                format!("hotcount {}", path.join(" "))
            };
            problems.push(format!("`{shown}` has no subcommand `{first}`"));
            return problems;
        }
        path.push(first.clone());
        rest = &rest[1..];
    }
    if path.is_empty() {
        return problems; // `hotcount --help` alone, or a bare name
    }
    let help = help_of(&path, cache).expect("help of a listed subcommand");
    if !help.commands.is_empty() && whole {
        problems.push(format!(
            "`hotcount {}` needs a subcommand ({})",
            path.join(" "),
            help.commands.iter().cloned().collect::<Vec<_>>().join(", ")
        ));
        return problems;
    }
    let mut given = BTreeSet::new();
    let mut positionals = 0;
    let mut i = 0;
    while i < rest.len() {
        let word = &rest[i];
        if word == "--" {
            positionals += rest.len() - i - 1;
            break;
        }
        if word.starts_with('-') && word.len() > 1 {
            let name = word.split('=').next().unwrap_or(word);
            match help.flags.get(name) {
                None => problems.push(format!("`hotcount {}` has no flag {name}", path.join(" "))),
                Some(takes_value) => {
                    given.insert(name.to_string());
                    if *takes_value && !word.contains('=') {
                        i += 1;
                    }
                }
            }
        } else {
            positionals += 1;
        }
        i += 1;
    }
    if whole {
        for alternatives in &help.required {
            if !alternatives.iter().any(|a| given.contains(a)) {
                problems.push(format!(
                    "`hotcount {}` requires {}",
                    path.join(" "),
                    alternatives.join(" or ")
                ));
            }
        }
        if positionals < help.positionals {
            problems.push(format!(
                "`hotcount {}` requires {} argument(s), {positionals} given",
                path.join(" "),
                help.positionals
            ));
        }
    }
    problems
}

/// `hotcount setup` against Google (no Pub/Sub emulator in its code
/// block) is refused without `--project-number` and
/// `--consumer-service-account`, or `--skip-iam` (`ops::setup`; not with
/// `--store-only`, which touches no Pub/Sub resource), and
/// without `--project` (or `HOTCOUNT_PROJECT`) it works on the project
/// `hotcount-local`.
fn check_setup_against_google(documented: &Documented) -> Vec<String> {
    let args = &documented.args;
    if args.first().map(String::as_str) != Some("setup") {
        return Vec::new();
    }
    let given = |flag: &str, var: &str| {
        args.iter()
            .any(|a| a == flag || a.starts_with(&format!("{flag}=")))
            || documented.env.contains(var)
    };
    if given("--pubsub-emulator-host", "PUBSUB_EMULATOR_HOST") {
        return Vec::new();
    }
    let mut problems = Vec::new();
    if !given("--project", "HOTCOUNT_PROJECT") {
        problems.push(
            "against Google without --project (or HOTCOUNT_PROJECT) it uses the project `hotcount-local`"
                .to_string(),
        );
    }
    // `--store-only` touches no Pub/Sub resource and grants no role.
    let iam = given("--store-only", "-")
        || given("--skip-iam", "-")
        || (given("--project-number", "HOTCOUNT_PROJECT_NUMBER")
            && given(
                "--consumer-service-account",
                "HOTCOUNT_CONSUMER_SERVICE_ACCOUNT",
            ));
    if !iam {
        problems.push(
            "against Google it is refused without --project-number and --consumer-service-account, or --skip-iam"
                .to_string(),
        );
    }
    problems
}

#[test]
fn every_documented_hotcount_command_parses_against_its_help() {
    let mut cache = BTreeMap::new();
    let top = help_of(&[], &mut cache).expect("`hotcount --help` works");
    assert!(
        top.commands.contains("run") && top.commands.contains("setup"),
        "parsed `hotcount --help`: {top:?}"
    );
    let mut problems = Vec::new();
    let mut checked = 0;
    for (file, text) in command_sources() {
        for documented in documented_commands(&file, &text) {
            checked += 1;
            let mut found = check_command(&documented.args, documented.whole, &mut cache);
            if documented.whole {
                found.extend(check_setup_against_google(&documented));
            }
            for problem in found {
                problems.push(format!(
                    "{}: hotcount {}: {problem}",
                    documented.at,
                    documented.args.join(" ")
                ));
            }
        }
    }
    assert!(checked > 40, "hotcount commands found: {checked}");
    assert!(
        problems.is_empty(),
        "{} documented command(s) that `--help` does not accept:\n  {}",
        problems.len(),
        problems.join("\n  ")
    );
}

#[test]
fn usage_lines_and_shell_words_parse() {
    let mut help = Help::default();
    parse_usage(
        "hotcount dlq replay [OPTIONS] <--message-id <MESSAGE_IDS>|--all> --from <FROM> <IDS>...",
        &mut help,
    );
    assert_eq!(
        help.required,
        vec![
            vec!["--message-id".to_string(), "--all".to_string()],
            vec!["--from".to_string()]
        ]
    );
    assert_eq!(help.positionals, 1);
    assert_eq!(
        hotcount_args("PROJECT_ID=x hotcount count --project \"$P\" p1   # note"),
        Some(vec![
            "count".into(),
            "--project".into(),
            "$P".into(),
            "p1".into()
        ])
    );
    assert_eq!(
        hotcount_args("cargo run --release -p hotcount -- count p1"),
        Some(vec!["count".into(), "p1".into()])
    );
    assert_eq!(hotcount_args("hotcount-loadgen demo"), None);
}

// ---- figures the deploy files cite ---------------------------------------------

/// Deploy files (manifests and scripts), recursively.
fn deploy_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("deploy/") {
        let path = entry.expect("entry").path();
        if path.is_dir() {
            deploy_files(&path, out);
        } else if path
            .extension()
            .is_some_and(|e| e == "yaml" || e == "sh" || e == "md")
        {
            out.push(path);
        }
    }
}

/// Comment paragraphs of a file (runs of `#` lines, split at a bare `#`
/// and at each `- ` list item),
/// with the line each starts on.
fn comment_paragraphs(text: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    let mut current = String::new();
    let mut start = 0;
    for (i, line) in text.lines().enumerate() {
        let trimmed = line.trim();
        let comment = trimmed.strip_prefix('#').map(str::trim);
        match comment {
            Some(c) if !c.is_empty() && !trimmed.starts_with("#!") => {
                // A list item is a paragraph of its own.
                if c.starts_with("- ") && !current.is_empty() {
                    out.push((start, std::mem::take(&mut current)));
                }
                if current.is_empty() {
                    start = i + 1;
                }
                current.push_str(c);
                current.push(' ');
            }
            _ => {
                if !current.is_empty() {
                    out.push((start, std::mem::take(&mut current)));
                }
            }
        }
    }
    if !current.is_empty() {
        out.push((start, current));
    }
    out
}

/// Measured figures in a text: a range or a number written with a
/// measurement unit (`9-16 ms`, `53-65 MiB`, `35,583-54,802 events/s`,
/// `0.4-0.64 core`, `40,000 events/s`); the number as written.
fn figures(text: &str) -> Vec<String> {
    let units = ["ms", "MiB", "events/s", "core", "cores"];
    let words: Vec<&str> = text.split_whitespace().collect();
    let mut out = Vec::new();
    for (i, word) in words.iter().enumerate() {
        let number = word.trim_start_matches(['(', '~']);
        let is_number = number.starts_with(|c: char| c.is_ascii_digit())
            && number
                .chars()
                .all(|c| c.is_ascii_digit() || ",.-".contains(c));
        let unit = words
            .get(i + 1)
            .map(|u| u.trim_end_matches([',', ';', ')', '.', ':']));
        if is_number && unit.is_some_and(|u| units.contains(&u)) {
            out.push(number.trim_end_matches([',', '.']).to_string());
        }
    }
    out
}

/// The doc a comment paragraph cites (`docs/X.md`), and the section it
/// names in quotes right after (`docs/X.md, "Heading"`), if any.
fn citation(paragraph: &str) -> Option<(String, Option<String>)> {
    let at = paragraph.find("docs/")?;
    let file: String = paragraph[at..]
        .chars()
        .take_while(|c| c.is_ascii_alphanumeric() || "/._-".contains(*c))
        .collect();
    let file = file.trim_end_matches('.').to_string();
    if !file.ends_with(".md") {
        return None;
    }
    let after = paragraph[at + file.len()..].trim_start_matches([',', ' ']);
    let heading = after
        .strip_prefix('"')
        .and_then(|h| h.split('"').next())
        .map(String::from);
    Some((file, heading))
}

#[test]
fn every_figure_a_deploy_file_cites_is_in_the_doc_it_cites() {
    let repo = root();
    let mut files = Vec::new();
    deploy_files(&repo.join("deploy"), &mut files);
    files.sort();
    let mut problems = Vec::new();
    let mut checked = 0;
    for file in &files {
        let shown = file
            .strip_prefix(&repo)
            .unwrap_or(file)
            .display()
            .to_string();
        for (line, paragraph) in comment_paragraphs(&read(file)) {
            let Some((doc, heading)) = citation(&paragraph) else {
                continue;
            };
            let found = figures(&paragraph);
            if found.is_empty() {
                continue;
            }
            let Ok(text) = std::fs::read_to_string(repo.join(&doc)) else {
                problems.push(format!("{shown}:{line}: cites {doc}, which does not exist"));
                continue;
            };
            let cited = match &heading {
                Some(h) => {
                    let wanted = text.lines().find(|l| {
                        l.starts_with('#') && l.trim_start_matches('#').trim() == h.as_str()
                    });
                    match wanted.and_then(|w| section(&text, w)) {
                        Some(s) => s.to_string(),
                        None => {
                            problems.push(format!(
                                "{shown}:{line}: cites {doc}, \"{h}\": no such heading"
                            ));
                            continue;
                        }
                    }
                }
                None => text,
            };
            for figure in found {
                checked += 1;
                if !cited.contains(&figure) {
                    let place = heading
                        .as_ref()
                        .map_or(doc.clone(), |h| format!("{doc}, \"{h}\""));
                    problems.push(format!(
                        "{shown}:{line}: the figure {figure} is not in {place}, which it cites"
                    ));
                }
            }
        }
    }
    assert!(checked >= 3, "cited figures found: {checked}");
    assert!(
        problems.is_empty(),
        "{} figure(s) not found where the deploy files say they come from:\n  {}",
        problems.len(),
        problems.join("\n  ")
    );
}

#[test]
fn figures_and_citations_parse() {
    assert_eq!(
        figures("used 9-16 ms of CPU, peaked at 53-65 MiB while draining at 35,600-54,800 events/s (2 x 64 MiB)"),
        ["9-16", "53-65", "35,600-54,800", "64"]
    );
    assert_eq!(
        citation("the model (docs/OPERATIONS.md, \"The measured figures\"): x"),
        Some((
            "docs/OPERATIONS.md".to_string(),
            Some("The measured figures".to_string())
        ))
    );
}

// ---- deploy/render.sh: every name an operator may change ---------------------

/// The names an operator may change, as `deploy/setup.sh` and
/// `deploy/render.sh` read them, with a value unlike any default.
const RENAMED: &[(&str, &str)] = &[
    ("TOPIC", "ev-topic"),
    ("SUBSCRIPTION", "ev-sub"),
    ("PUSH_SUBSCRIPTION", "ev-push-sub"),
    ("DEAD_LETTER_TOPIC", "ev-dl-topic"),
    ("DEAD_LETTER_SUBSCRIPTION", "ev-dl-sub"),
    ("SERVICE_ACCOUNT_NAME", "ev-sa"),
    ("CONSUMER", "ev-consumer"),
    ("PUSH_CONSUMER", "ev-push-consumer"),
    ("DATABASE", "ev-db"),
    ("COLLECTION_PREFIX", "ev_"),
    ("K8S_NAMESPACE", "ev-ns"),
    ("K8S_SERVICE_ACCOUNT", "ev-ksa"),
    ("WORKER_POOL", "ev-pool"),
    ("PUSH_CLOUD_RUN_SERVICE", "ev-push-svc"),
];

/// What of a default name may be left in rendered output, as a pattern a
/// line must not contain (with why); a `value: ` pattern is a whole line.
const DEFAULTS_LEFT: &[(&str, &str)] = &[
    ("likes-hotcount", "the subscription"),
    ("likes-dead-letter", "a dead-letter topic or subscription"),
    ("topic_id: likes", "the topic"),
    ("topic_id=\"likes\"", "the topic"),
    ("topic_id = \\\"likes\\\"", "the topic"),
    ("published to likes", "the topic"),
    ("hotcount@", "the consumer's service account"),
    ("namespace: hotcount", "the Kubernetes namespace"),
    (
        "serviceAccountName: hotcount",
        "the Kubernetes service account",
    ),
    ("workerpools/hotcount", "the worker pool"),
    ("name: hotcount-push", "the Cloud Run push service"),
    ("value: hotcount", "the consumer name (HOTCOUNT_CONSUMER)"),
    (
        "value: hotcount-push",
        "the push consumer name (HOTCOUNT_CONSUMER)",
    ),
];

#[test]
fn render_sh_writes_every_name_an_operator_may_change_into_every_file() {
    let repo = root();
    let mut files = Vec::new();
    deploy_files(&repo.join("deploy"), &mut files);
    files.retain(|f| f.extension().is_some_and(|e| e == "yaml"));
    for dir in ["dashboards", "dashboards/alerts"] {
        for entry in std::fs::read_dir(repo.join(dir)).expect("dashboards/") {
            let path = entry.expect("entry").path();
            if path.extension().is_some_and(|e| e == "json") {
                files.push(path);
            }
        }
    }
    files.sort();
    let mut problems = Vec::new();
    for file in &files {
        let shown = file
            .strip_prefix(&repo)
            .unwrap_or(file)
            .display()
            .to_string();
        let mut command = std::process::Command::new("bash");
        command
            .arg(repo.join("deploy/render.sh"))
            .arg(file)
            .current_dir(&repo)
            .envs([
                ("PROJECT_ID", "ev-project"),
                ("REGION", "europe-west1"),
                ("TAG", "v1"),
            ])
            .envs(RENAMED.iter().copied());
        let out = command.output().expect("bash runs deploy/render.sh");
        if !out.status.success() {
            problems.push(format!(
                "{shown}: render.sh failed: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            ));
            continue;
        }
        let text = String::from_utf8_lossy(&out.stdout);
        if shown.ends_with(".json") {
            if let Err(e) = serde_json::from_str::<serde_json::Value>(&text) {
                problems.push(format!("{shown}: rendered, it is no longer JSON: {e}"));
            }
        }
        for (n, line) in text.lines().enumerate() {
            for (pattern, what) in DEFAULTS_LEFT {
                // `value: ...` lines are matched whole (`value: hotcount`
                // is not `value: hotcount-push`).
                let hit = if pattern.starts_with("value: ") {
                    line.trim() == *pattern
                } else {
                    line.contains(pattern)
                };
                if hit {
                    problems.push(format!(
                        "{shown}: rendered line {}: `{}` still holds the default {what}",
                        n + 1,
                        line.trim()
                    ));
                }
            }
        }
        for (var, value) in [("DATABASE", "ev-db"), ("COLLECTION_PREFIX", "ev_")] {
            let env = format!("HOTCOUNT_{var}");
            if read(file).contains("name: HOTCOUNT_CONSUMER")
                && !text.contains(&format!("name: {env}"))
            {
                problems.push(format!(
                    "{shown}: sets HOTCOUNT_CONSUMER but not {env} ({var})"
                ));
            } else if text.contains(&format!("name: {env}")) && !text.contains(value) {
                problems.push(format!("{shown}: {env} is not rendered from {var}"));
            }
        }
    }
    assert!(files.len() >= 15, "files rendered: {files:?}");
    assert!(
        problems.is_empty(),
        "deploy/render.sh leaves names an operator may change:\n  {}",
        problems.join("\n  ")
    );
}

// ---- the README's demo commands and CI -----------------------------------------

/// The lines `scripts/readme-demos.sh` selects from README.md: the first
/// line of the first code block, and the first line matching each of its
/// `awk` patterns `/.../`.
fn demo_lines_ci_runs(readme: &str) -> BTreeSet<String> {
    let script = read(&root().join("scripts/readme-demos.sh"));
    let mut blocks: Vec<&str> = Vec::new();
    let mut fenced = false;
    for line in readme.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
        } else if fenced && !line.trim().is_empty() {
            blocks.push(line);
        }
    }
    let mut out = BTreeSet::new();
    if let Some(first) = blocks.first() {
        out.insert(first.to_string());
    }
    for part in script.split("f && /").skip(1) {
        let pattern = part.split('/').next().unwrap_or("");
        if let Some(line) = blocks.iter().find(|l| l.contains(pattern)) {
            out.insert(line.to_string());
        }
    }
    out
}

#[test]
fn the_readme_says_which_demo_commands_ci_runs() {
    let readme = read(&root().join("README.md"));
    let runs = demo_lines_ci_runs(&readme);
    assert!(runs.len() >= 2, "lines readme-demos.sh selects: {runs:?}");
    let prose: String = prose_lines(&readme)
        .into_iter()
        .map(|(_, l)| l)
        .collect::<Vec<_>>()
        .join(" ");
    let prose = prose.split_whitespace().collect::<Vec<_>>().join(" ");
    let mut problems = Vec::new();
    let mut fenced = false;
    for (i, line) in readme.lines().enumerate() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if !fenced || !line.contains("cargo run") || !line.contains(" demo") {
            continue;
        }
        let mut after = line.split(" demo").nth(1).unwrap_or("").split_whitespace();
        let named = match after.next() {
            Some(flag) if flag.starts_with("--") && !flag.starts_with('#') => {
                format!("`demo {flag}")
            }
            _ => "`demo`".to_string(),
        };
        if !runs.contains(line) && !prose.contains(named.as_str()) {
            problems.push(format!(
                "README.md:{}: CI does not run this demo command (scripts/readme-demos.sh does not select it), and the page does not say so by naming {named}...`: {}",
                i + 1,
                line.trim()
            ));
        }
    }
    // A claim that CI runs them all holds only when it does.
    let all = "CI runs the demo commands";
    if !problems.is_empty() && prose.contains(all) {
        problems.push(format!("README.md says \"{all}\""));
    }
    assert!(
        problems.is_empty(),
        "README.md and scripts/readme-demos.sh disagree on what CI runs (CI runs: {runs:?}):\n  {}",
        problems.join("\n  ")
    );
}
