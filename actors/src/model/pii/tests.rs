//! Tests of personal-data detection and masking.

use proptest::prelude::*;

use super::*;

const ID: &str = "11010519491231002X";
const CARD: &str = "6222020200112233446";

fn kinds(text: &str) -> Vec<PiiKind> {
    detect(text).into_iter().map(|f| f.kind).collect()
}

#[test]
fn each_kind_is_found_with_its_checks() {
    assert!(resident_id_valid(ID) && resident_id_valid("440304199001011233"));
    assert!(
        !resident_id_valid("110105194912310021"),
        "wrong check character"
    );
    assert!(luhn_valid(CARD) && luhn_valid("4111111111111111"));
    assert!(!luhn_valid("6222020200112233445"));
    assert_eq!(
        kinds(&format!("我的身份证号是{ID}。")),
        [PiiKind::ResidentId]
    );
    assert_eq!(
        kinds("id 110105194912310021 is wrong"),
        Vec::<PiiKind>::new()
    );
    assert_eq!(kinds(&format!("card {CARD}")), [PiiKind::BankCard]);
    assert_eq!(kinds("card 6222 0202 0011 2233 446"), [PiiKind::BankCard]);
    assert_eq!(kinds("card 6222020200112233445"), Vec::<PiiKind>::new());
    assert_eq!(
        kinds("call 13812345678 or +86 139-0000-1111"),
        [PiiKind::Mobile, PiiKind::Mobile]
    );
    assert_eq!(kinds("电话+8613912345678"), [PiiKind::Mobile]);
    assert_eq!(kinds("mail li.lei@example.com.cn"), [PiiKind::Email]);
    assert_eq!(
        kinds("passport E12345678 and EA1234567"),
        [PiiKind::Passport, PiiKind::Passport]
    );
    // Not standalone: part of a longer token.
    assert_eq!(
        kinds("order 1381234567890 id ABC13812345678"),
        Vec::<PiiKind>::new()
    );
    assert_eq!(kinds("GMV was 1234567 yuan in 2024"), Vec::<PiiKind>::new());
}

#[test]
fn anchors_are_resident_id_and_passport_numbers_normalised_once_each() {
    let lower = ID.to_ascii_lowercase();
    let text = format!("身份证{lower}，护照e12345678；again {ID}, card {CARD}, 13812345678");
    assert_eq!(
        anchors_in(&text),
        [
            (AnchorKind::ResidentId, ID.to_owned()),
            (AnchorKind::Passport, "E12345678".to_owned())
        ]
    );
    assert_eq!(
        anchor_of(&format!("  {lower} ")),
        Some((AnchorKind::ResidentId, ID.to_owned()))
    );
    assert_eq!(
        anchor_of("eA1234567"),
        Some((AnchorKind::Passport, "EA1234567".to_owned()))
    );
    for not_one in [
        CARD,
        "13812345678",
        "110105194912310021",
        "my id 11010519491231002X",
        "E12345678 E12345679",
        "",
    ] {
        assert_eq!(anchor_of(not_one), None, "{not_one}");
    }
}

#[test]
fn levels_and_masks() {
    assert_eq!(level_of([format!("id {ID}").as_str()]), PiiLevel::High);
    assert_eq!(level_of(["13812345678", "a@b.cn"]), PiiLevel::Medium);
    assert_eq!(level_of(["a@b.cn"]), PiiLevel::Low);
    assert_eq!(level_of(["nothing here"]), PiiLevel::None);
    let text =
        format!("身份证{ID}，卡号{CARD}，手机13812345678，邮箱li@example.com，护照E12345678");
    assert_eq!(
        mask(&text, PiiLevel::Low),
        "身份证**************002X，卡号***************3446，手机*******5678，邮箱l***@example.com，护照*******78"
    );
    let high_only = mask(&text, PiiLevel::High);
    assert!(!high_only.contains(ID) && !high_only.contains(CARD));
    assert!(
        high_only.contains("13812345678"),
        "medium items stay at level high"
    );
}

