"""BM25 and units kept in memory by long-lived processes (store/memory_bm25.py) answer exactly as each store's
own queries do (SQLite FTS5, PostgreSQL postings), under every scope, and never from a stale index."""
from __future__ import annotations

import numpy as np
import pytest

from repoctx import Index, Settings
from repoctx.index import open_store
from repoctx.store.base import Grant, Scope
from repoctx.store.memory_bm25 import MemoryBM25
from repoctx.store.postings import pack
from tests.conftest import write_tree
from tests.test_store_contract import SHOP

MORE = {
    "shop/payments.py": ("def charge_card(card, amount):\n    \"\"\"Charge the card for an order's total amount.\"\"\"\n"
                         "    return gateway_charge(card, amount)\n\n"
                         "def refund_order(order):\n    \"\"\"Refund a checked out order to its card.\"\"\"\n"
                         "    return charge_card(order.card, -order.total())\n\n"
                         "def gateway_charge(card, amount):\n    return {'card': card, 'amount': amount}\n"),
    "tests/test_checkout.py": ("from shop.checkout import checkout\n\n"
                               "def test_checkout_saves_order():\n    assert checkout([]) is not None\n"),
}

QUERIES = [["checkout"], ["order", "card"], ["vault", "key", "order"], ["charge", "card", "amount", "total"],
           ["save", "persist"], ["refund"], ["nothing_matches_this"], ["Order", "CHECKOUT"], ["lines", "sum_lines"]]
SCOPES = [Scope(), Scope(exclude=("secret/*",)), Scope(include=("shop/*",)),
          Scope(grants=(Grant("*", exclude=("secret/*", "tests/*")),)), Scope(grants=())]


@pytest.fixture(params=["sqlite", "postgres"])
def stores(request, tmp_path):
    """The index as the store answers it, and a second store over the same data with memory reads on."""
    root = write_tree(tmp_path / "shop", {**SHOP, **MORE})
    if request.param == "sqlite":
        settings = Settings(index_dir=tmp_path / "ix", embedder="none", vector_cache=tmp_path / "vec.sqlite")
    else:
        from repoctx.store.postgres import migrate
        from tests.pg import fresh_database

        url = fresh_database()
        migrate(url)
        settings = Settings(database_url=url, embedder="none", vector_cache=tmp_path / "vec.sqlite")
    ix = Index(root, settings)
    ix.update()
    memory = open_store(settings, root, create=False, long_lived=True)
    assert memory.memory_enabled and memory.warm_lexical(wait=True)
    yield ix, memory
    memory.close()
    ix.close()


def ranked(pairs):
    return sorted(((cid, round(s, 9)) for cid, s in pairs), key=lambda p: (-p[1], p[0]))


def test_same_ranking_as_fts5_under_every_scope(stores):
    ix, memory = stores
    fts = ix.store
    for base in SCOPES:
        scope = base.with_repos((ix.repo,)) if not base.grants else base
        for terms in QUERIES:
            for k in (1, 3, 50):
                want, got = fts.lexical(terms, k, scope), memory.lexical(terms, k, scope)
                assert [s for _, s in ranked(got)] == [s for _, s in ranked(want)], (scope, terms, k)
                if k == 50:  # everything that matches: the same units with the same scores
                    assert ranked(got) == ranked(want), (scope, terms)
                for cid, _ in got:
                    c = fts.capsules([cid])[0]
                    assert scope.allows(c.repo, c.path), (scope, cid)


def test_an_edit_is_never_answered_from_the_old_index(stores, tmp_path):
    ix, memory = stores
    scope = Scope(repos=(ix.repo,))
    assert memory.lexical(["zanzibar"], 5, scope) == []
    (tmp_path / "shop" / "shop" / "payments.py").write_text(
        "def zanzibar_route(order):\n    \"\"\"Ship an order to zanzibar.\"\"\"\n    return order\n")
    ix.update()
    got = memory.lexical(["zanzibar"], 5, scope)  # the old in-memory index no longer matches: the store answers
    assert [cid.split("#")[-1] for cid, _ in got] == ["zanzibar_route"]
    assert memory.lexical(["refund"], 5, scope) == []
    assert memory.warm_lexical(wait=True)  # rebuilt for the new content: the same answers
    assert ranked(memory.lexical(["zanzibar", "order"], 10, scope)) == ranked(ix.store.lexical(["zanzibar", "order"],
                                                                                                10, scope))


