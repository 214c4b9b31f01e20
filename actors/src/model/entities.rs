//! Entity extraction for turns and queries: snake_case table and column names, CamelCase and
//! acronym metric names, and Chinese business entities found by jieba segmentation with
//! part-of-speech tags plus a business lexicon that a tenant can extend.
//!
//! The segmenter is built once per node (loading jieba's dictionary takes a while) and shared;
//! extraction is pure and allocation-light.

use std::collections::HashSet;
use std::hash::{Hash, Hasher};
use std::sync::LazyLock;

use jieba_rs::Jieba;
use regex::Regex;

use super::text::is_cjk;

/// Tag given to the business lexicon's words in the segmenter.
const BUSINESS_TAG: &str = "biz";

/// Built-in business vocabulary (metrics, dimensions, documents) that jieba's general
/// dictionary splits or tags as common words.
const BUSINESS_LEXICON: &[&str] = &[
    "销售额",
    "销售量",
    "销量",
    "订单量",
    "订单数",
    "订单金额",
    "客单价",
    "毛利",
    "毛利率",
    "净利润",
    "营业收入",
    "营收",
    "成本",
    "退款",
    "退款率",
    "退货率",
    "复购率",
    "转化率",
    "留存率",
    "活跃用户",
    "日活",
    "月活",
    "新增用户",
    "库存",
    "库存周转",
    "渠道",
    "门店",
    "区域",
    "华东",
    "华南",
    "华北",
    "华中",
    "西南",
    "西北",
    "东北",
    "同比",
    "环比",
    "预算",
    "回款",
    "应收账款",
    "应付账款",
    "客户数",
    "供应商",
    "商品",
    "品类",
    "工单",
    "投诉",
    "续费",
    "退订",
    "预约",
    "社保",
    "公积金",
    "营业执照",
];

/// Part-of-speech tags of jieba's dictionary kept as entities: places, organisations and
/// other proper nouns.
const KEPT_TAGS: &[&str] = &["ns", "nt", "nz", BUSINESS_TAG];

/// Endings that make a common noun a business measure or dimension (`订单金额`, `用户数`).
const BUSINESS_SUFFIXES: &[char] = &['额', '量', '率', '数', '价', '费', '单', '户'];

static SNAKE: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"\b[a-z][a-z0-9]*(?:_[a-z0-9]+)+(?:\.[a-z][a-z0-9_]*)?\b").unwrap()
});
/// A capitalised word: a name where it does not open a sentence.
static CAPITALISED: LazyLock<Regex> = LazyLock::new(|| Regex::new(r"\b[A-Z][a-z]+\b").unwrap());
/// Capitalised words that are not names (months and days are times: see `temporal`).
const NOT_NAMES: &[&str] = &[
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
    "Monday",
    "Tuesday",
    "Wednesday",
    "Thursday",
    "Friday",
    "Saturday",
    "Sunday",
    "Mr",
    "Mrs",
    "Ms",
    "Dr",
    "Oh",
    "Hey",
    "Hi",
    "Hello",
    "Thanks",
    "Yeah",
    "Yes",
    "No",
    "Wow",
    "Okay",
    "Ok",
];
/// Part-of-speech tags of jieba's dictionary kept as named mentions: person names too.
const NAME_TAGS: &[&str] = &["nr", "ns", "nt", "nz", BUSINESS_TAG];

static CAMEL: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"\b(?:[A-Z][a-z0-9]+(?:[A-Z][a-z0-9]*)+|[A-Z]{2,6})\b").unwrap());

/// The extractor: a jieba segmenter with the business lexicon and any tenant words added.
pub struct EntityExtractor {
    jieba: Jieba,
    lexicon: HashSet<String>,
}

impl Default for EntityExtractor {
    fn default() -> Self {
        EntityExtractor::new(&[])
    }
}

impl std::fmt::Debug for EntityExtractor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EntityExtractor").finish_non_exhaustive()
    }
}

