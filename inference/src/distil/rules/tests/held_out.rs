//! The classes of messages the fourth to twelfth held-out sets showed (each pinned with
//! messages that are in no set: docs/benchmarks.md, "Held-out sets").

use super::found;
use crate::distil::rules::no_new_intent;

/// The rules find `intent_type` in each of `messages`.
pub(super) fn finds(intent_type: &str, messages: &[&str]) {
    for message in messages {
        let found = found(message).map(|f| f.0);
        assert_eq!(found.as_deref(), Some(intent_type), "{message}");
    }
}

/// The rules see no new intent in any of `messages`, whatever a model reads into them.
pub(super) fn no_intent(messages: &[&str]) {
    for message in messages {
        assert!(no_new_intent(message), "{message}");
    }
}

/// The rules leave each of `messages` to themselves or the model: no veto.
pub(super) fn not_vetoed(messages: &[&str]) {
    for message in messages {
        assert!(!no_new_intent(message), "{message}");
    }
}

#[test]
fn a_fault_told_beside_a_question_is_left_to_the_model() {
    not_vetoed(&[
        "App一直登不上，是不是你们系统出问题了？",
        "The dishwasher you installed isn't working, is that normal?",
        "My scooter arrived with a broken headlight?? who checks these",
    ]);
    // Naming a fault in a plain question is no fault told.
    no_intent(&["Do you repair broken screens?", "路由器故障怎么报修？"]);
}

#[test]
fn a_wish_to_stop_something_through_an_application_is_a_request() {
    finds(
        "subscription_cancel",
        &["因为要出国，想申请终止宽带合约，需要带什么材料？"],
    );
}

#[test]
fn asking_to_confirm_an_earlier_change_asks_after_it() {
    no_intent(&[
        "上周已经把体检改到下周一了，麻烦确认一下有没有改成功",
        "Just checking the refund I asked for was approved",
        "I rebooked the plumber for Monday, can you confirm he's coming?",
        "the payment for my plan was processed?",
    ]);
}

#[test]
fn a_question_about_the_customers_own_booking_is_no_request_for_a_slot() {
    no_intent(&[
        "When is my car service on Friday? I lost the email",
        "我的体检是明天几点来着？",
    ]);
    not_vetoed(&["明天下午还能约吗？"]);
}

#[test]
fn asking_whether_a_booking_is_needed_is_no_request() {
    no_intent(&[
        "Do I need to book ahead for the spa?",
        "How long before do we need to reserve a court?",
    ]);
    not_vetoed(&["I need to book a table for Friday, is 7pm free?"]);
}

#[test]
fn a_message_that_only_gives_personal_data_carries_no_intent() {
    no_intent(&[
        "你们上次让我补资料，我的身份证号是110101199001011234",
        "My new mobile is 13800000000, please note it",
    ]);
    // Beside a request or a grievance, personal data is part of it.
    finds("appointment", &["手机13800000000，帮我约周六下午剪头发"]);
    not_vetoed(&["My email is a@b.co and the parcel never arrived"]);
}

#[test]
fn someone_else_complaining_of_how_they_feel_is_no_complaint() {
    assert_ne!(
        found("My son has been complaining of ear pain, can I book him in with the GP?")
            .map(|f| f.0)
            .as_deref(),
        Some("complaint")
    );
    finds("complaint", &["I'm complaining about the noise again"]);
}

#[test]
fn asking_how_many_days_or_whether_midway_is_a_plain_question() {
    no_intent(&["体检报告一般要等几天？", "停车场可以过夜吗，收不收费"]);
}

#[test]
fn a_billing_error_is_a_complaint_even_as_a_question() {
    finds(
        "complaint",
        &[
            "电费怎么重复扣了一次？我只用了这么点",
            "Why was I billed twice for March?",
        ],
    );
}

#[test]
fn a_wish_told_as_going_on_or_no_longer_needing_is_a_request() {
    not_vetoed(&[
        "钢琴课下学期继续上，学费怎么交？",
        "I no longer need the storage unit, how do I end it?",
    ]);
    finds(
        "subscription_renewal",
        &["What's the price for another term? If it's the same, go ahead and renew it."],
    );
}

#[test]
fn asking_whether_an_arranged_visit_still_holds_asks_after_it() {
    no_intent(&[
        "上周约好的保洁阿姨，明天确定会来吧？",
        "Is the electrician still coming on Monday?",
    ]);
}

#[test]
fn asking_someone_to_come_or_look_at_a_time_is_an_appointment() {
    finds(
        "appointment",
        &["The boiler is making a banging noise - can someone come out tomorrow?"],
    );
}

