//! What each rule finds, and what it must leave to the model.

use super::*;

mod held_out;
mod labels_sets;

fn found(message: &str) -> Option<(String, Priority)> {
    apply(message).map(|d| (d.intent_type, d.priority))
}

#[test]
fn the_seed_rules_find_appointments_complaints_renewals_and_cancellations() {
    let hit = |m: &str, t: &str| assert_eq!(found(m).map(|f| f.0).as_deref(), Some(t), "{m}");
    hit("帮我预约明天下午的体检", "appointment");
    hit("我想约后天上午看牙", "appointment");
    hit(
        "Please book an appointment with Dr. Lee for tomorrow",
        "appointment",
    );
    hit("我要投诉，快递五天了还没到", "complaint");
    hit(
        "I want to file a complaint about the rude driver",
        "complaint",
    );
    hit("帮我把健身卡续一年", "subscription_renewal");
    hit("Please renew my annual plan", "subscription_renewal");
    hit("帮我取消视频会员的自动续费", "subscription_cancel");
    hit("Cancel my gym membership please", "subscription_cancel");
}

#[test]
fn a_complaint_about_something_not_done_late_or_slow_is_high_priority() {
    assert_eq!(
        found("我要投诉，维修师傅迟到了两个小时").unwrap().1,
        Priority::High
    );
    assert_eq!(found("投诉：退款至今未到账").unwrap().1, Priority::High);
    assert_eq!(
        found("I want to complain: my refund still hasn't arrived")
            .unwrap()
            .1,
        Priority::High
    );
    assert_eq!(found("我要投诉你们的客服态度").unwrap().1, Priority::Medium);
}

#[test]
fn questions_about_intents_and_negated_intents_are_left_to_the_model() {
    for message in [
        "预约需要带什么材料？",
        "我上次的投诉处理得怎么样了",
        "不是要投诉，就是问问进度",
        "When does my renewal take effect?",
        "I'm not cancelling, just asking how it works",
        "how do I cancel my subscription?",
    ] {
        assert_eq!(found(message), None, "{message}");
    }
    // A request marker makes a question form a request.
    assert_eq!(
        found("Can you book me a dentist appointment tomorrow at 3pm?").map(|f| f.0),
        Some("appointment".into())
    );
}

#[test]
fn a_cancellation_wins_over_the_renewal_words_inside_it_and_the_target_is_its_clause() {
    let d = apply("你好，帮我取消自动续费，谢谢").unwrap();
    assert_eq!(d.intent_type, "subscription_cancel");
    assert_eq!(d.target, "帮我取消自动续费");
}

#[test]
fn grievances_without_the_word_complaint_are_complaints_even_as_questions() {
    for message in [
        "快递三天了还没到，你们怎么回事",
        "退款申请提交两周了还没到账",
        "My parcel never arrived, where is it??",
        "The blender arrived broken",
    ] {
        assert_eq!(
            found(message).map(|f| f.0).as_deref(),
            Some("complaint"),
            "{message}"
        );
    }
    assert_eq!(
        found("快递三天了还没到，你们怎么回事").unwrap().1,
        Priority::High
    );
}

#[test]
fn cancellations_are_found_by_what_is_stopped_not_only_by_the_word_cancel() {
    for message in [
        "把音乐会员的自动续费关掉",
        "这个会员我不想用了，别再扣费了",
        "年卡我要退掉",
        "Please turn off auto-renewal for my storage plan",
        "don't renew my newspaper subscription",
    ] {
        assert_eq!(
            found(message).map(|f| f.0).as_deref(),
            Some("subscription_cancel"),
            "{message}"
        );
    }
}

#[test]
fn not_needing_a_renewal_any_more_is_a_cancellation_and_not_needing_one_to_act_is_not() {
    for message in [
        "我不需要续订了",
        "宽带不用续费了",
        "会员我不想续了",
        "杂志不要再续了",
    ] {
        assert_eq!(
            found(message).map(|f| f.0).as_deref(),
            Some("subscription_cancel"),
            "{message}"
        );
    }
    for message in ["不需要续费就能继续用吗？", "我不是要续订，只是问问价格"]
    {
        assert_eq!(found(message), None, "{message}");
    }
}

#[test]
fn a_filler_is_no_question_and_stopping_what_it_names_is_a_cancellation() {
    for message in ["那个什么健身房会员，帮我停掉吧", "音乐会员什么的都取消掉"]
    {
        assert!(!no_new_intent(message), "{message}");
        assert_eq!(
            found(message).map(|f| f.0).as_deref(),
            Some("subscription_cancel"),
            "{message}"
        );
    }
    assert!(no_new_intent("会员有什么用？"), "a real question stays one");
}

