//! `POST /webhook/<name>` over real HTTP against a fake gateway inbox.

use super::support;

use bub_channel::{Channel, ChatKind, Delivery, SubmitError};
use bub_webhook::{SIGNATURE_HEADER, TIMESTAMP_HEADER, sign};
use serde_json::{Value, json};
use std::time::Duration;
use support::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

#[tokio::test]
async fn sync_request_waits_for_the_outcome_and_submits_a_normalized_inbound() {
    let inbox = FakeInbox::replying(&["Hel", "lo"], "Hello");
    let served = serve(settings(), Some(inbox.clone())).await;
    let body = json!({
        "message_id": 42, "chat_id": -7, "sender_id": 9, "sender_name": "Ada",
        "text": "hi bot", "group": true, "mentions_bot": true,
    })
    .to_string();

    let (status, reply) = json(served.post_signed("", &body, SECRET).await).await;

    assert_eq!(status, 200, "{reply}");
    assert_eq!(reply, json!({"message_id": "42", "status": "replied", "text": "Hello", "session": "hook:chat-1"}));
    let submitted = inbox.submitted();
    assert_eq!(submitted.len(), 1);
    let (inbound, with_sink) = &submitted[0];
    assert!(with_sink, "a sync caller waits on a reply sink");
    assert_eq!(inbound.channel, NAME);
    assert_eq!(inbound.message_id, "42");
    assert_eq!(inbound.chat.id, "-7");
    assert_eq!(inbound.chat.kind, ChatKind::Group);
    assert_eq!(inbound.chat.thread_id, None);
    assert_eq!(inbound.sender.id, "9");
    assert_eq!(inbound.sender.display.as_deref(), Some("Ada"));
    assert!(!inbound.sender.is_bot);
    assert!(inbound.addressing.mention);
    assert!(!inbound.from_self);
    assert_eq!(inbound.delivery, Delivery::Caller);
    assert_eq!(inbound.text, "hi bot");
}

#[tokio::test]
async fn direct_and_thread_chats_are_told_apart() {
    let inbox = FakeInbox::replying(&[], "ok");
    let served = serve(settings(), Some(inbox.clone())).await;
    served.post_signed("", &message("direct", "hi"), SECRET).await;
    let thread =
        json!({"message_id": "t", "chat_id": "c", "sender_id": "u", "text": "hi", "group": true, "thread_id": "th-1"});
    served.post_signed("", &thread.to_string(), SECRET).await;

    let submitted = inbox.submitted();
    assert_eq!(submitted[0].0.chat.kind, ChatKind::Direct);
    assert!(!submitted[0].0.addressing.mention);
    assert_eq!(submitted[1].0.chat.kind, ChatKind::Thread);
    assert_eq!(submitted[1].0.chat.thread_id.as_deref(), Some("th-1"));
}

/// Splits a `text/event-stream` body into (event, data) pairs.
fn parse_events(stream: &str) -> Vec<(String, Value)> {
    stream
        .split("\n\n")
        .filter(|block| !block.trim().is_empty())
        .map(|block| {
            let mut event = String::new();
            let mut data = String::new();
            for line in block.lines() {
                if let Some(name) = line.strip_prefix("event:") {
                    event = name.trim().to_string();
                } else if let Some(chunk) = line.strip_prefix("data:") {
                    data.push_str(chunk.trim_start());
                }
            }
            (event, serde_json::from_str(&data).unwrap())
        })
        .collect()
}

#[tokio::test]
async fn sse_request_streams_deltas_then_one_done_event() {
    let inbox = FakeInbox::replying(&["Hel", "lo"], "Hello");
    let served = serve(settings(), Some(inbox.clone())).await;

    let response = served.post_signed("?mode=sse", &message("m-sse", "hi"), SECRET).await;
    assert_eq!(response.status(), 200);
    assert!(response.headers()["content-type"].to_str().unwrap().starts_with("text/event-stream"));
    let events = parse_events(&response.text().await.unwrap());

    assert_eq!(
        events,
        vec![
            ("delta".to_string(), json!({"text": "Hel"})),
            ("delta".to_string(), json!({"text": "lo"})),
            (
                "done".to_string(),
                json!({"message_id": "m-sse", "status": "replied", "text": "Hello", "session": "hook:chat-1"})
            ),
        ]
    );
    assert_eq!(inbox.submitted()[0].0.delivery, Delivery::Caller);
}

