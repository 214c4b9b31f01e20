//! Entity-centred retrieval through the user actors on a real SQLite file: a hybrid search
//! that names someone ranks first the memory whose own turn names them, where words alone
//! (the neighbouring turns' words included) rank another first.

use engram_actors::model::index::IndexParams;
use engram_actors::model::retrieve::RetrieverParams;
use engram_actors::services::Settings;

mod plain;
use plain::{Node, node, search_episodes, write_episode};

/// Appends a turn to one session (so each turn is indexed with its neighbours' words).
async fn write(node: &Node, id: &str, text: &str) -> String {
    write_episode(node, id, "one-session", text).await
}

async fn first(node: &Node, query: &str) -> String {
    let found = search_episodes(node, query).await;
    found.hits[0].memory.memory_id.clone()
}

/// Three turns of one session, each indexed with its neighbours' words: two about hiking to
/// the lake, the third naming Jonas. Which one a question naming Jonas finds first.
async fn hiking(settings: Settings) -> (String, String) {
    let dir = tempfile::tempdir().unwrap();
    let node = node(&dir, settings);
    let _ = write(&node, "t0", "The lake trail is the best hiking near us").await;
    let _ = write(&node, "t1", "We went hiking up to the lake and back").await;
    let jonas = write(&node, "t2", "My friend Jonas came along").await;
    let asked = first(
        &node,
        "when did Jonas go hiking on the trail up to the lake",
    )
    .await;
    (asked, jonas)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_search_naming_someone_ranks_first_the_memory_whose_turn_names_them() {
    let (asked, jonas) = hiking(Settings::default()).await;
    assert_eq!(asked, jonas, "the turn that names Jonas comes first");

    // Without the entity weight the words alone put the middle turn first: it is indexed with
    // both its neighbours' words, the trail's and Jonas's.
    let plain = Settings {
        index: IndexParams {
            retriever: RetrieverParams {
                entity_weight: 0.0,
                ..RetrieverParams::default()
            },
            ..IndexParams::default()
        },
        ..Settings::default()
    };
    let (asked, jonas) = hiking(plain).await;
    assert_ne!(asked, jonas, "words alone rank the middle turn first");
}