impl EntityExtractor {
    /// A segmenter with jieba's dictionary, the built-in business lexicon, and `extra` words
    /// (a tenant's own entities: product names, internal metrics).
    pub fn new(extra: &[String]) -> Self {
        let mut extractor = EntityExtractor {
            jieba: Jieba::new(),
            lexicon: HashSet::new(),
        };
        let builtin: Vec<String> = BUSINESS_LEXICON.iter().map(|w| w.to_string()).collect();
        extractor.add_words(&builtin);
        extractor.add_words(extra);
        extractor
    }

    /// Adds words to the lexicon (for a tenant's dictionary).
    pub fn add_words(&mut self, words: &[String]) {
        for word in words {
            self.jieba.add_word(word, None, Some(BUSINESS_TAG));
            self.lexicon.insert(word.clone());
        }
    }

    /// The entities of `text`, each once, in order of first appearance.
    pub fn extract(&self, text: &str) -> Vec<String> {
        let mut found: Vec<(usize, String)> = Vec::new();
        for m in SNAKE.find_iter(text).chain(CAMEL.find_iter(text)) {
            found.push((m.start(), m.as_str().to_owned()));
        }
        if text.chars().any(is_cjk) {
            for tag in self.jieba.tag(text, true) {
                if self.lexicon.contains(tag.word) || is_business_word(tag.word, tag.tag) {
                    found.push((tag.byte_start, tag.word.to_owned()));
                }
            }
        }
        found.sort_by_key(|(at, _)| *at);
        // Nothing inside personal data is an entity (an e-mail's `first_last` is not a table).
        let personal = super::pii::detect(text);
        found.retain(|(at, entity)| {
            let end = at + entity.len();
            !personal.iter().any(|p| *at < p.end && p.start < end)
        });
        let mut out: Vec<String> = Vec::with_capacity(found.len());
        for (_, entity) in found {
            if !out.contains(&entity) {
                out.push(entity);
            }
        }
        out
    }

    /// What `text` names, for entity-centred retrieval: table, column and metric names (as
    /// [`EntityExtractor::extract`] finds them), capitalised words that do not open a sentence
    /// (people, places, products: "Melanie", "Sweden"), and the Chinese names of people,
    /// places and organisations and the business lexicon's words, by jieba's tags; each once
    /// and lower-cased. Unlike `extract` it keeps names of people: it feeds an in-memory index
    /// only, never a stored or logged field.
    pub fn mentions(&self, text: &str) -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        let mut push = |word: &str| {
            let word = word.to_lowercase();
            if !out.contains(&word) {
                out.push(word);
            }
        };
        for m in SNAKE.find_iter(text).chain(CAMEL.find_iter(text)) {
            push(m.as_str());
        }
        for m in CAPITALISED.find_iter(text) {
            let before = text[..m.start()].trim_end();
            let opens =
                before.is_empty() || before.ends_with(['.', '!', '?', ':', '"', '\u{201c}']);
            if !opens && !NOT_NAMES.contains(&m.as_str()) {
                push(m.as_str());
            }
        }
        if text.chars().any(is_cjk) {
            for tag in self.jieba.tag(text, true) {
                let chars = tag.word.chars().count();
                if chars >= 2 && tag.word.chars().all(is_cjk) && NAME_TAGS.contains(&tag.tag) {
                    push(tag.word);
                }
            }
        }
        out
    }

    /// [`EntityExtractor::mentions`] hashed and sorted, for an index (8 bytes a name).
    pub fn mention_hashes(&self, text: &str) -> Box<[u64]> {
        let mut names: Vec<u64> = self
            .mentions(text)
            .iter()
            .map(|name| {
                let mut hasher = std::hash::DefaultHasher::new();
                name.hash(&mut hasher);
                hasher.finish()
            })
            .collect();
        names.sort_unstable();
        names.dedup();
        names.into_boxed_slice()
    }

    /// The words of `text` for lexical search: jieba's segmentation for Chinese, lower-cased
    /// words for other scripts, without punctuation and whitespace.
    pub fn tokens(&self, text: &str) -> Vec<String> {
        self.jieba
            .cut(text, true)
            .into_iter()
            .map(|t| t.word.trim().to_lowercase())
            .filter(|w| w.chars().any(char::is_alphanumeric))
            .collect()
    }
}

