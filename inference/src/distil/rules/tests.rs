//! What each rule finds, and what it must leave to the model.

use super::*;

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

#[test]
fn a_fault_told_beside_a_question_is_left_to_the_model() {
    for message in [
        "App一直登不上，是不是你们系统出问题了？",
        "The dishwasher you installed isn't working, is that normal?",
        "My scooter arrived with a broken headlight?? who checks these",
    ] {
        assert!(!no_new_intent(message), "{message}");
    }
    // Naming a fault in a plain question is no fault told.
    for message in ["Do you repair broken screens?", "路由器故障怎么报修？"] {
        assert!(no_new_intent(message), "{message}");
    }
}

#[test]
fn a_wish_to_stop_something_through_an_application_is_a_request() {
    assert_eq!(
        found("因为要出国，想申请终止宽带合约，需要带什么材料？").map(|f| f.0),
        Some("subscription_cancel".into())
    );
}

#[test]
fn asking_to_confirm_an_earlier_change_asks_after_it() {
    for message in [
        "上周已经把体检改到下周一了，麻烦确认一下有没有改成功",
        "Just checking the refund I asked for was approved",
        "I rebooked the plumber for Monday, can you confirm he's coming?",
        "the payment for my plan was processed?",
    ] {
        assert!(no_new_intent(message), "{message}");
    }
}

#[test]
fn a_question_about_the_customers_own_booking_is_no_request_for_a_slot() {
    for message in [
        "When is my car service on Friday? I lost the email",
        "我的体检是明天几点来着？",
    ] {
        assert!(no_new_intent(message), "{message}");
    }
    assert!(!no_new_intent("明天下午还能约吗？"));
}

#[test]
fn asking_whether_a_booking_is_needed_is_no_request() {
    for message in [
        "Do I need to book ahead for the spa?",
        "How long before do we need to reserve a court?",
    ] {
        assert!(no_new_intent(message), "{message}");
    }
    assert!(!no_new_intent(
        "I need to book a table for Friday, is 7pm free?"
    ));
}

#[test]
fn a_message_that_only_gives_personal_data_carries_no_intent() {
    for message in [
        "你们上次让我补资料，我的身份证号是110101199001011234",
        "My new mobile is 13800000000, please note it",
    ] {
        assert!(no_new_intent(message), "{message}");
    }
    // Beside a request or a grievance, personal data is part of it.
    assert_eq!(
        found("手机13800000000，帮我约周六下午剪头发").map(|f| f.0),
        Some("appointment".into())
    );
    assert!(!no_new_intent(
        "My email is a@b.co and the parcel never arrived"
    ));
}

#[test]
fn someone_else_complaining_of_how_they_feel_is_no_complaint() {
    assert_ne!(
        found("My son has been complaining of ear pain, can I book him in with the GP?")
            .map(|f| f.0)
            .as_deref(),
        Some("complaint")
    );
    assert_eq!(
        found("I'm complaining about the noise again").map(|f| f.0),
        Some("complaint".into())
    );
}

#[test]
fn asking_how_many_days_or_whether_midway_is_a_plain_question() {
    for message in ["体检报告一般要等几天？", "停车场可以过夜吗，收不收费"]
    {
        assert!(no_new_intent(message), "{message}");
    }
}

#[test]
fn a_billing_error_is_a_complaint_even_as_a_question() {
    for message in [
        "电费怎么重复扣了一次？我只用了这么点",
        "Why was I billed twice for March?",
    ] {
        assert_eq!(
            found(message).map(|f| f.0).as_deref(),
            Some("complaint"),
            "{message}"
        );
    }
}

#[test]
fn a_wish_told_as_going_on_or_no_longer_needing_is_a_request() {
    for message in [
        "钢琴课下学期继续上，学费怎么交？",
        "I no longer need the storage unit, how do I end it?",
    ] {
        assert!(!no_new_intent(message), "{message}");
    }
    assert_eq!(
        found("What's the price for another term? If it's the same, go ahead and renew it.")
            .map(|f| f.0),
        Some("subscription_renewal".into())
    );
}

#[test]
fn asking_whether_an_arranged_visit_still_holds_asks_after_it() {
    for message in [
        "上周约好的保洁阿姨，明天确定会来吧？",
        "Is the electrician still coming on Monday?",
    ] {
        assert!(no_new_intent(message), "{message}");
    }
}

#[test]
fn asking_someone_to_come_or_look_at_a_time_is_an_appointment() {
    assert_eq!(
        found("The boiler is making a banging noise - can someone come out tomorrow?").map(|f| f.0),
        Some("appointment".into())
    );
}

#[test]
fn correcting_personal_details_of_a_booking_is_no_new_intent() {
    for message in [
        "周六的预约登记的电话写错了，应该是13800000000",
        "Re my booking on Monday: my email is spelt wrong, it's test@example.com",
    ] {
        assert!(no_new_intent(message), "{message}");
    }
}

