"""signalql: SignalQL over Apache Arrow and DataFusion, for AI agents and the engineers who
give them data.

    >>> import signalql
    >>> engine = signalql.connect()          # the bundled sample dataset
    >>> result = engine.query('FROM events DURING LAST 7 d GROUP BY event_name '
    ...                       'RETURN event_name, count ORDER BY count DESC')
    >>> table = result.to_arrow()            # a pyarrow.Table, no copy
    >>> bundle = engine.context("how are funnels counted", budget=800)
    >>> print(bundle.render())

Every call runs in the engine with the GIL released (two threads run two statements at once)
and Ctrl-C interrupts a running statement. Failures raise ``signalql.Error`` subclasses
(``ParseError``, ``PermissionDenied``, ``LimitExceeded``, ...) carrying ``code``, ``message``,
``line``, ``column`` and ``file``. The context-packets API is ``signalql.packets``.
See docs/python.md.
"""

from __future__ import annotations

import datetime as _dt
import json as _json
import os as _os
from typing import Any, Iterator, Mapping, Optional, Sequence, Union

from . import _signalql
from ._errors import (
    CapabilityError,
    Error,
    InternalError,
    IoError,
    LimitExceeded,
    ParseError,
    PermissionDenied,
    TypeMismatch,
    UnknownContext,
    UnknownField,
)

__version__: str = _signalql.__version__

__all__ = [
    "connect",
    "Engine",
    "Result",
    "Bundle",
    "Item",
    "Error",
    "ParseError",
    "UnknownField",
    "TypeMismatch",
    "CapabilityError",
    "LimitExceeded",
    "UnknownContext",
    "IoError",
    "PermissionDenied",
    "InternalError",
]

Params = Mapping[str, Union[str, int, float, bool, None, _dt.datetime, _dt.date]]


def _instant(value: Union[str, _dt.datetime, None]) -> Optional[str]:
    """An RFC 3339 instant's text: a string as given, a datetime in UTC (a naive one is read
    as UTC)."""
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, _dt.datetime):
        if value.tzinfo is None:
            value = value.replace(tzinfo=_dt.timezone.utc)
        return value.astimezone(_dt.timezone.utc).isoformat().replace("+00:00", "Z")
    raise TypeError(f"expected an RFC 3339 string or a datetime, got {type(value).__name__}")


def _param_value(value: Any) -> Any:
    if isinstance(value, _dt.datetime):
        return _instant(value)
    if isinstance(value, _dt.date):
        return value.isoformat()
    return value


def _params_json(params: Optional[Params]) -> Optional[str]:
    """Bind parameters as the engine takes them: a JSON object (values are bound as literals
    after parsing, never spliced into the text; docs/params.md)."""
    if params is None:
        return None
    if not isinstance(params, Mapping):
        raise TypeError("params must be a mapping of names to values")
    return _json.dumps({str(k): _param_value(v) for k, v in params.items()})


def connect(
    root: Union[str, "_os.PathLike[str]", None] = None,
    *,
    principal: Optional[str] = None,
    now: Union[str, _dt.datetime, None] = None,
    s3_endpoint: Optional[str] = None,
    workers: Optional[Sequence[str]] = None,
) -> "Engine":
    """Open an engine over a dataset root.

    ``root`` is a local folder or ``s3://bucket/prefix`` (without one, ``$SIGNALQL_DATA`` or the
    bundled sample dataset); ``principal`` the caller of the dataset's policy.toml every
    statement runs as; ``now`` the instant T of statements without AS OF (RFC 3339 text or a
    datetime; default: the dataset's configured ``now``, else the clock); ``s3_endpoint`` an S3
    endpoint URL (credentials come from the AWS environment variables); ``workers``
    ``host:port`` addresses of ``signalql worker`` processes to run statements on.

    The engine keeps a plan cache and the resident context index for its life: keep one per
    dataset and caller rather than one per call.
    """
    native = _signalql.NativeEngine(
        None if root is None else _os.fspath(root),
        principal,
        _instant(now),
        s3_endpoint,
        list(workers or []),
    )
    return Engine(native)


