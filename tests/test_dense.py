import hashlib
import re

import numpy as np
import pytest

from repoctx import Index, Settings
from repoctx.retrieve.hybrid import SearchOptions
from repoctx.tokens import code_tokens
from tests.conftest import write_tree


class HashEmbedder:
    """Deterministic bag-of-tokens vectors; counts what it embeds."""

    def __init__(self, dim=16, name="hash"):
        self.dim = dim
        self.model_id = f"{name}:{dim}"
        self.embedded = 0

    def encode(self, texts):
        self.embedded += len(texts)
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for i, t in enumerate(texts):
            for tok in code_tokens(t):
                out[i, int(hashlib.md5(tok.encode()).hexdigest(), 16) % self.dim] += 1.0
            out[i] /= max(np.linalg.norm(out[i]), 1e-9)
        return out


FILES = {
    "billing/invoice.py": "def render_invoice(order):\n    \"\"\"Render an invoice as PDF.\"\"\"\n    return pdf(order)\n\n\ndef pdf(x):\n    return x\n",
    "auth/login.py": "def authenticate_user(username, password):\n    \"\"\"Check the password.\"\"\"\n    return True\n",
    "auth/tokens.py": "def make_token(user):\n    return str(user)\n",
}


def make(tmp_path, embedder, name="idx", files=FILES, keep=True):
    root = tmp_path / "repo"
    if not root.exists():
        write_tree(root, files)
    settings = Settings(index_dir=tmp_path / name, vector_cache=tmp_path / "vectors.sqlite", cache_vectors=keep)
    return Index(root, settings, embedder=embedder)


def test_by_default_an_index_is_its_own_vector_cache(tmp_path):
    """Without REPOCTX_CACHE_VECTORS the shared cache gives back what a fill wrote once the index holds it (it
    would be a second copy of every vector: Django's 24 MB), and a reindex still embeds only what changed."""
    import sqlite3

    many = "".join(f"def unit_{i}(x):\n    return x + {i}\n\n\n" for i in range(400))  # vectors over many pages
    first = HashEmbedder()
    ix = make(tmp_path, first, "a", files={**FILES, "lib/many.py": many}, keep=False)
    ix.update()
    assert first.embedded == ix.last_embed.total > 0
    cache = sqlite3.connect(tmp_path / "vectors.sqlite")
    assert cache.execute("SELECT count(*) FROM vec8").fetchone()[0] == 0
    assert cache.execute("PRAGMA freelist_count").fetchone()[0] == 0  # the pages given back, not kept free
    assert len(ix.dense_index().search("check the password", 1000)) == ix.last_embed.total  # the index has all
    (tmp_path / "repo/auth/tokens.py").write_text("def make_token(user):\n    return 'v2' + str(user)\n")
    before = first.embedded
    ix.update()
    assert first.embedded - before == ix.last_embed.embedded == 1  # only the edited function
    assert cache.execute("SELECT count(*) FROM vec8").fetchone()[0] == 0
    other = HashEmbedder()
    ix2 = make(tmp_path, other, "b", keep=False)  # another index of the same code: nothing shared to take
    ix2.update()
    assert other.embedded == ix2.last_embed.total and ix2.last_embed.cached == 0


def test_content_hash_cache_never_embeds_twice(tmp_path):
    first = HashEmbedder()
    ix = make(tmp_path, first, "a")
    ix.update()
    assert first.embedded == ix.last_embed.total > 0 and ix.last_embed.cached == 0
    second = HashEmbedder()
    ix2 = make(tmp_path, second, "b")  # another index of the same code, same cache (kept: REPOCTX_CACHE_VECTORS=1)
    ix2.update()
    assert second.embedded == 0 and ix2.last_embed.cached == ix2.last_embed.total
    # an edit embeds only what changed
    (tmp_path / "repo/auth/tokens.py").write_text("def make_token(user):\n    return 'v2' + str(user)\n")
    ix2.update()
    assert second.embedded == 1  # only the edited function (its module's own text is unchanged)
    assert ix2.dense_index() is not None


def test_model_or_dimension_change_reembeds_with_a_message(tmp_path):
    ix = make(tmp_path, HashEmbedder(8, "m1"))
    ix.update()
    assert ix.vectors_status()["indexed_model"] == "m1:8"
    ix2 = make(tmp_path, HashEmbedder(16, "m2"))
    assert ix2.dense_index() is None  # a 8-d index is never queried with a 16-d vector
    assert not ix2.vectors_status()["current"]
    ix2.update()
    assert ix2.last_embed.model_changed_from == "m1:8"
    assert ix2.vectors_status()["indexed_model"] == "m2:16"
    assert ix2.search("render invoice pdf", k=3)[0].capsule.qualname == "render_invoice"


