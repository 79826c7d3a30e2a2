//! Trigram look-ups for the name filters on MySQL/MariaDB.
//!
//! MySQL has no index for `LIKE '%…%'`; migration 13 keeps the three-
//! character pieces of every lowered job name (`job_name_grams`) and of
//! every name in the run log (`run_name_grams`). A name containing the
//! needle contains each of the needle's pieces, so the jobs holding all of
//! them are a superset of the matches: the callers still check each
//! candidate with the filter's `LIKE`, and fall back to reading the name
//! index where the needle has no piece to look up.

use sea_orm::{ConnectionTrait, DatabaseConnection, DbBackend, QueryResult, Statement, Value};

use crate::{Backend, StorageError, Store};

/// At most this many of the needle's pieces are counted.
const PIECES_MAX: usize = 8;
/// A piece more common than this (among jobs) is not worth looking up:
/// when every piece is, the caller reads the name index instead.
const RARE_MAX: usize = 2_000;
/// The rarest pieces joined to find the candidates, at most: each cuts the
/// candidates down, at a primary-key seek per candidate of the one before.
const JOINED_MAX: usize = 3;

/// The gram tables.
#[derive(Debug, Clone, Copy)]
pub(crate) enum GramTable {
    /// Pieces of `jobs.name_lower`, exact (kept by triggers on `jobs`).
    Jobs,
    /// Pieces of `run_job_names.name_lower` (only ever added).
    Runs,
}

impl GramTable {
    fn name(self) -> &'static str {
        match self {
            GramTable::Jobs => "job_name_grams",
            GramTable::Runs => "run_name_grams",
        }
    }
}

/// The three-character pieces every name containing `needle` has once
/// the database lowered it, at most [`PIECES_MAX`], spread over the needle.
///
/// Only pieces whose characters the database's `LOWER` is known to map as
/// Rust does are used: ASCII letters and characters without case (digits,
/// punctuation, CJK…). A piece with any other character is skipped; so is
/// a needle with none left (the caller then reads the name index).
pub(crate) fn needle_grams(needle: &str) -> Vec<String> {
    let mut pieces: Vec<String> = Vec::new();
    // The current run of characters both sides lower alike.
    let mut run: Vec<char> = Vec::new();
    let flush = |run: &mut Vec<char>, pieces: &mut Vec<String>| {
        for window in run.windows(3) {
            let piece: String = window.iter().collect();
            if !pieces.contains(&piece) {
                pieces.push(piece);
            }
        }
        run.clear();
    };
    for c in needle.chars() {
        if c.is_ascii() {
            run.push(c.to_ascii_lowercase());
        } else if is_caseless(c) {
            run.push(c);
        } else {
            flush(&mut run, &mut pieces);
        }
    }
    flush(&mut run, &mut pieces);
    if pieces.len() <= PIECES_MAX {
        return pieces;
    }
    // Spread over the needle, the first and last piece always in.
    let last = pieces.len() - 1;
    (0..PIECES_MAX)
        .map(|k| pieces[k * last / (PIECES_MAX - 1)].clone())
        .collect()
}

/// A character with no case mapping either way.
fn is_caseless(c: char) -> bool {
    let mut lower = c.to_lowercase();
    let mut upper = c.to_uppercase();
    lower.next() == Some(c)
        && lower.next().is_none()
        && upper.next() == Some(c)
        && upper.next().is_none()
}

/// What the trigram tables say about a name filter.
#[derive(Debug)]
pub(crate) enum Narrowed {
    /// Nothing was looked up: not MySQL, or the needle has no usable piece
    /// (shorter than three characters, or cased non-ASCII letters only).
    NotLookedUp,
    /// Every piece is held by more than [`RARE_MAX`] jobs: the pieces would
    /// not narrow the search enough to pay.
    Common,
    /// Jobs holding the rarest pieces: a superset of the jobs whose name
    /// contains the needle (none: no job matches).
    Jobs(Vec<i64>),
}

