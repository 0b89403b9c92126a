"""Vectors where questions are answered first: the project's code is embedded and searchable by meaning before
tests and docs; a unit without a vector yet is still found by its words; vectors are kept compact (int8) in the
store and in the cache without changing which units are nearest."""

import sqlite3

import numpy as np
import pytest

from repoctx import Index, Settings
from repoctx.retrieve.hybrid import SearchOptions
from repoctx.store.faiss_index import FaissIndex, dequantize, quantize
from repoctx.vectors import EMBED_ORDER, VectorCache, embed_class, text_hash
from tests.conftest import write_tree
from tests.test_dense import HashEmbedder

FILES = {
    "shop/billing.py": 'def render_invoice(order):\n    """Render an invoice as PDF."""\n    return order\n',
    "shop/auth.py": "class Login:\n    def check_password(self, user, password):\n        return True\n",
    "tests/test_billing.py": "def test_render_invoice_totals():\n    assert render_invoice(1)\n",
    "docs/howto/refunds.txt": "Refunds\n=======\n\nA refund reverses a settled payment; the ledger keeps both entries.\n",
    "shop/locale/fr/formats.py": "DATE_FORMAT = 'j F Y'\n",
}


class Stopped(Exception):
    pass


class Recording(HashEmbedder):
    """Remembers the texts it was asked to embed, in order; can stop after ``stop_after`` calls."""

    def __init__(self, stop_after=None):
        super().__init__(64)
        self.seen: list[str] = []
        self.calls = 0
        self.stop_after = stop_after

    def encode(self, texts):
        if self.stop_after is not None and self.calls >= self.stop_after:
            raise Stopped("stopped by the test")
        self.calls += 1
        self.seen += list(texts)
        return super().encode(texts)


def make(tmp_path, embedder):
    root = tmp_path / "repo"
    if not root.exists():
        write_tree(root, FILES)
    settings = Settings(index_dir=tmp_path / "idx", vector_cache=tmp_path / "vectors.sqlite")
    return Index(root, settings, embedder=embedder)


def test_embed_classes():
    assert [embed_class(p) for p in ("django/db/models/query.py", "src/app.js", "cmd/main.go")] == ["code"] * 3
    assert [embed_class(p) for p in ("tests/queries/tests.py", "pkg/test_x.py", "web/a.spec.ts")] == ["test"] * 3
    assert [embed_class(p) for p in ("docs/ref/models.txt", "README.md", "examples/demo.py")] == ["docs"] * 3
    assert [embed_class(p) for p in ("django/conf/locale/fr/formats.py", "app/templates/a.html", "x.json")] == [
        "other"
    ] * 3
    assert EMBED_ORDER[0] == "code"


def test_code_is_embedded_before_tests_and_docs(tmp_path):
    emb = Recording()
    ix = make(tmp_path, emb)
    ix.update(embed=False)
    from repoctx.vectors import fill_vectors

    report = fill_vectors(ix.store.writer(ix.repo), emb, VectorCache(tmp_path / "vectors.sqlite"), batch=1)
    classes = [embed_class(t.split(" :: ")[0].split("\n")[0]) for t in emb.seen]
    ranks = [EMBED_ORDER.index(c) for c in classes]
    assert ranks == sorted(ranks) and classes[0] == "code" and {"test", "docs"} <= set(classes)
    assert report.classes["code"] == classes.count("code")
    assert report.ready_s["code"] <= report.ready_s["test"] <= report.ready_s["docs"]


def test_code_searchable_by_meaning_while_the_rest_waits_and_the_rest_found_by_words(tmp_path):
    """A fill stopped once the code is embedded: code answers by meaning (the code class was published),
    and a question about a docs page or a test still finds it, by its words."""
    emb = Recording()
    ix = make(tmp_path, emb)
    ix.update(embed=False)
    from repoctx.vectors import fill_vectors

    code_units = [c for c in ix.store.all_capsules() if embed_class(c.path) == "code"]
    emb.stop_after = len(code_units)  # batch=1: one call per code text, then stop
    with pytest.raises(Stopped):
        fill_vectors(ix.store.writer(ix.repo), emb, VectorCache(tmp_path / "vectors.sqlite"), batch=1)
    emb.stop_after = None  # questions are embedded as usual
    state = ix.store.vector_state(ix.repo, emb.model_id)
    assert 0 < state.count < state.total and not state.current
    dense_only = SearchOptions(lexical=False, exact=False, graph=False, rerank=False)
    hits = ix.search("render invoice pdf", k=3, options=dense_only)
    assert hits and all(embed_class(h.capsule.path) == "code" for h in hits)
    top3 = lambda q: [h.capsule.path for h in ix.search(q, k=3)]  # noqa: E731
    assert "docs/howto/refunds.txt" in top3("what do the docs say about a refund of a settled payment")
    assert "tests/test_billing.py" in top3("why does test_render_invoice_totals fail")


def test_int8_set_ranks_like_float32(tmp_path):
    rng = np.random.default_rng(7)
    m = rng.standard_normal((3000, 64)).astype(np.float32)
    m /= np.linalg.norm(m, axis=1, keepdims=True)
    ids = [f"u{i}" for i in range(len(m))]
    fx = FaissIndex(tmp_path / "v")
    fx.write("m", 64, ids, m)
    assert (tmp_path / "v" / fx.meta()["npy"]).stat().st_size < m.nbytes / 3
    overlap = []
    for q in m[rng.choice(len(m), 50, replace=False)] + 0.3 * rng.standard_normal((50, 64)).astype(np.float32):
        q = q / np.linalg.norm(q)
        exact = {ids[i] for i in np.argsort(-(m @ q))[:10]}
        overlap.append(len(exact & {cid for cid, _ in fx.search(q, 10)}) / 10)
    assert np.mean(overlap) >= 0.97
    scoped = fx.search(m[5], 3, allowed={"u5", "u6", "u7"})
    assert scoped[0][0] == "u5" and abs(scoped[0][1] - 1.0) < 1e-2
    got = fx.reusable("m", 64, 0)
    assert got is None  # no hashes recorded: nothing to carry over
    q8, scale = quantize(m)
    assert np.abs(dequantize(q8, scale) - m).max() <= scale.max() / 2 + 1e-7


def test_cache_is_int8_and_reads_an_older_float32_cache(tmp_path):
    path = tmp_path / "vectors.sqlite"
    old = sqlite3.connect(path)
    old.execute("CREATE TABLE vec(model TEXT, hash TEXT, dim INTEGER, v BLOB, PRIMARY KEY(model, hash)) WITHOUT ROWID")
    v = np.random.default_rng(3).standard_normal(384).astype(np.float32)  # a MiniLM-sized row
    v /= np.linalg.norm(v)
    h = text_hash("def f(): pass")
    old.execute("INSERT INTO vec VALUES(?,?,?,?)", ("m", h, 384, v.tobytes()))
    old.commit()
    old.close()
    cache = VectorCache(path)
    got = cache.get_many("m", [h, text_hash("unknown")])
    assert list(got) == [h] and float(got[h] @ v) > 0.9999
    again = VectorCache(path).get_many("m", [h])  # moved over: now read from the int8 table
    assert np.array_equal(again[h], got[h])
    row = sqlite3.connect(path).execute("SELECT length(v) FROM vec8").fetchone()
    assert row == (4 + 384,)
