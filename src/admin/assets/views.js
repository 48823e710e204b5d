// The read-mostly views: explain, chats, a tape, pairing, the audit log.
import { $, api, busy, diffLines, failure, h, show, when } from "./lib.js";

/// The channels (suggested in the explain and chats forms, listed with their policies in Chats), read once.
let channels = null;
async function loadChannels() {
  if (channels) return channels;
  try {
    channels = await api("channels");
    show("explain-channels", channels.channels.map((channel) => h("option", { value: channel.name }, `${channel.name} (${channel.kind})`)));
    return channels;
  } catch (error) {
    return { error };
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
      h("thead", {}, h("tr", {}, ["Channel", "Chat", "Kind", "Last activity", "Messages", "State", "Tape"]
        .map((title) => h("th", { scope: "col" }, title)))),
      h("tbody", {}, rows.map(chatRow))));
  } catch (error) {
    show("chats-out", failure(error));
  }
}

function chatRow(chat) {
  const name = [chat.title, chat.thread ? `thread ${chat.thread}` : ""].filter(Boolean).join(" · ");
  const policy = h("details", { class: "policy" }, h("summary", {}, "policy"));
  policy.addEventListener("toggle", async () => {
    if (!policy.open || policy.dataset.loaded) return;
    policy.dataset.loaded = "1";
    try {
      const query = new URLSearchParams({ channel: chat.channel, chat: chat.chat_id });
      policy.append(h("pre", {}, (await api(`chats/policy?${query}`)).policy));
    } catch (error) {
      policy.append(failure(error));
    }
  }, { once: false });
  return h("tr", {},
    h("td", {}, chat.channel),
    h("td", {}, h("code", {}, chat.chat_id), name ? h("div", { class: "hint" }, name) : "", policy),
    h("td", {}, chat.chat_kind),
    h("td", {}, when(chat.last_activity), chat.last_sender ? h("div", { class: "hint" }, `from ${chat.last_sender}`) : ""),
    h("td", { class: "number" }, chat.messages),
    h("td", {}, chat.state ?? (chat.unfinished ? "busy" : "idle"), chat.unfinished ? ` (${chat.unfinished} unfinished)` : ""),
    h("td", {}, h("a", { href: `#tape/${encodeURIComponent(chat.tape)}`, "aria-label": `Open the tape of ${chat.chat_id}` }, "open")));
}

async function listChannels() {
  const known = await loadChannels();
  if (known.error) return show("channels-out", failure(known.error));
  show("channels-out", known.channels.map((channel) => h("details", { class: "channel" },
    h("summary", {}, h("strong", {}, channel.name), ` (${channel.kind}) · ${channel.chats.length} chat(s) configured`),
    h("pre", {}, channel.policy),
    channel.chats.map((chat) => h("details", {}, h("summary", {}, "chat ", h("code", {}, chat.chat_id)), h("pre", {}, chat.policy))))),
  known.warnings?.length ? h("ul", { class: "warn" }, known.warnings.map((warning) => h("li", {}, warning))) : "");
}

export const chats = {
  enter() {
    const form = $("chats-form");
    if (!form.dataset.wired) {
      form.dataset.wired = "1";
      form.addEventListener("submit", (event) => {
        event.preventDefault();
        listChats();
      });
    }
    listChannels();
    listChats();
  },
};

// A tape: newest page first, Older/Newer, anchors to jump to, search, export.
// The tape is named in the query (`name=`): tape names hold `:` and `/`.
const PAGE = 50;
const tapeState = { name: "", page: null };
const tapeQuery = (extra = {}) => {
  const query = new URLSearchParams({ name: tapeState.name });
  for (const [key, value] of Object.entries(extra)) if (value !== undefined && value !== null) query.set(key, String(value));
  return query;
};

function entryRow(entry, highlight) {
  return h("tr", { id: `entry-${entry.id}`, class: highlight === entry.id ? "highlight" : "" },
    h("td", { class: "number" }, entry.id), h("td", {}, entry.kind), h("td", {}, when(entry.date)),
    h("td", {}, entry.name ?? ""),
    h("td", {}, h("details", {}, h("summary", {}, entry.summary || "(no summary)"),
      h("pre", {}, JSON.stringify(entry.payload, null, 2)))));
}

