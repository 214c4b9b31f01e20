//! Temporal grounding through the user actors on a real SQLite file with a manual clock: a
//! hybrid search that names a time ranks first the memory written then, or speaking of it,
//! where words and recency alone rank another first.

use engram_actors::model::policy::DAY_MS;
use engram_actors::request::user::SearchResult;
use engram_actors::services::Settings;

mod plain;
use plain::{Node, node, search_episodes, write_episode};

async fn write(node: &Node, id: &str, text: &str) -> String {
    // Each turn in a session of its own: no neighbours' words.
    write_episode(node, id, id, text).await
}

async fn search(node: &Node, query: &str) -> SearchResult {
    search_episodes(node, query).await
}

fn first(found: &SearchResult) -> &str {
    &found.hits[0].memory.memory_id
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_search_naming_a_time_ranks_first_the_memory_written_then_or_speaking_of_it() {
    let dir = tempfile::tempdir().unwrap();
    let node = node(&dir, Settings::default());
    // The clock starts on Tuesday 14 November 2023 (UTC).
    let dinner = write(
        &node,
        "t1",
        "Dinner at the harbour restaurant with the team",
    )
    .await;
    node.clock.advance(10 * DAY_MS);
    // Friday 24 November: a shorter, newer turn with the same words, and one that speaks of
    // the next day.
    let again = write(&node, "t2", "Dinner at the harbour").await;
    let plans = write(
        &node,
        "t3",
        "Tomorrow: dinner at the harbour restaurant with the whole family, finally",
    )
    .await;

    // Words and recency alone put the short new turn first.
    assert_eq!(first(&search(&node, "harbour dinner").await), again);
    // Last week (13-19 November) is when the first dinner was written.
    assert_eq!(
        first(&search(&node, "harbour dinner last week").await),
        dinner
    );
    // "Tomorrow" in a turn of 24 November is the 25th.
    assert_eq!(
        first(&search(&node, "harbour dinner on 25 November").await),
        plans
    );
}