#[tokio::test]
async fn async_request_is_accepted_at_once_for_delivery_through_the_channel() {
    let inbox = FakeInbox::replying(&["never streamed"], "later");
    let mut settings = settings();
    settings.callback_url = Some("http://127.0.0.1:9/replies".to_string());
    let served = serve(settings, Some(inbox.clone())).await;

    let (status, reply) = json(served.post_signed("?mode=async", &message("m-async", "hi"), SECRET).await).await;

    assert_eq!(status, 202, "{reply}");
    assert_eq!(reply, json!({"message_id": "m-async", "status": "accepted"}));
    let submitted = inbox.submitted();
    assert_eq!(submitted.len(), 1);
    assert_eq!(submitted[0].0.delivery, Delivery::Channel);
    assert!(!submitted[0].1, "async submissions carry no reply sink");
}

#[tokio::test]
async fn async_without_a_callback_url_is_refused() {
    let inbox = FakeInbox::replying(&[], "x");
    let served = serve(settings(), Some(inbox.clone())).await;
    let (status, reply) = json(served.post_signed("?mode=async", &message("m", "hi"), SECRET).await).await;
    assert_eq!((status, reply["error"].as_str()), (400, Some("async_unavailable")));
    assert!(inbox.submitted().is_empty());
}

#[tokio::test]
async fn unknown_mode_is_refused() {
    let inbox = FakeInbox::replying(&[], "x");
    let served = serve(settings(), Some(inbox.clone())).await;
    let (status, reply) = json(served.post_signed("?mode=push", &message("m", "hi"), SECRET).await).await;
    assert_eq!((status, reply["error"].as_str()), (400, Some("bad_mode")));
    assert!(inbox.submitted().is_empty());
}

#[tokio::test]
async fn a_rotated_in_second_secret_is_accepted() {
    let inbox = FakeInbox::replying(&[], "ok");
    let served = serve(settings(), Some(inbox.clone())).await;
    let (status, _) = json(served.post_signed("", &message("m-rot", "hi"), ROTATED_SECRET).await).await;
    assert_eq!(status, 200);
    assert_eq!(inbox.submitted().len(), 1);
}

async fn assert_refused(inbox: &FakeInbox, response: reqwest::Response, status: u16, kind: &str) {
    let (got, body) = json(response).await;
    assert_eq!((got, body["error"].as_str()), (status, Some(kind)), "{body}");
    assert!(body["message"].as_str().is_some_and(|m| !m.is_empty()), "errors say what to fix: {body}");
    assert!(inbox.submitted().is_empty(), "nothing is submitted when a check fails");
}

#[tokio::test]
async fn a_signature_over_a_different_body_is_refused() {
    let inbox = FakeInbox::replying(&[], "x");
    let served = serve(settings(), Some(inbox.clone())).await;
    let timestamp = chrono::Utc::now().timestamp();
    let response = client()
        .post(served.url(""))
        .header(TIMESTAMP_HEADER, timestamp.to_string())
        .header(SIGNATURE_HEADER, sign(SECRET, timestamp, message("other", "hi").as_bytes()))
        .body(message("m", "hi"))
        .send()
        .await
        .unwrap();
    assert_refused(&inbox, response, 401, "bad_signature").await;
}

#[tokio::test]
async fn a_signature_with_an_unknown_secret_is_refused() {
    let inbox = FakeInbox::replying(&[], "x");
    let served = serve(settings(), Some(inbox.clone())).await;
    let response = served.post_signed("", &message("m", "hi"), "not-configured").await;
    assert_refused(&inbox, response, 401, "bad_signature").await;
}

#[tokio::test]
async fn a_six_minute_old_timestamp_is_refused() {
    let inbox = FakeInbox::replying(&[], "x");
    let served = serve(settings(), Some(inbox.clone())).await;
    let six_minutes_ago = chrono::Utc::now().timestamp() - 6 * 60;
    let response = served.post_signed_at("", message("m", "hi").into_bytes(), SECRET, six_minutes_ago).await;
    assert_refused(&inbox, response, 401, "stale_timestamp").await;
}

#[tokio::test]
async fn requests_without_signature_headers_are_refused() {
    let inbox = FakeInbox::replying(&[], "x");
    let served = serve(settings(), Some(inbox.clone())).await;
    let unsigned = client().post(served.url("")).body(message("m", "hi")).send().await.unwrap();
    assert_refused(&inbox, unsigned, 401, "missing_signature").await;

    let timestamp = chrono::Utc::now().timestamp();
    let no_timestamp = client()
        .post(served.url(""))
        .header(SIGNATURE_HEADER, sign(SECRET, timestamp, message("m", "hi").as_bytes()))
        .body(message("m", "hi"))
        .send()
        .await
        .unwrap();
    assert_refused(&inbox, no_timestamp, 401, "missing_signature").await;
}