def test_fusion_order_and_why(tmp_path):
    ix = make(tmp_path, HashEmbedder(64))
    ix.update()
    hits = ix.search("render invoice pdf", k=5)
    top = hits[0]
    assert top.capsule.qualname == "render_invoice"
    assert top.why["lexical"]["rank"] >= 1 and top.why["dense"]["rank"] >= 1
    both = [h for h in hits if "lexical" in h.why and "dense" in h.why]
    one = [h for h in hits if ("lexical" in h.why) != ("dense" in h.why) and "graph" not in h.why]
    if one:  # found by both signals outranks found by one at equal ranks
        assert min(h.score for h in both) >= 0 and both[0].score >= max(h.score for h in one)
    # a query that only names a symbol puts the exact match first, and says so
    named = ix.search("make_token", k=3)
    assert named[0].capsule.qualname == "make_token" and "exact" in named[0].why
    # lexical only, dense only
    lex = ix.search("render invoice", options=SearchOptions(dense=False, exact=False))
    assert all("dense" not in h.why for h in lex)
    dense = ix.search("render invoice", options=SearchOptions(lexical=False, exact=False, graph=False, rerank=False))
    assert dense and all(set(h.why) <= {"dense", "test_demoted"} for h in dense)


def test_background_fill_lexical_answers_meanwhile(tmp_path):
    ix = make(tmp_path, HashEmbedder())
    ix.update(background=True)
    assert ix.search("authenticate_user")[0].capsule.qualname == "authenticate_user"
    ix.wait_vectors(30)
    assert ix.dense_index() is not None


def test_local_model_finds_meaning_without_shared_words(tmp_path):
    root = write_tree(tmp_path / "repo2", {
        "a.py": "def load_settings(path):\n    import json\n    with open(path) as f:\n        return json.load(f)\n",
        "b.py": "def primes(n):\n    return [p for p in range(2, n) if all(p % d for d in range(2, p))]\n",
    })
    ix = Index(root, Settings(index_dir=tmp_path / "i2", vector_cache=tmp_path / "v2.sqlite", embedder="local:minilm:128"))
    ix.update()
    hits = ix.search("read the configuration file", options=SearchOptions(lexical=False, exact=False, graph=False))
    assert hits[0].capsule.qualname == "load_settings"


def test_large_indexes_use_hnsw_and_still_find_the_nearest(tmp_path):
    from repoctx.store.faiss_index import FaissIndex

    rng = np.random.default_rng(0)
    m = rng.normal(size=(500, 32)).astype(np.float32)
    m /= np.linalg.norm(m, axis=1, keepdims=True)
    fx = FaissIndex(tmp_path)
    fx.write("x:32", 32, [f"c{i}" for i in range(500)], m, hnsw_min=100)
    import faiss

    assert isinstance(faiss.read_index(str(tmp_path / fx.meta()["faiss"])), faiss.IndexHNSWFlat)
    assert fx.search(m[123], 1)[0][0] == "c123"
    assert fx.search(m[123], 1, allowed={"c7", "c9"})[0][0] in ("c7", "c9")  # the scope's id filter holds in HNSW
    fx.write("x:32", 32, [f"c{i}" for i in range(500)], m, hnsw_min=100, hashes=[f"h{i}" for i in range(500)],
             text_version=1)
    ids, vectors, hashes = fx.reusable("x:32", 32, 1)  # an HNSW set's vectors can be carried over too
    assert ids[7] == "c7" and hashes[7] == "h7" and np.allclose(vectors, m)
    assert fx.reusable("x:32", 32, 2) is None and fx.reusable("y:32", 32, 1) is None


