// The read-mostly views: explain, chats, a tape, pairing, the audit log.
import { $, api, busy, diffLines, failure, h, show, when } from "./lib.js";

/// Fills the channel suggestions (explain, chats) once.
let channelsLoaded = false;
async function loadChannels() {
  if (channelsLoaded) return;
  channelsLoaded = true;
  try {
    const { channels } = await api("channels");
    show("explain-channels", channels.map((channel) => h("option", { value: channel.name }, `${channel.name} (${channel.kind})`)));
  } catch {
    channelsLoaded = false;
  }
}

const verdict = (label, part) => part
  ? h("li", {}, `${label}: `, h("strong", { class: part.allowed ? "good" : "bad" }, part.allowed ? "allowed" : "denied"),
      part.rule ? ` (${part.rule})` : "")
  : "";

export const explain = {
  enter() {
    loadChannels();
    const form = $("explain-form");
    if (form.dataset.wired) return;
    form.dataset.wired = "1";
    form.addEventListener("submit", (event) => {
      event.preventDefault();
      const fields = Object.fromEntries(new FormData(form));
      busy(form.querySelector("button[type=submit]"), async () => {
        try {
          const answer = await api("explain", fields);
          show("explain-out", h("p", {}, h("code", {}, answer.tool ?? fields.tool),
            answer.capabilities?.length ? ` can ${answer.capabilities.join(", ")}` : ""),
            h("ul", { class: "verdicts" }, verdict("model call", answer.model_call), verdict("command", answer.command),
              verdict("model call with untrusted text in the context", answer.with_untrusted_context)),
            h("pre", { class: "explain" }, answer.text));
        } catch (error) {
          show("explain-out", failure(error));
        }
      });
    });
  },
};

async function listChats() {
  const channel = $("chats-channel").value.trim();
  const query = new URLSearchParams({ limit: "200" });
  if (channel) query.set("channel", channel);
  try {
    const { chats: rows } = await api(`chats?${query}`);
    if (!rows.length) return show("chats-out", h("p", { class: "hint" }, "No chats yet."));
    show("chats-out", h("table", {},
      h("thead", {}, h("tr", {}, ["Channel", "Chat", "Kind", "Title", "Last activity", "Messages", "Unfinished", "Tape"]
        .map((title) => h("th", { scope: "col" }, title)))),
      h("tbody", {}, rows.map((chat) => h("tr", {},
        h("td", {}, chat.channel), h("td", {}, h("code", {}, chat.chat_id)), h("td", {}, chat.chat_kind),
        h("td", {}, chat.title ?? ""), h("td", {}, when(chat.last_activity)), h("td", { class: "number" }, chat.messages),
        h("td", { class: "number" }, chat.unfinished),
        h("td", {}, chat.tape ? h("a", { href: `#tape/${encodeURIComponent(chat.tape)}` }, chat.tape) : ""))))));
  } catch (error) {
    show("chats-out", failure(error));
  }
}

export const chats = {
  enter() {
    loadChannels();
    const form = $("chats-form");
    if (!form.dataset.wired) {
      form.dataset.wired = "1";
      form.addEventListener("submit", (event) => {
        event.preventDefault();
        listChats();
      });
    }
    listChats();
  },
};

// A tape: newest page first, Older/Newer, anchors to jump to, search, export.
const PAGE = 50;
const tapeState = { name: "", page: null, search: "" };

function entryRow(entry, highlight) {
  return h("tr", { id: `entry-${entry.id}`, class: highlight === entry.id ? "highlight" : "" },
    h("td", { class: "number" }, entry.id), h("td", {}, entry.kind), h("td", {}, when(entry.date)),
    h("td", {}, entry.name ?? ""),
    h("td", {}, h("details", {}, h("summary", {}, entry.summary || "(no summary)"),
      h("pre", {}, JSON.stringify(entry.payload, null, 2)))));
}

async function tapePage(before, highlight) {
  const { name, search } = tapeState;
  const query = new URLSearchParams({ limit: String(PAGE) });
  if (before) query.set("before", String(before));
  if (search) query.set("q", search);
  const path = `tapes/${encodeURIComponent(name)}${search ? "/search" : ""}?${query}`;
  try {
    const page = await api(path);
    tapeState.page = page;
    const entries = [...page.entries].sort((a, b) => a.id - b.id);
    show("tape-info", search ? `Entries matching “${search}” · ` : "",
      `${page.total} entries`, entries.length ? ` · showing ${page.first_id}–${page.last_id}` : "");
    $("tape-older").disabled = !page.has_older;
    $("tape-newer").disabled = !page.has_newer;
    show("tape-out", entries.length
      ? h("table", { class: "tape" },
          h("thead", {}, h("tr", {}, ["Id", "Kind", "Date", "Name", "Summary"].map((title) => h("th", { scope: "col" }, title)))),
          h("tbody", {}, entries.map((entry) => entryRow(entry, highlight))))
      : h("p", { class: "hint" }, search ? "Nothing matches." : "The tape is empty."));
    if (highlight) document.getElementById(`entry-${highlight}`)?.scrollIntoView({ block: "center" });
  } catch (error) {
    $("tape-older").disabled = $("tape-newer").disabled = true;
    show("tape-out", failure(error));
  }
}

async function tapeAnchors() {
  const list = $("tape-anchors").querySelector("ul");
  try {
    const { anchors } = await api(`tapes/${encodeURIComponent(tapeState.name)}/anchors`);
    show(list, anchors.length ? anchors.map((anchor) => h("li", {},
      h("button", { type: "button", class: "link", title: anchor.summary ?? "",
        onclick: () => { tapeState.search = ""; tapePage(anchor.id + PAGE, anchor.id); } },
        anchor.name, h("span", { class: "hint" }, ` #${anchor.id} · ${when(anchor.date)}`))))
      : h("li", { class: "hint" }, "No anchors."));
  } catch (error) {
    show(list, h("li", {}, failure(error)));
  }
}

