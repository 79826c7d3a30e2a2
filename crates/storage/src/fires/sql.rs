//! A small builder for the few hand-written statements of the ledger: the
//! backend's placeholders and quoting, and a table of literal rows that
//! every database accepts inside `FROM` (`SELECT ? AS a, ? AS b UNION ALL
//! SELECT ?, ?`; on PostgreSQL one JSON parameter, `json_to_recordset`).

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
    ///
    /// PostgreSQL gets the rows as one JSON parameter read by
    /// `json_to_recordset`: the statement's text is then the same whatever
    /// the batch size, so it is prepared and planned once per connection.
    /// Planning a union of hundreds of one-row `SELECT`s took longer than
    /// running the claim it fed.
    pub(crate) fn rows(&mut self, names: &[&str], rows: Vec<Vec<Value>>, alias: &str) -> &mut Sql {
        let rows = match self.backend {
            Backend::Postgres => match json_rows(names, rows) {
                Ok((json, types)) => {
                    self.text.push_str("(SELECT * FROM json_to_recordset(");
                    self.param(json);
                    self.text.push_str("::json) AS r(");
                    for (c, (name, pg_type)) in names.iter().zip(types).enumerate() {
                        if c > 0 {
                            self.text.push_str(", ");
                        }
                        self.text.push_str(name);
                        self.text.push(' ');
                        self.text.push_str(pg_type);
                    }
                    self.text.push_str(")) ");
                    self.text.push_str(alias);
                    return self;
                }
                Err(rows) => rows,
            },
            Backend::MySql | Backend::Sqlite => rows,
        };
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

/// The rows as a JSON array of objects keyed by `names`, with each
/// column's PostgreSQL type (from the first row's values, which carry their
/// type even when null); the rows back when a value has no JSON form here.
fn json_rows(
    names: &[&str],
    rows: Vec<Vec<Value>>,
) -> Result<(String, Vec<&'static str>), Vec<Vec<Value>>> {
    let Some(types) = rows
        .first()
        .map(|row| row.iter().map(pg_type).collect::<Option<Vec<_>>>())
        .and_then(|types| types.filter(|t| t.len() == names.len()))
    else {
        return Err(rows);
    };
    let mut array = Vec::with_capacity(rows.len());
    for row in &rows {
        let mut object = serde_json::Map::with_capacity(names.len());
        for ((name, value), pg) in names.iter().zip(row).zip(&types) {
            match json_value(value) {
                Some(json) if pg_type(value) == Some(*pg) => {
                    object.insert((*name).to_owned(), json);
                }
                _ => return Err(rows),
            }
        }
        array.push(serde_json::Value::Object(object));
    }
    Ok((serde_json::Value::Array(array).to_string(), types))
}

/// The PostgreSQL type of a value bound into a JSON row.
fn pg_type(value: &Value) -> Option<&'static str> {
    Some(match value {
        Value::Bool(_) => "boolean",
        Value::Int(_) => "integer",
        Value::BigInt(_) => "bigint",
        Value::String(_) => "text",
        _ => return None,
    })
}

fn json_value(value: &Value) -> Option<serde_json::Value> {
    use serde_json::Value as J;
    Some(match value {
        Value::Bool(v) => v.map_or(J::Null, J::Bool),
        Value::Int(v) => v.map_or(J::Null, J::from),
        Value::BigInt(v) => v.map_or(J::Null, J::from),
        Value::String(v) => v.as_ref().map_or(J::Null, |s| J::String(s.clone())),
        _ => return None,
    })
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
            "SELECT u.a FROM (SELECT * FROM json_to_recordset($1::json) AS r(a bigint, b bigint)) u WHERE \"trigger\" IN ($2, $3)"
        );
        let mut sql = Sql::new(Backend::Postgres);
        sql.rows(
            &["id", "name", "flag"],
            vec![
                vec![1i64.into(), "a\"b".into(), Value::Bool(None)],
                vec![Value::BigInt(None), "任务".into(), true.into()],
            ],
            "u",
        );
        let statement = sql.statement();
        assert_eq!(
            statement.sql,
            "(SELECT * FROM json_to_recordset($1::json) AS r(id bigint, name text, flag boolean)) u"
        );
        let Some(values) = statement.values else {
            panic!("no values");
        };
        assert_eq!(
            values.0,
            vec![Value::from(
                r#"[{"flag":null,"id":1,"name":"a\"b"},{"flag":true,"id":null,"name":"任务"}]"#
            )]
        );
        // A value with no JSON form here keeps the union of rows.
        let mut sql = Sql::new(Backend::Postgres);
        sql.rows(&["x"], vec![vec![Value::Double(Some(1.5))]], "u");
        assert_eq!(sql.statement().sql, "(SELECT $1 AS x) u");
        assert_eq!(
            build(Backend::MySql),
            "SELECT u.a FROM (SELECT ? AS a, ? AS b UNION ALL SELECT ?, ?) u WHERE `trigger` IN (?, ?)"
        );
    }
}
