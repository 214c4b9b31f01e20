//! Identity anchors and the archive tier through the user actors on a real SQLite file:
//! identifiers a user gave are matched from keyed hashes that never hold the identifier;
//! raw turns past retention are deleted and, by default, kept nowhere; a tenant archiving
//! digests keeps keyed hashes an admin can match a text against; in full text they move to a
//! sealed archive; archives are purged after the archive period and go with the user when
//! the user is forgotten.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use engram_actors::Error;
use engram_actors::clock::{ManualClock, SharedClock};
use engram_actors::directory::Directory;
use engram_actors::jobs::{self, Job};
use engram_actors::model::entities::EntityExtractor;
use engram_actors::model::policy::{DAY_MS, Route};
use engram_actors::placement::UserKey;
use engram_actors::request::user::{
    AnchorMatch, AnchorQuery, ArchiveCursor, ArchiveKind, ArchiveMatch, ArchivePage, ArchiveQuery,
    Forget, ListSessions, MemoryWrite, Role, SessionQuery, TurnRequest,
};
use engram_actors::services::{Metrics, Services, Settings};
use engram_storage::crypto::{Cipher, MasterKeys, is_sealed};
use engram_storage::sqlite::SqliteOptions;
use engram_storage::types::{AnchorKind, ArchiveMode, MemoryKind, MemoryStatus, Timestamp};
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
    node_with(dir, keyspace, Settings::default())
}

/// A node whose archive keeps whole turns.
fn full_text_node(dir: &TempDir, keyspace: Keyspace) -> Node {
    node_with(
        dir,
        keyspace,
        Settings {
            archive: ArchiveMode::FullText,
            ..Settings::default()
        },
    )
}

fn node_with(dir: &TempDir, keyspace: Keyspace, settings: Settings) -> Node {
    let store = Store::sqlite(&dir.path().join("engram.sqlite"), SqliteOptions::default()).unwrap();
    let clock = ManualClock::new(Timestamp(START));
    let metrics = Arc::new(Metrics::default());
    let services = Services {
        store: store.clone(),
        keyspace: keyspace.clone(),
        clock: clock.clone() as SharedClock,
        extractor: Arc::new(EntityExtractor::default()),
        embedder: None,
        pipeline: None,
        distillation: None,
        reranker: None,
        ownership: None,
        settings,
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
        clarification: None,
    }
}

fn alice() -> UserKey {
    UserKey::new("acme", "alice")
}

impl Node {
    async fn append(&self, key: &UserKey, req: TurnRequest) {
        let ack = self.directory.ask_admin(key, req.clone()).await.unwrap();
        assert!(ack.written);
    }

    async fn match_anchor(&self, key: &UserKey, value: &str) -> engram_actors::Result<AnchorMatch> {
        let value = value.to_owned();
        self.directory
            .ask_admin(
                key,
                AnchorQuery {
                    value: value.clone(),
                },
            )
            .await
    }

    async fn archive(
        &self,
        key: &UserKey,
        session: Option<&str>,
        after: Option<ArchiveCursor>,
        limit: usize,
    ) -> engram_actors::Result<ArchivePage> {
        let query = ArchiveQuery {
            session: session.map(str::to_owned),
            after,
            limit,
            kind: None,
        };
        self.directory.ask_admin(key, query.clone()).await
    }

