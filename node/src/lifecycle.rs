//! The life of one node process: register in the membership table, prove the store works,
//! serve until SIGTERM or Ctrl-C, then record that the node left.
//!
//! Start-up writes this node's membership row (status `Active`) and reads it back in a
//! separate transaction: a node that cannot write and read its own row does not start.
//! Shutdown rewrites the row with status `Left`, so that peers can tell a clean leave from a
//! crash (a crashed node's row stays `Active` with a stale heartbeat).
//!
//! Before it opens the store, the node reads the cluster cookie and loads its TLS certificates
//! and keys (`crate::secret`, `crate::tls`): a missing or bad file stops it with an error
//! naming the setting and the path. Between start-up and shutdown, the node starts the
//! cluster transport and its shard region, takes its shard leases (one lease round before serving), heartbeats and rebalances every
//! `cluster.heartbeat-interval` (taking over a peer whose links closed once it has been silent for
//! `cluster.suspect-confirm`), serves the HTTP gateway over the front door to its user actors
//! (which sends requests for users it does not own to their owners) and runs the maintenance jobs. SIGTERM, or the end of a drain,
//! stops accepting connections, lets in-flight requests and the writes already queued at
//! user actors finish (bounded by `http.shutdown-grace`), releases every lease so others
//! take the shards at once, and exits.

use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use engram_actors::clock::SystemClock;
use engram_actors::cluster::LeaseManager;
use engram_actors::directory::Directory;
use engram_actors::embed::Embedder;
use engram_actors::front::{PeerLink, Users};
use engram_actors::model::entities::EntityExtractor;
use engram_actors::ownership::{LeaseSettings, Ownership};
use engram_actors::services::{Metrics, Services};

use engram_inference::EmbeddingPool;
use engram_storage::model::{Member, MemberStatus, Timestamp};
use engram_storage::{Keyspace, Store, cluster};
use tokio::signal::unix::{Signal, SignalKind, signal};
use tracing::info;

use crate::cluster::Transport;
use crate::config::Config;
use crate::error::{Error, Result};
use crate::http::{AppState, Limits, router};
use crate::metrics::NodeMetrics;

