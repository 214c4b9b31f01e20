//! Logging: one `tracing` subscriber on stderr, filtered by `log.level` unless `RUST_LOG` is
//! set, as text or JSON lines (`log.format`).
//!
//! What is logged is the callers' business, under the house rule: ids, sizes and hashes,
//! never memory text, prompts, embeddings or secrets.

use std::io::IsTerminal;

use tracing_subscriber::EnvFilter;

use crate::config::{LogConfig, LogFormat};
use crate::error::{Error, Result};

/// Installs the process's subscriber. Call once, before anything logs.
pub fn init(config: &LogConfig) -> Result<()> {
    let filter = filter(config)?;
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    let installed = match config.format {
        LogFormat::Text => builder
            .with_ansi(std::io::stderr().is_terminal())
            .try_init(),
        LogFormat::Json => builder.json().try_init(),
    };
    installed.map_err(|err| Error::LogInit(err.to_string()))
}

/// `RUST_LOG` when it is set and not empty, else `log.level`.
fn filter(config: &LogConfig) -> Result<EnvFilter> {
    let (origin, value) = match std::env::var(EnvFilter::DEFAULT_ENV) {
        Ok(value) if !value.trim().is_empty() => ("RUST_LOG", value),
        Ok(_) | Err(_) => ("log.level", config.level.clone()),
    };
    EnvFilter::try_new(&value).map_err(|err| Error::LogFilter {
        origin,
        value,
        reason: err.to_string(),
    })
}
