//! The MCP tools: each one endpoint of the node's API, with a JSON schema of its arguments
//! (from the argument types below, through schemars: their doc comments are what an agent
//! reads) and a description saying when to call it.
//!
//! A tool's result is the node's JSON answer, as text and as structured content. The node's
//! refusals and failures are tool errors (`isError: true`) carrying the API's `status`,
//! `code` and `message`, so the agent can act on them; nothing a node answers ends the
//! server. Writes carry a `request_id` (a fresh one unless the agent passes its own): a call
//! repeated with the same id returns the first answer (`replayed: true`) and writes nothing
//! twice.
//!
//! Whose key a call uses: over streamable HTTP, the key the MCP client sent with that HTTP
//! request (checked by `endpoint.rs`, carried here in the request's extensions); over
//! stdio, the server's own (`--api-key-file` or `ENGRAM_API_KEY`). Nothing here logs
//! arguments, answers or keys: a call is logged by tool name, outcome and duration.

use std::sync::Arc;
use std::time::Instant;

use rmcp::ErrorData;
use rmcp::handler::server::router::tool::ToolRouter;
use rmcp::handler::server::tool::ToolCallContext;
use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::{CallToolRequestParams, CallToolResponse, CallToolResult};
use rmcp::service::RequestContext;
use rmcp::{RoleServer, ServerHandler, tool, tool_handler, tool_router};

use super::client::{Answer, Credentials, NodeClient};

mod args;
mod requests;

pub use self::args::*;
pub use self::requests::{Request, error_body};

/// The tools, over one node.
#[derive(Clone)]
pub struct EngramTools {
    node: Arc<NodeClient>,
    /// The key of every call over stdio; `None` over HTTP, where each request brings its own.
    fixed: Option<Arc<Credentials>>,
    tool_router: ToolRouter<Self>,
}

impl std::fmt::Debug for EngramTools {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EngramTools")
            .field("node", &self.node)
            .finish_non_exhaustive()
    }
}

/// The tool result of a node's answer: its JSON as text and structured content, or an
/// error result carrying the API's status, code and message.
pub fn tool_result(answer: Answer) -> CallToolResult {
    match answer {
        Answer::Ok(value) => CallToolResult::structured(value),
        Answer::Api {
            status,
            code,
            message,
            retry_after,
        } => {
            CallToolResult::structured_error(error_body(Some(status), &code, &message, retry_after))
        }
        Answer::Nothing(message) => {
            CallToolResult::structured_error(error_body(None, "unavailable", &message, None))
        }
    }
}

fn outcome(answer: &Answer) -> &str {
    match answer {
        Answer::Ok(_) => "ok",
        Answer::Api { code, .. } => code,
        Answer::Nothing(_) => "nothing",
    }
}

#[tool_router(vis = "pub(super)")]
impl EngramTools {
    /// The tools over `node`; `fixed` is the key of every call (stdio), or `None` when each
    /// request carries its own (HTTP).
    pub fn new(node: Arc<NodeClient>, fixed: Option<Credentials>) -> Self {
        EngramTools {
            node,
            fixed: fixed.map(Arc::new),
            tool_router: Self::tool_router(),
        }
    }

    /// The credentials of the request `ctx`: the HTTP request's (set by the endpoint's
    /// authentication), else the server's own; over HTTP, never the server's.
    fn credentials(&self, ctx: &RequestContext<RoleServer>) -> Option<Arc<Credentials>> {
        match ctx.extensions.get::<axum::http::request::Parts>() {
            Some(parts) => parts.extensions.get::<Arc<Credentials>>().cloned(),
            None => self.fixed.clone(),
        }
    }

    async fn run(
        &self,
        ctx: &RequestContext<RoleServer>,
        tool: &'static str,
        request: Request,
    ) -> Answer {
        let Some(who) = self.credentials(ctx) else {
            return Answer::Api {
                status: 401,
                code: "unauthenticated".to_owned(),
                message: "this request carries no API key".to_owned(),
                retry_after: None,
            };
        };
        let started = Instant::now();
        let answer = self
            .node
            .call(&who, request.method, &request.path, request.body.as_ref())
            .await;
        tracing::info!(
            tool,
            outcome = outcome(&answer),
            elapsed_ms = started.elapsed().as_millis() as u64,
            "tool call"
        );
        answer
    }

