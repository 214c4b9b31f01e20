//! What a user's actor distils at once: the plan of a write with a user message (the rules'
//! result, whether the model follows), a message written without a turn (the seed's
//! `/write`), and the counts of what the rules wrote.

use super::ops::Prepared;
use super::{UserState, intents, validate};
use crate::error::{Error, Result};
use crate::request::user::{DistilAck, IntentAck, MessageWrite};

impl UserState {
    /// What a write of `message` distils at once (`None`: the node does not distil).
    pub(super) fn message_plan(&self, message: &str) -> Option<intents::MessagePlan> {
        let distillation = self.args.services.distillation.as_ref()?;
        Some(intents::MessagePlan {
            rule: engram_inference::distil::rules::apply(message),
            queue: distillation.model_on(),
            types: distillation.types(&self.args.key.tenant).to_vec(),
            rules: distillation.gate_rules(self.args.services.settings.intent_versions),
        })
    }

    pub(super) fn count_rule_intents(&self, written: &[IntentAck], replayed: bool) {
        if let Some(distillation) = &self.args.services.distillation
            && !replayed
            && !written.is_empty()
        {
            let m = &distillation.metrics;
            m.rule_hits
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            for ack in written {
                m.count_written(ack);
            }
        }
    }

    /// Distils a message without a turn (the seed's `/write`): the rules at once, the model
    /// in the background.
    pub(super) async fn distil_message(&mut self, req: MessageWrite) -> Result<DistilAck> {
        validate::message(&req)?;
        let Some(plan) = self.message_plan(&req.message) else {
            return Err(Error::Unavailable(
                "this node does not distil messages ([distillation] enabled = false)".into(),
            ));
        };
        let prepared = Prepared {
            distil_queued: plan.queue,
            ..Prepared::default()
        };
        let request_id = req.request_id.clone();
        let ack = self
            .write(&request_id, prepared, None, move |u, scope| {
                let entry = intents::message_entry_id(&req.request_id);
                let gated = intents::on_message(u, scope.now, &plan, &req.message, &entry, "", 0)?;
                let ack = DistilAck {
                    intents: gated,
                    distilling: plan.queue,
                    replayed: false,
                };
                Ok(Ok((ack, Vec::new())))
            })
            .await?;
        self.count_rule_intents(&ack.intents, ack.replayed);
        Ok(ack)
    }
}
