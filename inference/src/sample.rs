//! Choosing a decoder's next token: the most likely one, among those a JSON schema's
//! [`Matcher`] still accepts, read from the logits of one decoding step. Both the one-shot
//! decoding in [`crate::qwen2`] and the generation pool's decoder pick their tokens here.

use tch::Tensor;

use crate::constrain::{self, Matcher};

/// Tokens tried in logit order before the whole vocabulary is sorted (almost always one of
/// the first few fits the schema).
const TOP_TRIED: i64 = 64;

/// The most likely token of `logits` (`[vocab]`) that keeps `matcher`'s output a valid
/// prefix: the top few first, the whole vocabulary in order only when none of them fits.
pub fn pick<'v>(
    matcher: &Matcher,
    logits: &Tensor,
    vocab: &'v [Option<Vec<u8>>],
) -> Option<(usize, Matcher, &'v [u8])> {
    let ids = |t: Tensor| -> Vec<usize> {
        Vec::<i64>::try_from(t)
            .unwrap_or_default()
            .into_iter()
            .filter_map(|id| usize::try_from(id).ok())
            .collect()
    };
    let k = TOP_TRIED.min(logits.size()[0]);
    let (_, top) = logits.topk(k, -1, true, true);
    constrain::pick(matcher, ids(top), vocab)
        .or_else(|| constrain::pick(matcher, ids(logits.argsort(-1, true)), vocab))
}
