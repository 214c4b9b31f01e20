//! The distiller's first stage: rules that find an intent in microseconds, before any model
//! (seed design 004). They favour precision: a message the rules leave alone goes to the
//! model, while a rule hit is written at once, so a rule must not fire on a question about
//! an intent ("预约需要带什么？", "did my renewal go through?") or on a negated one ("不是要投诉").
//!
//! Order matters where phrases overlap: a cancellation (取消自动续费) before a renewal (续费),
//! a complaint (预约了却没人来，我要投诉) before an appointment.

use std::sync::LazyLock;

use regex::Regex;

use super::{Distilled, Priority};

/// A rule's pattern, its word boundaries ASCII ones: the patterns' words are English, and a
/// Unicode `\b` sees none between a Chinese character and a digit ("电话13800000000"), and
/// keeps the regex engine from its fast automaton on any non-ASCII text (twelve times as long
/// a message).
fn re(pattern: &str) -> Regex {
    // The patterns are constants of this file: a typo fails every test at once.
    Regex::new(&pattern.replace(r"\b", r"(?-u:\b)"))
        .unwrap_or_else(|err| panic!("rule pattern {pattern:?}: {err}"))
}

/// Days and times that make an appointment phrase concrete.
const WHEN_ZH: &str = "(今天|明天|后天|大后天|今晚|明早|明晚|今早|下午|上午|周[一二三四五六日天]|星期[一二三四五六日天天]|礼拜[一二三四五六日天]|下周|这周|本周|[0-9一二三四五六七八九十]+[号日]|([0-9]+|[二三四五六七八九十]|十[一二])点|一点(钟|半)|[0-9一二三四五六七八九十]+点半)";
const WHEN_EN: &str = r"(today|tomorrow|tonight|(monday|tuesday|wednesday|thursday|friday|saturday|sunday)\b|next week|this week|\d{1,2}(:\d\d)?\s?(am|pm)|at \d{1,2}\b|\b(the )?\d{1,2}(st|nd|rd|th)\b)";

/// Intents negated right where they are named ("不是要投诉", "I'm not cancelling"), or a
/// message that says it only asks ("就是问问", "just wondering"): no new intent.
static NEGATED: LazyLock<Regex> = LazyLock::new(|| {
    re(
        r"(?i)(不是要|不是想|并不是|没打算|不打算|先不|不想|不用|不需要|暂时不)(取消|退订|续|投诉|预约|约)|\b(i'?m|i am) not (cancel|renew|book|complain)|\bnot (going|trying|planning) to (cancel|renew|book|complain|file)|\bdon'?t (want|need) to (cancel|renew|book|complain)|\bno need to (cancel|renew|book)|(只是|就是|先|随便)问问|先了解(一下)?|还没(决定|想好)|\bhaven'?t decided\b|\bjust (asking|wondering|curious)\b",
    )
});

/// Questions (about how things work, or about an earlier request) that carry no new intent.
static QUESTION: LazyLock<Regex> = LazyLock::new(|| {
    re(&format!(
        r"(?i)([?？]\s*$|吗\s*[。!！]?\s*$|怎么样|怎么|如何|什么|多少|多久|几点|(^|[^好])几(天|号|个|次|周|月|年|小时|分钟)|吗[，,]|哪些|哪里|谁|进度|处理得|有没有|是否|会不会|是不是|^\s*(how|what|when|where|which|why|is|are|does|do|did|has|have|was|will)\b|[,;:，；：]\s*(how|what|when|where|which|why|is|are|does)\b|{HYPOTHETICAL}.{{0,60}}\b(is|does|will|would) (that|it|this)\b)",
    ))
});

/// A booking told as a condition ("if I book the 90 minutes", "如果约下午三点"): a question
/// about what it would mean only asks, whatever day it names.
const HYPOTHETICAL: &str = r"(\bif (i|we) (book|booked|schedule|reserve|take|get|go for)\b|(如果|要是|假如)(我|我们)?(约|预约|订|定))";

static HYPOTHETICALLY: LazyLock<Regex> = LazyLock::new(|| re(&format!("(?i){HYPOTHETICAL}")));

/// Not wanting it any more ("不想再上了", "我不需要续订了", "不用续费了"): a wish, and a
/// cancellation, although "不需要续" alone negates a renewal ("不需要续费就能用吗" asks).
const NOT_WANTED: &str =
    r"不想(再)?(上|学|用|要|续|订|参加)了|(不想|不需要|不用|不要)(再)?续(订|费|约|期|办)?了";

static NOT_WANTED_ANY_MORE: LazyLock<Regex> = LazyLock::new(|| re(NOT_WANTED));

