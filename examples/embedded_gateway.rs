//! The gateway inside your own program: an agent with one canned answer (no
//! model needed), a webhook channel, the durable inbox/outbox in a SQLite
//! file, and the HTTP server — what `bub gateway` assembles, in one screen.
//!
//! ```sh
//! cargo run --example embedded_gateway
//! # then sign and POST to http://127.0.0.1:8090/webhook/hooks (see the README) with secret "example-secret"
//! ```

use bub::agent::Agent;
use bub::agent::events::{BeforeLlmCall, LlmCallDecision};
use bub::config::{GatewayConfig, LiveConfig};
use bub::db::SqliteTapeStore;
use bub::environment::Environments;
use bub::gateway::Gateway;
use bub::gateway::confinement::PolicyConfinement;
use bub::gateway::store::GatewayStore;
use bub::http::{HttpState, router};
use bub::tape::TapeStore;
use bub_channel::Channel;
use std::sync::Arc;
use std::time::Duration;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let dir = std::env::temp_dir().join("bub-embedded-gateway");
    let store = SqliteTapeStore::open(dir.join("bub.db")).await?;
    let confinement = PolicyConfinement::new();

    // Each session's environment is confined as its chat's policy says.
    let environments = Environments::new(confinement.clone(), dir.join("workspaces"), Duration::from_secs(1800));
    // Any agent works; this one answers without a model.
    let agent = Agent::builder()
        .store(Arc::new(store.clone()) as Arc<dyn TapeStore>)
        .environments(Arc::new(environments))
        .command_prefix(",")
        .build();
    agent.events().on_sync(|call: &mut BeforeLlmCall| {
        call.decision = Some(LlmCallDecision::Finish("Hello from an embedded bub.".into()));
        Ok(())
    });
    // Policy enforcement is one handler; `,policy show|explain` is one tool.
    bub::policy::enforce(&agent);
    agent.add_tool(bub::policy::policy_tool());

    // The same TOML `bub gateway --config` reads.
    let config = GatewayConfig::parse(
        r#"
        [http]
        listen = "127.0.0.1:8090"
        [policy.defaults]
        model = "canned:hello"   # any provider:model: the handler above answers before a model is called
        [channels.hooks]
        kind = "webhook"
        secrets = ["example-secret"]
        "#,
        "embedded.toml",
    )?;
    let (listen, limits, grace) = (config.http.listen, config.http.limits(), config.http.shutdown_grace());
    let live = LiveConfig::fixed(config);
    let channels: Vec<Arc<dyn Channel>> = bub::gateway::channels::from_config(&live)?;
    let gateway = Gateway::new(agent, GatewayStore::new(store), live, channels, confinement);

    let state = HttpState::new(gateway.clone());
    let listener = tokio::net::TcpListener::bind(listen).await?;
    let (stop, mut stopping) = tokio::sync::watch::channel(false);
    let server = tokio::spawn(bub::http::serve(listener, router(state.clone()), limits, async move {
        let _ = stopping.wait_for(|stopping| *stopping).await;
    }));
    gateway.start().await?;
    state.set_started();
    println!("listening on http://{listen}/webhook/hooks");
    tokio::signal::ctrl_c().await?;
    // Stop accepting, give turns in flight their grace, then let the last answers go out.
    let _ = stop.send(true);
    gateway.stop(grace).await;
    server.await?;
    Ok(())
}
