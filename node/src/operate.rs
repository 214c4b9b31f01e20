//! Operator commands that work on the store directly, so they need no running node to talk
//! to: `engram-node status` (members, liveness, shards per node, leases) and
//! `engram-node drain` (ask a node to hand off its shards and exit, then follow it), and
//! `engram-node keys` (API key management; the command acts as the root, principal `cli`, and
//! each change is written to the audit trail), and `engram-node backup` (an online copy of
//! the SQLite store).

use std::fmt::Write;
use std::time::{Duration, Instant};

use engram_actors::admin::KeyRing;
use engram_actors::cluster::{is_live, request_drain};
use engram_storage::types::{Member, MemberStatus, ShardLease, Timestamp};
use engram_storage::{Keyspace, Store, cluster};

use crate::auth::CLI;
use crate::config::Config;
use crate::error::{Error, Result};

async fn view(store: &Store, keyspace: &Keyspace) -> Result<(Vec<Member>, Vec<(u32, ShardLease)>)> {
    let ks = keyspace.clone();
    store
        .read(move |txn| {
            Ok((
                cluster::members(txn, &ks)?,
                cluster::shard_leases(txn, &ks)?,
            ))
        })
        .await
        .map_err(Error::storage("reading the cluster view"))
}

fn now() -> Timestamp {
    let millis = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis());
    Timestamp(i64::try_from(millis).unwrap_or(i64::MAX))
}

/// The cluster as a table: one line a member, then the shard totals.
pub fn render(
    members: &[Member],
    leases: &[(u32, ShardLease)],
    shards: u32,
    lease_timeout: Duration,
) -> String {
    let now = now();
    let mut out = format!(
        "{:<20} {:<9} {:<5} {:>13} {:>7}  {}\n",
        "node", "status", "live", "heartbeat age", "shards", "http"
    );
    for m in members {
        let held = leases
            .iter()
            .filter(|(_, l)| l.owner.as_deref() == Some(m.node_id.as_str()))
            .count();
        let _ = writeln!(
            out,
            "{:<20} {:<9} {:<5} {:>11}ms {:>7}  {}",
            m.node_id,
            format!("{:?}", m.status).to_lowercase(),
            is_live(m, now, lease_timeout),
            now.0.saturating_sub(m.heartbeat_at.0),
            held,
            m.http_addr
        );
    }
    let owned = leases.iter().filter(|(_, l)| l.owner.is_some()).count();
    let max_epoch = leases.iter().map(|(_, l)| l.epoch).max().unwrap_or(0);
    let _ = writeln!(
        out,
        "shards: {shards}, owned {owned}, without owner {}; highest epoch {max_epoch}",
        shards as usize - owned.min(shards as usize)
    );
    out
}

/// `engram-node status`.
pub async fn status(config: &Config) -> Result<String> {
    let store = crate::store::open(config).await?;
    let keyspace = Keyspace::new(&config.storage.root_prefix);
    let (members, leases) = view(&store, &keyspace).await?;
    crate::store::close(store, config.storage.backend);
    Ok(render(
        &members,
        &leases,
        config.cluster.shards,
        config.cluster.lease_timeout,
    ))
}