def test_units_and_frequencies_follow_the_scope(stores):
    ix, memory = stores
    everything = Scope(repos=(ix.repo,))
    ids = [c.id for c in ix.store.all_capsules(everything)]
    assert {c.id for c in memory.capsules(ids, everything)} == set(ids)
    for base in SCOPES:
        scope = base.with_repos((ix.repo,)) if not base.grants else base
        want = {c.id for c in ix.store.capsules(ids, scope)}
        assert {c.id for c in memory.capsules(ids, scope)} == want, scope
        for read in ("edges_from", "edges_to"):
            want_edges = sorted((e.src, e.kind, e.dst_name, e.dst or "") for e in getattr(ix.store, read)(ids, ("calls", "inherits"), scope))
            assert sorted((e.src, e.kind, e.dst_name, e.dst or "") for e in getattr(memory, read)(ids, ("calls", "inherits"), scope)) == want_edges
            assert want_edges or not want, (read, scope)
    terms = ["order", "checkout", "vault", "absent_term"]
    assert memory.doc_freqs(terms, everything) == ix.store.doc_freqs(terms, everything)


def test_a_whole_search_answers_as_the_store_does(stores):
    """hybrid.search over the memory reads (one content key per search) = over the store's own queries; a
    ``limit`` cuts the same ranking and ``stats`` still counts every candidate."""
    from repoctx.retrieve.hybrid import SearchOptions, search

    ix, memory = stores
    opts = SearchOptions(dense=False)
    for base in SCOPES:
        scope = base.with_repos((ix.repo,)) if not base.grants else base
        for q in ("charge the card for an order", "refund_order", "where is checkout saved", "vault key"):
            want = search(ix.store, q, opts, None, scope)
            stats: dict = {}
            got = search(memory, q, opts, None, scope, limit=3, stats=stats)
            assert [(h.capsule.id, round(h.score, 9), h.why) for h in got] == \
                [(h.capsule.id, round(h.score, 9), h.why) for h in want[:3]], (scope, q)
            assert stats["candidates"] == len(want)


def test_a_unit_the_store_lacks_is_remembered_as_absent_until_the_content_changes(stores, tmp_path):
    ix, memory = stores
    scope = Scope(repos=(ix.repo,))
    absent = f"{ix.repo}:shop/payments.py#zanzibar_route"
    assert memory.capsules([absent], scope) == [] and memory.capsules([absent], scope) == []
    (tmp_path / "shop" / "shop" / "payments.py").write_text("def zanzibar_route(order):\n    return order\n")
    ix.update()
    assert [c.id for c in memory.capsules([absent], scope)] == [absent]


def test_terms_fts5_would_split_go_to_fts5():
    assert MemoryBM25.answers(["order", "sum_lines", "x2"])
    assert not MemoryBM25.answers(["a.b"]) and not MemoryBM25.answers(["café"])


def test_long_lived_processes_turn_it_on(tmp_path):
    root = write_tree(tmp_path / "r", {"a.py": "def f():\n    return 1\n"})
    settings = Settings(index_dir=tmp_path / "ix", embedder="none", vector_cache=tmp_path / "vec.sqlite")
    Index(root, settings).update()
    assert open_store(settings, root, create=False).memory_enabled is False  # one-shot
    assert open_store(settings, root, create=False, long_lived=True).memory_enabled
    off = Settings(index_dir=tmp_path / "ix", embedder="none", memory_lexical=False)
    assert not open_store(off, root, create=False, long_lived=True).memory_enabled