class Engine:
    """A SignalQL engine over one dataset root (``signalql.connect``). Safe to share between
    threads; each call releases the GIL while the statement runs."""

    def __init__(self, native: "_signalql.NativeEngine") -> None:
        self._native = native

    @property
    def root(self) -> str:
        """The dataset root the engine reads."""
        return self._native.root

    def __repr__(self) -> str:
        return f"signalql.Engine({self.root!r})"

    def query(
        self, text: str, params: Optional[Params] = None
    ) -> Union["Result", "Bundle", dict[str, Any]]:
        """Run one SignalQL statement.

        Analytics statements (FROM, FUNNEL, FIND sequence, ...), DESCRIBE and FIND OBJECT
        answer a ``Result``; ``CONTEXT FOR`` a ``Bundle``; ``EXPLAIN`` and ``EXPLAIN CONTEXT``
        their JSON object as a dict. ``params`` binds ``$name`` parameters (as literals, after
        parsing)."""
        kind, value = self._native.query(text, _params_json(params))
        if kind == "envelope":
            return Result(value)
        if kind == "bundle":
            return Bundle(value)
        return _json.loads(value)

    def context(
        self,
        task: str,
        *,
        budget: Optional[int] = None,
        project: Optional[str] = None,
        kind: Optional[str] = None,
        clauses: Optional[str] = None,
        compress: Optional[bool] = None,
        prefer: Optional[Sequence[str]] = None,
        exclude: Optional[Sequence[str]] = None,
        max_objects: Optional[int] = None,
        max_depth: Optional[int] = None,
        max_age: Optional[str] = None,
        with_evidence: Optional[bool] = None,
        as_of: Union[str, _dt.datetime, None] = None,
        estimator: Optional[str] = None,
        params: Optional[Params] = None,
    ) -> "Bundle":
        """``CONTEXT FOR task``: the smallest relevant, current, trusted set of text within a
        token budget, as a ``Bundle``.

        Each keyword is one clause (signalql-v0.5-context.md): ``budget`` (BUDGET n TOKENS),
        ``project`` (USING PROJECT), ``kind`` (USING KIND: one object kind),
        ``prefer``/``exclude`` (lists of SignalQL items such as
        ``"current"``, ``'representation "summary"'``, ``"untrusted"``), ``max_objects``,
        ``max_depth``, ``max_age`` (``"30 d"``), ``with_evidence``, ``as_of``, ``estimator``
        (``"chars-div-4-v1"`` or ``"o200k_base"``), ``compress``; ``clauses`` is further
        SignalQL text after the task (its ``$name`` parameters bound from ``params``). A keyword
        given overrides what ``clauses`` says."""
        request = {
            "task": task,
            "budget": budget,
            "project": project,
            "kind": kind,
            "clauses": clauses,
            "compress": compress,
            "prefer": list(prefer or []),
            "exclude": list(exclude or []),
            "max_objects": max_objects,
            "max_depth": max_depth,
            "max_age": max_age,
            "with_evidence": with_evidence,
            "as_of": _instant(as_of),
            "estimator": estimator,
            "params": {str(k): _param_value(v) for k, v in (params or {}).items()},
        }
        return Bundle(self._native.context(_json.dumps(request)))

    def describe(self, target: Optional[str] = None) -> "Result":
        """``DESCRIBE target`` (``"events"``, ``"metrics"``, ``"entity(account)"``, ...), or
        every record the dataset has without a target."""
        return Result(self._native.describe(target))

    def explain(
        self, text: str, params: Optional[Params] = None, *, analyze: bool = False
    ) -> dict[str, Any]:
        """The plan of a statement without running it (EXPLAIN): sources, logical and physical
        plans, SQL, estimate, limits. With ``analyze=True`` it runs and adds operators, pruning
        and actual figures (EXPLAIN ANALYZE)."""
        return _json.loads(self._native.explain(text, _params_json(params), analyze))

    def explain_context(self, address: str) -> dict[str, Any]:
        """``EXPLAIN CONTEXT address``: how a stored bundle was computed, its phases, items and
        every rejected object with its reason."""
        return _json.loads(self._native.explain_context(address))

    def find(
        self,
        about: str,
        *,
        kind: Optional[str] = None,
        where: Optional[str] = None,
        representation: Optional[str] = None,
        limit: Optional[int] = 20,
        params: Optional[Params] = None,
    ) -> "Result":
        """``FIND OBJECT ABOUT about``: objects ranked by lexical relevance to the text, most
        relevant first, with their ``score``. ``kind`` keeps one object kind, ``where`` is a
        SignalQL condition on the object columns (its ``$name`` parameters bound from
        ``params``), ``representation`` scores one representation only, ``limit`` caps the
        rows (``None``: the result-row limit)."""
        bound = dict(params or {})
        bound["__about"] = about
        text = "FIND OBJECT"
        if kind is not None:
            bound["__kind"] = kind
            text += "($__kind)"
        if where:
            text += f" WHERE {where}"
        text += " ABOUT $__about"
        if representation is not None:
            bound["__representation"] = representation
            text += " USING REPRESENTATION $__representation"
        if limit is not None:
            text += f" LIMIT {int(limit)}"
        return Result(self._native.query(text, _params_json(bound))[1])


