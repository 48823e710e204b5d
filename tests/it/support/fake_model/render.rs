//! Turns a scripted answer into the frames of each provider's event stream,
//! and a scripted failure into each provider's error body.

use super::reply::{Answer, Failure, FakeCall};
use serde_json::{Value, json};
use std::time::Duration;

/// One step of a streamed body.
pub enum Frame {
    Send(String),
    Wait(Duration),
    /// Abort the connection (the client sees the body end with an error).
    Cut,
}

const TEXT_PIECE: usize = 3;
const ARGUMENT_PIECE: usize = 7;

/// `text` in pieces of at most `size` characters.
fn pieces(text: &str, size: usize) -> Vec<String> {
    let chars: Vec<char> = text.chars().collect();
    chars.chunks(size).map(|c| c.iter().collect()).collect()
}

fn call_id(call: &FakeCall, position: usize) -> String {
    call.id.clone().unwrap_or_else(|| format!("call_{position}"))
}

/// The end of a cut stream: a moment for the sent frames to leave, then the abort.
fn cut_frames() -> Vec<Frame> {
    vec![Frame::Wait(Duration::from_millis(20)), Frame::Cut]
}

pub fn render_openai(model: &str, answer: &Answer, cut: bool) -> Vec<Frame> {
    let chunk = |delta: Value, finish: Value| {
        let chunk = json!({
            "id": "chatcmpl-fake",
            "object": "chat.completion.chunk",
            "created": 0,
            "model": model,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        });
        Frame::Send(format!("data: {chunk}\n\n"))
    };
    let mut frames = vec![
        Frame::Send(": fake model keep-alive\n\n".into()),
        chunk(json!({"role": "assistant", "content": ""}), Value::Null),
    ];
    for piece in pieces(&answer.reasoning, TEXT_PIECE) {
        frames.push(chunk(json!({"reasoning_content": piece}), Value::Null));
    }
    for piece in pieces(&answer.text, TEXT_PIECE) {
        frames.push(chunk(json!({"content": piece}), Value::Null));
    }
    if cut {
        frames.extend(cut_frames());
        return frames;
    }
    // First each call's id and name, then argument fragments round-robin.
    let mut fragments: Vec<Vec<String>> = Vec::new();
    for (index, call) in answer.calls.iter().enumerate() {
        let head = json!({"tool_calls": [{
            "index": index, "id": call_id(call, index), "type": "function",
            "function": {"name": call.name, "arguments": ""},
        }]});
        frames.push(chunk(head, Value::Null));
        fragments.push(pieces(&call.arguments.to_string(), ARGUMENT_PIECE));
    }
    let longest = fragments.iter().map(Vec::len).max().unwrap_or(0);
    for round in 0..longest {
        for (index, parts) in fragments.iter().enumerate() {
            if let Some(part) = parts.get(round) {
                let piece = json!({"tool_calls": [{"index": index, "function": {"arguments": part}}]});
                frames.push(chunk(piece, Value::Null));
            }
        }
    }
    let finish = answer.finish.clone().unwrap_or_else(|| match answer.calls.is_empty() {
        true => "stop".into(),
        false => "tool_calls".into(),
    });
    frames.push(chunk(json!({}), json!(finish)));
    if let Some((prompt, completion, cached)) = answer.usage {
        let mut usage = json!({
            "prompt_tokens": prompt,
            "completion_tokens": completion,
            "total_tokens": prompt + completion,
        });
        if let Some(cached) = cached {
            usage["prompt_tokens_details"] = json!({"cached_tokens": cached});
        }
        let chunk = json!({"id": "chatcmpl-fake", "object": "chat.completion.chunk",
            "model": model, "choices": [], "usage": usage});
        frames.push(Frame::Send(format!("data: {chunk}\n\n")));
    }
    frames.push(Frame::Send("data: [DONE]\n\n".into()));
    frames
}

fn event(data: Value) -> Frame {
    let name = data["type"].as_str().unwrap_or("unknown").to_string();
    Frame::Send(format!("event: {name}\ndata: {data}\n\n"))
}

