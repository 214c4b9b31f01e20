//! A request through the front door, answered on the actor's turn, except for the waits that
//! would hold the user's other requests back: a read whose question the node's cache does not
//! hold has it embedded in a task of its own first, and a search that asked for a rerank has
//! its candidates reranked in one after it. Each task sends the request back to the actor as
//! a message of its own, so reads of one user wait for the pool side by side (and are batched
//! there) instead of one after another.

use ractor::{ActorRef, RpcReplyPort};

use super::reads::PendingRerank;
use super::serve::Served;
use super::{UserMsg, UserState, access, validate};
use crate::embed::Embedder;
use crate::error::Result;
use crate::model::retrieve::SearchMode;
use crate::request::{Reader, UserReply, UserRequest};

/// A read waiting for its question's embedding.
pub(super) struct Asked {
    pub(super) reader: Reader,
    pub(super) request: Box<UserRequest>,
    pub(super) reply: RpcReplyPort<Result<UserReply>>,
}

impl UserState {
    /// Answers `request` on the actor's turn (a rerank goes on in a task of its own).
    pub(super) async fn answer(
        &mut self,
        myself: &ActorRef<UserMsg>,
        reader: Reader,
        request: Box<UserRequest>,
        reply: RpcReplyPort<Result<UserReply>>,
    ) {
        let forget = matches!(*request, UserRequest::Forget(_));
        let writes = request.writes();
        let result = self.serve(&reader, *request).await;
        let forgotten = forget && result.is_ok();
        self.has_data |= writes && result.is_ok() && !forgotten;
        match result {
            Ok(Served::Rerank(pending)) => rerank_off_the_actor(myself, reader, *pending, reply),
            Ok(Served::Reply(answer)) => {
                let _ = reply.send(Ok(answer));
            }
            Err(err) => {
                let _ = reply.send(Err(err));
            }
        }
        self.count_records();
        if forgotten {
            self.accessed.clear();
            self.used.clear();
        } else if self.accessed.len() >= access::FLUSH_AT {
            self.flush_access(false).await;
        }
        if forgotten {
            // Nothing of the user may stay cached: leave the directory and stop.
            self.leave(myself, "forgotten");
        } else if !self.has_data {
            // Answered for a user with no data: hold nothing (queued requests are
            // redelivered to a fresh actor).
            self.leave(myself, "no data");
        }
    }

    /// The question of a read that would wait for the embedding pool: a valid search by
    /// meaning, or a context with a question, of a user with something to rank, whose vector
    /// the node's cache does not hold. `None`: the request is answered at once.
    pub(super) fn question_to_embed(&self, request: &UserRequest) -> Option<(Embedder, String)> {
        let embedder = self.args.services.embedder.as_ref()?;
        if self.index.is_empty() {
            return None;
        }
        let question = if let UserRequest::Search(query) = request
            && matches!(query.mode, SearchMode::Dense | SearchMode::Hybrid)
            && validate::search(query).is_ok()
        {
            &query.query
        } else if let UserRequest::Context(query) = request
            && validate::context(query).is_ok()
        {
            query.query.as_ref()?
        } else {
            return None;
        };
        if question.trim().is_empty() || embedder.holds_query(&self.args.key.tenant, question) {
            return None;
        }
        Some((embedder.clone(), question.clone()))
    }
}

/// Embeds `question` (within the query deadline) in a task of its own and sends the read back
/// to the actor with its vector, or why it has none.
pub(super) fn embed_off_the_actor(
    myself: &ActorRef<UserMsg>,
    embedder: Embedder,
    tenant: String,
    question: String,
    asked: Asked,
) {
    let actor = myself.clone();
    tokio::spawn(async move {
        let vector = embedder.query(&tenant, &question).await;
        // An actor that stopped meanwhile (forgotten, passivated, failed) drops the reply,
        // here or with its mailbox: the directory then asks a fresh actor, as it does for
        // any request its actor did not answer.
        let _ = actor.cast(UserMsg::Asked {
            reader: asked.reader,
            request: asked.request,
            question,
            vector,
            reply: asked.reply,
        });
    });
}

/// Reranks `pending` in a task of its own and sends its candidates back to the actor, which
/// answers `reply`.
fn rerank_off_the_actor(
    myself: &ActorRef<UserMsg>,
    reader: Reader,
    pending: PendingRerank,
    reply: RpcReplyPort<Result<UserReply>>,
) {
    let actor = myself.clone();
    tokio::spawn(async move {
        let done = Box::new(pending.run().await);
        // As above: a reply dropped with a stopped actor is asked again of a fresh one.
        let _ = actor.cast(UserMsg::Reranked {
            reader,
            done,
            reply,
        });
    });
}
