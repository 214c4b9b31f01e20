//! Each tool's API request, made from its arguments: the method, the path (ids
//! percent-encoded) and the JSON body, with the API's field names. Writes get a fresh
//! `request_id` when the agent gave none.
//!
//! Pure functions, so the tests can check every body against the gateway's own request types
//! (`crate::http::wire`), which refuse unknown fields: a field renamed there fails here.

use hyper::Method;
use serde_json::{Map, Value, json};

use super::args::{
    AddTurn, Feedback, ForgetUser, GetContext, ListMemories, ListSessions, NewStatus, RecallIntent,
    SearchMemories, SearchMode, SetMemoryStatus, Status, WriteMemory,
};
use crate::mcp::client::{query, segment};

/// One request to the node.
#[derive(Debug, Clone, PartialEq)]
pub struct Request {
    /// The method.
    pub method: Method,
    /// Path and query, encoded.
    pub path: String,
    /// The JSON body, if any.
    pub body: Option<Value>,
}

/// A fresh request id, for a write whose caller gave none.
fn fresh_request_id() -> String {
    format!("mcp-{}", uuid::Uuid::new_v4())
}

/// A JSON object of the fields that have a value (`null`s left out, as the API's optional
/// fields are).
fn object<const N: usize>(fields: [(&str, Value); N]) -> Value {
    let map: Map<String, Value> = fields
        .into_iter()
        .filter(|(_, v)| !v.is_null())
        .map(|(k, v)| (k.to_owned(), v))
        .collect();
    Value::Object(map)
}

/// The error result's body: the fields that have a value.
pub fn error_body(status: Option<u16>, code: &str, message: &str, retry: Option<u64>) -> Value {
    object([
        ("status", json!(status)),
        ("code", json!(code)),
        ("message", json!(message)),
        ("retry_after", json!(retry)),
    ])
}

fn user_path(user: &str, rest: &str) -> String {
    format!("/v1/users/{}{rest}", segment(user))
}

fn post(path: String, body: Value) -> Request {
    Request {
        method: Method::POST,
        path,
        body: Some(body),
    }
}

fn get(path: String) -> Request {
    Request {
        method: Method::GET,
        path,
        body: None,
    }
}

impl AddTurn {
    /// `POST /v1/users/{user}/turns`.
    pub fn request(self) -> Request {
        let body = object([
            (
                "request_id",
                json!(self.request_id.unwrap_or_else(fresh_request_id)),
            ),
            ("session_id", json!(self.session_id)),
            ("user_text", json!(self.user_text)),
            ("assistant_text", json!(self.assistant_text)),
            ("route", json!(self.route)),
            ("success", json!(self.success)),
            ("trace_id", json!(self.trace_id)),
        ]);
        post(user_path(&self.user, "/turns"), body)
    }
}

impl GetContext {
    /// `POST /v1/users/{user}/context`.
    pub fn request(self) -> Request {
        let body = object([
            ("session_id", json!(self.session_id)),
            ("query", json!(self.query)),
            ("route", json!(self.route)),
            ("token_budget", json!(self.token_budget)),
        ]);
        post(user_path(&self.user, "/context"), body)
    }
}

impl SearchMemories {
    /// `POST /v1/users/{user}/memories/search`.
    pub fn request(self) -> Request {
        let kinds = self
            .kinds
            .map(|kinds| kinds.iter().map(|k| k.as_str()).collect::<Vec<_>>());
        let body = object([
            ("query", json!(self.query)),
            ("k", json!(self.limit)),
            ("kinds", json!(kinds)),
            ("mode", json!(self.mode.map(SearchMode::as_str))),
            ("active_only", json!(self.active_only)),
            ("rerank", json!(self.rerank)),
        ]);
        post(user_path(&self.user, "/memories/search"), body)
    }
}

impl WriteMemory {
    /// `POST /v1/users/{user}/memories`, or `PUT .../memories/{memory_id}` with an id.
    pub fn request(self) -> Request {
        let body = object([
            (
                "request_id",
                json!(self.request_id.unwrap_or_else(fresh_request_id)),
            ),
            ("kind", json!(self.kind.as_str())),
            ("text", json!(self.text)),
            ("status", json!(self.status.map(NewStatus::as_str))),
            ("payload", json!(self.payload)),
            ("confidence", json!(self.confidence)),
            ("salience", json!(self.salience)),
            ("session_id", json!(self.session_id)),
            ("source_agent", json!(self.source_agent)),
        ]);
        match &self.memory_id {
            Some(id) => Request {
                method: Method::PUT,
                path: user_path(&self.user, &format!("/memories/{}", segment(id))),
                body: Some(body),
            },
            None => post(user_path(&self.user, "/memories"), body),
        }
    }
}

impl ListMemories {
    /// `GET /v1/users/{user}/memories?kind=`; the status filter is applied to the answer
    /// ([`ListMemories::keep`]).
    pub fn request(&self) -> Request {
        let kind = query(&[("kind", self.kind.map(|k| k.as_str().to_owned()))]);
        get(user_path(&self.user, &format!("/memories{kind}")))
    }

    /// The answer with only the memories of the asked status.
    pub fn keep(&self, mut answer: Value) -> Value {
        if let (Some(status), Some(list)) = (
            self.status,
            answer.get_mut("memories").and_then(Value::as_array_mut),
        ) {
            list.retain(|m| m["status"] == Status::as_str(status));
        }
        answer
    }
}

impl SetMemoryStatus {
    /// `POST /v1/users/{user}/memories/{memory_id}/status`.
    pub fn request(self) -> Request {
        let body = object([
            (
                "request_id",
                json!(self.request_id.unwrap_or_else(fresh_request_id)),
            ),
            ("status", json!(self.status.as_str())),
        ]);
        let rest = format!("/memories/{}/status", segment(&self.memory_id));
        post(user_path(&self.user, &rest), body)
    }
}

impl Feedback {
    /// `POST /v1/users/{user}/feedback`.
    pub fn request(self) -> Request {
        let body = object([
            (
                "request_id",
                json!(self.request_id.unwrap_or_else(fresh_request_id)),
            ),
            ("session_id", json!(self.session_id)),
            ("turn_seq", json!(self.turn_seq)),
            ("rating", json!(self.rating.as_str())),
            ("corrected_sql", json!(self.corrected_sql)),
            ("comment", json!(self.comment)),
        ]);
        post(user_path(&self.user, "/feedback"), body)
    }
}

impl ListSessions {
    /// `GET /v1/users/{user}/sessions`.
    pub fn request(self) -> Request {
        get(user_path(&self.user, "/sessions"))
    }
}

impl RecallIntent {
    /// `GET /recall?user_id=&intent_type=&all=&limit=&before=`.
    pub fn request(self) -> Request {
        get(format!(
            "/recall{}",
            query(&[
                ("user_id", Some(self.user)),
                ("intent_type", Some(self.intent_type)),
                ("all", self.all.map(|b| b.to_string())),
                ("limit", self.limit.map(|n| n.to_string())),
                ("before", self.before.map(|n| n.to_string())),
            ])
        ))
    }
}

impl ForgetUser {
    /// `DELETE /v1/users/{user}`.
    pub fn request(self) -> Request {
        Request {
            method: Method::DELETE,
            path: user_path(&self.user, ""),
            body: None,
        }
    }
}
