//! The classes of messages held-out sets 13 to 18 showed, the sets written from
//! `inference/data/LABELS.md` (each pinned with messages that are in no set:
//! docs/benchmarks.md, "Sets 13 to 15", "Sets 16 to 18" and "Set 19").

use super::held_out::{finds, no_intent, not_vetoed};

// The classes set 13 showed.

#[test]
fn asking_whether_an_earlier_request_stands_or_moved_on_asks_after_it() {
    no_intent(&[
        "上个月报修的热水器，现在有什么进展吗",
        "明天上午那个洗车的预约还算数吧？",
        "上回说换到周六的钢琴课，老师答应了没",
        "Last week I asked to switch my delivery day to Friday, was that approved?",
    ]);
    // A new request asking whether a time suits is still a request.
    not_vetoed(&["Can I bring the car in at 3 tomorrow, is that ok?"]);
}

#[test]
fn a_question_beside_ones_own_booking_only_asks() {
    no_intent(&[
        "I've got my bike booked in for Friday, do I need to bring the lock key?",
        "我下周二约了拔牙，请问前一晚能吃东西吗",
    ]);
    // Asking for something more beside it is a request.
    not_vetoed(&["I've got my car in on Tuesday, can you also rotate the tyres?"]);
}

#[test]
fn changed_contact_details_and_a_new_card_only_give_data() {
    no_intent(&[
        "heads up my mobile has changed, it's 555-0199 now",
        "邮箱换了，以后发到 lin@example.com",
        "Replacing my card, new one ends in 1881",
    ]);
    // Beside a renewal the card is part of the request.
    finds(
        "subscription_renewal",
        &["Renew my plan for a year, updating my card first"],
    );
}

#[test]
fn a_consult_with_a_phone_number_is_a_booking() {
    finds(
        "appointment",
        &["Could you set up a consult with your visa lawyer next week? My number is 555-0110"],
    );
}

#[test]
fn an_error_in_what_the_business_made_is_not_a_correction() {
    not_vetoed(&[
        "The wedding invitations you printed have my surname spelled wrong, please redo them",
        "你们寄来的证书上名字写错了",
    ]);
    no_intent(&["My surname is spelled wrong on the booking, it's Novak"]);
}

#[test]
fn laughing_with_the_assistant_is_small_talk() {
    no_intent(&[
        "haha you type faster than my boss",
        "哈哈你比客服小姐姐还耐心",
    ]);
    // A laugh beside a grievance or a wish is no small talk.
    not_vetoed(&[
        "lol my parcel still hasn't arrived",
        "haha ok please book me in for Thursday then",
    ]);
}

#[test]
fn getting_a_lapsed_plan_active_again_renews_it() {
    finds(
        "subscription_renewal",
        &[
            "My climbing membership ran out in March, can you get it active again?",
            "想把停掉的宽带重新开通",
            "please reactivate my streaming account",
        ],
    );
}

#[test]
fn not_to_auto_renew_is_a_cancellation() {
    finds(
        "subscription_cancel",
        &["Please do not auto-renew my parking permit next year"],
    );
}

#[test]
fn being_told_something_late_is_a_complaint() {
    finds(
        "complaint",
        &["I booked the table for 7, it's 7:40 and now you're telling me it isn't ready?"],
    );
}

// The classes set 14 showed.

#[test]
fn a_problem_reported_many_times_is_a_complaint() {
    finds(
        "complaint",
        &[
            "宿舍空调一直不制冷，找物业反映了好几次，到现在也没人管",
            "打印机卡纸的事跟你们说过很多次了",
        ],
    );
}

#[test]
fn a_cancellation_with_an_id_number_is_a_cancellation() {
    finds(
        "subscription_cancel",
        &["帮我把宽带注销了吧，身份证号000000198001010000"],
    );
}

#[test]
fn asking_how_busy_a_time_is_only_asks() {
    no_intent(&[
        "周六上午游泳馆人多吗？",
        "Is the climbing wall usually busy on Sunday mornings?",
    ]);
    not_vetoed(&["Are you busy on Friday? I'd like to book a haircut"]);
}