/// A request marker: with it, a question form is still a request ("can you book me ...?").
static REQUEST: LazyLock<Regex> = LazyLock::new(|| {
    re(&format!(
        "{}{NOT_WANTED}{}",
        r"(?i)(帮我|给我|麻烦|请帮|请给|我要|我想|我需要|我得|能不能|能否|可不可以|可以帮|(想|打算|准备)(直接|再|接着|申请)*(续|取消|退订|销户|注销|终止|停|退|预约|约|办理)|\b(can|could) (you|u|i|someone|somebody|anyone)\b|\bany chance\b|能(不能)?(帮我)?重新(开通|激活|启用)|(继续|接着)(报|上|用|订|学)|用不上了|用不着了|要(停掉|退掉|取消|注销|销户|关掉)|不需要了|",
        r"|不要了|能(不能)?(帮我)?(退掉|取消掉?|停掉|关掉|注销)|\bjust (stop|cancel|end) (it|this|that)\b|\b(can|could) (it|they|these|those|this|that|the \w+) be (swapped|replaced|redone|remade|reprinted|re-?sent|fixed)\b|能(不能)?(给|帮)?(我|我们)?(重新?|再)(印|做|发|寄|送|洗|修|剪|弄|换|打)|(能|可以)(不能)?(给|帮)?(我|我们)?换(一|个|新)|\bno longer (need|use|want)\b|\bdon'?t (need|use) it any ?more\b|\b(i|we)('ll| will|'d| would| have to|'ve got to| must|'m going to| am going to|'re going to| are going to) (need to |have to )?(end|cancel|terminate|stop|renew|extend|book|reschedule)\b|\bgo ahead\b|\bsign me up\b|\blook into\b|\bplease\b|\b(i|we) want\b|\bi'd like\b|\bi would like\b|\bi need\b)"
    ))
});

static CANCEL: LazyLock<Regex> = LazyLock::new(|| {
    re(&format!(
        "{}{NOT_WANTED}{}",
        r"(?i)((取消|退订|停掉|关掉|关闭|终止|注销|不要再续|别再续|停止).{0,8}(订阅|会员|自动续费|续费|套餐|服务|包月|包年|月卡|年卡|会籍|合约|计划|扣费)|(订阅|会员|自动续费|套餐|服务|包月|月卡|年卡|健身卡|宽带|会籍|合约).{0,8}(取消|关掉|关闭|停掉|退掉|不要了|不续了|注销)|退订|不再续(费|订|约)?|(宽带|会员|套餐|服务|订阅|月卡|年卡|包月).{0,4}就?不用了|(别|不要)再扣|(别|不要|不用)再?(给我|帮我)?自动(续|扣)|停止扣费|(配送|送货|订阅|会员|服务|套餐).{0,6}先停(了|掉|一下)?吧?|(配送|送货).{0,6}停(了|掉)吧|\b(cancel|terminate|end|stop|discontinue)\b.{0,30}\b(subscription|membership|plan|service|contract|auto-?renew(al)?)\b|\bunsubscribe\b|\b(i|we) want out\b|\bmake\b.{0,40}\b(charges?|payments?|billing|deliveries|emails)\b.{0,10}\bstop\b|\bdrop (the|my|our)\b.{0,30}\b(line|plan|subscription|membership|package|add-?on)\b|(包月|自动续费|连续包|扣费|扣款).{0,20}(关了|关掉|停了|停掉)|",
        r"|\b(i'?m |we'?re )?done with (the|my|our)\b|\b(don'?t|do not|no longer) (need|want) (the|my|our|this|that|a|an|any)( \w+)? (renewal|subscription|membership|plan)( any ?more)?\b|\bno more\b.{0,30}\bafter (this|the|next)\b|(下(个)?(月|学期|季度|年)|以后|从.{0,6}起).{0,6}就?不(参加|上|来|去|报|订|用|要)了|\bwon'?t (be needing|need)\b|\bno longer (need|want)\b|\bget out of\b.{0,30}\b(subscription|membership|plan|contract)\b|\b(turn|switch|shut) off\b.{0,20}\bauto[- ]?renew(al|ing|s)?\b|\bdisable\b.{0,20}\bauto[- ]?renew(al|ing|s)?\b|\bstop (charging|billing) me\b|\bdon'?t renew\b|\b(don'?t|do not|never) auto[- ]?renew\b|\b(don'?t|do not) want\b.{0,40}\bto auto[- ]?renew\b|\blet it (run out|lapse|expire)\b)"
    ))
});