/// Runs the node until a shutdown signal, then leaves the cluster cleanly.
pub async fn run(config: Config) -> Result<()> {
    // Before anything else, so that a signal sent during start-up is not fatal.
    let mut shutdown = Shutdown::install()?;
    // Secrets and certificates next: a bad file stops the node before it touches the store.
    let cookie = crate::secret::cookie(&config)?;
    let gateway_tls = crate::tls::gateway(&config)?;
    let cluster_tls = crate::tls::cluster(&config)?;
    let links = if cluster_tls.is_some() {
        "mutual-tls"
    } else {
        "tcp"
    };

    let admin_key = config.security.admin_key().map_err(Error::Secret)?;
    let store = crate::store::open(&config).await?;
    let keyspace = match &config.security.master_key_file {
        Some(path) => {
            let keys = engram_storage::crypto::MasterKeys::from_file(path)
                .map_err(Error::storage("loading security.master-key-file"))?
                .with_cipher(config.security.cipher);
            info!(
                current_key = engram_storage::crypto::KeyService::current(&keys),
                cipher = config.security.cipher.name(),
                "user values are sealed at rest"
            );
            Keyspace::new(&config.storage.root_prefix).with_master_keys(keys)
        }
        None => Keyspace::new(&config.storage.root_prefix),
    };
    let node = config.node.id.clone();
    // Bind first, so that the membership row names the address peers can really reach
    // (http.listen may ask for port 0).
    let listener = tokio::net::TcpListener::bind(&config.http.listen)
        .await
        .map_err(|source| Error::Io {
            step: format!("binding http.listen {}", config.http.listen),
            source,
        })?;
    let http_addr = listener.local_addr().map_err(|source| Error::Io {
        step: "reading the bound address".to_owned(),
        source,
    })?;
    let (transport, cluster_addr) =
        Transport::start(&node, &config.cluster.listen, cookie, cluster_tls)
            .await
            .map_err(|source| Error::Io {
                step: format!(
                    "starting the cluster transport on {}",
                    config.cluster.listen
                ),
                source,
            })?;
    let started_at = now();
    let member = Member {
        node_id: node.clone(),
        http_addr: http_addr.to_string(),
        cluster_addr: cluster_addr.clone(),
        started_at,
        heartbeat_at: started_at,
        status: MemberStatus::Active,
    };
    register(&store, &keyspace, member.clone()).await?;

    let lexicon = config.memory.lexicon.clone();
    let extractor = tokio::task::spawn_blocking(move || EntityExtractor::new(&lexicon))
        .await
        .map_err(|e| Error::Io {
            step: "loading the segmenter".to_owned(),
            source: e.into(),
        })?;
    let embedder = if config.inference.enabled {
        let pool = EmbeddingPool::start(config.inference.pool()).await?;
        Some(Embedder::new(pool, config.inference.model))
    } else {
        info!("inference disabled: memories are ranked by words, recency and salience");
        None
    };
    let lease_settings = LeaseSettings {
        node_id: node.clone(),
        heartbeat_interval: config.cluster.heartbeat_interval,
        lease_timeout: config.cluster.lease_timeout,
        suspect_confirm: config.cluster.suspect_confirm,
    };
    // Logs name users by a pseudonym keyed with the audit trail's pepper (the same secret on
    // every node of the deployment; the audit trail reads the same row below).
    let pepper = {
        let (ks, fresh) = (keyspace.clone(), rand::random::<[u8; 32]>());
        store
            .run(move |txn| engram_storage::access::audit_pepper(txn, &ks, fresh))
            .await
            .map_err(Error::storage("reading the pseudonym key"))?
    };
    let services = Services {
        store: store.clone(),
        keyspace: keyspace.clone(),
        clock: Arc::new(SystemClock),
        extractor: Arc::new(extractor),
        embedder: embedder.clone(),
        ownership: Some(Ownership::new(&lease_settings)),
        settings: engram_actors::services::Settings {
            log_pepper: engram_actors::placement::LogPepper::new(pepper),
            ..config.actor_settings()
        },
        metrics: Arc::new(Metrics::default()),
    };
    let directory = Directory::new(services);
    // Take this node's shards before serving: a lone node takes all of them here; a node
    // joining a cluster gets its share as the current owners hand them off.
    let leases = LeaseManager::new(lease_settings, member.clone(), Arc::clone(&directory))
        .map_err(|e| Error::Cluster(e.to_string()))?;
    let first = leases
        .round()
        .await
        .map_err(|e| Error::Cluster(format!("first lease round: {e}")))?;
    info!(node = %node, live = first.live, held = first.held, "shard leases taken");
    // A peer whose links close is taken over after cluster.suspect-confirm of silence.
    transport.watch_links(Arc::clone(&leases));
    let (lease_stop, lease_stopped) = tokio::sync::watch::channel(false);
    let lease_task = tokio::spawn(Arc::clone(&leases).run(lease_stopped));
    let metrics = Arc::new(NodeMetrics::new());
    let jobs = crate::jobs::spawn(&config.jobs, &directory, &metrics);
    let clock: engram_actors::clock::SharedClock = Arc::new(SystemClock);
    let audit = crate::audit::AuditLog::start(
        store.clone(),
        keyspace.clone(),
        clock,
        (
            config.security.audit_retention,
            config.security.audit,
            config.security.audit_reads == crate::config::AuditReads::Batched,
        ),
        Arc::clone(&metrics),
    )
    .await
    .map_err(Error::storage("starting the audit trail"))?;
    let auth = crate::auth::Authenticator::new(
        store.clone(),
        keyspace.clone(),
        Some(&admin_key),
        crate::auth::RateLimiter::new(config.security.rate_limit, config.security.rate_burst),
        config.security.key_lookups(),
    );
    let link: Arc<dyn PeerLink> = transport.clone();
    let users = Arc::new(Users::new(
        Arc::clone(&directory),
        Some(link),
        config.cluster.handoff_wait,
    ));
    let state = AppState {
        users: Arc::clone(&users),
        auth: Arc::new(auth),
        audit,
        metrics,
        token_budget: config.memory.token_budget,
        lease_timeout: config.cluster.lease_timeout,
        cluster: Some(Arc::clone(&transport)),
        max_body_bytes: config.http.max_body_bytes,
    };
    let limits = Limits {
        max_body_bytes: config.http.max_body_bytes,
        max_in_flight: config.http.max_in_flight,
    };
    let app = router(state, limits);
    // Peers' requests for users this node owns come in through the same front door.
    transport
        .start_region(users)
        .await
        .map_err(|source| Error::Io {
            step: "starting the shard region".to_owned(),
            source,
        })?;
    let dialer = spawn_dialer(
        Arc::clone(&transport),
        Arc::clone(leases.ownership()),
        config.cluster.seeds.clone(),
        config.cluster.heartbeat_interval,
    );
    info!(
        node = %node,
        backend = store.backend(),
        http = %http_addr,
        https = gateway_tls.is_some(),
        cluster = %config.cluster.listen,
        links,
        shards = config.cluster.shards,
        "node started"
    );

    let (signal_tx, signal_rx) = tokio::sync::oneshot::channel();
    let drained = Arc::clone(&leases);
    let stop = async move {
        let signal = tokio::select! {
            signal = shutdown.wait() => signal,
            () = drained.drained() => "drained",
        };
        let _ = signal_tx.send(signal);
    };
    let grace = config.http.shutdown_grace;
    let served = match gateway_tls {
        Some(tls) => {
            let listener =
                crate::tls::TlsListener::new(listener, tls).map_err(|source| Error::Io {
                    step: "serving https".to_owned(),
                    source,
                })?;
            crate::http::serve(listener, app, stop, grace).await
        }
        None => crate::http::serve(listener, app, stop, grace).await,
    };
    served.map_err(|source| Error::Io {
        step: "serving http".to_owned(),
        source,
    })?;
    let signal = signal_rx.await.unwrap_or("server exit");
    info!(node = %node, signal, "shutting down");
    for job in jobs {
        job.abort();
    }
    let _ = lease_stop.send(true);
    let _ = lease_task.await;
    dialer.abort();
    // Finish the queued writes, release every lease (so that other nodes take the shards at
    // once) and mark this node left.
    leases
        .leave(grace)
        .await
        .map_err(|e| Error::Cluster(format!("leaving the cluster: {e}")))?;
    transport.stop();
    if let Some(embedder) = embedder {
        embedder.pool().clone().shutdown().await;
    }
    crate::store::close(store, config.storage.backend);
    info!(node = %node, "node stopped");
    Ok(())
}

