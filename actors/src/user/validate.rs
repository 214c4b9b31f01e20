//! Input checks of user requests, applied before anything is read or written, each naming
//! the field and what is wrong with it.

use engram_storage::types::{MemoryKind, MemoryStatus};

use crate::error::{Error, Result};
use crate::model::context::MIN_TOKEN_BUDGET;
use crate::request::user::{
    ContextQuery, FeedbackRequest, IntentWrite, MemoryWrite, MessageWrite, ResolveConflict,
    SearchQuery, StatusChange, TurnRequest,
};

/// Longest id (request, session, memory, tenant, user), in bytes.
pub const MAX_ID_LEN: usize = 128;
/// Longest user text of a turn, in characters.
pub const MAX_USER_TEXT: usize = 8_000;
/// Longest assistant text accepted (it is stored capped at 2,000 characters).
pub const MAX_ASSISTANT_TEXT: usize = 32_000;
/// Longest memory text, in characters.
pub const MAX_MEMORY_TEXT: usize = 2_000;
/// Largest memory payload, in bytes of JSON.
const MAX_PAYLOAD: usize = 16 * 1024;
/// Longest query of a context request, in characters.
const MAX_QUERY: usize = 4_000;
/// Largest token budget of a context.
const MAX_BUDGET: usize = 32_000;
/// Longest clarifying question or accepted answer, in characters.
pub const MAX_CLARIFICATION_TEXT: usize = 500;
/// Most choices in one turn.
const MAX_CHOICES: usize = 16;

/// Checks an id: 1 to 128 bytes of letters, digits and `-_.:@`.
pub fn check_id(field: &'static str, id: &str) -> Result<()> {
    if id.is_empty() {
        return Err(Error::invalid(field, "must not be empty"));
    }
    if id.len() > MAX_ID_LEN {
        return Err(Error::invalid(
            field,
            format!("is {} bytes long; at most {MAX_ID_LEN}", id.len()),
        ));
    }
    if let Some(c) = id
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || "-_.:@".contains(*c)))
    {
        return Err(Error::invalid(
            field,
            format!("contains {c:?}; use letters, digits and -_.:@"),
        ));
    }
    Ok(())
}

fn check_text(field: &'static str, text: &str, max: usize, required: bool) -> Result<()> {
    if required && text.trim().is_empty() {
        return Err(Error::invalid(field, "must not be empty"));
    }
    let chars = text.chars().count();
    if chars > max {
        return Err(Error::invalid(
            field,
            format!("is {chars} characters long; at most {max}"),
        ));
    }
    if let Some(c) = text
        .chars()
        .find(|c| c.is_control() && !matches!(c, '\n' | '\r' | '\t'))
    {
        return Err(Error::invalid(
            field,
            format!("contains the control character {:?}", c),
        ));
    }
    Ok(())
}

fn check_unit(field: &'static str, value: f32) -> Result<()> {
    if !(0.0..=1.0).contains(&value) {
        return Err(Error::invalid(
            field,
            format!("is {value}; must be between 0 and 1"),
        ));
    }
    Ok(())
}

pub(super) fn turn(req: &TurnRequest) -> Result<()> {
    check_id("request_id", &req.request_id)?;
    if let Some(session) = &req.session_id {
        check_id("session_id", session)?;
    }
    if let Some(trace) = &req.trace_id {
        check_id("trace_id", trace)?;
    }
    check_text("user_text", &req.user_text, MAX_USER_TEXT, true)?;
    check_text(
        "assistant_text",
        &req.assistant_text,
        MAX_ASSISTANT_TEXT,
        false,
    )?;
    if req.choices.len() > MAX_CHOICES {
        return Err(Error::invalid(
            "choices",
            format!("has {} entries; at most {MAX_CHOICES}", req.choices.len()),
        ));
    }
    for (topic, value) in &req.choices {
        check_text("choices.topic", topic, 64, false)?;
        check_text("choices.value", value, 200, true)?;
    }
    if let Some(c) = &req.clarification {
        check_text(
            "clarification.question",
            &c.question,
            MAX_CLARIFICATION_TEXT,
            true,
        )?;
        check_text(
            "clarification.answer",
            &c.answer,
            MAX_CLARIFICATION_TEXT,
            true,
        )?;
    }
    Ok(())
}

pub(super) fn feedback(req: &FeedbackRequest) -> Result<()> {
    check_id("request_id", &req.request_id)?;
    if let Some(session) = &req.session_id {
        check_id("session_id", session)?;
    }
    if let Some(sql) = &req.corrected_sql {
        check_text("corrected_sql", sql, MAX_MEMORY_TEXT * 4, false)?;
    }
    if let Some(comment) = &req.comment {
        check_text("comment", comment, MAX_MEMORY_TEXT, false)?;
    }
    Ok(())
}