def test_a_scope_of_some_repositories_reads_its_own_index_in_memory(tmp_path):
    """PostgreSQL scores a scope naming some repositories with their own statistics: the whole-store index cannot
    answer it, so each such scope gets an index of its repositories alone (built on first use, in the background),
    which answers exactly as the SQL does, stays valid while another repository changes, and is never read stale."""
    from repoctx.store.postgres import migrate
    from tests.pg import fresh_database

    url = fresh_database()
    migrate(url)
    settings = Settings(database_url=url, embedder="none", vector_cache=tmp_path / "vec.sqlite")
    shop = Index(write_tree(tmp_path / "shop", {**SHOP, **MORE}), settings, name="shop")
    shop.update()
    other = Index(write_tree(tmp_path / "other", {"pay/card.py": (
        "def charge_card(card):\n    \"\"\"Charge a card: the order total.\"\"\"\n    return card\n\n"
        "def refund(order):\n    return order\n")}), settings, name="other")
    other.update()
    memory = open_store(settings, tmp_path / "shop", create=False, long_lived=True)
    sql = shop.store
    assert memory.warm_lexical(wait=True)
    one = Scope(repos=("shop",))

    def built(repos):
        cache = memory._scoped.get(repos)
        return cache is not None and cache.current(memory._scoped_content_key(repos), wait=True) is not None

    memory.lexical(["order"], 5, one)  # the first search asks for the index; the store answers meanwhile
    assert built(("shop",)) and memory.scoped_building() == 0  # /health's lexical_scopes_building
    scoped = memory._scoped[("shop",)]._index
    for base in SCOPES:
        scope = base.with_repos(("shop",)) if not base.grants else base.with_repos(("shop",))
        for terms in QUERIES:
            want, got = sql.lexical(terms, 50, scope), memory.lexical(terms, 50, scope)
            assert ranked(got) == ranked(want), (scope, terms)
        assert memory.doc_freqs(["order", "card", "refund"], scope) == sql.doc_freqs(["order", "card", "refund"],
                                                                                       scope)
    assert memory._scoped[("shop",)]._index is scoped  # every read above came from the one scoped index

    # a write to the other repository: the whole-store key moves, shop's own does not: the same index answers
    (tmp_path / "other" / "pay" / "card.py").write_text("def charge_card(card):\n    return card\n")
    other.update()
    assert ranked(memory.lexical(["order", "card"], 50, one)) == ranked(sql.lexical(["order", "card"], 50, one))
    assert memory._scoped[("shop",)]._index is scoped

    # a write to shop: never answered from the old index; a new one is built for the new content
    (tmp_path / "shop" / "shop" / "payments.py").write_text(
        "def zanzibar_route(order):\n    \"\"\"Ship an order to zanzibar.\"\"\"\n    return order\n")
    shop.update()
    assert [cid.split("#")[-1] for cid, _ in memory.lexical(["zanzibar"], 5, one)] == ["zanzibar_route"]
    assert built(("shop",)) and memory._scoped[("shop",)]._index is not scoped
    assert ranked(memory.lexical(["zanzibar", "order", "refund"], 50, one)) == ranked(
        sql.lexical(["zanzibar", "order", "refund"], 50, one))
    memory.close()
    other.close()
    shop.close()


def test_postings_of_a_unit_no_longer_listed_are_never_returned():
    units = [(7, "r:a.py#f"), (3, "r:a.py#g"), (9, "r:b.py#h")]
    # (term, rowid, weighted count); rowid 5 is a posting of a unit no longer listed
    postings = {"card": ([3, 9], [10, 2]), "order": ([3, 5, 7], [1, 1, 6])}

    def rows(terms: dict) -> list[tuple[str, int, bytes]]:  # as PostgreSQL keeps them: each posting with its length
        return [(t, len(r), pack(np.asarray(r), np.asarray(w), np.full(len(r), 3))) for t, (r, w) in terms.items()]

    listed = MemoryBM25.from_packed("k", rows(postings), units, 4, 3.0, 0.0)
    assert [cid for cid, _ in listed.top(["order"], 5)] == ["r:a.py#f", "r:a.py#g"]
    assert listed.doc_freqs(["order", "card", "x"]) == {"order": 3, "card": 2}
    empty = MemoryBM25.from_packed("k", rows({"card": ([3], [1])}), [], 4, 3.0, 0.0)
    assert empty.top(["card"], 5) == [] and empty.size == 0  # units gone meanwhile: nothing returned