#[test]
fn demanding_an_answer_dirt_and_new_damage_are_complaints() {
    for message in [
        "外卖里吃出一根头发，你们必须给个说法",
        "The rental van had a dent that wasn't there before I picked it up",
    ] {
        assert_eq!(
            found(message).map(|f| f.0).as_deref(),
            Some("complaint"),
            "{message}"
        );
    }
}

#[test]
fn not_wanting_it_any_more_or_telling_to_just_stop_it_is_a_request() {
    assert!(!no_new_intent("报纸不想要了，能停掉吗"));
    assert_eq!(
        found("how do I get out of this gym contract?? just stop it").map(|f| f.0),
        Some("subscription_cancel".into())
    );
}

#[test]
fn asking_whether_a_payment_arrived_asks_after_it() {
    assert!(no_new_intent("续费的钱我昨天就付了，麻烦看看到账了没"));
}

#[test]
fn updating_contact_details_beside_a_booking_kept_is_no_new_intent() {
    for message in [
        "周五的预约时间不变，手机号换成13800000000",
        "Keeping my Monday booking, please update my phone to 555 0100",
    ] {
        assert!(no_new_intent(message), "{message}");
    }
}

#[test]
fn a_choice_a_condition_or_only_finding_out_is_no_wish() {
    for message in [
        "Do I need to reserve, or can I just turn up?",
        "What happens if I want to cancel mid-term?",
        "如果中途退订，费用怎么算？",
        "退订会员会扣违约金吗？先了解一下",
    ] {
        assert!(no_new_intent(message), "{message}");
    }
}

#[test]
fn something_ruined_or_charged_after_it_was_stopped_is_a_complaint() {
    for message in [
        "理发师把我的刘海剪坏了，怎么办",
        "Billed again for the add-on I cancelled in May. Seriously?",
    ] {
        assert_eq!(
            found(message).map(|f| f.0).as_deref(),
            Some("complaint"),
            "{message}"
        );
    }
}

#[test]
fn not_taking_it_from_some_time_on_is_a_cancellation() {
    for message in [
        "钢琴课下个月就不上了",
        "We won't be needing the parking permit after June.",
        "How do I get out of my phone contract early? I want it ended.",
    ] {
        assert_eq!(
            found(message).map(|f| f.0).as_deref(),
            Some("subscription_cancel"),
            "{message}"
        );
    }
}

#[test]
fn topping_up_to_go_on_using_it_and_asking_whether_a_change_was_confirmed() {
    assert_eq!(
        found("手机卡充五十进去，还要继续用").map(|f| f.0),
        Some("subscription_renewal".into())
    );
    assert!(no_new_intent("我约的体检改到下周了，确认下来了吗"));
}

#[test]
fn details_that_should_be_otherwise_are_corrections() {
    for message in [
        "My birthday is 3 May, not 5 May - please fix the loyalty account",
        "The surname on my policy should be Lee now",
    ] {
        assert!(no_new_intent(message), "{message}");
    }
}

#[test]
fn a_phone_number_right_after_chinese_text_is_personal_data() {
    // A Unicode word boundary sees none between 话 and 1: the rules' boundaries are ASCII.
    assert!(no_new_intent("我叫王五，电话13900002222，有事打我"));
    // Beside a day and a time, the number is part of a request.
    assert!(!no_new_intent("明早九点开车过去保养，电话13800000000"));
}

#[test]
fn sending_someone_over_at_a_time_is_an_appointment() {
    assert_eq!(
        found("空调不制冷，明天上午能安排个师傅来看看吗").map(|f| f.0),
        Some("appointment".into())
    );
}

#[test]
fn a_bill_worked_out_wrong_or_asking_for_a_manager_is_a_complaint() {
    for message in [
        "水费怎么这么高，肯定算错了",
        "I'd like to speak to a manager about how my order was handled",
    ] {
        assert_eq!(
            found(message).map(|f| f.0).as_deref(),
            Some("complaint"),
            "{message}"
        );
    }
}

#[test]
fn not_wanting_to_go_on_or_being_done_with_it_is_a_cancellation() {
    assert!(!no_new_intent("网络电视要注销，流程是什么？"));
    for message in [
        "瑜伽课不想再上了，卡里的钱能退吗",
        "We're done with the meal kits, no more after this week please",
    ] {
        assert_eq!(
            found(message).map(|f| f.0).as_deref(),
            Some("subscription_cancel"),
            "{message}"
        );
    }
    assert!(no_new_intent(
        "Just checking the dinner for six on Friday is still on"
    ));
}

/// The benchmark's labelled sets (`benches/distil.rs`, every `inference/data/*.jsonl`): each line names a known type, a
/// target for every intent and none for "none", and an id no other line of any set has.
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
    assert_eq!(names.len(), 8, "{names:?}");
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
            assert_eq!(targets.is_empty(), t == NO_INTENT, "{at}: target_any");
            assert!(v["message"].as_str().is_some_and(|m| !m.is_empty()), "{at}");
            assert!(
                ids.insert(v["id"].as_str().expect("id").to_owned()),
                "{at}: id again"
            );
        }
    }
    assert_eq!(ids.len(), 186 + 7 * 84);
}