def test_an_hnsw_set_grows_in_place_and_never_answers_with_a_removed_unit(tmp_path, monkeypatch):
    """An update of an HNSW set adds the new and changed units' vectors to the stored graph instead of
    building it again; the old positions of changed and removed units are dead: never returned, never
    carried over. Past HNSW_MAX_DEAD_SHARE dead, the next update builds the graph afresh."""
    import faiss

    from repoctx.store import faiss_index
    from repoctx.store.faiss_index import FaissIndex

    rng = np.random.default_rng(1)

    def unit(n):
        m = rng.normal(size=(n, 32)).astype(np.float32)
        return m / np.linalg.norm(m, axis=1, keepdims=True)

    m = unit(400)
    ids, hashes = [f"c{i}" for i in range(400)], [f"h{i}" for i in range(400)]
    fx = FaissIndex(tmp_path)
    fx.write("x:32", 32, ids, m, hnsw_min=100, hashes=hashes, text_version=1)
    built = []
    real_hnsw = faiss.IndexHNSWFlat
    monkeypatch.setattr(faiss, "IndexHNSWFlat", lambda *a: built.append(a) or real_hnsw(*a))
    # the edit: c5 changed, c6 removed, c400 added (a carried vector and the new ones, as the writer passes them)
    new5, new400 = unit(1)[0], unit(1)[0]
    ids2 = [c for c in ids if c != "c6"] + ["c400"]
    hashes2 = [("h5x" if c == "c5" else h) for c, h in zip(ids, hashes) if c != "c6"] + ["h400"]
    m2 = np.vstack([np.delete(m, 6, axis=0), new400])
    m2[5] = new5
    fx.write("x:32", 32, ids2, m2, hnsw_min=100, hashes=hashes2, text_version=1)
    assert not built  # grown, not rebuilt
    meta = fx.meta()
    assert meta["count"] == 400 and meta["dead"] == 2
    assert fx.search(new5, 1)[0][0] == "c5" and fx.search(new400, 1)[0][0] == "c400"
    found = {c for c, _ in fx.search(m[6], 50)} | {c for c, _ in fx.search(m[5], 50)}
    assert "c6" not in found and "" not in found and "c5" in {c for c, _ in fx.search(new5, 5)}
    assert fx.search(m[123], 1, allowed={"c7", "c123"})[0][0] == "c123"
    got_ids, got_vecs, got_hashes = fx.reusable("x:32", 32, 1)
    assert sorted(got_ids) == sorted(ids2) and "" not in got_ids
    carried = dict(zip(got_ids, got_vecs))
    assert np.allclose(carried["c5"], new5) and np.allclose(carried["c400"], new400) and np.allclose(carried["c7"], m[7])
    assert dict(zip(got_ids, got_hashes))["c5"] == "h5x"
    # removing most units: too many dead, so the graph is built afresh and has no dead positions
    monkeypatch.setattr(faiss_index, "HNSW_MAX_DEAD_SHARE", 0.2)
    keep = [i for i, c in enumerate(got_ids) if int(c[1:]) % 2]
    fx.write("x:32", 32, [got_ids[i] for i in keep], got_vecs[keep], hnsw_min=100,
             hashes=[got_hashes[i] for i in keep], text_version=1)
    assert len(built) == 1 and "dead" not in fx.meta() and fx.meta()["count"] == len(keep)
    assert fx.search(m[7], 1)[0][0] == "c7"



def test_scoped_and_grown_hnsw_searches_keep_the_index_search_breadth(tmp_path):
    """A scoped search (and any search of a grown set, whose dead positions are filtered) passes FAISS search
    parameters; those bring FAISS's default efSearch of 16 unless the index's own 128 is passed along. On
    5,000 random 64-d vectors ef 16 finds ~3/4 of the true ten nearest, ef 128 all of them."""
    from repoctx.store.faiss_index import FaissIndex

    rng = np.random.default_rng(3)
    m = rng.normal(size=(5000, 64)).astype(np.float32)
    m /= np.linalg.norm(m, axis=1, keepdims=True)
    ids = [f"c{i}" for i in range(len(m))]
    fx = FaissIndex(tmp_path)
    fx.write("x:64", 64, ids, m, hnsw_min=100, hashes=[f"h{i}" for i in range(len(m))], text_version=1)
    queries = rng.normal(size=(30, 64)).astype(np.float32)
    allowed = set(ids[: len(ids) - 50])

    def recall(search_allowed, pool: np.ndarray, names: list[str]) -> float:
        out = []
        for q in queries:
            scores = pool @ q
            if search_allowed is not None:  # out of scope: never the nearest
                scores[[i for i, c in enumerate(names) if c not in search_allowed]] = -np.inf
            exact = {names[i] for i in np.argsort(-scores)[:10]}
            got = {c for c, _ in fx.search(q, 10, allowed=search_allowed)}
            out.append(len(exact & got) / 10)
        return float(np.mean(out))

    assert recall(allowed, m, ids) >= 0.95, "a scoped search ran narrower than the index"
    # a grown set: one unit replaced, so its old position is dead and every search filters it out
    ids2 = ids[1:] + ["c5000"]
    m2 = np.vstack([m[1:], m[:1]])
    fx.write("x:64", 64, ids2, m2, hnsw_min=100, hashes=[f"h{i}" for i in range(1, len(m))] + ["h5000"], text_version=1)
    assert fx.meta()["dead"] == 1
    assert recall(None, m2, ids2) >= 0.95

def test_inflected_question_words_reach_uninflected_names(tmp_path):
    """Questions say "resolved", "tokenizing", "entries"; code says resolve, tokenize, entry. The lexical
    search adds the base forms the index holds (indexed tokens stay unstemmed)."""
    from repoctx.tokens import base_forms
    assert "resolve" in base_forms("resolved") and "tokenize" in base_forms("tokenizing")
    assert "entry" in base_forms("entries") and "stop" in base_forms("stopped") and base_forms("class") == []
    root = write_tree(tmp_path / "repo", {
        "tpl.py": "class Variable:\n    def _resolve_lookup(self, context):\n        return context\n\n\n"
                  "def render_block(nodes):\n    return ''.join(nodes)\n"})
    ix = Index(root, Settings(index_dir=tmp_path / "idx", embedder="none"))
    ix.update()
    lex = SearchOptions(dense=False, exact=False, graph=False)
    assert [h.capsule.qualname for h in ix.search("how are variables resolved", options=lex)][:1] == ["Variable._resolve_lookup"]
    assert not ix.search("how are things resolvered", options=lex)  # a form the index does not hold adds nothing


