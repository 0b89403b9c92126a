"""Where each registered repository comes from (``repoctx_repo_sources``, one row per entry), and what of its
branch has been seen and indexed.

An entry is a path on the indexing machines (``kind='path'``) or a git URL and branch (``kind='git'``; several
branches of one URL are several entries). The row keeps the URL as given (no credential ever: ``git.py`` refuses a
URL with one), its ``url_key`` (what webhooks are matched on), the *name* of the credential it uses, and the
commits: the branch head last seen (by a fetch, a poll or a push webhook) and when, how many commits the index
was behind at the last fetch, and the commit last indexed."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from repoctx.service.db import ServiceDB

__all__ = ["RepoSource", "Sources"]

_COLS = (
    "name, kind, url, url_key, branch, credential, path, created, updated, head_commit, head_seen, behind, "
    "fetched_at, indexed_commit, indexed_at, last_error"
)


@dataclass
class RepoSource:
    name: str
    kind: str  # path | git
    url: str | None = None
    url_key: str | None = None
    branch: str | None = None
    credential: str | None = None
    path: str | None = None
    created: float | None = None
    updated: float | None = None
    head_commit: str | None = None  # the branch head last seen
    head_seen: float | None = None  # when that head was first seen
    behind: int | None = None  # commits between the indexed commit and the head, at the last fetch
    fetched_at: float | None = None
    indexed_commit: str | None = None
    indexed_at: float | None = None
    last_error: str | None = None

    @classmethod
    def from_row(cls, r) -> RepoSource:
        return cls(*r)

    def lag(self, now: float | None = None) -> dict[str, Any]:
        """How far the index trails the branch: ``behind`` (bool), ``commits`` (None when unknown: a head announced
        by a webhook that no worker has fetched yet) and ``seconds`` since the newer head was first seen."""
        now = time.time() if now is None else now
        if not self.head_commit:
            return {"behind": None, "commits": None, "seconds": None}
        if self.head_commit == self.indexed_commit:
            return {"behind": False, "commits": 0, "seconds": 0.0}
        commits = self.behind if self.fetched_at and self.head_seen and self.fetched_at >= self.head_seen else None
        return {
            "behind": True,
            "commits": commits if commits else None,
            "seconds": round(max(0.0, now - (self.head_seen or now)), 1),
        }

    def to_dict(self, admin: bool) -> dict[str, Any]:
        """The source as an API answer: kind and branch for every key that sees the repository; the URL (which has
        no credential), the credential's name and the path for administrators (like the root of a path entry)."""
        out: dict[str, Any] = {"kind": self.kind}
        if self.kind == "git":
            out["branch"] = self.branch
            if admin:
                out.update(url=self.url, credential=self.credential)
        elif admin:
            out["path"] = self.path
        return out

    def commits(self) -> dict[str, Any]:
        return {
            "indexed": self.indexed_commit,
            "indexed_at": self.indexed_at,
            "head": self.head_commit,
            "head_seen_at": self.head_seen,
            "fetched_at": self.fetched_at,
            "lag": self.lag(),
        }


class Sources:
    def __init__(self, db: ServiceDB):
        self.db = db

    def get(self, name: str) -> RepoSource | None:
        rows = self.db.q(f"SELECT {_COLS} FROM repoctx_repo_sources WHERE name=?", (name,))
        return RepoSource.from_row(rows[0]) if rows else None

    def all(self, kind: str | None = None) -> list[RepoSource]:
        if kind:
            rows = self.db.q(f"SELECT {_COLS} FROM repoctx_repo_sources WHERE kind=? ORDER BY name", (kind,))
        else:
            rows = self.db.q(f"SELECT {_COLS} FROM repoctx_repo_sources ORDER BY name")
        return [RepoSource.from_row(r) for r in rows]

    def by_url_keys(self, keys: list[str]) -> list[RepoSource]:
        keys = sorted({k for k in keys if k})
        if not keys:
            return []
        marks = ", ".join("?" for _ in keys)
        rows = self.db.q(
            f"SELECT {_COLS} FROM repoctx_repo_sources WHERE kind='git' AND url_key IN ({marks}) ORDER BY name", keys
        )
        return [RepoSource.from_row(r) for r in rows]

    def put_path(self, name: str, path: str) -> RepoSource:
        self.db.q(
            "INSERT INTO repoctx_repo_sources(name, kind, path, created, updated) VALUES(?, 'path', ?, {now}, "
            "{now}) ON CONFLICT (name) DO UPDATE SET kind='path', path=excluded.path, url=NULL, url_key=NULL, "
            "branch=NULL, credential=NULL, updated={now}",
            (name, path),
        )
        return self._written(name)

    def put_git(self, name: str, url: str, url_key: str, branch: str, credential: str | None) -> RepoSource:
        """Register (or re-register) a git entry; a new URL or branch forgets what was seen of the old one."""
        self.db.q(
            "INSERT INTO repoctx_repo_sources(name, kind, url, url_key, branch, credential, created, updated) "
            "VALUES(?, 'git', ?, ?, ?, ?, {now}, {now}) ON CONFLICT (name) DO UPDATE SET kind='git', "
            "url=excluded.url, url_key=excluded.url_key, branch=excluded.branch, "
            "credential=excluded.credential, path=NULL, updated={now}",
            (name, url, url_key, branch, credential),
        )
        return self._written(name)

    def _written(self, name: str) -> RepoSource:
        """The entry just written (an error if another request removed it in between)."""
        got = self.get(name)
        if got is None:
            raise ValueError(f"repository source {name!r} was removed while it was being written")
        return got

    def now(self) -> float:
        """The database's clock (the one every time in the table is read from)."""
        return float(self.db.q("SELECT {now}")[0][0])

    def saw_head(
        self, name: str, commit: str, *, fetched: bool, behind: int | None = None, since: float | None = None
    ) -> None:
        """A head of the entry's branch was seen: by a fetch (``fetched``, with ``behind`` and, in ``since``, the
        database time the fetch began: a different head a webhook announced after that is newer and is kept) or
        announced by a webhook or a poll."""
        lock = " FOR UPDATE" if self.db.backend == "postgres" else ""
        with self.db.transaction() as run:
            rows = run(f"SELECT head_commit, head_seen, {{now}} FROM repoctx_repo_sources WHERE name=?{lock}", (name,))
            if not rows:
                return
            head, seen, now = rows[0]
            if fetched:
                if head and head != commit and seen is not None and since is not None and seen > since:
                    return
                first_seen = seen if head == commit and seen is not None else now
                run(
                    "UPDATE repoctx_repo_sources SET head_commit=?, head_seen=?, behind=?, fetched_at=?, "
                    "last_error=NULL WHERE name=?",
                    (commit, first_seen, behind, now, name),
                )
            elif head != commit:
                run("UPDATE repoctx_repo_sources SET head_commit=?, head_seen=? WHERE name=?", (commit, now, name))

    def indexed(self, name: str, commit: str) -> None:
        self.db.q(
            "UPDATE repoctx_repo_sources SET indexed_commit = ?, indexed_at = {now}, last_error = NULL WHERE name = ?",
            (commit, name),
        )

    def failed(self, name: str, reason: str) -> None:
        self.db.q("UPDATE repoctx_repo_sources SET last_error = ? WHERE name = ?", (reason[:300], name))

    def remove(self, name: str) -> None:
        self.db.q("DELETE FROM repoctx_repo_sources WHERE name = ?", (name,))
