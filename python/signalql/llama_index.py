"""A LlamaIndex retriever over CONTEXT FOR (``pip install 'signalql[llamaindex]'``).

    >>> from signalql.llama_index import SignalQLRetriever
    >>> retriever = SignalQLRetriever(signalql.connect(), budget=2000)
    >>> nodes = retriever.retrieve("how are funnels counted")

Each bundle item is one ``NodeWithScore``: a ``TextNode`` whose ``id_`` is the item's address,
``text`` its content and ``metadata`` its provenance (``address``, ``object_id``,
``revision``, ``representation``, ``trust``, ``roles``, ``score``, ``bundle_id``, ...), scored
with the item's lexical-v1 score. The nodes are in the bundle's order.
"""

from __future__ import annotations

import asyncio
from typing import Any, List

from llama_index.core.retrievers import BaseRetriever
from llama_index.core.schema import NodeWithScore, QueryBundle, TextNode

from . import Engine
from ._retrieval import bundle_for, item_metadata

__all__ = ["SignalQLRetriever"]


class SignalQLRetriever(BaseRetriever):
    """Retrieves a context bundle's items for a query (``CONTEXT FOR query``); the keyword
    arguments are ``Engine.context``'s clauses (``budget``, ``project``, ``max_objects``, ...)."""

    def __init__(self, engine: Engine, **clauses: Any) -> None:
        super().__init__()
        self._engine = engine
        self._clauses = clauses

    def _retrieve(self, query_bundle: QueryBundle) -> List[NodeWithScore]:
        bundle = bundle_for(self._engine, query_bundle.query_str, self._clauses)
        nodes = []
        for item in bundle.items:
            meta = item_metadata(item)
            node = TextNode(id_=item.address, text=item.content or "", metadata=meta)
            nodes.append(NodeWithScore(node=node, score=float(item.fields.get("score", 0))))
        return nodes

    async def _aretrieve(self, query_bundle: QueryBundle) -> List[NodeWithScore]:
        return await asyncio.to_thread(self._retrieve, query_bundle)
