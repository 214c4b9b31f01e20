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
        [PiiKind::Mobile]
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
        "身份证110105********002X，卡号6222***********3446，手机138****5678，邮箱l***@example.com，护照E1*****78"
    );
    let high_only = mask(&text, PiiLevel::High);
    assert!(!high_only.contains(ID) && !high_only.contains(CARD));
    assert!(
        high_only.contains("13812345678"),
        "medium items stay at level high"
    );
}

proptest! {
    #[test]
    fn masking_never_panics_and_removes_what_it_finds(text in "\\PC{0,80}", n in 0u64..u64::MAX) {
        let text = format!("{text} {n} {text}");
        let masked = mask(&text, PiiLevel::Low);
        prop_assert!(detect(&masked).iter().all(|f| f.kind == PiiKind::Email) || detect(&masked).is_empty());
    }
}
