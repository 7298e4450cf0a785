//! The docs say what the code does: the metric table in
//! `docs/OPERATIONS.md` lists exactly the metrics hotcount registers, the
//! `hotcount run` table in `README.md` lists exactly the flags `run --help`
//! prints (names, environment variables, defaults), and every link and
//! file mention in the repo's Markdown (and in the alert policies' runbook
//! text) points at a file and heading that exist; `CHANGELOG.md`'s newest
//! release is the crates' version, and it names the data format the code
//! knows.
//!
//! Each failure names the row (or link) that is missing, extra or wrong,
//! and what the row should say, so a branch that adds a flag or a metric
//! knows which line of which table to write.

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

/// The cells of a Markdown table row (`| a | b |`), trimmed; `\|` stays in
/// its cell.
fn cells(line: &str) -> Vec<String> {
    let inner = line.trim().trim_start_matches('|').trim_end_matches('|');
    let mut out = Vec::new();
    let mut cell = String::new();
    let mut chars = inner.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\\' if chars.peek() == Some(&'|') => {
                cell.push('|');
                chars.next();
            }
            '|' => out.push(std::mem::take(&mut cell).trim().to_string()),
            _ => cell.push(c),
        }
    }
    out.push(cell.trim().to_string());
    out
}

/// The first `code span` of a cell.
fn code_span(cell: &str) -> Option<&str> {
    let start = cell.find('`')? + 1;
    let len = cell[start..].find('`')?;
    Some(&cell[start..start + len])
}

/// The rows of the first table after the heading `heading` (and before the
/// next heading) whose header starts with the column `first`, as (line
/// number, cells), header and separator skipped.
fn table_after(text: &str, heading: &str, first: &str) -> Vec<(usize, Vec<String>)> {
    let lines = prose_lines(text);
    let at = lines
        .iter()
        .position(|(_, l)| l.trim() == heading)
        .unwrap_or_else(|| panic!("no heading {heading:?}"));
    let mut rows = Vec::new();
    let mut in_table = false;
    for (n, line) in &lines[at + 1..] {
        if line.starts_with('#') {
            break;
        }
        if line.trim_start().starts_with('|') {
            if !in_table && cells(line).first().map(String::as_str) != Some(first) {
                continue;
            }
            in_table = true;
            rows.push((*n, cells(line)));
        } else if in_table {
            break;
        }
    }
    assert!(
        rows.len() > 2,
        "a table with a {first:?} column under {heading:?}"
    );
    rows.drain(..2); // header, separator
    rows
}

// ---- the metric table -------------------------------------------------------

/// Every `# TYPE` line of a fresh registry: family -> type.
fn registered_types() -> BTreeMap<String, String> {
    let stats = hotcount::telemetry::Stats::default();
    stats
        .render_prometheus()
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.split_once(' '))
        .map(|(name, kind)| (name.to_string(), kind.to_string()))
        .collect()
}

#[test]
fn the_operations_metric_table_lists_exactly_the_registered_metrics() {
    let path = root().join("docs/OPERATIONS.md");
    let rows = table_after(&read(&path), "## Metrics", "metric");
    let types = registered_types();
    let mut documented = BTreeMap::new();
    let mut problems = Vec::new();
    for (line, row) in &rows {
        let Some(name) = row.first().and_then(|c| code_span(c)) else {
            problems.push(format!(
                "line {line}: the first cell is not a `metric name`"
            ));
            continue;
        };
        let name = name.split('{').next().unwrap_or(name).to_string();
        if documented.insert(name.clone(), *line).is_some() {
            problems.push(format!("line {line}: {name} has two rows"));
        }
        let kind = row.get(1).map(String::as_str).unwrap_or("");
        if let Some(registered) = types.get(&name) {
            if kind != registered {
                problems.push(format!(
                    "line {line}: {name} is a {registered}, the row says {kind:?}"
                ));
            }
        }
    }
    let registered: BTreeSet<&str> = hotcount::telemetry::names::ALL
        .iter()
        .map(|m| m.name)
        .collect();
    for metric in hotcount::telemetry::names::ALL {
        if !documented.contains_key(metric.name) {
            let kind = types.get(metric.name).map(String::as_str).unwrap_or("?");
            problems.push(format!(
                "missing row: | `{}` | {kind} | {} |",
                metric.name, metric.help
            ));
        }
    }
    for (name, line) in &documented {
        if !registered.contains(name.as_str()) {
            problems.push(format!(
                "line {line}: extra row {name}: not in src/telemetry/names.rs `ALL`"
            ));
        }
    }
    assert!(
        problems.is_empty(),
        "{} (section \"Metrics\") disagrees with the registered metrics:\n  {}",
        path.display(),
        problems.join("\n  ")
    );
}

