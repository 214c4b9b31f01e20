//! `engram-node`: the Engram node binary. It wires configuration, logging, storage, the user
//! actors, the shard leases and the cluster transport, the maintenance jobs and the HTTP
//! gateway together.
//!
//! Commands:
//! - `engram-node run --config <path>`: load and validate the configuration, open the store,
//!   register this node, serve until SIGTERM or Ctrl-C, then leave cleanly and exit 0.
//! - `engram-node check-config --config <path>`: print `ok`, or what is wrong and exit 1.
//! - `engram-node status --config <path>`: the cluster as the store records it (members,
//!   liveness, shards per node, leases).
//! - `engram-node drain --config <path> [--node <id>]`: ask a node (this configuration's by
//!   default) to hand off every shard and exit; follows it until it has left.
//! - `engram-node keys create|list|rotate|revoke --config <path> ...`: manage API keys in the
//!   store (an operator with the store's access acts as the root; each change is audited).
//! - `engram-node mcp [--url <node>] [--transport stdio|http]`: an MCP server whose tools
//!   call a running node's API with an API key (`mcp.rs`); it needs no configuration file.
//!
//! Architecture invariants:
//! - `node` is the only crate that knows HTTP, JSON wire types and `cluster.toml`; nothing
//!   depends on it.
//! - It talks to SQLite or FoundationDB only through `engram_storage`.
//! - `anyhow` lives in this file only; the modules return typed errors.
//! - Every route is written once, in the route table (`http/table.rs`): the router, the
//!   access rules, the audit actions and the OpenAPI document are generated from it.
//! - `auth` (keys, scopes) and `audit` (the trail's writer) know no HTTP; their middleware is
//!   in `http/middleware/`.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context;
use clap::{Args, Parser, Subcommand};

use crate::config::Config;

/// mimalloc instead of glibc's allocator: the request path allocates small objects on every
/// thread, and glibc's malloc and free took 12% of a write-heavy node's CPU time (perf,
/// docs/benchmarks.md). Built without transparent huge pages (`no_thp`): zeroing the 2 MB
/// pages it asked for had become a third of the node's CPU time under load.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

mod audit;
mod auth;
mod caller;
mod cluster;
mod config;
mod error;
mod http;
mod jobs;
mod keys;
mod lifecycle;
mod logging;
mod mcp;
mod metrics;
mod operate;
mod schedule;
mod secret;
mod store;
mod tls;

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
    /// Print the cluster: members, liveness, shards per node, leases.
    Status(ConfigArg),
    /// Hand off every shard of a node to the others, then let it exit.
    Drain(DrainArgs),
    /// Manage API keys: create, list, rotate, revoke.
    Keys(KeysArgs),
    /// Copy the SQLite store into a new file while the nodes keep serving.
    Backup(BackupArgs),
    /// Serve a running node's memory to agents as MCP tools, over stdio or streamable HTTP.
    Mcp(McpArgs),
}

#[derive(Debug, Args)]
struct McpArgs {
    /// The node's base URL.
    #[arg(long, env = "ENGRAM_URL", default_value = "http://127.0.0.1:8080")]
    url: String,
    /// The CA (PEM) that signed the node's certificate, for an https:// URL.
    #[arg(long, value_name = "PATH")]
    ca_file: Option<PathBuf>,
    /// stdio or http (streamable HTTP at http://<listen>/mcp).
    #[arg(long, value_enum, default_value = "stdio")]
    transport: McpTransport,
    /// stdio: a file holding the API key (mode 0600); without it, ENGRAM_API_KEY. Over HTTP
    /// every client sends its own key.
    #[arg(long, value_name = "PATH")]
    api_key_file: Option<PathBuf>,
    /// stdio: the tenant the root key acts for (x-engram-tenant); a tenant's key needs none.
    #[arg(long, env = "ENGRAM_TENANT")]
    tenant: Option<String>,
    /// http: where to listen (port 0: any free port; the address is printed on stderr).
    #[arg(long, default_value = "127.0.0.1:8090")]
    listen: SocketAddr,
    /// http: a Host name clients reach the server by, accepted besides loopback and the
    /// listen address (repeatable; other names are refused against DNS rebinding).
    #[arg(long = "allowed-host", value_name = "NAME")]
    allowed_hosts: Vec<String>,
    /// http: how long a connection may take to send a request's headers (or stay idle
    /// between requests) before it is closed, e.g. 10s.
    #[arg(long, default_value = "10s", value_parser = humantime_serde::re::humantime::parse_duration)]
    header_read_timeout: std::time::Duration,
}

#[derive(Debug, Clone, Copy, clap::ValueEnum)]
enum McpTransport {
    Stdio,
    Http,
}

#[derive(Debug, Args)]
struct BackupArgs {
    #[command(flatten)]
    config: ConfigArg,
    /// The backup file to write; it must not exist.
    #[arg(long, value_name = "PATH")]
    to: PathBuf,
}

#[derive(Debug, Args)]
struct KeysArgs {
    #[command(flatten)]
    config: ConfigArg,
    #[command(subcommand)]
    command: KeysCommand,
}