static RENEW: LazyLock<Regex> = LazyLock::new(|| {
    re(&format!(
        "{}{REACTIVATE_PHRASE})",
        r"(?i)(续费|续订|续约|续期|续租|续办|续保|再续|续上|(给|帮)我?再?充((一?个|一下|上)[^电]|[^个一上电])|充(个|上)?\s*(\d+|[一二三四五六七八九十百千万两]+(块|元))|再来一(期|个疗程|季|年)|续(一|两|三|半|[0-9])(年|个月|月|季)|\brenew(al)?\b|\btop[- ]?up\b|\btop (it|me|us|them|my \w+|this|that) up\b|充值|再充|充.{0,4}进去|充.{0,8}(话费|流量|余额)|再(买|续|报|充)(\d+|[一二三四五六七八九十两]+)?(节|次|课时|期|个月|年)|继续用|加(个|一个)?.{0,4}流量包|\bextend\b.{0,30}\b(subscription|membership|plan|contract|lease|license)\b|"
    ))
});

/// Getting a lapsed or stopped plan active again: a renewal, even beside the words of its
/// stopping ("之前停掉的会员能重新开通吗").
const REACTIVATE_PHRASE: &str = r"\bre-?activate\b|\bget (it|them|my \w+( \w+)?) (active|activated) again\b|\breinstate (it|my)\b|重新(开通|激活|启用)|(停掉|停了|暂停|退掉|取消)的.{0,12}恢复|恢复(之前|原来)?的?(会员|套餐|订阅|服务|课程|包月)";

static REACTIVATE: LazyLock<Regex> = LazyLock::new(|| re(&format!("(?i)({REACTIVATE_PHRASE})")));

/// The word for a complaint (a question naming only the word asks about complaints).
const COMPLAINT_WORD: &str = r"投诉|差评|\bcomplain(t|ts|ing)?\b|\bfile a complaint\b";
/// What customers complain of (something not arrived, broken, refused, too slow, rude).
const GRIEVANCE_PHRASE: &str = r"还没(到|来|收到|送到|到账|发货|处理|人)|没人(来|管|理|处理|回)|没收到|怎么回事|太差|太慢|态度(很|太)?差|坏了|破损|漏发|错发|给(我)?(个|一个)?说法|讨(个)?说法|蟑螂|污渍|发霉|之前没有的|(多了|有)(一|好几|几)?(道|条)?(划痕|刮痕|凹痕)|\bwasn'?t (there|like that) before\b|\b(new|fresh) (scratch|dent|stain|crack)|\b(filthy|dirty|cockroach(es)?|mou?ldy)\b|把我的.{0,10}(洗|弄|剪|修|烫|染|改)(成|坏|丢|错|花)|(洗|弄|剪|修|烫|染)(坏|丢|错|花)了|离谱|搞什么|\bseriously\?|\bcharged\b.{0,40}\b(i|we) (cancell?ed|downgraded|stopped|ended)\b|(取消|退订|降级)了?.{0,10}(还|又)在?扣|算错了|收错了|扣错了|多收|找(你们)?(经理|领导|负责人)|\b(speak|talk) to (a|the|your) (manager|supervisor)\b|多扣|乱扣|重复扣|扣了.{0,3}(两|2)(次|遍)|(让|叫)(人|我)怎么(吃|用|穿|住|睡|喝|看|过)|凉透了|(汤|饭|菜|饮料|奶茶|咖啡|粥|餐|外卖)(全|都|也|还)?洒(了|出来)|这(叫|算)?什么(服务|态度|质量|玩意)(啊|呀|嘛|吧|[!！])|\b(it'?s|it is|that'?s|this is|feels|felt) (\w+ ){0,2}(unsafe|dangerous)\b|\bgot\b.{0,40}\binstead\b|\b(came|arrived|was|were|showed up|turned up|delivered|is|are) (\w+ ){0,3}(\d+|an?|two|three|several) (minutes?|mins?|hours?|days?|weeks?) late\b|(^|[.!?]\s*)(\d+|an?|two|three|several) (minutes?|mins?|hours?|days?|weeks?) late\b|\b(charged|billed)\b.{0,30}\btwice\b|根本(没|不)(发|给|到|来|送|修|处理|管)|骗人|(那|还).{0,6}有什么用|\b(nobody|no one|no-one) (showed|turned|came|called|answered|replied|got back)\b|\bnever (showed|turned) up\b|\bstill waiting\b|\bstill not (ready|done|finished|fixed|sorted|here|back)\b|\bwhat('?s| is) going on\b|\bdouble[- ](charged|billed)\b|\bovercharg|\b(never|still hasn'?t|hasn'?t|still not|didn'?t) (arrived?|come|shown up|been (delivered|refunded|fixed))\b|\bwhere is (it|my)\b|\bridiculous\b|\bunacceptable\b|\bnot (thrilled|happy|pleased|impressed)\b|\b(than|not what) (i|we) asked for\b|\bterrible\b|\brude\b|\b(arrived|came) (broken|damaged|cracked)\b|\b(now )?you'?re (now )?telling me\b|(说|反映|提|打|找|讲)(了|过)?(好几|很多|无数)次|到现在(还是|也|都)";