pub(super) fn memory_write(req: &MemoryWrite) -> Result<()> {
    check_id("request_id", &req.request_id)?;
    if let Some(id) = &req.memory_id {
        check_id("memory_id", id)?;
    }
    check_text("text", &req.text, MAX_MEMORY_TEXT, true)?;
    check_id("namespace", &req.namespace)?;
    check_id("scope", &req.scope)?;
    check_unit("confidence", req.confidence)?;
    check_unit("salience", req.salience)?;
    if !req.payload.is_object() {
        return Err(Error::invalid("payload", "must be a JSON object"));
    }
    let size = req.payload.to_string().len();
    if size > MAX_PAYLOAD {
        return Err(Error::invalid(
            "payload",
            format!("is {size} bytes of JSON; at most {MAX_PAYLOAD}"),
        ));
    }
    if !matches!(req.status, MemoryStatus::Candidate | MemoryStatus::Active) {
        return Err(Error::invalid(
            "status",
            "a written memory is a candidate or active",
        ));
    }
    if req.kind == MemoryKind::Working {
        return Err(Error::invalid(
            "kind",
            "working memory is formed from turns, not written",
        ));
    }
    if let (Some(from), Some(to)) = (req.valid_from, req.valid_to)
        && to < from
    {
        return Err(Error::invalid("valid_to", "is before valid_from"));
    }
    Ok(())
}

pub(super) fn status_change(req: &StatusChange) -> Result<()> {
    check_id("request_id", &req.request_id)?;
    check_id("memory_id", &req.memory_id)?;
    if !matches!(
        req.status,
        MemoryStatus::Active | MemoryStatus::Suppressed | MemoryStatus::Deleted
    ) {
        return Err(Error::invalid(
            "status",
            "must be active, suppressed or deleted",
        ));
    }
    Ok(())
}

/// A message to distil: an id, and a non-empty text of at most [`MAX_USER_TEXT`].
pub(super) fn resolve_conflict(req: &ResolveConflict) -> Result<()> {
    check_id("request_id", &req.request_id)?;
    check_id("flag_id", &req.flag_id)
}

pub(super) fn message(req: &MessageWrite) -> Result<()> {
    check_id("request_id", &req.request_id)?;
    check_text("message", &req.message, MAX_USER_TEXT, true)
}

pub(super) fn intent(req: &IntentWrite) -> Result<()> {
    check_id("request_id", &req.request_id)?;
    check_id("intent_type", &req.intent_type)?;
    if !req.fields.is_object() {
        return Err(Error::invalid("fields", "must be a JSON object"));
    }
    let size = req.fields.to_string().len();
    if size > MAX_PAYLOAD {
        return Err(Error::invalid(
            "fields",
            format!("is {size} bytes of JSON; at most {MAX_PAYLOAD}"),
        ));
    }
    Ok(())
}

/// Most hits a search may ask for.
pub const MAX_SEARCH_K: usize = 100;

pub(super) fn search(query: &SearchQuery) -> Result<()> {
    check_text("query", &query.query, MAX_QUERY, true)?;
    if query.k == 0 || query.k > MAX_SEARCH_K {
        return Err(Error::invalid(
            "k",
            format!("is {}; must be 1 to {MAX_SEARCH_K}", query.k),
        ));
    }
    Ok(())
}

pub(super) fn context(query: &ContextQuery) -> Result<()> {
    if let Some(session) = &query.session_id {
        check_id("session_id", session)?;
    }
    if let Some(q) = &query.query {
        check_text("query", q, MAX_QUERY, false)?;
    }
    if !(MIN_TOKEN_BUDGET..=MAX_BUDGET).contains(&query.token_budget) {
        return Err(Error::invalid(
            "token_budget",
            format!(
                "is {}; must be {MIN_TOKEN_BUDGET} to {MAX_BUDGET}",
                query.token_budget
            ),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::{MAX_BUDGET, MIN_TOKEN_BUDGET, check_id, context};
    use crate::model::policy::Route;
    use crate::request::user::ContextQuery;

    #[test]
    fn a_token_budget_too_small_to_hold_a_context_is_refused_with_the_range() {
        let query = |token_budget| ContextQuery {
            session_id: None,
            query: None,
            route: Route::Nl2sqlQuery,
            token_budget,
        };
        for budget in [0, MIN_TOKEN_BUDGET - 1, MAX_BUDGET + 1] {
            let err = context(&query(budget)).unwrap_err().to_string();
            assert!(
                err.contains("token_budget") && err.contains("must be 64 to 32000"),
                "{budget}: {err}"
            );
        }
        assert!(context(&query(MIN_TOKEN_BUDGET)).is_ok());
        assert!(context(&query(MAX_BUDGET)).is_ok());
    }

    #[test]
    fn ids_are_checked_with_a_reason() {
        assert!(check_id("session_id", "s-1_2.3:x@y").is_ok());
        for (bad, reason) in [
            ("", "empty"),
            ("a b", "' '"),
            ("x'; drop table", "'\\''"),
            ("é", "'é'"),
        ] {
            let err = check_id("session_id", bad).unwrap_err().to_string();
            assert!(
                err.starts_with("invalid session_id") && err.contains(reason),
                "{bad}: {err}"
            );
        }
        assert!(
            check_id("request_id", &"a".repeat(129))
                .unwrap_err()
                .to_string()
                .contains("at most 128")
        );
    }
}
