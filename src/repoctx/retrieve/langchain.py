"""LangChain plumbing: a ``BaseRetriever`` over a repoctx Index, for LCEL chains. Retrieval only."""

from __future__ import annotations

from typing import Any

from langchain_core.callbacks import CallbackManagerForRetrieverRun
from langchain_core.documents import Document
from langchain_core.retrievers import BaseRetriever
from pydantic import ConfigDict

from repoctx.store.base import EVERYTHING, Scope


class RepoctxRetriever(BaseRetriever):
    """Returns whole capsules as Documents; metadata carries path, symbol, lines, score, citation, why."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    index: Any
    k: int = 8
    scope: Scope = EVERYTHING

    def _get_relevant_documents(self, query: str, *, run_manager: CallbackManagerForRetrieverRun) -> list[Document]:
        hits = self.index.search(query, k=self.k, scope=self.scope)
        return [
            Document(
                page_content=h.capsule.text,
                metadata={
                    "path": h.capsule.path,
                    "symbol": h.capsule.qualname,
                    "kind": h.capsule.kind,
                    "lines": [h.capsule.start_line, h.capsule.end_line],
                    "score": h.score,
                    "citation": h.capsule.citation,
                    "why": h.why,
                },
            )
            for h in hits
        ]