/// Something that does not work, told as it happens ("一直加载不出来", "the air con isn't
/// working", "had a broken brake"): enough to keep a question from being vetoed as a plain
/// one, not enough for the rules to call it a complaint (a repair booking describes its
/// fault too), so the model decides.
static FAULT: LazyLock<Regex> = LazyLock::new(|| {
    re(
        r"(?i)(不出来|打不开|用不了|不能用|没法用|登不上|出(了)?问题|(出|有|发生)了?故障|故障了|失灵|没反应|不制冷|不出水|\b(is|are|was|were)n'?t working\b|\b(is|are|was|were|stopped|not) (\w+ )?working\b|\b(doesn'?t|don'?t|didn'?t) work\b|\bwon'?t (start|load|open|turn on|work|connect)\b|\bcan'?t (access|log ?in|connect|use)\b|\b(is|was|are|were|had an?|has an?|came|arrived) (\w+ ){0,2}broken\b)",
    )
});

/// Someone else complaining of how they feel ("my daughter has been complaining that she
/// can't see the board"): no grievance of the customer's.
static OTHERS_COMPLAINING: LazyLock<Regex> = LazyLock::new(|| {
    re(
        r"(?i)\b(she|he|they|my \w+|our \w+)( (has|have|had|is|was|keeps|kept))?( been)? complaining (of|about|that)\b",
    )
});

/// Complaints named as such, or what customers complain of.
static COMPLAINT: LazyLock<Regex> =
    LazyLock::new(|| re(&format!("(?i)({COMPLAINT_WORD}|{GRIEVANCE_PHRASE})")));

/// A grievance, not only the word: "投诉电话是多少？" asks, "快递还没到，怎么回事？" complains.
static GRIEVANCE: LazyLock<Regex> = LazyLock::new(|| re(&format!("(?i)({GRIEVANCE_PHRASE})")));

/// What makes a complaint urgent: something not done, late or slow (投诉 + 未/没/迟/慢).
static URGENT: LazyLock<Regex> = LazyLock::new(|| {
    re(
        r"(?i)(未|没|迟|慢|还不|一直|至今|仍然|\bnot\b|\bnever\b|\blate\b|\bslow\b|\bstill\b|\bhaven'?t\b|\bhasn'?t\b|\bdidn'?t\b|\bwasn'?t\b|\bmissing\b|\bagain\b|\bwhere is\b)",
    )
});

static APPOINTMENT_ZH: LazyLock<Regex> = LazyLock::new(|| {
    re(&format!(
        "((预约|预订|挂号|约).{{0,12}}{WHEN_ZH}|{WHEN_ZH}.{{0,12}}(预约|挂号|的号)|{WHEN_ZH}.{{0,8}}(派|安排).{{0,4}}(师傅|人|技师|工程师)|{WHEN_ZH}.{{0,8}}上门|找个(时间|空)(来|过来|去).{{0,8}}(查|看|检查|做|修|弄)|(派|安排).{{0,4}}(师傅|人|技师|工程师).{{0,8}}{WHEN_ZH})"
    ))
});

static APPOINTMENT_EN: LazyLock<Regex> = LazyLock::new(|| {
    re(&format!(
        r"(?i)(\b(book|schedule|make|set up|reserve|arrange)\b.{{0,40}}\b(appointment|reservation|visit|consult(ation)?|slot|session|check-?up)\b|\bappointment\b.{{0,40}}\b{WHEN_EN}|\b(can|could) (someone|somebody|you|the \w+|a \w+) (come|pop|take a look|look at|see|check|fix)\b.{{0,40}}\b{WHEN_EN}|\b(do|does|would) you have (anything|something|any (slots?|openings?|availability|room|space|time)|a slot|an opening)( (open|free|available))?\b.{{0,20}}\b{WHEN_EN})"
    ))
});

/// Characters a clause ends at (the target is the clause of the matched phrase).
const CLAUSE_ENDS: &[char] = &['，', '。', '！', '？', '；', ',', '.', '!', '?', ';', '\n'];