fn is_business_word(word: &str, tag: &str) -> bool {
    let chars = word.chars().count();
    if chars < 2 || !word.chars().all(is_cjk) {
        return false;
    }
    KEPT_TAGS.contains(&tag)
        || (tag.starts_with('n') && tag != "nr" && word.ends_with(BUSINESS_SUFFIXES))
}

#[cfg(test)]
mod tests {
    use std::sync::LazyLock;

    use super::EntityExtractor;

    static EXTRACTOR: LazyLock<EntityExtractor> = LazyLock::new(EntityExtractor::default);

    #[test]
    fn finds_tables_columns_and_metrics() {
        let e = EXTRACTOR.extract(
            "Compare GMV and OrderCount in dw_orders_daily by region_code, not in orders.",
        );
        assert_eq!(e, ["GMV", "OrderCount", "dw_orders_daily", "region_code"]);
        assert!(
            EXTRACTOR
                .extract("select * from sales.fact_orders")
                .contains(&"sales.fact_orders".to_string())
                || EXTRACTOR
                    .extract("select * from sales.fact_orders")
                    .contains(&"fact_orders".to_string())
        );
    }

    #[test]
    fn finds_chinese_business_entities_with_the_segmenter() {
        let e = EXTRACTOR.extract("帮我查一下华东地区上个月的销售额和退款率，按门店拆分");
        for want in ["华东地区", "销售额", "退款率", "门店"] {
            assert!(e.contains(&want.to_string()), "missing {want} in {e:?}");
        }
        assert!(
            !e.contains(&"上个月".to_string()),
            "time words are not entities: {e:?}"
        );
        assert!(!e.iter().any(|w| w == "帮我" || w == "一下"), "{e:?}");
    }

    #[test]
    fn tenant_words_become_entities() {
        let plain = EXTRACTOR.extract("飞鹤星选的复购情况怎么样");
        assert!(!plain.contains(&"飞鹤星选".to_string()), "{plain:?}");
        let tenant = EntityExtractor::new(&["飞鹤星选".to_string()]);
        assert!(
            tenant
                .extract("飞鹤星选的复购情况怎么样")
                .contains(&"飞鹤星选".to_string())
        );
    }

    #[test]
    fn mixed_text_keeps_order_of_appearance_and_no_duplicates() {
        let e = EXTRACTOR.extract("GMV 华东 GMV fact_sales 华东");
        assert_eq!(e, ["GMV", "华东", "fact_sales"]);
    }

    #[test]
    fn tokens_split_chinese_words_and_lowercase_english() {
        let t = EXTRACTOR.tokens("华东地区的销售额 Sales Report!");
        assert!(t.contains(&"销售额".to_string()), "{t:?}");
        assert!(
            t.contains(&"sales".to_string()) && t.contains(&"report".to_string()),
            "{t:?}"
        );
        assert!(!t.iter().any(|w| w == "!" || w.trim().is_empty()));
    }

    #[test]
    fn mentions_are_names_not_the_words_that_open_sentences() {
        let m = EXTRACTOR.mentions(
            "[8 May 2023] Caroline: Hey Melanie! Researching adoption agencies in Sweden. \
             Went to the LGBTQ group on Friday with Dr Jonas.",
        );
        assert_eq!(m, ["lgbtq", "caroline", "melanie", "sweden", "jonas"]);
        // Chinese person and place names, through jieba's tags.
        let m = EXTRACTOR.mentions("我的上司名叫赵雅琳，老家是重庆的");
        assert!(m.contains(&"重庆".to_string()), "{m:?}");
        assert!(!m.iter().any(|w| w == "上司" || w == "老家"), "{m:?}");
        assert!(EXTRACTOR.mentions("What did you do yesterday?").is_empty());
    }
}
