"""Copilot sessions: one suite run on both backends (SQLite file, real PostgreSQL from ``pg_url``),
through the real Strands agent loop and ``RepositorySessionManager``."""
from __future__ import annotations

import sqlite3
import time

import pytest
from strands import tool
from strands.types.exceptions import SessionException
from strands.types.session import Session, SessionType

from repoctx.copilot.agent import build_agent, ask
from repoctx.copilot.scripted import ScriptedToolModel
from repoctx.copilot.sessions import (
    PostgresSessionRepository,
    SessionStoreNotMigrated,
    SQLiteSessionRepository,
    list_sessions,
    migrate,
    open_session_repository,
    prune_sessions,
)
from tests.conftest import session_repositories


@tool
def search_code(query: str) -> dict:
    """Search the repository."""
    return {"hits": [{"citation": "pkg/db.py:3-9 :: pkg.db.connect"}]}


@pytest.fixture(params=["sqlite", "postgres"])
def target(request, tmp_path):
    if request.param == "sqlite":
        return str(tmp_path / "ix" / "sessions.sqlite")
    return request.getfixturevalue("pg_url")


@pytest.fixture
def repos(target):
    """Opens repositories for principals on the migrated target; closes them afterwards."""
    migrate(target)
    with session_repositories(target) as open_for:
        yield open_for


def _copilot(repo, session_id, principal, replies):
    model = ScriptedToolModel(replies)
    return build_agent(None, session_id, principal, model=model, tools=[search_code], session_repository=repo), model


def _texts(messages) -> str:
    return " ".join(b.get("text", "") for m in messages for b in m["content"])


def test_unmigrated_store_is_a_clear_error(target, tmp_path):
    with pytest.raises(SessionStoreNotMigrated, match="repoctx db migrate"):
        open_session_repository(target, "local")
    if not target.startswith("postgres"):
        empty = tmp_path / "empty.sqlite"
        sqlite3.connect(empty).execute("CREATE TABLE other (x)").connection.close()
        with pytest.raises(SessionStoreNotMigrated, match="repoctx db migrate"):
            SQLiteSessionRepository(empty)
    assert migrate(target) == 1
    assert migrate(target) == 1  # idempotent
    repo = open_session_repository(target, "local")
    assert isinstance(repo, PostgresSessionRepository if target.startswith("postgres") else SQLiteSessionRepository)
    repo.close()


def test_conversation_resumes_in_a_second_agent(repos):
    first, _ = _copilot(repos("alice"), "conv-1", "alice",
                        [{"tool": "search_code", "input": {"query": "connect"}},
                         "It is pkg/db.py:3-9 :: pkg.db.connect."])
    r1 = ask(first, "Where do we connect to the database?")
    assert r1.citations and r1.citations[0]["verified"]

    # a new repository object (new connection / pool), a new agent: the conversation comes back
    second, model = _copilot(repos("alice"), "conv-1", "alice", ["As I said: pkg/db.py:3-9 :: pkg.db.connect."])
    assert len(second.agent.messages) == len(first.agent.messages) == 4
    r2 = ask(second, "Say that again?")
    seen = _texts(model.calls[0])
    assert "Where do we connect to the database?" in seen and "It is pkg/db.py:3-9" in seen
    assert r2.citations[0]["verified"]  # the tool result from the first agent's turn counts

    rows = list_sessions(repos("alice"))
    assert [(r["id"], r["principal"], r["messages"]) for r in rows] == [("conv-1", "alice", 6)]
    assert rows[0]["created"] <= rows[0]["updated"]


def test_a_foreign_principal_cannot_read_list_or_resume(repos, target):
    alice, _ = _copilot(repos("alice"), "conv-1", "alice", ["secret answer"])
    ask(alice, "alice's question")

    bob = repos("bob")
    assert bob.read_session("conv-1") is None
    assert bob.read_agent("conv-1", "copilot") is None
    assert bob.read_message("conv-1", "copilot", 0) is None
    assert bob.list_messages("conv-1", "copilot") == []
    assert bob.list_sessions() == []
    assert list_sessions(target, "bob") == []
    assert list_sessions(bob) == []
    with pytest.raises(SessionException):  # cannot write into alice's session either
        bob.create_message("conv-1", "copilot", alice.session_repository.read_message("conv-1", "copilot", 0))

    # "resuming" alice's id as bob is a new, empty conversation of bob's own
    bob_copilot, model = _copilot(bob, "conv-1", "bob", ["hello bob"])
    assert bob_copilot.agent.messages == []
    ask(bob_copilot, "bob's question")
    assert "alice" not in _texts(model.calls[0])

    assert [r["messages"] for r in list_sessions(target, "alice")] == [2]
    assert {(r["principal"], r["messages"]) for r in list_sessions(target)} == {("alice", 2), ("bob", 2)}
    with pytest.raises(ValueError, match="principal"):
        build_agent(None, "conv-1", "mallory", model=ScriptedToolModel(["x"]), tools=[search_code],
                    session_repository=bob)


@pytest.mark.parametrize("bad", ["", "../etc/passwd", "a b", "x" * 129, "semi;colon", "ünï"])
def test_invalid_session_ids_are_rejected(repos, bad):
    repo = repos("local")
    with pytest.raises(ValueError, match="invalid session id"):
        repo.read_session(bad)
    with pytest.raises(ValueError, match="invalid session id"):
        repo.create_session(Session(session_id=bad, session_type=SessionType.AGENT))
    with pytest.raises(ValueError, match="invalid session id"):
        build_agent(None, bad, model=ScriptedToolModel(["x"]), tools=[search_code], session_repository=repo)


def test_duplicate_session_and_missing_rows(repos):
    repo = repos("local")
    repo.create_session(Session(session_id="s1", session_type=SessionType.AGENT))
    with pytest.raises(SessionException):
        repo.create_session(Session(session_id="s1", session_type=SessionType.AGENT))
    assert repo.read_session("nope") is None
    assert repo.read_agent("s1", "copilot") is None


def test_prune_removes_old_sessions(repos, target):
    alice, bob = repos("alice"), repos("bob")
    for repo, sid in ((alice, "old-1"), (bob, "old-2")):
        repo.create_session(Session(session_id=sid, session_type=SessionType.AGENT))
    time.sleep(0.3)
    mid = time.time()
    time.sleep(0.3)
    c, _ = _copilot(alice, "fresh", "alice", ["hi"])
    ask(c, "hello")

    assert prune_sessions(target, 3600) == 0
    # as if an hour had passed since `mid`: the two old sessions go, the fresh one stays
    assert prune_sessions(target, 3600, now=mid + 3600) == 2
    assert [r["id"] for r in list_sessions(target)] == ["fresh"]
    assert alice.list_messages("fresh", "copilot") and alice.read_session("old-1") is None
    # a principal prunes only its own
    bob.create_session(Session(session_id="b1", session_type=SessionType.AGENT))
    assert prune_sessions(alice, 0, now=time.time() + 10) == 1
    assert [r["id"] for r in list_sessions(target)] == ["b1"]