def test_a_refused_build_leaves_the_store_answering(tmp_path, monkeypatch):
    """A build that meets postings it cannot read raises: the store's own queries keep answering, the same
    connection reads on (its read transaction ended), and a later build succeeds."""
    root = write_tree(tmp_path / "shop", {**SHOP, **MORE})
    settings = Settings(index_dir=tmp_path / "ix", embedder="none", vector_cache=tmp_path / "vec.sqlite")
    ix = Index(root, settings)
    ix.update()
    from repoctx.store.postings import CorruptPostings

    real = MemoryBM25._dense

    def refuse(all_rowids, post_rowids):
        raise CorruptPostings("postings end inside a varint")

    monkeypatch.setattr(MemoryBM25, "_dense", staticmethod(refuse))
    memory = open_store(settings, root, create=False, long_lived=True)
    try:
        assert not memory.warm_lexical(wait=True) and "CorruptPostings" in (memory._bm25.error or "")
        scope = Scope(repos=(ix.repo,))
        want = ranked(ix.store.lexical(["order", "card"], 10, scope))
        assert ranked(memory.lexical(["order", "card"], 10, scope)) == want
        with pytest.raises(ValueError):  # on this thread's connection: it ends its read transaction
            memory._build_memory_bm25()
        assert memory.db.in_transaction is False
        assert ranked(memory.lexical(["refund"], 5, scope)) == ranked(ix.store.lexical(["refund"], 5, scope))
        monkeypatch.setattr(MemoryBM25, "_dense", real)
        memory._bm25 = type(memory._bm25)(memory._build_memory_bm25)  # as a new content key would start over
        assert memory.warm_lexical(wait=True)
        assert ranked(memory.lexical(["order", "card"], 10, scope)) == want
    finally:
        memory.close()
        ix.close()


def test_a_repository_written_meanwhile_never_passes_a_scope_that_does_not_name_it(tmp_path):
    """SQLite lets a scope naming every repository the file holds read without its WHERE clause. The repositories
    held are read in the snapshot of the read they decide (counts, lexical) or with the content key a memory read
    uses: another repository's files committed meanwhile (by an index job of the same service) never slip in. The
    service's status counted both repositories' files when one was being indexed (a CI run: 6 files, not 3)."""
    import sqlite3

    settings = Settings(index_dir=tmp_path / "ix", embedder="none", vector_cache=tmp_path / "vec.sqlite")
    web = write_tree(tmp_path / "web", {f"pkg/{n}.py": f"def {n}_total(order):\n    return order\n" for n in "abc"})
    Index(web, settings, name="web").update()
    store = open_store(settings, web, create=False, long_lived=True)
    one = Scope(repos=("web",))
    assert store.counts(one)["files"] == 3 and store.warm_lexical(wait=True)
    assert store._memory_covers(one, store._key()) == (True, False)  # the file holds web alone: no mask

    # a check, then another repository's files committed before the counts are read: none of them is counted
    writer = sqlite3.connect(tmp_path / "ix" / "index.sqlite")
    admits = store._admits_whole_file

    def then_a_write(scope, key=None):
        got = admits(scope, key)
        writer.execute("INSERT INTO files(repo, path) VALUES ('web-dev', 'pkg/a.py'), ('web-dev', 'pkg/b.py')")
        writer.commit()
        return got

    store._admits_whole_file = then_a_write
    assert store.counts(one)["files"] == 3
    del store._admits_whole_file
    # their files written, their units and generation not yet: the content key moves, web's reads are masked
    assert store.counts(one)["files"] == 3 and store.counts()["files"] == 5
    assert store._memory_covers(one, store._key()) == (True, True)
    assert store._memory_covers(Scope(repos=("web", "web-dev")), store._key()) == (True, False)
    writer.close()
    store.close()
