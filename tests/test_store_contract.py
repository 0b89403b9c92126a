"""One store contract suite, run unchanged on SQLite and on a real PostgreSQL with pgvector (started
from pip unless REPOCTX_DATABASE_URL is set). Scope, namespacing, ranking parity and schema checks."""
from __future__ import annotations

import hashlib
import json
import re
import sqlite3

import numpy as np
import pytest

from repoctx import Index, Settings
from repoctx.retrieve.hybrid import written_units
from repoctx.retrieve.langchain import RepoctxRetriever
from repoctx.retrieve.query import mentions
from repoctx.store.base import Grant, Scope, StoreError, glob_regex, split_id
from repoctx.types import UnitHead, UnitSpan
from tests.conftest import write_tree


class HashEmbedder:
    """A deterministic bag-of-words embedder (384-d, unit vectors): dense search really runs and
    finds shared words, with no model to load."""

    model_id = "test:hash-384"
    dim = 384
    max_length = 128

    def encode(self, texts):
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for i, t in enumerate(texts):
            for w in re.findall(r"[a-z]+", t.lower()):
                out[i, int(hashlib.md5(w.encode()).hexdigest(), 16) % self.dim] += 1.0
            n = np.linalg.norm(out[i])
            out[i] = out[i] / n if n else out[i]
            if not n:
                out[i, 0] = 1.0
        return out


SHOP = {
    "shop/__init__.py": "",
    "shop/models.py": ("class Base:\n    def save(self):\n        \"\"\"Persist the order.\"\"\"\n        return self.validate()\n\n"
                       "    def validate(self):\n        return True\n\n"
                       "class Order(Base):\n    def total(self):\n        return sum_lines(self)\n\n"
                       "def sum_lines(order):\n    \"\"\"Add up the order lines.\"\"\"\n    return 0\n"),
    "shop/checkout.py": ("from shop.models import Order\nfrom secret.vault import open_vault\n\n"
                         "def checkout(cart):\n    \"\"\"Check out a cart: save the order and charge the card.\"\"\"\n"
                         "    order = Order()\n    order.save()\n    open_vault(order)\n    return order\n"),
    "secret/vault.py": ("def open_vault(order):\n    \"\"\"Open the vault and charge the card for the order.\"\"\"\n"
                        "    return vault_key(order)\n\n"
                        "def vault_key(order):\n    \"\"\"The vault key that signs an order checkout.\"\"\"\n    return 42\n\n"
                        "class VaultCheckout:\n    def checkout(self, cart):\n        return open_vault(cart)\n"),
    "docs/notes.md": "# Checkout\nThe checkout saves the order and opens the vault.\n",
}


@pytest.fixture(params=["sqlite", "postgres"])
def backend(request, tmp_path):
    """Settings for one backend: the embedded store in a shared folder, or a fresh PostgreSQL database."""
    if request.param == "sqlite":
        return Settings(index_dir=tmp_path / "store", embedder="none", vector_cache=tmp_path / "vec.sqlite")
    from repoctx.store.postgres import migrate
    from tests.pg import fresh_database

    url = fresh_database()
    migrate(url)
    return Settings(database_url=url, embedder="none", vector_cache=tmp_path / "vec.sqlite")


def index_repo(settings, root, name=None, dense=True) -> Index:
    ix = Index(root, settings, embedder=HashEmbedder() if dense else None, name=name)
    ix.update()
    return ix


