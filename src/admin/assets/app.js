// The console's page: reads the session (the CSRF token its changes carry),
// then shows one section per hash route (#policy, #explain, #chats,
// #tape/NAME, #pairing, #live, #audit). Each view is {enter(arg), leave()}.
import { $, api, state } from "./lib.js";
import policy from "./policy.js";
import { audit, chats, explain, pairing, tape } from "./views.js";
import live from "./live.js";

const views = { policy, explain, chats, tape, pairing, live, audit };
let current = null;

/// Shows the section the hash names; `moved`: the admin went there (the
/// section's heading then takes the focus, so the keyboard starts there).
function route(moved) {
  const hash = decodeURIComponent(location.hash.slice(1));
  const [name, ...rest] = hash.split("/");
  const view = Object.hasOwn(views, name) ? name : "policy";
  if (current && current.name !== view) views[current.name].leave?.();
  for (const section of document.querySelectorAll("main > section")) section.hidden = section.dataset.view !== view;
  for (const link of document.querySelectorAll("nav a[data-view]")) {
    if (link.dataset.view === view) link.setAttribute("aria-current", "page");
    else link.removeAttribute("aria-current");
  }
  const arg = rest.join("/");
  const same = current?.name === view && current.arg === arg;
  current = { name: view, arg };
  document.body.dataset.view = view;
  if (!same) views[view].enter(arg);
  if (moved === true) document.querySelector(`#view-${view} h1`)?.focus({ preventScroll: true });
}

async function start() {
  try {
    state.session = await api("session");
  } catch (error) {
    if (error.status === 401) return location.reload();
    $("who").textContent = `the session could not be read: ${error.message}`;
    return;
  }
  const { admin, replica, version } = state.session;
  $("who").textContent = `${admin} · replica ${replica} · bub ${version}`;
  $("logout").addEventListener("click", async () => {
    await fetch("logout", { method: "POST", headers: { "X-Bub-Csrf": state.session.csrf ?? "" } });
    location.reload();
  });
  // In-page links change the hash only: under <base href> a bare "#x" would
  // otherwise resolve against the base, which may not be this page's URL.
  document.addEventListener("click", (event) => {
    const link = event.target.closest?.("a[href^='#']");
    if (!link || event.defaultPrevented || event.button !== 0 || event.ctrlKey || event.metaKey) return;
    event.preventDefault();
    if (link.id === "skip") return $("main").focus();
    location.hash = link.getAttribute("href");
  });
  window.addEventListener("hashchange", () => route(true));
  route(false);
}

start();
