//! Issue 28: the workspace is hostile input. Whatever a sandboxed command
//! can write there, the gateway (root, outside the sandbox) reads as it
//! reads a stranger's message: a symlink out of the workspace, a FIFO, a
//! device, a hard link to another file or a file without end must neither
//! carry the host's files into the model's request nor stall the gateway.
//!
//! Each test drives the real gateway: an operator's `,bash` plants the
//! trap from inside the sandbox (or the test, as root, plants what the
//! sandbox cannot: device nodes, hard links), then a message makes the
//! gateway read the workspace; the assertions are on what the model's
//! request carried, what the chat read, and whether the gateway still
//! answers.

use crate::support::fake_model::{FakeModel, Reply};
use crate::support::gateway::{GatewayProcess, client, signed_request};
use serde_json::json;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

const SECRET: &str = "workspace-files-secret";
/// What the planted files outside every workspace hold.
const OUTSIDE: &str = "HOST-ONLY-TEXT-7f3a";
/// Upper bound for anything the gateway should answer at once (debug
/// binary, loaded 2-core machine); never a timing assertion.
const WAIT: Duration = Duration::from_secs(60);

/// A gateway whose webhook chats all run in the sandbox, with operator
/// `ops`, and a model answering `ok` to whatever is not scripted.
struct World {
    home: tempfile::TempDir,
    fake: FakeModel,
    gateway: GatewayProcess,
    ids: AtomicUsize,
}

impl World {
    async fn start() -> World {
        World::with_policy("environment = \"sandbox\"\n").await
    }

    async fn with_policy(policy: &str) -> World {
        let home = tempfile::tempdir().unwrap();
        std::fs::write(home.path().join("secret.txt"), OUTSIDE).unwrap();
        let fake = FakeModel::start().await;
        fake.answer_all(Reply::text("ok"));
        let config = format!(
            "[channels.webhook]\nkind = \"webhook\"\nsecrets = [\"{SECRET}\"]\n\
             [channels.webhook.policy]\noperators = [\"webhook:ops\"]\n{policy}"
        );
        let gateway = GatewayProcess::start_with_config(home.path(), &fake.vars("openai:gpt-test"), &config).await;
        World { home, fake, gateway, ids: AtomicUsize::new(0) }
    }

    fn home(&self) -> &Path {
        self.home.path()
    }

