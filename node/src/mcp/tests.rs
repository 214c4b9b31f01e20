//! Unit tests of the MCP server: the tools' definitions as an agent reads them, the requests
//! they make (each body checked against the gateway's own request type, which refuses
//! unknown fields), how answers and refusals become tool results, the HTTP endpoint's
//! credentials, the key file and the node URL. `tests/tests/mcp.rs` runs the server under
//! the official MCP client against a real node.

use std::os::unix::fs::PermissionsExt;

use axum::http::{HeaderMap, HeaderValue, StatusCode};
use engram_actors::model::policy::Route;
use hyper::Method;
use rmcp::model::{CallToolResult, ContentBlock, Tool};
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use super::client::{Answer, NodeClient, query, read_answer, segment};
use super::endpoint::credentials;
use super::tools::{
    AddTurn, EngramTools, Feedback, ForgetUser, GetContext, ListMemories, RecallIntent,
    SearchMemories, SetMemoryStatus, WriteMemory, invalid_arguments, tool_result,
};
use crate::error::Error;
use crate::http::wire::{ContextBody, FeedbackBody, MemoryBody, SearchBody, StatusBody, TurnBody};

const TOOLS: [&str; 10] = [
    "add_turn",
    "feedback",
    "forget_user",
    "get_context",
    "list_memories",
    "list_sessions",
    "recall_intent",
    "search_memories",
    "set_memory_status",
    "write_memory",
];

fn tools() -> Vec<Tool> {
    let mut tools = EngramTools::tool_router().list_all();
    tools.sort_by(|a, b| a.name.cmp(&b.name));
    tools
}

fn tool(name: &str) -> Tool {
    tools()
        .into_iter()
        .find(|t| t.name == name)
        .unwrap_or_else(|| panic!("no tool {name}"))
}

/// Arguments as an MCP client sends them.
fn args<T: DeserializeOwned>(value: Value) -> T {
    serde_json::from_value(value).expect("arguments the schema admits")
}

/// The body as the gateway reads it.
fn accepted<T: DeserializeOwned>(body: Option<Value>) -> T {
    let body = body.expect("a body");
    serde_json::from_value(body.clone())
        .unwrap_or_else(|e| panic!("the gateway refuses {body}: {e}"))
}

#[test]
fn the_tools_are_the_ten_documented_ones_with_descriptions_and_object_schemas() {
    let tools = tools();
    let names: Vec<&str> = tools.iter().map(|t| t.name.as_ref()).collect();
    assert_eq!(names, TOOLS);
    for tool in &tools {
        let description = tool.description.as_deref().unwrap_or_default();
        assert!(description.len() > 60, "{}: {description:?}", tool.name);
        let schema = Value::Object(tool.input_schema.as_ref().clone());
        assert_eq!(schema["type"], "object", "{}: {schema}", tool.name);
        assert_eq!(schema["additionalProperties"], false, "{}", tool.name);
        let required = schema["required"].as_array().expect("required fields");
        assert!(required.contains(&json!("user")), "{}: {schema}", tool.name);
        assert!(
            tool.annotations.is_some(),
            "{} has no annotations",
            tool.name
        );
    }
    let add_turn = Value::Object(tool("add_turn").input_schema.as_ref().clone());
    assert_eq!(add_turn["required"], json!(["user", "user_text"]));
}

#[test]
fn forget_user_is_marked_destructive_and_the_reads_read_only() {
    let forget = tool("forget_user");
    let hints = forget.annotations.expect("annotations");
    assert_eq!(hints.destructive_hint, Some(true));
    assert_eq!(hints.read_only_hint, Some(false));
    assert!(
        forget
            .description
            .unwrap_or_default()
            .starts_with("DESTRUCTIVE")
    );
    for name in TOOLS {
        let read_only = tool(name).annotations.and_then(|a| a.read_only_hint);
        let reads = matches!(
            name,
            "get_context" | "search_memories" | "list_memories" | "list_sessions" | "recall_intent"
        );
        assert_eq!(read_only, Some(reads), "{name}");
    }
}

