//! docs/format.md documents exactly the tables the code makes: every table
//! of a new metadata database has a `### \`name\`` heading in the
//! metadata section, and the chunk index's tables are exactly the
//! `CREATE TABLE`s of its section; no heading or statement names a table
//! that does not exist. A new table without its documentation (or a
//! documented table the code dropped) fails here.

use std::collections::BTreeSet;
use std::path::Path;

const FORMAT: &str = include_str!("../docs/format.md");

/// The text of the section that starts with the heading line `start`, up
/// to the next heading of the same or a higher level.
fn section(start: &str) -> &'static str {
    let level = start.chars().take_while(|c| *c == '#').count();
    let begin =
        FORMAT.find(&format!("\n{start}\n")).unwrap_or_else(|| panic!("format.md has no heading {start:?}")) + 1;
    let body = &FORMAT[begin + start.len()..];
    let end = body
        .lines()
        .scan(0usize, |at, line| {
            let here = *at;
            *at += line.len() + 1;
            Some((here, line))
        })
        .find(|(_, line)| {
            let hashes = line.chars().take_while(|c| *c == '#').count();
            hashes > 0 && hashes <= level && line[hashes..].starts_with(' ')
        })
        .map_or(body.len(), |(at, _)| at);
    &body[..end]
}

/// Names in headings of the form "### `name`" (an optional "(vN)" after).
fn table_headings(text: &str) -> BTreeSet<String> {
    text.lines()
        .filter_map(|l| l.strip_prefix("### `"))
        .filter_map(|rest| rest.split_once('`').map(|(name, _)| name.to_string()))
        .collect()
}

/// Names after `CREATE TABLE` in a text.
fn created(text: &str) -> BTreeSet<String> {
    text.lines()
        .filter_map(|l| l.trim_start().strip_prefix("CREATE TABLE "))
        .map(|rest| {
            rest.trim_start_matches("IF NOT EXISTS ")
                .split(|c: char| !(c.is_alphanumeric() || c == '_'))
                .next()
                .unwrap_or("")
                .to_string()
        })
        .collect()
}

/// The tables of a SQLite database file.
fn tables(path: &Path) -> BTreeSet<String> {
    let db = rusqlite::Connection::open(path).expect("open the database");
    let mut stmt = db
        .prepare("SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'")
        .expect("prepare");
    let names = stmt.query_map([], |r| r.get::<_, String>(0)).expect("list tables");
    names.collect::<rusqlite::Result<_>>().expect("list tables")
}

#[test]
fn the_metadata_tables_are_the_ones_format_md_documents() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("meta.sqlite");
    drop(rewindfs::meta::Meta::open(&path).expect("a new metadata database"));
    let made = tables(&path);
    let documented = table_headings(section("## Metadata: `meta.sqlite`"));
    assert!(made.len() > 10, "the schema made only {made:?}");
    let undocumented: Vec<_> = made.difference(&documented).collect();
    let gone: Vec<_> = documented.difference(&made).collect();
    assert!(
        undocumented.is_empty() && gone.is_empty(),
        "docs/format.md and the schema disagree: tables without a `### \\`name\\`` section: {undocumented:?}; \
         sections for tables a new database does not have: {gone:?}"
    );
}

#[test]
fn the_chunk_index_tables_are_the_ones_format_md_documents() {
    let dir = tempfile::tempdir().expect("temp dir");
    let chunks = dir.path().join("chunks");
    drop(rewindfs::store::PackStore::open(&chunks).expect("a new chunk store"));
    let made = tables(&chunks.join("chunks.sqlite"));
    let documented = created(section("### Index: `chunks.sqlite`"));
    assert!(!made.is_empty(), "the chunk index has no tables");
    assert_eq!(made, documented, "the chunk index's tables against docs/format.md's CREATE TABLEs");
}