// ---- the `run` flag table ---------------------------------------------------

/// A flag as `run --help` prints it.
#[derive(Debug)]
struct Flag {
    takes_value: bool,
    env: Option<String>,
    default: Option<String>,
}

/// Parses clap's long help: an option line (`--name <VALUE>`), then
/// indented text with `[env: NAME=...]` and `[default: ...]`.
fn flags_of_help(help: &str) -> BTreeMap<String, Flag> {
    let mut flags = BTreeMap::new();
    let mut current: Option<String> = None;
    for line in help.lines() {
        let trimmed = line.trim();
        if trimmed.starts_with("--") || trimmed.starts_with("-h, --") {
            let long = trimmed
                .split_whitespace()
                .find(|w| w.starts_with("--"))
                .expect("a long flag")
                .trim_end_matches(',')
                .to_string();
            let takes_value = trimmed.contains('<');
            flags.insert(
                long.clone(),
                Flag {
                    takes_value,
                    env: None,
                    default: None,
                },
            );
            current = Some(long);
            continue;
        }
        let Some(flag) = current.as_ref().and_then(|c| flags.get_mut(c)) else {
            continue;
        };
        if let Some(env) = trimmed.strip_prefix("[env: ") {
            // `[env: NAME=value]`, or `[env: NAME]` where the value is hidden.
            let name = env.split('=').next().unwrap_or(env).trim_end_matches(']');
            flag.env = Some(name.to_string());
        } else if let Some(default) = trimmed.strip_prefix("[default: ") {
            flag.default = Some(default.trim_end_matches(']').to_string());
        }
    }
    flags.remove("--help");
    flags
}

fn run_help() -> String {
    let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_hotcount"));
    command.args(["run", "--help"]);
    // Set variables would show in `[env: NAME=value]`; the help's own
    // defaults are what the table documents.
    for (name, _) in std::env::vars() {
        if name.starts_with("HOTCOUNT_") || name.ends_with("_EMULATOR_HOST") {
            command.env_remove(name);
        }
    }
    let out = command.output().expect("hotcount runs");
    assert!(out.status.success());
    String::from_utf8(out.stdout).expect("UTF-8 help")
}

/// What the default cell must start with for `flag`: its default as
/// `--help` prints it (in a code span or not), or `off` (a switch) /
/// `unset` (a value without a default).
fn expected_default(flag: &Flag) -> String {
    match (&flag.default, flag.takes_value) {
        (Some(default), _) => default.clone(),
        (None, false) => "off".into(),
        (None, true) => "unset".into(),
    }
}

/// The default a cell documents: its leading code span, or its first word.
fn documented_default(cell: &str) -> String {
    match code_span(cell) {
        Some(span) if cell.trim_start().starts_with('`') => span.to_string(),
        _ => cell.split_whitespace().next().unwrap_or("").to_string(),
    }
}

