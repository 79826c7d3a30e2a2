//! Temporary.
#[tokio::test]
async fn inspect() {
    for url in ["postgres://postgres@127.0.0.1:5432/qiwu_inspect", "mysql://root@127.0.0.1:3306/qiwu_inspect", "sqlite:///tmp/qiwu_inspect/x/db.sqlite"] {
        let s = qiwu_storage::Store::connect(url).await.unwrap();
        s.migrate().await.unwrap();
    }
}