def test_similarities_embed_each_short_text_once(tmp_path):
    """The re-ranker's name similarity: cosine of a sub-query with units' names read as words; a name
    seen before is not embedded again."""
    emb = HashEmbedder(64)
    ix = make(tmp_path, emb)
    ix.update()
    dense = ix.dense_index()
    before = emb.embedded
    names = ["render invoice (billing invoice)", "make token (auth tokens)"]
    sims, other = dense.similarities([("render the invoice", names), ("make a token", names[::-1])])
    assert emb.embedded - before == 4  # two names, two queries, in one batch
    assert sims[0] > sims[1] >= 0.0 and other[0] > other[1]
    (again,) = dense.similarities([("render the invoice", names[::-1])])
    assert emb.embedded - before == 4 and again == sims[::-1]  # all remembered
    q, a = emb.encode(["render the invoice", "render invoice (billing invoice)"])
    assert abs(sims[0] - float(q @ a)) < 5e-3  # the cache keeps vectors as int8 (a step is 1/127 of a row's peak)


def test_name_vectors_outlive_the_process_in_the_vector_cache(tmp_path):
    emb = HashEmbedder(64)
    ix = make(tmp_path, emb)
    ix.update()
    names = ["render invoice (billing invoice)", "make token (auth tokens)"]
    sims = ix.dense_index().similarities([("render the invoice", names)])
    # another process (another Index over the same index and cache): only the new query is embedded
    again = make(tmp_path, emb)
    before = emb.embedded
    assert again.dense_index().similarities([("render the invoice", names)]) == sims
    assert emb.embedded - before == 1
    # the cached short texts never stand in for a unit's own vector: a search still finds by the units' texts
    assert again.search("render invoice pdf", k=1)[0].capsule.qualname == "render_invoice"


def test_flat_vectors_are_searched_exactly_without_faiss(tmp_path):
    from repoctx.store.faiss_index import FaissIndex

    rng = np.random.default_rng(1)
    m = rng.normal(size=(300, 16)).astype(np.float32)
    m /= np.linalg.norm(m, axis=1, keepdims=True)
    ids = [f"c{i}" for i in range(300)]
    fx = FaissIndex(tmp_path)
    fx.write("x:16", 16, ids, m)
    assert "npy" in fx.meta() and "faiss" not in fx.meta()
    q = m[42]
    want = np.argsort(-(m @ q))[:5]
    assert [c for c, _ in fx.search(q, 5)] == [ids[i] for i in want]
    allowed = {f"c{i}" for i in range(0, 300, 7)}
    got = fx.search(q, 3, allowed)
    best = sorted((float(m[int(c[1:])] @ q), c) for c in allowed)[::-1][:3]
    assert [c for c, _ in got] == [c for _, c in best]


def _hit(path: str, name: str, score: float, repo: str = "r"):
    from repoctx.types import Capsule, Hit

    return Hit(Capsule(id=f"{repo}:{path}#{name}", path=path, language="python", kind="function", name=name,
                       qualname=name, signature=f"def {name}()", start_line=1, end_line=2, text="",
                       content_hash=name, repo=repo), score, {})


def test_a_file_ranks_by_the_sum_of_its_two_best_units():
    from repoctx.retrieve.hybrid import to_files

    # one lucky unit in a.py against two relevant units in b.py (and a third, weak one)
    hits = [_hit("a.py", "lucky", 0.030), _hit("b.py", "first", 0.028), _hit("b.py", "second", 0.020),
            _hit("b.py", "third", 0.001)]
    assert [f.path for f in to_files(hits, "top2")] == ["b.py", "a.py"]
    b = to_files(hits, "top2")[0]
    assert b.score == 0.028 + 0.020 and [h.capsule.name for h in b.capsules] == ["first", "second", "third"]
    assert [f.path for f in to_files(hits, "max")] == ["a.py", "b.py"] == [f.path for f in to_files(hits)]
    assert to_files(hits, "top3")[0].score == 0.028 + 0.020 + 0.001 == to_files(hits, "sum")[0].score
    for bad in ("top0", "topx", "mean", "auto"):  # auto is resolved for a query first
        with pytest.raises(ValueError, match="file aggregation"):
            to_files(hits, bad)