#[test]
fn the_readme_run_table_lists_exactly_the_flags_of_run_help() {
    let path = root().join("README.md");
    let rows = table_after(&read(&path), "### `hotcount run`", "flag");
    let flags = flags_of_help(&run_help());
    assert!(flags.len() > 10, "parsed run --help: {flags:?}");
    let mut problems = Vec::new();
    let mut documented = BTreeSet::new();
    for (line, row) in &rows {
        let Some(name) = row.first().and_then(|c| code_span(c)) else {
            problems.push(format!("line {line}: the first cell is not a `--flag`"));
            continue;
        };
        documented.insert(name.to_string());
        let Some(flag) = flags.get(name) else {
            problems.push(format!(
                "line {line}: extra row {name}: `hotcount run --help` has no such flag"
            ));
            continue;
        };
        let env = row.get(1).and_then(|c| code_span(c));
        if env != flag.env.as_deref() {
            problems.push(format!(
                "line {line}: {name}: env is {:?} in --help, {env:?} in the table",
                flag.env
            ));
        }
        let want = expected_default(flag);
        let have = documented_default(row.get(2).map(String::as_str).unwrap_or(""));
        if have != want {
            problems.push(format!(
                "line {line}: {name}: default should be `{want}` (as --help prints it), the table says `{have}`"
            ));
        }
    }
    for (name, flag) in &flags {
        if !documented.contains(name) {
            let env = flag
                .env
                .as_deref()
                .map_or("-".to_string(), |e| format!("`{e}`"));
            problems.push(format!(
                "missing row: | `{name}` | {env} | `{}` | (meaning) |",
                expected_default(flag)
            ));
        }
    }
    assert!(
        problems.is_empty(),
        "{} (the `hotcount run` table) disagrees with `hotcount run --help`:\n  {}",
        path.display(),
        problems.join("\n  ")
    );
}

// ---- links ------------------------------------------------------------------

/// Every Markdown file of the repo (build output, the fuzz corpus and
/// generated reports left out).
fn markdown_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
        .expect("read dir")
        .map(|e| e.expect("entry").path())
        .collect();
    entries.sort();
    for path in entries {
        let name = path.file_name().map(|n| n.to_string_lossy().into_owned());
        let skip = matches!(
            name.as_deref(),
            Some("target" | ".git" | "corpus" | "reports" | "node_modules")
        );
        if path.is_dir() && !skip {
            markdown_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "md") {
            out.push(path);
        }
    }
}

/// GitHub's anchor for a heading: lower case, punctuation dropped, spaces
/// to hyphens.
fn slug(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || *c == ' ' || *c == '-' || *c == '_')
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

/// The anchors of a Markdown file's headings (outside code blocks), with
/// GitHub's `-1`, `-2` suffixes for repeated ones.
fn anchors(text: &str) -> BTreeSet<String> {
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    let mut out = BTreeSet::new();
    for (_, line) in prose_lines(text) {
        let hashes = line.chars().take_while(|c| *c == '#').count();
        if hashes == 0 || hashes > 6 || !line[hashes..].starts_with(' ') {
            continue;
        }
        let base = slug(&line[hashes..]);
        let n = seen.entry(base.clone()).or_insert(0);
        out.insert(if *n == 0 {
            base.clone()
        } else {
            format!("{base}-{n}")
        });
        *n += 1;
    }
    out
}

/// `[text](target)` links of a line.
fn links(line: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = line;
    while let Some(at) = rest.find("](") {
        let tail = &rest[at + 2..];
        match tail.find(')') {
            Some(end) => {
                out.push(tail[..end].trim().to_string());
                rest = &tail[end..];
            }
            None => break,
        }
    }
    out
}

/// Bare mentions of Markdown files (`docs/OPERATIONS.md#metrics`,
/// `DESIGN.md`) in prose and code spans. [`checked_mention`] decides which
/// of them name a file of the repo.
fn mentions(line: &str) -> Vec<String> {
    let bytes: Vec<char> = line.chars().collect();
    let word = |c: char| c.is_ascii_alphanumeric() || "_./-#".contains(c);
    let mut out = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        if word(bytes[i]) && (i == 0 || !word(bytes[i - 1])) {
            let start = i;
            while i < bytes.len() && word(bytes[i]) {
                i += 1;
            }
            let token: String = bytes[start..i].iter().collect();
            let token = token.trim_end_matches(['.', '-']).to_string();
            let path = token.split('#').next().unwrap_or("");
            let preceded_by_link = start >= 2 && bytes[start - 1] == '(' && bytes[start - 2] == ']';
            if path.ends_with(".md") && !preceded_by_link && !path.starts_with("http") {
                out.push(token);
            }
        } else {
            i += 1;
        }
    }
    out
}

