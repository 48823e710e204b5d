//! Load on the real `bub gateway` (release build) through its chat channels:
//! a Telegram channel against the fake Bot API and a Discord channel against
//! the fake Discord, each with 1,000 chats, the fake model answering at once.
//!
//! ```sh
//! cargo bench --bench channel_load      # builds bub with the bench (release) profile and runs this
//! # knobs (environment): BUB_CHANNEL_LOAD_CHATS=1000 BUB_CHANNEL_LOAD_STEADY_TURNS=600
//! #                      BUB_CHANNEL_LOAD_STEADY_RATE=20 (turns/s offered in the steady phase)
//! #                      BUB_CHANNEL_LOAD_LONG_CHATS=50 BUB_CHANNEL_LOAD_ONLY=telegram|discord
//! cargo test --bench channel_load       # a smoke run: debug build, 20 chats, figures meaningless
//! ```
//!
//! Each platform's channel runs with outbound budgets equal to the platform's
//! limits (Telegram: `outbound_per_chat = "1/s"`, `outbound_per_channel =
//! "30/s"`; Discord: `"1/s"` per channel — its 5 per 5 s without the burst —
//! and `"50/s"`, its global limit) and the policy's default debounce (a turn
//! starts after 1 s without a new message). The fake Telegram enforces the Bot
//! API FAQ's flood limits by itself (1/s per chat with a burst of 3, 20/min per
//! group, 30/s overall) and answers 429 beyond them; Discord's 429s are counted
//! from the fake's answers. Phases, per platform:
//! 1. warm-up: one turn in one chat, so the channel is connected;
//! 2. burst: every one of the chats says one thing at once; each answer is one
//!    message. Replies/s is chats ÷ (last reply's first text − first message);
//! 3. steady: turns offered at `BUB_CHANNEL_LOAD_STEADY_RATE` per second
//!    round-robin over the chats (below the platform's rate, so the time to
//!    first text is the gateway's, not a queue's);
//! 4. long: `BUB_CHANNEL_LOAD_LONG_CHATS` chats get a 5,000-character answer,
//!    several messages each, which the per-chat budget must space out.
//!
//! Time to first text runs from when the fake made the user's message
//! available to the bot (Telegram: the `getUpdates` answer that first held it;
//! Discord: the MESSAGE_CREATE dispatch) to the first message the bot created
//! in that chat afterwards, as the fake saw it; it includes the debounce. CPU
//! per turn is the gateway process's user + system time (`/proc/<pid>/stat`)
//! over a phase ÷ its turns. The per-chat peak is the most posts (messages and
//! edits) one chat got in any 1 s window, against the per-chat budget. The fakes,
//! the model and this load generator share the machine with the gateway, so the
//! figures are a lower bound on what the gateway alone would do.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "measurement code: a setup step that fails leaves nothing to measure, and says why as it panics"
)]

// The integration tests' fakes and gateway process; this bench uses a part of them.
#[allow(dead_code, unused_imports, unused_macros)]
#[path = "../tests/it/support/mod.rs"]
mod support;

use serde_json::json;
use std::collections::HashMap;
use std::time::{Duration, Instant};
use support::fake_discord::FakeDiscord;
use support::fake_model::{FakeModel, Reply};
use support::fake_telegram::{FakeTelegram, TelegramLimits};
use support::gateway::{GatewayProcess, cpu_time, percentile};

/// Chats' ids on each platform are these plus the chat's index.
const TELEGRAM_FIRST_CHAT: i64 = 1_000_000;
const DISCORD_FIRST_CHANNEL: u64 = 400_000_000_000_000_000;
const DISCORD_FIRST_USER: u64 = 300_000_000_000_000_000;
/// How long a phase may take before the bench gives up waiting for it.
const PHASE_TIMEOUT: Duration = Duration::from_secs(600);
const SHORT_ANSWER: &str = "Sure: the order shipped yesterday and should arrive on Friday.";

fn knob(name: &str, default: usize) -> usize {
    std::env::var(name).ok().and_then(|v| v.trim().parse().ok()).unwrap_or(default)
}

