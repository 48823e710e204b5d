//! `bub pairing …`: approve, list and revoke pairings in `$BUB_HOME/bub.db`,
//! from another process while the gateway runs (it reads approvals for each
//! message that needs one, so an approval holds from the sender's next message).

use crate::db::Durability;
use crate::gateway::pairing::PairingStore;
use crate::gateway::pairing::command::{describe, record_line};
use crate::home::BubHome;
use anyhow::{Result, bail};
use clap::Subcommand;

/// Telegram group ids are negative (`-100333`): `approve` and `revoke` take
/// a value that looks like a negative number as a value, not as a flag.
#[derive(Debug, Subcommand)]
pub enum PairingSubcommand {
    /// Approved users and chats, and the codes waiting (they expire after an hour).
    List {
        /// Only this channel.
        #[arg(long)]
        channel: Option<String>,
        /// One JSON object per line.
        #[arg(long)]
        json: bool,
    },
    /// Approve the code a sender was given (or a group left): they are answered from their next message.
    #[command(allow_negative_numbers = true)]
    Approve {
        /// The channel (`[channels.NAME]`) the code was given on.
        channel: String,
        /// The code, as `ABCD-EFGH` (any case, dash or not).
        code: String,
    },
    /// Remove a user's or chat's approval (or pending code).
    #[command(allow_negative_numbers = true)]
    Revoke {
        /// The channel (`[channels.NAME]`) of the approval.
        channel: String,
        /// The platform's user id (or chat id: a Telegram group's is negative,
        /// `-100333`), as `bub pairing list` shows it.
        id: String,
    },
}

pub(crate) async fn run_pairing(home: &BubHome, command: PairingSubcommand) -> Result<()> {
    let location = crate::setup::store_location(home, None, &super::env::vars())?;
    let db = crate::db::open(&location, Durability::default()).await?;
    let store = crate::gateway::store::GatewayStore::new(db.clone()).pairing();
    let result = run(&store, command).await;
    db.close().await;
    result
}

async fn run(store: &PairingStore, command: PairingSubcommand) -> Result<()> {
    match command {
        PairingSubcommand::List { channel, json } => {
            let records = store.list(channel.as_deref()).await?;
            if json {
                for record in &records {
                    println!("{}", serde_json::to_string(record)?);
                }
            } else if records.is_empty() {
                println!("no pairings{}", channel.map(|c| format!(" on {c}")).unwrap_or_default());
            } else {
                for record in &records {
                    println!("{}", record_line(record));
                }
            }
        }
        PairingSubcommand::Approve { channel, code } => {
            let approved = store.approve(&channel, &code, "bub pairing approve").await?;
            let what = crate::gateway::pairing::store::subject_name(approved.subject);
            let who = approved.display.map_or(approved.id.clone(), |name| format!("{} ({name})", approved.id));
            println!("approved {what} {who} on {channel}");
        }
        PairingSubcommand::Revoke { channel, id } => {
            if store.revoke(&channel, &id).await? == 0 {
                let left = describe(&channel, &store.list(Some(&channel)).await?);
                bail!("{id} has no pairing on {channel}\n{left}");
            }
            println!("revoked {id} on {channel}");
        }
    }
    Ok(())
}
