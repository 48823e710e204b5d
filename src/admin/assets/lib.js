// What every view uses: the API client, element building, error display.
// Relative URLs throughout: the page's <base href> is the console's path
// (`/admin/`, `/bub/admin/` behind a proxy).

export const state = { session: null };

/// An API error: the status and the API's `{error: {kind, message, detail}}`.
export class ApiError extends Error {
  constructor(status, body, fallback) {
    super(body?.error?.message ?? fallback);
    this.status = status;
    this.kind = body?.error?.kind ?? "";
    this.detail = body?.error?.detail;
  }
}

/// Calls `api/PATH`: a GET, or with `body` a POST of JSON carrying the CSRF
/// header. The answer's JSON, or an ApiError (a network failure too, status 0).
export async function api(path, body) {
  const options = { credentials: "same-origin", headers: { Accept: "application/json" } };
  if (body !== undefined) {
    options.method = "POST";
    options.headers["Content-Type"] = "application/json";
    options.headers["X-Bub-Csrf"] = state.session?.csrf ?? "";
    options.body = JSON.stringify(body);
  }
  let response;
  try {
    response = await fetch(`api/${path}`, options);
  } catch (error) {
    throw new ApiError(0, null, `the gateway did not answer (${error.message})`);
  }
  const answer = await response.json().catch(() => null);
  if (!response.ok) throw new ApiError(response.status, answer, response.statusText || "failed");
  return answer;
}

/// `h("p", {class: "x", onclick: f}, "text", child)`: an element. Text is
/// always text (never parsed as HTML).
export function h(tag, attributes = {}, ...children) {
  const element = document.createElement(tag);
  for (const [name, value] of Object.entries(attributes ?? {})) {
    if (value === undefined || value === null || value === false) continue;
    if (name.startsWith("on")) element.addEventListener(name.slice(2), value);
    else if (name === "class") element.className = value;
    else element.setAttribute(name, value === true ? "" : String(value));
  }
  append(element, children);
  return element;
}

function append(element, children) {
  for (const child of children.flat()) {
    if (child === undefined || child === null || child === false) continue;
    element.append(child instanceof Node ? child : String(child));
  }
}

/// Replaces the content of `element` (or the element with that id).
export function show(element, ...children) {
  const target = typeof element === "string" ? document.getElementById(element) : element;
  target.replaceChildren();
  append(target, children);
  return target;
}

export const $ = (id) => document.getElementById(id);

/// What a failed call says to the admin: "not available: 404" for an
/// endpoint this gateway lacks, the API's message otherwise.
export function describe(error) {
  if (!(error instanceof ApiError)) return `failed: ${error.message}`;
  if (error.status === 0) return error.message;
  if (error.status === 404 && error.kind === "not_found" && /no such API route/.test(error.message)) {
    return `not available: 404 (this gateway has no such API yet)`;
  }
  if (error.status === 401) return `not logged in: 401 (${error.message}); reload the page to log in again`;
  return `${error.status === 404 ? "not available" : "failed"}: ${error.status} ${error.message}`;
}

export const failure = (error) => h("p", { class: "error", role: "alert" }, describe(error));

/// A time the API gave (RFC 3339 text or milliseconds) as local text.
export function when(value) {
  if (value === undefined || value === null || value === "") return "";
  const date = typeof value === "number" ? new Date(value) : new Date(String(value));
  return Number.isNaN(date.getTime()) ? String(value) : date.toLocaleString();
}

/// Runs `work` with `button` disabled (the rest of the page stays usable).
export async function busy(button, work) {
  button.disabled = true;
  button.setAttribute("aria-busy", "true");
  try {
    return await work();
  } finally {
    button.disabled = false;
    button.removeAttribute("aria-busy");
  }
}

/// A unified diff as lines coloured by their first character.
export function diffLines(text) {
  return (text ?? "").split("\n").map((line) => {
    const kind = line.startsWith("+++") || line.startsWith("---") ? "file"
      : line.startsWith("@@") ? "hunk"
      : line.startsWith("+") ? "add"
      : line.startsWith("-") ? "del" : "same";
    return h("span", { class: `line ${kind}` }, line, "\n");
  });
}
