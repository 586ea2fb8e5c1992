"""signalql.packets: the context-packets API over CONTEXT FOR, checked by hand against the
sample's object tables read with pyarrow (lengths of the representations, kinds) and
hand-computed compressions."""

from __future__ import annotations

import pyarrow.dataset as ds
import pytest

import signalql
from signalql.packets import SHAPES, ContextBudget, ContextPacket, assemble_context, compress_text

from conftest import SAMPLE

TASK = "how are funnels counted"


def _table(name):
    return ds.dataset(str(SAMPLE / name), format="parquet").to_table().to_pylist()


@pytest.fixture(scope="module")
def reps():
    """(object id, representation name) -> content, from the sample's representations."""
    return {(r["object_id"], r["name"]): r["content"] for r in _table("representations")}


def test_defaults_are_the_seeds():
    b = ContextBudget()
    assert (b.max_chars, b.max_items, b.shape) == (2000, 20, "passages")
    p = ContextPacket(task="t")
    assert (p.used_chars, p.n_candidates, p.compressed, p.items, p.texts) == (0, 0, False, [], [])
    assert "passages" in SHAPES and len(SHAPES) >= 2


def test_the_character_budget_is_exact(engine, reps):
    """MAX OBJECTS 1 keeps the top object. Its summary fits a budget of exactly its length and
    not one character less (v0.5: never over BUDGET, so then the packet is empty); a budget of
    its text's length upgrades the item to the text."""
    top = assemble_context(engine, TASK, budget=ContextBudget(max_chars=100_000, max_items=1))
    assert len(top.items) == 1
    oid = top.items[0].object_id
    summary, text = reps[(oid, "summary")], reps[(oid, "text")]
    assert len(summary) < len(text)

    exact = assemble_context(engine, TASK, budget=ContextBudget(max_chars=len(summary), max_items=1))
    assert [i.object_id for i in exact.items] == [oid]
    assert exact.texts == [summary]
    assert exact.used_chars == len(summary)
    assert exact.bundle.metadata["budget"]["used"] == len(summary)

    under = assemble_context(engine, TASK, budget=ContextBudget(max_chars=len(summary) - 1, max_items=1))
    assert under.items == [] and under.used_chars == 0

    whole = assemble_context(engine, TASK, budget=ContextBudget(max_chars=len(text), max_items=1))
    assert whole.texts == [text] and whole.used_chars == len(text)


@pytest.mark.parametrize("max_chars", [150, 400, 999, 2000, 5000])
def test_the_packed_characters_never_exceed_the_budget(engine, reps, max_chars):
    packet = assemble_context(engine, TASK, budget=ContextBudget(max_chars=max_chars, max_items=20))
    assert packet.used_chars == sum(len(t) for t in packet.texts) <= max_chars
    assert len(packet.items) <= 20
    # Each text is a whole representation, read from the table.
    for item, text in zip(packet.items, packet.texts):
        assert reps[(item.object_id, item.representation)] == text
    assert packet.preservation() == [1.0] * len(packet.items)
    assert packet.compression_ratio == 1.0
    assert packet.scores == sorted(packet.scores, reverse=True)
    assert packet.n_candidates == packet.bundle.metadata["considered"] >= len(packet.items)


def test_max_items_caps_the_items(engine):
    packet = assemble_context(engine, TASK, budget=ContextBudget(max_chars=100_000, max_items=2))
    assert len(packet.items) == 2


def test_provenance_names_ids_kinds_sources_and_scores(engine):
    kinds = {o["object_id"]: o["kind"] for o in _table("objects")}
    packet = assemble_context(engine, TASK, budget=ContextBudget(max_chars=3000))
    prov = packet.provenance()
    assert len(prov) == len(packet.items) > 0
    for p, item in zip(prov, packet.items):
        assert p["id"] == item.object_id
        assert p["kind"] == kinds[item.object_id]
        assert p["source"] == item.address
        assert p["score"] == float(item.score)
        assert p["bundle_id"] == packet.bundle.id
    d = packet.as_dict()
    assert d["used_chars"] == packet.used_chars
    assert [i["text"] for i in d["items"]] == packet.texts


