//! Tests of formation rules.

use engram_storage::types::{MemoryKind, MemoryStatus, Timestamp, Trigger, Turn};

use super::*;

fn turn(user: &str) -> Turn {
    Turn {
        session_id: "s1".into(),
        seq: 4,
        request_id: "r".into(),
        trace_id: None,
        route: Some("nl2sql_query".into()),
        user_text: user.into(),
        assistant_text: "The GMV was 1,234 yuan.".into(),
        entities: vec!["GMV".into()],
        created_at: Timestamp(0),
        written_under: None,
        pii_level: engram_storage::types::PiiLevel::None,
    }
}

/// What `turn` forms, its form read as the actor reads it before the transaction.
fn from_turn(turn: &Turn, success: bool) -> Vec<NewMemory> {
    let form = TurnForm::of(&turn.user_text, &turn.assistant_text, &turn.entities);
    super::from_turn(turn, &form, success)
}

#[test]
fn failed_turns_form_nothing() {
    assert!(from_turn(&turn("I prefer line charts"), false).is_empty());
}

#[test]
fn successful_turns_form_an_episodic_candidate_that_says_why() {
    let formed = from_turn(&turn("What was the GMV last week?"), true);
    assert_eq!(formed.len(), 1);
    assert_eq!(
        (formed[0].kind, formed[0].status, &formed[0].trigger),
        (
            MemoryKind::Episodic,
            MemoryStatus::Candidate,
            &Trigger::SuccessfulTurn
        )
    );
    assert!(formed[0].summary_text.contains("1,234"));
}

#[test]
fn explicit_preferences_form_active_profile_memories_with_topics() {
    let formed = from_turn(
        &turn("I prefer line charts. Also, we usually want monthly numbers"),
        true,
    );
    let profiles: Vec<_> = formed
        .iter()
        .filter(|m| m.kind == MemoryKind::Profile)
        .collect();
    assert_eq!(profiles.len(), 2, "{formed:?}");
    assert_eq!(
        (profiles[0].topic(), profiles[0].value()),
        (Some("chart_type"), Some("line"))
    );
    assert_eq!(
        (profiles[1].topic(), profiles[1].value()),
        (Some("granularity"), Some("monthly"))
    );
    assert!(
        profiles
            .iter()
            .all(|p| p.status == MemoryStatus::Active && p.trigger == Trigger::ExplicitStatement)
    );
}

#[test]
fn chinese_preferences_are_recognised() {
    let p = preferences("我更喜欢用柱状图，以后都按周汇总");
    assert_eq!(p.len(), 2, "{p:?}");
    assert_eq!(
        (p[0].topic.as_str(), p[0].value.as_str()),
        ("chart_type", "bar")
    );
    assert_eq!(
        (p[1].topic.as_str(), p[1].value.as_str()),
        ("granularity", "weekly")
    );
    assert!(preferences("上个月华东的销售额是多少").is_empty());
}

#[test]
fn unknown_preferences_get_a_topic_of_their_own() {
    let p = preferences("I like dark mode dashboards");
    assert_eq!(p.len(), 1);
    assert_eq!(p[0].topic, "pref:dark_mode_dashboards");
}

#[test]
fn a_dislike_with_sql_and_comment_forms_a_correction_candidate_with_confidence_0_8() {
    let fb = Feedback {
        liked: false,
        corrected_sql: Some("select sum(price) from orders where price > 0".into()),
        comment: Some("GMV excludes refunds: filter price > 0".into()),
    };
    let formed = from_feedback(&fb, Some(&turn("GMV?")));
    assert_eq!(formed.len(), 1);
    assert_eq!(
        (formed[0].kind, formed[0].status),
        (MemoryKind::Correction, MemoryStatus::Candidate)
    );
    assert_eq!(
        formed[0].confidence, 0.8,
        "the seed's confidence of a correction"
    );
    assert_eq!(
        formed[0].payload["corrected_sql"],
        "select sum(price) from orders where price > 0"
    );
    assert_eq!(
        formed[0].summary_text,
        "GMV excludes refunds: filter price > 0"
    );
    assert!(
        from_feedback(
            &Feedback {
                comment: None,
                ..fb.clone()
            },
            None
        )
        .is_empty()
    );
    assert!(from_feedback(&Feedback { liked: true, ..fb }, None).is_empty());
}

#[test]
fn an_accepted_clarification_forms_an_active_episodic_memory_of_question_and_answer() {
    let formed = from_clarification(
        "GMV with or without refunds?",
        "without refunds",
        &turn("GMV last month"),
    );
    assert_eq!(
        (formed.kind, formed.status, formed.trigger),
        (
            MemoryKind::Episodic,
            MemoryStatus::Active,
            Trigger::Clarification
        )
    );
    assert_eq!(
        formed.summary_text,
        "clarified: GMV with or without refunds? → without refunds"
    );
    assert_eq!(formed.payload["answer"], "without refunds");
}