#[test]
fn a_question_beside_an_appointment_one_has_only_asks() {
    no_intent(&[
        "I have an eye test appointment on Monday, should I bring my old glasses?",
        "我明天上午约了体检，需要空腹吗",
    ]);
    // Moving it is a request.
    not_vetoed(&["我约了周三的课，能改到周五吗"]);
}

#[test]
fn a_weekday_in_the_plural_is_a_habit_not_a_slot() {
    no_intent(&["do you run beginner pottery classes on mondays?"]);
}

#[test]
fn asking_whether_an_earlier_renewal_took_effect_asks_after_it() {
    no_intent(&[
        "昨天续费的会员，到账了没有啊",
        "I topped up my transit card last night, just wanted to check you received it",
    ]);
}

#[test]
fn data_given_with_an_earlier_mistake_or_a_card_to_use_only_gives_data() {
    no_intent(&[
        "我邮箱是zhou@example.com，上次留错了",
        "please change the card on file to the one ending 0005",
    ]);
}

// The classes set 15 showed.

#[test]
fn asking_to_redo_or_swap_what_was_faulty_is_a_request() {
    // A question, but one that asks the business to put its work right.
    not_vetoed(&[
        "two boxes of the tiles are chipped at the corners, could they be replaced?",
        "蛋糕上的字写歪了，能给重做一个吗",
    ]);
    // Asking whether something can be exchanged at all only asks.
    no_intent(&["can the shoes be exchanged if they don't fit?"]);
}

#[test]
fn confirming_what_one_already_did_asks_after_it() {
    no_intent(&[
        "Reserved the function room for the 20th back in March, is everything still ok?",
        "刚交了下学期的学费，是到7月底对吧",
        "上周已经取消了报纸订阅，下个月应该不会再送了吧",
        "上周已经付了尾款，你们那边收到没",
    ]);
    // A request about what one has is still a request.
    finds("subscription_cancel", &["之前订的会员，帮我取消吧"]);
}

#[test]
fn adding_or_changing_a_contact_person_only_gives_data() {
    no_intent(&[
        "adding my husband as an emergency contact: Tom Hale, 555-0142",
        "紧急联系人换成我老公 李强 555-0175",
    ]);
}

#[test]
fn renewing_a_policy_and_a_top_up_with_an_amount_renew() {
    finds(
        "subscription_renewal",
        &[
            "车险下个月到期，帮我续保",
            "家财险续保，顺便把手机号改成555-0120",
            "卡里没钱了，帮我充100",
            "流量用完了，给我充30块的",
        ],
    );
}

#[test]
fn not_to_be_charged_automatically_again_is_a_cancellation() {
    finds(
        "subscription_cancel",
        &["年卡到期后别给我自动续费了", "音乐会员不要再自动续了"],
    );
}

#[test]
fn a_price_question_naming_days_only_asks() {
    no_intent(&[
        "What's the difference in price between a Tuesday and a Saturday session?",
        "下周六和周日包场价格一样吗",
    ]);
    // With a request beside it, it books.
    not_vetoed(&["How much for a trim, and can you fit me in Saturday at 10?"]);
}

// The classes set 16 showed.

#[test]
fn a_top_up_with_a_bare_amount_renews() {
    finds("subscription_renewal", &["流量包充200，还是这个号码"]);
    // Charging a phone is no top-up.
    for message in ["手机没电了，能帮我充个电吗", "帮我充一下电"] {
        assert!(super::apply(message).is_none(), "{message}");
    }
}

#[test]
fn confirming_a_past_step_told_with_its_object_asks_after_it() {
    no_intent(&["前天已经取消包月了，确认下下个月不会再扣了吧"]);
}

#[test]
fn telling_that_one_already_did_it_carries_no_new_intent() {
    no_intent(&[
        "刚在官网上续了会员，和你们说一声，不用再发短信了",
        "cancelled the magazine online last night, just so you know, no need to call",
    ]);
    // Telling it beside a wish is a request.
    not_vetoed(&["just so you know I moved house, please book the boiler service for Friday"]);
}

