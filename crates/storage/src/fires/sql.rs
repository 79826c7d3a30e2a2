//! A small builder for the few hand-written statements of the ledger: the
//! backend's placeholders and quoting, and a table of literal rows
//! (`SELECT ? AS a, ? AS b UNION ALL SELECT ?, ?`) that all three databases
//! accept inside `FROM`.

use sea_orm::{DatabaseBackend, Statement, Value};

use crate::store::Backend;

/// A statement being written, with its bound values.
pub(crate) struct Sql {
    backend: Backend,
    text: String,
    values: Vec<Value>,
}

impl Sql {
    pub(crate) fn new(backend: Backend) -> Sql {
        Sql {
            backend,
            text: String::with_capacity(512),
            values: Vec::new(),
        }
    }

    /// Appends SQL text; `"trigger"` in it is quoted for the backend
    /// (`trigger` is reserved in MySQL).
    pub(crate) fn push(&mut self, text: &str) -> &mut Sql {
        if self.backend == Backend::MySql {
            self.text
                .push_str(&text.replace("\"trigger\"", "`trigger`"));
        } else {
            self.text.push_str(text);
        }
        self
    }

    /// Appends a placeholder bound to `value`.
    pub(crate) fn param(&mut self, value: impl Into<Value>) -> &mut Sql {
        self.values.push(value.into());
        match self.backend {
            Backend::Postgres => {
                let n = self.values.len();
                self.text.push('$');
                self.text.push_str(&n.to_string());
            }
            Backend::MySql | Backend::Sqlite => self.text.push('?'),
        }
        self
    }

    /// Appends `(?, ?, …)` for a list of values.
    pub(crate) fn list<T: Into<Value>>(&mut self, items: impl IntoIterator<Item = T>) -> &mut Sql {
        self.text.push('(');
        for (i, item) in items.into_iter().enumerate() {
            if i > 0 {
                self.text.push_str(", ");
            }
            self.param(item);
        }
        self.text.push(')');
        self
    }

    /// Appends a derived table of literal rows, aliased `alias`, whose
    /// columns are `names`. `rows` must not be empty.
    pub(crate) fn rows(&mut self, names: &[&str], rows: Vec<Vec<Value>>, alias: &str) -> &mut Sql {
        self.text.push('(');
        for (r, row) in rows.into_iter().enumerate() {
            self.text.push_str(if r == 0 {
                "SELECT "
            } else {
                " UNION ALL SELECT "
            });
            for (c, value) in row.into_iter().enumerate() {
                if c > 0 {
                    self.text.push_str(", ");
                }
                self.param(value);
                if r == 0 {
                    self.text.push_str(" AS ");
                    self.text.push_str(names[c]);
                }
            }
        }
        self.text.push_str(") ");
        self.text.push_str(alias);
        self
    }

    pub(crate) fn statement(self) -> Statement {
        let backend = match self.backend {
            Backend::Postgres => DatabaseBackend::Postgres,
            Backend::MySql => DatabaseBackend::MySql,
            Backend::Sqlite => DatabaseBackend::Sqlite,
        };
        Statement::from_sql_and_values(backend, self.text, self.values)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn placeholders_and_rows_per_backend() {
        let build = |backend| {
            let mut sql = Sql::new(backend);
            sql.push("SELECT u.a FROM ")
                .rows(
                    &["a", "b"],
                    vec![
                        vec![1i64.into(), 2i64.into()],
                        vec![3i64.into(), 4i64.into()],
                    ],
                    "u",
                )
                .push(" WHERE \"trigger\" IN ")
                .list(["x", "y"]);
            sql.statement().sql
        };
        assert_eq!(
            build(Backend::Postgres),
            "SELECT u.a FROM (SELECT $1 AS a, $2 AS b UNION ALL SELECT $3, $4) u WHERE \"trigger\" IN ($5, $6)"
        );
        assert_eq!(
            build(Backend::MySql),
            "SELECT u.a FROM (SELECT ? AS a, ? AS b UNION ALL SELECT ?, ?) u WHERE `trigger` IN (?, ?)"
        );
    }
}