def test_index_and_reads(backend, tmp_path):
    ix = index_repo(backend, write_tree(tmp_path / "shop", SHOP))
    assert ix.repo == "shop" and ix.indexed()
    counts = ix.store.counts(ix.scope())
    assert counts["files"] == 5 and counts["capsules"] > 10 and counts["resolved_edges"] > 0
    checkout = [c for c in ix.find("checkout") if c.kind != "module"]
    assert {c.id for c in checkout} == {"shop:shop/checkout.py#checkout", "shop:secret/vault.py#VaultCheckout.checkout"}
    callees = {e.dst_name: e.dst for e in ix.callees("shop:shop/checkout.py#checkout")}
    assert callees["Order"] == "shop:shop/models.py#Order" and callees["open_vault"] == "shop:secret/vault.py#open_vault"
    assert callees["Order.save"] == "shop:shop/models.py#Base.save"  # `order = Order()`; save is inherited
    assert ix.store.writer("shop").bases_of(["shop:shop/models.py#Order", "shop:shop/models.py#Base"]) == {
        "shop:shop/models.py#Order": [("shop:shop/models.py#Base", "shop/models.py", "Base")]}
    assert [e.src for e in ix.callers("shop:secret/vault.py#vault_key")] == ["shop:secret/vault.py#open_vault"]
    assert ix.search("sum_lines")[0].capsule.qualname == "sum_lines"
    assert ix.store.vector_state("shop", HashEmbedder.model_id).current
    assert ix.dense_index().search("vault key signs", 3)[0][0] == "shop:secret/vault.py#vault_key"
    # unscoped, over the whole store (PostgreSQL: through the HNSW index; scoped reads scan exactly)
    vec = ix.dense_index().vector("vault key signs")
    assert ix.store.dense(vec, HashEmbedder.model_id, 1)[0][0] == "shop:secret/vault.py#vault_key"
    assert ("shop", "secret/vault.py") in ix.files()


def test_incremental_equals_cold(backend, tmp_path):
    root = write_tree(tmp_path / "shop", SHOP)
    ix = index_repo(backend, root)
    # a function renamed, and Order given a first base that defines save (checkout.py's order.save() follows)
    (root / "shop/models.py").write_text(SHOP["shop/models.py"].replace("def sum_lines", "def add_lines")
                                         .replace("sum_lines(self)", "add_lines(self)")
                                         .replace("class Order(Base):", "class Mixin:\n    def save(self):\n"
                                                  "        return 0\n\nclass Order(Mixin, Base):"))
    (root / "docs/notes.md").unlink()
    ix.update()
    assert {e.dst_name: e.dst for e in ix.callees("shop:shop/checkout.py#checkout")}["Order.save"] == \
        "shop:shop/models.py#Mixin.save"
    snap = (ix.store.all_capsules(ix.scope()), ix.store.all_edges(ix.scope()), ix.store.counts(ix.scope()))
    fresh = tmp_path / "fresh"
    write_tree(fresh, {})
    import shutil

    shutil.copytree(root, fresh / "shop")
    cold = index_repo(backend, fresh / "shop", name="cold")
    cold_caps = [c.to_dict() for c in cold.store.all_capsules(cold.scope())]
    for c in cold_caps:
        c["id"] = c["id"].replace("cold:", "shop:")
        c["parent"] = c["parent"] and c["parent"].replace("cold:", "shop:")
        c["repo"] = "shop"
    assert [c.to_dict() for c in snap[0]] == cold_caps
    assert snap[1] == [tuple(x.replace("cold:", "shop:") if isinstance(x, str) else x for x in e)
                       for e in cold.store.all_edges(cold.scope())]
    assert snap[2] == cold.store.counts(cold.scope())
    # BM25 statistics follow deletions: the same query scores alike on the updated and the cold index
    a = ix.store.lexical(["order", "lines"], 5, ix.scope())
    b = cold.store.lexical(["order", "lines"], 5, cold.scope())
    assert [i.split(":", 1)[1] for i, _ in a] == [i.split(":", 1)[1] for i, _ in b]


def _pg_lexical_rows(url: str, repo: str) -> dict[str, list[tuple]]:
    """PostgreSQL's lexical rows of ``repo``, each posting as (unit id without the repository, count, length)."""
    import psycopg

    from repoctx.store import postings

    with psycopg.connect(url) as conn:
        ids = dict(conn.execute("SELECT rid, id FROM repoctx_capsules WHERE repo=%s", (repo,)).fetchall())
        out = {}
        for term, n, last, p in conn.execute("SELECT term, n, last, p FROM repoctx_lex WHERE repo=%s", (repo,)):
            _, rids, wtf, dl = postings.unpack_many([p], [n], 3)
            assert n == len(rids) > 0 and last == rids[-1] and (np.diff(rids) > 0).all(), term
            out[term] = sorted((ids[r].split(":", 1)[1], w, d) for r, w, d in zip(rids.tolist(), wtf.tolist(),
                                                                                  dl.tolist(), strict=True))
    return out