    /// The workspace of webhook chat `chat`, created if missing.
    fn workspace(&self, chat: &str) -> PathBuf {
        let dir = self.home().join("workspaces").join(format!("webhook%3A{chat}"));
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    /// `text` from the operator in `chat`; the reply's text (empty when none came).
    async fn say(&self, chat: &str, text: &str) -> String {
        let id = format!("m{}", self.ids.fetch_add(1, Ordering::Relaxed));
        let body = json!({"message_id": id, "chat_id": chat, "sender_id": "ops", "text": text});
        let response = signed_request(&client(), self.gateway.addr, "webhook", "sync", &body, SECRET).await;
        let Ok(response) = response else { return String::new() };
        let reply = response.json::<serde_json::Value>().await.unwrap_or_default();
        reply["text"].as_str().unwrap_or_default().to_string()
    }

    /// Runs `cmd` in `chat`'s sandbox through the operator's `,bash`.
    async fn shell(&self, chat: &str, cmd: &str) -> String {
        assert!(!cmd.contains('\''), "the command goes inside single quotes: {cmd}");
        self.say(chat, &format!(",bash cmd='{cmd} && echo planted'")).await
    }

    /// Plants with `cmd` from inside the sandbox, failing the test when it did not run there.
    async fn plant(&self, chat: &str, cmd: &str) {
        let out = self.shell(chat, &format!("test $(id -u) = 1000 && {cmd}")).await;
        assert!(out.contains("planted"), "{cmd:?} did not run in the sandbox: {out}");
    }

    /// Sends a prompt to `chat` and returns the system prompt of the model
    /// request it caused (the reply must be `ok`).
    async fn system_prompt_after_hi(&self, chat: &str) -> String {
        let before = self.fake.request_count();
        let reply = self.say(chat, "hi").await;
        assert_eq!(reply, "ok", "the turn in {chat} was answered");
        let requests = self.fake.requests();
        assert!(requests.len() > before, "no model request for {chat}");
        requests[before]["messages"][0]["content"].as_str().unwrap_or_default().to_string()
    }

    /// [`World::say`], failing the test when no answer comes within [`WAIT`].
    async fn ask(&self, chat: &str, text: &str) -> String {
        let answer = tokio::time::timeout(WAIT, self.say(chat, text)).await;
        answer.unwrap_or_else(|_| panic!("{text:?} in {chat} was not answered"))
    }

    async fn healthy(&self) -> bool {
        let url = format!("{}/healthz", self.gateway.base_url());
        let probe = client().get(url).timeout(WAIT).send().await;
        probe.is_ok_and(|response| response.status().is_success())
    }
}

/// `AGENTS.md` linked to the gateway's secrets, to its own environment (the
/// API key), and to another session's workspace: none of it reaches the
/// model. A link that stays inside the workspace (`AGENTS.md -> CLAUDE.md`)
/// keeps working.
#[tokio::test(flavor = "multi_thread")]
async fn a_symlinked_agents_md_carries_nothing_from_outside_into_the_prompt() {
    let world = World::start().await;
    let home = world.home().display().to_string();
    std::fs::write(world.workspace("other").join("notes.txt"), "OTHER-SESSION-NOTES").unwrap();
    world.plant("config", &format!("ln -s {home}/bub.toml AGENTS.md")).await;
    world.plant("secret", &format!("ln -s {home}/secret.txt AGENTS.md")).await;
    world.plant("environ", "ln -s /proc/self/environ AGENTS.md").await;
    world.plant("shadow", "ln -s /etc/shadow AGENTS.md").await;
    world.plant("neighbour", "ln -s ../webhook%3Aother/notes.txt AGENTS.md").await;
    world.plant("inside", "echo KEEP-THIS-INSTRUCTION > CLAUDE.md && ln -s CLAUDE.md AGENTS.md").await;

    let config = world.system_prompt_after_hi("config").await;
    assert!(!config.contains(SECRET) && !config.contains("[channels"), "bub.toml leaked: {config}");
    let secret = world.system_prompt_after_hi("secret").await;
    assert!(!secret.contains(OUTSIDE), "a host file leaked: {secret}");
    let environ = world.system_prompt_after_hi("environ").await;
    assert!(!environ.contains("fake-key") && !environ.contains("BUB_"), "the gateway's environment leaked: {environ}");
    let shadow = world.system_prompt_after_hi("shadow").await;
    assert!(!shadow.contains("root:"), "/etc/shadow leaked: {shadow}");
    let neighbour = world.system_prompt_after_hi("neighbour").await;
    assert!(!neighbour.contains("OTHER-SESSION-NOTES"), "another session's file leaked: {neighbour}");
    let inside = world.system_prompt_after_hi("inside").await;
    assert!(inside.contains("KEEP-THIS-INSTRUCTION"), "a link inside the workspace still works: {inside}");
    assert!(world.healthy().await);
    assert!(world.gateway.stop().await);
}

/// A skill folder linked out of the workspace, `.agents` linked out, and
/// `.agents/skills` linked out: none of their skills is listed, inlined or
/// shown by the `skill` tool. A skill inside the workspace still is.
#[tokio::test(flavor = "multi_thread")]
async fn skills_linked_out_of_the_workspace_are_not_loaded() {
    let world = World::start().await;
    let planted = world.home().join("planted");
    for name in ["leak-one", "leak-two", "leak-three"] {
        let folder = planted.join(name).join(".agents/skills").join(name);
        std::fs::create_dir_all(&folder).unwrap();
        let text = format!("---\nname: {name}\ndescription: {OUTSIDE} {name}\n---\n{OUTSIDE} body of {name}\n");
        std::fs::write(folder.join("SKILL.md"), text).unwrap();
    }
    let p = planted.display();
    world
        .plant("one", &format!("mkdir -p .agents/skills && ln -s {p}/leak-one/.agents/skills/leak-one .agents/skills/"))
        .await;
    world.plant("two", &format!("ln -s {p}/leak-two/.agents .agents")).await;
    world.plant("three", &format!("mkdir .agents && ln -s {p}/leak-three/.agents/skills .agents/skills")).await;
    let good = world.workspace("one").join(".agents/skills/good-one");
    std::fs::create_dir_all(&good).unwrap();
    std::fs::write(good.join("SKILL.md"), "---\nname: good-one\ndescription: Stays inside.\n---\nbody\n").unwrap();

    for chat in ["one", "two", "three"] {
        let system = world.system_prompt_after_hi(chat).await;
        assert!(!system.contains(OUTSIDE) && !system.contains("leak-"), "{chat}: a skill from outside: {system}");
        if chat == "one" {
            assert!(system.contains("- good-one: Stays inside."), "the workspace's own skill: {system}");
        }
    }
    let asked = world.fake.request_count();
    world.fake.push(Reply::tool_calls(vec![("skill", json!({"name": "leak-one"}))])).push(Reply::text("ok"));
    assert_eq!(world.say("one", "$leak-one please").await, "ok");
    let shown = world.fake.tool_results(asked + 1);
    assert!(shown.contains("(no such skill)") && !shown.contains(OUTSIDE), "the skill tool: {shown}");
    assert!(world.gateway.stop().await);
}

/// A FIFO named `AGENTS.md` froze the gateway at the session's next message
/// (the read waited for a writer on a runtime thread): `/healthz` and every
/// other chat stopped answering. Now the FIFO is refused and everyone,
/// that session included, is answered.
#[tokio::test(flavor = "multi_thread")]
async fn a_fifo_named_agents_md_stalls_nothing() {
    let world = World::start().await;
    world.plant("fifo", "mkfifo AGENTS.md").await;
    let trapped = async { tokio::time::timeout(WAIT, world.system_prompt_after_hi("fifo")).await };
    let others = async {
        // Let the trapped message reach the gateway first (ordering only; nothing is timed).
        tokio::time::sleep(Duration::from_millis(500)).await;
        let healthy = world.healthy().await;
        let other = tokio::time::timeout(WAIT, world.say("bystander", "hello")).await;
        (healthy, other)
    };
    let (trapped, (healthy, other)) = tokio::join!(trapped, others);
    assert!(healthy, "/healthz answered while the FIFO waited for a writer");
    assert_eq!(other.as_deref(), Ok("ok"), "another chat was answered");
    let system = trapped.expect("the trapped session's turn was answered, without the file");
    assert!(system.starts_with("You are bub"), "{system}");
    assert!(world.gateway.stderr().contains("AGENTS.md not read"), "the refusal is logged");
    assert!(world.gateway.stop().await);
}

/// `AGENTS.md` without end (a link to `/dev/zero`, the device itself planted
/// by root) was read until the gateway was killed for memory; one over the
/// cap went into every request. Now none of them is read.
#[tokio::test(flavor = "multi_thread")]
async fn agents_md_without_end_or_over_the_cap_is_not_read() {
    let world = World::start().await;
    world.plant("zero", "ln -s /dev/zero AGENTS.md").await;
    world.plant("big", "yes BIG-AGENTS-MD | head -c 400000 > AGENTS.md").await;
    mknod(&world.workspace("device").join("AGENTS.md"), rustix::fs::FileType::CharacterDevice);
    for chat in ["zero", "device", "big"] {
        let system = world.system_prompt_after_hi(chat).await;
        assert!(!system.contains('\0') && !system.contains("BIG-AGENTS-MD"), "{chat}: {} bytes", system.len());
        assert!(system.len() < 64 * 1024, "{chat}: the prompt is {} bytes", system.len());
    }
    assert!(world.healthy().await);
    let peak = peak_memory_kib(world.gateway.pid());
    assert!(peak < 512 * 1024, "the gateway's memory peaked at {peak} KiB");
    assert!(world.gateway.stop().await);
}

/// A hard link in a workspace to a root-only file outside (made by root:
/// a sandbox cannot link across its mounts, a session once on the host
/// could): not read into the prompt, not shown by `fs.read`, and not
/// given to the sandbox's uid when the sandbox is prepared.
#[tokio::test(flavor = "multi_thread")]
async fn a_hard_link_to_a_file_outside_is_neither_read_nor_given_away() {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let world = World::start().await;
    let secret = world.home().join("secret.txt");
    std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(0o600)).unwrap();
    let workspace = world.workspace("hard");
    std::fs::hard_link(&secret, workspace.join("AGENTS.md")).unwrap();
    std::fs::hard_link(&secret, workspace.join("linked.txt")).unwrap();
    let system = world.system_prompt_after_hi("hard").await;
    assert!(!system.contains(OUTSIDE), "the prompt carried the linked file: {system}");
    let read = world.say("hard", ",fs.read linked.txt").await;
    assert!(!read.contains(OUTSIDE) && read.contains("hard links"), "fs.read: {read}");
    let shell = world.shell("hard", "cat linked.txt; echo >> linked.txt").await;
    assert!(!shell.contains(OUTSIDE), "the sandbox read it: {shell}");
    let metadata = std::fs::metadata(&secret).unwrap();
    assert_eq!((metadata.uid(), std::fs::read_to_string(&secret).unwrap().as_str()), (0, OUTSIDE), "{shell}");
    assert!(world.gateway.stop().await);
}

