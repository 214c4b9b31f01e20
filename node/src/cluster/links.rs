//! Early suspicion: turns the node server's session events into the lease round's suspicion
//! of a peer ([`LeaseManager::suspect`], [`LeaseManager::trust`]). A killed process's TCP
//! connections close at once, so its sessions end within milliseconds; the lease round then
//! takes its shards once its storage heartbeat is older than `cluster.suspect-confirm`
//! instead of `cluster.lease-timeout`. A closed session decides nothing by itself: a peer
//! that keeps heartbeating keeps its shards (engram_actors::cluster explains the timing).
//!
//! A peer is suspected when its last authenticated session ends from the peer's side or the
//! network's (ractor_cluster keeps one per peer, but replaces one by another when both sides
//! dial at once, and a replaced session's end must not count), and trusted again when a
//! session with it authenticates. A session this node closes itself because the peer did
//! not answer a forwarded request in time (a partition, a paused process) raises no
//! suspicion: an unresponsive peer is taken over after the lease timeout, as before.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError};

use engram_actors::cluster::LeaseManager;
use ractor::ActorId;
use ractor_cluster::NodeEventSubscription;
use ractor_cluster::node::NodeServerSessionInformation;

/// The node server's subscriber that tells the lease round which peers' links closed. It is
/// subscribed when the transport starts, so that it counts every session, and reports to
/// the lease round once one is attached ([`LinkWatch::attach`]).
#[derive(Clone, Default)]
pub(super) struct LinkWatch(Arc<Inner>);

#[derive(Default)]
struct Inner {
    leases: OnceLock<Arc<LeaseManager>>,
    /// Authenticated sessions by peer node id.
    sessions: Mutex<HashMap<String, HashSet<ActorId>>>,
    /// Sessions this node is closing itself ([`LinkWatch::closing`]).
    closing: Mutex<HashSet<ActorId>>,
}

impl LinkWatch {
    /// Reports to `leases` from now on (once; a second lease manager is ignored).
    pub(super) fn attach(&self, leases: Arc<LeaseManager>) {
        if self.0.leases.set(leases).is_err() {
            tracing::warn!("a second lease manager was attached to the link watch; ignored");
        }
    }

    /// Records that this node is about to close `session` itself (its peer did not answer):
    /// its end then says nothing of the peer, which may be alive behind a broken network or
    /// paused, so it is not suspected. The lease timeout decides about it.
    pub(super) fn closing(&self, session: &NodeServerSessionInformation) {
        lock(&self.0.closing).insert(session.actor.get_id());
    }

    fn sessions(&self) -> MutexGuard<'_, HashMap<String, HashSet<ActorId>>> {
        lock(&self.0.sessions)
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The node id of a session's peer: ractor_cluster names a node `<node id>@<host>`.
pub(super) fn peer_of(session: &NodeServerSessionInformation) -> Option<&str> {
    let name = session.peer_name.as_ref()?.name.as_str();
    name.split('@').next().filter(|id| !id.is_empty())
}

impl NodeEventSubscription for LinkWatch {
    fn node_session_opened(&self, _session: NodeServerSessionInformation) {}

    fn node_session_authenticated(&self, session: NodeServerSessionInformation) {
        let Some(peer) = peer_of(&session) else {
            return;
        };
        self.sessions()
            .entry(peer.to_owned())
            .or_default()
            .insert(session.actor.get_id());
        if let Some(leases) = self.0.leases.get() {
            leases.trust(peer);
        }
    }

    fn node_session_disconnected(&self, session: NodeServerSessionInformation) {
        let Some(peer) = peer_of(&session) else {
            return;
        };
        let closed_here = lock(&self.0.closing).remove(&session.actor.get_id());
        let last = {
            let mut sessions = self.sessions();
            let Some(open) = sessions.get_mut(peer) else {
                // Never announced as authenticated (lost an election, or failed its cookie).
                return;
            };
            if !open.remove(&session.actor.get_id()) {
                return;
            }
            let last = open.is_empty();
            if last {
                sessions.remove(peer);
            }
            last
        };
        if last && closed_here {
            tracing::debug!(peer, "closed the last session with an unresponsive peer");
        } else if last {
            tracing::debug!(peer, addr = %session.peer_addr, "last session with a peer closed");
            match self.0.leases.get() {
                Some(leases) => leases.suspect(peer),
                None => tracing::debug!(peer, "no lease round yet to suspect the peer"),
            }
        }
    }
}
