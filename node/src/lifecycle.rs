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
use engram_actors::distillation::Distillation;
use engram_actors::embed::Embedder;
use engram_actors::front::{PeerLink, Users};
use engram_actors::model::entities::EntityExtractor;
use engram_actors::ownership::{LeaseSettings, Ownership};
use engram_actors::pipeline::Pipeline;
use engram_actors::rerank::RerankService;
use engram_actors::services::{Metrics, Services};

use engram_inference::{
    DeviceChoice, EmbeddingPool, GenerationPool, RerankLoad, Reranker, RerankerConfig,
};
use engram_storage::types::{Member, MemberStatus, Timestamp};
use engram_storage::{Keyspace, Store, cluster};
use tracing::info;

mod shutdown;

use self::shutdown::Shutdown;
pub use self::shutdown::Stopped;
use crate::cluster::Transport;
use crate::config::Config;
use crate::error::{Error, Result};
use crate::http::{AppState, Limits, router};
use crate::metrics::NodeMetrics;

/// Runs the node until a shutdown signal, then leaves the cluster cleanly. Each step is one
/// concern below: secrets, storage, listeners and membership, the memory services, the
/// leases, the gateway, serving, and the ordered shutdown.
pub async fn run(config: Config) -> Result<Stopped> {
    // Before anything else, so that a signal sent during start-up is not fatal.
    let shutdown = Shutdown::install()?;
    // Secrets and certificates next: a bad file stops the node before it touches the store.
    let secrets = Secrets::load(&config)?;
    let (store, keyspace) = open_storage(&config).await?;
    let node = config.node.id.clone();
    let bound = Bound::bind(&config, &node, secrets.cookie, secrets.cluster_tls).await?;
    let member = bound.member(&node);
    register(&store, &keyspace, member.clone()).await?;

    let lease_settings = LeaseSettings {
        node_id: node.clone(),
        heartbeat_interval: config.cluster.heartbeat_interval,
        lease_timeout: config.cluster.lease_timeout,
        suspect_confirm: config.cluster.suspect_confirm,
    };
    let (directory, embedder) = memory(&config, &store, &keyspace, &lease_settings).await?;
    let cluster = Membership::join(lease_settings, member, &directory, &bound.transport).await?;
    let metrics = Arc::new(NodeMetrics::new());
    let jobs = crate::jobs::spawn(&config.jobs, &directory, &metrics);
    let (app, users) = gateway(
        &config,
        (&store, &keyspace),
        &secrets.admin_key,
        &directory,
        &bound.transport,
        metrics,
    )
    .await?;
    // Peers' requests for users this node owns come in through the same front door.
    bound
        .transport
        .start_region(users)
        .await
        .map_err(|source| Error::Io {
            step: "starting the shard region".to_owned(),
            source,
        })?;
    let dialer = spawn_dialer(
        Arc::clone(&bound.transport),
        Arc::clone(cluster.leases.ownership()),
        config.cluster.seeds.clone(),
        config.cluster.heartbeat_interval,
    );
    info!(
        node = %node,
        backend = store.backend(),
        http = %bound.http_addr,
        https = secrets.gateway_tls.is_some(),
        cluster = %config.cluster.listen,
        links = secrets.links,
        shards = config.cluster.shards,
        "node started"
    );

    let signal = serve(
        bound.listener,
        secrets.gateway_tls,
        app,
        (shutdown, Arc::clone(&cluster.leases)),
        (config.http.shutdown_grace, config.http.header_read_timeout),
    )
    .await?;
    info!(node = %node, signal, "shutting down");
    for job in jobs {
        job.abort();
    }
    dialer.abort();
    cluster.leave(config.http.shutdown_grace).await?;
    bound.transport.stop();
    let stopped =
        shutdown::stop_services(&node, &directory, embedder.as_ref(), store, &config).await;
    info!(node = %node, "node stopped");
    Ok(stopped)
}