/// `fs.read` in a sandboxed chat: `..`, an absolute path and a link planted
/// by the sandbox all stay refused (they held before issue 28; pinned now
/// that the tools open files through the shared module), a device planted
/// by root is refused, and a link inside the workspace reads its target.
#[tokio::test(flavor = "multi_thread")]
async fn fs_read_in_the_sandbox_stays_in_the_workspace() {
    let world = World::start().await;
    let home = world.home().display().to_string();
    std::fs::write(world.workspace("other").join("notes.txt"), "OTHER-SESSION-NOTES").unwrap();
    world.plant("reader", &format!("ln -s {home}/secret.txt out && echo inside > real.txt && ln -s real.txt in")).await;
    mknod(&world.workspace("reader").join("zero"), rustix::fs::FileType::CharacterDevice);
    for (path, reason) in [
        ("../webhook%3Aother/notes.txt".to_string(), "leaves the workspace"),
        (format!("{home}/secret.txt"), "leaves the workspace"),
        ("out".to_string(), "leaves the workspace"),
        ("zero".to_string(), "it is a device, not a regular file"),
    ] {
        let reply = world.ask("reader", &format!(",fs.read {path}")).await;
        assert!(reply.contains(reason), "{path}: {reply}");
        assert!(!reply.contains(OUTSIDE) && !reply.contains("OTHER-SESSION"), "{path}: {reply}");
    }
    assert_eq!(world.ask("reader", ",fs.read in").await.trim(), "inside");
    assert!(world.gateway.stop().await);
}

