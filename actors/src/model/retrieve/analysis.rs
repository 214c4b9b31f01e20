//! What indexing reads from a text: its terms, the days it speaks of and what it names, read
//! once ([`Retriever::analyse`]) and put together for each (re)index of a document
//! ([`Retriever::index_analysed`]).

use std::borrow::Borrow;
use std::hash::Hash;

use engram_storage::types::Timestamp;

use super::Retriever;
use crate::model::entities::EntityExtractor;
use crate::model::temporal::{self, DaySpan};

/// A document's text: the words it is found by, and its own text, which says what it names
/// (a turn is found by its neighbours' words too, but names only what it says itself).
#[derive(Debug, Clone, Copy)]
pub struct DocText<'a> {
    /// The words for BM25 and the days it speaks of.
    pub words: &'a str,
    /// The text its named entities are read from.
    pub own: &'a str,
}

impl<'a> From<&'a str> for DocText<'a> {
    fn from(text: &'a str) -> Self {
        DocText {
            words: text,
            own: text,
        }
    }
}

/// What indexing reads from one text, read once by [`Retriever::analyse`].
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Analysis {
    /// The terms, one after another: term `i` ends at `ends[i]`.
    pub(super) terms: Box<str>,
    pub(super) ends: Box<[u32]>,
    /// The days the text speaks of, in order of first mention (empty while date handling is
    /// off or the text has no time of writing).
    pub(super) days: Box<[DaySpan]>,
    /// Hashes of what the text names, sorted (empty while entity handling is off).
    pub(super) names: Box<[u64]>,
}

impl Analysis {
    /// The terms, in the order of the text.
    pub(super) fn terms(&self) -> impl Iterator<Item = &str> {
        let mut start = 0;
        self.ends.iter().map(move |&end| {
            let end = end as usize;
            let term = &self.terms[start..end];
            start = end;
            term
        })
    }
}

impl<D: Clone + Eq + Hash + Borrow<str>> Retriever<D> {
    /// What [`Retriever::index_analysed`] reads from `text`, written at `written_at`: its terms,
    /// the days it speaks of (resolved against its own time of writing) and what it names.
    /// Read once and kept, a text need not be read again each time it is indexed beside
    /// another (a turn is indexed with its neighbours' words).
    pub fn analyse(
        &self,
        extractor: &EntityExtractor,
        text: &str,
        written_at: Option<Timestamp>,
    ) -> Analysis {
        let mut analysis = self.analyse_words(extractor, text, written_at);
        analysis.names = self.names(extractor, text);
        analysis
    }

    pub(super) fn analyse_words(
        &self,
        extractor: &EntityExtractor,
        text: &str,
        written_at: Option<Timestamp>,
    ) -> Analysis {
        let terms = self.terms(extractor, text);
        let mut joined = String::with_capacity(terms.iter().map(String::len).sum());
        let mut ends = Vec::with_capacity(terms.len());
        for term in &terms {
            joined.push_str(term);
            ends.push(u32::try_from(joined.len()).unwrap_or(u32::MAX));
        }
        let days = match written_at {
            Some(written) if self.params.date_weight > 0.0 => {
                temporal::mentioned(text, written).into_boxed_slice()
            }
            _ => Box::default(),
        };
        Analysis {
            terms: joined.into_boxed_str(),
            ends: ends.into_boxed_slice(),
            days,
            names: Box::default(),
        }
    }

    pub(super) fn names(&self, extractor: &EntityExtractor, text: &str) -> Box<[u64]> {
        if self.params.entity_weight > 0.0 {
            extractor.mention_hashes(text)
        } else {
            Box::default()
        }
    }
}
