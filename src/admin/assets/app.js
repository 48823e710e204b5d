// The console's page: reads the session (the CSRF token its changes carry).
"use strict";

const api = async (path, options = {}) => {
  const response = await fetch(`api/${path}`, { credentials: "same-origin", ...options });
  const body = await response.json().catch(() => null);
  if (!response.ok) throw Object.assign(new Error(body?.error?.message ?? response.statusText), { status: response.status, body });
  return body;
};

let session = null;

async function start() {
  try {
    session = await api("session");
  } catch (error) {
    if (error.status === 401) return location.reload();
    throw error;
  }
  document.getElementById("who").textContent = `${session.admin} · ${session.replica}`;
  document.getElementById("logout").addEventListener("click", async () => {
    await fetch("logout", { method: "POST", headers: { "X-Bub-Csrf": session.csrf ?? "" } });
    location.reload();
  });
}

start();