#[test]
fn a_booking_already_made_and_told_carries_no_new_intent() {
    for message in [
        "已经约好后天下午了，跟你们说一声我可能晚十分钟",
        "刚订好周五的位子了，告诉你们一声",
    ] {
        assert_eq!(found(message), None, "{message}");
    }
}

#[test]
fn getting_back_a_stopped_plan_is_a_renewal() {
    for message in ["上个月暂停的游泳课想恢复", "帮我恢复之前的会员"] {
        assert_eq!(
            found(message).map(|f| f.0).as_deref(),
            Some("subscription_renewal"),
            "{message}"
        );
    }
    assert_eq!(
        found("手机里的照片能恢复吗？"),
        None,
        "restoring data is no renewal"
    );
}

#[test]
fn not_needing_the_plan_any_more_in_english_is_a_cancellation() {
    for message in [
        "we don't need the membership anymore",
        "I no longer want my storage plan",
    ] {
        assert_eq!(
            found(message).map(|f| f.0).as_deref(),
            Some("subscription_cancel"),
            "{message}"
        );
    }
    assert_eq!(
        found("Do I need the membership to book a class?"),
        None,
        "a question about needing one"
    );
}

#[test]
fn work_not_done_as_asked_is_a_grievance_even_as_a_question() {
    for message in [
        "They painted the fence a different colour than we asked for. Can you fix it?",
        "Not happy with the cleaning today, the kitchen was skipped",
    ] {
        assert_eq!(
            found(message).map(|f| f.0).as_deref(),
            Some("complaint"),
            "{message}"
        );
    }
}

#[test]
fn status_questions_negations_and_plain_questions_carry_no_new_intent() {
    for message in [
        "我报修的单子处理得怎么样了",
        "did my refund go through?",
        "我不想取消，只是问问",
        "你们几点关门？",
        "How much is the yearly plan?",
    ] {
        assert!(no_new_intent(message), "{message}");
        assert_eq!(found(message), None, "{message}");
    }
    for message in [
        "帮我预约明天上午的体检",
        "Can I book a table for tomorrow at 7pm?",
        "快递还没到，怎么回事？",
    ] {
        assert!(!no_new_intent(message), "{message}");
    }
}

#[test]
fn a_question_for_a_slot_is_a_booking_request_not_a_plain_question() {
    for message in [
        "周六晚上七点还能订三个人的位子吗",
        "Is there any slot for a check-up next week?",
        "what's the earliest you can fit me in for a haircut?",
    ] {
        assert!(!no_new_intent(message), "{message}");
    }
    assert!(no_new_intent("预约需要带什么材料？"), "asks what to bring");
}

#[test]
fn a_question_about_an_intent_already_made_is_no_new_intent_unless_it_voices_a_grievance() {
    for message in [
        "上次约的理发是几点来着？",
        "我订的那张年卡现在还有效吗",
        "已经取消了自动续费，为什么这个月还扣？",
        "我退订成功了吗",
        "I renewed yesterday, when will the receipt arrive?",
        "新套餐什么时候生效？",
    ] {
        assert!(no_new_intent(message), "{message}");
        assert_eq!(found(message), None, "{message}");
    }
    // A grievance about it, a new request beside it, or a status word that instructs.
    for message in [
        "我约的师傅怎么还没来？",
        "之前预约的时间不行，帮我改到周五下午",
        "I booked a table for tonight and nobody called back, still waiting?",
    ] {
        assert!(!no_new_intent(message), "{message}");
    }
    assert_eq!(
        found("请终止保洁服务合同，月底生效。")
            .map(|f| f.0)
            .as_deref(),
        Some("subscription_cancel")
    );
}

#[test]
fn a_question_naming_only_the_word_complaint_asks_about_complaints() {
    for message in [
        "投诉电话是多少？",
        "What's your complaints procedure?",
        "差评可以修改吗",
    ] {
        assert!(no_new_intent(message), "{message}");
        assert_eq!(found(message), None, "{message}");
    }
    // A grievance or a request beside the word is a complaint.
    for message in [
        "投诉了三次都没人理，你们怎么回事？",
        "我要投诉，怎么投诉？",
        "Can I file a complaint about the driver?",
    ] {
        assert_eq!(
            found(message).map(|f| f.0).as_deref(),
            Some("complaint"),
            "{message}"
        );
    }
}

#[test]
fn asking_how_far_an_earlier_request_got_carries_no_new_intent() {
    for message in [
        "我上个月投诉的退款问题，现在处理到哪一步了？",
        "Is my booking for Friday still confirmed?",
        "上次报修的热水器处理到什么程度了",
    ] {
        assert!(no_new_intent(message), "{message}");
        assert_eq!(found(message), None, "{message}");
    }
    // The earlier complaint named beside a new grievance is still a complaint.
    assert_eq!(
        found("我上周投诉的问题怎么还没人处理？")
            .map(|f| f.0)
            .as_deref(),
        Some("complaint")
    );
}

