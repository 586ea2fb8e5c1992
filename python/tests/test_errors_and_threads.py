"""Errors are signalql.Error subclasses with the engine's code and position; statements run
with the GIL released, two at once, and Ctrl-C interrupts a running one."""

from __future__ import annotations

import _thread
import sys
import threading
import time
import traceback

import pytest

import signalql

from conftest import SAMPLE, SAMPLE_NOW, cli_json


def test_a_parse_error_has_its_code_and_position(engine):
    text = "FROM events RETURN cnt("
    with pytest.raises(signalql.ParseError) as caught:
        engine.query(text)
    e = caught.value
    cli = cli_json("query", "--data", str(SAMPLE), "--format", "json", text)["error"]
    assert isinstance(e, signalql.Error)
    assert (e.code, e.line, e.column, e.message) == (
        "parse_error",
        cli["line"],
        cli["column"],
        cli["message"],
    )
    # Column 23 is the "(" after cnt, counted by hand (1-based).
    assert (e.line, e.column) == (1, 23)


@pytest.mark.parametrize(
    "text, cls, code",
    [
        ("FROM events RETURN nosuchfield", signalql.UnknownField, "unknown_field"),
        ('CONTEXT FOR "x" BUDGET 20000000 TOKENS', signalql.LimitExceeded, "limit_exceeded"),
        ("EXPLAIN CONTEXT context://ctx_00000000000000000000000000000000",
         signalql.UnknownContext, "unknown_context"),
        ("FROM events DURING LAST 7 d RETURN sum(event_name)", signalql.TypeMismatch, "type_error"),
    ],
)
def test_each_code_raises_its_class(engine, text, cls, code):
    with pytest.raises(cls) as caught:
        engine.query(text)
    assert caught.value.code == code
    cli = cli_json("query", "--data", str(SAMPLE), "--now", SAMPLE_NOW, "--format", "json", text)
    assert cli["error"]["code"] == code


def test_a_limit_error_carries_the_limit(engine):
    with pytest.raises(signalql.LimitExceeded) as caught:
        engine.context("x", budget=20_000_000)
    assert caught.value.limit == "max_budget_tokens"
    assert caught.value.value == 20_000_000


def test_a_missing_dataset_is_an_io_error(tmp_path):
    with pytest.raises(signalql.IoError) as caught:
        signalql.connect(tmp_path / "nothing-here").query("FROM events RETURN count")
    assert caught.value.code == "io_error"


def test_a_corrupt_file_names_the_file(tmp_path):
    events = tmp_path / "events"
    events.mkdir()
    (events / "part-0.parquet").write_bytes(b"PAR1 this is not parquet PAR1")
    with pytest.raises(signalql.Error) as caught:
        signalql.connect(tmp_path).query("FROM events RETURN count")
    assert caught.value.code == "io_error"
    assert "part-0.parquet" in str(caught.value)


def test_bad_arguments_are_errors_not_crashes(engine):
    with pytest.raises(signalql.TypeMismatch):
        signalql.connect(SAMPLE, now="yesterday")
    with pytest.raises(TypeError):
        engine.query("FROM events RETURN count", params=["not", "a", "mapping"])


def _spinning():
    """A thread that counts while it holds the GIL, and the stop flag."""
    state = {"count": 0, "stop": False}

    def spin():
        while not state["stop"]:
            state["count"] += 1

    thread = threading.Thread(target=spin, daemon=True)
    return state, thread


def test_a_statement_releases_the_gil(big_events):
    """With a long switch interval Python switches threads only when the running one lets the
    GIL go: a thread that spins advances while the main thread is inside a statement only if
    the statement released the GIL."""
    engine = signalql.connect(big_events)
    text = "FROM events GROUP BY user_id RETURN user_id, count ORDER BY count DESC LIMIT 3"
    old = sys.getswitchinterval()
    state, thread = _spinning()
    try:
        sys.setswitchinterval(2.0)
        thread.start()
        time.sleep(0.01)  # let the spinner take the GIL once
        state["count"] = 0
        engine.query(text)
        during = state["count"]
    finally:
        state["stop"] = True
        sys.setswitchinterval(old)
        thread.join()
    assert during > 0


def test_two_threads_run_two_statements_at_once(big_events):
    engine = signalql.connect(big_events)
    text = "FROM events GROUP BY event_name RETURN event_name, count ORDER BY event_name"
    alone = engine.query(text).rows
    spans: list[tuple[float, float]] = []
    answers: list[list] = []
    errors: list[BaseException] = []

    def run():
        try:
            start = time.perf_counter()
            answers.append(engine.query(text).rows)
            spans.append((start, time.perf_counter()))
        except BaseException as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=run) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert answers == [alone, alone]
    # The two calls overlapped in time: each started before the other ended.
    (a0, a1), (b0, b1) = spans
    assert a0 < b1 and b0 < a1


def test_ctrl_c_interrupts_a_running_statement(big_events):
    engine = signalql.connect(big_events)
    text = 'FUNNEL "visit" -> "signup" -> "activated" FROM events WITHIN 7 d GROUP BY user_id'

    def keep_querying():
        while True:
            engine.query(text)

    timer = threading.Timer(0.3, _thread.interrupt_main)
    started = time.perf_counter()
    timer.start()
    with pytest.raises(KeyboardInterrupt) as caught:
        keep_querying()
    assert time.perf_counter() - started < 10
    # Raised inside the running statement (its native call), not between two statements.
    innermost = traceback.extract_tb(caught.tb)[-1]
    assert innermost.filename.endswith("__init__.py") and innermost.name == "query"
    # The engine answers the next statement.
    assert engine.query("FROM events RETURN count").rows == [[1_000_000]]
