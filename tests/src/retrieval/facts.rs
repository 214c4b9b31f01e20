//! Facts distilled from turns (the `facts` program's JSON lines) for the facts lever
//! (docs/decisions/0016-distilled-facts-not-kept.md), measured outside the product, in one of
//! two places ([`Placement`]): beside the raw turns, each fact a passage of its own in a
//! session of facts beside its source's session, at its source's date, pointing to its source
//! ([`Passage::source`]) so that recall still counts turns; or appended to its source turn's
//! text, which is then indexed and embedded with it.

use std::collections::HashMap;
use std::io::BufRead as _;
use std::path::Path;

use anyhow::{Context as _, Result};
use serde_json::Value;

use super::dataset::{Conversation, Passage};

/// Facts by (conversation, turn id), empty ones included (a turn that states nothing).
pub type Facts = HashMap<(String, String), String>;

/// Reads a `facts` file.
pub fn read(path: &Path) -> Result<Facts> {
    let file = std::fs::File::open(path).with_context(|| format!("--facts {}", path.display()))?;
    let mut facts = Facts::new();
    for line in std::io::BufReader::new(file).lines() {
        let v: Value = serde_json::from_str(&line?)?;
        let field = |key: &str| v[key].as_str().unwrap_or("").trim().to_owned();
        facts.insert((field("conversation"), field("turn")), field("fact"));
    }
    Ok(facts)
}

/// A passage written with its date, "[1:56 pm on 8 May, 2023] rest", split into the date and
/// the rest (`None` without a date).
pub fn dated(passage: &str) -> Option<(&str, &str)> {
    passage.strip_prefix('[')?.split_once("] ")
}

/// Where a fact is indexed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Placement {
    /// A passage of its own, after the conversation's passages.
    Beside,
    /// Appended to its source turn's text (one passage, its words and vector).
    Appended,
}

/// Adds `conversation`'s facts (the passages' positions, which the questions' evidence names,
/// stay): beside, each written as its source is (the same date prefix); returns how many
/// were added.
pub fn add(conversation: &mut Conversation, facts: &Facts, placement: Placement) -> usize {
    let mut added = Vec::new();
    let mut appended = 0;
    for (i, passage) in conversation.passages.iter_mut().enumerate() {
        let Some(fact) = facts
            .get(&(conversation.name.clone(), passage.id.clone()))
            .filter(|f| !f.is_empty())
        else {
            continue;
        };
        if placement == Placement::Appended {
            passage.text = format!("{} {fact}", passage.text);
            appended += 1;
            continue;
        }
        // "[1:56 pm on 8 May, 2023] Caroline: ..." keeps its date before the fact.
        let date = dated(&passage.text)
            .map(|(date, _)| format!("[{date}] "))
            .unwrap_or_default();
        added.push(Passage {
            id: format!("{}/fact", passage.id),
            text: format!("{date}{fact}"),
            session: format!("{}.facts", passage.session),
            said_at: passage.said_at,
            source: Some(i),
        });
    }
    let n = added.len();
    conversation.passages.append(&mut added);
    n + appended
}

#[cfg(test)]
mod tests {
    use super::{Facts, Placement, add, dated};
    use crate::retrieval::dataset::{Conversation, Passage};

    fn passage(id: &str, text: &str, session: &str) -> Passage {
        Passage {
            id: id.to_owned(),
            text: text.to_owned(),
            session: session.to_owned(),
            said_at: None,
            source: None,
        }
    }

    fn conversation() -> (Conversation, Facts) {
        let conversation = Conversation {
            name: "conv-1".to_owned(),
            passages: vec![
                passage("D1:1", "[8 May, 2023] Ana: hi", "session-1"),
                passage("D1:2", "[8 May, 2023] Tom: I ran a marathon", "session-1"),
            ],
            questions: Vec::new(),
            skipped_questions: 0,
            unknown_evidence: 0,
        };
        let facts: Facts = [(
            ("conv-1".to_owned(), "D1:2".to_owned()),
            "Tom ran a marathon.".to_owned(),
        )]
        .into();
        (conversation, facts)
    }

    #[test]
    fn facts_beside_follow_the_passages_and_point_to_their_sources() {
        let (mut conversation, facts) = conversation();
        assert_eq!(add(&mut conversation, &facts, Placement::Beside), 1);
        let fact = &conversation.passages[2];
        assert_eq!(conversation.passages[1].id, "D1:2", "positions stay");
        assert_eq!(fact.text, "[8 May, 2023] Tom ran a marathon.");
        assert_eq!(fact.session, "session-1.facts");
        assert_eq!(fact.source, Some(1));
    }

    #[test]
    fn facts_appended_extend_their_source_turn_only() {
        let (mut conversation, facts) = conversation();
        assert_eq!(add(&mut conversation, &facts, Placement::Appended), 1);
        assert_eq!(conversation.passages.len(), 2, "no passage added");
        assert_eq!(conversation.passages[0].text, "[8 May, 2023] Ana: hi");
        assert_eq!(
            conversation.passages[1].text,
            "[8 May, 2023] Tom: I ran a marathon Tom ran a marathon."
        );
        assert_eq!(conversation.passages[1].source, None);
    }

    #[test]
    fn a_dated_passage_splits_at_its_date_and_an_empty_fact_adds_nothing() {
        assert_eq!(
            dated("[1:56 pm on 8 May, 2023] Ana: hi"),
            Some(("1:56 pm on 8 May, 2023", "Ana: hi"))
        );
        assert_eq!(dated("Ana: hi"), None);
        let (mut conversation, mut facts) = conversation();
        facts.insert(("conv-1".to_owned(), "D1:1".to_owned()), String::new());
        assert_eq!(add(&mut conversation, &facts, Placement::Beside), 1);
        assert_eq!(conversation.passages.len(), 3);
    }
}
