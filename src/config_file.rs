//! The configuration file `QIWU_CONFIG` names (SPEC §2: "a config file may
//! add to" the environment). Today it declares handlers that live in other
//! services (SPEC §7.1), as `[[handlers]]` entries; it is reviewed like code
//! and never editable over the API.
//!
//! Every entry is checked at start-up, and every problem is reported at
//! once, each naming the entry (`[[handlers]] entry 2 (session.sweep)`) and
//! what is wrong, under a heading naming `QIWU_CONFIG` and the file.
//! Secrets are never echoed.

use std::path::Path;

use anyhow::anyhow;
use qiwu_domain::handler::is_handler_name;
use qiwu_domain::{HandlerCatalog, HandlerDescriptor, HandlerError};
use qiwu_scheduler_worker::handlers::remote::Url;
use serde::Deserialize;
use serde_json::Value;

/// Fewest characters of a signing secret (as for `QIWU_WEBHOOK_SECRET`).
const MIN_SECRET_CHARS: usize = 16;
/// The params schema of an entry that declares none: any object.
const DEFAULT_SCHEMA: &str = r#"{"type":"object"}"#;

/// One handler in another service, checked and ready to register.
pub struct RemoteDeclaration {
    pub descriptor: HandlerDescriptor,
    pub url: Url,
    /// The signing secret itself, never printed.
    pub secret: String,
    /// Secrets calls are also signed with while `secret` is rotated
    /// (`previous_secrets_env` or `previous_secrets`), never printed.
    pub previous_secrets: Vec<String>,
}

/// One `[[handlers]]` entry as written.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct HandlerEntry {
    name: String,
    title_zh: String,
    title_en: String,
    #[serde(default)]
    description_zh: String,
    #[serde(default)]
    description_en: String,
    url: String,
    /// The name of the environment variable holding the secret.
    #[serde(default)]
    secret_env: Option<String>,
    /// The secret inline; `secret_env` keeps it out of the reviewed file.
    #[serde(default)]
    secret: Option<String>,
    /// The name of an environment variable holding the secrets `secret`
    /// replaced, comma-separated; unset or empty means none, so the file
    /// need not change during a rotation.
    #[serde(default)]
    previous_secrets_env: Option<String>,
    /// The previous secrets inline.
    #[serde(default)]
    previous_secrets: Option<Vec<String>>,
    /// JSON text of the params JSON Schema.
    #[serde(default)]
    params_schema: Option<String>,
}

/// Reads and checks the file at `path`. `compiled` holds the handlers built
/// into the binary, which a declaration may not shadow.
pub fn load(path: &Path, compiled: &HandlerCatalog) -> anyhow::Result<Vec<RemoteDeclaration>> {
    let text = std::fs::read_to_string(path).map_err(|e| {
        anyhow!(
            "QIWU_CONFIG names {}, which cannot be read: {e}",
            path.display()
        )
    })?;
    parse(&text, compiled, &|name| std::env::var(name).ok()).map_err(|problems| {
        let heading = format!("QIWU_CONFIG ({})", path.display());
        match problems.as_slice() {
            [one] => anyhow!("{heading}: {one}"),
            many => anyhow!(
                "{heading} has {} problems:\n  {}",
                many.len(),
                many.join("\n  ")
            ),
        }
    })
}