/// The workload; `cargo test` (no `--bench` argument) gets a tiny one.
struct Workload {
    chats: usize,
    steady_turns: usize,
    steady_rate: f64,
    long_chats: usize,
    /// A phase is over once every chat got its first text and nothing was posted for this long.
    quiet: Duration,
}

impl Workload {
    fn from_env(smoke: bool) -> Workload {
        if smoke {
            let quiet = Duration::from_millis(1500);
            return Workload { chats: 20, steady_turns: 10, steady_rate: 20.0, long_chats: 2, quiet };
        }
        Workload {
            chats: knob("BUB_CHANNEL_LOAD_CHATS", 1_000).max(1),
            steady_turns: knob("BUB_CHANNEL_LOAD_STEADY_TURNS", 600),
            steady_rate: knob("BUB_CHANNEL_LOAD_STEADY_RATE", 20).max(1) as f64,
            long_chats: knob("BUB_CHANNEL_LOAD_LONG_CHATS", 50),
            quiet: Duration::from_secs(2),
        }
    }
}

/// A post into a chat as the fake saw it: a new message, or another call (edit, typing).
struct Post {
    chat: u64,
    creates: bool,
    at: Instant,
}

/// One platform's fake, seen the same way for both.
trait Platform {
    fn name(&self) -> &'static str;
    /// Chat `index`'s user says `text`; returns when the fake made it available to the bot
    /// (for Telegram, a key to look that up later: see [`Platform::available`]).
    fn say(&self, index: usize, text: &str) -> Said;
    /// When each said message was made available to the bot.
    fn available(&self, said: &[Said]) -> Vec<(u64, Instant)>;
    /// Every post into a chat so far (messages and edits; typing is not a post).
    fn posts(&self) -> Vec<Post>;
    /// Every call the bot made that counts against the platform's overall limit, by time.
    fn limited_calls(&self) -> Vec<Instant>;
    /// 429s the fake answered, described.
    fn refusals(&self) -> (usize, String);
    /// The per-chat and per-channel budgets matching the platform's limits, as policy rates.
    fn limits(&self) -> (&'static str, &'static str);
}

/// A message a user said: its chat, and the fake's id for it.
#[derive(Clone, Copy)]
struct Said {
    chat: u64,
    message_id: i64,
    at: Instant,
}

impl Platform for FakeTelegram {
    fn name(&self) -> &'static str {
        "telegram"
    }

    fn say(&self, index: usize, text: &str) -> Said {
        let chat = TELEGRAM_FIRST_CHAT + index as i64;
        let at = Instant::now();
        let message_id = self.user_says(chat, text);
        Said { chat: chat as u64, message_id, at }
    }

    fn available(&self, said: &[Said]) -> Vec<(u64, Instant)> {
        let handed: HashMap<(i64, i64), Instant> =
            self.handed_out().into_iter().map(|h| ((h.chat_id, h.message_id), h.at)).collect();
        said.iter().map(|s| (s.chat, handed.get(&(s.chat as i64, s.message_id)).copied().unwrap_or(s.at))).collect()
    }

    fn posts(&self) -> Vec<Post> {
        self.posted()
            .into_iter()
            .map(|p| Post { chat: p.chat_id as u64, creates: p.method.starts_with("send"), at: p.at })
            .collect()
    }

    fn limited_calls(&self) -> Vec<Instant> {
        self.posted().into_iter().map(|p| p.at).collect()
    }

    fn refusals(&self) -> (usize, String) {
        let r = self.flood_refusals();
        (r.total(), format!("per chat {}, per group {}, overall {}", r.per_chat, r.per_group, r.overall))
    }

    fn limits(&self) -> (&'static str, &'static str) {
        ("1/s", "30/s")
    }
}