#[test]
fn correcting_personal_details_of_a_booking_is_no_new_intent() {
    no_intent(&[
        "周六的预约登记的电话写错了，应该是13800000000",
        "Re my booking on Monday: my email is spelt wrong, it's test@example.com",
    ]);
}

#[test]
fn demanding_an_answer_dirt_and_new_damage_are_complaints() {
    finds(
        "complaint",
        &[
            "外卖里吃出一根头发，你们必须给个说法",
            "The rental van had a dent that wasn't there before I picked it up",
        ],
    );
}

#[test]
fn not_wanting_it_any_more_or_telling_to_just_stop_it_is_a_request() {
    not_vetoed(&["报纸不想要了，能停掉吗"]);
    finds(
        "subscription_cancel",
        &["how do I get out of this gym contract?? just stop it"],
    );
}

#[test]
fn asking_whether_a_payment_arrived_asks_after_it() {
    no_intent(&["续费的钱我昨天就付了，麻烦看看到账了没"]);
}

#[test]
fn updating_contact_details_beside_a_booking_kept_is_no_new_intent() {
    no_intent(&[
        "周五的预约时间不变，手机号换成13800000000",
        "Keeping my Monday booking, please update my phone to 555 0100",
    ]);
}

#[test]
fn a_choice_a_condition_or_only_finding_out_is_no_wish() {
    no_intent(&[
        "Do I need to reserve, or can I just turn up?",
        "What happens if I want to cancel mid-term?",
        "如果中途退订，费用怎么算？",
        "退订会员会扣违约金吗？先了解一下",
    ]);
}

#[test]
fn something_ruined_or_charged_after_it_was_stopped_is_a_complaint() {
    finds(
        "complaint",
        &[
            "理发师把我的刘海剪坏了，怎么办",
            "Billed again for the add-on I cancelled in May. Seriously?",
        ],
    );
}

#[test]
fn not_taking_it_from_some_time_on_is_a_cancellation() {
    finds(
        "subscription_cancel",
        &[
            "钢琴课下个月就不上了",
            "We won't be needing the parking permit after June.",
            "How do I get out of my phone contract early? I want it ended.",
        ],
    );
}

#[test]
fn topping_up_to_go_on_using_it_and_asking_whether_a_change_was_confirmed() {
    finds("subscription_renewal", &["手机卡充五十进去，还要继续用"]);
    no_intent(&["我约的体检改到下周了，确认下来了吗"]);
}

#[test]
fn details_that_should_be_otherwise_are_corrections() {
    no_intent(&[
        "My birthday is 3 May, not 5 May - please fix the loyalty account",
        "The surname on my policy should be Lee now",
    ]);
}

#[test]
fn a_phone_number_right_after_chinese_text_is_personal_data() {
    // A Unicode word boundary sees none between 话 and 1: the rules' boundaries are ASCII.
    no_intent(&["我叫王五，电话13900002222，有事打我"]);
    // Beside a day and a time, the number is part of a request.
    not_vetoed(&["明早九点开车过去保养，电话13800000000"]);
}

#[test]
fn sending_someone_over_at_a_time_is_an_appointment() {
    finds("appointment", &["空调不制冷，明天上午能安排个师傅来看看吗"]);
}

#[test]
fn a_bill_worked_out_wrong_or_asking_for_a_manager_is_a_complaint() {
    finds(
        "complaint",
        &[
            "水费怎么这么高，肯定算错了",
            "I'd like to speak to a manager about how my order was handled",
        ],
    );
}

#[test]
fn not_wanting_to_go_on_or_being_done_with_it_is_a_cancellation() {
    not_vetoed(&["网络电视要注销，流程是什么？"]);
    finds(
        "subscription_cancel",
        &[
            "瑜伽课不想再上了，卡里的钱能退吗",
            "We're done with the meal kits, no more after this week please",
        ],
    );
    no_intent(&["Just checking the dinner for six on Friday is still on"]);
}

// The eighth set's classes.

#[test]
fn charged_twice_with_words_between_or_a_rhetorical_how_is_a_complaint() {
    finds(
        "complaint",
        &[
            "视频会员怎么扣了我两次？就开了一个月",
            "衣服缩水成这样，叫人怎么穿",
            "The pizza came 40 minutes late and stone cold",
            "I ordered the blue one and got a red one instead",
        ],
    );
}

#[test]
fn half_past_one_is_a_time_and_a_little_cheaper_is_not() {
    no_intent(&[
        "包年续费会不会便宜一点？",
        "Is it cheaper to renew for two years?",
    ]);
    finds("appointment", &["帮我约一点半剪头发"]);
}