#[test]
fn masks_keep_at_most_the_last_four_characters() {
    for (item, kind) in [
        (ID, PiiKind::ResidentId),
        (CARD, PiiKind::BankCard),
        ("6222 0202 0011 2233 446", PiiKind::BankCard),
        ("E12345678", PiiKind::Passport),
        ("EA1234567", PiiKind::Passport),
        ("13812345678", PiiKind::Mobile),
    ] {
        assert_eq!(kinds(item), [kind], "{item}");
        let masked = mask(item, PiiLevel::Medium);
        let kept: Vec<char> = masked.chars().filter(|c| *c != '*').collect();
        assert!(kept.len() <= 4, "{item} masked as {masked}");
        let digits = digits_of(item);
        assert!(
            digits.ends_with(&digits_of(&masked)),
            "only a tail is kept: {item} as {masked}"
        );
    }
}

#[test]
fn a_gateway_sees_mobile_numbers_masked() {
    let text = crate::model::context::gateway_text("手机13812345678，邮箱li@example.com");
    assert!(!text.contains("13812345678"), "{text}");
    assert!(text.contains("*******5678"), "{text}");
}

proptest! {
    #[test]
    fn masking_never_panics_and_removes_what_it_finds(text in "\\PC{0,80}", n in 0u64..u64::MAX) {
        let text = format!("{text} {n} {text}");
        let masked = mask(&text, PiiLevel::Low);
        prop_assert!(detect(&masked).iter().all(|f| f.kind == PiiKind::Email) || detect(&masked).is_empty());
    }
}

#[test]
fn numbers_with_a_check_are_found_inside_longer_tokens_and_in_full_width() {
    let full_width_id: String = ID
        .chars()
        .map(|c| char::from_u32(u32::from(c) - 0x21 + 0xFF01).unwrap())
        .collect();
    let full_width_card: String = CARD
        .chars()
        .map(|c| char::from_u32(u32::from(c) - 0x21 + 0xFF01).unwrap())
        .collect();
    let positives: &[(&str, &[PiiKind])] = &[
        ("ID11010519491231002X", &[PiiKind::ResidentId]),
        ("ID11010519491231002Xok", &[PiiKind::ResidentId]),
        ("id:11010519491231002x,", &[PiiKind::ResidentId]),
        ("card6222020200112233446", &[PiiKind::BankCard]),
        ("cardno6222020200112233446end", &[PiiKind::BankCard]),
        ("visa4111111111111111", &[PiiKind::BankCard]),
        (&format!("身份证{full_width_id}"), &[PiiKind::ResidentId]),
        (&format!("卡号{full_width_card}。"), &[PiiKind::BankCard]),
        ("手机１３８１２３４５６７８", &[PiiKind::Mobile]),
        ("护照Ｅ１２３４５６７８", &[PiiKind::Passport]),
        (
            "ＩＤ１１０１０５１９４９１２３１００２Ｘ",
            &[PiiKind::ResidentId],
        ),
    ];
    for (text, expected) in positives {
        assert_eq!(kinds(text), *expected, "{text}");
        let masked = mask(text, PiiLevel::Low);
        assert!(
            !masked.contains("0105") && !masked.contains("02020") && !masked.contains("１０５"),
            "{text} masked as {masked}"
        );
    }
    let negatives = [
        // Long order numbers: no digit may touch a number with a check.
        "order 2024110105194912310021 shipped",
        "SO11010519491231002X7",
        "order 123456789012345678901234",
        // The check fails.
        "ID110105194912310021",
        "card6222020200112233445",
        "ref 110105194913310021 passes MOD 11-2 but has month 13",
        // Glued to letters, a card must start like one (and pass Luhn).
        "SKU1234567890123452",
        // Numbers without a check must stand alone.
        "tel13812345678",
        "ABCE12345678",
        "build 20240101 ran 1234567 tests",
    ];
    for text in negatives {
        assert_eq!(kinds(text), Vec::<PiiKind>::new(), "{text}");
    }
    assert_eq!(
        anchors_in(&format!("ID{full_width_id}")),
        [(AnchorKind::ResidentId, ID.to_owned())]
    );
    assert_eq!(
        anchor_of(&full_width_id),
        Some((AnchorKind::ResidentId, ID.to_owned()))
    );
    assert_eq!(
        mask(&format!("身份证{full_width_id}号"), PiiLevel::High),
        "身份证**************002X号"
    );
}

