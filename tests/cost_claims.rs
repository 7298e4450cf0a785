//! `docs/COST.md` turns a bench run's counts into a bill; this checks that
//! every count it quotes is the one the run printed: each row of its
//! "The counts" table names a report committed under `reports/cost/`, a
//! case, a row and a column of that case's operations table, and the value
//! must be that cell exactly. A new run that changes a count fails here
//! until COST.md (and its arithmetic) follows.

use std::path::PathBuf;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn read(path: &str) -> String {
    std::fs::read_to_string(root().join(path)).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// A Markdown table row's cells, trimmed (`| a | b |` is `[a, b]`).
fn cells(line: &str) -> Vec<String> {
    let line = line.trim();
    let inner = line.strip_prefix('|').unwrap_or(line);
    let inner = inner.strip_suffix('|').unwrap_or(inner);
    inner.split('|').map(|c| c.trim().to_string()).collect()
}

/// The lines of the table that follows `heading` (a whole line) in `text`.
fn table_after<'a>(text: &'a str, heading: &str) -> Option<Vec<&'a str>> {
    let mut lines = text.lines().skip_while(|l| l.trim() != heading);
    lines.next()?;
    let table: Vec<&str> = lines
        .skip_while(|l| !l.trim_start().starts_with('|'))
        .take_while(|l| l.trim_start().starts_with('|'))
        .collect();
    (!table.is_empty()).then_some(table)
}

/// The cell of `report`'s operations table of `case`, in row `row` and
/// the column headed `column`; or why it cannot be found.
fn report_cell(report: &str, case: &str, row: &str, column: &str) -> Result<String, String> {
    let heading = format!("#### {case}: operations per 1,000 events");
    let table = table_after(report, &heading).ok_or(format!("no table under `{heading}`"))?;
    let header = cells(table[0]);
    let at = header
        .iter()
        .position(|h| h == column)
        .ok_or(format!("`{heading}` has no column `{column}` ({header:?})"))?;
    let line = table
        .iter()
        .map(|l| cells(l))
        .find(|c| c.first().map(String::as_str) == Some(row))
        .ok_or(format!("`{heading}` has no row `{row}`"))?;
    line.get(at)
        .cloned()
        .ok_or(format!("`{heading}`, row `{row}`: no cell {at}"))
}

/// The quoted counts: (report file, case, row, column, value) per row of
/// COST.md's "The counts" table.
fn quoted_counts(cost: &str) -> Vec<[String; 5]> {
    let table = table_after(cost, "## The counts").expect("docs/COST.md: a `## The counts` table");
    let mut out = Vec::new();
    for line in table.iter().skip(2) {
        let c = cells(line);
        assert_eq!(
            c.len(),
            5,
            "docs/COST.md, The counts: | report | case | row | column | value |: {line}"
        );
        let report = c[0].trim_matches('`').to_string();
        out.push([
            report,
            c[1].clone(),
            c[2].clone(),
            c[3].clone(),
            c[4].clone(),
        ]);
    }
    out
}

#[test]
fn every_count_cost_md_quotes_is_the_cell_of_the_bench_report_it_cites() {
    let cost = read("docs/COST.md");
    let quoted = quoted_counts(&cost);
    assert!(
        quoted.len() >= 10,
        "docs/COST.md quotes {} counts",
        quoted.len()
    );
    let mut problems = Vec::new();
    for [report, case, row, column, value] in &quoted {
        if !report.starts_with("reports/cost/") {
            problems.push(format!("{report}: a report under reports/cost/"));
            continue;
        }
        if !cost.contains(&format!("../{report}")) {
            problems.push(format!("{report}: COST.md links it (`../{report}`)"));
        }
        match report_cell(&read(report), case, row, column) {
            Ok(cell) if &cell == value => {}
            Ok(cell) => problems.push(format!(
                "{report}, {case}, `{row}`, {column}: COST.md says {value}, the report {cell}"
            )),
            Err(why) => problems.push(format!("{report}: {why}")),
        }
    }
    assert!(
        problems.is_empty(),
        "docs/COST.md quotes counts its report does not hold:\n  {}",
        problems.join("\n  ")
    );
}

#[test]
fn a_report_cell_is_found_by_case_row_and_column() {
    let report = "x\n\n#### Viral: operations per 1,000 events\n\nsome words\n\n\
                  | count | batched | batched, rollups off |\n|---|---:|---:|\n\
                  | Firestore document reads | 12.5 | 3.0 |\n\n| other | 9 |\n";
    assert_eq!(
        report_cell(
            report,
            "Viral",
            "Firestore document reads",
            "batched, rollups off"
        ),
        Ok("3.0".to_string())
    );
    assert!(report_cell(report, "Zipf", "Firestore document reads", "batched").is_err());
    assert!(report_cell(report, "Viral", "other", "batched").is_err());
    assert!(report_cell(report, "Viral", "Firestore document reads", "per-event").is_err());
}