pub fn render_anthropic(model: &str, answer: &Answer, cut: bool) -> Vec<Frame> {
    let (prompt, completion, cached) = answer.usage.unwrap_or((0, 0, None));
    let cached_tokens = cached.unwrap_or(0);
    let mut frames = vec![
        event(json!({"type": "message_start", "message": {
            "id": "msg_fake", "type": "message", "role": "assistant", "model": model,
            "content": [], "stop_reason": null, "stop_sequence": null,
            "usage": {"input_tokens": prompt.saturating_sub(cached_tokens),
                      "cache_read_input_tokens": cached_tokens, "output_tokens": 1},
        }})),
        event(json!({"type": "ping"})),
    ];
    let mut index = 0;
    let mut block = |frames: &mut Vec<Frame>, start: Value, deltas: Vec<Value>, stop: bool| {
        frames.push(event(json!({"type": "content_block_start", "index": index, "content_block": start})));
        for delta in deltas {
            frames.push(event(json!({"type": "content_block_delta", "index": index, "delta": delta})));
        }
        if stop {
            frames.push(event(json!({"type": "content_block_stop", "index": index})));
        }
        index += 1;
    };
    if !answer.reasoning.is_empty() {
        let mut deltas: Vec<Value> = pieces(&answer.reasoning, TEXT_PIECE)
            .into_iter()
            .map(|p| json!({"type": "thinking_delta", "thinking": p}))
            .collect();
        deltas.push(json!({"type": "signature_delta", "signature": "fake-signature"}));
        block(&mut frames, json!({"type": "thinking", "thinking": ""}), deltas, true);
    }
    if !answer.text.is_empty() {
        let deltas =
            pieces(&answer.text, TEXT_PIECE).into_iter().map(|p| json!({"type": "text_delta", "text": p})).collect();
        block(&mut frames, json!({"type": "text", "text": ""}), deltas, !cut);
    }
    if cut {
        frames.extend(cut_frames());
        return frames;
    }
    for (position, call) in answer.calls.iter().enumerate() {
        let start = json!({"type": "tool_use", "id": call_id(call, position),
            "name": call.name, "input": {}});
        let deltas = pieces(&call.arguments.to_string(), ARGUMENT_PIECE)
            .into_iter()
            .map(|p| json!({"type": "input_json_delta", "partial_json": p}))
            .collect();
        block(&mut frames, start, deltas, true);
    }
    let stop_reason = match answer.finish.as_deref() {
        Some("stop") => "end_turn",
        Some("tool_calls") => "tool_use",
        Some("length") => "max_tokens",
        Some(other) => other,
        None if answer.calls.is_empty() => "end_turn",
        None => "tool_use",
    };
    frames.push(event(json!({"type": "message_delta",
        "delta": {"stop_reason": stop_reason, "stop_sequence": null},
        "usage": {"output_tokens": completion}})));
    frames.push(event(json!({"type": "message_stop"})));
    frames
}

/// `{"error": {"message", "type", "param", "code"}}`.
pub fn openai_error(failure: &Failure) -> Value {
    let kind = match failure.status {
        429 => "requests",
        400..=499 => "invalid_request_error",
        _ => "server_error",
    };
    json!({"error": {"message": failure.message, "type": kind, "param": null, "code": failure.code}})
}

/// `{"type": "error", "error": {"type", "message"}}`; a context overflow gets
/// Anthropic's own wording.
pub fn anthropic_error(failure: &Failure) -> Value {
    let kind = match failure.status {
        400 | 413 | 422 => "invalid_request_error",
        401 => "authentication_error",
        403 => "permission_error",
        404 => "not_found_error",
        429 => "rate_limit_error",
        529 => "overloaded_error",
        _ => "api_error",
    };
    let message = match failure.code.as_deref() {
        Some("context_length_exceeded") => "prompt is too long: 9000 tokens > 8192 maximum",
        _ => failure.message.as_str(),
    };
    json!({"type": "error", "error": {"type": kind, "message": message}})
}
