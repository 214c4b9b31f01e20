//! The end of a node's run: the shutdown signals, and the ordered stop of the background
//! services once the gateway has drained and the leases are released: the inference
//! pipeline and the distillation lane, the generation and embedding pools, the store, and
//! then every inference thread, joined, so that the process never exits under a forward pass
//! (libtorch's static destructors would run under it: a segmentation fault).

use engram_actors::directory::Directory;
use engram_actors::embed::Embedder;
use tokio::signal::unix::{Signal, SignalKind, signal};
use tracing::{info, warn};

use crate::config::Config;
use crate::error::{Error, Result};

/// Stops the pipeline, the pools and the store of a node whose gateway has drained, then
/// joins the inference threads within `http.shutdown-grace`.
pub(super) async fn stop_services(
    node: &str,
    directory: &Directory,
    embedder: Option<&Embedder>,
    store: engram_storage::Store,
    config: &Config,
) -> Stopped {
    if let Some(pipeline) = &directory.services().pipeline {
        pipeline.stop();
    }
    let generator = directory
        .services()
        .distillation
        .as_ref()
        .and_then(|distillation| {
            // Queued messages stay in storage for the next owner; running ones are answered
            // "closed" at the next step and stay pending too.
            if let Some(lane) = &distillation.pipeline {
                lane.stop();
            }
            distillation.generator.clone()
        });
    if let Some(pool) = &generator {
        pool.close();
    }
    let grace = config.http.shutdown_grace;
    if let Some(embedder) = embedder {
        // The pool waits for interactive batches only (none is left once the gateway has
        // drained); a background batch still running stops before its next forward pass.
        if tokio::time::timeout(grace, embedder.pool().clone().shutdown())
            .await
            .is_err()
        {
            warn!(node = %node, ?grace, "embedding pool still running an interactive batch at shutdown");
        }
    }
    crate::store::close(store, config.storage.backend);
    // A background batch may still be running in the idle class: at the CPU share a busy
    // machine leaves it, its last forward pass (and the process's exit: the last thread frees
    // the memory) would crawl.
    match engram_inference::leave_idle_class() {
        Ok(0) => {}
        Ok(threads) => {
            info!(node = %node, threads, "background threads left the idle class to exit")
        }
        Err(err) => {
            warn!(node = %node, error = %err, "background threads stay in the idle class (leaving it needs CAP_SYS_NICE); on a busy machine the exit may take a while")
        }
    }
    // No inference thread may be inside libtorch when the process exits: `exit` runs
    // libtorch's static destructors, and a forward pass under them ends in a segmentation
    // fault. Each thread ends at the end of its current pass or step.
    let joined = tokio::time::timeout(grace, async {
        if let Some(embedder) = embedder {
            embedder.pool().join().await;
        }
        if let Some(pool) = &generator {
            pool.join().await;
        }
    })
    .await
    .is_ok();
    if !joined {
        warn!(node = %node, ?grace, "inference threads still running at exit; the process ends without libtorch's teardown");
    }
    Stopped {
        inference_threads_ended: joined,
    }
}

/// How a node's run ended.
#[derive(Debug, Clone, Copy)]
#[must_use]
pub struct Stopped {
    /// Whether every inference thread ended before the timeout. When one did not, the
    /// process must end without running libtorch's static destructors
    /// ([`engram_inference::exit_without_teardown`]).
    pub inference_threads_ended: bool,
}

/// The shutdown signals, registered up front.
pub(super) struct Shutdown {
    term: Signal,
    interrupt: Signal,
}

impl Shutdown {
    pub(super) fn install() -> Result<Self> {
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
    pub(super) async fn wait(&mut self) -> &'static str {
        tokio::select! {
            _ = self.term.recv() => "SIGTERM",
            _ = self.interrupt.recv() => "SIGINT",
        }
    }
}
