// The policy editor: a line with an error is reported at its line and a
// click on the error puts the caret there; a preview of a widening shows
// the diff and who gains what; an apply that denies `tape.info` in the
// webhook channel (tests/it/admin_browser.rs then sees a chat obey it).
import { check, equal, login, newPage, scenario, step } from "./lib.mjs";

const WIDENING = `\n[channels.webhook.chats."room".policy]\nallowed_tools = ["*", "bash"]\n`;
const DENYING = `\n[channels.webhook.policy]\ndenied_tools = ["tape.info"]\n`;

await scenario("policy", async (browser) => {
  const page = await newPage(browser);
  await login(page);
  await page.goto(new URL("#policy", page.url()).href);
  const editor = page.getByLabel("Config file");
  await page.waitForFunction(() => document.getElementById("policy-text").value.includes("[channels.webhook]"));
  const original = await editor.inputValue();
  const lines = original.split("\n").length;
  equal(await page.locator("#policy-gutter").textContent().then((text) => text.split("\n").length), lines, "the gutter's numbers");
  await step(page, "loaded");

  // The gutter follows a long text's lines and its scrolling.
  await editor.fill(`${original}${"# padding\n".repeat(300)}`);
  await page.locator("#policy-text").evaluate((area) => { area.scrollTop = area.scrollHeight; });
  await page.waitForFunction(() => {
    const [area, gutter] = ["policy-text", "policy-gutter"].map((id) => document.getElementById(id));
    return area.scrollTop > 0 && Math.abs(gutter.scrollTop - area.scrollTop) < 1;
  });
  equal(await page.locator("#policy-gutter").textContent().then((text) => text.split("\n").length), lines + 300, "the gutter after typing");
  await step(page, "gutter-scrolled");
  await editor.fill(original);

  // An error, typed at the end: listed at its line, a click moves the caret there.
  await editor.focus();
  await page.keyboard.press("Control+End");
  const broken = original.endsWith("\n") ? lines : lines + 1;
  await page.keyboard.type(`${original.endsWith("\n") ? "" : "\n"}this is not toml\n`);
  await page.getByRole("button", { name: "Check", exact: true }).click();
  const error = page.locator("#policy-errors button").first();
  await error.waitFor();
  equal(Number(await error.getAttribute("data-line")), broken, `the error's line (${await error.textContent()})`);
  check((await error.textContent()).startsWith(`${broken}:`), `the error reads line:column: ${await error.textContent()}`);
  await page.locator("#policy-text").evaluate((area) => area.setSelectionRange(0, 0));
  await error.click();
  const caretLine = await page.evaluate(() => {
    const area = document.getElementById("policy-text");
    return area.value.slice(0, area.selectionStart).split("\n").length;
  });
  equal(caretLine, broken, "the caret's line after a click on the error");
  equal(await page.evaluate(() => document.activeElement.id), "policy-text", "the editor has the focus");
  await step(page, "error-at-line");

  // A widening, previewed: the diff's added lines and who gains what.
  await editor.fill(original + WIDENING);
  await page.getByRole("button", { name: "Preview", exact: true }).click();
  await page.locator("#policy-preview-box").waitFor({ state: "visible" });
  check(await page.locator("#policy-diff .add").filter({ hasText: "bash" }).count() > 0, "the diff shows the added line");
  const widened = page.locator("#policy-changes tr.widens");
  check(await widened.count() > 0, "a subject gains access (widens)");
  const row = await widened.first().textContent();
  check(/room/.test(row) && /bash/.test(row), `the row names the chat and the tool it gains: ${row}`);
  console.log(`gains: ${row.replace(/\s+/g, " ").trim()}`);
  await step(page, "preview-widening");

  // An apply that denies tape.info in the channel.
  await editor.fill(original + DENYING);
  await page.getByRole("button", { name: "Apply", exact: true }).click();
  await page.locator("#policy-status.good").filter({ hasText: "Applied" }).waitFor();
  equal(await editor.inputValue(), original + DENYING, "the editor keeps the applied text");
  await step(page, "applied");
  await page.reload();
  await page.waitForFunction((text) => document.getElementById("policy-text").value === text, original + DENYING);
  console.log("applied");

  // The explain form agrees: tape.info is denied in the channel now.
  await page.getByRole("link", { name: "Explain" }).click();
  const form = page.locator("#view-explain");
  await form.getByLabel("Channel").fill("webhook");
  await form.getByLabel("Chat", { exact: true }).fill("room");
  await form.getByLabel("Kind").selectOption("group");
  await form.getByLabel("Tool").fill("tape.info");
  await form.getByLabel("User").fill("webhook:alice");
  await form.getByRole("button", { name: "Explain" }).click();
  const verdicts = page.locator("#explain-out .verdicts");
  await verdicts.waitFor();
  check(/command: denied/.test(await verdicts.textContent()), `the explanation: ${await verdicts.textContent()}`);
  await step(page, "explain");

  // The audit log names the apply, who made it and its diff.
  await page.getByRole("link", { name: "Audit" }).click();
  const entry = page.locator("#audit-out li.audit", { hasText: "config.apply" }).first();
  await entry.waitFor();
  check((await entry.textContent()).includes("by alice") && (await entry.textContent()).includes("applied"), `the audit entry: ${await entry.textContent()}`);
  await entry.getByText("Diff").click();
  check(await entry.locator(".diff .add", { hasText: "tape.info" }).count() > 0, "the audit entry's diff");
  await step(page, "audit");
});