/// A signed body of exactly `len` bytes that is a valid message.
fn message_of_len(len: usize) -> Vec<u8> {
    let empty = message("big", "");
    let padding = len - empty.len();
    message("big", &"x".repeat(padding)).into_bytes()
}

#[tokio::test]
async fn a_body_over_one_mebibyte_with_content_length_is_refused() {
    let inbox = FakeInbox::replying(&[], "x");
    let served = serve(settings(), Some(inbox.clone())).await;
    let timestamp = chrono::Utc::now().timestamp();
    let response = served.post_signed_at("", message_of_len(1024 * 1024 + 1), SECRET, timestamp).await;
    assert_refused(&inbox, response, 413, "body_too_large").await;
}

#[tokio::test]
async fn a_body_of_exactly_one_mebibyte_is_accepted() {
    let inbox = FakeInbox::replying(&[], "ok");
    let served = serve(settings(), Some(inbox.clone())).await;
    let timestamp = chrono::Utc::now().timestamp();
    let response = served.post_signed_at("", message_of_len(1024 * 1024), SECRET, timestamp).await;
    assert_eq!(response.status(), 200);
    assert_eq!(inbox.submitted().len(), 1);
}

#[tokio::test]
async fn a_chunked_body_over_the_limit_is_refused_while_reading() {
    let inbox = FakeInbox::replying(&[], "x");
    let served = serve(settings(), Some(inbox.clone())).await;
    let body = message_of_len(1024 * 1024 + 1);
    let timestamp = chrono::Utc::now().timestamp();
    let signature = sign(SECRET, timestamp, &body);

    // reqwest always sends a Content-Length for in-memory bodies: speak HTTP/1.1 by hand.
    let mut stream = tokio::net::TcpStream::connect(served.addr).await.unwrap();
    let head = format!(
        "POST /webhook/{NAME} HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n\
         Transfer-Encoding: chunked\r\n{TIMESTAMP_HEADER}: {timestamp}\r\n{SIGNATURE_HEADER}: {signature}\r\n\
         Connection: close\r\n\r\n"
    );
    stream.write_all(head.as_bytes()).await.unwrap();
    for chunk in body.chunks(64 * 1024) {
        let framed = [format!("{:x}\r\n", chunk.len()).as_bytes(), chunk, b"\r\n"].concat();
        if stream.write_all(&framed).await.is_err() {
            break; // the server may stop reading once it has refused the body
        }
    }
    let _ = stream.write_all(b"0\r\n\r\n").await;
    let mut response = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(60), stream.read_to_end(&mut response)).await;
    let response = String::from_utf8_lossy(&response);

    assert!(response.starts_with("HTTP/1.1 413"), "{response}");
    assert!(response.contains("body_too_large"), "{response}");
    assert!(inbox.submitted().is_empty());
}

