//! Identity anchors through the user actors on a real SQLite file: identifiers a user gave
//! are matched from keyed hashes that never hold the identifier.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use engram_actors::Error;
use engram_actors::clock::{ManualClock, SharedClock};
use engram_actors::directory::Directory;
use engram_actors::model::entities::EntityExtractor;
use engram_actors::model::policy::{DAY_MS, Route};
use engram_actors::placement::UserKey;
use engram_actors::services::{Metrics, Services, Settings};
use engram_actors::user::UserMsg;
use engram_actors::user::api::{AnchorMatch, MemoryWrite, TurnRequest};
use engram_storage::crypto::{Cipher, MasterKeys};
use engram_storage::model::{AnchorKind, MemoryKind, MemoryStatus, Timestamp};
use engram_storage::sqlite::SqliteOptions;
use engram_storage::{Keyspace, RangeOptions, Store};
use tempfile::TempDir;

const ID: &str = "11010519491231002X";
const OTHER_ID: &str = "440304199001011233";
const PASSPORT: &str = "E12345678";
const START: i64 = 1_700_000_000_000;

struct Node {
    directory: Arc<Directory>,
    clock: Arc<ManualClock>,
    store: Store,
    keyspace: Keyspace,
    metrics: Arc<Metrics>,
}

fn keyed(cipher: Cipher) -> Keyspace {
    let keys = MasterKeys::new([(1, [42u8; 32])])
        .unwrap()
        .with_cipher(cipher);
    Keyspace::new("engram").with_master_keys(keys)
}

fn node(dir: &TempDir, keyspace: Keyspace) -> Node {
    let store = Store::sqlite(&dir.path().join("engram.sqlite"), SqliteOptions::default()).unwrap();
    let clock = ManualClock::new(Timestamp(START));
    let metrics = Arc::new(Metrics::default());
    let services = Services {
        store: store.clone(),
        keyspace: keyspace.clone(),
        clock: clock.clone() as SharedClock,
        extractor: Arc::new(EntityExtractor::default()),
        embedder: None,
        ownership: None,
        settings: Settings::default(),
        metrics: metrics.clone(),
    };
    Node {
        directory: Directory::new(services),
        clock,
        store,
        keyspace,
        metrics,
    }
}

fn turn(request_id: &str, session: &str, user_text: &str) -> TurnRequest {
    TurnRequest {
        request_id: request_id.into(),
        session_id: Some(session.into()),
        user_text: user_text.into(),
        assistant_text: "Noted.".into(),
        route: Some(Route::Nl2sqlQuery),
        success: true,
        trace_id: None,
        choices: Vec::new(),
    }
}

fn alice() -> UserKey {
    UserKey::new("acme", "alice")
}

impl Node {
    async fn append(&self, key: &UserKey, req: TurnRequest) {
        let ack = self
            .directory
            .call(key, move |reply| UserMsg::Turn(req.clone(), reply))
            .await
            .unwrap();
        assert!(ack.written);
    }

    async fn match_anchor(&self, key: &UserKey, value: &str) -> engram_actors::Result<AnchorMatch> {
        let value = value.to_owned();
        self.directory
            .call(key, move |reply| UserMsg::MatchAnchor {
                value: value.clone(),
                reply,
            })
            .await
    }

