//! The user's protected data: identity anchors (has the user given this resident ID or
//! passport number?) and the archive of raw turns past retention (admin reads).
//!
//! Identifiers are anchored only where the keyspace has a key service: an anchor is a keyed
//! hash, and without a key it would be an unkeyed hash of a small, enumerable space. A node
//! without keys counts what it did not anchor (`Metrics::anchors_unkeyed`) and answers
//! [`AnchorMatch::Unkeyed`]. No identifier is ever logged; logs carry counts only.

use std::sync::atomic::Ordering;

use engram_storage::model::AnchorKind;

use super::UserState;
use super::api::{AnchorMatch, ArchiveCursor, ArchivePage, ArchiveQuery, MAX_ARCHIVE_PAGE};
use super::validate::check_id;
use crate::error::{Error, Result};
use crate::model::pii;

impl UserState {
    /// The anchors a write may record: all of them with a key service, none (counted)
    /// without.
    pub(super) fn keyed(&self, anchors: Vec<(AnchorKind, String)>) -> Vec<(AnchorKind, String)> {
        let services = &self.args.services;
        if anchors.is_empty() || services.keyspace.encryption().is_some() {
            return anchors;
        }
        services
            .metrics
            .anchors_unkeyed
            .fetch_add(anchors.len() as u64, Ordering::Relaxed);
        tracing::debug!(
            user = %services.log_id(&self.args.key),
            identifiers = anchors.len(),
            "identifiers not anchored: no key service"
        );
        Vec::new()
    }

    /// Whether the user gave `value`, from the anchors.
    pub(super) async fn match_anchor(&self, value: &str) -> Result<AnchorMatch> {
        let Some((kind, value)) = pii::anchor_of(value) else {
            return Err(Error::invalid(
                "value",
                "not a resident ID or passport number",
            ));
        };
        if self.args.services.keyspace.encryption().is_none() {
            return Ok(AnchorMatch::Unkeyed);
        }
        let found = self.read(move |u| u.find_anchor(kind, &value)).await?;
        Ok(match found {
            Some(anchor) => AnchorMatch::Matched {
                kind: anchor.kind,
                first_seen: anchor.first_seen,
            },
            None => AnchorMatch::NoMatch,
        })
    }

    /// A page of the archive.
    pub(super) async fn read_archive(&self, query: ArchiveQuery) -> Result<ArchivePage> {
        if let Some(session) = &query.session {
            check_id("session", session)?;
        }
        if let Some(after) = &query.after {
            check_id("after.session", &after.session)?;
        }
        if !(1..=MAX_ARCHIVE_PAGE).contains(&query.limit) {
            return Err(Error::invalid(
                "limit",
                format!("must be between 1 and {MAX_ARCHIVE_PAGE}"),
            ));
        }
        let limit = query.limit;
        let turns = self
            .read(move |u| {
                let after = query.after.as_ref().map(|a| (a.session.as_str(), a.seq));
                u.archived_turns(query.session.as_deref(), after, limit)
            })
            .await?;
        let next = (turns.len() == limit)
            .then(|| turns.last())
            .flatten()
            .map(|last| ArchiveCursor {
                session: last.turn.session_id.clone(),
                seq: last.turn.seq,
            });
        Ok(ArchivePage { turns, next })
    }
}