impl Platform for FakeDiscord {
    fn name(&self) -> &'static str {
        "discord"
    }

    fn say(&self, index: usize, text: &str) -> Said {
        let channel = DISCORD_FIRST_CHANNEL + index as u64;
        let user = DISCORD_FIRST_USER + index as u64;
        let at = Instant::now();
        let message_id = self.user_says(channel, None, user, text, json!({}));
        Said { chat: channel, message_id: message_id as i64, at }
    }

    fn available(&self, said: &[Said]) -> Vec<(u64, Instant)> {
        // The dispatch is queued to the bot's websocket as `user_says` returns.
        said.iter().map(|s| (s.chat, s.at)).collect()
    }

    fn posts(&self) -> Vec<Post> {
        self.answered()
            .into_iter()
            .filter(|a| a.status < 300 && (a.route == "create_message" || a.route == "edit_message"))
            .filter_map(|a| Some(Post { chat: a.channel_id?, creates: a.route == "create_message", at: a.at }))
            .collect()
    }

    fn limited_calls(&self) -> Vec<Instant> {
        // Discord's global limit counts every REST call (typing included).
        self.answered().into_iter().map(|a| a.at).collect()
    }

    fn refusals(&self) -> (usize, String) {
        let answered = self.answered();
        let mut by_route: HashMap<String, usize> = HashMap::new();
        for a in answered.iter().filter(|a| a.status == 429) {
            *by_route.entry(a.route.clone()).or_default() += 1;
        }
        let total = by_route.values().sum();
        let mut parts: Vec<String> = by_route.into_iter().map(|(route, n)| format!("{route} {n}")).collect();
        parts.sort();
        (total, if parts.is_empty() { "none".to_string() } else { parts.join(", ") })
    }

    fn limits(&self) -> (&'static str, &'static str) {
        ("1/s", "50/s")
    }
}

fn ms(d: Duration) -> String {
    format!("{:.1} ms", d.as_secs_f64() * 1000.0)
}

/// The most instants (sorted) in any half-open window of `width`.
fn peak_in_window(sorted: &[Instant], width: Duration) -> usize {
    let mut peak = 0;
    let mut start = 0;
    for (end, at) in sorted.iter().enumerate() {
        while *at - sorted[start] >= width {
            start += 1;
        }
        peak = peak.max(end + 1 - start);
    }
    peak
}

/// For each said message, the time from its availability to the first message
/// created in its chat afterwards; `None` for those not answered yet.
fn first_text(available: &[(u64, Instant)], posts: &[Post]) -> Vec<Option<(Duration, Instant)>> {
    let mut creates: HashMap<u64, Vec<Instant>> = HashMap::new();
    for post in posts.iter().filter(|p| p.creates) {
        creates.entry(post.chat).or_default().push(post.at);
    }
    for times in creates.values_mut() {
        times.sort();
    }
    available
        .iter()
        .map(|(chat, from)| {
            let times = creates.get(chat)?;
            let at = times.get(times.partition_point(|t| t < from))?;
            Some((*at - *from, *at))
        })
        .collect()
}

/// What one phase measured.
struct PhaseResult {
    name: &'static str,
    turns: usize,
    answered: usize,
    wall: Duration,
    latencies: Vec<Duration>,
    gateway_cpu: Duration,
    bench_cpu: Duration,
}

impl PhaseResult {
    fn print(&self, out: &mut Vec<String>) {
        let per_s = self.answered as f64 / self.wall.as_secs_f64().max(1e-9);
        let per_turn = |d: Duration| format!("{:.3} ms", d.as_secs_f64() * 1000.0 / self.turns.max(1) as f64);
        out.push(format!(
            "| {:<7} | {:>5} / {:<5} | {:>9.1} | {:>10} | {:>10} | {:>10} | {:>10} | {:>10} |",
            self.name,
            self.answered,
            self.turns,
            per_s,
            ms(percentile(&self.latencies, 50.0)),
            ms(percentile(&self.latencies, 99.0)),
            ms(self.latencies.last().copied().unwrap_or_default()),
            per_turn(self.gateway_cpu),
            per_turn(self.bench_cpu),
        ));
    }
}