/// The secrets and certificates a node needs, read before anything else.
struct Secrets {
    cookie: String,
    gateway_tls: Option<Arc<rustls::ServerConfig>>,
    cluster_tls: Option<crate::tls::ClusterTls>,
    admin_key: String,
    /// How nodes are linked, for the start-up line.
    links: &'static str,
}

impl Secrets {
    fn load(config: &Config) -> Result<Secrets> {
        let cookie = crate::secret::cookie(config)?;
        let gateway_tls = crate::tls::gateway(config)?;
        let cluster_tls = crate::tls::cluster(config)?;
        let links = if cluster_tls.is_some() {
            "mutual-tls"
        } else {
            "tcp"
        };
        let admin_key = crate::secret::admin_key(config)?;
        Ok(Secrets {
            cookie,
            gateway_tls,
            cluster_tls,
            admin_key,
            links,
        })
    }
}

/// Opens the store and the keyspace over it (sealing user values when master keys are
/// configured).
async fn open_storage(config: &Config) -> Result<(Store, Keyspace)> {
    let store = crate::store::open(config).await?;
    let keyspace = match &config.security.master_key_file {
        Some(path) => {
            let keys = crate::secret::master_keys(path)?.with_cipher(config.security.cipher);
            info!(
                current_key = engram_storage::crypto::KeyService::current(&keys),
                cipher = config.security.cipher.name(),
                "user values are sealed at rest"
            );
            Keyspace::new(&config.storage.root_prefix).with_master_keys(keys)
        }
        None => Keyspace::new(&config.storage.root_prefix),
    };
    Ok((store, keyspace))
}

/// The gateway's listener and the cluster transport, bound before the membership row is
/// written so that the row names addresses peers can really reach (either may ask for port 0).
struct Bound {
    listener: tokio::net::TcpListener,
    http_addr: std::net::SocketAddr,
    transport: Arc<Transport>,
    cluster_addr: String,
}

impl Bound {
    async fn bind(
        config: &Config,
        node: &str,
        cookie: String,
        cluster_tls: Option<crate::tls::ClusterTls>,
    ) -> Result<Bound> {
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
        let (transport, cluster_addr) = Transport::start(
            node,
            &config.cluster.listen,
            cookie,
            cluster_tls,
            config.cluster.handshake_timeout,
        )
        .await
        .map_err(|source| Error::Io {
            step: format!(
                "starting the cluster transport on {}",
                config.cluster.listen
            ),
            source,
        })?;
        Ok(Bound {
            listener,
            http_addr,
            transport,
            cluster_addr,
        })
    }

    /// This node's membership row as it starts.
    fn member(&self, node: &str) -> Member {
        let started_at = now();
        Member {
            node_id: node.to_owned(),
            http_addr: self.http_addr.to_string(),
            cluster_addr: self.cluster_addr.clone(),
            started_at,
            heartbeat_at: started_at,
            status: MemberStatus::Active,
        }
    }
}

/// The memory services (segmenter, embedding pool and pipeline, log pseudonyms) and the directory of
/// user actors over them.
async fn memory(
    config: &Config,
    store: &Store,
    keyspace: &Keyspace,
    lease_settings: &LeaseSettings,
) -> Result<(Arc<Directory>, Option<Embedder>)> {
    let lexicon = config.memory.lexicon.clone();
    let extractor = tokio::task::spawn_blocking(move || EntityExtractor::new(&lexicon))
        .await
        .map_err(|e| Error::Io {
            step: "loading the segmenter".to_owned(),
            source: e.into(),
        })?;
    let inference = &config.inference;
    let embedder = if inference.enabled {
        let pool = EmbeddingPool::start(inference.pool()).await?;
        Some(
            Embedder::new(pool, inference.model)
                .with_cache(inference.query_cache_entries)
                .with_query_deadline(Some(inference.query_deadline)),
        )
    } else {
        info!("inference disabled: memories are ranked by words, recency and salience");
        None
    };
    let pipeline = (embedder.is_some() && inference.write_behind)
        .then(|| Pipeline::new(inference.pipeline.config()));
    let distillation = distillation(config)?;
    // Logs name users by a pseudonym keyed with the audit trail's pepper (the same secret on
    // every node of the deployment; the audit trail reads the same row).
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
        pipeline: pipeline.clone(),
        distillation: distillation.clone(),
        reranker: reranker(config)?,
        ownership: Some(Ownership::new(lease_settings)),
        settings: engram_actors::services::Settings {
            log_pepper: engram_actors::placement::LogPepper::new(pepper),
            ..config.actor_settings()
        },
        metrics: Arc::new(Metrics::default()),
    };
    let directory = Directory::new(services);
    if let Some(pipeline) = &pipeline {
        // The dispatcher runs until the node stops (its rounds are fenced like every write).
        pipeline
            .start(Arc::clone(&directory))
            .await
            .map_err(|e| Error::Cluster(format!("starting the inference pipeline: {e}")))?;
    }
    if let Some(lane) = distillation.as_ref().and_then(|d| d.pipeline.as_ref()) {
        lane.start(Arc::clone(&directory))
            .await
            .map_err(|e| Error::Cluster(format!("starting the distillation pipeline: {e}")))?;
    }
    Ok((directory, embedder))
}