def test_postgres_lexical_rows_after_updates_are_a_cold_index_s(tmp_path, monkeypatch):
    """Files edited, deleted and added, a class losing a method, the postings taken a few at a time: every term's row
    holds exactly the postings (unit, count, length) a cold index of the same tree writes, no row is left empty, and
    a token too long for an index key gets no row."""
    import shutil

    from repoctx.store import postings
    from repoctx.store.postgres import migrate
    from tests.pg import fresh_database

    monkeypatch.setattr(postings, "FLUSH_POSTINGS", 7)  # (the cold index below takes them all at once)
    url = fresh_database()
    migrate(url)
    settings = Settings(database_url=url, embedder="none")
    root = write_tree(tmp_path / "shop", SHOP)
    ix = index_repo(settings, root, dense=False)
    huge = "z" * 600
    (root / "shop/models.py").write_text(SHOP["shop/models.py"].replace("    def validate(self):\n        return True\n\n", "")
                                         .replace("sum_lines", "add_lines"))
    (root / "docs/notes.md").unlink()
    (root / "shop/extra.py").write_text(f"def refund(order):\n    return '{huge}'\n")
    ix.update()
    import psycopg

    def rids() -> dict[str, int]:
        with psycopg.connect(url) as conn:
            return dict(conn.execute("SELECT id, rid FROM repoctx_capsules WHERE repo='shop'").fetchall())

    before = rids()
    (root / "secret/vault.py").write_text(SHOP["secret/vault.py"] + "\ndef rotate(key):\n    return key\n")
    (root / "shop/extra.py").write_text("def refund(order, amount):\n    return amount\n")
    ix.update()
    after = rids()  # a unit written again takes its rid back (unchanged, its postings change no row)
    assert after["shop:secret/vault.py#open_vault"] == before["shop:secret/vault.py#open_vault"]
    assert after["shop:secret/vault.py#rotate"] > max(before.values())
    shutil.copytree(root, tmp_path / "again" / "shop")
    monkeypatch.undo()
    cold = index_repo(settings, tmp_path / "again" / "shop", name="cold", dense=False)
    got, want = _pg_lexical_rows(url, "shop"), _pg_lexical_rows(url, "cold")
    assert got == want and "rotate" in got and "validate" in got and huge not in got
    assert [p[0] for p in got["add"]] == ["shop/models.py#Order.total", "shop/models.py#add_lines"] and "sum" not in got
    ix.close()
    cold.close()


def test_bm25_matches_sqlite_fts5(tmp_path):
    """PostgreSQL's lexical rows give FTS5's bm25() scores (same order, same numbers)."""
    from repoctx.store.postgres import migrate
    from tests.pg import fresh_database

    url = fresh_database()
    migrate(url)
    root = write_tree(tmp_path / "shop", SHOP)
    lite = index_repo(Settings(index_dir=tmp_path / "s", embedder="none"), root, dense=False)
    pg = index_repo(Settings(database_url=url, embedder="none"), root, dense=False)
    for terms in (["order"], ["vault", "key"], ["checkout", "cart", "card"], ["save", "persist", "order", "lines"]):
        a, b = lite.store.lexical(terms, 10), pg.store.lexical(terms, 10)
        assert [i for i, _ in a] == [i for i, _ in b]
        np.testing.assert_allclose([s for _, s in a], [s for _, s in b], rtol=1e-5)
    assert lite.store.doc_freqs(["order", "vault"]) == pg.store.doc_freqs(["order", "vault"])
    # another repository in the same database does not move the scoped scores: statistics are the scope's
    index_repo(Settings(database_url=url, embedder="none"), write_tree(tmp_path / "other", {
        "o.py": "def order_order(order):\n    return order  # order order order\n"}), dense=False)
    scope = pg.scope()
    for terms in (["order"], ["vault", "key"]):
        a, b = lite.store.lexical(terms, 10), pg.store.lexical(terms, 10, scope)
        assert [i for i, _ in a] == [i for i, _ in b]
        np.testing.assert_allclose([s for _, s in a], [s for _, s in b], rtol=1e-5)
    assert lite.store.doc_freqs(["order"]) == pg.store.doc_freqs(["order"], scope)


