//! The provenance rule: where the text in a conversation came from decides
//! what a run may do with it. The fact itself — [`Provenance`] and how an
//! entry carries it — is the tape's ([`crate::tape::provenance`]); the rule
//! is the policy's: while text of untrusted origin is in a turn's context,
//! tools that can run processes, write files or reach the network (`exec`,
//! `write`, `network`) are denied for that turn unless
//! `allow_with_untrusted_context` names them. A prompt injection in a stranger's message or a fetched page
//! then cannot reach a shell, a write or an exfiltrating request.
//!
//! - Every user message the gateway puts on a tape carries
//!   `meta.provenance` ([`Provenance`]): `operator`, `user` (named by the
//!   policy, paired, or a webhook's authenticated sender), `stranger` (a
//!   group member, or a sender of an open chat platform DM, nobody named),
//!   `forwarded`.
//! - A tool that reads the outside world (capability `network`) leaves an
//!   event `provenance {source}` with `meta.provenance = "outside"` the moment
//!   it is allowed: what it returns is in the context from then on.
//! - The context is untrusted when, since the last anchor, an entry carries an
//!   untrusted provenance. It is read once per turn, on the first call of such
//!   a tool or of one that moves the anchor (most turns call none), and kept
//!   on the turn state; a check that found nothing looks at the state again,
//!   so the calls of one step are judged with what the step saw.
//! - Untrusted provenance follows the text, not the anchor: once a turn is
//!   known to hold untrusted text, what it writes carries that origin
//!   ([`CarriedMeta`]) — the anchors its tools write above all, so a handoff
//!   or reset the injected text asked for does not clear it; and what brings
//!   stored text back carries the origin of that text ([`super::carried`]).
//!   Only an anchor an operator writes (`,tape.handoff`) starts trusted.
//! - Comma commands are exempt: an operator typed them, no model chose them.

use crate::agent::CarriedMeta;
use crate::agent::events::RunContext;
use crate::tape::provenance::{META_KEY, Provenance};
use crate::tape::{Entry, EntryKind, NewEntry, Tape, TapeError, TapeQuery};
use serde_json::json;

/// Why the turn's context is untrusted, once found (it never becomes trusted
/// again within a turn, so it is kept on the turn state; a trusted context is
/// read again on the next call, since steered messages may have joined).
#[derive(Debug, Clone)]
pub(crate) struct UntrustedContext(pub String);

/// Why this run's context is untrusted, if it is: the first untrusted entry
/// since the last anchor, read once per turn. An anchor counts as the text it
/// carries over: one written by a turn that held untrusted text keeps that
/// text's origin (see [`mark_untrusted`]).
pub(crate) async fn untrusted_context(run: &RunContext) -> Result<Option<String>, TapeError> {
    if let Some(known) = run.state.extension::<UntrustedContext>() {
        return Ok(Some(known.0.clone()));
    }
    match first_untrusted(&run.tape).await? {
        Some((provenance, reason)) => Ok(Some(mark_untrusted(run, provenance, reason))),
        // A call of the same step may have found untrusted text, and moved the
        // anchor, while this one read: the step saw what that call saw.
        None => Ok(run.state.extension::<UntrustedContext>().map(|known| known.0.clone())),
    }
}

/// The first untrusted entry of `tape`'s context, with how a denial names
/// it. The context's scope includes what a compaction kept, and its anchor,
/// which carries the provenance of what it summarised or closed.
pub(crate) async fn first_untrusted(tape: &Tape) -> Result<Option<(Provenance, String)>, TapeError> {
    let entries = tape.scope_entries(TapeQuery::last_anchor()).await?;
    Ok(entries.iter().find_map(|entry| {
        let provenance = Provenance::from_meta(entry.meta.get(META_KEY)?)?;
        (!provenance.is_trusted()).then(|| (provenance, describe_entry(provenance, entry)))
    }))
}

/// How a denial names the untrusted `entry`.
fn describe_entry(provenance: Provenance, entry: &Entry) -> String {
    if entry.kind == EntryKind::Anchor {
        let name = entry.name().unwrap_or("anchor");
        format!("the anchor `{name}` (entry #{}), written while the context held {}", entry.id, provenance.describe())
    } else {
        format!("{} (entry #{})", provenance.describe(), entry.id)
    }
}

/// Records on the turn state that its context holds untrusted text (the
/// first reason found is kept), and that what the run writes from now on —
/// anchors above all — carries the least trusted origin seen. Returns the
/// reason a denial gives.
pub(crate) fn mark_untrusted(run: &RunContext, provenance: Provenance, reason: String) -> String {
    let carried = run.state.extension::<CarriedMeta>();
    let carried_provenance = carried.as_ref().and_then(|c| Provenance::from_meta(c.0.get(META_KEY)?));
    if carried_provenance.is_none_or(|known| provenance > known) {
        run.state.insert_extension(CarriedMeta(provenance.meta()));
    }
    match run.state.extension::<UntrustedContext>() {
        Some(known) => known.0.clone(),
        None => {
            run.state.insert_extension(UntrustedContext(reason.clone()));
            reason
        }
    }
}

/// Untrusted text entered the context through a tool's result (`source`
/// names it: `tool:web.fetch`, `file:attachments/…`, `tape.search`): it is
/// in the context from now on (this turn, and later ones until an anchor an
/// operator writes), so an event with its provenance goes on the tape.
pub(crate) async fn untrusted_text_enters(
    run: &RunContext,
    provenance: Provenance,
    source: &str,
    reason: String,
) -> Result<(), TapeError> {
    let entry = NewEntry::event(META_KEY, json!({"source": source})).with_meta(META_KEY, json!(provenance.as_str()));
    run.tape.append(entry).await?;
    mark_untrusted(run, provenance, reason);
    Ok(())
}

/// A tool that reads the outside world was allowed: its result is untrusted
/// text in the context from now on.
pub(crate) async fn outside_text_enters(run: &RunContext, tool: &str) -> Result<(), TapeError> {
    let reason = format!("{} ({tool})", Provenance::Outside.describe());
    untrusted_text_enters(run, Provenance::Outside, &format!("tool:{tool}"), reason).await
}
