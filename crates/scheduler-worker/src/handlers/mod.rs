//! The handler trait, the registry built at start-up from code (and from
//! the operator's declarations of handlers in other services), and the
//! built-in handlers. The registry is the whitelist: a job can only name a
//! handler registered here, and nothing is ever looked up by reflection.

pub mod dispatch;
mod echo;
pub mod purge;
pub mod remote;
pub mod robots;
pub mod signing;

use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use qiwu_domain::{HandlerCatalog, HandlerDescriptor, HandlerError};
use qiwu_storage::Store;
use serde_json::{Map, Value, json};

use crate::context::RunContext;

/// What a handler's run resolves to: its return value, or why it failed.
pub type HandlerFuture = Pin<Box<dyn Future<Output = Result<String, String>> + Send>>;

/// Code that does the work of a job. It must stop soon after
/// `ctx.stop` fires; output lines go to `ctx.log`.
pub trait Handler: Send + Sync {
    fn run(&self, params: Map<String, Value>, ctx: RunContext) -> HandlerFuture;
}

/// Handlers by name, with the catalog of their descriptors.
#[derive(Clone, Default)]
pub struct Registry {
    handlers: BTreeMap<String, Arc<dyn Handler>>,
    catalog: HandlerCatalog,
}

impl Registry {
    /// Pairs each descriptor with its implementation.
    pub fn new(
        entries: impl IntoIterator<Item = (HandlerDescriptor, Arc<dyn Handler>)>,
    ) -> Result<Registry, HandlerError> {
        let mut descriptors = Vec::new();
        let mut handlers = BTreeMap::new();
        for (descriptor, handler) in entries {
            handlers.insert(descriptor.name.clone(), handler);
            descriptors.push(descriptor);
        }
        Ok(Registry {
            catalog: HandlerCatalog::new(descriptors)?,
            handlers,
        })
    }

    /// Adds handlers that live in other services (SPEC §7.1), declared by
    /// the operator at start-up, to these. A name already registered is
    /// refused rather than replaced.
    pub fn with_remote(
        self,
        entries: impl IntoIterator<Item = (HandlerDescriptor, Arc<dyn Handler>)>,
    ) -> Result<Registry, HandlerError> {
        let mut descriptors: Vec<HandlerDescriptor> = self.catalog.iter().cloned().collect();
        let mut handlers = self.handlers;
        for (descriptor, handler) in entries {
            if handlers.contains_key(&descriptor.name) {
                return Err(HandlerError::Duplicate(descriptor.name));
            }
            handlers.insert(descriptor.name.clone(), handler);
            descriptors.push(descriptor);
        }
        Ok(Registry {
            catalog: HandlerCatalog::new(descriptors)?,
            handlers,
        })
    }

    pub fn get(&self, name: &str) -> Option<&Arc<dyn Handler>> {
        self.handlers.get(name)
    }

    pub fn catalog(&self) -> &HandlerCatalog {
        &self.catalog
    }
}

/// `demo.echo`: waits `delayMs`, then returns `message`.
fn demo_echo() -> Result<HandlerDescriptor, HandlerError> {
    HandlerDescriptor::new(
        "demo.echo",
        ("示例：回显消息", "Example: echo a message"),
        (
            "等待 delayMs 毫秒（收到停止通知时立即停止），然后原样返回 message。",
            "Waits delayMs milliseconds (stopping at once when told to), then returns message.",
        ),
        json!({
            "type": "object",
            "additionalProperties": false,
            "properties": {
                "message": {
                    "type": "string",
                    "maxLength": 200,
                    "default": "hello",
                    "title": "message",
                    "description": "The text to return"
                },
                "delayMs": {
                    "type": "integer",
                    "minimum": 0,
                    "maximum": 600000,
                    "default": 0,
                    "title": "delayMs",
                    "description": "Milliseconds to wait first"
                }
            }
        }),
    )
}

/// `audit.purge`: deletes expired runs, audit entries and notifications.
fn audit_purge() -> Result<HandlerDescriptor, HandlerError> {
    HandlerDescriptor::new(
        "audit.purge",
        ("清理过期日志", "Purge expired logs"),
        (
            "按 audit.retention_days（默认 180 天）分批（每批 5000 条）彻底删除过期的执行记录、操作日志和站内信。",
            "Deletes, in batches of 5000, runs, audit entries and notifications older than the audit.retention_days setting (default 180).",
        ),
        json!({"type": "object", "additionalProperties": false, "properties": {}}),
    )
}

/// `notify.dispatch`: delivers pending notifications through the outbox.
fn notify_dispatch() -> Result<HandlerDescriptor, HandlerError> {
    HandlerDescriptor::new(
        "notify.dispatch",
        ("派发待发送通知", "Dispatch pending notifications"),
        (
            "补发还没发出或发送失败的通知，每条最多尝试 3 次。",
            "Delivers pending or failed notifications, at most 3 attempts each.",
        ),
        json!({"type": "object", "additionalProperties": false, "properties": {}}),
    )
}