def _everything_visible(ix: Index, scope: Scope, q: str) -> str:
    """Every output a scoped caller can get for one query, as one JSON text."""
    out = [ix.retrieve(q, k=10, mode="standard", scope=scope).to_dict(),
           ix.retrieve(q, k=10, mode="agentic", scope=scope).to_dict(),
           ix.retrieve(q, k=5, level="file", mode="auto", scope=scope).to_dict(),
           [h.to_dict() for h in ix.search(q, k=10, scope=scope)],
           ix.context(q, budget=1500, scope=scope).to_dict(),
           ix.context(q, task="refactor", budget=1500, scope=scope).to_dict(),
           [d.metadata for d in RepoctxRetriever(index=ix, k=8, scope=scope).invoke(q)],
           [list(x) for x in ix.files(scope)]]
    dense = ix.dense_index(scope)
    out.append(dense.search(q, 20, ix.scope(scope)) if dense else [])
    out.append(ix.store.lexical(q.lower().split(), 50, ix.scope(scope)))
    every = [c.id for c in ix.store.all_capsules(ix.scope())]  # asked for every unit: the scope decides
    out.append(list(ix.store.unit_heads(every, ix.scope(scope)).values()))
    for c in ix.find("checkout", scope) + ix.find("open_vault", scope):
        out.append([e.to_dict() for e in ix.callees(c.id, scope) + ix.callers(c.id, scope)])
    return json.dumps(out, default=str)


QUERIES = ["checkout", "vault", "open the vault", "vault key", "charge the card", "save the order",
           "how is an order checked out and where is the vault opened?", "compare checkout and the vault checkout",
           "sum_lines", "open_vault", "VaultCheckout", "secret/vault.py", "who calls open_vault", "order total",
           "validate", "persist", "cart", "key", "signs", "lines", "Base.save", "what does checkout call",
           "where is the card charged", "vault_key", "Order",
           # a traceback's frame in the hidden file: the lines lane resolves it under the scope or not at all
           'checkout fails\nTraceback:\n  File "/venv/site-packages/secret/vault.py", line 2, in open_vault\n']


def test_unit_heads_are_the_capsules_without_their_texts(backend, tmp_path):
    """What a search asks of every candidate (store.unit_heads) is what the full read gives, under any scope."""
    ix = index_repo(backend, write_tree(tmp_path / "shop", SHOP))
    every = [c.id for c in ix.store.all_capsules(ix.scope())]
    for scope in (Scope(), Scope(exclude=("secret/*",)), Scope(grants=(Grant("shop", include=("shop/*",)),))):
        full = ix.store.capsules(every + ["shop:no/such.py#x"], ix.scope(scope))
        heads = ix.store.unit_heads(every + ["shop:no/such.py#x"], ix.scope(scope))
        assert heads == {c.id: UnitHead(c.id, c.path, c.language, c.kind, c.qualname) for c in full}
    assert len(heads) < len(every) and ix.store.unit_heads([], ix.scope()) == {}


def test_file_spans_are_the_file_s_capsules_without_their_texts(backend, tmp_path):
    """Where a file's units lie (store.file_spans: what finding a traceback's frame reads) is what the full read of
    the file gives, in the same order, under any scope; a hidden or unknown file has none."""
    ix = index_repo(backend, write_tree(tmp_path / "shop", SHOP))
    paths = sorted({c.path for c in ix.store.all_capsules(ix.scope())})
    assert "secret/vault.py" in paths
    for scope in (Scope(), Scope(exclude=("secret/*",)), Scope(grants=(Grant("shop", include=("shop/*",)),))):
        for path in paths + ["no/such.py"]:
            full = ix.store.file_capsules("shop", path, ix.scope(scope))
            spans = ix.store.file_spans("shop", path, ix.scope(scope))
            assert spans == [UnitSpan(c.id, c.name, c.kind, c.start_line, c.end_line) for c in full]
    assert ix.store.file_spans("shop", "secret/vault.py", ix.scope(Scope(exclude=("secret/*",)))) == []
    assert ix.store.file_spans("shop", "secret/vault.py", ix.scope())