    #[tool(
        description = "Record one conversation turn of an end user in Engram: the user's message \
        and your answer. Call it after every answer. A successful turn joins the session's \
        recent turns and may form memories (stated preferences, repeated choices) and intents. \
        Retrying? Pass the same request_id: the retry returns the first answer (replayed: true) \
        and writes nothing twice; without one, each call gets a fresh id. Answers written, \
        session_id, seq (the turn's number), entities, memories formed and intents.",
        annotations(
            title = "Add a conversation turn",
            read_only_hint = false,
            destructive_hint = false,
            // false: a call without a request_id writes again
            idempotent_hint = false,
            open_world_hint = false
        )
    )]
    async fn add_turn(
        &self,
        Parameters(a): Parameters<AddTurn>,
        ctx: RequestContext<RoleServer>,
    ) -> CallToolResult {
        tool_result(self.run(&ctx, "add_turn", a.request()).await)
    }

    #[tool(
        description = "Get the memory context of an end user before you answer them: the \
        session's recent turns, summaries of older ones, the user's profile (preferences), \
        episodic memories and corrections relevant to the query, current intents and entities. \
        Put the answer's `text` in your prompt as it is; the other fields say what it holds \
        (each memory with its status: active, or candidate, not yet confirmed). Read-only.",
        annotations(
            title = "Get a user's memory context",
            read_only_hint = true,
            open_world_hint = false
        )
    )]
    async fn get_context(
        &self,
        Parameters(a): Parameters<GetContext>,
        ctx: RequestContext<RoleServer>,
    ) -> CallToolResult {
        tool_result(self.run(&ctx, "get_context", a.request()).await)
    }

    #[tool(
        description = "Search an end user's live memories by meaning and words (dense, BM25, \
        recency and salience fused), best first, each hit with its score and the memory (id, \
        kind, status, text, confidence, salience, session). Read-only.",
        annotations(
            title = "Search a user's memories",
            read_only_hint = true,
            open_world_hint = false
        )
    )]
    async fn search_memories(
        &self,
        Parameters(a): Parameters<SearchMemories>,
        ctx: RequestContext<RoleServer>,
    ) -> CallToolResult {
        tool_result(self.run(&ctx, "search_memories", a.request()).await)
    }

    #[tool(
        description = "Write a memory about an end user: a profile fact or preference, an \
        episodic fact, or a correction. It is a candidate (served, marked unconfirmed) unless \
        status is active. With memory_id it creates or replaces that memory; without, a new \
        one is made. Retrying? Pass the same request_id: the retry returns the first answer \
        and writes nothing twice. Answers the memory as stored and what happened.",
        annotations(
            title = "Write a memory",
            read_only_hint = false,
            destructive_hint = false,
            // false: a call without a request_id writes again
            idempotent_hint = false,
            open_world_hint = false
        )
    )]
    async fn write_memory(
        &self,
        Parameters(a): Parameters<WriteMemory>,
        ctx: RequestContext<RoleServer>,
    ) -> CallToolResult {
        tool_result(self.run(&ctx, "write_memory", a.request()).await)
    }

    #[tool(
        description = "List an end user's memories (every status unless filtered): id, kind, \
        status, text, confidence, salience, personal-data level, when written and last \
        confirmed. Read-only.",
        annotations(
            title = "List a user's memories",
            read_only_hint = true,
            open_world_hint = false
        )
    )]
    async fn list_memories(
        &self,
        Parameters(a): Parameters<ListMemories>,
        ctx: RequestContext<RoleServer>,
    ) -> CallToolResult {
        let answer = self.run(&ctx, "list_memories", a.request()).await;
        tool_result(match answer {
            Answer::Ok(value) => Answer::Ok(a.keep(value)),
            refused @ (Answer::Api { .. } | Answer::Nothing(_)) => refused,
        })
    }

    #[tool(
        description = "Change one memory's status: active (confirmed, served), suppressed \
        (kept but no longer served; use it for a memory that is wrong or that the user \
        disowns) or deleted. Answers the memory as stored now.",
        annotations(
            title = "Set a memory's status",
            read_only_hint = false,
            destructive_hint = true,
            idempotent_hint = true,
            open_world_hint = false
        )
    )]
    async fn set_memory_status(
        &self,
        Parameters(a): Parameters<SetMemoryStatus>,
        ctx: RequestContext<RoleServer>,
    ) -> CallToolResult {
        tool_result(self.run(&ctx, "set_memory_status", a.request()).await)
    }

    #[tool(
        description = "Record an end user's like or dislike of one of their earlier turns \
        (by its seq, from add_turn's answer). A dislike with corrected_sql and a comment forms \
        a correction memory.",
        annotations(
            title = "Record feedback on a turn",
            read_only_hint = false,
            destructive_hint = false,
            // false: a call without a request_id writes again
            idempotent_hint = false,
            open_world_hint = false
        )
    )]
    async fn feedback(
        &self,
        Parameters(a): Parameters<Feedback>,
        ctx: RequestContext<RoleServer>,
    ) -> CallToolResult {
        tool_result(self.run(&ctx, "feedback", a.request()).await)
    }

    #[tool(
        description = "List an end user's conversation sessions: id, title (the first message, \
        personal data masked), turn count, first and last turn times. Read-only.",
        annotations(
            title = "List a user's sessions",
            read_only_hint = true,
            open_world_hint = false
        )
    )]
    async fn list_sessions(
        &self,
        Parameters(a): Parameters<ListSessions>,
        ctx: RequestContext<RoleServer>,
    ) -> CallToolResult {
        tool_result(self.run(&ctx, "list_sessions", a.request()).await)
    }

    #[tool(
        description = "Recall an end user's current intent of one type (appointment, \
        complaint, subscription_renewal, subscription_cancel, or any type written for them): \
        its target_value and version, null when none is current. With all=true, every version \
        newest first, a page at a time (next_before continues). Read-only.",
        annotations(
            title = "Recall a user's intent",
            read_only_hint = true,
            open_world_hint = false
        )
    )]
    async fn recall_intent(
        &self,
        Parameters(a): Parameters<RecallIntent>,
        ctx: RequestContext<RoleServer>,
    ) -> CallToolResult {
        tool_result(self.run(&ctx, "recall_intent", a.request()).await)
    }

    #[tool(
        description = "DESTRUCTIVE AND IRREVERSIBLE: erase everything Engram holds about an end \
        user (every turn, session, memory, intent and index entry; their data key is destroyed \
        first, so nothing can be read back). Call it only when the user explicitly asks to be \
        forgotten, never to tidy up. Needs an admin API key (a gateway key gets 403 \
        forbidden).",
        annotations(
            title = "Forget a user (irreversible)",
            read_only_hint = false,
            destructive_hint = true,
            idempotent_hint = true,
            open_world_hint = false
        )
    )]
    async fn forget_user(
        &self,
        Parameters(a): Parameters<ForgetUser>,
        ctx: RequestContext<RoleServer>,
    ) -> CallToolResult {
        tool_result(self.run(&ctx, "forget_user", a.request()).await)
    }
}