/// Asking after an earlier request ("我上次的投诉处理得怎么样了", "did my booking go through?").
static STATUS: LazyLock<Regex> = LazyLock::new(|| {
    re(
        r"(?i)(处理得?怎么样|处理了吗|处理好了(没|吗)|处理到(哪|什么)|到哪一步|进度|结果出来|有回复|受理了|通过了吗|办好了吗|成功了?(吗|没)|还有效吗|确认下来|定下来了(吗|没)|\b(been|is it|is that) confirmed\b|到账(了)?(没|吗)|\bgo(ne)? through\b|\bstatus of\b|\bany update\b|\b(been|was|were|got) processed\b|改好了|办好了|弄好了|确认(一)?下?.{0,6}(是不是|有没有|是否)|\bjust (checking|wanted to check|want to check|making sure)\b.{0,60}\b(was|were|went|has been|have been|got|received)\b|\bdid (my|the|you)\b|\bstill (confirmed|valid|active)\b|确定会(来|到)|会来(的)?吧|\bstill (coming|on for)\b|\b(is|are) still on\b|\b(is|are) (that|it|this|everything|we|all)( all)? still (good|ok|okay|fine|happening|going ahead|on track)\b|(有|什么)进展|还(在|算数|有效)(吧|吗)|(同意|批准|答应)了(吗|没)|\bwas (that|it|this) (ok|okay|fine|alright|approved|accepted)\b|\bhas (that|it|this) been (sorted|done|handled|processed|changed|moved|updated)\b)",
    )
});

/// Status words that ask after a request only in a question: "什么时候生效" asks, while
/// "月底生效" says when a new request should take effect.
static STATUS_IF_ASKED: LazyLock<Regex> =
    LazyLock::new(|| re(r"(?i)(生效|\btakes? effect\b|\btaking effect\b)"));

/// An intent the customer already made ("之前预约的", "上周已经退订了", "我约的师傅",
/// "刚续的", "I cancelled"): a question about it asks after an earlier request.
static EARLIER: LazyLock<Regex> = LazyLock::new(|| {
    re(
        r"(?i)((之前|上次|上回|昨天|前天|上周|上个月|刚才?|已经|早就).{0,4}(预约|约|续费|续|退订|取消|投诉|报修|反映|提交|订|付|交|缴)(的|了|过|[^，,。！？!?]{1,6}了)|我(预约|约|续|续费|订|退订|取消|投诉|报修)的|\b(i|we) (already |just )?(cancell?ed|renewed|re-?booked|booked|reported|filed)\b)",
    )
});

/// Telling the business of something ("跟你们说一声", "just so you know").
static INFORMING: LazyLock<Regex> = LazyLock::new(|| {
    re(
        r"(?i)((和|跟|给)你们?说一声|告诉你们?一声|知会(你们)?一声|\bjust (letting you know|so you know)\b|\bfyi\b|\bjust a heads[- ]up\b)",
    )
});

/// Something the customer has already done, told with a time or "already", the doer left
/// out too ("刚在小程序上续了年卡", "renewed my plan this morning"): told to the business
/// ([`INFORMING`]), no new intent.
static DONE: LazyLock<Regex> = LazyLock::new(|| {
    re(
        r"(?i)((刚|已经|今天|今早|昨天|昨晚|上午|早上|前天).{0,10}(续|订|约|退订|取消|付|交|充|办)(好|完|过)?[^，,。！？!?]{0,8}了|(^|[,.;]\s*)((i|we) )?(just |already )?(renewed|cancell?ed|booked|paid|topped up|re-?booked|signed up)\b)",
    )
});

/// A question form anywhere in the message, a closing "了没(有)" or "到没" ("生效了没有啊",
/// "收到没"), a tag question ("对吧") or a conjecture ("应该不会再扣了吧").
static ASKED: LazyLock<Regex> = LazyLock::new(|| {
    re(
        r"([?？吗呢]|(了|到|好|完|过)没有?[啊呀吧]?\s*$|(对|是|没错)吧|(应该|不会).{0,12}吧\s*[。.]?\s*$)",
    )
});

/// What turns a question about an earlier request into a grievance ("我约的师傅怎么还没来？").
static STILL_NOT: LazyLock<Regex> = LazyLock::new(|| {
    re(
        r"(?i)(还没|还不|怎么还|一直|又|\bstill (not|no|hasn'?t|haven'?t|waiting)\b|\bnot yet\b|\bagain\b)",
    )
});

