//! Discord's slash commands through the real binary, the real adapter and the
//! fake Discord: the command list registered at start (one for everyone:
//! what anyone or a named operator may run), a command someone runs
//! acknowledged at once and answered in the same interaction, under the same
//! policy as its comma form, and a reply that still arrives when the
//! interaction's token no longer works.

use crate::support;

use std::path::Path;
use std::time::Duration;
use support::fake_discord::{FakeDiscord, TOKEN};
use support::fake_model::FakeModel;
use support::gateway::GatewayProcess;

/// Answers arrive within this (debug binary, loaded 2-core machine).
const ANSWER_TIMEOUT: Duration = Duration::from_secs(60);
const USER: u64 = 300_000_000_000_000_001;
const OPERATOR: u64 = 300_000_000_000_000_009;
const DM_CHANNEL: u64 = 400_000_000_000_000_001;
const GUILD: u64 = 500_000_000_000_000_001;
const GUILD_CHANNEL: u64 = 600_000_000_000_000_001;

async fn start(home: &Path, fake: &FakeModel, config_text: &str) -> GatewayProcess {
    GatewayProcess::start_with_config(home, &fake.vars("openai:gpt-test"), config_text).await
}

/// The open test config, with `policy` lines added to `[policy.defaults]`.
fn config(discord: &FakeDiscord, policy: &str) -> String {
    discord.open_config(TOKEN).replacen("[policy.defaults]\n", &format!("[policy.defaults]\n{policy}\n"), 1)
}

async fn registered(discord: &FakeDiscord) -> Vec<String> {
    let done = discord.wait_until(ANSWER_TIMEOUT, |fake| fake.commands().is_some()).await;
    assert!(done, "no command list was registered at start: calls {:?}", discord.calls());
    discord.command_names()
}

