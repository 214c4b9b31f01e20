//! Tests of the stored replies of retried requests.

use super::*;
use crate::request::user::{ClearAck, FeedbackAck, TurnAck};

fn turn_ack() -> TurnAck {
    TurnAck {
        written: true,
        session_id: "s1".into(),
        seq: Some(3),
        entities: Vec::new(),
        memories: Vec::new(),
        intents: Vec::new(),
        distilling: false,
        replayed: false,
    }
}

#[test]
fn a_reply_replays_only_for_its_own_kind_of_request() {
    let bytes = stored_reply(&turn_ack()).unwrap();
    assert_eq!(replayed::<TurnAck>(&bytes).unwrap(), turn_ack());
    // A turn's reply carries `memories` and `replayed` too: without the kind a feedback
    // retry under the turn's request id would have replayed it.
    let err = replayed::<FeedbackAck>(&bytes).unwrap_err();
    assert!(
        err.to_string()
            .contains("already used for a different request"),
        "{err}"
    );
}

#[test]
fn replies_stored_before_they_carried_a_kind_and_with_fields_added_since_still_replay() {
    let legacy = serde_json::to_vec(&turn_ack()).unwrap();
    assert_eq!(replayed::<TurnAck>(&legacy).unwrap(), turn_ack());
    let mut newer = serde_json::to_value(StoredReply {
        kind: "clear-session".into(),
        format: REPLY_FORMAT + 1,
        ack: serde_json::json!({ "deleted": 2, "replayed": false, "added_later": 1 }),
    })
    .unwrap();
    newer["unknown"] = serde_json::json!(true);
    let bytes = serde_json::to_vec(&newer).unwrap();
    assert_eq!(replayed::<ClearAck>(&bytes).unwrap().deleted, 2);
}

#[test]
fn a_reply_this_build_cannot_read_is_ours_not_the_clients() {
    let bytes = serde_json::to_vec(&serde_json::json!({
        "kind": "turn", "format": 9, "ack": { "written": "perhaps" }
    }))
    .unwrap();
    assert!(matches!(
        replayed::<TurnAck>(&bytes),
        Err(Error::Internal(_))
    ));
}
