//! The user's protected data: identity anchors (has the user given this resident ID or
//! passport number?) and the archive of raw turns past retention (admin reads: pages of whole
//! turns or digests, and whether a text is among the digests).
//!
//! Identifiers are anchored only where the keyspace has a key service: an anchor is a keyed
//! hash, and without a key it would be an unkeyed hash of a small, enumerable space. A node
//! without keys counts what it did not anchor (`Metrics::anchors_unkeyed`) and answers
//! [`AnchorMatch::Unkeyed`]. No identifier is ever logged; logs carry counts only.

use std::sync::atomic::Ordering;

use engram_storage::types::{AnchorKind, ArchiveMode, TurnDigest};

use super::UserState;
use super::validate::check_id;
use crate::error::{Error, Result};
use crate::model::pii;
use crate::request::user::{
    AnchorMatch, ArchiveCursor, ArchiveKind, ArchiveMatch, ArchivePage, ArchiveQuery,
    MAX_ARCHIVE_PAGE, MAX_MATCH_TEXT,
};

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
        let kind = query.kind.unwrap_or_else(|| {
            match self
                .args
                .services
                .settings
                .archive_mode(&self.args.key.tenant)
            {
                ArchiveMode::Digests => ArchiveKind::Digests,
                ArchiveMode::Off | ArchiveMode::FullText => ArchiveKind::Turns,
            }
        });
        let (turns, digests) = self
            .read(move |u| {
                let after = query.after.as_ref().map(|a| (a.session.as_str(), a.seq));
                let session = query.session.as_deref();
                Ok(match kind {
                    ArchiveKind::Turns => (u.archived_turns(session, after, limit)?, Vec::new()),
                    ArchiveKind::Digests => {
                        (Vec::new(), u.archived_digests(session, after, limit)?)
                    }
                })
            })
            .await?;
        let last = match kind {
            ArchiveKind::Turns => turns.last().map(|a| (&a.turn.session_id, a.turn.seq)),
            ArchiveKind::Digests => digests.last().map(|d| (&d.session_id, d.seq)),
        };
        let next = last
            .filter(|_| turns.len() + digests.len() == limit)
            .map(|(session, seq)| ArchiveCursor {
                session: session.clone(),
                seq,
            });
        Ok(ArchivePage {
            kind,
            turns,
            digests,
            next,
        })
    }

    /// The archived digests whose text of `query.role` is `query.text`.
    pub(super) async fn match_archive(&self, query: ArchiveMatch) -> Result<Vec<TurnDigest>> {
        if query.text.trim().is_empty() {
            return Err(Error::invalid("text", "must not be empty".to_owned()));
        }
        if query.text.len() > MAX_MATCH_TEXT {
            return Err(Error::invalid(
                "text",
                format!("must be at most {MAX_MATCH_TEXT} bytes"),
            ));
        }
        self.read(move |u| u.match_archived(query.role, &query.text))
            .await
    }
}