/// Waits until interaction `id`'s answer holds more than "thinking…"; returns its text.
async fn answer(discord: &FakeDiscord, id: u64) -> String {
    let answered = discord
        .wait_until(ANSWER_TIMEOUT, |fake| fake.interaction(id).is_some_and(|seen| seen.original_filled()))
        .await;
    let seen = discord.interaction(id).unwrap_or_default();
    assert!(answered, "interaction {id} was never answered: {seen:?}; calls {:?}", discord.calls());
    seen.original.unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread")]
async fn the_command_list_holds_what_anyone_or_an_operator_may_run_and_follows_a_reload() {
    let home = tempfile::tempdir().unwrap();
    let discord = FakeDiscord::start().await;
    let fake = FakeModel::start_answering("hello").await;

    let gateway = start(home.path(), &fake, &config(&discord, "")).await;
    let names = registered(&discord).await;
    assert_eq!(names.first().map(String::as_str), Some("help"), "{names:?}");
    assert!(names.iter().any(|name| name == "tape_info"), "read-only commands are anyone's: {names:?}");
    assert!(!names.iter().any(|name| name == "bash"), "no operator, no shell: {names:?}");
    let commands = discord.commands().unwrap_or_default();
    assert!(
        commands.iter().all(|command| command["options"][0]["name"] == "args"
            && command["description"].as_str().is_some_and(|text| (1..=100).contains(&text.chars().count()))),
        "each takes its arguments as one text option, described within Discord's 100 characters: {commands:?}"
    );

    // The policy names an operator: the list follows the reload, before anyone writes.
    let operators = config(&discord, &format!("operators = [\"dc:{OPERATOR}\"]"));
    std::fs::write(home.path().join("bub.toml"), operators).unwrap();
    let shell = discord.wait_until(ANSWER_TIMEOUT, |fake| fake.command_names().iter().any(|n| n == "bash")).await;
    assert!(shell, "an operator may run the shell, so the list offers it: {:?}", discord.command_names());
    assert_eq!(discord.command_registrations(), 2, "once at start, once for the change");
    gateway.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_command_is_acknowledged_at_once_and_answered_in_the_same_interaction() {
    let home = tempfile::tempdir().unwrap();
    let discord = FakeDiscord::start().await;
    let fake = FakeModel::start_answering("from the model").await;
    let gateway = start(home.path(), &fake, &config(&discord, "")).await;
    registered(&discord).await;

    let id = discord.user_runs_command(GUILD_CHANNEL, Some(GUILD), USER, "tape_info", None);
    let info = answer(&discord, id).await;
    assert!(info.contains(&format!("name: dc:{GUILD_CHANNEL}")), ",tape.info's output: {info}");
    let seen = discord.interaction(id).unwrap_or_default();
    assert_eq!(seen.callbacks.len(), 1, "acknowledged once: {seen:?}");
    assert_eq!(seen.callbacks[0]["type"], 5, "a deferred answer (\"thinking…\"), the turn may take long");
    assert!(discord.sent().is_empty(), "no separate channel message: {:?}", discord.sent());

    let help = discord.user_runs_command(DM_CHANNEL, None, USER, "help", None);
    let listed = answer(&discord, help).await;
    assert!(listed.starts_with("Commands you can use here:") && listed.contains("/tape_info — "), "{listed}");
    assert!(!listed.contains("/bash"), "{listed}");
    assert_eq!(fake.request_count(), 0, "the model was never asked");
    gateway.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_command_the_user_may_not_run_is_refused_in_its_answer_and_an_operator_runs_it() {
    let home = tempfile::tempdir().unwrap();
    let discord = FakeDiscord::start().await;
    let fake = FakeModel::start_answering("from the model").await;
    let gateway = start(home.path(), &fake, &config(&discord, &format!("operators = [\"dc:{OPERATOR}\"]"))).await;
    registered(&discord).await;

    let refused = discord.user_runs_command(DM_CHANNEL, None, USER, "tape_handoff", Some("release"));
    let refusal = answer(&discord, refused).await;
    assert!(refusal.contains(&format!("dc:{USER} is not an operator here")), "{refusal}");

    let allowed = discord.user_runs_command(DM_CHANNEL + 1, None, OPERATOR, "tape_info", None);
    let info = answer(&discord, allowed).await;
    assert!(info.contains("name: dc:"), "the operator runs it: {info}");
    assert_eq!(fake.request_count(), 0);
    gateway.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_long_answer_fills_the_interaction_then_follows_up_in_order() {
    let home = tempfile::tempdir().unwrap();
    let discord = FakeDiscord::start().await;
    let fake = FakeModel::start_answering("from the model").await;
    let gateway = start(home.path(), &fake, &config(&discord, &format!("operators = [\"dc:{OPERATOR}\"]"))).await;
    registered(&discord).await;

    // About 6,900 characters of output: four of Discord's 2,000-character messages.
    let id = discord.user_runs_command(DM_CHANNEL, None, OPERATOR, "bash", Some("cmd='seq 1 1500'"));
    let complete = |fake: &FakeDiscord| {
        fake.interaction(id).is_some_and(|seen| seen.followups.last().is_some_and(|text| text.contains("1500")))
    };
    let answered = discord.wait_until(ANSWER_TIMEOUT, complete).await;
    let seen = discord.interaction(id).unwrap_or_default();
    assert!(answered, "{seen:?}; calls {:?}; stderr {}", discord.calls(), gateway.stderr());
    assert!(
        seen.original_filled() && seen.original.as_deref().is_some_and(|text| text.starts_with("1\n2\n")),
        "{seen:?}"
    );
    let parts: Vec<String> = seen.original.clone().into_iter().chain(seen.followups.clone()).collect();
    assert!(parts.iter().all(|part| part.chars().count() <= 2000), "{parts:?}");
    // A part ends where a line does.
    let whole = parts.join("\n");
    let numbers: Vec<&str> = whole.lines().filter(|line| line.parse::<u32>().is_ok()).collect();
    assert_eq!(numbers.len(), 1500, "every line once, in order: {whole}");
    assert!(numbers.windows(2).all(|pair| pair[0].parse::<u32>().unwrap() + 1 == pair[1].parse::<u32>().unwrap()));
    assert!(discord.sent().is_empty(), "all of it in the interaction: {:?}", discord.sent());
    gateway.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_reply_whose_token_no_longer_works_arrives_as_a_channel_message() {
    let home = tempfile::tempdir().unwrap();
    let discord = FakeDiscord::start().await;
    let fake = FakeModel::start_answering("from the model").await;
    let gateway = start(home.path(), &fake, &config(&discord, "")).await;
    registered(&discord).await;
    // As if the turn took longer than the token's 15 minutes.
    discord.expire_tokens_once_acknowledged();

    let id = discord.user_runs_command(DM_CHANNEL, None, USER, "tape_info", None);
    let sent = discord.wait_until(ANSWER_TIMEOUT, |fake| !fake.sent().is_empty()).await;
    assert!(sent, "the reply was lost: calls {:?}", discord.calls());
    let seen = discord.interaction(id).unwrap_or_default();
    assert_eq!(seen.callbacks.len(), 1, "acknowledged: {seen:?}");
    assert!(discord.calls().contains(&"edit_interaction_message".to_string()), "the token was tried first");
    let message = &discord.sent()[0];
    assert_eq!(message.channel_id, DM_CHANNEL);
    assert!(message.content.contains(&format!("name: dc:{DM_CHANNEL}")), "{}", message.content);
    assert_eq!(message.reply_to, None, "an interaction is not a message to reply to");
    gateway.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_command_over_the_users_rate_is_answered_with_when_to_try_again() {
    let home = tempfile::tempdir().unwrap();
    let discord = FakeDiscord::start().await;
    let fake = FakeModel::start_answering("from the model").await;
    let gateway = start(home.path(), &fake, &config(&discord, "rate = { inbound_per_user = \"1/min\" }")).await;
    registered(&discord).await;

    let first = discord.user_runs_command(DM_CHANNEL, None, USER, "tape_info", None);
    assert!(answer(&discord, first).await.contains("name: dc:"));
    let second = discord.user_runs_command(DM_CHANNEL, None, USER, "tape_info", None);
    let refusal = answer(&discord, second).await;
    assert!(refusal.starts_with("You are sending too fast; try again in "), "{refusal}");
    gateway.stop().await;
}