/// On the host (`environment = "local"`, the webhook's default) the file
/// tools used `tokio::fs`: `fs.read` of a FIFO hung the tool call (and the
/// turn) for good, a device was read without end, a hard link to a file
/// outside was read although the tools are confined. Unconfined, any path
/// is the user's own machine, but a FIFO or a device still is not read.
#[tokio::test(flavor = "multi_thread")]
async fn file_tools_on_the_host_refuse_fifos_devices_and_hard_links() {
    let world = World::with_policy("[channels.webhook.chats.\"open\".policy]\nconfine_fs = false\n").await;
    let secret = world.home().join("secret.txt");
    let ws = world.workspace("host");
    mknod(&ws.join("pipe"), rustix::fs::FileType::Fifo);
    mknod(&ws.join("zero"), rustix::fs::FileType::CharacterDevice);
    std::fs::hard_link(&secret, ws.join("linked.txt")).unwrap();
    for (line, reason) in [
        (",fs.read linked.txt", "hard links"),
        (",fs.read zero", "it is a device, not a regular file"),
        (",fs.read pipe", "it is a FIFO, not a regular file"),
        (",fs.write pipe x", "a FIFO"),
    ] {
        let reply = world.ask("host", line).await;
        assert!(reply.contains(reason) && !reply.contains(OUTSIDE), "{line}: {reply}");
    }
    assert!(world.gateway.stderr().contains("file refused"), "refusals are logged");
    let pipe = ws.join("pipe");
    for (line, reason) in [
        (format!(",fs.read {}", pipe.display()), "it is a FIFO, not a regular file"),
        (",fs.read /dev/zero".to_string(), "it is a device, not a regular file"),
        (format!(",fs.read {}", secret.display()), OUTSIDE),
    ] {
        let reply = world.ask("open", &line).await;
        assert!(reply.contains(reason), "unconfined {line}: {reply}");
    }
    assert!(world.healthy().await);
    let peak = peak_memory_kib(world.gateway.pid());
    assert!(peak < 512 * 1024, "the gateway's memory peaked at {peak} KiB");
    assert!(world.gateway.stop().await);
}

/// Files in and out of a Telegram chat's sandboxed workspace.
#[cfg(feature = "telegram")]
mod telegram {
    use super::*;
    use crate::support::fake_telegram::{FakeTelegram, TOKEN};

    const USER: i64 = 1001;

    fn config(telegram: &FakeTelegram) -> String {
        format!(
            "[policy.defaults]\ndebounce = {{ quiet_seconds = 0.1 }}\n\
             [channels.tg]\nkind = \"telegram\"\ntoken = \"{TOKEN}\"\napi_url = \"{}\"\n\
             [channels.tg.policy]\nallow_users = [\"tg:{USER}\"]\n",
            telegram.api_url()
        )
    }

