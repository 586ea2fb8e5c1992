"""Type stubs of the extension module (python/src/lib.rs). Use the public API in
``signalql`` (``connect``, ``Engine``, ``Result``, ``Bundle``) rather than these classes."""

from typing import Any, Optional, Sequence

__version__: str

class NativeEngine:
    """One engine over one dataset root; every call releases the GIL."""

    def __init__(
        self,
        root: Optional[str] = None,
        principal: Optional[str] = None,
        now: Optional[str] = None,
        s3_endpoint: Optional[str] = None,
        workers: Sequence[str] = ...,
    ) -> None: ...
    @property
    def root(self) -> str: ...
    def query(self, text: str, params: Optional[str] = None) -> tuple[str, Any]:
        """("envelope", NativeResult), ("bundle", NativeBundle) or ("json", str)."""
    def context(self, request: str) -> NativeBundle: ...
    def describe(self, target: Optional[str] = None) -> NativeResult: ...
    def explain(self, text: str, params: Optional[str] = None, analyze: bool = False) -> str: ...
    def explain_context(self, address: str) -> str: ...

class NativeResult:
    """An analytics answer: the envelope's JSON and the rows as Arrow batches."""

    @property
    def envelope_json(self) -> str: ...
    @property
    def has_arrow(self) -> bool: ...
    def __len__(self) -> int: ...
    def __arrow_c_schema__(self) -> object: ...
    def __arrow_c_stream__(self, requested_schema: object = None) -> object: ...

class NativeBundle:
    """A context bundle."""

    @property
    def json(self) -> str: ...
    def render(self) -> str: ...