#[derive(Debug, Subcommand)]
enum KeysCommand {
    /// Create a key; prints its token (shown only this once).
    Create {
        /// The tenant it acts for.
        #[arg(long)]
        tenant: String,
        /// gateway, operator or admin.
        #[arg(long)]
        scope: String,
        /// A label.
        #[arg(long, default_value = "")]
        name: String,
    },
    /// List keys (never their secrets).
    List {
        /// Only this tenant's.
        #[arg(long)]
        tenant: Option<String>,
    },
    /// Replace a key by a new one; prints the new token.
    Rotate {
        /// The key id.
        key_id: String,
        /// How long the old key keeps working.
        #[arg(long, default_value = "0s", value_parser = humantime_serde::re::humantime::parse_duration)]
        grace: std::time::Duration,
    },
    /// Revoke a key at once.
    Revoke {
        /// The key id.
        key_id: String,
    },
}

#[derive(Debug, Args)]
struct DrainArgs {
    #[command(flatten)]
    config: ConfigArg,
    /// The node to drain (default: `node.id` of the configuration).
    #[arg(long)]
    node: Option<String>,
    /// Give up (exit 1) if the node has not left after this long.
    #[arg(long, default_value = "2m", value_parser = humantime_serde::re::humantime::parse_duration)]
    wait: std::time::Duration,
}

#[derive(Debug, Args)]
struct ConfigArg {
    /// The configuration file; `ENGRAM__SECTION__KEY` variables override its values.
    #[arg(long, short, value_name = "PATH", default_value = "cluster.toml")]
    config: PathBuf,
}

fn main() -> ExitCode {
    // Before any thread starts: glibc's allocator, which serves libtorch's tensors, maps large
    // blocks whole and keeps fewer heaps (docs/decisions/0023).
    engram_inference::tune_allocator();
    // Every file and directory the node creates (the data directory, the store and its WAL,
    // backups) is its owner's only, whatever umask it was started with.
    rustix::process::umask(rustix::fs::Mode::from_raw_mode(0o077));
    let cli = Cli::parse();
    let outcome = match &cli.command {
        Command::Run(arg) => run(&arg.config),
        Command::CheckConfig(arg) => check_config(&arg.config),
        Command::Status(arg) => operate(&arg.config, |config| async move {
            print!("{}", operate::status(&config).await?);
            Ok(())
        }),
        Command::Drain(args) => operate(&args.config.config, |config| async move {
            let node = args.node.clone().unwrap_or_else(|| config.node.id.clone());
            operate::drain(&config, &node, args.wait).await
        }),
        Command::Keys(args) => operate(&args.config.config, |config| async move {
            let out = match &args.command {
                KeysCommand::Create {
                    tenant,
                    scope,
                    name,
                } => operate::create_key(&config, tenant, scope, name).await?,
                KeysCommand::List { tenant } => {
                    operate::list_keys(&config, tenant.as_deref()).await?
                }
                KeysCommand::Rotate { key_id, grace } => {
                    operate::rotate_key(&config, key_id, *grace).await?
                }
                KeysCommand::Revoke { key_id } => operate::revoke_key(&config, key_id).await?,
            };
            print!("{out}");
            Ok(())
        }),
        Command::Backup(args) => operate(&args.config.config, |config| async move {
            print!("{}", operate::backup(&config, &args.to).await?);
            Ok(())
        }),
        Command::Mcp(args) => mcp(args),
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

/// Runs an operator command on a small runtime, with warnings-only logging.
fn operate<F, Fut>(path: &Path, command: F) -> anyhow::Result<()>
where
    F: FnOnce(Config) -> Fut,
    Fut: std::future::Future<Output = Result<(), error::Error>>,
{
    let config = load(path)?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    runtime.block_on(command(config))?;
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
    let stopped = runtime.block_on(lifecycle::run(config))?;
    if !stopped.inference_threads_ended {
        // Before the runtime is dropped (it would wait for them) and before `exit` runs
        // libtorch's destructors under them; the store is closed already.
        engram_inference::exit_without_teardown(0);
    }
    Ok(())
}

/// Runs the MCP server: logs on stderr (`info`, or `RUST_LOG`), never on stdout, which is
/// the stdio transport's channel.
fn mcp(args: &McpArgs) -> anyhow::Result<()> {
    logging::init(&config::LogConfig {
        level: "info,rmcp=warn".to_owned(),
        format: config::LogFormat::Text,
    })?;
    let transport = match args.transport {
        McpTransport::Stdio => mcp::Transport::Stdio {
            credentials: mcp::Credentials {
                key: mcp::api_key(args.api_key_file.as_deref())?,
                tenant: args.tenant.clone(),
            },
        },
        McpTransport::Http => {
            if args.api_key_file.is_some() {
                anyhow::bail!(
                    "--api-key-file is for --transport stdio: over HTTP every client sends \
                     its own key as `Authorization: Bearer`"
                );
            }
            if args.header_read_timeout.is_zero() {
                anyhow::bail!("--header-read-timeout must be longer than 0s");
            }
            mcp::Transport::Http {
                listen: args.listen,
                allowed_hosts: args.allowed_hosts.clone(),
                header_read_timeout: args.header_read_timeout,
            }
        }
    };
    let options = mcp::Options {
        url: args.url.clone(),
        ca_file: args.ca_file.clone(),
        transport,
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .thread_name("engram-mcp")
        .build()
        .context("cannot start the async runtime")?;
    runtime.block_on(mcp::serve(options))?;
    Ok(())
}