class Result:
    """An answer's rows and its result envelope.

    ``to_arrow()`` is a ``pyarrow.Table``; the result itself is an Arrow C stream
    (``__arrow_c_stream__``), so ``pyarrow.table(result)``, ``polars.from_arrow(result)`` and
    DuckDB's ``duckdb.sql("select * from result")`` read the engine's buffers without a copy.
    ``rows`` and ``columns`` are the envelope's (JSON values: timestamps as RFC 3339 text),
    ``envelope`` the whole envelope as ``signalql query --format json`` prints it. The rows
    are made JSON values only when ``rows``, ``envelope`` or iteration asks for them:
    ``to_arrow()``, ``columns``, ``metadata`` and ``len()`` never do."""

    def __init__(self, native: "_signalql.NativeResult") -> None:
        self._native = native
        self._envelope: Optional[dict[str, Any]] = None

    @property
    def envelope(self) -> dict[str, Any]:
        """The result envelope: ``columns``, ``rows``, ``metadata``."""
        if self._envelope is None:
            self._envelope = _json.loads(self._native.envelope_json)
        return self._envelope

    @property
    def rows(self) -> list[list[Any]]:
        """The rows, each a list of values in column order."""
        return self.envelope["rows"]

    @property
    def columns(self) -> list[str]:
        """The column names (their types and units are in ``envelope["columns"]``)."""
        if self._envelope is not None:
            return [c["name"] for c in self._envelope["columns"]]
        return [c["name"] for c in _json.loads(self._native.columns_json)]

    @property
    def metadata(self) -> dict[str, Any]:
        """The envelope's metadata: row count, truncation, T, window, cost, ..."""
        if self._envelope is not None:
            return self._envelope["metadata"]
        return _json.loads(self._native.metadata_json)

    def __len__(self) -> int:
        return len(self._native)

    def __iter__(self) -> Iterator[list[Any]]:
        return iter(self.rows)

    def __repr__(self) -> str:
        return f"signalql.Result({len(self)} rows, columns={self.columns!r})"

    def __arrow_c_stream__(self, requested_schema: Any = None) -> Any:
        if not self._native.has_arrow:
            return self._from_rows().__arrow_c_stream__(requested_schema)
        return self._native.__arrow_c_stream__(requested_schema)

    def __arrow_c_schema__(self) -> Any:
        if not self._native.has_arrow:
            return self._from_rows().schema.__arrow_c_schema__()
        return self._native.__arrow_c_schema__()

    def to_arrow(self) -> Any:
        """The rows as a ``pyarrow.Table`` (needs pyarrow), sharing the engine's buffers."""
        import pyarrow

        if not self._native.has_arrow:
            return self._from_rows()
        return pyarrow.table(self._native)

    def _from_rows(self) -> Any:
        # DESCRIBE's records exist only as the envelope's rows: a table built from them.
        import pyarrow

        names = self.columns
        return pyarrow.Table.from_pylist([dict(zip(names, r)) for r in self.rows]) if self.rows \
            else pyarrow.table({n: pyarrow.array([], pyarrow.null()) for n in names})


