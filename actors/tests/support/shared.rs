//! Helpers of the suites of the tenant's shared sets: requests to the tenant `acme`'s actor.

use engram_actors::front::Reader;
use engram_actors::placement::UserKey;
use engram_actors::request::tenant::*;
use engram_storage::access::Scope;

use super::Node;

pub const MINUTE: i64 = 60_000;
pub const DAY: i64 = 24 * 60 * MINUTE;

pub fn acme() -> UserKey {
    UserKey::shared("acme")
}

pub async fn put(node: &Node, id: &str, question: &str, domain: &str, sql: &str) -> SqlPutAck {
    let put = SqlPut {
        request_id: id.into(),
        question: question.into(),
        route: "nl2sql".into(),
        domain: domain.into(),
        sql: sql.into(),
        vector: None,
    };
    node.directory.ask_admin(&acme(), put).await.unwrap()
}

pub async fn lookup(node: &Node, question: &str, domain: &str) -> SqlLookupReply {
    let lookup = SqlLookup {
        question: question.into(),
        route: "nl2sql".into(),
        domain: domain.into(),
        vector: None,
    };
    node.directory.ask_admin(&acme(), lookup).await.unwrap()
}

pub async fn hit(node: &Node, question: &str, domain: &str) -> Option<String> {
    lookup(node, question, domain).await.hit.map(|h| h.sql)
}

pub const ORDERS: &str = "SELECT count(*) FROM sales.orders WHERE day >= current_date - 7";

pub async fn record(
    node: &Node,
    id: &str,
    question: &str,
    sql: &str,
    confidence: f32,
) -> ExampleAck {
    let record = ExampleRecord {
        request_id: id.into(),
        question: question.into(),
        sql: sql.into(),
        route: "nl2sql".into(),
        confidence,
        vector: None,
    };
    node.directory.ask_admin(&acme(), record).await.unwrap()
}

/// Records a success of (question, SQL) as the gateway key `key_id` of `acme`.
pub async fn record_as(
    node: &Node,
    key_id: &str,
    id: &str,
    question: &str,
    sql: &str,
) -> engram_actors::Result<ExampleAck> {
    let gateway = Reader {
        principal: key_id.into(),
        scope: Scope::Gateway,
        tenant: "acme".into(),
    };
    let record = ExampleRecord {
        request_id: id.into(),
        question: question.into(),
        sql: sql.into(),
        route: "nl2sql".into(),
        confidence: 0.95,
        vector: None,
    };
    node.directory.ask_as(&gateway, &acme(), record).await
}

pub async fn review(node: &Node, id: &str, example: &str, action: ReviewAction) -> ExampleAck {
    let review = ExampleReview {
        request_id: id.into(),
        example_id: example.into(),
        action,
    };
    node.directory.ask_admin(&acme(), review).await.unwrap()
}

pub async fn served(node: &Node, question: &str) -> Vec<(String, f32)> {
    let search = ExampleSearch {
        question: question.into(),
        route: "nl2sql".into(),
        limit: 3,
        vector: None,
    };
    let reply = node.directory.ask_admin(&acme(), search).await.unwrap();
    reply
        .hits
        .into_iter()
        .map(|h| (h.example.id, h.similarity))
        .collect()
}