def test_files_ranked_from_units_read_without_their_texts_rank_as_from_hits():
    from repoctx.index import _file_keys
    from repoctx.retrieve.hybrid import to_files, unit_files

    hits = [_hit("a.py", "lucky", 0.030), _hit("b.py", "first", 0.028), _hit("c.py", "one", 0.021),
            _hit("b.py", "second", 0.020), _hit("b.py", "third", 0.001)]
    hits[0].why["written"] = {"at": "a.py:3", "score": 0.004}  # what the lines gave it: its file leaves it out
    units = [(h.capsule.repo, h.capsule.path, h.score - 0.004 * (i == 0)) for i, h in enumerate(hits)]
    for agg in ("max", "top2", "sum", "rrf"):
        light = unit_files(units, agg)
        assert [(f.path, f.score) for f in light] == [(f.path, f.score) for f in to_files(hits, agg)]
        assert all(f.repo == "r" and not f.capsules for f in light)
    # a.py's best unit scores 0.030, of which its file counts 0.026: below b.py's 0.028
    assert _file_keys(unit_files(units)) == _file_keys(to_files(hits)) == [("r", "b.py"), ("r", "a.py"), ("r", "c.py")]


def test_a_units_file_counts_in_its_place_but_never_overturns_the_ranking():
    from repoctx.retrieve.hybrid import file_prior
    from repoctx.types import FileHit

    files = [FileHit("top.py", 1.0)] + [FileHit(f"f{i}.py", 0.5) for i in range(30)] + [FileHit("far.py", 0.1)]
    # a unit of the best file passes the unit just above it when that one's file ranks last
    far, top = _hit("far.py", "far", 0.03), _hit("top.py", "top", 0.029)
    assert [h.capsule.name for h in file_prior([far, top], files)] == ["top", "far"]
    assert top.why["file_prior"] == {"was": 2, "file_rank": 1} and far.why["file_prior"] == {"was": 1, "file_rank": 32}
    # ... but not a unit of the second file, nor one far above it
    hits = [_hit("f0.py", "second", 0.03)] + [_hit(f"f{i}.py", f"u{i}", 0.02) for i in range(1, 29)]
    hits.append(_hit("top.py", "deep", 0.01))
    out = file_prior(hits, files)
    assert out[0].capsule.name == "second" and out.index(hits[-1]) > 0 and "file_prior" not in out[0].why
    # a unit whose file is not ranked counts as one of a file after the last; two units of one file keep their order
    a, b = _hit("x.py", "a", 0.03), _hit("top.py", "b", 0.03)
    assert [h.capsule.name for h in file_prior([a, b], files)] == ["b", "a"] and a.why["file_prior"]["file_rank"] == 33
    same = [_hit("f3.py", "p", 0.03), _hit("f3.py", "q", 0.03)]
    assert file_prior(same, files) == same and not any(h.why for h in same)


def test_a_standard_search_orders_its_first_units_by_their_files_too(tmp_path, monkeypatch):
    files = {f"steps/s{i:02d}.py": f"def invoice_step_{i}(order):\n    \"\"\"Render invoice pdf step {i}.\"\"\"\n"
             f"    return order\n" for i in range(40)}
    ix = make(tmp_path, HashEmbedder(64), files=files)
    ix.update()
    q = "render the invoice pdf of an order, step by step"
    deep = ix.search(q, k=50)  # 80 units: a function and a module a file
    for k in (1, 3, 10, 30):  # the order of the first units does not depend on how many are asked for
        assert [h.capsule.id for h in ix.search(q, k=k)] == [h.capsule.id for h in deep[:k]]
    # the files ranked as a file-level search ranks them decide: the first unit's file ranked last, the second's first
    first, second = deep[0].capsule.path, deep[1].capsule.path
    ranked: list[list[str]] = []
    real = Index.rank_files

    def moved(self, query, found, scope, resolved=None):
        out, n = real(self, query, found, scope, resolved)
        ranked.append([f.path for f in out])
        out = [f for f in out if f.path == second] + [f for f in out if f.path not in (first, second)] + \
            [f for f in out if f.path == first]
        return out, n

    monkeypatch.setattr(Index, "rank_files", moved)
    got = ix.search(q, k=10)
    assert got[0].capsule.path == second and got[0].why["file_prior"] == {"was": 2, "file_rank": 1}
    assert [h.capsule.id for h in got].index(deep[0].capsule.id) > 1  # its file now ranked last, others pass it
    assert sorted(ranked[-1]) == sorted(files)  # every candidate's file, though only ten units were asked for


