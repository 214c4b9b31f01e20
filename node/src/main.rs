//! `engram-node`: the Engram node binary. It wires configuration, logging, storage, the user
//! actors, the maintenance jobs and the HTTP gateway together (the cluster transport comes
//! with the cluster issue).
//!
//! Commands:
//! - `engram-node run --config <path>`: load and validate the configuration, open the store,
//!   register this node, serve until SIGTERM or Ctrl-C, then leave cleanly and exit 0.
//! - `engram-node check-config --config <path>`: print `ok`, or what is wrong and exit 1.
//!
//! Architecture invariants:
//! - `node` is the only crate that knows HTTP, JSON wire types and `cluster.toml`; nothing
//!   depends on it.
//! - It talks to SQLite or FoundationDB only through `engram_storage`.
//! - `anyhow` lives in this file only; the modules return typed errors.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context;
use clap::{Args, Parser, Subcommand};

use crate::config::Config;

mod cluster;
mod config;
mod error;
mod http;
mod jobs;
mod lifecycle;
mod logging;
mod metrics;
mod store;

/// The Engram node.
#[derive(Debug, Parser)]
#[command(name = "engram-node", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the node until SIGTERM or Ctrl-C.
    Run(ConfigArg),
    /// Load and validate a configuration, print `ok` or what is wrong.
    CheckConfig(ConfigArg),
}

#[derive(Debug, Args)]
struct ConfigArg {
    /// The configuration file; `ENGRAM__SECTION__KEY` variables override its values.
    #[arg(long, short, value_name = "PATH", default_value = "cluster.toml")]
    config: PathBuf,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let outcome = match &cli.command {
        Command::Run(arg) => run(&arg.config),
        Command::CheckConfig(arg) => check_config(&arg.config),
    };
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("error: {err:#}");
            ExitCode::FAILURE
        }
    }
}

/// Loads and validates the configuration at `path`.
fn load(path: &Path) -> anyhow::Result<Config> {
    let config = Config::load(path)?;
    config
        .validate()
        .with_context(|| path.display().to_string())?;
    Ok(config)
}

fn check_config(path: &Path) -> anyhow::Result<()> {
    let config = load(path)?;
    for advice in config.advice() {
        eprintln!("warning: {advice}");
    }
    println!("ok");
    Ok(())
}

fn run(path: &Path) -> anyhow::Result<()> {
    let config = load(path)?;
    logging::init(&config.log)?;
    for advice in config.advice() {
        tracing::warn!(%advice, "questionable setting");
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("engram-node")
        .build()
        .context("cannot start the async runtime")?;
    runtime.block_on(lifecycle::run(config))?;
    Ok(())
}
