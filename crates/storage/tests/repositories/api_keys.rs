//! API keys of service accounts on all three databases.

use super::*;
use qiwu_storage::{API_KEY_MARK, ApiKeyRecord};

scenarios!(
    api_key_create_authenticate_list_revoke,
    api_key_wrong_secret_or_prefix_fails,
    api_key_last_used_is_written_at_most_once_a_minute,
    api_key_concurrent_authentications,
);

/// 2025-11-25T00:00:00Z.
const T0: i64 = 1_764_028_800_000;

fn perms(codes: &[&str]) -> Vec<String> {
    codes.iter().map(|c| c.to_string()).collect()
}

/// The stored row, hash included.
async fn row(store: &Store, id: i64) -> api_key::Model {
    api_key::Entity::find_by_id(id)
        .one(store.connection())
        .await
        .unwrap()
        .unwrap()
}

async fn api_key_create_authenticate_list_revoke(store: Store) {
    let keys = store.api_keys();
    let (wf, wf_key) = keys
        .create(
            "wf service",
            &perms(&["scheduler.task.run", "scheduler.task.view"]),
            "admin",
            at(T0),
        )
        .await
        .unwrap();
    assert_eq!(wf.name, "wf service");
    assert_eq!(
        wf.perms,
        perms(&["scheduler.task.run", "scheduler.task.view"])
    );
    assert_eq!(wf.created_at, at(T0));
    assert_eq!(wf.created_by, "admin");
    assert_eq!(wf.revoked_at, None);
    assert_eq!(wf.last_used_at, None);
    assert!(!wf.is_revoked());
    // qk_<prefix>_<secret>, the prefix being the stored one.
    assert_eq!(wf.prefix.len(), 8);
    assert!(wf.prefix.chars().all(|c| c.is_ascii_alphanumeric()));
    let secret = wf_key
        .strip_prefix(&format!("{API_KEY_MARK}{}_", wf.prefix))
        .unwrap_or_else(|| panic!("{wf_key} starts with qk_ and the prefix"));
    assert!(secret.len() >= 43, "32 random bytes or more: {secret}");
    // Only a SHA-256 hash of the secret is stored.
    let stored = row(&store, wf.id).await;
    assert_eq!(stored.secret_hash.len(), 64);
    assert!(!stored.secret_hash.contains(secret));
    assert!(!format!("{stored:?}").contains(secret));

    // A second key with a long actor; names need not be unique.
    let (other, other_key) = keys
        .create(
            "wf service",
            &perms(&["scheduler.run.browse"]),
            &"a".repeat(300),
            at(T0 + 1),
        )
        .await
        .unwrap();
    assert_eq!(other.created_by, "a".repeat(128));
    assert_ne!(other.prefix, wf.prefix);
    assert_ne!(other_key, wf_key);

    // Newest first, revoked ones included.
    let listed: Vec<i64> = keys.list().await.unwrap().iter().map(|k| k.id).collect();
    assert_eq!(listed, vec![other.id, wf.id]);
    assert_eq!(keys.get(wf.id).await.unwrap(), Some(wf.clone()));
    assert_eq!(keys.get(wf.id + 1000).await.unwrap(), None);

    let used = keys
        .authenticate(&wf_key, at(T0 + 5))
        .await
        .unwrap()
        .expect("the key authenticates");
    assert_eq!(
        used,
        ApiKeyRecord {
            last_used_at: Some(at(T0 + 5)),
            ..wf.clone()
        }
    );

    // Revoke: once for real, then idempotently, keeping the first time.
    let (revoked, newly) = keys.revoke(wf.id, at(T0 + 10)).await.unwrap();
    assert!(newly);
    assert_eq!(revoked.revoked_at, Some(at(T0 + 10)));
    let (again, newly) = keys.revoke(wf.id, at(T0 + 20)).await.unwrap();
    assert!(!newly);
    assert_eq!(again.revoked_at, Some(at(T0 + 10)));
    assert!(matches!(
        keys.revoke(wf.id + 1000, at(T0)).await,
        Err(StorageError::NotFound)
    ));
    assert_eq!(keys.authenticate(&wf_key, at(T0 + 30)).await.unwrap(), None);
    // The other key is untouched.
    assert!(
        keys.authenticate(&other_key, at(T0 + 30))
            .await
            .unwrap()
            .is_some()
    );
    let listed = keys.list().await.unwrap();
    assert_eq!(listed.len(), 2);
    assert_eq!(listed[1].revoked_at, Some(at(T0 + 10)));
    assert_eq!(listed[0].revoked_at, None);
}