def test_a_traceback_s_lines_name_the_same_units_on_both_backends(backend, tmp_path):
    """The lines lane (hybrid.written_units) reads the store only through by_path_suffix and file_spans: a traceback's
    frames name the same units on SQLite and PostgreSQL, innermost first, and a frame in a hidden file names none."""
    ix = index_repo(backend, write_tree(tmp_path / "shop", SHOP))
    tb = ("Traceback (most recent call last):\n"
          '  File "/venv/lib/site-packages/shop/checkout.py", line 8, in checkout\n'
          '  File "/venv/lib/site-packages/shop/models.py", line 4, in save\n'
          '  File "/venv/lib/site-packages/secret/vault.py", line 3, in open_vault\n')
    got = written_units(ix.store, mentions(tb).locations, ix.scope())
    assert [cid for cid, _ in got] == ["shop:secret/vault.py#open_vault", "shop:shop/models.py#Base.save",
                                        "shop:shop/checkout.py#checkout"]
    hidden = written_units(ix.store, mentions(tb).locations, ix.scope(Scope(exclude=("secret/*",))))
    assert [cid for cid, _ in hidden] == ["shop:shop/models.py#Base.save", "shop:shop/checkout.py#checkout"]


def test_scope_is_applied_in_every_read(backend, tmp_path):
    ix = index_repo(backend, write_tree(tmp_path / "shop", SHOP))
    scopes = [Scope(exclude=("secret/*",)), Scope(include=("shop/*", "docs/*")),
              Scope(grants=(Grant("shop", include=("shop/*",)),)),
              Scope(grants=(Grant("*", exclude=("secret/*", "docs/*")),))]
    checked = 0
    for scope in scopes:
        for q in QUERIES:
            text = _everything_visible(ix, scope, q)
            assert not LEAK.search(text), (scope, q, LEAK.search(text).group(0))
            checked += 1
    assert checked >= 50
    # and unscoped, the same reads do see the folder (so the check above is not vacuous)
    assert LEAK.search(_everything_visible(ix, Scope(), "open the vault"))


# what an excluded capsule would look like in any output (ids, citations, paths, bodies), beyond the
# query's own words echoed back
LEAK = re.compile(r"shop:secret/|secret/vault\.py:\d|\"path\": \"secret/|\"shop\", \"secret/|return 42|"
                  r"signs an order checkout|return open_vault\(cart\)")


def test_two_repositories_with_the_same_names(backend, tmp_path):
    a = index_repo(backend, write_tree(tmp_path / "a", {"lib/util.py": "def parse_date(s):\n    \"\"\"Parse an ISO date.\"\"\"\n    return s\n"}))
    b = index_repo(backend, write_tree(tmp_path / "b", {"lib/util.py": "def parse_date(s):\n    \"\"\"Parse a date, the American way.\"\"\"\n    return s[::-1]\n"}))
    assert a.repo == "a" and b.repo == "b"
    both = Index(settings=backend, repos=("a", "b"), store=a.store)
    hits = both.retrieve("parse_date", k=10, mode="standard").hits
    names = {(h.capsule.repo, h.capsule.citation) for h in hits if h.capsule.kind == "function"}
    assert names == {("a", "lib/util.py:1-3 :: parse_date"), ("b", "lib/util.py:1-3 :: parse_date")}
    assert all(h.to_dict()["capsule"]["repo"] in ("a", "b") for h in hits)
    assert {c.text for c in both.find("parse_date")} == {
        "def parse_date(s):\n    \"\"\"Parse an ISO date.\"\"\"\n    return s",
        "def parse_date(s):\n    \"\"\"Parse a date, the American way.\"\"\"\n    return s[::-1]"}
    # each view sees its own; a scope naming one repository sees only that one
    assert {h.capsule.repo for h in a.search("parse date")} == {"a"}
    assert {h.capsule.repo for h in both.search("parse date", scope=Scope(repos=("b",)))} == {"b"}
    assert {h.capsule.repo for h in both.search("American way")} == {"b"}
    # re-indexing one repository leaves the other whole
    (tmp_path / "a" / "lib/util.py").write_text("def parse_time(s):\n    return s\n")
    a.update()
    assert [c.repo for c in both.find("parse_date")] == ["b"] and [c.repo for c in both.find("parse_time")] == ["a"]
    assert {r.name for r in a.store.repos()} >= {"a", "b"}
    # a scope's grants name repositories too: a grant for "a" only never shows "b"
    assert {h.capsule.repo for h in both.search("parse", scope=Scope(grants=(Grant("a"),)))} == {"a"}