function wireTape() {
  $("tape-newest").addEventListener("click", (event) => busy(event.currentTarget, () => tapePage()));
  $("tape-older").addEventListener("click", (event) =>
    busy(event.currentTarget, () => tapePage(tapeState.page?.first_id)));
  // Ids are consecutive: the next page up ends PAGE entries after this one.
  $("tape-newer").addEventListener("click", (event) =>
    busy(event.currentTarget, () => tapePage(tapeState.page ? tapeState.page.last_id + 1 + PAGE : undefined)));
  $("tape-search").addEventListener("submit", (event) => {
    event.preventDefault();
    tapeState.search = $("tape-q").value.trim();
    tapePage();
  });
}

export const tape = {
  enter(name) {
    if (!$("tape-search").dataset.wired) {
      $("tape-search").dataset.wired = "1";
      wireTape();
    }
    Object.assign(tapeState, { name, page: null, search: "" });
    $("tape-q").value = "";
    show("tape-title", "Tape ", h("code", {}, name));
    $("tape-export").href = `api/tapes/${encodeURIComponent(name)}/export`;
    $("tape-export").setAttribute("download", `${name}.jsonl`);
    show("tape-out", h("p", { class: "hint" }, "Loading…"));
    tapePage();
    tapeAnchors();
  },
};

// Pairing requests: approve (with the code the user was given) or refuse.
async function listPairing() {
  try {
    const { requests } = await api("pairing");
    if (!requests.length) return show("pairing-out", h("p", { class: "hint" }, "No pairing requests."));
    show("pairing-out", h("table", {},
      h("thead", {}, h("tr", {}, ["Channel", "Who", "State", "Requested", "Decided", ""].map((title) => h("th", { scope: "col" }, title)))),
      h("tbody", {}, requests.map(pairingRow))));
  } catch (error) {
    show("pairing-out", failure(error));
  }
}

function pairingRow(request) {
  const who = request.display ? `${request.display} (${request.id})` : request.id;
  const decided = request.approved_at ? `${when(request.approved_at)} by ${request.approved_by ?? "?"}` : "";
  const refuse = (label) => h("button", { type: "button", class: "quiet", onclick: (event) => decide(event.currentTarget,
    "refuse", { channel: request.channel, id: request.id }, who) }, label);
  let actions = refuse("Revoke");
  if (request.state === "pending") {
    const code = h("input", { "aria-label": `Pairing code of ${who}`, size: 10, value: request.code ?? "", class: "code" });
    actions = h("div", { class: "inline" }, code,
      h("button", { type: "button", onclick: (event) => decide(event.currentTarget, "approve",
        { channel: request.channel, code: code.value.trim() }, who) }, "Approve"),
      refuse("Refuse"));
  }
  return h("tr", { "data-id": request.id },
    h("td", {}, request.channel), h("td", {}, who, h("span", { class: "hint" }, ` ${request.subject}`)), h("td", {}, request.state),
    h("td", {}, when(request.requested_at), request.requested_by ? ` by ${request.requested_by}` : ""),
    h("td", {}, decided), h("td", {}, actions));
}

function decide(button, action, body, who) {
  return busy(button, async () => {
    try {
      await api(`pairing/${action}`, body);
      show("pairing-status", h("p", { class: "good" }, `${action === "approve" ? "Approved" : "Refused or revoked"}: ${who}.`));
      await listPairing();
    } catch (error) {
      show("pairing-status", failure(error));
    }
  });
}

export const pairing = { enter: listPairing };

// The audit log: every applied change, newest first, in pages.
let auditBefore = null;
async function listAudit(more) {
  const query = new URLSearchParams({ limit: "50" });
  if (more && auditBefore) query.set("before", String(auditBefore));
  try {
    const { entries } = await api(`audit?${query}`);
    const rows = entries.map((entry) => h("li", { class: "audit" },
      h("p", {}, h("strong", {}, `#${entry.seq} ${entry.action}`), entry.target ? ` ${entry.target}` : "",
        ` by ${entry.admin} · ${when(entry.at)} · `,
        h("span", { class: entry.outcome === "rejected" ? "bad" : entry.outcome === "applied" ? "good" : "warn" }, entry.outcome),
        entry.detail ? `: ${entry.detail}` : "",
        entry.version_before || entry.version_after ? ` · version ${entry.version_before ?? "—"} → ${entry.version_after ?? "—"}` : ""),
      entry.diff ? h("details", {}, h("summary", {}, "Diff"), h("pre", { class: "diff" }, diffLines(entry.diff))) : ""));
    auditBefore = entries.length ? entries[entries.length - 1].seq : auditBefore;
    $("audit-older").hidden = entries.length < 50;
    if (more) $("audit-out").querySelector("ol")?.append(...rows);
    else show("audit-out", rows.length ? h("ol", { class: "plain" }, rows) : h("p", { class: "hint" }, "No changes yet."));
  } catch (error) {
    $("audit-older").hidden = true;
    show("audit-out", failure(error));
  }
}

export const audit = {
  enter() {
    const older = $("audit-older");
    if (!older.dataset.wired) {
      older.dataset.wired = "1";
      older.addEventListener("click", (event) => busy(event.currentTarget, () => listAudit(true)));
    }
    auditBefore = null;
    listAudit(false);
  },
};