/// Dials the seeds once, then every live member whose region is not reachable, every
/// heartbeat interval (ractor_cluster does not reconnect by itself).
fn spawn_dialer(
    transport: Arc<Transport>,
    ownership: Arc<Ownership>,
    seeds: Vec<String>,
    every: std::time::Duration,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        for seed in seeds {
            if let Err(err) = transport.connect(&seed).await {
                tracing::info!(seed = %seed, error = %err, "seed not reachable");
            }
        }
        let mut tick = tokio::time::interval(every);
        loop {
            tick.tick().await;
            transport.dial(&ownership.live_members()).await;
        }
    })
}

/// Writes `member` and reads it back in a second transaction: the start-up self-check.
async fn register(store: &Store, keyspace: &Keyspace, member: Member) -> Result<()> {
    let written = member.clone();
    let ks = keyspace.clone();
    store
        .run(move |txn| cluster::put_member(txn, &ks, &written))
        .await
        .map_err(Error::storage("writing the membership row"))?;
    let ks = keyspace.clone();
    let node = member.node_id.clone();
    let read = store
        .read(move |txn| cluster::member(txn, &ks, &node))
        .await
        .map_err(Error::storage("reading the membership row back"))?;
    match read {
        Some(read) if read == member => Ok(()),
        Some(_) => Err(Error::SelfCheck(format!(
            "membership row of {} read back differs from the one written",
            member.node_id
        ))),
        None => Err(Error::SelfCheck(format!(
            "membership row of {} is missing right after it was written",
            member.node_id
        ))),
    }
}

/// The wall clock as a storage timestamp. Only membership bookkeeping reads it here; the
/// memory model gets an injected clock.
fn now() -> Timestamp {
    let millis = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis());
    Timestamp(i64::try_from(millis).unwrap_or(i64::MAX))
}

/// The shutdown signals, registered up front.
struct Shutdown {
    term: Signal,
    interrupt: Signal,
}

impl Shutdown {
    fn install() -> Result<Self> {
        let install = |kind: SignalKind, name: &str| {
            signal(kind).map_err(|source| Error::Io {
                step: format!("installing the {name} handler"),
                source,
            })
        };
        Ok(Shutdown {
            term: install(SignalKind::terminate(), "SIGTERM")?,
            interrupt: install(SignalKind::interrupt(), "SIGINT")?,
        })
    }

    /// Waits for SIGTERM or SIGINT (Ctrl-C) and says which arrived.
    async fn wait(&mut self) -> &'static str {
        tokio::select! {
            _ = self.term.recv() => "SIGTERM",
            _ = self.interrupt.recv() => "SIGINT",
        }
    }
}