function entryTable(entries, highlight) {
  return h("table", { class: "tape" },
    h("thead", {}, h("tr", {}, ["Id", "Kind", "Date", "Name", "Summary"].map((title) => h("th", { scope: "col" }, title)))),
    h("tbody", {}, entries.map((entry) => entryRow(entry, highlight))));
}

async function tapePage(before, highlight) {
  try {
    const page = await api(`tape?${tapeQuery({ before, limit: PAGE })}`);
    tapeState.page = page;
    const entries = [...page.entries].sort((a, b) => a.id - b.id);
    show("tape-info", `${page.total} entries`, entries.length ? ` · showing ${page.first_id}–${page.last_id}` : "");
    $("tape-older").disabled = !page.has_older;
    $("tape-newer").disabled = !page.has_newer;
    show("tape-out", entries.length ? entryTable(entries, highlight) : h("p", { class: "hint" }, "The tape is empty."));
    if (highlight) document.getElementById(`entry-${highlight}`)?.scrollIntoView({ block: "center" });
  } catch (error) {
    $("tape-older").disabled = $("tape-newer").disabled = true;
    show("tape-out", failure(error));
  }
}

/// Hits of `q`, newest first, a window of the tape per call; `more` goes on further back.
async function tapeSearch(q, before, more) {
  try {
    const found = await api(`tape/search?${tapeQuery({ q, before })}`);
    const hits = [...found.hits];
    const table = more ? $("tape-out").querySelector("tbody") : null;
    if (table) table.append(...hits.map((entry) => entryRow(entry)));
    else show("tape-out", hits.length ? entryTable(hits) : h("p", { class: "hint" }, "No match yet."));
    const searched = found.searched_to ? ` (searched back to entry ${found.searched_from})` : "";
    show("tape-info", `Entries matching “${q}”`, searched);
    if (found.next_before) {
      $("tape-out").append(h("button", { type: "button", class: "more", onclick: (event) => {
        event.currentTarget.remove();
        tapeSearch(q, found.next_before, Boolean($("tape-out").querySelector("tbody")));
      } }, "Search further back"));
    }
    $("tape-older").disabled = $("tape-newer").disabled = true;
  } catch (error) {
    show("tape-out", failure(error));
  }
}

async function tapeAnchors(before) {
  const list = $("tape-anchors").querySelector("ul");
  try {
    const { anchors, next_before: next } = await api(`tape/anchors?${tapeQuery({ before })}`);
    const items = anchors.map((anchor) => h("li", {},
      h("button", { type: "button", class: "link", title: anchor.summary ?? "",
        onclick: () => tapePage(anchor.id + PAGE, anchor.id) },
        anchor.name, h("span", { class: "hint" }, ` #${anchor.id} · ${when(anchor.date)}`,
          anchor.compaction ? " · compaction" : ""))));
    if (!before) show(list, items.length ? items : h("li", { class: "hint" }, "No anchors."));
    else list.append(...items);
    if (next) list.append(h("li", {}, h("button", { type: "button", class: "quiet", onclick: (event) => {
      event.currentTarget.closest("li").remove();
      tapeAnchors(next);
    } }, "Older anchors")));
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
    const q = $("tape-q").value.trim();
    if (q) tapeSearch(q);
    else tapePage();
  });
}

export const tape = {
  enter(name) {
    if (!$("tape-search").dataset.wired) {
      $("tape-search").dataset.wired = "1";
      wireTape();
    }
    Object.assign(tapeState, { name, page: null });
    $("tape-q").value = "";
    show("tape-title", "Tape ", h("code", {}, name));
    $("tape-export").href = `api/tape/export?${tapeQuery()}`;
    $("tape-export").setAttribute("download", `${name.replace(/[^\w.-]+/g, "_")}.jsonl`);
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
