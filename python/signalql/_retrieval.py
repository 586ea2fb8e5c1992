"""What both retrievers share: a CONTEXT FOR call and each item's metadata."""

from __future__ import annotations

from typing import Any, Mapping, Optional

from . import Bundle, Engine, Item


def bundle_for(engine: Engine, query: str, clauses: Optional[Mapping[str, Any]]) -> Bundle:
    """``CONTEXT FOR query`` with the retriever's clauses (``Engine.context``'s keywords)."""
    return engine.context(query, **dict(clauses or {}))


def item_metadata(item: Item) -> dict[str, Any]:
    """A retrieved document's metadata: the item's provenance (object address, object id,
    revision, representation, content hash, state, origin, trust, validation, roles, score,
    bundle id), its media type and token count."""
    meta = item.provenance
    meta["media_type"] = item.fields.get("media_type")
    meta["tokens"] = item.fields.get("tokens")
    return meta
