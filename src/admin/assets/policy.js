// The policy editor: the config file as text, checked, previewed (diff and
// who gains or loses what) and applied against the version the edit
// started from. The textarea is never disabled nor overwritten without the
// admin choosing to: a conflict or a failed save leaves the text as it is.
import { $, api, busy, describe, diffLines, h, show } from "./lib.js";

const text = () => $("policy-text");
let loaded = false;
/// The on-disk version the text in the editor started from.
let baseVersion = null;
/// Their version and text after a 409, until the admin chooses.
let theirs = null;
/// Whether the text differs from what was loaded or last applied.
let dirty = false;

function status(message, kind = "") {
  const element = show("policy-status", message);
  element.className = kind;
}

// The line numbers beside the text, kept in step with its lines and scroll.
let gutterLines = 0;
function syncGutter() {
  const lines = text().value.split("\n").length;
  if (lines !== gutterLines) {
    gutterLines = lines;
    $("policy-gutter").textContent = Array.from({ length: lines }, (_, i) => i + 1).join("\n");
  }
  $("policy-gutter").scrollTop = text().scrollTop;
}

/// Puts the caret at a 1-based line and column (in characters) and brings it into view.
export function moveCaret(line, column = 1) {
  const area = text();
  const lines = area.value.split("\n");
  const row = Math.min(Math.max(line, 1), lines.length) - 1;
  let offset = 0;
  for (let i = 0; i < row; i += 1) offset += lines[i].length + 1;
  // Columns count characters; JavaScript strings count UTF-16 units.
  offset += Array.from(lines[row]).slice(0, Math.max(column - 1, 0)).join("").length;
  area.focus();
  area.setSelectionRange(offset, offset);
  const lineHeight = parseFloat(getComputedStyle(area).lineHeight) || 20;
  area.scrollTop = Math.max(0, row * lineHeight - area.clientHeight / 3);
  syncGutter();
}

const where = (error) =>
  error.line ? `${error.line}:${error.column ?? 1}` : "";

function showErrors(errors) {
  $("policy-errors-box").hidden = !errors?.length;
  show("policy-errors", (errors ?? []).map((error) => h("li", {},
    error.line
      ? h("button", { type: "button", class: "link", "data-line": error.line, "data-column": error.column ?? 1,
          onclick: () => moveCaret(error.line, error.column ?? 1) }, h("code", {}, where(error)), " ", error.message)
      : error.message)));
}

function showWarnings(warnings) {
  $("policy-warnings-box").hidden = !warnings?.length;
  show("policy-warnings", (warnings ?? []).map((warning) => h("li", {}, warning)));
}

function clearResults() {
  showErrors([]);
  showWarnings([]);
  $("policy-preview-box").hidden = true;
}

function showBroken(error) {
  $("policy-broken").hidden = !error;
  if (!error) return;
  show("policy-broken",
    h("strong", {}, "The config file on disk is broken"), error.line ? ` (line ${where(error)})` : "", `: ${error.message}. `,
    "The gateway still runs the last good config. The editor holds the file on disk: repair it, Check, then Apply.");
}

function showRestart(needsRestart) {
  $("policy-restart").hidden = !needsRestart?.length;
  show("policy-restart", "Applied, but these need a restart of the gateway to take effect: ", (needsRestart ?? []).join(", "));
}

// A check's, a preview's or a refused apply's problems (a config is checked until its first error).
const problems = (answer) => answer?.problems ?? [];

let path = "";
function showFile(running) {
  show("policy-file", `${path} · on disk: version ${baseVersion}`, running ? ` · running: version ${running}` : "");
}

/// Loads the file on disk into the editor (the admin asked, or nothing is there yet).
async function load() {
  status("Loading…");
  try {
    // The file on disk: its text, version and problem (then the last good config still runs).
    const config = await api("config");
    text().value = config.text;
    baseVersion = config.version;
    dirty = false;
    theirs = null;
    $("policy-conflict").hidden = true;
    path = config.path;
    showFile(config.running !== config.version ? config.running : null);
    showBroken(config.problem);
    showRestart([]);
    clearResults();
    if (config.problem) showErrors([config.problem]);
    loaded = true;
    status("");
  } catch (error) {
    status(describe(error), "error");
  }
  syncGutter();
}

async function check() {
  try {
    const answer = await api("config/check", { text: text().value });
    clearResults();
    showErrors(problems(answer));
    showWarnings(answer.warnings);
    status(answer.ok ? "No errors." : `${problems(answer).length} error(s).`, answer.ok ? "good" : "error");
  } catch (error) {
    status(describe(error), "error");
  }
}

