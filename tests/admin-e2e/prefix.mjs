// The console behind a reverse proxy under /bub (a small proxy here that
// forwards /bub/* to the gateway, stripping the prefix; the gateway has
// [admin] base_path = "/bub"): log in, every section, log out, and every
// request the browser made went under the prefix.
// BUB_GATEWAY: the gateway's own URL (http://127.0.0.1:PORT).
import { createServer, request } from "node:http";
import { check, equal, login, need, newPage, scenario, step } from "./lib.mjs";

const gateway = new URL(need("BUB_GATEWAY"));
const seen = [];
const proxy = createServer((incoming, outgoing) => {
  seen.push(incoming.url);
  if (!incoming.url.startsWith("/bub/")) return outgoing.writeHead(404).end("not under /bub");
  const forwarded = request({
    host: gateway.hostname, port: gateway.port, method: incoming.method, path: incoming.url.slice("/bub".length),
    headers: { ...incoming.headers, "x-forwarded-host": incoming.headers.host, "x-forwarded-prefix": "/bub" },
  }, (answer) => {
    outgoing.writeHead(answer.statusCode, answer.headers);
    answer.pipe(outgoing);
  });
  forwarded.on("error", (error) => outgoing.writeHead(502).end(String(error)));
  incoming.pipe(forwarded);
});
await new Promise((resolve) => proxy.listen(0, "127.0.0.1", resolve));
const url = `http://127.0.0.1:${proxy.address().port}/bub/admin`;

await scenario("prefix", async (browser) => {
  const page = await newPage(browser);
  await login(page, need("BUB_TOKEN"), url);
  equal(await page.locator("base").getAttribute("href"), "/bub/admin/", "the page's base");
  const cookie = (await page.context().cookies()).find((each) => each.name === "bub_admin");
  equal(cookie?.path, "/bub/admin", "the cookie's path");
  await step(page, "console");
  for (const name of ["policy", "chats", "live", "audit"]) {
    await page.getByRole("navigation", { name: "Sections" }).getByRole("link", { name }).click();
    await page.locator(`#view-${name}`).waitFor({ state: "visible" });
    equal(new URL(page.url()).pathname, "/bub/admin/", `the page stays at the prefixed path (${name})`);
    await page.waitForLoadState("networkidle").catch(() => {});
    await step(page, name);
  }
  await Promise.all([page.waitForEvent("load"), page.getByRole("button", { name: "Log out" }).click()]);
  await page.getByLabel("Admin token").waitFor();
  await step(page, "logged-out");
  const outside = seen.filter((path) => !path.startsWith("/bub/admin"));
  check(outside.length === 0, `every request stays under /bub/admin: ${outside.join(", ")}`);
  check(seen.includes("/bub/admin/api/session") && seen.includes("/bub/admin/assets/app.js"), `seen: ${seen.join(", ")}`);
  proxy.close();
});