/// Writes one signed request with `Content-Length` on `stream`, the whole body before reading
/// anything (as Python's urllib and many other clients do), and returns the response head and body.
async fn write_all_then_read(stream: &mut tokio::net::TcpStream, body: &[u8], close: bool) -> String {
    let timestamp = chrono::Utc::now().timestamp();
    let signature = sign(SECRET, timestamp, body);
    let connection = if close { "Connection: close\r\n" } else { "" };
    let head = format!(
        "POST /webhook/{NAME} HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\n{TIMESTAMP_HEADER}: {timestamp}\r\n{SIGNATURE_HEADER}: {signature}\r\n{connection}\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes()).await.expect("the head is written");
    stream.write_all(body).await.expect("the server reads the whole body before answering");
    let mut response = Vec::new();
    let mut buffer = [0u8; 8192];
    // One response: read until its JSON body has closed (bodies here are small and unchunked).
    loop {
        let read = tokio::time::timeout(Duration::from_secs(30), stream.read(&mut buffer))
            .await
            .expect("the response arrives")
            .expect("the connection is not reset");
        response.extend_from_slice(&buffer[..read]);
        let text = String::from_utf8_lossy(&response);
        if read == 0 || text.split_once("\r\n\r\n").is_some_and(|(_, body)| body.ends_with('}')) {
            return text.into_owned();
        }
    }
}

#[tokio::test]
async fn a_client_that_writes_an_oversize_body_before_reading_gets_the_413_and_keeps_its_connection() {
    let inbox = FakeInbox::replying(&[], "ok");
    let served = serve(settings(), Some(inbox.clone())).await;
    let mut stream = tokio::net::TcpStream::connect(served.addr).await.unwrap();

    let refused = write_all_then_read(&mut stream, &message_of_len(2 * 1024 * 1024), false).await;
    assert!(refused.starts_with("HTTP/1.1 413"), "{refused}");
    assert!(refused.contains("body_too_large"), "{refused}");
    assert!(inbox.submitted().is_empty());

    let accepted = write_all_then_read(&mut stream, message("after-413", "hi").as_bytes(), true).await;
    assert!(accepted.starts_with("HTTP/1.1 200"), "{accepted}");
    assert_eq!(inbox.submitted().len(), 1);
}

#[tokio::test]
async fn an_oversize_body_announced_with_expect_continue_is_refused_before_it_is_sent() {
    let inbox = FakeInbox::replying(&[], "x");
    let served = serve(settings(), Some(inbox.clone())).await;
    let mut stream = tokio::net::TcpStream::connect(served.addr).await.unwrap();
    let head = format!(
        "POST /webhook/{NAME} HTTP/1.1\r\nHost: localhost\r\nContent-Length: {}\r\n\
         Expect: 100-continue\r\n{TIMESTAMP_HEADER}: 1\r\n{SIGNATURE_HEADER}: sha256=00\r\n\r\n",
        2 * 1024 * 1024
    );
    stream.write_all(head.as_bytes()).await.unwrap();
    let mut response = vec![0u8; 4096];
    let read = tokio::time::timeout(Duration::from_secs(30), stream.read(&mut response)).await.unwrap().unwrap();
    let response = String::from_utf8_lossy(&response[..read]);
    assert!(response.starts_with("HTTP/1.1 413"), "no 100 Continue, the refusal at once: {response}");
    assert!(inbox.submitted().is_empty());
}

#[tokio::test]
async fn malformed_json_is_refused() {
    let inbox = FakeInbox::replying(&[], "x");
    let served = serve(settings(), Some(inbox.clone())).await;
    let response = served.post_signed("", "{\"message_id\": ", SECRET).await;
    assert_refused(&inbox, response, 400, "invalid_json").await;
}

#[tokio::test]
async fn a_message_without_text_is_refused_by_field_name() {
    let inbox = FakeInbox::replying(&[], "x");
    let served = serve(settings(), Some(inbox.clone())).await;
    let body = json!({"message_id": "m", "chat_id": "c", "sender_id": "u"}).to_string();
    let response = served.post_signed("", &body, SECRET).await;
    let (status, reply) = json(response).await;
    assert_eq!((status, reply["error"].as_str()), (400, Some("missing_field")));
    assert!(reply["message"].as_str().unwrap().contains("text"), "{reply}");
    assert!(inbox.submitted().is_empty());

    let empty = served.post_signed("", &message("m", "  "), SECRET).await;
    assert_refused(&inbox, empty, 400, "empty_field").await;
}

#[tokio::test]
async fn a_duplicate_gets_the_original_outcome_in_every_mode() {
    let inbox = FakeInbox::new(Script::Duplicate(Some(outcome("first answer"))));
    let mut settings = settings();
    settings.callback_url = Some("http://127.0.0.1:9/replies".to_string());
    let served = serve(settings, Some(inbox.clone())).await;
    let expected =
        json!({"message_id": "m-dup", "status": "replied", "text": "first answer", "session": "hook:chat-1"});

    for query in ["", "?mode=async"] {
        let (status, reply) = json(served.post_signed(query, &message("m-dup", "hi"), SECRET).await).await;
        assert_eq!((status, &reply), (200, &expected), "mode {query:?}");
    }
    let response = served.post_signed("?mode=sse", &message("m-dup", "hi"), SECRET).await;
    assert_eq!(response.status(), 200);
    assert_eq!(parse_events(&response.text().await.unwrap()), vec![("done".to_string(), expected)]);
}

#[tokio::test]
async fn a_duplicate_still_in_progress_is_a_conflict() {
    let inbox = FakeInbox::new(Script::Duplicate(None));
    let served = serve(settings(), Some(inbox)).await;
    let (status, reply) = json(served.post_signed("", &message("m", "hi"), SECRET).await).await;
    assert_eq!((status, reply["error"].as_str()), (409, Some("in_progress")));
}

#[tokio::test]
async fn a_rate_limited_sender_is_told_when_to_retry() {
    let inbox = FakeInbox::new(Script::Fail(SubmitError::RateLimited { retry_after: Duration::from_millis(2500) }));
    let served = serve(settings(), Some(inbox)).await;
    let response = served.post_signed("", &message("m", "hi"), SECRET).await;
    assert_eq!(response.headers()["retry-after"], "3");
    let (status, reply) = json(response).await;
    assert_eq!((status, reply["error"].as_str()), (429, Some("rate_limited")));
}

#[tokio::test]
async fn an_unavailable_gateway_is_a_503() {
    let inbox = FakeInbox::new(Script::Fail(SubmitError::Unavailable("store down".into())));
    let served = serve(settings(), Some(inbox)).await;
    let (status, reply) = json(served.post_signed("", &message("m", "hi"), SECRET).await).await;
    assert_eq!((status, reply["error"].as_str()), (503, Some("unavailable")));
}

#[tokio::test]
async fn a_sync_request_stops_waiting_after_the_reply_timeout_with_a_504() {
    let inbox = FakeInbox::new(Script::Hold);
    let mut settings = settings();
    settings.reply_timeout = Duration::from_millis(300);
    let served = serve(settings, Some(inbox)).await;
    let (status, reply) = json(served.post_signed("", &message("m", "hi"), SECRET).await).await;
    assert_eq!((status, reply["error"].as_str()), (504, Some("timeout")));
    assert!(reply["message"].as_str().unwrap().contains("same message_id"), "{reply}");
}

/// SSE callers get the same deadline: no first event in time is a 504, and a
/// stream still going at the deadline ends with a `timeout` error event.
#[tokio::test]
async fn an_sse_request_stops_waiting_after_the_reply_timeout() {
    let mut settings = settings();
    settings.reply_timeout = Duration::from_millis(300);
    let served = serve(settings.clone(), Some(FakeInbox::new(Script::Hold))).await;
    let (status, reply) = json(served.post_signed("?mode=sse", &message("m", "hi"), SECRET).await).await;
    assert_eq!((status, reply["error"].as_str()), (504, Some("timeout")));

    let served = serve(settings, Some(FakeInbox::new(Script::DeltasThenHold(vec!["thinking".into()])))).await;
    let response = served.post_signed("?mode=sse", &message("m2", "hi"), SECRET).await;
    assert_eq!(response.status(), 200);
    let events = parse_events(&response.text().await.unwrap());
    assert_eq!(events.len(), 2, "{events:?}");
    assert_eq!(events[0], ("delta".to_string(), json!({"text": "thinking"})));
    assert_eq!(events[1].0, "error");
    assert_eq!(events[1].1["error"], "timeout");
    assert!(events[1].1["message"].as_str().unwrap().contains("same message_id"), "{events:?}");
}

#[tokio::test]
async fn a_gateway_that_closes_the_reply_without_an_outcome_is_a_503() {
    let inbox = FakeInbox::new(Script::CloseWithoutDone);
    let served = serve(settings(), Some(inbox)).await;
    for query in ["", "?mode=sse"] {
        let (status, reply) = json(served.post_signed(query, &message("m", "hi"), SECRET).await).await;
        assert_eq!((status, reply["error"].as_str()), (503, Some("unavailable")), "mode {query:?}");
    }
}

#[tokio::test]
async fn an_sse_reply_cut_short_ends_with_an_error_event() {
    let inbox = FakeInbox::new(Script::DeltasThenClose(vec!["partial".into()]));
    let served = serve(settings(), Some(inbox)).await;
    let response = served.post_signed("?mode=sse", &message("m", "hi"), SECRET).await;
    assert_eq!(response.status(), 200);
    let events = parse_events(&response.text().await.unwrap());
    assert_eq!(events.len(), 2, "{events:?}");
    assert_eq!(events[0], ("delta".to_string(), json!({"text": "partial"})));
    assert_eq!(events[1].0, "error");
    assert_eq!(events[1].1["error"], "unavailable");
}

#[tokio::test]
async fn requests_after_stop_are_503() {
    let inbox = FakeInbox::replying(&[], "ok");
    let served = serve(settings(), Some(inbox.clone())).await;
    served.channel.stop().await;
    let (status, reply) = json(served.post_signed("", &message("m", "hi"), SECRET).await).await;
    assert_eq!((status, reply["error"].as_str()), (503, Some("not_running")));
    assert!(inbox.submitted().is_empty());
}

#[tokio::test]
async fn requests_before_start_are_503() {
    let served = serve(settings(), None).await;
    let (status, reply) = json(served.post_signed("", &message("m", "hi"), SECRET).await).await;
    assert_eq!((status, reply["error"].as_str()), (503, Some("not_running")));
}
