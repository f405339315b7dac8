//! Opening the configured store and Tally's table on it.

use std::sync::Arc;

use anyhow::{Context, Result};
use model::Table;
use store::Store;

use crate::config::{Config, StoreSpec};

/// Opens the store `config` names and returns Tally's table on it, creating the table when it
/// does not exist yet.
pub async fn open(config: &Config) -> Result<Table> {
    Ok(open_reporting(config).await?.0)
}

/// Like [`open`], also saying whether the table was created just now.
pub async fn open_reporting(config: &Config) -> Result<(Table, bool)> {
    let (table, created, _) = open_engine(config).await?;
    Ok((table, created))
}

/// Like [`open_reporting`], also handing back the embedded engine itself when that is the store,
/// for what only it can do (backups).
pub async fn open_engine(config: &Config) -> Result<(Table, bool, Option<Arc<store_embedded::EmbeddedStore>>)> {
    let mut embedded = None;
    let store: Arc<dyn Store> = match &config.store {
        StoreSpec::Embedded(dir) => {
            let engine = Arc::new(
                store_embedded::EmbeddedStore::open(dir)
                    .with_context(|| format!("opening the embedded store at {}", dir.display()))?,
            );
            embedded = Some(engine.clone());
            engine
        }
        StoreSpec::DynamoDb(url) => Arc::new(
            store_dynamodb::DynamoDbStore::connect(url.options.clone())
                .await
                .with_context(|| format!("connecting to {url}"))?,
        ),
    };
    let table = Table::new(store, analytics::schema::tally_schema(&config.table));
    let created = match table.create_table().await {
        Ok(_) => true,
        Err(e) if is_in_use(&e) => false,
        Err(e) => return Err(e).with_context(|| format!("creating table {} in {}", config.table, config.store)),
    };
    // A store written by an earlier Tally keeps one item per raw event: convert them to event
    // blocks before anything reads or writes events (once; a marker item says it is done).
    let started = std::time::Instant::now();
    let converted = analytics::event_store::ensure_blocks(&table, &|n| {
        eprintln!("… {n} stored events converted to event blocks");
    })
    .await
    .context("converting stored events to event blocks")?;
    if converted > 0 {
        tracing::info!(
            events = converted,
            seconds = started.elapsed().as_secs_f64(),
            "converted the store's per-event items to event blocks"
        );
    }
    Ok((table, created, embedded))
}

fn is_in_use(error: &model::Error) -> bool {
    matches!(error, model::Error::Store(store::StoreError::ResourceInUse(_)))
}
