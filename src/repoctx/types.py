"""The few plain-data types everything speaks. All serialise to JSON via ``to_dict``."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any, Literal, NamedTuple

CapsuleKind = Literal["function", "method", "class", "module", "window"]
EdgeKind = Literal["calls", "imports", "inherits", "contains"]


_CONTROL = {c: f"\\x{c:02x}" for c in range(32)} | {0x7F: "\\x7f"}


def printable(text: str) -> str:
    """A name as one line: control characters (a newline in a file name) escaped, as git quotes them."""
    return text.translate(_CONTROL) if not text.isprintable() else text


@dataclass(slots=True)
class Capsule:
    """A whole semantic unit of code: function, method, class, module top level or a text window."""

    id: str
    path: str
    language: str
    kind: str
    name: str
    qualname: str
    signature: str
    start_line: int
    end_line: int
    text: str
    content_hash: str
    params: list[str] = field(default_factory=list)
    returns: str = ""
    docstring: str = ""
    decorators: list[str] = field(default_factory=list)
    parent: str | None = None  # id of the enclosing capsule (class for a method, module otherwise)
    repo: str = ""

    @property
    def citation(self) -> str:
        return f"{printable(self.path)}:{self.start_line}-{self.end_line} :: {printable(self.qualname)}"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class UnitHead(NamedTuple):
    """What a search asks of every candidate before it keeps one (kind filter, test and docs demotion): a unit
    without its text, which is read only for the units a search returns (``Store.capsules``)."""

    id: str
    path: str
    language: str
    kind: str
    qualname: str

    @classmethod
    def of(cls, c: Capsule) -> UnitHead:
        return cls(c.id, c.path, c.language, c.kind, c.qualname)


class UnitSpan(NamedTuple):
    """Where a unit lies in its file, without its text: what finding the unit a line falls in reads
    (``Store.file_spans``)."""

    id: str
    name: str
    kind: str
    start_line: int
    end_line: int


DEFS = ("function", "method")


def outermost_def(c: Capsule, lookup: Callable[[str], Capsule | None]) -> Capsule:
    """The function or method a def nested in functions belongs to (``collect`` for ``collect.make_term``): how
    a reader cites it and how gold locations count it. ``lookup`` gives a capsule by id (None when unknown)."""
    while c.kind in DEFS and c.parent:
        parent = lookup(c.parent)
        if parent is None or parent.kind not in DEFS:
            break
        c = parent
    return c


@dataclass(slots=True)
class Ref:
    """An unresolved reference found while parsing: a call, an import or a base class."""

    src: str  # capsule id that holds the reference
    kind: str  # calls | imports | inherits
    name: str  # as written: "foo", "self.bar", "mod.baz", "pkg.mod"
    line: int = 0


@dataclass(slots=True)
class Edge:
    src: str
    kind: str
    dst_name: str
    dst: str | None = None  # resolved capsule id, or None when known by name only

    @property
    def resolved(self) -> bool:
        return self.dst is not None

    def to_dict(self) -> dict[str, Any]:
        return {"src": self.src, "kind": self.kind, "dst_name": self.dst_name, "dst": self.dst}


@dataclass(slots=True)
class Hit:
    capsule: Capsule
    score: float
    why: dict[str, Any] = field(default_factory=dict)  # signal -> rank / details

    def to_dict(self) -> dict[str, Any]:
        return {
            "capsule": self.capsule.to_dict(),
            "score": self.score,
            "why": self.why,
            "citation": self.capsule.citation,
        }


@dataclass(slots=True)
class FileHit:
    path: str
    score: float
    capsules: list[Hit] = field(default_factory=list)
    # the past commits most like the question that changed this file, (sha, title), best first: why the repository's
    # history moved it (repoctx.history; a file-level search of a git checkout)
    history: list[tuple[str, str]] = field(default_factory=list)
    # the path the question wrote that names this file (a traceback's frame, a link): why the paths moved it
    named: str = ""
    # its repository, for a file ranked from units read without their texts (``hybrid.unit_files``: no capsules)
    repo: str = ""

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "path": self.path,
            "score": self.score,
            "capsules": [h.capsule.citation for h in self.capsules],
        }
        if self.history:
            out["history"] = [{"commit": sha, "title": title} for sha, title in self.history]
        if self.named:
            out["named"] = self.named
        return out


@dataclass(slots=True)
class Context:
    task: str
    text: str
    citations: list[str]
    tokens: int
    budget: int
    left_out: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(slots=True)
class TraceEvent:
    step: str  # SpeculativeRetrieval | Planning | Retrieval | FullDocumentExpansion | Result | Routing
    status: str  # IN_PROGRESS | SUCCEEDED | FAILED
    message: str
    sub_query: str | None = None
    hits: int | None = None
    data: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


async def iterate_in_thread(gen):
    """An async iterator over a blocking generator: each step runs in a worker thread, so an event loop
    never waits on the retrieval behind it."""
    import asyncio

    sentinel = object()
    while True:
        item = await asyncio.to_thread(next, gen, sentinel)
        if item is sentinel:
            return
        yield item