def test_file_level_returns_k_files_in_every_mode(backend, tmp_path):
    files = {f"pkg/m{i}.py": "".join(f"def handler_{i}_{j}(request):\n    \"\"\"Handle the request {j}.\"\"\"\n"
                                     f"    return request\n\n" for j in range(6)) for i in range(8)}
    ix = index_repo(backend, write_tree(tmp_path / "r", files))
    for mode in ("standard", "agentic", "auto"):
        res = ix.retrieve("how is the request handled, and where are handlers defined?", k=6, level="file", mode=mode)
        assert len(res.files) == 6 and len({f.path for f in res.files}) == 6, mode


def test_glob_semantics_agree():
    for pat, path, ok in [("secret/*", "secret/a/b.py", True), ("*.py", "a/b.py", True), ("a/?.py", "a/b.py", True),
                          ("a/[bc].py", "a/c.py", True), ("a/[!bc].py", "a/c.py", False), ("docs/*", "src/docs.py", False)]:
        assert (re.match(glob_regex(pat), path) is not None) == ok
        assert Scope(include=(pat,)).allows("r", path) == ok


def test_postgres_needs_migrate(tmp_path):
    from repoctx.store.postgres import PostgresStore
    from tests.pg import fresh_database

    with pytest.raises(StoreError, match="repoctx db migrate"):
        PostgresStore(fresh_database())


def test_a_schema_4_store_migrates_to_the_lexical_rows_an_index_writes(tmp_path):
    """Schema 5 packs each term's postings into one row a repository: a store of schema 4 (a row a posting, with the
    terms' document counts beside) migrates to the rows a fresh index writes, byte for byte, and searches alike;
    the old tables are gone."""
    import psycopg

    from repoctx.store import postings
    from repoctx.store.postgres import PG_SCHEMA_VERSION, PostgresStore, migrate
    from tests.pg import fresh_database

    fresh = fresh_database()
    migrate(fresh)
    root = write_tree(tmp_path / "shop", SHOP)
    ix = index_repo(Settings(database_url=fresh, embedder="none"), root, dense=False)
    ix.close()
    old = fresh_database()
    assert migrate(old, to=4)["version"] == 4
    with psycopg.connect(fresh) as src, psycopg.connect(old) as dst:
        for table in ("repoctx_repos", "repoctx_capsules", "repoctx_files"):
            rows = src.execute(f"SELECT * FROM {table}").fetchall()
            with dst.cursor().copy(f"COPY {table} FROM STDIN") as cp:
                for r in rows:
                    cp.write_row(r)
        lex = src.execute("SELECT repo, term, n, last, p FROM repoctx_lex ORDER BY repo, term").fetchall()
        for repo, term, n, _last, p in lex:  # each posting a row, as schema 4 kept them
            _, rids, wtf, dl = postings.unpack_many([p], [n], 3)
            for r, w, d in zip(rids.tolist(), wtf.tolist(), dl.tolist(), strict=True):
                dst.execute("INSERT INTO repoctx_postings VALUES(%s,%s,%s,%s,%s)", (term, r, repo, float(w), float(d)))
            dst.execute("INSERT INTO repoctx_term_df VALUES(%s,%s,%s)", (repo, term, n))
    with pytest.raises(StoreError, match="repoctx db migrate"):
        PostgresStore(old)
    assert migrate(old) == {"version": PG_SCHEMA_VERSION, "from": 4}
    with psycopg.connect(old) as conn:
        assert conn.execute("SELECT repo, term, n, last, p FROM repoctx_lex ORDER BY repo, term").fetchall() == lex
        assert conn.execute("SELECT to_regclass('repoctx_postings'), to_regclass('repoctx_term_df')").fetchone() == (
            None, None)
    a, b = PostgresStore(fresh), PostgresStore(old)
    for terms in (["order"], ["vault", "key"], ["checkout", "cart", "card"]):
        assert a.lexical(terms, 10) == b.lexical(terms, 10) != []
    a.close()
    b.close()


