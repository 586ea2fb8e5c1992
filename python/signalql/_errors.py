"""The exceptions signalql raises: one ``signalql.Error`` subclass per error code.

The engine reports every failure as ``{"error": {code, message, line?, column?, offset?,
file?, help?, ...}}`` (docs/errors.md); ``from_json`` turns that object into the exception of
its code, with each field as an attribute.
"""

from __future__ import annotations

import json
from typing import Any, Optional


class Error(Exception):
    """A signalql error. ``code`` is the stable snake_case code agents program against
    (``parse_error``, ``permission_denied``, ...); ``line`` and ``column`` (1-based) locate an
    error in the statement's text, ``file`` names the file an I/O error is about. ``details``
    is the whole error object as the engine wrote it (``limit``, ``max``, ``value``,
    ``feature``, ``help``, ...)."""

    code: str = "error"

    def __init__(self, message: str, details: Optional[dict[str, Any]] = None) -> None:
        super().__init__(message)
        self.message: str = message
        self.details: dict[str, Any] = dict(details or {})
        self.code = self.details.get("code", type(self).code)
        self.line: Optional[int] = self.details.get("line")
        self.column: Optional[int] = self.details.get("column")
        self.offset: Optional[int] = self.details.get("offset")
        self.file: Optional[str] = self.details.get("file")
        self.help: Optional[str] = self.details.get("help")

    def __str__(self) -> str:
        where = ""
        if self.line is not None and self.column is not None:
            where = f" at line {self.line}, column {self.column}"
        elif self.file is not None:
            where = f" in {self.file}" + (f" line {self.line}" if self.line else "")
        text = f"{self.code}{where}: {self.message}"
        if self.help:
            text += f" (help: {self.help})"
        return text


class ParseError(Error):
    """The text is not a valid statement (``parse_error``)."""

    code = "parse_error"


class UnknownField(Error):
    """A field, table or column the statement names does not exist (``unknown_field``)."""

    code = "unknown_field"


class TypeMismatch(Error):
    """A value or column has a type the operation cannot take (``type_error``)."""

    code = "type_error"


class CapabilityError(Error):
    """A construct this engine does not execute (``capability_error``); ``feature`` names it."""

    code = "capability_error"

    @property
    def feature(self) -> Optional[str]:
        return self.details.get("feature")


class LimitExceeded(Error):
    """A configured limit was exceeded (``limit_exceeded``): ``limit``, ``max``, ``value``."""

    code = "limit_exceeded"

    @property
    def limit(self) -> Optional[str]:
        return self.details.get("limit")

    @property
    def max(self) -> Optional[int]:
        return self.details.get("max")

    @property
    def value(self) -> Optional[int]:
        return self.details.get("value")


class UnknownContext(Error):
    """A context address that is not in the context store (``unknown_context``)."""

    code = "unknown_context"


class IoError(Error):
    """Reading or writing data failed: a missing dataset, a corrupt file (``io_error``)."""

    code = "io_error"


class PermissionDenied(Error):
    """The caller's policy does not allow it (``permission_denied``)."""

    code = "permission_denied"


class InternalError(Error):
    """A bug in signalql (``internal_error``): please report it."""

    code = "internal_error"


ERRORS: dict[str, type[Error]] = {
    cls.code: cls
    for cls in (
        ParseError,
        UnknownField,
        TypeMismatch,
        CapabilityError,
        LimitExceeded,
        UnknownContext,
        IoError,
        PermissionDenied,
        InternalError,
    )
}


def from_json(text: str) -> Error:
    """The exception of the engine's error object ``{"error": {...}}`` (as JSON text)."""
    details = json.loads(text).get("error", {})
    cls = ERRORS.get(details.get("code", ""), Error)
    return cls(details.get("message", ""), details)