/// Whether `message` carries no new intent whatever a model reads into it: it negates one,
/// asks after an earlier request (by a status word, or a question about an intent already
/// made that voices no grievance), is a question that asks no one to do anything (and tells
/// no grievance or fault: "你们怎么回事" complains, "投诉电话是多少" asks), only gives personal
/// data, corrects or updates it (not an error in what the business made), makes small talk
/// (a laugh, the weather) and asks for nothing, or tells of something the customer already
/// did. Naming an earlier complaint ("我上周投诉的") voices no new grievance.
pub fn no_new_intent(message: &str) -> bool {
    let message = &*FILLER.replace_all(message, "");
    let asked = || QUESTION.is_match(message) || ASKED.is_match(message);
    // A grievance or a fault told; with "still not" or "again", a question about an earlier
    // request complains too.
    let fault = || GRIEVANCE.is_match(message) || FAULT.is_match(message);
    let grievance = || fault() || STILL_NOT.is_match(message);
    let request = || REQUEST.is_match(&NO_WISH_OF_ONES_OWN.replace_all(message, ""));
    (NEGATED.is_match(message) && !NOT_WANTED_ANY_MORE.is_match(message))
        || STATUS.is_match(message)
        || (asked()
            && (STATUS_IF_ASKED.is_match(message)
                || (EARLIER.is_match(message) && !grievance() && !RESCHEDULE.is_match(message))))
        || (QUESTION.is_match(message)
            && !request()
            && !fault()
            && !MOVED.is_match(message)
            && (!ASKS_FOR_A_SLOT.is_match(message)
                || ABOUT_A_TIME.is_match(message)
                || HYPOTHETICALLY.is_match(message)
                || (ASKS_ABOUT_MINE.is_match(message) && !RESCHEDULE.is_match(message))))
        || (PERSONAL_DATA.is_match(message)
            && !INTENT_CUE.is_match(message)
            && !ASKS_FOR_A_SLOT.is_match(message)
            && !grievance())
        || (CORRECTION.is_match(message)
            && !grievance()
            && !YOURS.is_match(message)
            && !CANCEL.is_match(message)
            && !RENEW.is_match(message)
            && !RESCHEDULE.is_match(&CORRECTION.replace_all(message, "")))
        || (SMALL_TALK.is_match(message)
            && !request()
            && !grievance()
            && !INTENT_CUE.is_match(message))
        || (INFORMING.is_match(message) && DONE.is_match(message) && !request() && !grievance())
}

/// Fillers that only hesitate ("那个什么杂志订阅", "会员什么的"): no question in them.
static FILLER: LazyLock<Regex> = LazyLock::new(|| re(r"那个什么|什么的"));

/// Something the business made or sent ("the translation you sent back", "你们寄来的"): an
/// error in it is the business's fault, a complaint, not a correction of one's own details.
static YOURS: LazyLock<Regex> = LazyLock::new(|| {
    re(
        r"(?i)(\byou (sent|made|printed|delivered|issued|wrote|produced|engraved|embroidered|gave)\b|你们(寄|发|做|印|打|出|刻|绣|给)(来|过来|出来)?的)",
    )
});

/// Laughing at or with the assistant ("lol", "哈哈") or remarking on the weather: small talk,
/// when it asks for nothing, tells no grievance and names no intent.
static SMALL_TALK: LazyLock<Regex> = LazyLock::new(|| {
    re(r"(?i)(\b(lol|lmao|haha+|hehe+)\b|哈哈|嘿嘿|笑死|天气|下(大|小)?(雪|雨)了|\bweather\b)")
});

/// Correcting or updating personal details, of a booking too ("预约上名字写错了", "my surname
/// is spelled Smyth", "预约不变，邮箱更新一下"): no new intent, whatever the booking named
/// beside it.
static CORRECTION: LazyLock<Regex> = LazyLock::new(|| {
    re(
        r"(?i)((名字|姓名|生日|出生日期|电话|手机号?|号码|地址|身份证号?|邮箱).{0,6}(写错|填错|登记错|错了|有误|不对)|(写错|填错|登记错)了?.{0,6}(名字|姓名|生日|电话|号码|地址|身份证|邮箱)|\b(name|surname|dob|date of birth|birthday|email|phone|number|address)\b.{0,40}\b(spelt|spelled|wrong|incorrect|typo)\b|(邮箱|电话|手机号?|号码|地址|联系方式).{0,4}(更新|换成|改成|改为)|(更新|修改)(一下)?.{0,4}(邮箱|电话|手机号?|号码|地址|联系方式)|\bupdate (my|the) (email|phone|number|address|contact)|\binstead of my old (email|number|address)\b|\b(name|surname|dob|date of birth|birthday|email|phone number|number|address)\b.{0,30}\bshould (now )?be\b|\b(name|surname|dob|date of birth|birthday|email|phone number|number|address)\b.{0,15}\bis\b.{0,30},\s*not\b|(联系人|联系电话).{0,4}(换成|改成|改为)|(接送人|紧急联系人|联系人|监护人).{0,4}(加|添加|增加|换成|改成|改为|更新)|(加|添加|增加|更新)(一个|一下)?.{0,4}(接送人|紧急联系人|联系人|监护人)|\b(update|updating|change|changing|add|adding|set|setting)\b.{0,30}\b(emergency contact|contact person|next of kin|pick-?up person|authori[sz]ed (person|pick-?up))|改名|改姓|名字改(成|为)|\b(name|surname|last name|family name)( is|'s)? now\b|\b(update|change|correct) (it|that|this|them) on (file|record|my (account|profile))\b|(预约|时间)不变|\b(keep|keeping|leave|leaving) (my|the|our) (\w+ ){0,2}(appointment|booking|reservation)\b|\b(change|update|correct) (my|the|our) (contact |billing |shipping |home |delivery )?(email|phone|number|address|details)\b|\b(my )?(phone|mobile|number|email|address)( number| address)? (has )?changed\b|(手机|电话|号码|邮箱|地址)号?(换了|变了|改了)|(之前|刚才|上次)[^，,。！？]{0,8}(填|写|登记|留)错了|\b(update|updating|replace|replacing|change|changing) (my|the) (card|payment (card|details|method))\b)",
    )
});