#[test]
fn the_route_arguments_name_every_route() {
    for name in ["add_turn", "get_context"] {
        let schema = Value::Object(tool(name).input_schema.as_ref().clone()).to_string();
        for route in Route::ALL {
            assert!(schema.contains(route.as_str()), "{name} omits {route:?}");
        }
    }
}

#[test]
fn every_body_a_tool_sends_is_one_the_gateway_accepts() {
    let turn = args::<AddTurn>(json!({
        "user": "alice", "session_id": "s1", "user_text": "hello", "assistant_text": "hi",
        "request_id": "r1", "route": "kpi_lookup", "success": false, "trace_id": "t1"
    }))
    .request();
    assert_eq!(
        (turn.method.clone(), turn.path.as_str()),
        (Method::POST, "/v1/users/alice/turns")
    );
    let body: TurnBody = accepted(turn.body);
    assert_eq!(
        (
            body.request_id.as_str(),
            body.success,
            body.route.as_deref()
        ),
        ("r1", false, Some("kpi_lookup"))
    );
    let _: TurnBody = accepted(
        args::<AddTurn>(json!({"user": "a", "user_text": "x"}))
            .request()
            .body,
    );

    let context = args::<GetContext>(json!({
        "user": "a", "session_id": "s1", "query": "q", "route": "nl2sql_query", "token_budget": 500
    }))
    .request();
    assert_eq!(context.path, "/v1/users/a/context");
    let body: ContextBody = accepted(context.body);
    assert_eq!(body.token_budget, Some(500));

    let search = args::<SearchMemories>(json!({
        "user": "a", "query": "q", "limit": 3, "kinds": ["profile", "correction"],
        "mode": "bm25", "active_only": true, "rerank": true
    }))
    .request();
    assert_eq!(search.path, "/v1/users/a/memories/search");
    let body: SearchBody = accepted(search.body);
    assert_eq!(
        (body.k, body.kinds, body.mode.as_deref(), body.rerank),
        (
            Some(3),
            Some(vec!["profile".into(), "correction".into()]),
            Some("bm25"),
            Some(true)
        )
    );

    let write = json!({
        "user": "a", "kind": "profile", "text": "likes bar charts", "request_id": "r2",
        "status": "active", "payload": {"topic": "chart_type", "value": "bar"},
        "confidence": 0.9, "salience": 0.4, "session_id": "s1", "source_agent": "agent"
    });
    let create = args::<WriteMemory>(write.clone()).request();
    assert_eq!(
        (create.method.clone(), create.path.as_str()),
        (Method::POST, "/v1/users/a/memories")
    );
    let body: MemoryBody = accepted(create.body);
    assert_eq!(
        (body.kind.as_str(), body.status.as_deref()),
        ("profile", Some("active"))
    );
    let mut upsert = write;
    upsert["memory_id"] = json!("m00000001");
    let upsert = args::<WriteMemory>(upsert).request();
    assert_eq!(
        (upsert.method.clone(), upsert.path.as_str()),
        (Method::PUT, "/v1/users/a/memories/m00000001")
    );
    let _: MemoryBody = accepted(upsert.body);

    let status = args::<SetMemoryStatus>(json!({
        "user": "a", "memory_id": "m1", "status": "suppressed"
    }))
    .request();
    assert_eq!(status.path, "/v1/users/a/memories/m1/status");
    let body: StatusBody = accepted(status.body);
    assert_eq!(body.status, "suppressed");

    let feedback = args::<Feedback>(json!({
        "user": "a", "session_id": "s1", "turn_seq": 3, "rating": "dislike",
        "corrected_sql": "select 1", "comment": "wrong table"
    }))
    .request();
    assert_eq!(feedback.path, "/v1/users/a/feedback");
    let body: FeedbackBody = accepted(feedback.body);
    assert_eq!((body.turn_seq, body.rating.as_str()), (3, "dislike"));
}

