//! `bub db migrate`: applies the store's migrations and exits, for operators
//! who run schema changes as a step of their own (a Kubernetes Job, a
//! deploy script) rather than letting the first replica that starts do it.
//! Every start migrates too; both take the migrator's lock, so replicas
//! starting together migrate once.

use super::env;
use crate::db::{Durability, StoreLocation};
use crate::home::BubHome;
use anyhow::Result;
use clap::Subcommand;
use std::path::PathBuf;

#[derive(Debug, Subcommand)]
pub enum DbSubcommand {
    /// Create or upgrade the database's tables, then exit.
    Migrate {
        /// The config file whose `[store]` names the database (default:
        /// $BUB_HOME/bub.toml if it exists; BUB_DATABASE_URL wins over both).
        #[arg(long, value_name = "FILE")]
        config: Option<PathBuf>,
    },
}

pub(crate) async fn run_db(home: &BubHome, command: DbSubcommand) -> Result<()> {
    match command {
        DbSubcommand::Migrate { config } => {
            let location = crate::setup::store_location(home, config.as_deref(), &env::vars())?;
            let store = crate::db::open(&location, Durability::default()).await?;
            store.close().await;
            let shown = match &location {
                StoreLocation::Sqlite(path) => format!("sqlite:{}", path.display()),
                StoreLocation::Postgres(_) => crate::tape::TapeStore::location(&store),
            };
            println!("{shown}: migrated");
            Ok(())
        }
    }
}