/// Checks the text of the file; `env` reads the variables `secret_env`
/// names. Either every entry is valid, or every problem found is returned.
fn parse(
    text: &str,
    compiled: &HandlerCatalog,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Vec<RemoteDeclaration>, Vec<String>> {
    let table: toml::Table = text
        .parse()
        .map_err(|e: toml::de::Error| vec![format!("not valid TOML: {}", e.to_string().trim())])?;
    let mut problems = Vec::new();
    let mut entries = Vec::new();
    for (key, value) in table {
        match (key.as_str(), value) {
            ("handlers", toml::Value::Array(items)) => entries = items,
            ("handlers", _) => problems.push(
                "`handlers` must be an array of tables, written as [[handlers]] entries".to_owned(),
            ),
            (other, _) => problems.push(format!(
                "unknown key `{other}` (the file holds only [[handlers]] entries)"
            )),
        }
    }
    let mut declared: Vec<(String, usize)> = Vec::new();
    let mut out = Vec::new();
    for (index, item) in entries.into_iter().enumerate() {
        let number = index + 1;
        let name = item
            .get("name")
            .and_then(toml::Value::as_str)
            .map(str::to_owned);
        let label = match &name {
            Some(name) => format!("[[handlers]] entry {number} ({name})"),
            None => format!("[[handlers]] entry {number}"),
        };
        let entry = match item {
            toml::Value::Table(table) => toml::Value::Table(table).try_into::<HandlerEntry>(),
            _ => {
                problems.push(format!("{label}: must be a table"));
                continue;
            }
        };
        let entry = match entry {
            Ok(entry) => entry,
            Err(e) => {
                problems.push(format!("{label}: {}", e.message().trim()));
                continue;
            }
        };
        let mut wrong = Vec::new();
        if let Some((_, first)) = declared.iter().find(|(n, _)| *n == entry.name) {
            wrong.push(format!(
                "name {} is already declared by entry {first}",
                entry.name
            ));
        }
        declared.push((entry.name.clone(), number));
        match check(entry, compiled, env) {
            Ok(declaration) if wrong.is_empty() => out.push(declaration),
            Ok(_) => {}
            Err(more) => wrong.extend(more),
        }
        problems.extend(wrong.into_iter().map(|w| format!("{label}: {w}")));
    }
    if problems.is_empty() {
        Ok(out)
    } else {
        Err(problems)
    }
}

/// Checks one entry; every problem is collected.
fn check(
    entry: HandlerEntry,
    compiled: &HandlerCatalog,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<RemoteDeclaration, Vec<String>> {
    let mut wrong = Vec::new();
    let name_ok = is_handler_name(&entry.name);
    if !name_ok {
        wrong.push(format!(
            "name {:?} is not a dotted lower-case name such as session.sweep",
            entry.name
        ));
    } else if compiled.contains(&entry.name) {
        wrong.push(format!(
            "name {} is a handler compiled into the service and cannot be redeclared",
            entry.name
        ));
    }
    for (key, title) in [("title_zh", &entry.title_zh), ("title_en", &entry.title_en)] {
        if title.trim().is_empty() {
            wrong.push(format!("{key} is empty"));
        }
    }
    let url = check_url(&entry.url).map_err(|w| wrong.push(w)).ok();
    let secret = check_secret(entry.secret, entry.secret_env, env)
        .map_err(|w| wrong.push(w))
        .ok();
    let previous = check_previous_secrets(
        entry.previous_secrets,
        entry.previous_secrets_env,
        secret.as_deref(),
        env,
    )
    .map_err(|w| wrong.extend(w))
    .ok();
    let schema = entry.params_schema.as_deref().unwrap_or(DEFAULT_SCHEMA);
    let descriptor = match serde_json::from_str::<Value>(schema) {
        Err(e) => {
            wrong.push(format!("params_schema is not valid JSON: {e}"));
            None
        }
        Ok(schema) => {
            // An invalid name is already reported; the schema is still
            // checked, under a stand-in name, so every problem shows at once.
            let name = if name_ok {
                entry.name.as_str()
            } else {
                "remote.handler"
            };
            HandlerDescriptor::new(
                name,
                (entry.title_zh.trim(), entry.title_en.trim()),
                (entry.description_zh.trim(), entry.description_en.trim()),
                schema,
            )
            .map_err(|e| wrong.push(schema_problem(e)))
            .ok()
        }
    };
    match (descriptor, url, secret, previous) {
        (Some(descriptor), Some(url), Some(secret), Some(previous_secrets)) if wrong.is_empty() => {
            Ok(RemoteDeclaration {
                descriptor,
                url,
                secret,
                previous_secrets,
            })
        }
        _ => Err(wrong),
    }
}

/// An absolute http(s) URL with a host. The URL itself is not echoed: its
/// path or query may carry a token.
fn check_url(text: &str) -> Result<Url, String> {
    let url = Url::parse(text.trim())
        .map_err(|e| format!("url is not an absolute http:// or https:// URL ({e})"))?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(format!(
            "url has the scheme {}: only http:// and https:// are accepted",
            url.scheme()
        ));
    }
    if url.host_str().is_none_or(str::is_empty) {
        return Err("url has no host".to_owned());
    }
    Ok(url)
}

/// The signing secret from `secret_env` (trimmed, like every `QIWU_*`
/// variable) or inline, exactly one of them, at least 16 characters.
fn check_secret(
    inline: Option<String>,
    from_env: Option<String>,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<String, String> {
    let (secret, source) = match (inline, from_env) {
        (Some(_), Some(_)) => {
            return Err("both secret and secret_env are set; keep one (secret_env is better: the secret stays out of the file)".to_owned());
        }
        (None, None) => {
            return Err("no signing secret: set secret_env to the name of an environment variable holding it (or secret)".to_owned());
        }
        (Some(inline), None) => (inline, "secret".to_owned()),
        (None, Some(var)) => {
            let value = env(&var)
                .map(|v| v.trim().to_owned())
                .filter(|v| !v.is_empty())
                .ok_or_else(|| format!("secret_env names {var}, which is not set"))?;
            (value, format!("the secret in {var}"))
        }
    };
    let chars = secret.chars().count();
    if chars < MIN_SECRET_CHARS {
        return Err(format!(
            "{source} has {chars} characters; at least {MIN_SECRET_CHARS} are needed"
        ));
    }
    Ok(secret)
}

/// The previous signing secrets, from `previous_secrets_env` (a variable
/// holding them comma-separated; unset or empty is none) or inline, at most
/// one of the two; each checked like `QIWU_JWT_PREVIOUS_SECRETS`.
fn check_previous_secrets(
    inline: Option<Vec<String>>,
    from_env: Option<String>,
    current: Option<&str>,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Vec<String>, Vec<String>> {
    let (entries, source): (Vec<String>, String) = match (inline, from_env) {
        (Some(_), Some(_)) => {
            return Err(vec![
                "both previous_secrets and previous_secrets_env are set; keep one".to_owned(),
            ]);
        }
        (None, None) => return Ok(Vec::new()),
        (Some(inline), None) => (inline, "previous_secrets".to_owned()),
        (None, Some(var)) => match env(&var).map(|v| v.trim().to_owned()) {
            Some(text) if !text.is_empty() => (
                text.split(',').map(|s| s.trim().to_owned()).collect(),
                format!("previous_secrets_env names {var}, whose"),
            ),
            _ => return Ok(Vec::new()),
        },
    };
    crate::config::check_previous(
        entries.iter().map(|s| s.trim()),
        ("the current secret", current),
    )
    .map_err(|problems| {
        problems
            .into_iter()
            .map(|p| format!("{source} {p}"))
            .collect()
    })
}

/// A descriptor's refusal in the words of this file.
fn schema_problem(e: HandlerError) -> String {
    match e {
        HandlerError::InvalidSchema { reason, .. } => {
            format!("params_schema is not a valid JSON Schema: {reason}")
        }
        HandlerError::NotAnObjectSchema { .. } => {
            r#"params_schema must describe an object ({"type": "object", …})"#.to_owned()
        }
        HandlerError::InvalidDefaults { reason, .. } => {
            format!("the defaults in params_schema do not validate: {reason}")
        }
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECRET: &str = "sessions-secret-0123456789";

    fn env(name: &str) -> Option<String> {
        match name {
            "QIWU_SECRET_SESSIONS" => Some(format!("  {SECRET}\n")),
            "QIWU_SECRET_SHORT" => Some("tiny-secret".into()),
            "QIWU_SECRET_BLANK" => Some("   ".into()),
            "QIWU_SECRET_SESSIONS_PREVIOUS" => {
                Some(" old-sessions-secret-01, older-sessions-secret-01 ".into())
            }
            "QIWU_SECRET_PREVIOUS_SHORT" => Some("old-sessions-secret-01,tiny".into()),
            _ => None,
        }
    }

    fn compiled() -> HandlerCatalog {
        qiwu_scheduler_worker::handlers::builtin_catalog().expect("catalog")
    }

    const SWEEP: &str = r#"
[[handlers]]
name = "session.sweep"
title_zh = "清理过期在线会话"
title_en = "Sweep expired sessions"
description_zh = "删除已过期的在线会话。"
description_en = "Deletes expired sessions."
url = "http://sessions.internal:8080/jobs/session-sweep"
secret_env = "QIWU_SECRET_SESSIONS"
params_schema = '''{"type":"object","properties":{"batch":{"type":"integer","default":500}}}'''
"#;

    /// A valid entry for `name`, with `line` added (or replacing the line
    /// that sets the same key).
    fn entry(name: &str, line: &str) -> String {
        let key = line.split('=').next().unwrap_or("").trim();
        let mut lines = vec![
            "[[handlers]]".to_owned(),
            format!("name = {name:?}"),
            "title_zh = \"待办提醒\"".to_owned(),
            "title_en = \"Reminders\"".to_owned(),
            "url = \"https://wf.internal/jobs/remind\"".to_owned(),
            "secret_env = \"QIWU_SECRET_SESSIONS\"".to_owned(),
        ];
        if !key.is_empty() {
            lines.retain(|l| l.split('=').next().unwrap_or("").trim() != key);
            if !line.trim().ends_with('=') {
                lines.push(line.to_owned());
            }
        }
        lines.join("\n") + "\n"
    }

    #[test]
    fn a_valid_file_declares_its_handlers() {
        let text = format!(
            "# reviewed like code\n{SWEEP}\n{}",
            entry("wf.task.remind", "")
        );
        let declared = parse(&text, &compiled(), &env).unwrap_or_else(|p| panic!("{p:#?}"));
        assert_eq!(declared.len(), 2);
        let sweep = &declared[0];
        assert_eq!(sweep.descriptor.name, "session.sweep");
        assert_eq!(sweep.descriptor.title_zh, "清理过期在线会话");
        assert_eq!(sweep.descriptor.title_en, "Sweep expired sessions");
        assert_eq!(sweep.descriptor.description_en, "Deletes expired sessions.");
        assert_eq!(
            Value::Object(sweep.descriptor.default_params()),
            serde_json::json!({"batch": 500})
        );
        assert_eq!(
            sweep.url.as_str(),
            "http://sessions.internal:8080/jobs/session-sweep"
        );
        assert_eq!(sweep.secret, SECRET, "read from secret_env, trimmed");
        // Defaults: no descriptions, any object as params.
        let remind = &declared[1];
        assert_eq!(remind.descriptor.description_zh, "");
        assert_eq!(
            remind.descriptor.schema.raw(),
            &serde_json::json!({"type": "object"})
        );
        let inline = entry("wf.task.remind", "secret = \"inline-secret-0123456789\"");
        let inline = inline.replace("secret_env = \"QIWU_SECRET_SESSIONS\"\n", "");
        let declared = parse(&inline, &compiled(), &env).unwrap_or_else(|p| panic!("{p:#?}"));
        assert_eq!(declared[0].secret, "inline-secret-0123456789");
        assert!(declared[0].previous_secrets.is_empty());
    }

    #[test]
    fn previous_secrets_come_from_a_variable_or_inline() {
        let from_env = entry(
            "wf.task.remind",
            "previous_secrets_env = \"QIWU_SECRET_SESSIONS_PREVIOUS\"",
        );
        let declared = parse(&from_env, &compiled(), &env).unwrap_or_else(|p| panic!("{p:#?}"));
        assert_eq!(
            declared[0].previous_secrets,
            ["old-sessions-secret-01", "older-sessions-secret-01"]
        );
        // An unset variable means no rotation is under way.
        let unset = entry(
            "wf.task.remind",
            "previous_secrets_env = \"QIWU_SECRET_NONE\"",
        );
        let declared = parse(&unset, &compiled(), &env).unwrap_or_else(|p| panic!("{p:#?}"));
        assert!(declared[0].previous_secrets.is_empty());
        let inline = entry(
            "wf.task.remind",
            "previous_secrets = [\"old-sessions-secret-01\"]",
        );
        let declared = parse(&inline, &compiled(), &env).unwrap_or_else(|p| panic!("{p:#?}"));
        assert_eq!(declared[0].previous_secrets, ["old-sessions-secret-01"]);
    }

    #[test]
    fn an_empty_file_declares_nothing() {
        for text in ["", "# nothing yet\n", "handlers = []\n"] {
            let declared = parse(text, &compiled(), &env).unwrap_or_else(|p| panic!("{p:#?}"));
            assert!(declared.is_empty(), "{text:?}");
        }
    }

    #[test]
    fn every_problem_names_the_entry_and_what_is_wrong() {
        let no_secret =
            entry("wf.task.remind", "").replace("secret_env = \"QIWU_SECRET_SESSIONS\"\n", "");
        let cases: Vec<(String, &str, &str)> = vec![
            (
                entry("wf.task.remind", "timeout_note = 5"),
                "[[handlers]] entry 1 (wf.task.remind)",
                "unknown field `timeout_note`",
            ),
            (
                entry("wf.task.remind", "url ="),
                "[[handlers]] entry 1 (wf.task.remind)",
                "missing field `url`",
            ),
            (
                entry("wf.task.remind", "title_en = 3"),
                "[[handlers]] entry 1 (wf.task.remind)",
                "invalid type: integer `3`, expected a string",
            ),
            (
                entry("Wf.Remind", ""),
                "[[handlers]] entry 1 (Wf.Remind)",
                "name \"Wf.Remind\" is not a dotted lower-case name",
            ),
            (
                entry("remind", ""),
                "[[handlers]] entry 1 (remind)",
                "not a dotted lower-case name",
            ),
            (
                entry("audit.purge", ""),
                "[[handlers]] entry 1 (audit.purge)",
                "name audit.purge is a handler compiled into the service",
            ),
            (
                format!("{SWEEP}\n{}", entry("session.sweep", "")),
                "[[handlers]] entry 2 (session.sweep)",
                "name session.sweep is already declared by entry 1",
            ),
            (
                entry("wf.task.remind", "title_zh = \"  \""),
                "[[handlers]] entry 1 (wf.task.remind)",
                "title_zh is empty",
            ),
            (
                entry("wf.task.remind", "url = \"ftp://wf.internal/remind\""),
                "[[handlers]] entry 1 (wf.task.remind)",
                "url has the scheme ftp: only http:// and https:// are accepted",
            ),
            (
                entry("wf.task.remind", "url = \"wf.internal/remind\""),
                "[[handlers]] entry 1 (wf.task.remind)",
                "url is not an absolute http:// or https:// URL",
            ),
            (
                no_secret,
                "[[handlers]] entry 1 (wf.task.remind)",
                "no signing secret: set secret_env",
            ),
            (
                entry("wf.task.remind", "secret = \"inline-secret-0123456789\""),
                "[[handlers]] entry 1 (wf.task.remind)",
                "both secret and secret_env are set",
            ),
            (
                entry("wf.task.remind", "secret_env = \"QIWU_SECRET_NONE\""),
                "[[handlers]] entry 1 (wf.task.remind)",
                "secret_env names QIWU_SECRET_NONE, which is not set",
            ),
            (
                entry("wf.task.remind", "secret_env = \"QIWU_SECRET_BLANK\""),
                "[[handlers]] entry 1 (wf.task.remind)",
                "secret_env names QIWU_SECRET_BLANK, which is not set",
            ),
            (
                entry("wf.task.remind", "secret_env = \"QIWU_SECRET_SHORT\""),
                "[[handlers]] entry 1 (wf.task.remind)",
                "the secret in QIWU_SECRET_SHORT has 11 characters; at least 16 are needed",
            ),
            (
                entry(
                    "wf.task.remind",
                    "previous_secrets_env = \"QIWU_SECRET_PREVIOUS_SHORT\"",
                ),
                "[[handlers]] entry 1 (wf.task.remind)",
                "previous_secrets_env names QIWU_SECRET_PREVIOUS_SHORT, whose entry 2 has 4 characters; at least 16 are needed",
            ),
            (
                entry(
                    "wf.task.remind",
                    &format!("previous_secrets = [\"{SECRET}\"]"),
                ),
                "[[handlers]] entry 1 (wf.task.remind)",
                "previous_secrets entry 1 equals the current secret",
            ),
            (
                format!(
                    "{}previous_secrets_env = \"QIWU_SECRET_SESSIONS_PREVIOUS\"\n",
                    entry(
                        "wf.task.remind",
                        "previous_secrets = [\"old-sessions-secret-01\"]"
                    )
                ),
                "[[handlers]] entry 1 (wf.task.remind)",
                "both previous_secrets and previous_secrets_env are set",
            ),
            (
                entry("wf.task.remind", "params_schema = '{\"type\": '"),
                "[[handlers]] entry 1 (wf.task.remind)",
                "params_schema is not valid JSON",
            ),
            (
                entry("wf.task.remind", "params_schema = '{\"type\": \"string\"}'"),
                "[[handlers]] entry 1 (wf.task.remind)",
                "params_schema must describe an object",
            ),
            (
                entry(
                    "wf.task.remind",
                    "params_schema = '{\"type\": \"object\", \"properties\": {\"n\": {\"type\": \"integer\", \"minimum\": \"x\"}}}'",
                ),
                "[[handlers]] entry 1 (wf.task.remind)",
                "params_schema is not a valid JSON Schema",
            ),
            (
                entry(
                    "wf.task.remind",
                    "params_schema = '{\"type\": \"object\", \"properties\": {\"n\": {\"type\": \"integer\", \"default\": \"many\"}}}'",
                ),
                "[[handlers]] entry 1 (wf.task.remind)",
                "the defaults in params_schema do not validate",
            ),
            (
                "[[handlers]]\ntitle_zh = \"x\"\n".to_owned(),
                "[[handlers]] entry 1",
                "missing field `name`",
            ),
            ("[[handlers]]\nname = \n".to_owned(), "", "not valid TOML"),
            (
                format!("listen = \"0.0.0.0:80\"\n{SWEEP}"),
                "",
                "unknown key `listen` (the file holds only [[handlers]] entries)",
            ),
            (
                "handlers = 3\n".to_owned(),
                "",
                "`handlers` must be an array of tables",
            ),
            (
                "handlers = [3]\n".to_owned(),
                "[[handlers]] entry 1",
                "must be a table",
            ),
        ];
        for (text, label, problem) in cases {
            let problems = match parse(&text, &compiled(), &env) {
                Ok(_) => panic!("accepted:\n{text}"),
                Err(problems) => problems,
            };
            assert_eq!(problems.len(), 1, "{text}\n{problems:#?}");
            let message = &problems[0];
            assert!(
                message.starts_with(label) && message.contains(problem),
                "want {label:?} and {problem:?} in {message:?}"
            );
            assert!(!message.contains(SECRET), "no secret in {message:?}");
            assert!(!message.contains("tiny-secret"), "no secret in {message:?}");
        }
    }

    #[test]
    fn all_problems_are_reported_at_once_and_nothing_is_declared() {
        let text = format!(
            "{SWEEP}\n{}\n{}",
            entry("Bad Name", "url = \"ftp://x\""),
            entry("wf.task.remind", "secret_env = \"QIWU_SECRET_SHORT\"")
        );
        let Err(problems) = parse(&text, &compiled(), &env) else {
            panic!("accepted");
        };
        assert_eq!(problems.len(), 3, "{problems:#?}");
        assert!(problems[0].starts_with("[[handlers]] entry 2 (Bad Name): name"));
        assert!(problems[1].starts_with("[[handlers]] entry 2 (Bad Name): url"));
        assert!(problems[2].starts_with("[[handlers]] entry 3 (wf.task.remind): the secret"));
    }

    #[test]
    fn load_names_the_variable_and_the_file() {
        let dir = std::env::temp_dir().join(format!("qiwu-config-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let missing = dir.join("missing.toml");
        let err = load(&missing, &compiled())
            .err()
            .expect("missing file")
            .to_string();
        assert!(err.starts_with("QIWU_CONFIG names "), "{err}");
        assert!(err.contains(&missing.display().to_string()), "{err}");

        let bad = dir.join("bad.toml");
        std::fs::write(&bad, entry("audit.purge", "url = \"ftp://x\"")).expect("write");
        let err = load(&bad, &compiled()).err().expect("invalid").to_string();
        let heading = format!("QIWU_CONFIG ({}) has ", bad.display());
        assert!(err.starts_with(&heading), "{err}");
        assert!(
            err.contains("\n  [[handlers]] entry 1 (audit.purge): name audit.purge is a handler compiled into the service"),
            "{err}"
        );
        assert!(
            err.contains("\n  [[handlers]] entry 1 (audit.purge): url has the scheme ftp"),
            "{err}"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }
}