    async fn forget(&self, key: &UserKey) {
        self.directory.ask_admin(key, Forget).await.unwrap();
        let until = Instant::now() + Duration::from_secs(5);
        while self.directory.running(key).is_some() {
            assert!(Instant::now() < until, "the forgotten actor did not stop");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// Writes an old and, 20 days later, a newer turn of session s1, then runs the retention
    /// job 31 days after the first: the old turn leaves the live session (one user, one turn
    /// removed, the count the job logs), the newer one stays.
    async fn old_and_newer_turn_past_retention(&self, key: &UserKey) {
        self.append(key, turn("r1", "s1", "old question")).await;
        self.clock.advance(20 * DAY_MS);
        self.append(key, turn("r2", "s1", "newer question")).await;
        self.clock.advance(11 * DAY_MS);
        let report = jobs::run(&self.directory, Job::Retention).await.unwrap();
        assert_eq!((report.users, report.turns_removed), (1, 1));
        let live = self
            .directory
            .ask_admin(
                key,
                SessionQuery {
                    session: "s1".into(),
                    limit: 50,
                },
            )
            .await
            .unwrap();
        assert_eq!(
            live.turns
                .iter()
                .map(|t| t.user_text.as_str())
                .collect::<Vec<_>>(),
            ["newer question"],
            "the old turn left the live session"
        );
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
        matches!(err, Error::InvalidInput { ref field, .. } if field == "value"),
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
    node.directory.ask_admin(&key, write.clone()).await.unwrap();
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn by_default_retention_deletes_turns_past_30_days_and_archives_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let node = node(&dir, Keyspace::new("engram"));
    let key = alice();
    node.old_and_newer_turn_past_retention(&key).await;
    let user = node.keyspace.user("acme", "alice");
    assert!(node.rows_in(user.all_archived_turns()).await.is_empty());
    assert!(node.rows_in(user.all_archived_digests()).await.is_empty());
    assert!(node.rows_in(user.archives()).await.is_empty());
    assert_eq!(
        node.rows_in(user.turns("s1")).await.len(),
        1,
        "the old turn's row is gone (its episodic memory lives its own TTL)"
    );
    let page = node.archive(&key, None, None, 10).await.unwrap();
    assert!(page.turns.is_empty() && page.digests.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenant_archiving_digests_keeps_hashes_an_admin_can_match_but_no_text() {
    let dir = tempfile::tempdir().unwrap();
    let settings = Settings {
        tenant_archive: [("acme".to_owned(), ArchiveMode::Digests)].into(),
        ..Settings::default()
    };
    let node = node_with(&dir, keyed(Cipher::Aes256Gcm), settings);
    let (key, other) = (alice(), UserKey::new("globex", "alice"));
    for who in [&key, &other] {
        node.append(who, turn("r1", "s1", "my parcel 7731 never came"))
            .await;
    }
    node.clock.advance(31 * DAY_MS);
    let report = jobs::run(&node.directory, Job::Retention).await.unwrap();
    assert_eq!((report.users, report.turns_removed), (2, 2));

    let page = node.archive(&key, None, None, 10).await.unwrap();
    assert_eq!(
        page.kind,
        ArchiveKind::Digests,
        "the tenant's mode by default"
    );
    assert!(page.turns.is_empty());
    assert_eq!(page.digests.len(), 1);
    let digest = &page.digests[0];
    assert_eq!(
        (digest.session_id.as_str(), digest.seq, digest.created_at),
        ("s1", 0, Timestamp(START))
    );
    assert_eq!(digest.key_id, Some(1), "keyed by the tenant's key");
    assert!(!holds(&node.everything().await, b"7731"));
    assert!(
        !format!("{page:?}").contains("7731"),
        "no text, even opened"
    );

    let matched = |who: UserKey, role: Role, text: &str| {
        let query = ArchiveMatch {
            role,
            text: text.to_owned(),
        };
        let directory = Arc::clone(&node.directory);
        async move { directory.ask_admin(&who, query).await }
    };
    let found = matched(key.clone(), Role::User, "my parcel 7731  never came")
        .await
        .unwrap();
    assert_eq!(found.len(), 1);
    assert_eq!(found[0].created_at, Timestamp(START));
    assert!(
        matched(key.clone(), Role::User, "my parcel 7732 never came")
            .await
            .unwrap()
            .is_empty()
    );
    assert!(
        matched(key.clone(), Role::Assistant, "my parcel 7731 never came")
            .await
            .unwrap()
            .is_empty()
    );
    let err = matched(key.clone(), Role::User, "  ").await.unwrap_err();
    assert!(matches!(err, Error::InvalidInput { ref field, .. } if field == "text"));
    // The other tenant keeps nothing (the node's default).
    let user = node.keyspace.user("globex", "alice");
    assert!(node.rows_in(user.all_archived_digests()).await.is_empty());
    assert!(
        matched(other, Role::User, "my parcel 7731 never came")
            .await
            .unwrap()
            .is_empty()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn turns_past_retention_move_to_the_archive_and_are_purged_after_the_archive_period() {
    let dir = tempfile::tempdir().unwrap();
    let node = full_text_node(&dir, Keyspace::new("engram"));
    let key = alice();
    node.old_and_newer_turn_past_retention(&key).await;
    let page = node.archive(&key, None, None, 10).await.unwrap();
    assert_eq!(page.turns.len(), 1);
    assert_eq!(page.turns[0].turn.user_text, "old question");
    assert_eq!(page.turns[0].turn.created_at, Timestamp(START));
    assert_eq!(page.turns[0].archived_at, Timestamp(START + 31 * DAY_MS));
    assert_eq!(page.next, None);

    // Twenty days on, the newer turn follows; the session is gone, its archive holds both.
    node.clock.advance(20 * DAY_MS);
    let report = jobs::run(&node.directory, Job::Retention).await.unwrap();
    assert_eq!(report.turns_removed, 1);
    let sessions = node.directory.ask_admin(&key, ListSessions).await.unwrap();
    assert!(sessions.is_empty());
    assert_eq!(
        node.archive(&key, Some("s1"), None, 10)
            .await
            .unwrap()
            .turns
            .len(),
        2
    );

    // Five years (1826 days) after the first turn it is purged; the second 20 days later.
    node.clock.set(Timestamp(START + 1826 * DAY_MS + 1));
    let report = jobs::run(&node.directory, Job::Retention).await.unwrap();
    assert_eq!(report.archive_purged, 1);
    let left = node.archive(&key, None, None, 10).await.unwrap().turns;
    assert_eq!(left.len(), 1);
    assert_eq!(left[0].turn.user_text, "newer question");
    node.clock.advance(20 * DAY_MS);
    let report = jobs::run(&node.directory, Job::Retention).await.unwrap();
    assert_eq!(report.archive_purged, 1);
    assert!(
        node.archive(&key, None, None, 10)
            .await
            .unwrap()
            .turns
            .is_empty()
    );
    let user = node.keyspace.user("acme", "alice");
    assert!(node.rows_in(user.all_archived_turns()).await.is_empty());
    assert!(node.rows_in(user.archives()).await.is_empty());
    let report = jobs::run(&node.directory, Job::Retention).await.unwrap();
    assert_eq!(report.users, 0, "nothing of the archive is left indexed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_archive_is_sealed_and_forgetting_the_user_removes_it() {
    let dir = tempfile::tempdir().unwrap();
    let node = full_text_node(&dir, keyed(Cipher::Sm4Gcm));
    let (key, bob) = (alice(), UserKey::new("acme", "bob"));
    node.append(&key, turn("r1", "s1", "archived-secret question"))
        .await;
    node.append(&bob, turn("r1", "s1", "bob's question")).await;
    node.clock.advance(31 * DAY_MS);
    let report = jobs::run(&node.directory, Job::Retention).await.unwrap();
    assert_eq!((report.users, report.turns_removed), (2, 2));

    let user = node.keyspace.user("acme", "alice");
    let archived = node.rows_in(user.all_archived_turns()).await;
    assert_eq!(archived.len(), 1);
    assert!(archived.iter().all(|(_, v)| is_sealed(v)));
    assert!(!holds(&node.everything().await, b"archived-secret"));
    assert_eq!(
        node.archive(&key, None, None, 10).await.unwrap().turns[0]
            .turn
            .user_text,
        "archived-secret question",
        "opened with the user's data key"
    );

    node.forget(&key).await;
    let everything = node.everything().await;
    assert!(everything.iter().all(|(k, _)| !user.all().contains(k)));
    for (k, _) in &everything {
        if let Some((_, _, who, _)) = node.keyspace.parse_expiry(k) {
            assert_eq!(who, "bob", "an index entry of alice is left");
        }
    }
    assert!(
        node.archive(&key, None, None, 10)
            .await
            .unwrap()
            .turns
            .is_empty()
    );
    assert_eq!(
        node.archive(&bob, None, None, 10)
            .await
            .unwrap()
            .turns
            .len(),
        1
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backlog_larger_than_one_transaction_is_archived_in_one_sweep_and_read_by_pages() {
    let dir = tempfile::tempdir().unwrap();
    let node = full_text_node(&dir, Keyspace::new("engram"));
    let key = alice();
    // 80 turns of 8,000 characters: more than the 512 KiB one transaction archives.
    let long = "x".repeat(7_998);
    for i in 0..80 {
        node.append(&key, turn(&format!("r{i}"), "s1", &format!("{i:02}{long}")))
            .await;
    }
    node.clock.advance(31 * DAY_MS);
    let report = jobs::run(&node.directory, Job::Retention).await.unwrap();
    assert_eq!(report.turns_removed, 80);

    let mut seen = Vec::new();
    let mut after = None;
    loop {
        let page = node.archive(&key, Some("s1"), after, 30).await.unwrap();
        seen.extend(page.turns.iter().map(|t| t.turn.user_text[..2].to_owned()));
        match page.next {
            Some(next) => after = Some(next),
            None => break,
        }
    }
    let expected: Vec<String> = (0..80).map(|i| format!("{i:02}")).collect();
    assert_eq!(seen, expected);
    for limit in [0, 501] {
        let err = node.archive(&key, None, None, limit).await.unwrap_err();
        assert!(matches!(err, Error::InvalidInput { ref field, .. } if field == "limit"));
    }
}
