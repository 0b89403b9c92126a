"""Resolve reference names to capsules (pure), and the names used to re-resolve after a change.

Lookups are injected, so the same rules serve a cold build (dicts in memory) and an incremental
update (queries against the store).
"""

from __future__ import annotations

import posixpath
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Protocol

from repoctx.types import Capsule, Edge, Ref

_NONE: list = []  # no definition of that name (never appended to)

SELF_NAMES = {"self", "this", "cls", "super", "Self", "static", "parent"}


@dataclass(frozen=True, slots=True)
class Cand:
    id: str
    path: str
    qualname: str
    kind: str
    module: str
    # its dotted name, made once: resolution compares it ~2M times in a cold index of Django (a property made the
    # string each time: ~0.2 s of the single-threaded link phase)
    full: str = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "full", f"{self.module}.{self.qualname}" if self.kind != "module" else self.module)


@dataclass(frozen=True, slots=True)
class SrcInfo:
    id: str
    path: str
    qualname: str
    kind: str
    module: str
    language: str


Base = tuple[str, str, str]  # a resolved base class: (id, path, qualname)
MRO_DEPTH = 8  # levels of base classes searched for an inherited method


def ancestors(classes: list[str], level_bases: Callable[[list[str]], dict[str, list[Base]]]) -> Iterator[Base]:
    """The base classes of ``classes``, breadth first (each class's bases in the order it lists them), each once, up
    to ``MRO_DEPTH`` levels; ``level_bases`` answers one level at a time (class ids → their resolved bases)."""
    seen, level = set(classes), list(classes)
    for _ in range(MRO_DEPTH):
        nxt = []
        for found in level_bases(level).values():
            for base in found:
                if base[0] not in seen:
                    seen.add(base[0])
                    nxt.append(base[0])
                    yield base
        if not nxt:
            return
        level = nxt


class Lookup(Protocol):
    def by_name(self, name: str) -> list[Cand]: ...
    def module(self, dotted_or_path: str) -> Cand | None: ...
    def bases(self, class_id: str) -> list[Base]: ...


def ref_key(name: str) -> str:
    """The index key of a reference: its last identifier (what a definition would be named)."""
    return name.replace("::", ".").rsplit(".", 1)[-1].rsplit("/", 1)[-1]


def class_of(src: SrcInfo, kinds: Callable[[str], str | None]) -> str | None:
    """Qualname of the class enclosing src (for self.x lookups), if any."""
    parts = src.qualname.split(".")
    for i in range(len(parts) - 1, 0, -1):
        q = ".".join(parts[:i])
        if kinds(q) == "class":
            return q
    return None


class _Kinds:
    """The candidates of one name and reference kind, as the resolver asks for them (``Resolver._cands``)."""

    __slots__ = ("_owners", "by_path", "cands", "source")

    def __init__(self, source: list[Cand], inherits: bool):
        self.source = source
        self.cands = [c for c in source if c.kind == "class"] if inherits else [c for c in source if c.kind != "module"]
        self.by_path: dict[str, list[Cand]] = {}
        for c in self.cands:
            self.by_path.setdefault(c.path, []).append(c)
        self._owners: dict[str, list[Cand]] = {}

    def owners(self, dotted: str) -> list[Cand]:
        """Those whose name ends with ``dotted`` ("Parser.parse") on a dot boundary: not "DebugParser.parse"."""
        got = self._owners.get(dotted)
        if got is None:
            tail = "." + dotted
            got = self._owners[dotted] = [
                c for c in self.cands if c.qualname == dotted or c.qualname.endswith(tail) or c.full.endswith(tail)
            ]
        return got


