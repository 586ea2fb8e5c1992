"""The LangChain and LlamaIndex retrievers return the bundle `signalql context` computes, one
document/node per item, with the item's provenance as metadata."""

from __future__ import annotations

import asyncio

import pytest

from conftest import SAMPLE, SAMPLE_NOW, cli_json

TASK = "how are funnels counted"
BUDGET = 900


@pytest.fixture(scope="module")
def cli_bundle():
    return cli_json("context", "--data", str(SAMPLE), "--now", SAMPLE_NOW, "--budget", str(BUDGET), TASK)


def _expected(cli_bundle):
    return [
        {
            "address": i["object"],
            "object_id": i["object"].removeprefix("object://").rsplit("@", 1)[0],
            "revision": int(i["object"].rsplit("@", 1)[1]),
            "representation": i["representation"],
            "trust": i["trust"],
            "roles": i["roles"],
            "score": i["score"],
            "content": i.get("content", ""),
        }
        for i in cli_bundle["items"]
    ]


def test_langchain_documents_are_the_bundles_items(engine, cli_bundle):
    pytest.importorskip("langchain_core")
    from signalql.langchain import SignalQLRetriever

    retriever = SignalQLRetriever(engine=engine, clauses={"budget": BUDGET})
    for docs in (retriever.invoke(TASK), asyncio.run(retriever.ainvoke(TASK))):
        assert len(docs) == len(cli_bundle["items"]) > 0
        for doc, want in zip(docs, _expected(cli_bundle)):
            assert doc.page_content == want["content"]
            assert doc.id == want["address"]
            for key in ("address", "object_id", "revision", "representation", "trust", "roles", "score"):
                assert doc.metadata[key] == want[key], key
            assert doc.metadata["bundle_id"] == cli_bundle["id"]


def test_llama_index_nodes_are_the_bundles_items(engine, cli_bundle):
    pytest.importorskip("llama_index.core")
    from signalql.llama_index import SignalQLRetriever

    retriever = SignalQLRetriever(engine, budget=BUDGET)
    for nodes in (retriever.retrieve(TASK), asyncio.run(retriever.aretrieve(TASK))):
        assert len(nodes) == len(cli_bundle["items"]) > 0
        for scored, want in zip(nodes, _expected(cli_bundle)):
            assert scored.node.get_content() == want["content"]
            assert scored.node.id_ == want["address"]
            assert scored.score == float(want["score"])
            for key in ("address", "revision", "representation", "trust", "roles", "score"):
                assert scored.node.metadata[key] == want[key], key
            assert scored.node.metadata["bundle_id"] == cli_bundle["id"]
