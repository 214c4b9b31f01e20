//! Figures that other modules of the node report for `/metrics`: the key lookups of the
//! authenticator ([`crate::auth`]) and the cluster transport's counters ([`crate::cluster`]).
//! They arrive as plain snapshots, so the metrics know neither module; each module fills its
//! own ([`Authenticator::lookups`](crate::auth::Authenticator::lookups),
//! [`TransportMetrics::counts`](crate::cluster::TransportMetrics::counts)).

use std::fmt::Write;
use std::sync::atomic::Ordering;

use engram_actors::front::FrontMetrics;

/// Key lookups of the authenticator so far.
#[derive(Debug, Clone, Copy, Default)]
pub struct KeyLookups {
    /// Unknown key ids remembered (the negative cache's size).
    pub unknown_cached: usize,
    /// Key rows read from storage.
    pub storage_reads: u64,
    /// Lookups answered by the cache of negative answers.
    pub negative_hits: u64,
    /// Lookups refused by the per-address limit (no storage read).
    pub refused_by_address: u64,
    /// Tokens refused as malformed (no storage read).
    pub malformed: u64,
    /// Reads of the list of key ids.
    pub list_reads: u64,
}

/// Counters of the cluster transport so far.
#[derive(Debug, Clone, Copy, Default)]
pub struct LinkCounts {
    /// Dials of peers.
    pub dials: u64,
    /// Inbound links whose TLS handshake failed.
    pub handshake_failures: u64,
    /// Inbound links that did not finish their TLS handshake, or authenticate, in time.
    pub handshake_timeouts: u64,
}

/// Key lookups: storage reads of key rows, answers from the negative cache, lookups refused
/// by the per-address limit, malformed tokens, and the negative cache's size.
pub(super) fn render_lookups(text: &mut String, lookups: &KeyLookups) {
    let _ = write!(
        text,
        "# HELP engram_key_unknown_cached Unknown key ids remembered (a fixed-size cache)
\
         # TYPE engram_key_unknown_cached gauge
engram_key_unknown_cached {}
",
        lookups.unknown_cached
    );
    for (name, help, value) in [
        (
            "key_lookups",
            "Key rows read from storage to authenticate a request",
            lookups.storage_reads,
        ),
        (
            "key_lookups_negative_cached",
            "Unknown key ids answered from the negative cache (no storage read)",
            lookups.negative_hits,
        ),
        (
            "key_lookups_refused",
            "Key lookups refused by the per-address limit (security.key-lookup-rate)",
            lookups.refused_by_address,
        ),
        (
            "key_tokens_malformed",
            "Bearer tokens refused as malformed (no storage read)",
            lookups.malformed,
        ),
        (
            "key_list_reads",
            "Reads of the list of key ids, for an address over its key-lookup budget",
            lookups.list_reads,
        ),
    ] {
        counter(text, name, help, value);
    }
}

/// The front door's counters of requests between nodes (`f`) and the transport's (`links`).
pub(super) fn render_links(text: &mut String, f: &FrontMetrics, links: &LinkCounts) {
    for (name, help, value) in [
        (
            "requests_forwarded",
            "Requests this node sent to their user's owner (each counted once)",
            f.forwarded.load(Ordering::Relaxed),
        ),
        (
            "requests_served_for_peers",
            "Requests served for peers",
            f.served_for_peers.load(Ordering::Relaxed),
        ),
        (
            "forward_failures",
            "Attempts at an owner that failed and were retried or refused",
            f.forward_failures.load(Ordering::Relaxed),
        ),
        (
            "bad_frames",
            "Malformed front-door frames received from peers",
            f.bad_frames.load(Ordering::Relaxed),
        ),
        (
            "peer_callers_refused",
            "Requests from peers refused because the forwarded credential did not prove their caller",
            f.refused_callers.load(Ordering::Relaxed),
        ),
        ("peer_dials", "Dials of peers", links.dials),
        (
            "link_handshake_failures",
            "Inbound cluster links whose TLS handshake failed",
            links.handshake_failures,
        ),
        (
            "link_handshake_timeouts",
            "Inbound cluster links that did not finish their TLS handshake, or authenticate, in time",
            links.handshake_timeouts,
        ),
    ] {
        counter(text, name, help, value);
    }
}

/// One counter, `engram_{name}_total`.
fn counter(text: &mut String, name: &str, help: &str, value: u64) {
    let _ = write!(
        text,
        "# HELP engram_{name}_total {help}\n# TYPE engram_{name}_total counter\nengram_{name}_total {value}\n"
    );
}
