"""Fixtures of the Python tests: the sample dataset, the CLI binary (the second route every
result is checked against), and a generated dataset for the statements that must run long."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SAMPLE = REPO / "data" / "sample"
# The sample's configured T (data/sample/signalql.toml).
SAMPLE_NOW = "2026-06-13T00:00:00Z"


def cli_binary() -> str:
    """The `signalql` binary: $SIGNALQL_BIN, else the debug build in $CARGO_TARGET_DIR (as
    .ci/run builds it), else one on PATH."""
    if os.environ.get("SIGNALQL_BIN"):
        return os.environ["SIGNALQL_BIN"]
    target = Path(os.environ.get("CARGO_TARGET_DIR", REPO / "target"))
    for profile in ("debug", "release"):
        candidate = target / profile / "signalql"
        if candidate.exists():
            return str(candidate)
    found = shutil.which("signalql")
    if found is None:
        pytest.skip("no signalql binary: set SIGNALQL_BIN or build it (cargo build)")
    return found


def cli_json(*args: str) -> dict:
    """`signalql ARGS` with JSON output, parsed; an error object on failure."""
    out = subprocess.run(
        [cli_binary(), *args], capture_output=True, text=True, check=False
    )
    return json.loads(out.stdout or out.stderr)


@pytest.fixture(scope="session")
def sample() -> Path:
    return SAMPLE


@pytest.fixture(scope="session")
def engine():
    import signalql

    return signalql.connect(SAMPLE, now=SAMPLE_NOW)


@pytest.fixture(scope="session")
def big_events(tmp_path_factory) -> Path:
    """1M generated events (signalql gen), for statements that must run long enough to be
    interrupted or overlapped."""
    root = tmp_path_factory.mktemp("big")
    subprocess.run(
        [cli_binary(), "gen", "events", "--rows", "1000000", "--seed", "7", "--out", str(root)],
        check=True,
        capture_output=True,
    )
    return root