def test_file_level_retrieval_aggregates_by_the_query_shape(tmp_path):
    from repoctx.retrieve.hybrid import file_aggregation, to_files

    question = "render invoice pdf"
    report = "Traceback (most recent call last):\n  File \"app.py\"\nrender invoice pdf fails"
    assert file_aggregation("auto", question) == "max" and file_aggregation("auto", report) == "top2"
    assert file_aggregation("top3", report) == "top3"
    ix = make(tmp_path, HashEmbedder(64))
    ix.update()
    for query, agg in ((question, "max"), (report, "top2")):
        expected = [(f.path, f.score) for f in to_files(ix.search(query, k=1000), agg)][:3]
        assert expected
        for files in (ix.retrieve(query, k=3, level="file", mode="standard").files, ix.search(query, k=3, level="file")):
            assert [(f.path, f.score) for f in files] == expected
    # an explicit choice is honoured by both entry points
    opts = SearchOptions(k=15, level="file", file_agg="top3")
    expected = [(f.path, f.score) for f in to_files(ix.search(report, k=1000), "top3")][:3]
    assert [(f.path, f.score) for f in ix.retrieve(report, k=3, level="file", mode="standard", options=opts).files] \
        == expected


def test_standard_search_has_a_second_stage_that_keeps_what_it_should(tmp_path, monkeypatch):
    ix = make(tmp_path, HashEmbedder(64))
    ix.update()
    question = "how is an invoice rendered as a pdf for an order"
    first = ix.search(question, k=10, options=SearchOptions(k=10, rerank=False))
    second = ix.search(question, k=10)
    assert not any("rerank" in h.why for h in first)
    assert {h.capsule.id for h in second} == {h.capsule.id for h in first}  # the same units, re-ordered
    assert any("rerank" in h.why for h in second)
    events = list(ix.stream(question, mode="standard"))
    assert any("re-ranked" in e.message for e in events if e.step == "Retrieval")
    # a question that names a unit keeps it where the first stage put it
    named = ix.search("what does make_token return for a user", k=5)
    assert named[0].capsule.qualname == "make_token" and "exact" in named[0].why and "rerank" not in named[0].why
    # a re-ranker that fails leaves the first stage's order, and the trace says so
    import repoctx.retrieve.rerank as rr

    def broken(*a, **k):
        raise RuntimeError("weights unreadable")
    monkeypatch.setattr(rr, "rerank_question", broken)
    assert [h.capsule.id for h in ix.search(question, k=10)] == [h.capsule.id for h in first]
    events = list(ix.stream(question, mode="standard"))
    assert any("second stage failed (RuntimeError)" in e.message for e in events)


def test_the_second_stage_can_be_turned_off_in_the_settings(tmp_path, monkeypatch):
    from dataclasses import replace as dc_replace

    from repoctx.config import ConfigError

    ix = make(tmp_path, HashEmbedder(64))
    ix.update()
    question = "how is an invoice rendered as a pdf for an order"
    assert any("rerank" in h.why for h in ix.search(question, k=10))
    ix.settings = dc_replace(ix.settings, second_stage=False)
    assert not any("rerank" in h.why for h in ix.search(question, k=10))
    assert not any("re-ranked" in e.message for e in ix.stream(question, mode="standard"))
    monkeypatch.setenv("REPOCTX_SECOND_STAGE", "0")
    assert Settings.from_env().second_stage is False
    monkeypatch.setenv("REPOCTX_SECOND_STAGE", "maybe")
    with pytest.raises(ConfigError, match="REPOCTX_SECOND_STAGE"):
        Settings.from_env()
    monkeypatch.delenv("REPOCTX_SECOND_STAGE")
    assert Settings.from_env().second_stage is True


def _vectors(ix, model):
    from repoctx.providers.embedding import EMBED_TEXT_VERSION

    ids, matrix, _ = ix.store.faiss_for(ix.repo).reusable(model, None, EMBED_TEXT_VERSION)
    return dict(zip(ids, matrix))


def test_an_edit_keeps_the_vectors_of_unchanged_units(tmp_path, monkeypatch):
    emb = HashEmbedder()
    ix = make(tmp_path, emb)
    ix.update()
    full, embedded = ix.last_embed.total, emb.embedded
    before = _vectors(ix, emb.model_id)
    assert len(before) == full
    (tmp_path / "repo/auth/tokens.py").write_text("def make_token(user):\n    return 'v2' + str(user)\n")
    ix.update()
    e = ix.last_embed
    # only the edited unit is read again and embedded (its module's own text, without the bodies, is unchanged)
    assert (e.total, e.kept, e.embedded, e.cached) == (full, full - 1, 1, 0)
    assert emb.embedded == embedded + 1
    after = _vectors(ix, emb.model_id)
    assert set(after) == set(before)
    changed = [cid for cid in before if not np.array_equal(before[cid], after[cid])]
    assert changed == [f"{ix.repo}:auth/tokens.py#make_token"]
    assert ix.vectors_status()["current"]
    assert ix.search("make token v2", k=1, options=SearchOptions(lexical=False))[0].capsule.qualname == "make_token"

    (tmp_path / "repo/billing/invoice.py").unlink()  # a deleted file's units leave the set
    ix.update()
    assert ix.last_embed.embedded == 0 and not any(c.startswith(f"{ix.repo}:billing/") for c in _vectors(ix, emb.model_id))
    assert len(_vectors(ix, emb.model_id)) == ix.last_embed.total == ix.last_embed.kept

    # vectors made from another version of the embedded texts are not carried over
    monkeypatch.setattr("repoctx.providers.embedding.EMBED_TEXT_VERSION", 99)
    (tmp_path / "repo/auth/login.py").write_text("def authenticate_user(username, password):\n    return False\n")
    ix.update()
    assert ix.last_embed.kept == 0 and ix.last_embed.total == len(_vectors(ix, emb.model_id))


