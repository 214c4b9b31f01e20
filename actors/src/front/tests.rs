//! The front door's frames: every request and reply survives the trip, errors keep their
//! meaning, and no frame a peer could send panics the receiver.

use engram_storage::access::Scope;
use engram_storage::types::Timestamp;
use proptest::prelude::*;

use super::*;
use crate::model::policy::Route;
use crate::model::retrieve::SearchMode;
use crate::request::user::*;

fn reader() -> Reader {
    Reader {
        principal: "0123abcd".into(),
        scope: Scope::Gateway,
        tenant: "acme".into(),
    }
}

fn requests() -> Vec<UserRequest> {
    vec![
        TurnRequest {
            request_id: "r1".into(),
            session_id: Some("s1".into()),
            user_text: "Show orders from dw_orders".into(),
            assistant_text: "Done".into(),
            route: Some(Route::Nl2sqlQuery),
            success: true,
            trace_id: None,
            choices: vec![("chart".into(), "line".into())],
            clarification: Some(Clarification {
                question: "GMV with or without refunds?".into(),
                answer: "without refunds".into(),
            }),
        }
        .into(),
        ContextQuery {
            session_id: None,
            query: Some("their total".into()),
            route: Route::KpiLookup,
            token_budget: 1200,
        }
        .into(),
        SearchQuery {
            query: "orders".into(),
            k: 5,
            kinds: vec![engram_storage::types::MemoryKind::Profile],
            mode: SearchMode::Hybrid,
            active_only: false,
            rerank: false,
        }
        .into(),
        MemoryWrite {
            request_id: "r2".into(),
            memory_id: None,
            kind: engram_storage::types::MemoryKind::Profile,
            text: "prefers line charts".into(),
            payload: serde_json::json!({"topic": "chart", "value": "line", "n": [1, 2.5]}),
            status: engram_storage::types::MemoryStatus::Active,
            namespace: "default".into(),
            scope: "global".into(),
            confidence: 0.5,
            salience: 0.5,
            valid_from: Some(Timestamp(1)),
            valid_to: None,
            session_id: None,
            source_route: None,
            source_agent: None,
            trace_id: None,
        }
        .into(),
        IntentWrite {
            request_id: "r3".into(),
            intent_type: "renewal".into(),
            fields: serde_json::json!({"when": "tomorrow"}),
        }
        .into(),
        ListSessions.into(),
        SessionQuery {
            session: "s1".into(),
            limit: 50,
        }
        .into(),
        Forget.into(),
        ApproveReads.into(),
    ]
}

#[test]
fn every_request_travels_whole_with_its_reader_and_user() {
    let user = UserKey::new("acme", "alice");
    for request in requests() {
        let credential = Credential::new("egk_0123abcd_secret");
        let frame = encode_call(&reader(), Some(&credential), &user, &request);
        let PeerCall {
            reader: r,
            credential: c,
            user: u,
            request: back,
        } = decode_call(&frame).unwrap();
        assert_eq!(c, Some(credential));
        assert_eq!((r, u, back), (reader(), user.clone(), request));
    }
}

#[test]
fn replies_and_faults_travel_whole_and_faults_keep_their_meaning() {
    let ok: Result<UserReply, Fault> = Ok(UserReply::ApproveReads(ApprovalAck { cleared: 3 }));
    assert_eq!(decode_reply(&encode_reply(&ok)).unwrap(), ok);
    for err in [
        Error::invalid("limit", "must be at least 1"),
        Error::NotFound {
            what: "session s1".into(),
        },
        Error::Forbidden("admins only".into()),
        Error::ApprovalRequired { reads: 5 },
        Error::NotOwner("moving".into()),
        Error::Overloaded("queue full".into()),
    ] {
        let before = err.to_string();
        let answer: Result<UserReply, Fault> = Err(Fault::from(err));
        let back = decode_reply(&encode_reply(&answer)).unwrap().unwrap_err();
        assert_eq!(Error::from(back).to_string(), before);
    }
    // The owner's internals stay on the owner.
    let internal = Fault::from(Error::Internal("stored value inconsistent".into()));
    assert!(!Error::from(internal).to_string().contains("inconsistent"));
}

#[test]
fn typed_replies_refuse_the_reply_of_another_request() {
    let reply = UserReply::ListSessions(Vec::new());
    assert!(typed::<ListSessions>(reply.clone()).is_ok());
    assert!(typed::<ApproveReads>(reply).is_err());
}

#[test]
fn malformed_frames_are_errors_not_panics() {
    let frame = encode_call(
        &reader(),
        None,
        &UserKey::new("acme", "a"),
        &ListSessions.into(),
    );
    assert!(decode_call(&[]).is_err());
    assert!(decode_call(&[9, 1, 2]).is_err());
    assert!(decode_call(&frame[..frame.len() / 2]).is_err());
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2_000, ..ProptestConfig::default() })]

    /// Fuzzing the peer frame decoders: any bytes a peer could send decode or fail cleanly,
    /// never panicking (ractor's own decoding cannot fail, so ours must not panic).
    #[test]
    fn any_frame_decodes_or_fails_cleanly(
        frame in proptest::collection::vec(any::<u8>(), 0..512),
        versioned in any::<bool>(),
    ) {
        let mut bytes = frame;
        if versioned {
            bytes.insert(0, engram_storage::codec::FORMAT_POSTCARD);
        }
        let _ = decode_call(&bytes);
        let _ = decode_reply(&bytes);
    }
}
