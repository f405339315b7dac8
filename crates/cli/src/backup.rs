//! `tally backup` and `tally restore`, and the control socket through which a running
//! `tally serve` takes a backup of the store it holds open.
//!
//! The embedded store is open in one process at a time, so while `tally serve` runs, `tally
//! backup` cannot open it; it asks the server instead, over a Unix socket in the store's
//! directory (`tally.sock`). The directory is owner-only (`0700`), so only the account that
//! runs the server can connect: the socket needs no token of its own, and no HTTP route can
//! make the server write files. The server takes the backup with
//! [`EmbeddedStore::backup`](store_embedded::EmbeddedStore::backup), a consistent snapshot
//! taken while it keeps ingesting. With no server running, `tally backup` opens the store and
//! does the same itself.
//!
//! The protocol is one JSON line each way: `{"backup": "/absolute/dir"}`, answered by
//! `{"tables": …, "entries": …, "bytes": …}` or `{"error": "…"}`.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{Context, Result, anyhow, bail};
use serde_json::{Value, json};
use store_embedded::{BackupSummary, EmbeddedStore};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};

use crate::config::{Config, StoreSpec};

/// The control socket's name inside the store's directory.
pub const SOCKET: &str = "tally.sock";

/// The longest request line the socket reads: a path and a few bytes of JSON.
const MAX_REQUEST: usize = 8 * 1024;

fn summary_json(s: &BackupSummary) -> Value {
    json!({ "tables": s.tables, "entries": s.entries, "bytes": s.bytes })
}

fn embedded_dir(config: &Config, what: &str) -> Result<PathBuf> {
    match &config.store {
        StoreSpec::Embedded(dir) => Ok(dir.clone()),
        StoreSpec::DynamoDb(_) => bail!(
            "`tally {what}` copies the embedded store; on DynamoDB use its own backups: point-in-time \
             recovery (`aws dynamodb update-continuous-backups`) or an on-demand backup \
             (`aws dynamodb create-backup`), see the README"
        ),
    }
}

/// Makes `dir` absolute against the current directory, since the server resolves it in its own.
fn absolute(dir: &Path) -> Result<PathBuf> {
    if dir.is_absolute() {
        return Ok(dir.to_path_buf());
    }
    Ok(std::env::current_dir().context("reading the current directory")?.join(dir))
}

/// Serves the control socket of a running `tally serve` until the returned task is aborted.
/// A stale socket left by a killed server is replaced: the store's lock, held by this process,
/// proves no other server uses the directory.
pub fn serve_control(engine: Arc<EmbeddedStore>, store_dir: &Path) -> Result<tokio::task::JoinHandle<()>> {
    let path = store_dir.join(SOCKET);
    match std::fs::remove_file(&path) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e).with_context(|| format!("removing the stale socket {}", path.display())),
    }
    let listener = tokio::net::UnixListener::bind(&path).with_context(|| format!("listening on {}", path.display()))?;
    Ok(tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else { continue };
            let engine = engine.clone();
            tokio::spawn(async move {
                let (read, mut write) = stream.into_split();
                let mut line = String::new();
                let answer = match BufReader::new(read.take(MAX_REQUEST as u64)).read_line(&mut line).await {
                    Ok(_) => handle(engine, &line).await,
                    Err(e) => json!({ "error": format!("reading the request: {e}") }),
                };
                let _ = write.write_all(format!("{answer}\n").as_bytes()).await;
            });
        }
    }))
}