def test_a_vector_set_without_hashes_is_rebuilt_once_then_kept(tmp_path):
    emb = HashEmbedder()
    ix = make(tmp_path, emb)
    ix.update()
    full = ix.last_embed.total
    fx = ix.store.faiss_for(ix.repo)
    ids, matrix, _ = fx.reusable(emb.model_id, None, 1)
    meta = fx.meta()
    fx.write(emb.model_id, emb.dim, ids, matrix, meta["generation"])  # as an older repoctx wrote it
    (tmp_path / "repo/auth/tokens.py").write_text("def make_token(user):\n    return 'v3'\n")
    ix.update()
    assert ix.last_embed.kept == 0 and ix.last_embed.total == full  # every unit read again (cache hits)
    (tmp_path / "repo/auth/tokens.py").write_text("def make_token(user):\n    return 'v4'\n")
    ix.update()
    assert ix.last_embed.kept == full - 1


def test_a_scoped_caller_learns_no_unit_counts_of_what_it_may_not_see(tmp_path):
    """The vectors note counts only the repositories a scope may see, and a scoped caller reads a share, not
    unit counts (a key allowed one repository was told the size of a 500k-unit store)."""
    from repoctx.store.base import Grant, Scope

    emb = HashEmbedder()
    shop = write_tree(tmp_path / "shop", FILES)
    big = write_tree(tmp_path / "vault", {f"v/m{i}.py": f"def secret_{i}():\n    return {i}\n" for i in range(40)})
    settings = Settings(index_dir=tmp_path / "store", vector_cache=tmp_path / "vectors.sqlite")
    Index(shop, settings, embedder=emb).update()  # shop: every unit embedded
    Index(big, settings, embedder=emb).update(embed=False)  # vault: none
    reader = Index(None, settings, embedder=emb)
    everything = reader.retrieve("render invoice", k=3).notes
    assert any("units" in n and " of " in n for n in everything), everything  # the operator sees counts
    scoped = Scope(grants=(Grant(repo="shop"),))
    assert reader.retrieve("render invoice", k=3, scope=scoped).notes == []  # shop is complete: nothing to say
    half = Scope(grants=(Grant(repo="shop"), Grant(repo="vault", include=("v/m1.py",))))
    notes = reader.retrieve("render invoice", k=3, scope=half).notes
    assert notes and not any(re.search(r"\d+ of \d+ units", n) for n in notes), notes  # a share only


def test_a_key_whose_grants_name_repositories_reads_only_those(tmp_path):
    """Grants that each name a repository bound a read to them (the store then takes its per-repository paths:
    a key allowed one repository of a 500k-unit store waited 3.8 s for hybrid search, 0.27 s when the request
    named that repository). What the key sees does not change."""
    from repoctx.store.base import Grant, Scope

    emb = HashEmbedder()
    shop = write_tree(tmp_path / "shop", FILES)
    other = write_tree(tmp_path / "other", {"o/invoice.py": "def render_invoice_copy(order):\n    return order\n"})
    settings = Settings(index_dir=tmp_path / "store", vector_cache=tmp_path / "vectors.sqlite")
    Index(shop, settings, embedder=emb).update()
    Index(other, settings, embedder=emb).update()
    reader = Index(None, settings, embedder=emb)
    granted = Scope(grants=(Grant(repo="shop", include=("billing/*",)),))
    assert reader.scope(granted).repos == ("shop",)
    assert reader.scope(Scope(grants=(Grant(repo="*"),))).repos == ()
    hits = reader.search("render invoice", k=5, scope=granted)
    assert hits and {h.capsule.repo for h in hits} == {"shop"}
    assert all(h.capsule.path.startswith("billing/") for h in hits)
    assert {h.capsule.id for h in hits} == {h.capsule.id for h in reader.search(
        "render invoice", k=5, scope=Scope(repos=("shop",), grants=granted.grants))}


