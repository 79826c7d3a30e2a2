//! Notifications (SPEC §8): editable templates, the inbox, and the webhook
//! outbox that `notify.dispatch` drains, one repository per file.
//!
//! The outbox row is written in the same transaction as its notification,
//! so a notification is never stored without its delivery or the reverse.

mod inbox;
mod outbox;
mod templates;

pub use inbox::{
    NewNotification, NotificationCursor, NotificationPage, NotificationRecord, NotificationRepo,
};
pub use outbox::{OUTBOX_MAX_ATTEMPTS, OutboxRecord, OutboxRepo, OutboxStatus, outbox_retry_delay};
pub use templates::{
    TEMPLATE_MODIFY_ACTION, TEMPLATE_TARGET, TemplateRecord, TemplateRepo, TemplateTexts,
};