#[test]
fn a_name_and_birthday_given_with_an_earlier_slip_only_give_data() {
    no_intent(&["我叫钱思远，出生日期是1988年3月9日，上次填表的时候填错了"]);
}

#[test]
fn remarks_on_the_weather_are_small_talk() {
    no_intent(&[
        "外面下大雪了，路上好美",
        "lovely weather today, perfect for a walk",
    ]);
    not_vetoed(&["明天天气好的话，帮我约个上门洗车"]);
}

#[test]
fn who_pays_and_what_if_questions_only_ask() {
    no_intent(&["快递寄丢了的话，损失谁来承担"]);
}

#[test]
fn a_question_after_a_lead_in_is_still_a_question() {
    no_intent(&["quick question, does the family plan renew by itself every year"]);
    not_vetoed(&["quick question, can you cancel my plan today?"]);
}

#[test]
fn asking_whether_one_may_walk_in_only_asks() {
    no_intent(&["Can people just walk in on Sunday afternoons, or is it booking only?"]);
}

// The classes set 17 showed.

#[test]
fn asking_to_swap_a_damaged_item_is_a_request() {
    not_vetoed(&[
        "新买的行李箱轮子上有几道刮痕，能给换个新的吗",
        "这双鞋鞋底开胶了，可以帮我换一双吗",
    ]);
}

#[test]
fn opening_again_what_one_stopped_renews_it() {
    finds(
        "subscription_renewal",
        &["去年取消的游泳卡会员，现在能重新激活吗"],
    );
}

#[test]
fn a_slot_asked_for_beside_a_laugh_is_no_small_talk() {
    not_vetoed(&[
        "any chance someone could look at my bike Friday at 4? it squeaks like a duck lol",
    ]);
}

#[test]
fn topping_a_plan_up_in_other_words_renews_it() {
    finds(
        "subscription_renewal",
        &["running low on minutes, can u top me up with the 500 pack"],
    );
}

#[test]
fn not_wanting_it_to_renew_by_itself_cancels() {
    finds(
        "subscription_cancel",
        &["I don't want the gym pass to auto-renew next month, let it lapse"],
    );
}

#[test]
fn asking_how_far_ahead_people_book_only_asks() {
    no_intent(&[
        "How far in advance should I book for a Friday dinner for 8, usually?",
        "周六的理发一般要提前几天约啊",
    ]);
}

#[test]
fn a_new_number_to_keep_on_file_only_gives_data() {
    no_intent(&["Updated mobile number: 555-0123, please put it on my profile."]);
}

// The classes set 18 showed.

#[test]
fn a_question_about_what_a_booking_would_mean_only_asks() {
    no_intent(&[
        "if we book the family room for saturday does that include breakfast",
        "要是约周五上午做体检，大概几点能出报告？",
        "If I book the 60 minute facial, is that the one with the mask or extra?",
    ]);
    // Booking with a condition is still a booking.
    not_vetoed(&["If you have anything Friday at 3, please book me in for a trim"]);
}

#[test]
fn asking_whether_a_day_is_open_for_a_visit_is_an_appointment() {
    finds(
        "appointment",
        &[
            "The dryer is leaving clothes damp. Do you have anything available next week for a technician?",
            "Do you have any openings Tuesday afternoon? My tooth has been aching.",
        ],
    );
}

#[test]
fn an_order_still_not_ready_is_a_complaint() {
    finds(
        "complaint",
        &[
            "dropped my suit off for pressing on monday and its still not done, what's going on",
            "My prescription was supposed to be ready at noon and it's still not ready.",
        ],
    );
}

#[test]
fn asking_whether_an_earlier_request_has_been_sorted_asks_after_it() {
    no_intent(&[
        "On Monday I asked you to change my delivery address, has that been done?",
        "I emailed to push my lesson to next week, has it been sorted yet?",
    ]);
}

#[test]
fn a_new_name_to_keep_on_file_only_gives_data() {
    no_intent(&[
        "Just got divorced, my last name is now Brennan, please update it on file",
        "我改姓了，现在姓陈，麻烦把资料上的名字更新一下",
    ]);
}