async fn handle(engine: Arc<EmbeddedStore>, line: &str) -> Value {
    let request: Value = match serde_json::from_str(line) {
        Ok(v) => v,
        Err(e) => return json!({ "error": format!("not a JSON request: {e}") }),
    };
    let Some(dir) = request.get("backup").and_then(Value::as_str) else {
        return json!({ "error": "the only request is {\"backup\": \"/absolute/dir\"}" });
    };
    let dir = PathBuf::from(dir);
    if !dir.is_absolute() {
        return json!({ "error": "the backup directory must be an absolute path" });
    }
    let started = std::time::Instant::now();
    match tokio::task::spawn_blocking(move || engine.backup(&dir).map(|s| (s, dir))).await {
        Ok(Ok((summary, dir))) => {
            tracing::info!(
                dir = %dir.display(),
                entries = summary.entries,
                bytes = summary.bytes,
                seconds = started.elapsed().as_secs_f64(),
                "backup written"
            );
            summary_json(&summary)
        }
        Ok(Err(e)) => json!({ "error": e.to_string() }),
        Err(e) => json!({ "error": format!("the backup stopped: {e}") }),
    }
}

/// `tally backup DIR`.
pub async fn backup(config: &Config, dir: &Path) -> Result<()> {
    let store_dir = embedded_dir(config, "backup")?;
    if !store_dir.join("tally.redb").is_file() {
        bail!("there is no embedded store at {} to back up", store_dir.display());
    }
    let dir = absolute(dir)?;
    let started = std::time::Instant::now();
    let (summary, how) = match EmbeddedStore::open(&store_dir) {
        Ok(engine) => {
            let target = dir.clone();
            let summary = tokio::task::spawn_blocking(move || engine.backup(&target)).await??;
            (summary_json(&summary), "the store was not in use")
        }
        Err(store::StoreError::ResourceInUse(_)) => {
            (ask_server(&store_dir, &dir).await?, "taken by the running server")
        }
        Err(e) => return Err(e).with_context(|| format!("opening the embedded store at {}", store_dir.display())),
    };
    println!("backup: {}", dir.display());
    println!("tables: {}", summary["tables"]);
    println!("entries: {}", summary["entries"]);
    println!("bytes: {}", summary["bytes"]);
    println!("seconds: {:.2}", started.elapsed().as_secs_f64());
    eprintln!("({how}; restore it with `tally restore {}`)", dir.display());
    Ok(())
}

async fn ask_server(store_dir: &Path, dir: &Path) -> Result<Value> {
    let path = store_dir.join(SOCKET);
    let stream = tokio::net::UnixStream::connect(&path).await.with_context(|| {
        format!(
            "the store at {} is in use, and its server's control socket {} does not answer (is the process \
             using it a `tally serve` of this version?)",
            store_dir.display(),
            path.display()
        )
    })?;
    let (read, mut write) = stream.into_split();
    let request = json!({ "backup": dir.to_string_lossy() });
    write.write_all(format!("{request}\n").as_bytes()).await.context("sending the backup request")?;
    let mut line = String::new();
    BufReader::new(read).read_line(&mut line).await.context("reading the server's answer")?;
    let answer: Value = serde_json::from_str(&line).map_err(|e| anyhow!("the server answered {line:?}: {e}"))?;
    if let Some(error) = answer.get("error").and_then(Value::as_str) {
        bail!("the server could not take the backup: {error}");
    }
    Ok(answer)
}

/// `tally restore BACKUP`: the backup becomes the configured store, which must not exist yet.
pub fn restore(config: &Config, backup: &Path) -> Result<()> {
    let store_dir = embedded_dir(config, "restore")?;
    let started = std::time::Instant::now();
    let summary = store_embedded::restore(backup, &store_dir).map_err(|e| match e {
        store::StoreError::Validation(m) if m.contains("not empty") => anyhow!(
            "{m}; a restore never overwrites a store: stop `tally serve`, move {} aside, and restore again",
            store_dir.display()
        ),
        e => anyhow!("{e}"),
    })?;
    println!("restored: {}", store_dir.display());
    println!("tables: {}", summary.tables);
    println!("entries: {}", summary.entries);
    println!("bytes: {}", summary.bytes);
    println!("seconds: {:.2}", started.elapsed().as_secs_f64());
    Ok(())
}
