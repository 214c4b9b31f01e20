"""Typed views of the node's JSON answers, and the inputs that are more than a string.

Each answer type is a frozen dataclass with a ``from_json`` that reads the node's JSON
(``node/src/http/wire.rs`` and its siblings are the reference; ``docs/api.md`` the overview).
Fields the node may leave out default to ``None`` or empty; fields it adds later are ignored,
so a newer node does not break an older client. Times are Unix milliseconds (UTC).

Nothing here does I/O: the request side is ``_calls``, the transports are ``client`` and
``aio``.
"""

from .admin import (
    ApiKey,
    AuditEntry,
    AuditPage,
    NewKey,
)
from .conversation import (
    Context,
    ContextIntent,
    ContextMemory,
    ContextSummary,
    ContextTable,
    ContextTurn,
    FeedbackAck,
    IntentVersion,
    MemoryChange,
    TurnAck,
)
from .inputs import (
    Choice,
    Clarification,
    ExampleStatus,
    Kind,
    Rating,
    Resolution,
    Route,
    Scope,
    SearchMode,
    Status,
)
from .memories import (
    Conflict,
    ConflictResolution,
    Memory,
    MemoryAck,
    SearchHit,
    SearchResult,
)
from .shared import (
    DomainSettings,
    Example,
    ExampleAck,
    ExampleHit,
    ExampleSearch,
    ImportAck,
    Invalidation,
    SharedAsk,
    SharedContext,
    SharedSettings,
    SqlCacheAck,
    SqlHit,
    SqlLookup,
)
from .users import (
    Deleted,
    Forgotten,
    Intent,
    IntentWriteAck,
    Recall,
    Session,
    SessionTurns,
    Turn,
)

__all__ = [
    "Kind",
    "Status",
    "Route",
    "SearchMode",
    "Rating",
    "Resolution",
    "Scope",
    "ExampleStatus",
    "Choice",
    "Clarification",
    "MemoryChange",
    "IntentVersion",
    "TurnAck",
    "FeedbackAck",
    "ContextTurn",
    "ContextSummary",
    "ContextMemory",
    "ContextIntent",
    "ContextTable",
    "Context",
    "Memory",
    "MemoryAck",
    "SearchHit",
    "SearchResult",
    "Session",
    "Turn",
    "SessionTurns",
    "Deleted",
    "Conflict",
    "ConflictResolution",
    "Forgotten",
    "IntentWriteAck",
    "Intent",
    "Recall",
    "ApiKey",
    "NewKey",
    "AuditEntry",
    "AuditPage",
    "SqlHit",
    "SqlLookup",
    "SqlCacheAck",
    "Invalidation",
    "Example",
    "ExampleAck",
    "ExampleHit",
    "ExampleSearch",
    "ImportAck",
    "DomainSettings",
    "SharedSettings",
    "SharedAsk",
    "SharedContext",
]