/// The node's reranker when `[reranker] enabled`; its model loads at the first search that
/// asks for it.
fn reranker(config: &Config) -> Result<Option<RerankService>> {
    let section = &config.reranker;
    if !section.enabled {
        return Ok(None);
    }
    let model_dir = config
        .inference
        .model_dir
        .clone()
        .unwrap_or_else(engram_inference::default_model_dir);
    let model = section.model(model_dir);
    // One worker per device: each CUDA device under `auto` (the CPU where there is none).
    let devices = match model.device {
        DeviceChoice::Auto if engram_inference::cuda_devices() > 0 => (0
            ..engram_inference::cuda_devices())
            .map(DeviceChoice::Cuda)
            .collect(),
        device @ (DeviceChoice::Auto | DeviceChoice::Cpu | DeviceChoice::Cuda(_)) => vec![device],
    };
    let loads: Vec<RerankLoad> = devices
        .into_iter()
        .map(|device| {
            let model = RerankerConfig {
                device,
                ..model.clone()
            };
            Box::new(move || Reranker::load(&model)) as RerankLoad
        })
        .collect();
    Ok(Some(RerankService::start_on(loads, section.settings())))
}

/// The node's distillation: rules, and the generation pool when `[distillation] model`.
fn distillation(config: &Config) -> Result<Option<Distillation>> {
    let section = &config.distillation;
    if !section.enabled {
        info!("distillation disabled: intents only as gateways write them");
        return Ok(None);
    }
    if !section.model {
        info!("distillation by rules only (distillation.model = false)");
        return Ok(Some(Distillation::rules_only(section.config())));
    }
    let model_dir = config
        .inference
        .model_dir
        .clone()
        .unwrap_or_else(engram_inference::default_model_dir);
    // The decoder loads on its own thread (tens of seconds on a CPU): the node serves, and
    // distils by rules, meanwhile; the pipeline's messages wait in storage until it is loaded.
    let pool = GenerationPool::spawn(section.generation(model_dir))?;
    Ok(Some(Distillation::with_model(
        section.config(),
        pool,
        section.pipeline.config(),
    )))
}

/// This node's part in the cluster: its shard leases and the task that keeps them.
struct Membership {
    leases: Arc<LeaseManager>,
    stop: tokio::sync::watch::Sender<bool>,
    task: tokio::task::JoinHandle<()>,
}