/// Whom a change affects, in words.
function subjectLabel(subject) {
  if (subject.kind === "chat") return `chat ${subject.chat} on ${subject.channel}`;
  if (subject.kind === "channel") return `channel ${subject.channel} (its other chats)`;
  if (subject.kind === "user") return `user ${subject.user}`;
  return JSON.stringify(subject);
}

function showChanges(changes) {
  $("policy-no-changes").hidden = changes.length > 0;
  $("policy-changes").hidden = changes.length === 0;
  const list = (items) => items.length ? h("ul", {}, items.map((item) => h("li", {}, item))) : "—";
  show($("policy-changes").tBodies[0], changes.map((change) => h("tr", { class: change.widens ? "widens" : "" },
    h("th", { scope: "row" }, subjectLabel(change.subject),
      change.widens ? h("span", { class: "badge bad", title: "this change widens access" }, "widens") : ""),
    h("td", { class: "gains" }, list(change.gains ?? [])),
    h("td", { class: "loses" }, list(change.loses ?? [])),
    h("td", { class: "other" }, list(change.other ?? [])))));
}

async function preview() {
  try {
    const answer = await api("config/preview", { text: text().value });
    clearResults();
    showErrors(problems(answer));
    showWarnings(answer.warnings);
    if (!answer.ok) return status(`${problems(answer).length} error(s): nothing to preview.`, "error");
    showChanges(answer.changes ?? []);
    show("policy-diff", answer.diff ? diffLines(answer.diff) : "No difference from the running config.");
    $("policy-preview-box").hidden = false;
    const widening = (answer.changes ?? []).filter((change) => change.widens).length;
    status(widening ? `${widening} subject(s) gain access.` : "Preview ready.", widening ? "warn" : "good");
  } catch (error) {
    status(describe(error), "error");
  }
}

async function apply() {
  const sent = text().value;
  status("Applying…");
  try {
    const answer = await api("config/apply", { text: sent, version: baseVersion });
    baseVersion = answer.version;
    dirty = text().value !== sent;
    showFile(null);
    clearResults();
    showBroken(null);
    showRestart(answer.needs_restart);
    if (answer.applied) status(`Applied: now version ${answer.version}.`, "good");
    else status(`Written (version ${answer.version}) but not applied: ${answer.error ?? "see the gateway's log"}.`, "error");
  } catch (error) {
    if (error.status === 409 && error.detail) return conflict(error.detail);
    if (error.status === 422 && problems(error.detail).length) {
      clearResults();
      showErrors(problems(error.detail));
      return status(`Not applied: ${problems(error.detail).length} error(s). Nothing was written.`, "error");
    }
    status(`Not applied: ${describe(error)}`, "error");
  }
}

function conflict(detail) {
  theirs = detail;
  show("policy-theirs", h("details", {}, h("summary", {}, `Their text (version ${detail.version})`),
    h("pre", { class: "theirs" }, detail.text ?? "")));
  $("policy-conflict").hidden = false;
  status("Not applied: changed by someone else meanwhile.", "error");
  $("policy-load-theirs").focus();
}

function chooseTheirs() {
  text().value = theirs.text;
  baseVersion = theirs.version;
  theirs = null;
  dirty = false;
  $("policy-conflict").hidden = true;
  clearResults();
  syncGutter();
  status(`Loaded their version ${baseVersion}.`);
}

function keepMine() {
  baseVersion = theirs.version;
  theirs = null;
  $("policy-conflict").hidden = true;
  status("Kept your text: Apply now replaces their version.", "warn");
}

let wired = false;
function wire() {
  wired = true;
  const area = text();
  area.addEventListener("input", () => {
    dirty = true;
    syncGutter();
  });
  area.addEventListener("scroll", syncGutter);
  $("policy-check").addEventListener("click", (event) => busy(event.currentTarget, check));
  $("policy-preview").addEventListener("click", (event) => busy(event.currentTarget, preview));
  $("policy-apply").addEventListener("click", (event) => busy(event.currentTarget, apply));
  $("policy-reload").addEventListener("click", (event) => {
    if (dirty && !window.confirm("Drop your edit and load the file on disk?")) return;
    busy(event.currentTarget, load);
  });
  // Leaving the page with an edit not applied asks first.
  window.addEventListener("beforeunload", (event) => {
    if (dirty) event.preventDefault();
  });
  $("policy-load-theirs").addEventListener("click", chooseTheirs);
  $("policy-keep-mine").addEventListener("click", keepMine);
}

export default {
  enter() {
    if (!wired) wire();
    if (!loaded && !dirty) load();
    syncGutter();
  },
};
