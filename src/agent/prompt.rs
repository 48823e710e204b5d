//! The system prompt: an ordered list of sections rendered before every model
//! step and joined by blank lines. A section is fixed text or a function of the
//! step ([`PromptContext`]); an empty result is skipped.

use crate::tape::Tape;
use crate::tools::TurnState;
use futures::future::BoxFuture;
use parking_lot::RwLock;
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// A tool as a prompt section sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolSummary {
    pub name: String,
    pub model_name: String,
    /// Its description; only the one-line summary when it is `compact`.
    pub description: String,
    /// Offered with its name and one line only, past the tool-schema budget
    /// (see [`super::tool_budget`]): its parameters come from `tools_describe`.
    pub compact: bool,
}

/// What a section knows about the step it renders for.
#[derive(Debug, Clone)]
pub struct PromptContext {
    /// The step's new user text (empty when continuing after tool calls).
    pub prompt: String,
    /// The tools the model can call in this step.
    pub tools: Vec<ToolSummary>,
    /// `provider:model` of this step.
    pub model: String,
    pub tape: Tape,
    pub state: TurnState,
}

type SectionFn = Arc<dyn Fn(PromptContext) -> BoxFuture<'static, Option<String>> + Send + Sync>;

/// Identifies a section, for [`SystemPrompt::remove`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SectionId(u64);

/// The sections of an agent's system prompt. Cloning shares them.
#[derive(Clone, Default)]
pub struct SystemPrompt {
    sections: Arc<RwLock<Vec<(SectionId, SectionFn)>>>,
    next: Arc<AtomicU64>,
}

impl SystemPrompt {
    pub fn new() -> SystemPrompt {
        SystemPrompt::default()
    }

    fn push(&self, section: SectionFn) -> SectionId {
        let id = SectionId(self.next.fetch_add(1, Ordering::Relaxed));
        self.sections.write().push((id, section));
        id
    }

    /// Appends fixed text.
    pub fn add_text(&self, text: impl Into<String>) -> SectionId {
        let text = text.into();
        self.push(Arc::new(move |_| {
            let text = text.clone();
            Box::pin(async move { Some(text) })
        }))
    }

    /// Appends a section computed for each step.
    pub fn add<F, Fut>(&self, section: F) -> SectionId
    where
        F: Fn(PromptContext) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Option<String>> + Send + 'static,
    {
        self.push(Arc::new(move |context| Box::pin(section(context))))
    }

    pub fn remove(&self, id: SectionId) {
        self.sections.write().retain(|(s, _)| *s != id);
    }

    /// Renders every section in order; empty results are skipped.
    pub async fn render(&self, context: &PromptContext) -> String {
        let sections: Vec<SectionFn> = self.sections.read().iter().map(|(_, f)| f.clone()).collect();
        let mut parts = Vec::with_capacity(sections.len());
        for section in sections {
            if let Some(text) = section(context.clone()).await.filter(|t| !t.trim().is_empty()) {
                parts.push(text);
            }
        }
        parts.join("\n\n")
    }
}
