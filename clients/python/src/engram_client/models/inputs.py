"""What callers pass that is more than a string: the accepted names of kinds, statuses,
routes, modes, ratings, resolutions, scopes and example statuses, and the parts of a turn."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

Kind = Literal["profile", "episodic", "correction"]
"""A memory's kind."""
Status = Literal["candidate", "active", "suppressed", "deleted", "expired"]
"""A memory's status (a write may give ``candidate`` or ``active``; a status change
``active``, ``suppressed`` or ``deleted``)."""
Route = Literal["nl2sql_query", "kpi_lookup", "business_knowledge_qa", "deep_analysis_workflow"]
"""The route a gateway took; it sets the context's slot budgets."""
SearchMode = Literal["hybrid", "dense", "bm25"]
"""How a search ranks: fused (default), by meaning only, or by words only."""
Rating = Literal["like", "dislike"]
"""Feedback on a turn."""
Resolution = Literal["keep_old", "keep_new", "keep_both"]
"""How a flagged contradiction is settled."""
Scope = Literal["gateway", "operator", "admin"]
"""What an API key may do (docs/security.md)."""
ExampleStatus = Literal["pending_review", "approved", "rejected"]
"""A few-shot example's status: waiting for review, served, or never served."""


@dataclass(frozen=True, slots=True)
class Choice:
    """A choice the user made in a turn (three identical ones form a profile candidate)."""

    value: str
    topic: str = ""
    """``chart_type``, ``granularity``, ...; empty to infer it from the value."""

    def to_json(self) -> dict[str, Any]:
        return {"topic": self.topic, "value": self.value}


@dataclass(frozen=True, slots=True)
class Clarification:
    """A clarifying question the assistant asked and the answer the user accepted."""

    question: str
    answer: str

    def to_json(self) -> dict[str, Any]:
        return {"question": self.question, "answer": self.answer}