/// `engram-node drain`: marks `node` draining, then prints its shard count until it has left
/// (or `wait` passes, which is an error).
pub async fn drain(config: &Config, node: &str, wait: Duration) -> Result<()> {
    let store = crate::store::open(config).await?;
    let keyspace = Keyspace::new(&config.storage.root_prefix);
    let requested = request_drain(&store, &keyspace, node)
        .await
        .map_err(|e| Error::Cluster(e.to_string()))?;
    if requested.is_none() {
        return Err(Error::Cluster(format!(
            "no active member {node} (it may have left already)"
        )));
    }
    println!("{node}: draining");
    let started = Instant::now();
    let mut last = usize::MAX;
    loop {
        let (members, leases) = view(&store, &keyspace).await?;
        let held = leases
            .iter()
            .filter(|(_, l)| l.owner.as_deref() == Some(node))
            .count();
        let left = members
            .iter()
            .find(|m| m.node_id == node)
            .is_none_or(|m| m.status == MemberStatus::Left);
        if held != last {
            println!("{node}: {held} shards left to hand off");
            last = held;
        }
        if left && held == 0 {
            println!(
                "{node}: drained and left after {:.1} s",
                started.elapsed().as_secs_f64()
            );
            crate::store::close(store, config.storage.backend);
            return Ok(());
        }
        if started.elapsed() > wait {
            return Err(Error::Cluster(format!(
                "{node} still holds {held} shards after {wait:?}"
            )));
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

async fn open_keys(config: &Config) -> Result<(Store, Keyspace)> {
    let store = crate::store::open(config).await?;
    Ok((store, Keyspace::new(&config.storage.root_prefix)))
}

/// Records a key change made with the command line.
async fn audit_key(store: &Store, keyspace: &Keyspace, tenant: &str, action: &str, id: &str) {
    let entry = engram_storage::access::AuditEntry {
        id: uuid::Uuid::new_v4().to_string(),
        at: now(),
        principal: CLI.to_owned(),
        tenant: tenant.to_owned(),
        user: None,
        action: action.to_owned(),
        ids: vec![format!("key_id={id}")],
        client: None,
        outcome: 200,
    };
    let ks = keyspace.clone();
    if let Err(err) = store
        .run(move |txn| {
            engram_storage::access::append_audit(txn, &ks, std::slice::from_ref(&entry))
        })
        .await
    {
        eprintln!("warning: the key change could not be audited: {err}");
    }
}

fn key_line(key: &engram_storage::access::ApiKey) -> String {
    let state = match key.expires_at {
        Some(at) if at <= now() => "revoked",
        Some(_) => "expiring",
        None => "active",
    };
    format!(
        "{:<18} {:<16} {:<9} {:<9} {}\n",
        key.id,
        key.tenant,
        key.scope.as_str(),
        state,
        key.name
    )
}

/// The key ring of an opened store.
fn ring(store: &Store, keyspace: &Keyspace) -> KeyRing {
    KeyRing::new(store.clone(), keyspace.clone())
}

/// `engram-node keys create`.
pub async fn create_key(config: &Config, tenant: &str, scope: &str, name: &str) -> Result<String> {
    engram_actors::user::check_id("tenant", tenant).map_err(|e| Error::Cluster(e.to_string()))?;
    let scope = engram_storage::access::Scope::parse(scope).ok_or_else(|| {
        Error::Cluster(format!(
            "unknown scope {scope:?}: use gateway, operator or admin"
        ))
    })?;
    let (store, keyspace) = open_keys(config).await?;
    let new = crate::keys::create(&ring(&store, &keyspace), (tenant, scope, name), CLI, now())
        .await
        .map_err(Error::storage("creating the key"))?;
    audit_key(&store, &keyspace, tenant, "key.create", &new.key.id).await;
    crate::store::close(store, config.storage.backend);
    Ok(format!("{}\n", new.token))
}

/// `engram-node keys list`.
pub async fn list_keys(config: &Config, tenant: Option<&str>) -> Result<String> {
    let (store, keyspace) = open_keys(config).await?;
    let keys = crate::keys::list(&ring(&store, &keyspace), tenant)
        .await
        .map_err(Error::storage("listing keys"))?;
    crate::store::close(store, config.storage.backend);
    let mut out = format!(
        "{:<18} {:<16} {:<9} {:<9} {}\n",
        "key", "tenant", "scope", "state", "name"
    );
    for key in &keys {
        out.push_str(&key_line(key));
    }
    Ok(out)
}

/// `engram-node keys rotate`.
pub async fn rotate_key(config: &Config, key_id: &str, grace: Duration) -> Result<String> {
    let (store, keyspace) = open_keys(config).await?;
    let grace_ms = i64::try_from(grace.as_millis()).unwrap_or(i64::MAX);
    let new = crate::keys::rotate(
        &ring(&store, &keyspace),
        (None, key_id),
        grace_ms,
        CLI,
        now(),
    )
    .await
    .map_err(Error::storage("rotating the key"))?
    .ok_or_else(|| Error::Cluster(format!("no live key {key_id}")))?;
    audit_key(&store, &keyspace, &new.key.tenant, "key.rotate", key_id).await;
    crate::store::close(store, config.storage.backend);
    Ok(format!("{}\n", new.token))
}

/// `engram-node keys revoke`.
pub async fn revoke_key(config: &Config, key_id: &str) -> Result<String> {
    let (store, keyspace) = open_keys(config).await?;
    let key = crate::keys::revoke(&ring(&store, &keyspace), (None, key_id), now())
        .await
        .map_err(Error::storage("revoking the key"))?
        .ok_or_else(|| Error::Cluster(format!("no key {key_id}")))?;
    audit_key(&store, &keyspace, &key.tenant, "key.revoke", key_id).await;
    crate::store::close(store, config.storage.backend);
    Ok(format!("revoked {key_id}\n"))
}

/// `engram-node backup --to FILE`: a consistent copy of the SQLite store, taken while the
/// nodes on it keep serving. FoundationDB is backed up with its own tools (`fdbbackup`).
pub async fn backup(config: &Config, to: &std::path::Path) -> Result<String> {
    if config.storage.backend != crate::config::Backend::Sqlite {
        return Err(Error::Unsupported(
            "engram-node backup copies the SQLite store; back up FoundationDB with fdbbackup \
             (see docs/operations.md)"
                .to_owned(),
        ));
    }
    let (from, to) = (config.sqlite_path(), to.to_owned());
    let busy = config.storage.sqlite.busy_timeout;
    let made =
        tokio::task::spawn_blocking(move || engram_storage::sqlite::backup(&from, &to, busy))
            .await
            .map_err(|err| Error::Io {
                step: "backing up the store".to_owned(),
                source: err.into(),
            })?
            .map_err(Error::storage("backing up the store"))?;
    Ok(format!("{} ({} bytes)\n", made.path.display(), made.bytes))
}
