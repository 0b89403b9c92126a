"""A key allowed whole repositories reads only those: the dense lane's query names them (an exact scan of their
vectors, not the store-wide HNSW graph filtered after), the vector states read are theirs alone, and a search
over many repositories reads all their vector states in one query (issue 41: 72 repositories, two queries each
per search, 3.8 s per hybrid search at 500k units)."""
from __future__ import annotations

import pytest
from tests.conftest import write_tree
from tests.test_store_contract import HashEmbedder

from repoctx import Index, Settings
from repoctx.store.base import Grant, Scope

A = {"lib/invoice.py": "def render_invoice(order):\n    \"\"\"Render an invoice for the order.\"\"\"\n"
                       "    return order\n",
     "lib/pay.py": "def charge_card(card, amount):\n    \"\"\"Charge the card.\"\"\"\n    return amount\n"}
B = {"lib/invoice.py": "def render_invoice_copy(order):\n    \"\"\"Render a copy of the invoice.\"\"\"\n"
                       "    return order\n",
     "lib/ship.py": "def ship_order(order):\n    \"\"\"Ship the order.\"\"\"\n    return order\n"}


@pytest.fixture
def pg_store(tmp_path, pg_url):
    """Two repositories with vectors in one PostgreSQL store, and a reader over the whole store."""
    from repoctx.store.postgres import migrate

    migrate(pg_url)
    settings = Settings(database_url=pg_url, embedder="none", vector_cache=tmp_path / "vec.sqlite")
    emb = HashEmbedder()
    for name, files in (("a", A), ("b", B)):
        Index(write_tree(tmp_path / name, files), settings, embedder=emb, name=name).update()
    return Index(settings=settings, repos=(), embedder=emb)


class Spy:
    """Records the SQL a store sends (and its arguments), and which repositories' vector states it is asked."""

    def __init__(self, store):
        self.sql: list[tuple[str, list]] = []
        self.states: list[tuple[str, ...]] = []
        q, many = store._q, store.vector_states

        def _q(sql, args=()):
            self.sql.append((sql, list(args)))
            return q(sql, args)

        def vector_states(repos, model):
            self.states.append(tuple(repos))
            return many(repos, model)

        store._q, store.vector_states = _q, vector_states

    def dense_queries(self) -> list[tuple[str, list]]:
        return [(s, a) for s, a in self.sql if "FROM repoctx_vectors v" in s]


def test_the_dense_lane_of_a_key_allowed_one_repository_searches_only_it(pg_store):
    spy = Spy(pg_store.store)
    key = Scope(grants=(Grant("a"),))
    r = pg_store.retrieve("render the invoice", k=5, mode="standard", scope=key)
    assert r.hits and {h.capsule.repo for h in r.hits} == {"a"}
    assert any("dense" in h.why for h in r.hits)  # the dense lane ran
    dense = spy.dense_queries()
    assert dense
    for sql, args in dense:
        assert "c.repo IN (%s)" in sql and "a" in args and "b" not in args  # the repository is in the query
        assert "::vector(384))" not in sql  # an exact scan of its vectors, not the shared HNSW graph
        assert "c.path" not in sql and sql.count("c.repo") == 1  # no per-row grant test: it grants the whole repository
    assert spy.states and all(s == ("a",) for s in spy.states)  # only its vector state is read


def test_whole_repository_grants_become_the_scope_s_repositories(pg_store):
    ix = pg_store
    assert ix.scope(Scope(grants=(Grant("b"), Grant("a")))) == Scope(repos=("a", "b"))
    # a request naming one of them narrows to it; one naming only others admits nothing
    assert ix.scope(Scope(repos=("b",), grants=(Grant("a"), Grant("b")))) == Scope(repos=("b",))
    nothing = ix.scope(Scope(repos=("b",), grants=(Grant("a"),)))
    assert nothing.grants is not None and ix.search("render invoice", k=5, scope=nothing) == []
    # path rules stay grants (they are tested per row), bounded to the repositories they name
    ruled = ix.scope(Scope(grants=(Grant("a", include=("lib/pay.py",)),)))
    assert ruled.repos == ("a",) and ruled.grants is not None
    assert {h.capsule.path for h in ix.search("render invoice charge card", k=5, scope=ruled)} == {"lib/pay.py"}
    # a grant of every repository is no bound
    assert ix.scope(Scope(grants=(Grant("*"),))).grants is not None


def test_a_search_over_every_repository_reads_their_vector_states_in_one_query(pg_store):
    spy = Spy(pg_store.store)
    r1 = pg_store.retrieve("render the invoice", k=5, mode="standard")
    r2 = pg_store.retrieve("ship the order", k=5, mode="standard")
    assert {h.capsule.repo for h in r1.hits + r2.hits} == {"a", "b"}
    assert spy.states == [("a", "b")]  # once for both searches (kept VECTOR_STATE_SECONDS), every repository at once
    # and what it reads is what each repository's own state says
    states = pg_store.store.vector_states(["a", "b", "missing"], HashEmbedder.model_id)
    for repo in ("a", "b"):
        assert states[repo] == pg_store.store.vector_state(repo, HashEmbedder.model_id)
        assert states[repo].current and states[repo].count == states[repo].total > 0
    assert states["missing"].count == states["missing"].total == 0 and not states["missing"].current
