//! Images that come with a run's prompt ([`PromptImages`]), shown to models
//! that take images.
//!
//! The caller (the gateway, for photos people send) puts them on the run's
//! [`TurnState`](crate::tools::TurnState). Every model call of the run then
//! turns the prompt's user message into text plus `image_url` parts with
//! `data:` URLs (the OpenAI shape requests travel in; the Anthropic client
//! makes image blocks of them) when the run's model takes images
//! ([`crate::model::ModelProvider::takes_images`]). The tape keeps only the
//! prompt's text, which names the files by path: no image data is stored,
//! and a context rebuilt by a later turn costs no image tokens.

use crate::message::RequestMessage;
use base64::Engine;
use serde_json::{Value, json};
use std::sync::Arc;

/// One image of the prompt.
#[derive(Debug, Clone, PartialEq)]
pub struct PromptImage {
    /// `image/jpeg`, `image/png`, `image/gif` or `image/webp` (what both APIs take).
    pub media_type: String,
    pub data: Arc<[u8]>,
}

/// The images of the run's prompt; a turn-state extension.
#[derive(Debug, Clone, PartialEq)]
pub struct PromptImages {
    /// The prompt's text, which identifies its user message in the context.
    pub prompt: String,
    pub images: Vec<PromptImage>,
}

/// Media types sent as images; other pictures (SVG, HEIC…) are named by path only.
pub const IMAGE_MEDIA_TYPES: [&str; 4] = ["image/jpeg", "image/png", "image/gif", "image/webp"];

impl PromptImages {
    /// Gives the prompt's user message (the last user message whose text is
    /// the prompt) its images; nothing changes when it is not in `messages`.
    pub fn attach(&self, messages: &mut [RequestMessage]) {
        if self.images.is_empty() {
            return;
        }
        let is_prompt = |m: &RequestMessage| {
            m.get("role").and_then(Value::as_str) == Some("user")
                && m.get("content").and_then(Value::as_str) == Some(self.prompt.as_str())
        };
        let Some(message) = messages.iter_mut().rev().find(|m| is_prompt(m)) else { return };
        // The prompt's entry stays text on the tape: the images go into this request's copy.
        let message = message.to_mut();
        let mut parts = vec![json!({"type": "text", "text": self.prompt})];
        for image in &self.images {
            let data = base64::engine::general_purpose::STANDARD.encode(&image.data);
            let url = format!("data:{};base64,{data}", image.media_type);
            parts.push(json!({"type": "image_url", "image_url": {"url": url}}));
        }
        message["content"] = Value::Array(parts);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_prompts_message_gets_image_parts_and_others_stay_text() {
        let images = PromptImages {
            prompt: "what is this?".into(),
            images: vec![PromptImage { media_type: "image/png".into(), data: Arc::from(&b"\x89PNG"[..]) }],
        };
        // The prompt as a request holds it: its tape entry, shared.
        let prompt = Arc::new(crate::tape::NewEntry::chat("user", "what is this?").into_entry(3));
        let mut messages: Vec<RequestMessage> = vec![
            json!({"role": "system", "content": "what is this?"}).into(),
            json!({"role": "user", "content": "earlier"}).into(),
            RequestMessage::Shared(prompt.clone()),
            json!({"role": "assistant", "content": "a tool call"}).into(),
        ];
        images.attach(&mut messages);
        assert_eq!(
            messages[2].get("content").unwrap(),
            &json!([
                {"type": "text", "text": "what is this?"},
                {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw=="}}
            ])
        );
        assert_eq!(prompt.payload["content"], "what is this?", "the entry stays text");
        assert_eq!(messages[0].get("content").unwrap(), "what is this?", "only a user message");
        assert_eq!(messages[1].get("content").unwrap(), "earlier");
    }

    #[test]
    fn an_anthropic_model_gets_the_picture_as_a_base64_image_block() {
        let images = PromptImages {
            prompt: "and this?".into(),
            images: vec![PromptImage { media_type: "image/jpeg".into(), data: Arc::from(&b"jpeg"[..]) }],
        };
        let mut messages = vec![json!({"role": "user", "content": "and this?"}).into()];
        images.attach(&mut messages);
        let request = crate::model::ChatRequest { model: "claude-sonnet-4-5".into(), messages, ..Default::default() };
        let body = crate::model::anthropic::to_messages_body(&request);
        assert_eq!(
            body["messages"][0]["content"],
            json!([
                {"type": "text", "text": "and this?"},
                {"type": "image", "source": {"type": "base64", "media_type": "image/jpeg", "data": "anBlZw=="}}
            ])
        );
    }
}