#[test]
fn pausing_a_recurring_delivery_cancels_it() {
    finds(
        "subscription_cancel",
        &["牛奶配送先停了吧，下个月出差", "每周的鲜花配送停了吧，谢谢"],
    );
}

#[test]
fn what_one_will_have_to_stop_or_book_is_a_wish_before_a_question() {
    not_vetoed(&[
        "We'll have to cancel the cleaning contract when we move. Is there a fee?",
        "I'm going to need to renew my parking permit, what's the process?",
    ]);
    // The question alone is still a plain one.
    no_intent(&["What's the process to cancel a contract?"]);
}

#[test]
fn moving_a_booking_from_one_date_to_another_is_a_request() {
    not_vetoed(&[
        "Could we shift my dental cleaning from the 3rd to the 10th?",
        "bump my car service back a week?",
    ]);
    finds("appointment", &["I need an appointment on the 21st"]);
}

#[test]
fn a_contact_changed_beside_a_booking_kept_is_no_intent() {
    no_intent(&[
        "明天的预约时间不变，联系人改成我儿子，电话13700000000",
        "Leave my haircut booking as it is, just update my phone number to 555 0100",
        "Please change the billing address on my account to 9 Sample Lane",
    ]);
    // A move beside a contact change is still a move.
    not_vetoed(&["联系人改成我妈，时间改到周五下午"]);
}

// The ninth set's classes, and the tuning set's last errors.

#[test]
fn asking_whether_an_application_is_done_asks_after_it() {
    no_intent(&["上周交的退费申请处理好了没？钱一直没到"]);
}

#[test]
fn nobody_coming_still_waiting_or_a_promise_broken_is_a_complaint() {
    finds(
        "complaint",
        &[
            "The plumber was meant to be here at 9 and no one showed up",
            "Asked for a refund two weeks ago. Still waiting.",
            "why was I billed for the premium tier twice this month?",
            "说好的发票根本没给，这不是骗人吗",
            "排了两个小时的队，那会员有什么用？",
        ],
    );
}

#[test]
fn wanting_out_dropping_a_line_or_switching_off_a_monthly_charge_cancels() {
    finds(
        "subscription_cancel",
        &[
            "how do I make the monthly payments for the magazine stop? I want out",
            "Drop the sports package from our TV plan please",
            "音乐的连续包月又扣了，赶紧帮我关掉",
        ],
    );
}

#[test]
fn keeping_a_membership_going_or_another_round_renews() {
    finds(
        "subscription_renewal",
        &[
            "停车月卡快到期了，帮我续上",
            "理疗再来一个疗程，还是周二晚上",
        ],
    );
}

#[test]
fn where_to_read_a_policy_or_what_to_bring_asks_only() {
    no_intent(&[
        "Where can I find your refund policy?",
        "What should I bring to an appointment with the dermatologist?",
    ]);
    not_vetoed(&["Do you have any free appointments on Thursday?"]);
}

#[test]
fn finding_a_time_to_come_in_for_a_check_is_an_appointment() {
    finds("appointment", &["牙最近一直疼，想找个时间过来看一下"]);
}

// The tenth set's classes.

#[test]
fn a_rhetorical_what_kind_of_service_or_an_unsafe_thing_is_a_complaint() {
    finds(
        "complaint",
        &[
            "等了四十分钟才上菜，这什么态度啊",
            "The lift in our building keeps jolting between floors, it's dangerous",
        ],
    );
}

#[test]
fn topping_up_credit_or_buying_more_lessons_renews() {
    finds(
        "subscription_renewal",
        &["帮我给这个手机号充50元话费", "游泳课快上完了，想再买10节"],
    );
}

#[test]
fn a_service_no_longer_needed_is_cancelled() {
    finds(
        "subscription_cancel",
        &["孩子去住校了，家里的视频会员就不用了"],
    );
}

#[test]
fn just_checking_it_got_done_asks_after_it() {
    no_intent(&["just checking my parking permit got extended on Monday"]);
}

/// The grievances of the last rounds, kept to the customer's own grievance: asking whether
/// something is dangerous, being late oneself, what a feature is for, spilling one's own
/// coffee, asking what a service is.
#[test]
fn the_last_rounds_grievances_are_not_read_into_questions() {
    for message in [
        "Is it dangerous to drive with the tyre light on?",
        "Is it ok if I'm 10 minutes late for my lesson?",
        "这个功能有什么用？",
        "这是什么服务？怎么收费",
    ] {
        assert_ne!(
            super::found(message).map(|f| f.0).as_deref(),
            Some("complaint"),
            "{message}"
        );
    }
    finds(
        "complaint",
        &[
            "The courier was 2 hours late and the box was crushed",
            "奶茶都洒出来了，袋子里全是",
        ],
    );
}