/// The catalog of handlers compiled into this binary.
pub fn builtin_catalog() -> Result<HandlerCatalog, HandlerError> {
    HandlerCatalog::new([demo_echo()?, audit_purge()?, notify_dispatch()?])
}

/// The built-in handlers with their implementations. `webhook_secret` is
/// `QIWU_WEBHOOK_SECRET` with `QIWU_WEBHOOK_PREVIOUS_SECRETS`, read once at
/// start-up: `notify.dispatch` signs every delivery with them and sends
/// nothing without them.
///
/// `clock` is the engine's: in a cluster the one corrected to the
/// database's, so a worker whose own clock runs ahead never purges early.
pub fn builtin_registry(
    store: Store,
    webhook_secret: Option<signing::SigningSecrets>,
    clock: Arc<dyn crate::clock::Clock>,
) -> Result<Registry, HandlerError> {
    Registry::new([
        (demo_echo()?, Arc::new(echo::Echo) as Arc<dyn Handler>),
        (
            audit_purge()?,
            Arc::new(
                purge::Purge::new(store.clone(), purge::DEFAULT_BATCH).with_clock(clock.clone()),
            ),
        ),
        (
            notify_dispatch()?,
            Arc::new(dispatch::Dispatch::new(store, webhook_secret).with_clock(clock)),
        ),
    ])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builtin_catalog_is_valid() {
        let catalog = builtin_catalog().expect("catalog");
        let names: Vec<&str> = catalog.iter().map(|d| d.name.as_str()).collect();
        assert_eq!(names, ["audit.purge", "demo.echo", "notify.dispatch"]);
        let echo = catalog.get("demo.echo").expect("echo");
        assert_eq!(
            serde_json::Value::Object(echo.default_params()),
            json!({"message": "hello", "delayMs": 0})
        );
    }

    #[tokio::test]
    async fn the_registry_implements_exactly_the_catalog() {
        let store = crate::test_support::test_store().await;
        let registry = builtin_registry(
            store.store.clone(),
            Some("s".into()),
            Arc::new(crate::clock::SystemClock),
        )
        .expect("registry");
        let catalog = builtin_catalog().expect("catalog");
        let names = |c: &HandlerCatalog| {
            c.iter()
                .map(|d| (d.name.clone(), d.title_zh.clone(), d.schema.raw().clone()))
                .collect::<Vec<_>>()
        };
        assert_eq!(names(registry.catalog()), names(&catalog));
        for d in catalog.iter() {
            assert!(registry.get(&d.name).is_some(), "{} is implemented", d.name);
        }
    }

    fn remote(name: &str) -> (HandlerDescriptor, Arc<dyn Handler>) {
        let descriptor = HandlerDescriptor::new(
            name,
            ("清理过期在线会话", "Sweep expired sessions"),
            ("", ""),
            json!({"type": "object", "properties": {"batch": {"type": "integer", "default": 500}}}),
        )
        .expect("descriptor");
        let url = remote::Url::parse("http://sessions.internal/sweep").expect("url");
        let client = remote::client().expect("client");
        let handler = remote::RemoteHandler::new(url, "s".repeat(16), client);
        (descriptor, Arc::new(handler))
    }

    #[tokio::test]
    async fn remote_handlers_join_the_catalog_and_never_replace_one() {
        let store = crate::test_support::test_store().await;
        let builtin = builtin_registry(
            store.store.clone(),
            None,
            Arc::new(crate::clock::SystemClock),
        )
        .expect("registry");
        let registry = builtin
            .clone()
            .with_remote([remote("session.sweep"), remote("wf.task.remind")])
            .expect("with remote");
        let names: Vec<&str> = registry.catalog().iter().map(|d| d.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "audit.purge",
                "demo.echo",
                "notify.dispatch",
                "session.sweep",
                "wf.task.remind"
            ]
        );
        let sweep = registry.catalog().get("session.sweep").expect("listed");
        assert_eq!(sweep.title_en, "Sweep expired sessions");
        assert_eq!(
            serde_json::Value::Object(sweep.default_params()),
            json!({"batch": 500})
        );
        assert!(registry.get("session.sweep").is_some());
        assert!(registry.get("demo.echo").is_some());

        let clash = builtin.clone().with_remote([remote("demo.echo")]);
        assert!(matches!(clash, Err(HandlerError::Duplicate(n)) if n == "demo.echo"));
        let twice = builtin.with_remote([remote("session.sweep"), remote("session.sweep")]);
        assert!(matches!(twice, Err(HandlerError::Duplicate(n)) if n == "session.sweep"));
    }
}