def test_compress_shrinks_to_relevant_sentences(engine, reps):
    """A budget under the top object's summary: with compress the item is its relevant
    sentences, within the budget, with a preservation receipt."""
    top = assemble_context(engine, TASK, budget=ContextBudget(max_chars=100_000, max_items=1))
    oid = top.items[0].object_id
    budget = len(reps[(oid, "summary")]) - 1
    packet = assemble_context(
        engine, TASK, budget=ContextBudget(max_chars=budget, max_items=1), compress=True
    )
    assert packet.compressed and len(packet.items) == 1
    assert packet.used_chars <= budget
    (p,) = packet.preservation()
    assert 0.0 < p <= 1.0
    original = packet.items[0].compression["original_chars"]
    assert packet.compression_ratio == pytest.approx(packet.used_chars / original)
    assert packet.compression_ratio < 1.0


def test_compress_text_by_hand():
    text = "Funnels count users. The sky is blue. Steps are counted in order."
    # Task terms: funnels, counted. Sentence 1 holds "funnels", sentence 3 "counted".
    assert compress_text(text, TASK, 1000) == text  # fits: as is
    assert compress_text(text, TASK, 50) == "Funnels count users. Steps are counted in order."
    assert compress_text(text, TASK, 30) == "Funnels count users."
    assert compress_text(text, TASK, 10) == ""


def test_render_shapes(engine):
    passages = assemble_context(engine, TASK, budget=ContextBudget(max_chars=1500))
    text = passages.render()
    assert text.startswith(f"# Context for: {TASK}\n")
    assert f"{passages.used_chars}/1500 chars" in text
    for t in passages.texts:
        assert t in text
    assert not passages.render(header=False).startswith("# Context for")
    bullets = assemble_context(engine, TASK, budget=ContextBudget(max_chars=1500, shape="bullets"))
    lines = bullets.render(header=False).splitlines()
    assert len(lines) == len(bullets.items)
    assert all(line.startswith("- ") and line.endswith(f"({item.address})")
               for line, item in zip(lines, bullets.items))


def test_telemetry_gets_one_event(engine):
    events: list[dict] = []
    packet = assemble_context(engine, TASK, budget=ContextBudget(max_chars=900), telemetry=events)
    assert len(events) == 1
    (e,) = events
    assert e["event"] == "context"
    assert e["budget"] == {"max_chars": 900, "max_items": 20, "shape": "passages"}
    assert (e["used_chars"], e["n_items"], e["bundle_id"]) == (
        packet.used_chars, len(packet.items), packet.bundle.id)
    called: list[dict] = []
    assemble_context(engine, TASK, budget=ContextBudget(max_chars=900), telemetry=called.append)
    assert called == events


def test_kind_keeps_one_object_kind(engine):
    """USING KIND: the sample's objects are all documents (read from the objects table), so
    kind="document" packs what no kind packs, and another kind packs nothing."""
    kinds = {o["kind"] for o in _table("objects")}
    assert kinds == {"document"}
    budget = ContextBudget(max_chars=2500)
    plain = assemble_context(engine, TASK, budget=budget)
    documents = assemble_context(engine, TASK, budget=budget, kind="document")
    assert documents.texts == plain.texts and len(documents.items) > 0
    assert {p["kind"] for p in documents.provenance()} == {"document"}
    assert 'USING KIND "document"' in documents.bundle.metadata["canonical_query"]
    assert documents.bundle.id != plain.bundle.id
    emails = assemble_context(engine, TASK, budget=budget, kind="email")
    assert emails.items == [] and emails.used_chars == 0
    assert emails.bundle.metadata["excluded"]["out_of_scope"] == emails.n_candidates


def test_bad_arguments_are_errors(engine):
    with pytest.raises(ValueError):
        assemble_context(engine, TASK, budget=ContextBudget(shape="haiku"))
    with pytest.raises(signalql.LimitExceeded):
        assemble_context(engine, TASK, budget=ContextBudget(max_items=501))


def test_the_chars_estimator_in_signalql():
    """The SignalQL side: USING ESTIMATOR "chars-v1" is a budget in characters."""
    engine = signalql.connect(SAMPLE)
    bundle = engine.query(f'CONTEXT FOR "{TASK}" BUDGET 700 TOKENS USING ESTIMATOR "chars-v1"')
    used = sum(len(i.content or "") for i in bundle.items)
    assert used == bundle.metadata["budget"]["used"] <= 700
    assert bundle.metadata["estimators"] == ["chars-v1"]
    assert all(i.tokens == len(i.content) for i in bundle.items)