impl Membership {
    /// Takes this node's shards before serving (a lone node takes all of them here; a node
    /// joining a cluster gets its share as the current owners hand them off), then keeps
    /// heartbeating and rebalancing in a task. A peer whose links close is taken over after
    /// `cluster.suspect-confirm` of silence.
    async fn join(
        settings: LeaseSettings,
        member: Member,
        directory: &Arc<Directory>,
        transport: &Arc<Transport>,
    ) -> Result<Membership> {
        let node = settings.node_id.clone();
        let leases = LeaseManager::new(settings, member, Arc::clone(directory))
            .map_err(|e| Error::Cluster(e.to_string()))?;
        let first = leases
            .round()
            .await
            .map_err(|e| Error::Cluster(format!("first lease round: {e}")))?;
        info!(node = %node, live = first.live, held = first.held, "shard leases taken");
        transport.watch_links(Arc::clone(&leases));
        let (stop, stopped) = tokio::sync::watch::channel(false);
        let task = tokio::spawn(Arc::clone(&leases).run(stopped));
        Ok(Membership { leases, stop, task })
    }

    /// Stops the lease round, finishes the queued writes, releases every lease (so that
    /// other nodes take the shards at once) and marks this node left.
    async fn leave(self, grace: std::time::Duration) -> Result<()> {
        let _ = self.stop.send(true);
        let _ = self.task.await;
        self.leases
            .leave(grace)
            .await
            .map_err(|e| Error::Cluster(format!("leaving the cluster: {e}")))
    }
}

/// The gateway: the audit trail, authentication, the front door and the router over them.
async fn gateway(
    config: &Config,
    (store, keyspace): (&Store, &Keyspace),
    admin_key: &str,
    directory: &Arc<Directory>,
    transport: &Arc<Transport>,
    metrics: Arc<NodeMetrics>,
) -> Result<(axum::Router, Arc<Users>)> {
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
    let auth = Arc::new(crate::auth::Authenticator::new(
        store.clone(),
        keyspace.clone(),
        Some(admin_key),
        crate::auth::RateLimiter::new(config.security.rate_limit, config.security.rate_burst),
        config.security.key_lookups(),
    ));
    let link: Arc<dyn PeerLink> = transport.clone();
    let users = Arc::new(Users::new(
        Arc::clone(directory),
        Some(link),
        config.cluster.handoff_wait,
    ));
    // A peer's request is served only for the caller its forwarded token proves here.
    users.check_peer_callers(Arc::new(crate::auth::PeerCallers::new(
        Arc::clone(&auth),
        Arc::clone(&directory.services().clock),
    )));
    let state = AppState {
        users: Arc::clone(&users),
        admin: engram_actors::admin::Admin::new(Arc::clone(directory)),
        auth,
        audit,
        metrics,
        token_budget: config.memory.token_budget,
        lease_timeout: config.cluster.lease_timeout,
        cluster: Some(Arc::clone(transport)),
        extractor: Arc::clone(&directory.services().extractor),
    };
    let limits = Limits {
        max_body_bytes: config.http.max_body_bytes,
        max_in_flight: config.http.max_in_flight,
    };
    Ok((router(state, limits), users))
}

/// Serves `app` (over TLS when configured) until a signal arrives or the node has drained,
/// closing connections that take longer than `header_read` to send a request's head, then
/// lets in-flight requests finish within `grace`; returns what stopped it.
async fn serve(
    listener: tokio::net::TcpListener,
    tls: Option<Arc<rustls::ServerConfig>>,
    app: axum::Router,
    (mut shutdown, drained): (Shutdown, Arc<LeaseManager>),
    (grace, header_read): (std::time::Duration, std::time::Duration),
) -> Result<&'static str> {
    let (signal_tx, signal_rx) = tokio::sync::oneshot::channel();
    let stop = async move {
        let signal = tokio::select! {
            signal = shutdown.wait() => signal,
            () = drained.drained() => "drained",
        };
        let _ = signal_tx.send(signal);
    };
    let served = match tls {
        Some(tls) => {
            let listener =
                crate::tls::TlsListener::new(listener, tls).map_err(|source| Error::Io {
                    step: "serving https".to_owned(),
                    source,
                })?;
            crate::http::serve(listener, app, stop, grace, header_read).await
        }
        None => crate::http::serve(listener, app, stop, grace, header_read).await,
    };
    served.map_err(|source| Error::Io {
        step: "serving http".to_owned(),
        source,
    })?;
    Ok(signal_rx.await.unwrap_or("server exit"))
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
