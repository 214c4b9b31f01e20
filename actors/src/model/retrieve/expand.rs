//! Multi-hop expansion through shared names (issue 17): a question whose answer is spread over
//! turns that share no words with it ("Where did the friend Caroline met at the support group
//! move from?") may still reach them through a name its best hits hold ("Jonas", met at the
//! group, in one turn; "Jonas moved from Sweden", in another). The names the best few hybrid
//! hits hold, beyond those the query names itself, lift every document holding them, and
//! bring in those that neither words nor vector found.
//!
//! A name held by more than `expansion_max_share` of the documents (a conversation's two
//! speakers, who are named everywhere) is not followed: it would lift everything alike.

use std::collections::HashMap;

use super::Retriever;

impl<D> Retriever<D> {
    /// Lifts, in `fused`, the documents sharing a followed name with the best
    /// `expansion_seeds` hits: `expansion_weight` times the share of the followed names each
    /// holds, times `scale`; a document not yet a candidate joins with `base(slot)` first.
    /// `named` are the query's own names (lifted already, not followed).
    pub(super) fn expand(
        &self,
        fused: &mut HashMap<usize, f32>,
        named: &[u64],
        allowed: &[bool],
        scale: f32,
        base: impl Fn(usize) -> f32,
    ) {
        let p = &self.params;
        let mut best: Vec<(usize, f32)> = fused.iter().map(|(&slot, &s)| (slot, s)).collect();
        best.sort_unstable_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        best.truncate(p.expansion_seeds);
        let mut followed: Vec<u64> = best
            .iter()
            .flat_map(|&(slot, _)| self.docs[slot].names.iter().copied())
            .filter(|name| !named.contains(name))
            .collect();
        followed.sort_unstable();
        followed.dedup();
        if followed.is_empty() {
            return;
        }
        let live = self.docs.iter().filter(|d| d.live).count();
        let most = ((p.expansion_max_share * live as f32) as usize).max(1);
        let holders = |name: &u64| {
            self.docs
                .iter()
                .filter(|d| d.live && d.names.binary_search(name).is_ok())
                .count()
        };
        // Held by another document than the seed, and by few.
        followed.retain(|name| (2..=most).contains(&holders(name)));
        if followed.is_empty() {
            return;
        }
        let seeds: Vec<usize> = best.iter().map(|&(slot, _)| slot).collect();
        for (slot, doc) in self.docs.iter().enumerate() {
            if !allowed[slot] || seeds.contains(&slot) || doc.names.is_empty() {
                continue;
            }
            let held = followed
                .iter()
                .filter(|name| doc.names.binary_search(name).is_ok())
                .count();
            if held > 0 {
                let lift = p.expansion_weight * held as f32 / followed.len() as f32 * scale;
                *fused.entry(slot).or_insert_with(|| base(slot)) += lift;
            }
        }
    }
}
