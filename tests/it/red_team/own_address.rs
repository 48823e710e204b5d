//! `web.fetch` refused loopback spellings, private ranges, metadata
//! addresses and redirects to them, but a URL naming this host's own public
//! address (say eth0's) reached every service listening on `0.0.0.0`, the
//! gateway itself included. Now every address of the host's interfaces is
//! refused, as written or as a name resolves, also after a redirect.

use crate::support::fake_model::{FakeModel, Reply};
use crate::support::gateway::{GatewayProcess, client, signed_request};
use crate::support::host_address;
use bub::tools::builtin::web::address::blocked_reason;
use serde_json::json;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

const SECRET: &str = "own-address-secret";

/// A server on every interface (`0.0.0.0`) that counts the requests it gets.
async fn listener_on_every_interface() -> (u16, Arc<AtomicUsize>) {
    let seen = Arc::new(AtomicUsize::new(0));
    let app = axum::Router::new().fallback({
        let seen = seen.clone();
        move || async move {
            seen.fetch_add(1, Ordering::SeqCst);
            "internal admin page"
        }
    });
    let listener = tokio::net::TcpListener::bind("0.0.0.0:0").await.expect("bind 0.0.0.0");
    let port = listener.local_addr().expect("its port").port();
    tokio::spawn(async move { axum::serve(listener, app).await });
    (port, seen)
}

#[tokio::test(flavor = "multi_thread")]
async fn the_model_cannot_fetch_the_hosts_own_public_address() {
    let address = host_address();
    let (port, seen) = listener_on_every_interface().await;
    let url = format!("http://{address}:{port}/admin");
    let home = tempfile::tempdir().unwrap();
    let fake = FakeModel::start().await;
    fake.push(Reply::tool_calls(vec![("web_fetch", json!({"url": url}))])).push(Reply::text("done"));
    let config = format!("[channels.webhook]\nkind = \"webhook\"\nsecrets = [\"{SECRET}\"]\n");
    let gateway = GatewayProcess::start_with_config(home.path(), &fake.vars("openai:gpt-test"), &config).await;

    let body = json!({"message_id": "m1", "chat_id": "c1", "sender_id": "u1", "text": "read the admin page"});
    let response = signed_request(&client(), gateway.addr, "webhook", "sync", &body, SECRET).await.expect("request");
    assert_eq!(response.status(), 200);
    let read = fake.tool_results(1);
    assert!(read.contains(&format!("refused to fetch {url}")), "the model reads a refusal: {read}");
    assert!(!read.contains("internal admin page"), "{read}");
    if blocked_reason(address).is_none() {
        assert!(read.contains("which is an address of this host's own interfaces"), "{read}");
    }
    assert_eq!(seen.load(Ordering::SeqCst), 0, "the server on {address} saw no request");
    assert!(gateway.stop().await);
}
