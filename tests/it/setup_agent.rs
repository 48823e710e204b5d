//! The agent `bub` runs (built by `Setup` from variables): its session
//! commands, subagents and system prompt, against the fake model.

use crate::support;

use bub::agent::{RunOptions, StreamEvent};
use bub::db::SqliteTapeStore;
use bub::home::BubHome;
use bub::setup::Setup;
use bub::tape::TapeStore;
use serde_json::json;
use std::sync::Arc;
use support::fake_model::{FakeModel, Reply};
use tempfile::TempDir;

struct World {
    setup: Setup,
    workspace: TempDir,
    _home: TempDir,
}

async fn world(fake: &FakeModel, extra: &[(&str, &str)]) -> World {
    let home = tempfile::tempdir().unwrap();
    let workspace = tempfile::tempdir().unwrap();
    let bub_home = BubHome::at(home.path());
    let store = Arc::new(bub::db::HomeStore::from(SqliteTapeStore::open(bub_home.database()).await.unwrap()));
    let mut vars = fake.vars("openai:gpt-test");
    vars.push(("BUB_MODEL_TIMEOUT_SECONDS".into(), "5".into()));
    vars.extend(extra.iter().map(|(k, v)| (k.to_string(), v.to_string())));
    let setup = Setup::build(&bub_home, workspace.path().to_path_buf(), store, vars).unwrap();
    World { setup, workspace, _home: home }
}

async fn say(world: &World, text: &str) -> bub::agent::RunOutcome {
    world.setup.agent.run(text, RunOptions::new("ops").workspace(world.workspace.path())).collect().await
}

#[tokio::test]
async fn model_switch_applies_from_the_next_turn_and_survives_on_the_tape() {
    let fake = FakeModel::start().await;
    fake.push(Reply::text("from the switched model"));
    let world = world(&fake, &[]).await;
    let switched = say(&world, ",model openai:gpt-other").await;
    assert_eq!(switched.text, "model for this session: openai:gpt-other (from the next turn)");
    assert_eq!(say(&world, ",model").await.text, "model: openai:gpt-other");
    say(&world, "hello").await;
    assert_eq!(fake.requests()[0]["model"], "gpt-other");
    let bad = say(&world, ",model gpt-4").await;
    assert!(bad.text.starts_with("error: `gpt-4` is not provider:model"), "{}", bad.text);
}

#[tokio::test]
async fn reasoning_effort_applies_from_the_next_turn_until_cleared() {
    let fake = FakeModel::start().await;
    fake.push(Reply::text("thought hard"));
    fake.push(Reply::text("thought as usual"));
    let world = world(&fake, &[]).await;
    assert_eq!(say(&world, ",reasoning_effort").await.text, "reasoning_effort: the provider's default");
    let set = say(&world, ",reasoning_effort high").await;
    assert_eq!(set.text, "reasoning_effort for this session: high (from the next turn)");
    assert_eq!(say(&world, ",reasoning_effort").await.text, "reasoning_effort: high");
    say(&world, "hello").await;
    assert_eq!(fake.requests()[0]["reasoning_effort"], "high");
    let bad = say(&world, ",reasoning_effort 'very high'").await;
    assert!(bad.text.starts_with("error: `very high` is not a reasoning effort level"), "{}", bad.text);
    let cleared = say(&world, ",reasoning_effort ''").await;
    assert_eq!(cleared.text, "reasoning_effort reset to the provider's default from the next turn");
    say(&world, "hello again").await;
    assert!(fake.requests()[1].get("reasoning_effort").is_none(), "{}", fake.requests()[1]);
    let tape = world.setup.agent.tape("ops").unwrap();
    let switches = tape
        .read(&bub::tape::TapeQuery::all().kinds([bub::tape::EntryKind::Event]).named("reasoning_effort_switch"))
        .await
        .unwrap();
    assert_eq!(switches.len(), 2, "both switches are on the tape");
}