proptest! {
    /// A valid ID number is found wherever it sits between letters or CJK text, and not when
    /// a digit touches it.
    #[test]
    fn an_id_is_found_between_letters_never_next_to_digits(
        before in "[A-Za-z\\u4e00-\\u4e10]{0,4}",
        after in "[A-Za-z\\u4e00-\\u4e10]{0,4}",
        digit in 0u8..10,
    ) {
        let text = format!("{before}{ID}{after}");
        let found = detect(&text);
        prop_assert_eq!(found.len(), 1);
        prop_assert_eq!(&text[found[0].start..found[0].end], ID);
        let glued = format!("{before}{digit}{ID}{after}");
        prop_assert!(detect(&glued).iter().all(|f| f.kind != PiiKind::ResidentId));
    }
}

#[test]
fn few_random_order_numbers_glued_to_letters_are_taken_for_personal_data() {
    // A fixed pseudo-random sample of 18-digit numbers, as in `SO110105...`: an ID number
    // must pass MOD 11-2 and show a birth date, a glued card number Luhn and an issuer's
    // prefix and length, so well under 1% of them are found.
    let mut state: u64 = 0x9E37_79B9_7F4A_7C15;
    let mut found = 0;
    let n = 10_000;
    for _ in 0..n {
        state = state
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        let number = 100_000_000_000_000_000 + (state >> 4) % 900_000_000_000_000_000;
        if !detect(&format!("SO{number}")).is_empty() {
            found += 1;
        }
    }
    assert!(found * 100 < n, "{found} of {n} random order numbers");
}

proptest! {
    /// The first look for digits and `@` never hides an item: text it skips has no finding by
    /// the patterns either, wherever the digits, letters, signs and `@` fall.
    #[test]
    fn the_first_look_never_hides_an_item(
        text in "[0-9 +\\-EeGgXx@a-z.\\u4e00-\\u4e05]{0,40}",
        number in prop::sample::select(vec![
            "", "E1234567", "E12345678", "Ea1234567", "13812345678", "+86 13812345678",
            "a@b.cn", "4111111111111111", "11010519491231002X", "123456",
        ]),
        at in 0usize..40,
    ) {
        let cut = text.char_indices().map(|(i, _)| i).nth(at).unwrap_or(text.len());
        let text = format!("{}{number}{}", &text[..cut], &text[cut..]);
        if !may_hold_items(&text) {
            prop_assert!(find_items(&text).is_empty(), "{:?}", find_items(&text));
        }
    }
}

#[test]
fn text_without_an_at_or_seven_digits_is_not_scanned() {
    assert!(!may_hold_items(
        "我想看上周华东地区的销售额，按天汇总 2024-05"
    ));
    assert!(!may_hold_items("call 123 456"));
    assert!(may_hold_items("call 123 4567"));
    assert!(may_hold_items("li@example.com"));
    // Full-width digits count once brought to one width (detect does that first).
    assert_eq!(kinds("手机１３８１２３４５６７８"), [PiiKind::Mobile]);
}