class Resolver:
    def __init__(self, lookup: Lookup):
        self.lookup = lookup
        # per (name, inherits): the lookup's list it was made from, the candidates of that kind, them by path, and
        # the owners of each dotted tail asked; a common name ("get": hundreds of definitions in Django) is filtered
        # once, not at every reference to it
        self._kinds: dict[tuple[str, bool], _Kinds] = {}

    def _cands(self, name: str, inherits: bool) -> _Kinds:
        """The definitions a reference of this kind may name (classes for a base, anything but a module otherwise).
        Made again whenever the lookup answers with another list (it memoises its own)."""
        got = self.lookup.by_name(name)
        memo = self._kinds.get((name, inherits))
        if memo is None or memo.source is not got:
            memo = self._kinds[(name, inherits)] = _Kinds(got, inherits)
        return memo

    def resolve(
        self,
        ref: Ref,
        src: SrcInfo,
        imports: dict[str, str],
        enclosing_class: str | None,
        local_bases: dict[str, list[Base]] | None = None,
    ) -> str | None:
        """The capsule ``ref`` names, or None. ``local_bases``: the base classes of the file's own classes, resolved
        before its calls (a store does not hold them yet during an update)."""
        hit = self._resolve(ref, src, imports, enclosing_class)
        if hit is not None or ref.kind != "calls" or "." not in ref.name:
            return hit
        # a method the receiver's class inherits: self.validate() in Order(Base), or Lexer.tokenize on a DebugLexer
        parts = ref.name.split(".")
        if parts[0] in SELF_NAMES and len(parts) == 2:
            if not enclosing_class:
                return None
            owner = next(
                (
                    c.id
                    for c in self.lookup.by_name(enclosing_class.rsplit(".", 1)[-1])
                    if c.kind == "class" and c.path == src.path and c.qualname == enclosing_class
                ),
                None,
            )
        else:
            owner = self._resolve(
                Ref(ref.src, "inherits", ".".join(parts[:-1]), ref.line), src, imports, enclosing_class
            )
        return self.inherited(owner, parts[-1], local_bases) if owner else None

    def inherited(self, class_id: str, name: str, local_bases: dict[str, list[Base]] | None = None) -> str | None:
        """The method ``name`` of the nearest base class of ``class_id`` that defines it (breadth first, bases in the
        order the class lists them), or None."""
        methods = {(c.path, c.qualname): c.id for c in self.lookup.by_name(name) if c.kind == "method"}
        if not methods:
            return None
        local = local_bases or {}

        def level_bases(ids: list[str]) -> dict[str, list[Base]]:
            return {c: local[c] if c in local else self.lookup.bases(c) for c in ids}

        for _bid, path, qual in ancestors([class_id], level_bases):
            hit = methods.get((path, f"{qual}.{name}"))
            if hit:
                return hit
        return None

    def _resolve(self, ref: Ref, src: SrcInfo, imports: dict[str, str], enclosing_class: str | None) -> str | None:
        if ref.kind == "imports":
            return self._resolve_import(ref.name, src)
        name = ref.name
        parts = name.split(".")
        last = parts[-1]
        kinds = self._cands(last, ref.kind == "inherits")
        cands = kinds.cands
        if not cands:
            return None
        same_file = kinds.by_path.get(src.path, [])
        if len(parts) == 1:
            for c in same_file:  # nested definition, then module level of the same file
                if c.qualname == f"{src.qualname}.{last}":
                    return c.id
            for c in same_file:
                if c.qualname == last:
                    return c.id
            target = imports.get(last)
            if target:
                hit = self._match_target(target, cands)
                if hit:
                    return hit
            for alias, mod in imports.items():  # star imports
                if alias.startswith("*"):
                    hit = self._match_target(f"{mod}.{last}", cands)
                    if hit:
                        return hit
            top = [c for c in cands if c.kind in ("function", "class")]
            if len(top) == 1:
                return top[0].id
            if not top and len(cands) == 1:
                return cands[0].id
            return None
        head = parts[0]
        if head in SELF_NAMES and len(parts) == 2 and enclosing_class:
            for c in same_file:
                if c.qualname == f"{enclosing_class}.{last}":
                    return c.id
            methods = [c for c in cands if c.kind == "method"]
            return methods[0].id if len(methods) == 1 else None
        if head in imports:
            hit = self._match_target(".".join([imports[head]] + parts[1:]), cands)
            if hit:
                return hit
        owners = kinds.owners(".".join(parts[-2:]))
        if len(owners) == 1:
            return owners[0].id
        local = [c for c in owners if c.path == src.path]
        if len(local) == 1:
            return local[0].id
        return None

    @staticmethod
    def _match_target(target: str, cands: list[Cand]) -> str | None:
        exact = [c for c in cands if c.full == target]
        if exact:
            return exact[0].id
        pkg, _, name = target.rpartition(".")
        # re-exported from a package: defined somewhere below the imported package
        below = [c for c in cands if c.qualname == name and (c.module == pkg or c.module.startswith(pkg + "."))]
        if below:
            return min(below, key=lambda c: (len(c.module), c.module)).id
        tail = [
            c
            for c in cands
            if target.endswith("." + c.qualname) and c.module and target.startswith(c.module.split(".")[0])
        ]
        return tail[0].id if len(tail) == 1 else None

    def _resolve_import(self, target: str, src: SrcInfo) -> str | None:
        if src.language == "python":
            m = self.lookup.module(target)
            if m:
                return m.id
            head, _, name = target.rpartition(".")
            if head:
                hit = self._match_target(target, self.lookup.by_name(name))
                if hit:
                    return hit
                m = self.lookup.module(head)
                return m.id if m else None
            return None
        if target.startswith("."):
            base = posixpath.normpath(posixpath.join(posixpath.dirname(src.path), target))
            for ext in ("", ".ts", ".tsx", ".js", ".jsx", ".mjs", "/index.ts", "/index.js", ".rb", ".php", ".h"):
                m = self.lookup.module(base + ext)
                if m:
                    return m.id
            return None
        m = self.lookup.module(target)
        return m.id if m else None