/// Whether a bare mention names a file of the repo (and must resolve): one
/// with a heading anchor, a capitalised name (`DESIGN.md`, `README.md`),
/// or a path under a directory the repo has. A file a command writes
/// (`report.md`, `reports/demo/report.md`) is not in the repo.
fn checked_mention(repo: &Path, from: &Path, mention: &str) -> bool {
    let path = mention.split('#').next().unwrap_or(mention);
    let dir = from.parent().expect("a file's directory");
    let first = path.split('/').next().unwrap_or(path);
    mention.contains('#')
        || path.starts_with(|c: char| c.is_ascii_uppercase())
        || (path.contains('/') && (repo.join(first).is_dir() || dir.join(first).is_dir()))
}

/// Why `target`, referenced from `from`, does not resolve (None if it does).
fn broken(repo: &Path, from: &Path, target: &str, bare: bool) -> Option<String> {
    if target.contains("://") || target.starts_with("mailto:") {
        return None;
    }
    let (path, anchor) = match target.split_once('#') {
        Some((p, a)) => (p, Some(a)),
        None => (target, None),
    };
    let dir = from.parent().expect("a file's directory");
    let file = if path.is_empty() {
        Some(from.to_path_buf())
    } else {
        // A bare mention may be written from the repo's root.
        let candidates = if bare {
            vec![dir.join(path), repo.join(path)]
        } else {
            vec![dir.join(path)]
        };
        candidates.into_iter().find(|c| c.exists())
    };
    let Some(file) = file else {
        return Some(format!("{path} does not exist"));
    };
    let anchor = anchor?;
    if file.is_dir() || file.extension().is_none_or(|e| e != "md") {
        return Some(format!("#{anchor} on a file that is not Markdown"));
    }
    if anchors(&read(&file)).contains(anchor) {
        None
    } else {
        Some(format!(
            "{} has no heading #{anchor}",
            file.strip_prefix(repo).unwrap_or(&file).display()
        ))
    }
}

/// The runbook text of each alert policy (Markdown inside JSON).
fn alert_runbooks(repo: &Path) -> Vec<(PathBuf, String)> {
    let dir = repo.join("dashboards/alerts");
    let mut out = Vec::new();
    let mut entries: Vec<PathBuf> = std::fs::read_dir(&dir)
        .expect("dashboards/alerts")
        .map(|e| e.expect("entry").path())
        .collect();
    entries.sort();
    for path in entries {
        let policy: serde_json::Value =
            serde_json::from_str(&read(&path)).expect("an alert policy is JSON");
        if let Some(text) = policy["documentation"]["content"].as_str() {
            out.push((path, text.to_string()));
        }
    }
    out
}

#[test]
fn every_markdown_link_and_file_mention_points_at_a_file_and_heading_that_exist() {
    let repo = root();
    let mut files = Vec::new();
    markdown_files(&repo, &mut files);
    assert!(files.len() >= 5, "Markdown files found: {files:?}");
    let mut sources: Vec<(PathBuf, String)> = files.iter().map(|f| (f.clone(), read(f))).collect();
    // An alert's runbook text resolves from the repo's root, as a reader
    // of the alert finds it.
    for (path, text) in alert_runbooks(&repo) {
        sources.push((repo.join(path.file_name().expect("a file name")), text));
        let _ = path;
    }
    let mut problems = Vec::new();
    let mut checked = 0;
    for (file, text) in &sources {
        let shown = file
            .strip_prefix(&repo)
            .unwrap_or(file)
            .display()
            .to_string();
        for (line, content) in prose_lines(text) {
            for (target, bare) in links(content).into_iter().map(|t| (t, false)).chain(
                mentions(content)
                    .into_iter()
                    .filter(|m| checked_mention(&repo, file, m))
                    .map(|t| (t, true)),
            ) {
                checked += 1;
                if let Some(why) = broken(&repo, file, &target, bare) {
                    problems.push(format!("{shown}:{line}: {target}: {why}"));
                }
            }
        }
    }
    assert!(checked > 20, "links found: {checked}");
    assert!(
        problems.is_empty(),
        "{} broken link(s) or file mention(s):\n  {}",
        problems.len(),
        problems.join("\n  ")
    );
}

