//! Keyset ("seek") pagination shared by the run log and the audit log: lists
//! run newest first by `(time, id)`, and a cursor is the key of the last row
//! handed out, so page 1000 costs what page 1 does (no OFFSET scan).

use sea_orm::sea_query::{Expr, ExprTrait, SimpleExpr};
use sea_orm::{ColumnTrait, Condition};

use crate::StorageError;

/// Characters in an encoded cursor: two 64-bit values as hex.
const ENCODED_LEN: usize = 32;

/// The position after which the next page starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Key {
    pub time_ms: i64,
    pub id: i64,
}

impl Key {
    /// A URL-safe string (32 lowercase hex digits). Opaque to clients: they
    /// only hand back what they were given.
    pub(crate) fn encode(self) -> String {
        // `as u64` keeps the bit pattern, so negative times round-trip.
        format!("{:016x}{:016x}", self.time_ms as u64, self.id as u64)
    }

    /// Reads [`Key::encode`]'s output; anything else is `InvalidCursor`.
    pub(crate) fn decode(s: &str) -> Result<Key, StorageError> {
        let valid = s.len() == ENCODED_LEN
            && s.bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
        if !valid {
            return Err(StorageError::InvalidCursor);
        }
        let half = |part: &str| {
            u64::from_str_radix(part, 16)
                .map(|v| v as i64)
                .map_err(|_| StorageError::InvalidCursor)
        };
        Ok(Key {
            time_ms: half(&s[..ENCODED_LEN / 2])?,
            id: half(&s[ENCODED_LEN / 2..])?,
        })
    }
}

/// Rows strictly after `key` in (time DESC, id DESC) order, i.e.
/// `(time, id) < (?, ?)` spelled out so every backend accepts it:
/// `time <= ? AND (time < ? OR (time = ? AND id < ?))`. The first term is
/// implied by the rest but is what lets PostgreSQL and MySQL seek the
/// `(time, id)` index; without it they scan from the newest row and filter,
/// so page n costs n pages.
pub(crate) fn after<T: ColumnTrait, I: ColumnTrait>(time: T, id: I, key: Key) -> Condition {
    Condition::all().add(time.lte(key.time_ms)).add(
        Condition::any().add(time.lt(key.time_ms)).add(
            Condition::all()
                .add(time.eq(key.time_ms))
                .add(id.lt(key.id)),
        ),
    )
}

/// PostgreSQL text cannot hold U+0000 and refuses it even in a comparison,
/// so a filter value with one would fail the query there: no stored text
/// holds it on any backend, so such a filter matches nothing.
pub(crate) fn storable(value: &str) -> bool {
    !value.contains('\0')
}

/// A condition no row meets.
pub(crate) fn nothing() -> SimpleExpr {
    Expr::val(1).eq(0)
}

/// `col = value`, or [`nothing`] for a value no row can hold.
pub(crate) fn text_eq<C: ColumnTrait>(col: C, value: &str) -> SimpleExpr {
    if storable(value) {
        col.eq(value)
    } else {
        nothing()
    }
}

/// `LOWER(col) LIKE LOWER('%needle%') ESCAPE '!'`: a case-insensitive
/// substring match in which `%` and `_` match literally. Both sides are
/// lowered by the database so that they fold alike (SQLite folds ASCII only).
pub(crate) fn contains_ci<C: ColumnTrait>(col: C, needle: &str) -> SimpleExpr {
    use sea_orm::sea_query::{BinOper, Func};
    if !storable(needle) {
        return nothing();
    }
    let pattern = format!("%{}%", crate::jobs::escape_like(needle));
    let lowered_pattern = Expr::Binary(
        Box::new(Func::lower(Expr::val(pattern)).into()),
        BinOper::Escape,
        Box::new(Expr::Constant(crate::jobs::LIKE_ESCAPE.into())),
    );
    Expr::expr(Func::lower(Expr::col(col.as_column_ref()))).binary(BinOper::Like, lowered_pattern)
}

/// [`contains_ci`] on a column that already holds `LOWER(text)` as the
/// database computed it: `col LIKE LOWER('%needle%') ESCAPE '!'`, the same
/// matches without lowering every row.
pub(crate) fn lowered_contains_ci<C: ColumnTrait>(col: C, needle: &str) -> SimpleExpr {
    use sea_orm::sea_query::{BinOper, Func};
    if !storable(needle) {
        return nothing();
    }
    let pattern = format!("%{}%", crate::jobs::escape_like(needle));
    let lowered_pattern = Expr::Binary(
        Box::new(Func::lower(Expr::val(pattern)).into()),
        BinOper::Escape,
        Box::new(Expr::Constant(crate::jobs::LIKE_ESCAPE.into())),
    );
    Expr::col(col.as_column_ref()).binary(BinOper::Like, lowered_pattern)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cursor_round_trips() {
        for key in [
            Key {
                time_ms: 1_764_000_000_123,
                id: 42,
            },
            Key {
                time_ms: -86_400_000,
                id: 1,
            },
            Key {
                time_ms: i64::MIN,
                id: i64::MAX,
            },
            Key { time_ms: 0, id: 0 },
        ] {
            let s = key.encode();
            assert_eq!(s.len(), ENCODED_LEN);
            assert!(s.bytes().all(|b| b.is_ascii_alphanumeric()), "{s}");
            assert_eq!(Key::decode(&s).unwrap(), key);
        }
    }

    #[test]
    fn bad_cursors_are_rejected() {
        let good = Key { time_ms: 5, id: 6 }.encode();
        for bad in [
            "",
            "abc",
            &good[1..],
            &format!("{good}0"),
            &good.to_uppercase().replace('0', "G"),
            "000000000000000500000000000000-6",
            "+00000000000000500000000000000006",
            "zzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzz",
            "０００００００００００００００５",
        ] {
            assert!(
                matches!(Key::decode(bad), Err(StorageError::InvalidCursor)),
                "{bad:?}"
            );
        }
    }
}