#[test]
fn a_write_without_a_request_id_gets_a_fresh_one_and_keeps_a_given_one() {
    let id = |value: Value| -> String {
        let body = args::<AddTurn>(value).request().body.expect("a body");
        body["request_id"]
            .as_str()
            .expect("a request id")
            .to_owned()
    };
    let (first, second) = (
        id(json!({"user": "a", "user_text": "x"})),
        id(json!({"user": "a", "user_text": "x"})),
    );
    assert!(
        first.starts_with("mcp-") && first != second,
        "{first} {second}"
    );
    assert_eq!(
        id(json!({"user": "a", "user_text": "x", "request_id": "mine"})),
        "mine"
    );
}

#[test]
fn ids_are_percent_encoded_in_paths_and_queries() {
    assert_eq!(segment("a-b_c.d~e"), "a-b_c.d~e");
    assert_eq!(segment("a b/c?d"), "a%20b%2Fc%3Fd");
    assert_eq!(segment("é"), "%C3%A9");
    let forget = args::<ForgetUser>(json!({"user": "x/../y"})).request();
    assert_eq!(
        (forget.method, forget.path.as_str()),
        (Method::DELETE, "/v1/users/x%2F..%2Fy")
    );
    let recall = args::<RecallIntent>(json!({
        "user": "a&b", "intent_type": "appointment", "all": true, "limit": 5
    }))
    .request();
    assert_eq!(
        recall.path,
        "/recall?user_id=a%26b&intent_type=appointment&all=true&limit=5"
    );
    assert_eq!(query(&[("kind", None)]), "");
}

#[test]
fn list_memories_asks_by_kind_and_keeps_only_the_asked_status() {
    let list = args::<ListMemories>(json!({"user": "a", "kind": "episodic", "status": "active"}));
    assert_eq!(list.request().path, "/v1/users/a/memories?kind=episodic");
    let answer = json!({"memories": [
        {"memory_id": "m1", "status": "active"}, {"memory_id": "m2", "status": "candidate"}
    ]});
    assert_eq!(
        list.keep(answer.clone()),
        json!({"memories": [{"memory_id": "m1", "status": "active"}]})
    );
    let every = args::<ListMemories>(json!({"user": "a"}));
    assert_eq!(every.request().path, "/v1/users/a/memories");
    assert_eq!(every.keep(answer.clone()), answer);
}