#[test]
fn switching_off_an_automatic_renewal_is_a_cancellation_not_a_renewal() {
    for message in [
        "Please switch off auto-renewal for my music plan",
        "disable auto-renew on my VPN subscription",
        "I'd like to shut off the auto renewal, thanks",
    ] {
        assert_eq!(
            found(message).map(|f| f.0).as_deref(),
            Some("subscription_cancel"),
            "{message}"
        );
    }
}

#[test]
fn moving_an_earlier_booking_is_a_new_request() {
    for message in [
        "上次约的周二洗牙，能不能改到周四上午？",
        "I booked a massage for Friday, can you move it to Saturday?",
    ] {
        assert!(!no_new_intent(message), "{message}");
    }
    assert!(no_new_intent("上次约的周二洗牙是几点来着？"));
}

#[test]
fn a_question_about_opening_hours_is_no_request_for_a_slot() {
    for message in [
        "你们门店周六几点开门？",
        "Are you open on Sunday afternoon?",
        "What time do you close on Friday?",
    ] {
        assert!(no_new_intent(message), "{message}");
    }
    assert!(!no_new_intent("周六下午还有位置吗？"), "asks for a slot");
}

#[test]
fn a_wish_or_a_request_to_someone_beside_a_question_is_still_a_request() {
    for message in [
        "下个月会员到期，打算再续半年，怎么付款？",
        "年卡快到期了，想直接再续两年，有折扣吗？",
        "车位不用了，想注销，需要带什么？",
        "The invoice shows the wrong address, could someone look into it?",
    ] {
        assert!(!no_new_intent(message), "{message}");
    }
    // Saying it only asks, or asking whether or how long, carries no new intent.
    for message in [
        "续费一般多久到账？",
        "年卡续费会不会涨价",
        "退订了积分会清零吗？就是问问",
        "Just wondering whether cancelling early costs anything",
    ] {
        assert!(no_new_intent(message), "{message}");
    }
}

#[test]
fn topping_up_a_plan_is_a_renewal() {
    for message in [
        "Please top up my prepaid SIM with 10GB",
        "帮我充值一个月的视频会员",
    ] {
        assert_eq!(
            found(message).map(|f| f.0).as_deref(),
            Some("subscription_renewal"),
            "{message}"
        );
    }
}

/// The benchmark's labelled sets (`benches/distil.rs`: every `inference/data/*.jsonl`): each
/// line names a known type, a target for every intent and none for "none", and an id no
/// other line of any set has.
#[test]
fn every_labelled_set_is_well_formed() {
    use crate::distil::{DEFAULT_INTENT_TYPES, NO_INTENT};
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("data");
    let mut sets: Vec<(String, String)> = std::fs::read_dir(&dir)
        .expect("inference/data")
        .map(|entry| entry.expect("inference/data").path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "jsonl"))
        .map(|path| {
            let text = std::fs::read_to_string(&path).expect("a labelled set");
            (
                path.file_name().unwrap().to_string_lossy().into_owned(),
                text,
            )
        })
        .collect();
    sets.sort();
    let names: Vec<&str> = sets.iter().map(|(name, _)| name.as_str()).collect();
    assert_eq!(names.len(), 23, "{names:?}");
    let mut ids = std::collections::HashSet::new();
    for (file, text) in &sets {
        for (n, line) in text.lines().enumerate() {
            let at = format!("{file}:{}", n + 1);
            let v: serde_json::Value =
                serde_json::from_str(line).unwrap_or_else(|err| panic!("{at}: {err}"));
            let t = v["intent_type"].as_str().expect("intent_type");
            assert!(
                t == NO_INTENT || DEFAULT_INTENT_TYPES.contains(&t),
                "{at}: {t}"
            );
            let targets = v["target_any"].as_array().expect("target_any");
            // A cancellation may name no subscription ("我不需要续订了") in the sets that
            // label fields.
            let may_name_none = t == "subscription_cancel" && v.get("fields").is_some();
            assert!(
                targets.is_empty() == (t == NO_INTENT) || (targets.is_empty() && may_name_none),
                "{at}: target_any"
            );
            assert!(v["message"].as_str().is_some_and(|m| !m.is_empty()), "{at}");
            assert!(
                ids.insert(v["id"].as_str().expect("id").to_owned()),
                "{at}: id again"
            );
        }
    }
    assert_eq!(ids.len(), 186 + 22 * 84);
}