/// Asking whether something is needed ("do I need to book?"), offering a choice ("or can I
/// just walk in?") or a condition ("what if I want to complain?", "如果我想取消") is no
/// request: the wish inside it is not the customer's.
static NO_WISH_OF_ONES_OWN: LazyLock<Regex> = LazyLock::new(|| {
    re(
        r"(?i)(\b(do|does|would|will|did) (i|we|you) (need|have)\b|\bwhere (can|could|do|should) (i|we)\b|\bor (can|could|should) (i|we)\b|\bif (i|we) (want|wanted|need|needed|would like|'d like)\b|如果.{0,12}[，,]|的话[，,])",
    )
});

/// A question about the customer's own booking, or beside it ("what time is my eye test
/// tomorrow?", "我的体检是几点？", "I've got an appointment on Friday, do you …",
/// "我下周三约了洗牙，…") names a day without asking for a slot (unless it moves it).
static ASKS_ABOUT_MINE: LazyLock<Regex> = LazyLock::new(|| {
    re(
        r"(?i)(\b(what time|when|where|what day|which day) (is|was|are|were) (my|our)\b|我的.{0,12}(几点|什么时候|哪天|在哪)|\b(i'?ve got|i have|i'?ve booked|we'?ve got|we have) (my|our) \w+( \w+)? (in|booked)\b|\b(i'?ve got|i have|we'?ve got|we have) (my|our|an?) (\w+ ){0,2}(appointment|booking|reservation|session|lesson|class)\b|我.{0,8}(约了|预约了|订了|挂了)[^，,。]{0,12}[，,])",
    )
});

/// Personal data given ("我的身份证号是…", "my new email is …", a phone or ID number).
static PERSONAL_DATA: LazyLock<Regex> = LazyLock::new(|| {
    re(
        r"(?i)(\d{17}[\dX]|\b1[3-9]\d{9}\b|[\w.+-]+@[\w-]+\.[\w.]+|(我的|新的?)(身份证|手机|电话|邮箱|地址|姓名|生日)|我(身份证|手机|电话|邮箱|地址|生日)号?(码)?(是|：|:)|\bmy (new |old )?(email( address)?|e-mail|phone( number)?|mobile( number)?|number|address|date of birth|birthday|id( number)?)( is|:)|\b(new|updated) (email( address)?|e-mail|phone( number)?|mobile( number)?|number|address)( is|:)|\b(dob|date of birth)\b)",
    )
});

/// Words of the four intents, or of asking for a visit: personal data beside one of them, or
/// beside a day or a time, is part of a request ("手机13800000000，帮我约明天理发",
/// "明早九点开过去保养，电话13800000000"); without any, the message only gives the data,
/// whatever a model reads into it.
static INTENT_CUE: LazyLock<Regex> = LazyLock::new(|| {
    re(
        r"(?i)(约|预订|预定|挂|订|排期|安排|上门|投诉|坏|退|取消|注销|销户|停|关|续|充值|不满|问题|故障|没收到|\b(book|appointment|reserv|schedul|slot|visit|consult|come|send|cancel|stop|terminate|unsubscribe|renew|extend|top[- ]?up|complain|broken|refund|fix|repair|wrong|late|missing|arriv|deliver|end|contract)\w*)",
    )
});

/// Moving a booking, in English, by where it goes ("push my session back a week", "shift my
/// cleaning from the 3rd to the 10th"): a request in question form too (a Chinese move names
/// its day, which asks for a slot; "到期日改到几号了" asks).
const MOVE: &str = r"\b(move|push|bump|shift) (it|my|the|our|us|me)\b.{0,40}\b(to|from|back|forward|later|earlier)\b";