    fn workspace(home: &Path) -> PathBuf {
        let dir = home.join("workspaces").join(format!("tg%3A{USER}"));
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    /// `chat.send_file` of a hard link to a file outside sent that file to
    /// the chat. Now it is refused (the model reads why); `..` and absolute
    /// paths stay refused, and a link inside the workspace is still sent.
    #[tokio::test(flavor = "multi_thread")]
    async fn send_file_sends_no_hard_link_out_and_follows_links_inside() {
        let home = tempfile::tempdir().unwrap();
        let secret = home.path().join("secret.txt");
        std::fs::write(&secret, OUTSIDE).unwrap();
        let ws = workspace(home.path());
        std::fs::write(ws.join("chart.png"), b"\x89PNG chart").unwrap();
        std::fs::create_dir_all(ws.join("out")).unwrap();
        std::os::unix::fs::symlink("../chart.png", ws.join("out/link.png")).unwrap();
        std::fs::hard_link(&secret, ws.join("linked.txt")).unwrap();
        let telegram = FakeTelegram::start().await;
        let fake = FakeModel::start().await;
        fake.answer_all(Reply::text("ok"));
        for path in ["linked.txt", "../../secret.txt", secret.to_str().unwrap(), "out/link.png"] {
            fake.push(Reply::tool_calls(vec![("chat_send_file", json!({"path": path}))]));
        }
        fake.push(Reply::text("done"));
        let gateway =
            GatewayProcess::start_with_config(home.path(), &fake.vars("openai:gpt-test"), &config(&telegram)).await;

        telegram.user_says(USER, "send me the files");
        let done = telegram.wait_until(WAIT, |_| fake.request_count() >= 5).await;
        assert!(done, "the turn never finished: {:?}", telegram.calls());
        let files = telegram.files();
        assert!(files.iter().all(|file| file.bytes != OUTSIDE.as_bytes()), "the chat got the file outside: {files:?}");
        let told: Vec<String> = (1..=4).map(|n| fake.tool_results(n)).collect();
        assert!(told[0].contains("linked.txt was not sent") && told[0].contains("hard links"), "{}", told[0]);
        assert!(told[1].contains("leaves the workspace") && told[2].contains("leaves the workspace"), "{told:?}");
        assert_eq!(files.len(), 1, "only the link inside was sent: {files:?}; {told:?}");
        // Sent under the name of the file it leads to.
        assert_eq!((files[0].file_name.as_str(), files[0].bytes.as_slice()), ("chart.png", &b"\x89PNG chart"[..]));
        assert!(gateway.stop().await);
    }

    /// A photo sent to a chat whose workspace has `attachments` linked out
    /// (planted by its sandbox): the gateway, root, does not write through
    /// the link, and the chat is still answered. (Held before issue 28's
    /// fix too: pinned, as the write moved to the shared module.)
    #[tokio::test(flavor = "multi_thread")]
    async fn an_attachment_is_never_written_through_a_planted_link() {
        let home = tempfile::tempdir().unwrap();
        let outside = home.path().join("outside");
        std::fs::create_dir_all(&outside).unwrap();
        let ws = workspace(home.path());
        std::os::unix::fs::symlink(&outside, ws.join("attachments")).unwrap();
        let telegram = FakeTelegram::start().await;
        let fake = FakeModel::start_answering("seen").await;
        let gateway =
            GatewayProcess::start_with_config(home.path(), &fake.vars("openai:gpt-test"), &config(&telegram)).await;

        telegram.user_sends_photo(USER, Some("look"), b"\xff\xd8 a photo");
        let answered = telegram.wait_until(WAIT, |t| !t.sent().is_empty()).await;
        assert!(answered, "no reply: {:?}", telegram.calls());
        let written: Vec<_> = walk(&outside);
        assert!(written.is_empty(), "written through the link: {written:?}");
        assert!(gateway.stop().await);
    }

    fn walk(dir: &Path) -> Vec<PathBuf> {
        let mut found = Vec::new();
        for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
            found.push(entry.path());
            found.extend(walk(&entry.path()));
        }
        found
    }
}

/// A FIFO, or a character device that reads as `/dev/zero`, at `path`
/// (made by the test, root as the gateway is: a sandbox cannot make devices).
fn mknod(path: &Path, kind: rustix::fs::FileType) {
    let device = match kind {
        rustix::fs::FileType::CharacterDevice => rustix::fs::makedev(1, 5),
        _ => 0,
    };
    rustix::fs::mknodat(rustix::fs::CWD, path, kind, 0o644.into(), device).expect("mknod (the tests run as root)");
}

/// The peak resident memory of process `pid` (`VmHWM`), in KiB.
fn peak_memory_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("the gateway's /proc status");
    let line = status.lines().find(|line| line.starts_with("VmHWM:")).expect("VmHWM in /proc/<pid>/status");
    line.split_whitespace().nth(1).and_then(|kib| kib.parse().ok()).expect("VmHWM in KiB")
}