#[test]
fn answers_become_results_and_refusals_carry_the_apis_code() {
    let answer = read_answer(200, None, br#"{"written": true, "seq": 0}"#);
    let result = tool_result(answer);
    assert_eq!(result.is_error, Some(false));
    assert_eq!(
        result.structured_content,
        Some(json!({"written": true, "seq": 0}))
    );
    let text = result.content[0].as_text().expect("text content");
    assert_eq!(
        serde_json::from_str::<Value>(&text.text).unwrap(),
        json!({"written": true, "seq": 0})
    );

    let refused = read_answer(
        429,
        Some(2),
        br#"{"code": "rate_limited", "message": "slow down"}"#,
    );
    let result = tool_result(refused);
    assert_eq!(result.is_error, Some(true));
    assert_eq!(
        result.structured_content,
        Some(
            json!({"status": 429, "code": "rate_limited", "message": "slow down", "retry_after": 2})
        )
    );

    let garbled = read_answer(502, None, b"<html>bad gateway</html>");
    assert!(matches!(garbled, Answer::Nothing(_)), "{garbled:?}");
    let result = tool_result(garbled);
    assert_eq!(result.is_error, Some(true));
    assert_eq!(
        result.structured_content.expect("structured")["code"],
        "unavailable"
    );
    assert!(matches!(
        read_answer(200, None, b"not json"),
        Answer::Nothing(_)
    ));
}

#[test]
fn arguments_outside_a_schema_become_invalid_input() {
    let mut result = CallToolResult::error(vec![ContentBlock::text(
        "failed to deserialize parameters: missing field `user`",
    )]);
    invalid_arguments(&mut result);
    assert_eq!(result.is_error, Some(true));
    assert_eq!(
        result.structured_content,
        Some(
            json!({"code": "invalid_input", "message": "invalid arguments: missing field `user`"})
        )
    );
    // A node's refusal, or any other result, is left as it is.
    let node = tool_result(Answer::Api {
        status: 404,
        code: "not_found".into(),
        message: "no such memory".into(),
        retry_after: None,
    });
    let mut same = node.clone();
    invalid_arguments(&mut same);
    assert_eq!(same, node);
}

#[test]
fn the_endpoint_takes_a_bearer_key_and_a_named_tenant() {
    let mut headers = HeaderMap::new();
    assert_eq!(
        credentials(&headers).unwrap_err().0,
        StatusCode::UNAUTHORIZED
    );
    headers.insert("authorization", HeaderValue::from_static("Basic eDp5"));
    assert_eq!(
        credentials(&headers).unwrap_err().0,
        StatusCode::UNAUTHORIZED
    );
    headers.insert("authorization", HeaderValue::from_static("Bearer "));
    assert_eq!(
        credentials(&headers).unwrap_err().0,
        StatusCode::UNAUTHORIZED
    );
    headers.insert(
        "authorization",
        HeaderValue::from_static("bearer  egk_a_b "),
    );
    let who = credentials(&headers).expect("a key");
    assert_eq!((who.key.as_str(), who.tenant.as_deref()), ("egk_a_b", None));
    headers.insert("x-engram-tenant", HeaderValue::from_static("acme"));
    assert_eq!(
        credentials(&headers).expect("a key").tenant.as_deref(),
        Some("acme")
    );
    headers.insert(
        "x-engram-tenant",
        HeaderValue::from_bytes(b"caf\xc3\xa9").unwrap(),
    );
    assert_eq!(
        credentials(&headers).unwrap_err().0,
        StatusCode::BAD_REQUEST
    );
    // The key never shows in a debug print.
    assert!(!format!("{who:?}").contains("egk_a_b"));
}

#[test]
fn the_key_file_must_be_owner_only_and_hold_a_key() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("key");
    std::fs::write(&path, "egk_abc_def\n").unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
    assert!(matches!(
        super::api_key(Some(&path)),
        Err(Error::File {
            key: "--api-key-file",
            ..
        })
    ));
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
    assert_eq!(super::api_key(Some(&path)).unwrap(), "egk_abc_def");
    std::fs::write(&path, "  \n").unwrap();
    assert!(matches!(
        super::api_key(Some(&path)),
        Err(Error::File {
            key: "--api-key-file",
            ..
        })
    ));
}

#[test]
fn the_node_url_is_http_or_https_with_its_ca() {
    let client = NodeClient::new("http://127.0.0.1:8080/", None).expect("a plain URL");
    assert_eq!(client.base(), "http://127.0.0.1:8080");
    for bad in [
        "127.0.0.1:8080",
        "ftp://host",
        "http://host/?q=1",
        "https://host",
    ] {
        assert!(
            matches!(NodeClient::new(bad, None), Err(Error::Config(_))),
            "{bad}"
        );
    }
    let dir = tempfile::tempdir().unwrap();
    let ca = dir.path().join("ca.pem");
    assert!(matches!(
        NodeClient::new("http://host", Some(&ca)),
        Err(Error::Config(_))
    ));
    assert!(matches!(
        NodeClient::new("https://host", Some(&ca)),
        Err(Error::File {
            key: "--ca-file",
            ..
        })
    ));
    std::fs::write(&ca, "not a certificate").unwrap();
    assert!(matches!(
        NodeClient::new("https://host", Some(&ca)),
        Err(Error::File {
            key: "--ca-file",
            ..
        })
    ));
}