#[tokio::test]
async fn help_lists_commands_with_their_arguments() {
    let fake = FakeModel::start().await;
    let world = world(&fake, &[]).await;
    let help = say(&world, ",help").await.text;
    assert!(help.lines().any(|l| l.starts_with("  ,fs.read path offset limit")), "{help}");
    assert!(help.contains(",model model_id"), "{help}");
    assert_eq!(fake.request_count(), 0);
}

#[tokio::test]
async fn quit_stops_the_sessions_background_shells() {
    let fake = FakeModel::start().await;
    let world = world(&fake, &[]).await;
    let started = say(&world, ",bash 'sleep 30' background=true").await.text;
    assert!(started.starts_with("started: bash-"), "{started}");
    let tape = world.setup.agent.tape("ops").unwrap();
    assert_eq!(world.setup.shells.shell_ids(tape.name()).len(), 1);
    let bye = say(&world, ",quit").await.text;
    assert_eq!(bye, "bye (1 background shell(s) stopped)");
    assert!(world.setup.shells.shell_ids(tape.name()).is_empty());
    let shell = started.trim_start_matches("started: ").trim();
    let gone = say(&world, &format!(",bash.output {shell}")).await.text;
    assert!(gone.contains("no background shell"), "{gone}");
}

#[tokio::test]
async fn a_temp_subagent_answers_and_leaves_no_tape() {
    let fake = FakeModel::start().await;
    fake.push(Reply::tool_calls(vec![("subagent", json!({"prompt": "count to three"}))]))
        .push(Reply::text("one two three"))
        .push(Reply::text("The subagent counted."));
    let world = world(&fake, &[]).await;
    let outcome = say(&world, "delegate counting").await;
    assert_eq!(outcome.text, "The subagent counted.");
    let result = outcome.events.iter().find_map(|e| match e {
        StreamEvent::ToolResult { output, .. } => Some(output.clone()),
        _ => None,
    });
    assert_eq!(result.as_deref(), Some("one two three"));
    let child_request = &fake.requests()[1];
    let child_tools: Vec<String> = child_request["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["function"]["name"].as_str().unwrap().to_string())
        .collect();
    assert!(!child_tools.contains(&"subagent".to_string()), "no recursion");
    assert_eq!(child_request["messages"].as_array().unwrap().last().unwrap()["content"], "count to three");
    let tapes: Vec<String> = world.setup.store.list().await.unwrap().into_iter().map(|t| t.name).collect();
    assert!(tapes.iter().all(|t| !t.starts_with("temp/")), "{tapes:?}");
}

#[tokio::test]
async fn the_system_prompt_carries_agents_md_tools_and_skills() {
    let fake = FakeModel::start().await;
    fake.push(Reply::text("ok"));
    let world = world(&fake, &[]).await;
    std::fs::write(world.workspace.path().join("AGENTS.md"), "Always answer in French.").unwrap();
    let skill = world.workspace.path().join(".agents/skills/deploy-check");
    std::fs::create_dir_all(&skill).unwrap();
    std::fs::write(
        skill.join("SKILL.md"),
        "---\nname: deploy-check\ndescription: Check a deploy before announcing it.\n---\nRun the checks.",
    )
    .unwrap();
    say(&world, "hi").await;
    let system = fake.requests()[0]["messages"][0]["content"].as_str().unwrap().to_string();
    assert!(system.starts_with("You are bub"), "{system}");
    assert!(system.contains("Always answer in French."), "{system}");
    assert!(system.contains("<available_tools>") && system.contains("- fs_read: "), "{system}");
    assert!(system.contains("<available_skills>") && system.contains("deploy-check: Check a deploy"), "{system}");
    assert!(!system.contains("- help:"), "command-only tools are not offered to the model");
}

#[tokio::test]
async fn bad_variables_are_named() {
    let fake = FakeModel::start().await;
    let home = tempfile::tempdir().unwrap();
    let bub_home = BubHome::at(home.path());
    let store = Arc::new(bub::db::HomeStore::from(SqliteTapeStore::open(bub_home.database()).await.unwrap()));
    let mut vars = fake.vars("openai:gpt-test");
    vars.push(("BUB_COMMAND_PREFIX".into(), "two words".into()));
    let error = Setup::build(&bub_home, home.path().into(), store.clone(), vars).err().unwrap().to_string();
    assert!(error.starts_with("BUB_COMMAND_PREFIX=\"two words\""), "{error}");
    let vars = vec![("BUB_MAX_STEPS".to_string(), "many".to_string())];
    let error = Setup::build(&bub_home, home.path().into(), store.clone(), vars).err().unwrap().to_string();
    assert_eq!(error, "BUB_MAX_STEPS=\"many\": must be a whole number");
    let vars = vec![("BUB_ENVIRONMENT_IDLE_SECONDS".to_string(), "-5".to_string())];
    let error = Setup::build(&bub_home, home.path().into(), store.clone(), vars).err().unwrap().to_string();
    assert_eq!(error, "BUB_ENVIRONMENT_IDLE_SECONDS=\"-5\": must be a whole number");
    let vars = vec![("BUB_CONFINE_FS".to_string(), "maybe".to_string())];
    let error = Setup::build(&bub_home, home.path().into(), store, vars).err().unwrap().to_string();
    assert_eq!(error, "BUB_CONFINE_FS=\"maybe\": must be true or false");
}

#[tokio::test]
async fn with_confinement_file_tools_cannot_leave_the_workspace() {
    let fake = FakeModel::start().await;
    let world = world(&fake, &[("BUB_CONFINE_FS", "true")]).await;
    let outside = world.workspace.path().parent().unwrap().join("outside-secret.txt");
    std::fs::write(&outside, "secret").unwrap();
    let options = || RunOptions::new("ops").workspace(world.workspace.path());
    let refused = world.setup.agent.run(",fs.read ../outside-secret.txt", options()).collect().await.text;
    assert!(refused.starts_with("error: ") && refused.contains("leaves the workspace"), "{refused}");
    let absolute = format!(",fs.write {} overwritten", outside.display());
    let refused = world.setup.agent.run(absolute, options()).collect().await.text;
    assert!(refused.contains("leaves the workspace"), "{refused}");
    assert_eq!(std::fs::read_to_string(&outside).unwrap(), "secret");
    let inside = world.setup.agent.run(",fs.write notes/a.txt fine", options()).collect().await.text;
    assert!(inside.starts_with("wrote: "), "{inside}");
    let cwd = world.setup.agent.run(",bash pwd cwd=..", options()).collect().await.text;
    assert!(cwd.contains("leaves the workspace"), "{cwd}");
}

#[tokio::test]
async fn sessions_without_a_workspace_get_their_own_under_bub_home() {
    let fake = FakeModel::start().await;
    let world = world(&fake, &[]).await;
    let out = world.setup.agent.run(",bash pwd", RunOptions::new("telegram:-100/7")).collect().await.text;
    assert!(out.trim_end().ends_with("workspaces/telegram%3A-100%2F7"), "{out}");
    world.setup.shutdown().await;
}

#[tokio::test]
async fn a_skill_named_with_a_dollar_is_inlined_in_that_steps_system_prompt() {
    let fake = FakeModel::start().await;
    fake.push(Reply::text("deploying"));
    fake.push(Reply::text("hi"));
    let world = world(&fake, &[]).await;
    let skill = world.workspace.path().join(".agents/skills/deploy");
    std::fs::create_dir_all(&skill).unwrap();
    std::fs::write(skill.join("SKILL.md"), "---\nname: deploy\ndescription: Deploys.\n---\nRun ./deploy.sh").unwrap();
    say(&world, "please $deploy the app").await;
    say(&world, "thanks").await;
    let system = |n: usize| fake.requests()[n]["messages"][0]["content"].as_str().unwrap_or_default().to_string();
    assert!(system(0).contains("<skill name=\"deploy\">"), "{}", system(0));
    assert!(system(0).contains("Run ./deploy.sh"));
    assert!(system(1).contains("- deploy: Deploys.") && !system(1).contains("<skill name="), "{}", system(1));
}