class MemoryLookup:
    """Lookups over capsules held in memory (cold build, tests)."""

    def __init__(self, capsules: Iterable[Capsule], modules: dict[str, str]):
        self._by_name: dict[str, list[Cand]] = {}
        self._modules: dict[str, Cand] = {}
        self._bases: dict[str, list[Base]] = {}
        for c in capsules:
            cand = Cand(c.id, c.path, c.qualname, c.kind, modules.get(c.path, c.path))
            if c.kind == "module":
                for key in (c.qualname, c.path):
                    if key not in self._modules or cand.id < self._modules[key].id:
                        self._modules[key] = cand
            elif c.kind != "window":
                self._by_name.setdefault(c.name, []).append(cand)

        for lst in self._by_name.values():
            lst.sort(key=lambda c: c.id)

    def by_name(self, name: str) -> list[Cand]:
        return self._by_name.get(name, _NONE)  # the same list each time: the resolver memoises by it

    def module(self, key: str) -> Cand | None:
        return self._modules.get(key)

    def bases(self, class_id: str) -> list[Base]:
        return self._bases.get(class_id, [])

    def add_bases(self, bases: dict[str, list[Base]]) -> None:
        """Base classes resolved beforehand (``file_bases`` over every file), for inherited-method lookups."""
        self._bases.update(bases)


def contains_edges(capsules: Iterable[Capsule]) -> list[Edge]:
    return [Edge(c.parent, "contains", c.qualname, c.id) for c in capsules if c.parent]


def file_bases(
    resolver: Resolver, capsules: list[Capsule], refs: list[Ref], imports: dict[str, str], module: str
) -> dict[str, list[Base]]:
    """The base classes of one file's classes (class id → resolved bases, in the order they are listed)."""
    by_id = {c.id: c for c in capsules}
    out: dict[str, list[Base]] = {}
    for ref in refs:
        if ref.kind != "inherits":
            continue
        c = by_id[ref.src]
        src = SrcInfo(c.id, c.path, c.qualname, c.kind, module, c.language)
        dst = resolver.resolve(ref, src, imports, None)
        base = next((b for b in resolver.lookup.by_name(ref_key(ref.name)) if b.id == dst), None) if dst else None
        if base is not None:
            out.setdefault(ref.src, []).append((base.id, base.path, base.qualname))
    return out


def resolve_file(
    resolver: Resolver,
    capsules: list[Capsule],
    refs: list[Ref],
    imports: dict[str, str],
    module: str,
    bases: dict[str, list[Base]] | None = None,
) -> list[Edge]:
    """Edges for one parsed file: its references resolved where the rules allow. ``bases``: the base classes
    resolved beforehand for every file of the update (``file_bases``); else this file's own are resolved first."""
    by_id = {c.id: c for c in capsules}
    kinds = {c.qualname: c.kind for c in capsules}
    local = bases if bases is not None else file_bases(resolver, capsules, refs, imports, module)
    edges = []
    seen: dict[str, tuple[SrcInfo, str | None]] = {}  # a unit's references come together: its source made once
    for ref in refs:
        got = seen.get(ref.src)
        if got is None:
            c = by_id[ref.src]
            src = SrcInfo(c.id, c.path, c.qualname if c.kind != "module" else "", c.kind, module, c.language)
            got = seen[ref.src] = (src, class_of(src, kinds.get) if c.kind in ("method", "function") else None)
        src, enclosing = got
        edges.append(Edge(ref.src, ref.kind, ref.name, resolver.resolve(ref, src, imports, enclosing, local)))
    return edges