#[test]
fn anchors_follow_githubs_rules() {
    let text = "# A `code` Title (x/y)\n```\n# not a heading\n```\n## Dup\n## Dup\n";
    let got = anchors(text);
    let want: BTreeSet<String> = ["a-code-title-xy", "dup", "dup-1"]
        .into_iter()
        .map(String::from)
        .collect();
    assert_eq!(got, want);
    assert_eq!(
        mentions("see docs/OPERATIONS.md#metrics and (DESIGN.md)."),
        ["docs/OPERATIONS.md#metrics", "DESIGN.md"]
    );
    assert_eq!(
        links("[a](b.md#c) and [d](https://x/y)"),
        ["b.md#c", "https://x/y"]
    );
}

// ---- the changelog ---------------------------------------------------------

/// The releases `CHANGELOG.md` lists, in its order: each `## [x.y.z]`
/// heading's version.
fn changelog_versions(text: &str) -> Vec<String> {
    prose_lines(text)
        .into_iter()
        .filter_map(|(_, line)| line.strip_prefix("## ["))
        .filter_map(|rest| rest.split(']').next())
        .map(String::from)
        .collect()
}

/// `x.y.z` as numbers, for ordering.
fn semver(version: &str) -> Vec<u64> {
    version
        .split('.')
        .map(|part| {
            part.parse()
                .unwrap_or_else(|_| panic!("CHANGELOG.md: `{version}` is not x.y.z"))
        })
        .collect()
}

#[test]
fn the_changelogs_newest_release_is_the_crates_version_and_it_names_the_data_format_the_code_knows()
{
    let text = read(&root().join("CHANGELOG.md"));
    let versions = changelog_versions(&text);
    let crate_version = env!("CARGO_PKG_VERSION");
    assert_eq!(
        versions.first().map(String::as_str),
        Some(crate_version),
        "CHANGELOG.md: the newest `## [x.y.z]` heading must be the crate's version (Cargo.toml); headings found: {versions:?}"
    );
    let order: Vec<Vec<u64>> = versions.iter().map(|v| semver(v)).collect();
    assert!(
        order.windows(2).all(|pair| pair[0] > pair[1]),
        "CHANGELOG.md: releases must be listed newest first, each once: {versions:?}"
    );
    for member in ["emulators", "loadgen", "nullconsumer", "pgtemp", "scrape"] {
        let manifest = read(&root().join(member).join("Cargo.toml"));
        let version = manifest
            .lines()
            .find_map(|l| l.strip_prefix("version = \""))
            .and_then(|rest| rest.split('"').next());
        assert_eq!(
            version,
            Some(crate_version),
            "{member}/Cargo.toml: the workspace's crates share one version"
        );
    }
    let known = hotcount::store::format::DATA_FORMAT_KNOWN;
    let claim = "The data format this build knows is ";
    let said: Vec<&str> = prose_lines(&text)
        .into_iter()
        .filter_map(|(_, line)| line.split_once(claim).map(|(_, rest)| rest))
        .collect();
    assert!(
        said.iter()
            .any(|rest| rest.split(|c: char| !c.is_ascii_digit()).next() == Some(&known.to_string())),
        "CHANGELOG.md must say \"{claim}{known}\" (store::format::DATA_FORMAT_KNOWN); it says: {said:?}"
    );
    let newest = text.split("\n## [").nth(1).unwrap_or_default();
    assert!(
        newest.contains(&format!("data format {known}"))
            || newest.contains(&format!("--data-format {known}")),
        "CHANGELOG.md: the newest release must say what data format {known} gates"
    );
}
