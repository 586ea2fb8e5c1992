"""A LangChain retriever over CONTEXT FOR (``pip install 'signalql[langchain]'``).

    >>> from signalql.langchain import SignalQLRetriever
    >>> retriever = SignalQLRetriever(engine=signalql.connect(), clauses={"budget": 2000})
    >>> docs = retriever.invoke("how are funnels counted")

Each bundle item is one ``Document``: its content as ``page_content``, its provenance as
``metadata`` (``address``, ``object_id``, ``revision``, ``representation``, ``trust``,
``roles``, ``score``, ``bundle_id``, ...), its address as ``id``. The documents are in the
bundle's order. The asynchronous ``ainvoke`` runs the statement on a worker thread (the engine
releases the GIL).
"""

from __future__ import annotations

from typing import Any, Optional

from langchain_core.callbacks import (
    AsyncCallbackManagerForRetrieverRun,
    CallbackManagerForRetrieverRun,
)
from langchain_core.documents import Document
from langchain_core.retrievers import BaseRetriever

from . import Engine
from ._retrieval import bundle_for, item_metadata

__all__ = ["SignalQLRetriever"]


class SignalQLRetriever(BaseRetriever):
    """Retrieves a context bundle's items for a query (``CONTEXT FOR query``).

    ``engine`` is a ``signalql.Engine``; ``clauses`` are ``Engine.context``'s keywords
    (``budget``, ``project``, ``prefer``, ``exclude``, ``max_objects``, ...)."""

    engine: Any
    clauses: Optional[dict[str, Any]] = None

    def _documents(self, query: str) -> list[Document]:
        engine: Engine = self.engine
        bundle = bundle_for(engine, query, self.clauses)
        return [
            Document(id=item.address, page_content=item.content or "", metadata=item_metadata(item))
            for item in bundle.items
        ]

    def _get_relevant_documents(
        self, query: str, *, run_manager: CallbackManagerForRetrieverRun
    ) -> list[Document]:
        return self._documents(query)

    async def _aget_relevant_documents(
        self, query: str, *, run_manager: AsyncCallbackManagerForRetrieverRun
    ) -> list[Document]:
        import asyncio

        return await asyncio.to_thread(self._documents, query)