#[test]
fn numbers_are_found_in_the_groups_people_write_them_in() {
    let cases: &[(&str, PiiKind, &str)] = &[
        ("手机138-1234-5678。", PiiKind::Mobile, "手机*******5678。"),
        ("手机138 1234 5678。", PiiKind::Mobile, "手机*******5678。"),
        ("手机138.1234.5678。", PiiKind::Mobile, "手机*******5678。"),
        (
            "手机138\u{A0}1234\u{A0}5678",
            PiiKind::Mobile,
            "手机*******5678",
        ),
        (
            "call +86 138 1234 5678",
            PiiKind::Mobile,
            "call *******5678",
        ),
        (
            "身份证110105 19491231 002X号",
            PiiKind::ResidentId,
            "身份证**************002X号",
        ),
        (
            "身份证110105-1949-1231-002x",
            PiiKind::ResidentId,
            "身份证**************002x",
        ),
        // First generation: 15 digits, the year in two.
        (
            "老身份证110105491231002。",
            PiiKind::ResidentId,
            "老身份证***********1002。",
        ),
        (
            "卡号6222\u{A0}0202\u{A0}0011\u{A0}2233\u{A0}446",
            PiiKind::BankCard,
            "卡号***************3446",
        ),
        (
            "卡号6222\u{202F}0202\u{202F}0011\u{202F}2233\u{202F}446",
            PiiKind::BankCard,
            "卡号***************3446",
        ),
        (
            "卡号6222\u{3000}0202\u{3000}0011\u{3000}2233\u{3000}446",
            PiiKind::BankCard,
            "卡号***************3446",
        ),
        (
            "手机1\u{200B}38\u{200C}1234\u{200D}56\u{2060}7\u{FEFF}8",
            PiiKind::Mobile,
            "手机*******5678",
        ),
        (
            "ID 1101\u{200B}0519491231002X",
            PiiKind::ResidentId,
            "ID **************002X",
        ),
    ];
    for (text, kind, masked) in cases {
        assert_eq!(kinds(text), [*kind], "{text:?}");
        assert_eq!(mask(text, PiiLevel::Medium), *masked, "{text:?}");
    }
    // An ID number after another number is still found (every start is tried).
    assert_eq!(
        kinds("ref 123456 110105 19491231 002X"),
        [PiiKind::ResidentId]
    );
    // A first-generation number anchors as its 18-character form.
    assert_eq!(
        anchor_of("110105491231002"),
        Some((AnchorKind::ResidentId, ID.to_owned()))
    );
    assert_eq!(
        anchors_in("身份证110105 19491231 002X"),
        [(AnchorKind::ResidentId, ID.to_owned())]
    );
    // Not identifiers: dates, amounts, versions, 15 digits with no province or date.
    for text in [
        "2024-01-15 12:30",
        "GMV 1 234 567 yuan",
        "version 1.2.3.4",
        "order 990105491231002",
        "order 110105491331002",
    ] {
        assert_eq!(kinds(text), Vec::<PiiKind>::new(), "{text}");
    }
}

#[test]
fn queries_count_each_identifier_once() {
    assert_eq!(identifiers_in("nothing here 2024"), 0);
    assert_eq!(identifiers_in("li@example.com"), 0, "e-mail is not masked");
    assert_eq!(
        identifiers_in("13812345678 138-1234-5678 13912345678 11010519491231002X"),
        3
    );
}

#[test]
fn what_a_cut_left_of_a_number_is_masked() {
    assert_eq!(mask_cut_digits("卡号是62220212…"), "卡号是********…");
    assert_eq!(
        mask_cut_digits("身份证号1101051949123…"),
        "身份证号*************…"
    );
    assert_eq!(mask_cut_digits("…1231002X end"), "…******** end");
    assert_eq!(mask_cut_digits("手机138-…"), "手机***-…");
    assert_eq!(
        mask_cut_digits("…5678 end"),
        "…5678 end",
        "the last four may show"
    );
    assert_eq!(mask_cut_digits("no cut 13812345678"), "no cut 13812345678");
}

#[test]
fn numbers_in_json_are_masked_only_when_they_are_identifiers() {
    assert_eq!(mask_number("13812345678").as_deref(), Some("*******5678"));
    assert_eq!(
        mask_number("4111111111111111").as_deref(),
        Some("************1111")
    );
    // A time in milliseconds that passes Luhn is no card number.
    assert_eq!(mask_number("1767225600009"), None);
    assert_eq!(mask_number("42"), None);
}