def test_opening_the_vector_cache_writes_nothing(tmp_path):
    """A new cache gives pages back (auto_vacuum incremental); opening one again to read it writes nothing (setting
    the pragma again did: a write and a checkpoint on every open)."""
    import sqlite3

    from repoctx.vectors import VectorCache

    path = tmp_path / "vectors.sqlite"
    cache = VectorCache(path)
    cache.put_many("m", [("ab" * 16, np.ones(4, dtype=np.float32))])
    cache.close()
    before = path.read_bytes()
    again = VectorCache(path)
    assert list(again.get_many("m", ["ab" * 16])) == ["ab" * 16]
    wal = path.with_name(path.name + "-wal")
    assert not wal.exists() or wal.stat().st_size == 0
    again.close()
    assert path.read_bytes() == before
    assert sqlite3.connect(path).execute("PRAGMA auto_vacuum").fetchone()[0] == 2
    old = tmp_path / "old.sqlite"  # a cache made before auto_vacuum was set keeps its free pages for reuse
    sqlite3.connect(old).execute("CREATE TABLE t(x)").connection.close()
    VectorCache(old).close()
    assert sqlite3.connect(old).execute("PRAGMA auto_vacuum").fetchone()[0] == 0


def _long_function(name: str, words: str) -> str:
    """A function whose first 20 lines say nothing of ``words`` (more than the model reads) and whose next do."""
    filler = ["".join(f"    step_{i} = ledger_{i} + carry_{i}\n" for i in range(j, j + 20)) for j in (0, 20)]
    return f"def {name}(entries):\n{filler[0]}    # {words}\n    {words.replace(' ', '_')}(entries)\n{filler[1]}"


def test_a_functions_body_past_what_the_model_reads_comes_in_windows():
    from repoctx.retrieve.hybrid import BODY_WINDOWS, WINDOW_CHARS, body_windows
    from repoctx.types import Capsule

    def unit(text, kind="function", sig="def settle(entries):"):
        return Capsule("r:ledger/books.py:settle", "ledger/books.py", "python", kind, "settle", "Books.settle", sig,
                       1, text.count("\n"), text, "h")

    assert body_windows(unit("def settle(entries):\n    return entries\n")) == []  # one window: its own vector
    text = _long_function("settle", "quarterly rebate overflow")
    got = body_windows(unit(text))
    assert len(got) == BODY_WINDOWS
    for w in got:
        assert w.startswith("ledger/books.py :: Books.settle\ndef settle(entries):\n") and len(w) <= WINDOW_CHARS
    assert "step_0 =" not in got[0]  # the first window, which the unit's own vector reads, is not among them
    assert "quarterly rebate overflow" in got[0] and "quarterly" not in text[: WINDOW_CHARS]
    assert body_windows(unit(text, kind="class")) == [] and body_windows(unit("", sig="")) == []


def test_a_functions_further_windows_count_for_its_file_when_asked(tmp_path):
    """REPOCTX_FUNCTION_WINDOWS=1: a function whose words come late in its body lifts its file; the units keep their
    order; the windows' vectors are read from the vector cache by the next process."""
    from repoctx.render import why_text

    files = {
        "ledger/books.py": _long_function("settle", "quarterly tax rebate overflow"),
        "ledger/notes.py": 'def totals(entries):\n    """Quarterly totals of the books."""\n    return entries\n',
        **{f"misc/m{i}.py": f"def helper_{i}(x):\n    return x * {i}\n" for i in range(6)},
    }
    root = tmp_path / "repo"
    write_tree(root, files)

    def index(windows, emb):
        settings = Settings(index_dir=tmp_path / "idx", vector_cache=tmp_path / "vectors.sqlite",
                            function_windows=windows)
        return Index(root, settings, embedder=emb)

    index(False, HashEmbedder(256)).update()
    q = "quarterly tax rebate overflow"
    dense_only = SearchOptions(k=20, lexical=False, exact=False, rerank=False)
    as_files = SearchOptions(k=5, level="file", lexical=False, exact=False)

    def first_file(ix):
        return ix.search(q, k=5, level="file", options=as_files)[0].path

    plain = index(False, HashEmbedder(256))
    assert first_file(plain) == "ledger/notes.py"  # one word of it in its first lines
    units = plain.search(q, k=20, options=dense_only)
    assert all("windows" not in h.why for h in units)

    emb = HashEmbedder(256)
    ix = index(True, emb)
    assert first_file(ix) == "ledger/books.py"
    got = ix.search(q, k=20, options=dense_only)
    assert [h.capsule.id for h in got] == [h.capsule.id for h in units]  # files only: the units' order is the same
    settle = next(h for h in got if h.capsule.name == "settle")
    assert settle.why["windows"]["score"] > 0 and "body window" in why_text(settle.why)
    assert emb.embedded > 1  # the question and the windows
    lexical_only = ix.search(q, k=5, options=SearchOptions(k=5, dense=False, rerank=False))
    assert lexical_only and all("windows" not in h.why for h in lexical_only)  # no dense lane: nothing compared

    again = HashEmbedder(256)
    assert first_file(index(True, again)) == "ledger/books.py"
    assert again.embedded == 1  # the question only: the windows' vectors came from the cache