async fn api_key_wrong_secret_or_prefix_fails(store: Store) {
    let keys = store.api_keys();
    let (k, key) = keys
        .create("svc", &perms(&["scheduler.task.run"]), "admin", at(T0))
        .await
        .unwrap();
    let head = format!("{API_KEY_MARK}{}_", k.prefix);
    let secret = &key[head.len()..];
    // Flip the secret's last character.
    let last = secret.chars().last().unwrap();
    let flipped = if last == 'A' { 'B' } else { 'A' };
    let wrong_secret = format!("{head}{}{flipped}", &secret[..secret.len() - 1]);
    let wrong_prefix = format!("{API_KEY_MARK}ZZZZZZZZ_{secret}");
    for bad in [
        wrong_secret.as_str(),
        wrong_prefix.as_str(),
        &format!("{head}{secret}x"),
        &head,
        &key[..key.len() - 1],
        &key[API_KEY_MARK.len()..],
        "qk_",
        "",
        "not a key",
    ] {
        assert_eq!(
            keys.authenticate(bad, at(T0 + 1)).await.unwrap(),
            None,
            "{bad}"
        );
    }
    // Failed attempts record no use.
    assert_eq!(row(&store, k.id).await.last_used_at, None);
    assert!(keys.authenticate(&key, at(T0 + 1)).await.unwrap().is_some());
}

async fn api_key_last_used_is_written_at_most_once_a_minute(store: Store) {
    let keys = store.api_keys();
    let (k, key) = keys
        .create("svc", &perms(&["scheduler.task.run"]), "admin", at(T0))
        .await
        .unwrap();
    let use_at = |ms: i64| {
        let keys = store.api_keys();
        let key = key.clone();
        async move { keys.authenticate(&key, at(ms)).await.unwrap().unwrap() }
    };
    let stored = || async { row(&store, k.id).await.last_used_at };

    assert_eq!(use_at(T0 + 1000).await.last_used_at, Some(at(T0 + 1000)));
    assert_eq!(stored().await, Some(T0 + 1000));
    // Within the minute: no write, and the record says so.
    for ms in [T0 + 1001, T0 + 31_000, T0 + 60_999] {
        assert_eq!(use_at(ms).await.last_used_at, Some(at(T0 + 1000)), "{ms}");
        assert_eq!(stored().await, Some(T0 + 1000));
    }
    // A minute later: written again.
    assert_eq!(
        use_at(T0 + 61_000).await.last_used_at,
        Some(at(T0 + 61_000))
    );
    assert_eq!(stored().await, Some(T0 + 61_000));
    // A clock behind the stored time writes nothing.
    assert_eq!(use_at(T0).await.last_used_at, Some(at(T0 + 61_000)));
    assert_eq!(stored().await, Some(T0 + 61_000));
    assert_eq!(
        use_at(T0 + 200_000).await.last_used_at,
        Some(at(T0 + 200_000))
    );
}

async fn api_key_concurrent_authentications(store: Store) {
    let (k, key) = store
        .api_keys()
        .create("svc", &perms(&["scheduler.task.run"]), "admin", at(T0))
        .await
        .unwrap();
    let tasks: Vec<_> = (0..16)
        .map(|i| {
            let store = store.clone();
            let key = key.clone();
            tokio::spawn(
                async move { store.api_keys().authenticate(&key, at(T0 + 1000 + i)).await },
            )
        })
        .collect();
    for task in tasks {
        let got = task.await.unwrap().unwrap().expect("authenticates");
        assert_eq!(got.id, k.id);
    }
    let last = row(&store, k.id).await.last_used_at.unwrap();
    assert!((T0 + 1000..T0 + 1016).contains(&last), "{last}");
}
