// A page of another origin (a tiny HTTP server on another port: the same
// site, so even the SameSite=Strict cookie goes along) posts forms to the
// console while alice is logged in: a config change, a logout, a login.
// Each is refused, the config file is unchanged and alice stays logged in.
// BUB_CONFIG_FILE: the gateway's config file.
import { createServer } from "node:http";
import { readFileSync } from "node:fs";
import { check, console_url, equal, login, need, newPage, scenario, step } from "./lib.mjs";

const url = console_url();
const configFile = need("BUB_CONFIG_FILE");
const escape = (text) => text.replace(/&/g, "&amp;").replace(/"/g, "&quot;").replace(/</g, "&lt;");
// text/plain forms send `name=value`: the name carries the JSON, the value closes it.
const json = JSON.stringify({ text: "[channels.evil]\nkind = \"webhook\"\n", version: "0", pad: "" });
const page = `<!doctype html><title>Win a prize</title>
<form id="apply" method="post" action="${url}/api/config/apply" enctype="text/plain">
<input type="hidden" name="${escape(json.slice(0, -2))}" value='"}'><button>Claim the prize</button></form>
<form id="logout" method="post" action="${url}/logout"><button>Claim another</button></form>
<form id="login" method="post" action="${url}/login"><input type="hidden" name="token" value="${escape(need("BUB_TOKEN"))}"><button>And another</button></form>`;
const server = createServer((_, response) => response.writeHead(200, { "content-type": "text/html" }).end(page));
await new Promise((resolve) => server.listen(0, "127.0.0.1", resolve));
const evil = `http://127.0.0.1:${server.address().port}/`;

await scenario("cross-site", async (browser) => {
  const before = readFileSync(configFile, "utf8");
  const tab = await newPage(browser);
  await login(tab);
  await step(tab, "logged-in");

  for (const [form, allowed] of [["apply", [403]], ["logout", [403]], ["login", [403]]]) {
    await tab.goto(evil);
    const [response] = await Promise.all([
      tab.waitForResponse((answer) => answer.request().method() === "POST"),
      tab.locator(`#${form} button`).click(),
    ]);
    check(allowed.includes(response.status()), `a cross-site ${form} is refused: got ${response.status()}`);
    console.log(`${form} refused with ${response.status()}`);
    await tab.waitForLoadState();
    await step(tab, `${form}-refused`);
  }
  equal(readFileSync(configFile, "utf8"), before, "the config file after the cross-site posts");

  await tab.goto(`${url}/`);
  await tab.locator("#who").filter({ hasText: "alice" }).waitFor();
  await step(tab, "still-logged-in");
  server.close();
});