/// Waits until every said message has its first text and nothing was posted for `quiet`.
async fn wait_answered(platform: &dyn Platform, said: &[Said], quiet: Duration) -> bool {
    let deadline = Instant::now() + PHASE_TIMEOUT;
    loop {
        let posts = platform.posts();
        let available = platform.available(said);
        let all = first_text(&available, &posts).iter().all(Option::is_some);
        let last_post = posts.iter().map(|p| p.at).max();
        if all && last_post.is_none_or(|at| at.elapsed() >= quiet) {
            return true;
        }
        if Instant::now() > deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Runs one phase: `send` says the phase's messages (timing them itself), then
/// waits for every answer; CPU is counted from before the first message to the last answer.
async fn phase<F, Fut>(name: &'static str, platform: &dyn Platform, pid: u32, quiet: Duration, send: F) -> PhaseResult
where
    F: FnOnce() -> Fut,
    Fut: std::future::Future<Output = Vec<Said>>,
{
    let cpu_before = (cpu_time(&pid.to_string()), cpu_time("self"));
    let said = send().await;
    let done = wait_answered(platform, &said, quiet).await;
    let cpu_after = (cpu_time(&pid.to_string()), cpu_time("self"));
    if !done {
        eprintln!("{}: {name}: not every message was answered within {PHASE_TIMEOUT:?}", platform.name());
    }
    let available = platform.available(&said);
    let answers: Vec<(Duration, Instant)> = first_text(&available, &platform.posts()).into_iter().flatten().collect();
    let first = available.iter().map(|(_, at)| *at).min();
    let last = answers.iter().map(|(_, at)| *at).max();
    let wall = match (first, last) {
        (Some(first), Some(last)) => last.saturating_duration_since(first),
        _ => Duration::ZERO,
    };
    let mut latencies: Vec<Duration> = answers.iter().map(|(latency, _)| *latency).collect();
    latencies.sort();
    PhaseResult {
        name,
        turns: said.len(),
        answered: answers.len(),
        wall,
        latencies,
        gateway_cpu: cpu_after.0.saturating_sub(cpu_before.0),
        bench_cpu: cpu_after.1.saturating_sub(cpu_before.1),
    }
}

/// The channel's config: open to everyone, outbound budgets at the platform's limits;
/// the default debounce, but a short one in a smoke run.
fn config(platform: &dyn Platform, connection: &str, smoke: bool) -> String {
    let (name, (per_chat, per_channel)) = (platform.name(), platform.limits());
    let debounce = if smoke { "debounce = { quiet_seconds = 0.1 }\n" } else { "" };
    format!(
        "[policy.defaults]\ndm_policy = \"open\"\ngroup_policy = \"open\"\n{debounce}\n\
         [channels.{name}]\nkind = \"{name}\"\n{connection}\n\n\
         [channels.{name}.policy]\n\
         rate = {{ outbound_per_chat = \"{per_chat}\", outbound_per_channel = \"{per_channel}\" }}\n"
    )
}

async fn run_platform(platform: &dyn Platform, config_text: &str, workload: &Workload, smoke: bool) {
    let model = FakeModel::start_answering(SHORT_ANSWER).await;
    let home = tempfile::tempdir().expect("tempdir");
    let mut env = model.vars("openai:gpt-bench");
    env.push(("BUB_LOG".into(), "warn".into()));
    let gateway = GatewayProcess::start_with_config(home.path(), &env, config_text).await;
    let pid = gateway.pid();
    let name = platform.name();

    let warm = phase("warm-up", platform, pid, workload.quiet, || async { vec![platform.say(0, "hello")] }).await;
    let burst = phase("burst", platform, pid, workload.quiet, || async {
        (0..workload.chats).map(|i| platform.say(i, &format!("where is order {i}?"))).collect()
    })
    .await;
    let steady = phase("steady", platform, pid, workload.quiet, || async {
        let started = tokio::time::Instant::now();
        let mut said = Vec::with_capacity(workload.steady_turns);
        for i in 0..workload.steady_turns {
            tokio::time::sleep_until(started + Duration::from_secs_f64(i as f64 / workload.steady_rate)).await;
            said.push(platform.say(i % workload.chats, &format!("and order {i}?")));
        }
        said
    })
    .await;
    let long_answer = (0..1_000).map(|i| format!("w{i:03}")).collect::<Vec<_>>().join(" ");
    model.answer_all(Reply::text(&long_answer));
    let long = phase("long", platform, pid, workload.quiet, || async {
        (0..workload.long_chats.min(workload.chats)).map(|i| platform.say(i, "tell me everything")).collect()
    })
    .await;
    let ended_cleanly = gateway.stop().await;

    let posts = platform.posts();
    let mut per_chat: HashMap<u64, Vec<Instant>> = HashMap::new();
    for post in &posts {
        per_chat.entry(post.chat).or_default().push(post.at);
    }
    let (mut chat_peak, mut min_gap, mut close_gaps) = (0, None::<Duration>, 0);
    for times in per_chat.values_mut() {
        times.sort();
        chat_peak = chat_peak.max(peak_in_window(times, Duration::from_secs(1)));
        for pair in times.windows(2) {
            let gap = pair[1] - pair[0];
            min_gap = Some(min_gap.map_or(gap, |min| min.min(gap)));
            // The budget spaces posts 1 s apart; HTTP and scheduling jitter moves them by milliseconds.
            close_gaps += usize::from(gap < Duration::from_millis(900));
        }
    }
    let mut limited = platform.limited_calls();
    limited.sort();
    let overall_peak = peak_in_window(&limited, Duration::from_secs(1));
    let (refused, refusals) = platform.refusals();
    let (chat_limit, overall_limit) = platform.limits();
    let edits = posts.iter().filter(|p| !p.creates).count();

    let mut out = vec![
        String::new(),
        format!(
            "bub gateway, {name} channel through its fake: {} chats, budgets {chat_limit} per chat and \
             {overall_limit} per channel{}",
            workload.chats,
            if smoke { " (smoke run: debug build, tiny workload, figures meaningless)" } else { "" }
        ),
        format!(
            "| {:<7} | {:>13} | {:>9} | {:>10} | {:>10} | {:>10} | {:>10} | {:>10} |",
            "phase", "answered", "replies/s", "1st text50", "1st text99", "1st textmx", "gw CPU/tn", "load CPU/tn"
        ),
        format!("|{}|", [9, 15, 11, 12, 12, 12, 12, 12].map(|width| "-".repeat(width)).join("|")),
    ];
    for result in [&warm, &burst, &steady, &long] {
        result.print(&mut out);
    }
    out.push(format!(
        "posts: {} messages, {edits} edits; one chat: closest two posts {} apart, {close_gaps} pairs under \
         0.9 s, at most {chat_peak} in any 1 s (budget {chat_limit}); overall: at most {overall_peak} calls \
         in any 1 s (limit {overall_limit})",
        posts.len() - edits,
        min_gap.map_or_else(|| "-".to_string(), ms),
    ));
    out.push(format!("429s from the fake: {refused} ({refusals}); gateway stopped cleanly: {ended_cleanly}"));
    out.push(format!("fake model requests: {}", model.request_count()));
    println!("{}", out.join("\n"));
    if smoke {
        let answered = warm.answered + burst.answered + steady.answered + long.answered;
        let asked = warm.turns + burst.turns + steady.turns + long.turns;
        assert_eq!(answered, asked, "{name}: every message of the smoke run got an answer");
    }
}

fn main() {
    // `cargo bench` passes `--bench`; `cargo test --bench channel_load` does not: a smoke run.
    let smoke = !std::env::args().any(|arg| arg == "--bench");
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("runtime");
    runtime.block_on(run(smoke));
}

async fn run(smoke: bool) {
    let workload = Workload::from_env(smoke);
    let only = std::env::var("BUB_CHANNEL_LOAD_ONLY").unwrap_or_default();
    if only.is_empty() || only == "telegram" {
        let telegram = FakeTelegram::start().await;
        telegram.enforce_limits(TelegramLimits::platform());
        let connection = format!("token = \"{}\"\napi_url = \"{}\"", support::fake_telegram::TOKEN, telegram.api_url());
        let config_text = config(&telegram, &connection, smoke);
        run_platform(&telegram, &config_text, &workload, smoke).await;
    }
    if only.is_empty() || only == "discord" {
        let discord = FakeDiscord::start().await;
        let connection = format!("token = \"{}\"\napi_url = \"{}\"", support::fake_discord::TOKEN, discord.proxy_url());
        let config_text = config(&discord, &connection, smoke);
        run_platform(&discord, &config_text, &workload, smoke).await;
    }
}