#[tool_handler(
    router = self.tool_router,
    name = "engram",
    instructions = "Engram is the long-term memory of the end users you talk to. Before \
    answering a user, call get_context with their user id, the session id and their question, \
    and put its `text` in your prompt. After answering, call add_turn with the user's message \
    and your answer. Use search_memories and list_memories to look things up, write_memory to \
    record a fact the user stated, set_memory_status to suppress a wrong one. forget_user \
    erases a user for good: only on the user's explicit request."
)]
impl ServerHandler for EngramTools {
    /// The router's call, with arguments that do not fit a tool's schema reported as the API
    /// reports invalid fields (see [`invalid_arguments`]).
    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let call = ToolCallContext::new(self, request, context);
        let mut response = self.tool_router.call(call).await?;
        if let CallToolResponse::Complete(result) = &mut response {
            invalid_arguments(result);
        }
        Ok(response)
    }
}

/// rmcp answers arguments that do not deserialize (a missing field, a kind outside the
/// enum) with an error result holding only its text; this gives it the shape of the node's
/// refusals, `{"code": "invalid_input", "message"}` (no `status`: the node was not asked).
pub fn invalid_arguments(result: &mut CallToolResult) {
    const PREFIX: &str = "failed to deserialize parameters:";
    if result.is_error != Some(true) || result.structured_content.is_some() {
        return;
    }
    let reason = result
        .content
        .first()
        .and_then(|c| c.as_text())
        .and_then(|t| t.text.strip_prefix(PREFIX))
        .map(|reason| format!("invalid arguments: {}", reason.trim()));
    if let Some(message) = reason {
        *result =
            CallToolResult::structured_error(error_body(None, "invalid_input", &message, None));
    }
}
