//! Structured logs on standard error, as text or JSON lines, filtered by the configured level.

use anyhow::{Result, anyhow};
use tracing_subscriber::EnvFilter;

use crate::config::{Config, LogFormat};

/// Installs the process's log subscriber. Standard output stays free for command results.
pub fn init(config: &Config) -> Result<()> {
    let filter =
        EnvFilter::try_new(&config.log_level).map_err(|e| anyhow!("invalid log level {:?}: {e}", config.log_level))?;
    let builder = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr);
    let installed = match config.log_format {
        LogFormat::Text => builder.try_init(),
        LogFormat::Json => builder.json().try_init(),
    };
    installed.map_err(|e| anyhow!("installing the logger: {e}"))
}