/// Moving a booking to another time: a new request, even when it names the earlier one
/// ("之前约的周三，能不能帮我改到周五？").
static RESCHEDULE: LazyLock<Regex> = LazyLock::new(|| {
    re(&format!(
        r"(?i)({MOVE}|改到|改成|改约|改期|换到|换个时间|推迟|延后|提前到|\breschedul)"
    ))
});

/// A move with where it goes ([`MOVE`]).
static MOVED: LazyLock<Regex> = LazyLock::new(|| re(&format!("(?i)({MOVE})")));

/// A question about opening hours, how busy a time is or what it costs names a day without
/// asking for a slot ("周日几点开门？", "周五晚上人多吗", "how much more is a Saturday?").
static ABOUT_A_TIME: LazyLock<Regex> = LazyLock::new(|| {
    re(
        r"(?i)(开门|关门|营业|上班时间|\b(are|is) (you|it|the \w+) open\b|\bopen(ing)? (hours|times)\b|\bwhat time do you (open|close)\b|\bclosed on\b|人多|排队(吗|久)|\b(busy|crowded|packed|quiet)\b|\bhow far (ahead|in advance)\b|提前(多久|几天)|\bwalk[- ]?ins?\b|\bwalk in\b|\b(appointments?|bookings?|reservations?) only\b|只接受预约|需要预约吗|可以直接(去|来|过来)吗|多少钱|价格|价钱|贵|便宜|\bhow much\b|\bprices?\b|\bcosts?\b|\bcheaper\b|\bmore expensive\b)",
    )
});

/// A question for a time or a place in a schedule ("周六晚上还能订位子吗", "is there any slot
/// this week?"): a booking request in question form.
static ASKS_FOR_A_SLOT: LazyLock<Regex> = LazyLock::new(|| {
    re(&format!(
        r"(?i)({WHEN_ZH}|{WHEN_EN}|哪天|什么时候有空|还能(订|约|预约|加)|有没有(位|号|空)|\b(any|free|available|open|spare) (slots?|openings?|appointments?)\b|\b(get|grab|have|book|make|squeeze in) (a|an|another) (slot|appointment)\b|\bearliest\b|\bsoonest\b|\bfit (us|me) in\b|\bis .{{0,20}} possible\b)"
    ))
});

/// The intent the rules find in `message`, if any.
pub fn apply(message: &str) -> Option<Distilled> {
    if no_new_intent(message) {
        return None;
    }
    // Masked with spaces of the same length, so that a match's bytes are the message's.
    let masked =
        OTHERS_COMPLAINING.replace_all(message, |c: &regex::Captures<'_>| " ".repeat(c[0].len()));
    let hit = |intent_type: &str, re: &Regex, priority: Priority, reason: &str| {
        let m = re.find(&masked)?;
        Some(Distilled {
            intent_type: intent_type.to_owned(),
            target: clause_around(message, m.start(), m.end()),
            priority,
            key_reason: reason.to_owned(),
        })
    };
    let complaint_priority = if URGENT.is_match(message) {
        Priority::High
    } else {
        Priority::Medium
    };
    hit(
        "subscription_renewal",
        &REACTIVATE,
        Priority::Medium,
        "rule: renewal",
    )
    .or_else(|| {
        hit(
            "subscription_cancel",
            &CANCEL,
            Priority::Medium,
            "rule: cancellation",
        )
    })
    .or_else(|| {
        hit(
            "complaint",
            &COMPLAINT,
            complaint_priority,
            "rule: complaint",
        )
    })
    .or_else(|| {
        hit(
            "subscription_renewal",
            &RENEW,
            Priority::Medium,
            "rule: renewal",
        )
    })
    .or_else(|| {
        hit(
            "appointment",
            &APPOINTMENT_ZH,
            Priority::Medium,
            "rule: appointment",
        )
    })
    .or_else(|| {
        hit(
            "appointment",
            &APPOINTMENT_EN,
            Priority::Medium,
            "rule: appointment",
        )
    })
}

/// The clause of `text` holding bytes `start..end`, trimmed, at most 40 characters.
fn clause_around(text: &str, start: usize, end: usize) -> String {
    let from = text[..start].rfind(CLAUSE_ENDS).map_or(0, |i| {
        i + text[i..].chars().next().map_or(1, char::len_utf8)
    });
    let to = text[end..]
        .find(CLAUSE_ENDS)
        .map_or(text.len(), |i| end + i);
    text[from..to].trim().chars().take(40).collect()
}

#[cfg(test)]
mod tests;