class Item:
    """One item of a bundle: a representation of an object revision, its content (unless the
    item is metadata-only), and its provenance (``object``, ``revision``, ``representation``,
    ``state``, ``origin``, ``trust``, ``validation``, ``roles``, ``score``, ``why``, ``path``)."""

    def __init__(self, fields: dict[str, Any], bundle_id: str) -> None:
        self.fields = fields
        self.bundle_id = bundle_id

    def __getattr__(self, name: str) -> Any:
        try:
            return self.__dict__["fields"][name]
        except KeyError:
            raise AttributeError(name) from None

    @property
    def address(self) -> str:
        """The object revision's address, ``object://id@revision``."""
        return self.fields["object"]

    @property
    def object_id(self) -> str:
        return self.address.removeprefix("object://").rsplit("@", 1)[0]

    @property
    def revision(self) -> int:
        return int(self.address.rsplit("@", 1)[1])

    @property
    def content(self) -> Optional[str]:
        return self.fields.get("content")

    @property
    def provenance(self) -> dict[str, Any]:
        """Where the item comes from: its address, object id, revision, representation,
        content hash, state, origin, trust, validation, roles, score and the bundle's id."""
        f = self.fields
        return {
            "address": f["object"],
            "object_id": self.object_id,
            "revision": self.revision,
            "representation": f.get("representation"),
            "content_hash": f.get("content_hash"),
            "state": f.get("state"),
            "origin": f.get("origin"),
            "trust": f.get("trust"),
            "validation": f.get("validation"),
            "roles": f.get("roles", []),
            "score": f.get("score"),
            "bundle_id": self.bundle_id,
        }

    def __repr__(self) -> str:
        return f"signalql.Item({self.address!r}, {self.fields.get('representation')!r})"


class Bundle:
    """A context bundle (CONTEXT FOR): ``id`` (its ``context://`` address), ``task``,
    ``items``, ``evidence``, ``metadata``; ``render()`` is the prompt text."""

    def __init__(self, native: "_signalql.NativeBundle") -> None:
        self._native = native
        self._data: dict[str, Any] = _json.loads(native.json)
        self.items: list[Item] = [Item(i, self._data["id"]) for i in self._data["items"]]

    @property
    def id(self) -> str:
        return self._data["id"]

    @property
    def task(self) -> str:
        return self._data["task"]

    @property
    def metadata(self) -> dict[str, Any]:
        return self._data["metadata"]

    @property
    def evidence(self) -> Optional[list[Any]]:
        return self._data.get("evidence")

    def as_dict(self) -> dict[str, Any]:
        """The bundle's JSON object (``signalql context``)."""
        return _json.loads(self._native.json)

    def render(self) -> str:
        """The bundle as prompt text: a header, then each item's provenance and its content
        fenced as quoted data (docs/context.md, "Render")."""
        return self._native.render()

    def __len__(self) -> int:
        return len(self.items)

    def __iter__(self) -> Iterator[Item]:
        return iter(self.items)

    def __repr__(self) -> str:
        return f"signalql.Bundle({self.id!r}, {len(self.items)} items)"
