//! The queue of pending inference on the in-memory SQLite store: a vector is stored only for
//! the text its entry still holds, and the work index follows the entries.

use super::{Completion, pending_users};
use crate::data::tests::{record, with_user};
use crate::types::{Embedding, MemoryKind, MemoryStatus, PendingInference, Timestamp};
use crate::{Keyspace, Store, WorkQueue};

#[test]
fn a_vector_is_stored_only_for_the_text_still_pending_and_the_work_index_follows() {
    let (store, ks) = (Store::in_memory().unwrap(), Keyspace::new("engram"));
    let pending = |text: &str, at: i64| PendingInference {
        kind: MemoryKind::Episodic,
        text: text.into(),
        queued_at: Timestamp(at),
    };
    let vector = Embedding {
        model: "e5".into(),
        vector: vec![1.0],
    };
    with_user(&store, &ks, "alice", |u| {
        for id in ["m1", "m2", "m3"] {
            u.put_record(&record(id, MemoryKind::Episodic, None))?;
            u.put_pending(id, &pending(&format!("text {id}"), 5))?;
        }
        // m1 is rewritten before its vector comes, m3 deleted, m4 marked deleted (its record
        // kept).
        u.put_pending("m1", &pending("text m1 again", 7))?;
        u.remove_record(MemoryKind::Episodic, "m3")?;
        let mut gone = record("m4", MemoryKind::Episodic, None);
        gone.status = MemoryStatus::Deleted;
        u.put_record(&gone)?;
        u.put_pending("m4", &pending("text m4", 6))?;
        Ok(())
    });
    let users = store
        .read_blocking(|txn| pending_users(txn, &ks, WorkQueue::Embedding, None, 10))
        .unwrap();
    assert_eq!(users.len(), 1);
    assert_eq!(
        (users[0].user.as_str(), users[0].since),
        ("alice", Timestamp(5)),
        "the mark keeps the oldest queue time"
    );
    use Completion::{Dropped, Stored};
    let outcomes = with_user(&store, &ks, "alice", |u| {
        let outcomes = [
            u.complete_pending("m1", "text m1", &vector)?,
            u.complete_pending("m2", "text m2", &vector)?,
            u.complete_pending("m3", "text m3", &vector)?,
            u.complete_pending("m4", "text m4", &vector)?,
        ];
        assert_eq!(
            u.settle_pending()?,
            Some(Timestamp(7)),
            "m1's new text is left"
        );
        Ok(outcomes)
    });
    assert_eq!(outcomes, [Dropped, Stored, Dropped, Dropped]);
    let left = with_user(&store, &ks, "alice", |u| {
        Ok((
            u.pending_entries(10)?,
            u.embedding("m1")?,
            u.embedding("m2")?,
        ))
    });
    assert_eq!(
        left.0.len(),
        1,
        "the rewritten text still waits, the deleted record's entry is gone"
    );
    assert_eq!(left.0[0].1.text, "text m1 again");
    assert_eq!((left.1, left.2), (None, Some(vector.clone())));
    with_user(&store, &ks, "alice", |u| {
        assert_eq!(u.complete_pending("m1", "text m1 again", &vector)?, Stored);
        assert_eq!(u.settle_pending()?, None, "nothing is left");
        assert_eq!(u.count_pending()?, 0);
        Ok(())
    });
    let users = store
        .read_blocking(|txn| pending_users(txn, &ks, WorkQueue::Embedding, None, 10))
        .unwrap();
    assert!(users.is_empty(), "the mark is cleared with the last entry");
}
