//! `bub mcp serve`: the tapes of this home's store, read-only, for other
//! agents over MCP on stdin and stdout (`mcp::serve`). Standard output
//! carries the protocol alone: logs and errors go to standard error.

use super::env;
use crate::db::{Durability, StoreLocation};
use crate::home::BubHome;
use anyhow::{Result, bail};
use clap::Subcommand;
use std::path::PathBuf;
use std::sync::Arc;

#[derive(Debug, Subcommand)]
pub enum McpSubcommand {
    /// Serve the tapes over MCP on stdio, read-only: tools tapes_list,
    /// tape_search and tape_read, for another agent to search and read.
    Serve {
        /// The config file whose `[store]` names the database (default:
        /// $BUB_HOME/bub.toml if it exists; BUB_DATABASE_URL wins over both).
        #[arg(long, value_name = "FILE")]
        config: Option<PathBuf>,
    },
}

pub(crate) async fn run_mcp(home: &BubHome, command: McpSubcommand) -> Result<()> {
    match command {
        McpSubcommand::Serve { config } => {
            let location = crate::setup::store_location(home, config.as_deref(), &env::vars())?;
            // Reading must not create a database: a wrong BUB_HOME would
            // otherwise serve an empty store as if it were the right one.
            if let StoreLocation::Sqlite(path) = &location
                && !path.exists()
            {
                bail!(
                    "no database at {}: nothing has run with this home yet (set BUB_HOME or --home to the home \
                     whose tapes to serve)",
                    path.display()
                );
            }
            let store = Arc::new(crate::db::open(&location, Durability::default()).await?);
            tracing::info!(store = %crate::tape::TapeStore::location(store.as_ref()), "serving the tapes over MCP on stdio");
            let served = crate::mcp::serve::serve_stdio(store.clone()).await;
            store.close().await;
            Ok(served?)
        }
    }
}
