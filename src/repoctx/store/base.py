"""The Store protocol: what the indexer writes and retrieval reads. Every read takes a Scope,
applied inside the query (WHERE clause), never after the fact."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Protocol

from repoctx.types import Capsule, Edge


@dataclass(frozen=True)
class Scope:
    """Which repositories and paths a caller may see. Empty means everything."""

    repos: tuple[str, ...] = ()
    include: tuple[str, ...] = ()  # GLOB patterns on repository paths
    exclude: tuple[str, ...] = ()

    def sql(self, alias: str = "c") -> tuple[str, list]:
        clauses, args = [], []
        if self.repos:
            clauses.append(f"{alias}.repo IN ({','.join('?' * len(self.repos))})")
            args += list(self.repos)
        if self.include:
            clauses.append("(" + " OR ".join(f"{alias}.path GLOB ?" for _ in self.include) + ")")
            args += list(self.include)
        for pat in self.exclude:
            clauses.append(f"{alias}.path NOT GLOB ?")
            args.append(pat)
        return (" AND ".join(clauses) or "1"), args


EVERYTHING = Scope()


@dataclass(slots=True)
class FileRecord:
    path: str
    language: str
    size: int
    mtime_ns: int
    hash: str
    module: str
    imports: dict[str, str]
    method: str
    note: str = ""


class Store(Protocol):
    # --- writes (indexer only), inside one transaction ---
    def begin(self) -> None: ...
    def commit(self) -> None: ...
    def rollback(self) -> None: ...
    def put_file(self, rec: FileRecord, capsules: list[Capsule]) -> None: ...
    def delete_file(self, path: str) -> None: ...
    def put_edges(self, edges: Iterable[Edge], src_path: str) -> None: ...
    def set_meta(self, key: str, value: str) -> None: ...
    # --- reads ---
    def meta(self, key: str) -> str | None: ...
    def files(self) -> dict[str, FileRecord]: ...
    def capsules(self, ids: list[str], scope: Scope = EVERYTHING) -> list[Capsule]: ...
    def file_capsules(self, path: str, scope: Scope = EVERYTHING) -> list[Capsule]: ...
    def lexical(self, terms: list[str], k: int, scope: Scope = EVERYTHING) -> list[tuple[str, float]]: ...
    def by_names(self, names: list[str], scope: Scope = EVERYTHING) -> list[Capsule]: ...
    def name_counts(self, names: list[str]) -> dict[str, int]: ...
    def by_path_suffix(self, fragments: list[str], scope: Scope = EVERYTHING) -> list[str]: ...
    def edges_from(self, ids: list[str], kinds: tuple[str, ...] = ()) -> list[Edge]: ...
    def edges_to(self, ids: list[str], kinds: tuple[str, ...] = ()) -> list[Edge]: ...
    def close(self) -> None: ...