    async fn forget(&self, key: &UserKey) {
        self.directory.call(key, UserMsg::Forget).await.unwrap();
        let until = Instant::now() + Duration::from_secs(5);
        while self.directory.running(key).is_some() {
            assert!(Instant::now() < until, "the forgotten actor did not stop");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// Every key and value in the store.
    async fn everything(&self) -> Vec<(Vec<u8>, Vec<u8>)> {
        self.store
            .read(|txn| txn.get_range(&[], &[0xff], RangeOptions::default()))
            .await
            .unwrap()
    }

    /// The rows of `key` in one of its user ranges.
    async fn rows_in(&self, range: engram_storage::KeyRange) -> Vec<(Vec<u8>, Vec<u8>)> {
        self.store
            .read(move |txn| txn.get_range(&range.begin, &range.end, RangeOptions::default()))
            .await
            .unwrap()
    }
}

fn holds(rows: &[(Vec<u8>, Vec<u8>)], needle: &[u8]) -> bool {
    rows.iter().any(|(k, v)| {
        k.windows(needle.len()).any(|w| w == needle) || v.windows(needle.len()).any(|w| w == needle)
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn identifiers_a_user_gave_match_from_keyed_hashes_that_do_not_hold_them() {
    let dir = tempfile::tempdir().unwrap();
    let node = node(&dir, keyed(Cipher::Aes256Gcm));
    let key = alice();
    let text = format!("我的身份证号是{}，护照 {PASSPORT}", ID.to_ascii_lowercase());
    node.append(&key, turn("r1", "s1", &text)).await;

    let given = AnchorMatch::Matched {
        kind: AnchorKind::ResidentId,
        first_seen: Timestamp(START),
    };
    assert_eq!(node.match_anchor(&key, ID).await.unwrap(), given);
    assert_eq!(
        node.match_anchor(&key, &format!(" {} ", ID.to_ascii_lowercase()))
            .await
            .unwrap(),
        given,
        "normalised"
    );
    assert_eq!(
        node.match_anchor(&key, "e12345678").await.unwrap(),
        AnchorMatch::Matched {
            kind: AnchorKind::Passport,
            first_seen: Timestamp(START)
        }
    );
    assert_eq!(
        node.match_anchor(&key, OTHER_ID).await.unwrap(),
        AnchorMatch::NoMatch
    );
    assert_eq!(
        node.match_anchor(&UserKey::new("acme", "bob"), ID)
            .await
            .unwrap(),
        AnchorMatch::NoMatch,
        "anchors are per user"
    );
    let err = node.match_anchor(&key, "hello").await.unwrap_err();
    assert!(
        matches!(err, Error::InvalidInput { field: "value", .. }),
        "{err}"
    );

    // Anchored again later: first seen stays.
    node.clock.advance(DAY_MS);
    node.append(&key, turn("r2", "s1", &format!("ID {ID} again")))
        .await;
    assert_eq!(node.match_anchor(&key, ID).await.unwrap(), given);

    let anchors = node
        .rows_in(node.keyspace.user("acme", "alice").anchors())
        .await;
    assert_eq!(anchors.len(), 2, "one per identifier");
    let everything = node.everything().await;
    for needle in [ID.as_bytes(), PASSPORT.as_bytes(), b"1101051949"] {
        assert!(!holds(&everything, needle), "an identifier is readable");
    }

    node.forget(&key).await;
    assert!(
        node.rows_in(node.keyspace.user("acme", "alice").all())
            .await
            .is_empty()
    );
    assert_eq!(
        node.match_anchor(&key, ID).await.unwrap(),
        AnchorMatch::NoMatch
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memories_anchor_their_text_and_payload_and_answers_do_not() {
    let dir = tempfile::tempdir().unwrap();
    let node = node(&dir, keyed(Cipher::Sm4Gcm));
    let key = alice();
    let write = MemoryWrite {
        request_id: "w1".into(),
        memory_id: None,
        kind: MemoryKind::Profile,
        text: format!("passport {PASSPORT}"),
        payload: serde_json::json!({ "topic": "identity", "id": ID }),
        status: MemoryStatus::Active,
        namespace: "default".into(),
        scope: "global".into(),
        confidence: 0.9,
        salience: 0.5,
        valid_from: None,
        valid_to: None,
        session_id: None,
        source_route: None,
        source_agent: None,
        trace_id: None,
    };
    node.directory
        .call(&key, move |r| UserMsg::WriteMemory(write.clone(), r))
        .await
        .unwrap();
    for value in [PASSPORT, ID] {
        assert!(matches!(
            node.match_anchor(&key, value).await.unwrap(),
            AnchorMatch::Matched { .. }
        ));
    }
    // An identifier only the assistant said is not one the user gave.
    let mut answer = turn("r1", "s1", "what is on file?");
    answer.assistant_text = format!("The ID on file is {OTHER_ID}.");
    node.append(&key, answer).await;
    assert_eq!(
        node.match_anchor(&key, OTHER_ID).await.unwrap(),
        AnchorMatch::NoMatch
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_master_keys_identifiers_are_counted_and_not_anchored() {
    let dir = tempfile::tempdir().unwrap();
    let node = node(&dir, Keyspace::new("engram"));
    let key = alice();
    node.append(
        &key,
        turn("r1", "s1", &format!("ID {ID}, passport {PASSPORT}")),
    )
    .await;
    assert_eq!(node.metrics.anchors_unkeyed.load(Ordering::Relaxed), 2);
    assert_eq!(
        node.match_anchor(&key, ID).await.unwrap(),
        AnchorMatch::Unkeyed
    );
    assert!(
        node.rows_in(node.keyspace.user("acme", "alice").anchors())
            .await
            .is_empty()
    );
}