/// Looks `needle` up in `table` on MySQL; elsewhere
/// [`Narrowed::NotLookedUp`].
///
/// Two statements: each piece's count, capped (an index range read of at
/// most [`RARE_MAX`] entries each), then a join of the rarest few, rarest
/// first (`STRAIGHT_JOIN`: the optimizer cannot know the pieces are
/// correlated, and planning a join of many tables costs more than it saves).
pub(crate) async fn narrow(
    store: &Store,
    table: GramTable,
    needle: &str,
) -> Result<Narrowed, StorageError> {
    if store.backend() != Backend::MySql || !crate::keyset::storable(needle) {
        return Ok(Narrowed::NotLookedUp);
    }
    let grams = needle_grams(needle);
    if grams.is_empty() {
        return Ok(Narrowed::NotLookedUp);
    }
    let db = store.connection();
    let table = table.name();
    let counts = (0..grams.len())
        .map(|k| {
            format!(
                "SELECT {k} AS k, COUNT(*) AS n FROM \
                 (SELECT 1 FROM {table} WHERE gram = ? LIMIT {}) x{k}",
                RARE_MAX + 1
            )
        })
        .collect::<Vec<_>>()
        .join(" UNION ALL ");
    let mut counted = query(db, counts, grams.iter())
        .await?
        .iter()
        .map(|row| {
            let k: i64 = row.try_get_by_index(0)?;
            let n: i64 = row.try_get_by_index(1)?;
            Ok((n, usize::try_from(k).unwrap_or(usize::MAX)))
        })
        .collect::<Result<Vec<_>, sea_orm::DbErr>>()?;
    counted.sort_unstable();
    if counted.first().is_some_and(|(n, _)| *n == 0) {
        // No job holds a piece: no job matches.
        return Ok(Narrowed::Jobs(Vec::new()));
    }
    let rare = i64::try_from(RARE_MAX).unwrap_or(i64::MAX);
    let rarest: Vec<&String> = counted
        .iter()
        .filter(|(n, _)| *n <= rare)
        .take(JOINED_MAX)
        .filter_map(|(_, k)| grams.get(*k))
        .collect();
    let Some((first, rest)) = rarest.split_first() else {
        return Ok(Narrowed::Common);
    };
    let mut sql = format!("SELECT STRAIGHT_JOIN g0.job_id FROM {table} g0");
    for k in 1..=rest.len() {
        sql.push_str(&format!(
            " JOIN {table} g{k} ON g{k}.job_id = g0.job_id AND g{k}.gram = ?"
        ));
    }
    sql.push_str(" WHERE g0.gram = ?");
    // Placeholders in text order: the joins' pieces, then the first.
    let ids = query(db, sql, rest.iter().copied().chain([*first]))
        .await?
        .iter()
        .map(|row| row.try_get_by_index::<i64>(0))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(Narrowed::Jobs(ids))
}

/// Runs one MySQL statement with the pieces as its parameters.
async fn query<'a>(
    db: &DatabaseConnection,
    sql: String,
    pieces: impl Iterator<Item = &'a String>,
) -> Result<Vec<QueryResult>, StorageError> {
    let values: Vec<Value> = pieces.map(|g| Value::from(g.clone())).collect();
    Ok(db
        .query_all_raw(Statement::from_sql_and_values(
            DbBackend::MySql,
            sql,
            values,
        ))
        .await?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn needle_pieces() {
        let cases: &[(&str, &[&str])] = &[
            ("ab", &[]),
            ("abc", &["abc"]),
            ("ABcd", &["abc", "bcd"]),
            ("aaaa", &["aaa"]),
            ("50%_x", &["50%", "0%_", "%_x"]),
            // Cased non-ASCII letters split the needle; CJK has no case.
            ("xÖyz", &[]),
            ("aÉbcd", &["bcd"]),
            ("每日报表", &["每日报", "日报表"]),
            ("Job-每日", &["job", "ob-", "b-每", "-每日"]),
            // Fourteen pieces: eight spread from the first to the last.
            (
                "bench-job-000123",
                &["ben", "enc", "ch-", "-jo", "ob-", "-00", "001", "123"],
            ),
        ];
        for (needle, want) in cases {
            assert_eq!(needle_grams(needle), *want, "{needle}");
        }
    }

    #[test]
    fn caseless_characters() {
        for (c, caseless) in [
            ('a', false),
            ('Z', false),
            ('1', true),
            ('-', true),
            ('每', true),
            ('é', false),
            ('ß', false),
            ('İ', false),
        ] {
            assert_eq!(is_caseless(c), caseless, "{c}");
        }
    }
}