def test_old_sqlite_schema_is_named_then_rebuilt(tmp_path):
    root = write_tree(tmp_path / "r", {"a.py": "def f():\n    return 1\n"})
    (tmp_path / "ix").mkdir()
    db = sqlite3.connect(tmp_path / "ix" / "index.sqlite")
    db.executescript("CREATE TABLE meta(key TEXT PRIMARY KEY, value TEXT); INSERT INTO meta VALUES('schema_version','1');"
                     "CREATE TABLE capsules(id TEXT);")
    db.close()
    settings = Settings(index_dir=tmp_path / "ix", embedder="none")
    from repoctx.store.base import SchemaMismatch

    with pytest.raises(SchemaMismatch, match="repoctx index"):
        Index(root, settings, create=False)
    ix = Index(root, settings)
    ix.update()
    assert ix.find("f")[0].id == "r:a.py#f"


def test_a_docstring_escaping_a_nul_indexes_on_both_backends(tmp_path, pg_url):
    """paramiko's Message.get_byte documents '\\x00' in its docstring: decoded, that is a NUL character, which
    PostgreSQL's text refuses, and the whole tree failed to index there. Both backends keep it as U+FFFD."""
    from repoctx import Index, Settings
    from repoctx.store.postgres import migrate

    migrate(pg_url)
    root = tmp_path / "r"
    root.mkdir()
    (root / "m.py").write_text('def get_byte():\n    """Return one byte, or \\x00 when none is left."""\n    return 0\n')
    for settings in (Settings(index_dir=tmp_path / "ix", embedder="none"),
                     Settings(database_url=pg_url, embedder="none")):
        ix = Index(root, settings)
        ix.update()
        [hit] = [h for h in ix.search("get_byte", k=3) if h.capsule.qualname == "get_byte"]
        assert "\x00" not in hit.capsule.docstring
        ix.close()


def test_a_large_write_leaves_postgres_statistics_fresh(tmp_path, pg_url):
    """A cold index (or a big push) grows the tables by far more than autovacuum has seen: the planner would cost a
    scoped search with the old row counts until autovacuum wakes. The writer analyzes after a commit that grew
    the units by a tenth or more, and not after a small one."""
    import psycopg

    from repoctx.store.postgres import migrate

    migrate(pg_url)
    root = tmp_path / "big"
    write_tree(root, {f"pkg/m{i}.py": "".join(f"def f{i}_{j}(x):\n    return x + {j}\n\n" for j in range(30))
                      for i in range(40)})
    settings = Settings(database_url=pg_url, embedder="none")

    def analyzed() -> dict[str, int]:
        with psycopg.connect(pg_url, autocommit=True) as conn:
            return dict(conn.execute(
                "SELECT relname, analyze_count FROM pg_stat_user_tables WHERE relname IN "
                "('repoctx_capsules', 'repoctx_lex', 'repoctx_edges', 'repoctx_files')"
            ).fetchall())

    before = analyzed()
    ix = index_repo(settings, root, dense=False)
    after = analyzed()
    assert ix.store.n_capsules() >= 1200
    assert all(after[t] > before.get(t, 0) for t in after), (before, after)
    with psycopg.connect(pg_url, autocommit=True) as conn:
        assert conn.execute("SELECT reltuples FROM pg_class WHERE relname = 'repoctx_capsules'").fetchone()[0] >= 1200

    (root / "pkg" / "m0.py").write_text("def only(x):\n    return x\n")  # a one-file change: no ANALYZE
    ix.update()
    assert analyzed()["repoctx_capsules"] == after["repoctx_capsules"]
    ix.close()


