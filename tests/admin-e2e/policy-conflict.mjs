// Two admins edit at once: alice applies first; bob's apply is told of
// the conflict, his text kept until he chooses to load hers. Then the file
// on disk is broken behind the console's back (BUB_CONFIG_FILE): the
// editor says so, holds the broken text, and a repair applies.
import { readFileSync, writeFileSync } from "node:fs";
import { check, equal, login, need, newPage, scenario, step } from "./lib.mjs";

const configFile = need("BUB_CONFIG_FILE");

async function editor(browser, token) {
  const page = await newPage(browser);
  await login(page, token);
  await page.goto(new URL("#policy", page.url()).href);
  await page.waitForFunction(() => document.getElementById("policy-text").value.includes("[channels.webhook]"));
  return page;
}

await scenario("policy-conflict", async (browser) => {
  const alice = await editor(browser, need("BUB_TOKEN"));
  const bob = await editor(browser, need("BUB_TOKEN_2"));
  const original = await alice.getByLabel("Config file").inputValue();

  await alice.getByLabel("Config file").fill(`${original}# alice was here\n`);
  await bob.getByLabel("Config file").fill(`${original}# bob too\n`);
  await alice.getByRole("button", { name: "Apply", exact: true }).click();
  await alice.locator("#policy-status.good").filter({ hasText: "Applied" }).waitFor();
  await step(alice, "alice-applied");

  await bob.getByRole("button", { name: "Apply", exact: true }).click();
  const banner = bob.locator("#policy-conflict");
  await banner.waitFor({ state: "visible" });
  check((await banner.textContent()).includes("changed by someone else meanwhile"), "the conflict is named");
  equal(await bob.getByLabel("Config file").inputValue(), `${original}# bob too\n`, "bob's text is kept");
  equal(await bob.getByRole("button", { name: "Apply", exact: true }).isDisabled(), false, "bob may try again");
  await step(bob, "bob-conflict");
  equal(readFileSync(configFile, "utf8"), `${original}# alice was here\n`, "the file after bob's refused apply");
  await bob.getByRole("button", { name: /Load theirs/ }).click();
  equal(await bob.getByLabel("Config file").inputValue(), `${original}# alice was here\n`, "bob loaded alice's text");
  await banner.waitFor({ state: "hidden" });
  await bob.getByLabel("Config file").fill(`${original}# alice was here\n# and bob\n`);
  await bob.getByRole("button", { name: "Apply", exact: true }).click();
  await bob.locator("#policy-status.good").filter({ hasText: "Applied" }).waitFor();
  await step(bob, "bob-applied-over-hers");
  console.log("conflict resolved");

  // Broken on disk: a half-saved edit.
  const good = readFileSync(configFile, "utf8");
  writeFileSync(configFile, `${good}[channels.webhook.policy\n`);
  await alice.reload();
  const broken = alice.locator("#policy-broken");
  await broken.waitFor({ state: "visible" });
  check(/broken/.test(await broken.textContent()), `the banner: ${await broken.textContent()}`);
  equal(await alice.getByLabel("Config file").inputValue(), `${good}[channels.webhook.policy\n`, "the editor holds the on-disk text");
  await alice.locator("#policy-errors li").first().waitFor();
  await step(alice, "broken-on-disk");
  await alice.getByLabel("Config file").fill(`${good}[channels.webhook.policy]\ndenied_tools = ["web.fetch"]\n`);
  await alice.getByRole("button", { name: "Apply", exact: true }).click();
  await alice.locator("#policy-status.good").filter({ hasText: "Applied" }).waitFor();
  await broken.waitFor({ state: "hidden" });
  await step(alice, "repaired");
  equal(readFileSync(configFile, "utf8"), `${good}[channels.webhook.policy]\ndenied_tools = ["web.fetch"]\n`, "the repaired file");
  console.log("repaired");
});
