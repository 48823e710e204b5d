//! The gateway inside your own program: an agent with one canned answer (no
//! model needed), a webhook channel, the durable inbox/outbox in a SQLite
//! file, and the HTTP server — started by the same builder `bub gateway`
//! uses, with every file (database, lock, workspaces, archives, code-mode
//! stubs) in one directory of your choosing.
//!
//! ```sh
//! cargo run --example embedded_gateway
//! # then sign and POST to http://127.0.0.1:8090/webhook/hooks (see the README) with secret "example-secret"
//! ```

use bub::agent::events::{BeforeLlmCall, LlmCallDecision};
use bub::config::GatewayConfig;
use bub::gateway::Gateway;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let dir = std::env::temp_dir().join("bub-embedded-gateway");
    // Locks the directory (one gateway per home) and opens its database.
    let gateway = Gateway::builder(&dir).on_notice(|notice| eprintln!("{notice}")).open().await?;

    // Any agent works, as long as its tapes are in the gateway's store and its
    // sessions' environments come from the gateway (confined as each chat's
    // policy says): `agent_builder` sets both. This one answers without a model.
    let agent = gateway.agent_builder().command_prefix(",").build();
    agent.events().on_sync(|call: &mut BeforeLlmCall| {
        call.decision = Some(LlmCallDecision::Finish("Hello from an embedded bub.".into()));
        Ok(())
    });

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
    // Policy enforcement, the `,policy` and `,pairing` commands, the channels and
    // the HTTP server come with the start; Ctrl-C stops it gracefully.
    let shutdown = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    let running = gateway.config(config).start(agent, shutdown).await?;
    println!("listening on http://{}/webhook/hooks", running.local_addr());
    running.wait().await;
    Ok(())
}