def test_a_huge_token_does_not_fail_the_index(backend, tmp_path):
    """djangorestframework's sdist holds a 14 kB token (a minified asset): PostgreSQL's btree refused its posting and
    the whole COPY failed. The token counts in the unit's length; the unit is found by its other words."""
    import random

    blob = "".join(random.Random(7).choices("abcdefghijklmnopqrstuvwxyz0123456789", k=14_000))  # incompressible
    normal = "".join(f"def helper_{i}(x):\n    return x + {i}\n\n" for i in range(200))  # not a minified file
    root = write_tree(tmp_path / "r", {"pkg/app.py": f'def render_banner():\n    return "{blob}"\n\n\n{normal}',
                                      "m.py": "def other():\n    return 1\n"})
    ix = index_repo(backend, root, dense=False)
    hits = ix.search("render banner", k=3)
    assert hits and hits[0].capsule.qualname == "render_banner"
    assert ix.store.n_capsules() >= 2
    ix.close()


def test_a_longer_path_resolves_to_the_longest_path_it_ends_with_on_both_backends(backend, tmp_path):
    """``x/a/b/c.py`` is ``a/b/c.py``, not ``b/c.py``; a file at the root is never the tail of a longer path (a
    user's own ``/home/me/project/setup.py`` is not the repository's); a fragment that is the end of a path keeps
    matching as before."""
    root = write_tree(tmp_path / "r", {"a/b/c.py": "X = 1\n", "b/c.py": "Y = 2\n", "setup.py": "Z = 3\n"})
    index = index_repo(backend, root, dense=False)

    def found(fragments):
        return [split_id(cid)[1].rsplit("#", 1)[0] for cid in index.store.by_path_suffix(fragments, index.scope())]

    assert found(["home/me/r/a/b/c.py"]) == ["a/b/c.py"]
    assert found(["elsewhere/b/c.py"]) == ["b/c.py"]
    assert found(["b/c.py"]) == ["b/c.py", "a/b/c.py"]  # the end of both paths: the fewest folders first
    assert found(["home/me/project/setup.py"]) == []
    assert found(["setup.py"]) == ["setup.py"]
    assert found(["home/me/d/e.py"]) == []
    index.close()


def test_function_windows_lift_a_file_on_both_backends_and_stay_in_scope(backend, tmp_path):
    """REPOCTX_FUNCTION_WINDOWS=1 reads the candidates' texts through the store, in the search's scope: a function
    whose words come late in its body lifts its file on either backend, and one outside the scope is never read."""
    from dataclasses import replace

    from repoctx.retrieve.hybrid import SearchOptions

    filler = "".join(f"    _ = {i:05d} + {i * 7:05d}\n" for i in range(30))  # no word: more than the model reads

    def long_function(name):
        return f"def {name}(entries):\n{filler}    # quarterly rebate overflow\n    quarterly_rebate(entries)\n{filler}"

    files = {"ledger/books.py": long_function("settle"), "secret/vault.py": long_function("unlock"),
             "ledger/notes.py": 'def totals(entries):\n    """Quarterly totals of the books."""\n    return entries\n'}
    root = write_tree(tmp_path / "r", files)
    q, opts = "quarterly rebate overflow", SearchOptions(k=5, level="file", lexical=False, exact=False)
    inside = Scope(exclude=("secret/*",))
    plain = index_repo(backend, root)
    assert plain.search(q, k=5, level="file", scope=inside, options=opts)[0].path == "ledger/notes.py"
    ix = Index(root, replace(backend, function_windows=True), embedder=HashEmbedder())
    read: list[str] = []
    capsules = ix.store.capsules

    def reading(ids, scope=None):
        got = capsules(ids, scope)
        read.extend(c.path for c in got)
        return got

    ix.store.capsules = reading
    got = ix.search(q, k=5, level="file", scope=inside, options=opts)
    assert got[0].path == "ledger/books.py" and read
    assert not any(p.startswith("secret/") for p in [f.path for f in got] + read)
    assert ix.search(q, k=5, level="file", options=opts)[0].path in ("ledger/books.py", "secret/vault.py")
