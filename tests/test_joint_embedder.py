"""Two embedding models as one (``REPOCTX_EMBEDDER=local+local:code*0.5``): vectors side by side, the cosine a
weighted mean of the models' cosines, each model's vectors cached once, the re-ranker's name similarity under
the first model."""

import sqlite3
from types import SimpleNamespace

import numpy as np
import pytest

from repoctx import Index, Settings
from repoctx.store.base import Scope
from repoctx.providers.embedding import JointEmbedder, check_spec, embed_text, get_embedder
from repoctx.retrieve import rerank
from tests.conftest import write_tree
from tests.test_dense import FILES, HashEmbedder, make


def cached_models(tmp_path):
    db = sqlite3.connect(tmp_path / "vectors.sqlite")
    return dict(
        db.execute("SELECT m.name, count(*) FROM vec8 v JOIN models m ON m.id = v.model GROUP BY m.name").fetchall()
    )


def test_a_joint_vector_scores_the_weighted_mean_of_its_models_cosines():
    joint = get_embedder("local+local:code*0.5")
    first, second = get_embedder("local"), get_embedder("local:code")
    assert isinstance(joint, JointEmbedder)
    assert joint.model_id == f"{first.model_id}+{second.model_id}*0.5"
    assert joint.dim == first.dim + second.dim and joint.max_length == 128
    assert joint.primary.model_id == first.model_id
    texts = ["def parse_args(argv):\n    return argv", "how are command line arguments parsed"]
    v, a, b = joint.encode(texts), first.encode(texts), second.encode(texts)
    assert v.shape == (2, 768) and v.dtype == np.float32
    assert np.allclose(np.linalg.norm(v, axis=1), 1.0, atol=1e-5)
    assert float(v[0] @ v[1]) == pytest.approx((float(a[0] @ a[1]) + 0.5 * float(b[0] @ b[1])) / 1.5, abs=1e-5)
    back_a, back_b = joint.split(v)
    assert np.allclose(back_a, a, atol=1e-5) and np.allclose(back_b, b, atol=1e-5)
    assert joint.encode([]).shape == (0, 768)
    assert get_embedder("local:code+local").model_id == f"{second.model_id}+{first.model_id}"  # weights 1 unsaid


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("local+", "a model is missing around '\\+'"),
        ("+local", "a model is missing around '\\+'"),
        ("local+local:code*0", "must be a number above 0, not 0.0"),
        ("local+local:code*-1", "must be a number above 0"),
        ("local+local:code*nan", "must be a number above 0"),
        ("local+local:code*half", "'half' is not a weight"),
        ("local+nope:x", "unknown embedding provider 'nope'"),
        ("local+local:nope", "unknown local model 'nope'"),
    ],
)
def test_a_joint_spec_is_checked_before_any_work(spec, message):
    with pytest.raises(ValueError, match=message):
        check_spec(spec)
    with pytest.raises(ValueError, match=message):
        get_embedder(spec)


def test_a_joint_embedder_needs_two_models():
    with pytest.raises(ValueError, match="two models or more"):
        JointEmbedder([(HashEmbedder(), 1.0)])


def test_a_joint_index_searches_by_the_weighted_mean_and_caches_each_models_vectors_once(tmp_path):
    a, b = HashEmbedder(16, "a"), HashEmbedder(8, "b")
    joint = JointEmbedder([(a, 1.0), (b, 0.5)])
    ix = make(tmp_path, joint, "joint")
    ix.update()
    total = ix.last_embed.total
    assert a.embedded == b.embedded == total > 0 and ix.vectors_status()["indexed_model"] == "a:16+b:8*0.5"
    # the cache holds each model's vector of a text once (a unit's, and the search's names later), never the joint one
    assert set(cached_models(tmp_path)) == {"a:16", "b:8"}
    hits = ix.dense_index().search("check the password", 3)
    assert ix.search("check the password", k=1)[0].capsule.qualname == "authenticate_user"
    (unit,) = ix.store.capsules([hits[0][0]])
    text = embed_text(unit, max_length=joint.max_length)
    qa, ua = a.encode(["check the password", text])
    qb, ub = b.encode(["check the password", text])
    assert hits[0][1] == pytest.approx((float(qa @ ua) + 0.5 * float(qb @ ub)) / 1.5, abs=0.02)  # int8 rows

    # one model alone, in another index of the same code, embeds nothing: its vectors are the pair's
    alone = HashEmbedder(16, "a")
    ix_a = make(tmp_path, alone, "alone")
    ix_a.update()
    assert alone.embedded == 0 and ix_a.last_embed.cached == ix_a.last_embed.total == total
    # and the pair again, in a third index: nothing embedded either, the same nearest units
    a2, b2 = HashEmbedder(16, "a"), HashEmbedder(8, "b")
    ix2 = make(tmp_path, JointEmbedder([(a2, 1.0), (b2, 0.5)]), "again")
    ix2.update()
    assert a2.embedded == b2.embedded == 0 and ix2.last_embed.cached == total
    assert [c for c, _ in ix2.dense_index().search("check the password", 3)] == [c for c, _ in hits]


def test_a_joint_fill_that_keeps_no_cache_leaves_none_of_either_model(tmp_path):
    joint = JointEmbedder([(HashEmbedder(16, "a"), 1.0), (HashEmbedder(8, "b"), 2.0)])
    many = "".join(f"def unit_{i}(x):\n    return x + {i}\n\n\n" for i in range(300))  # more than one batch
    ix = make(tmp_path, joint, "joint", files={**FILES, "lib/many.py": many}, keep=False)
    ix.update()
    assert ix.last_embed.embedded == ix.last_embed.total > 256
    assert cached_models(tmp_path) == {}
    assert ix.search("render invoice pdf", k=1)[0].capsule.qualname == "render_invoice"


def test_a_joint_fill_takes_back_only_the_vectors_it_added(tmp_path):
    """One model's vectors kept by an index of its own (REPOCTX_CACHE_VECTORS=1) stay in the cache when a pair's
    fill that keeps nothing embeds the same texts."""
    make(tmp_path, HashEmbedder(16, "a"), "alone", keep=True).update()
    kept = cached_models(tmp_path)
    assert set(kept) == {"a:16"}
    pair = make(
        tmp_path, JointEmbedder([(HashEmbedder(16, "a"), 1.0), (HashEmbedder(8, "b"), 0.5)]), "pair", keep=False
    )
    pair.update()
    assert pair.last_embed.embedded == pair.last_embed.total  # b's vectors were missing: both models embed
    assert cached_models(tmp_path) == kept


def test_the_rerankers_name_similarity_is_the_first_models(tmp_path):
    """Weights fitted under the default model keep their name-similarity feature when the default is a pair's
    first model; the names are compared under that model alone, as they were when the weights were fitted."""
    a, b = HashEmbedder(64, "a"), HashEmbedder(64, "b")
    ix = make(tmp_path, JointEmbedder([(a, 1.0), (b, 0.5)]), "joint")
    ix.update()
    assert rerank.embedder_ids(ix) == ("a:64+b:64*0.5", "a:64")
    dense = ix.dense_index()
    names = rerank.trained_dense(SimpleNamespace(meta={"embedder": "a:64"}), dense)
    assert names is not None and names.embedder is a and names is dense.primary()
    assert rerank.trained_dense(SimpleNamespace(meta={"embedder": "b:64"}), dense) is None
    # weights fitted under the pair itself compare names under the pair
    assert rerank.trained_dense(SimpleNamespace(meta={"embedder": "a:64+b:64*0.5"}), dense) is dense
    dense.search("render the invoice", 3)  # the pair embeds the question, with both models
    before_a, before_b = a.embedded, b.embedded
    ((sim,),) = names.similarities([("render the invoice", ["render invoice (billing invoice)"])])
    assert a.embedded - before_a == 1 and b.embedded == before_b  # the name only: the question is the pair's part
    q, n = a.encode(["render the invoice", "render invoice (billing invoice)"])
    assert sim == pytest.approx(float(q @ n), abs=5e-3)
    assert np.allclose(names.vector("render the invoice"), q, atol=1e-6)


def test_the_shipped_pair_indexes_and_answers_from_its_spec(tmp_path):
    root = tmp_path / "repo"
    write_tree(root, FILES)
    settings = Settings(
        index_dir=tmp_path / "idx",
        vector_cache=tmp_path / "vectors.sqlite",
        cache_vectors=True,
        embedder="local+local:code*0.5",
    )
    ix = Index(root, settings)
    ix.update()
    assert ix.vectors_status()["current"] and ix.vectors_status()["indexed_model"].endswith("*0.5")
    assert ix.search("check a user's password", k=1)[0].capsule.qualname == "authenticate_user"
    assert set(cached_models(tmp_path)) == {"local:minilm-l6-v2-pc-int8:128", "local:minilm-code2-int8:128"}


def test_a_pair_on_postgresql_is_searched_through_an_hnsw_index_of_its_own(tmp_path, pg_url):
    """Two 384-dimensional models side by side are 768 dimensions: a store-wide search reads them through the HNSW
    index migration 7 builds for that width (the default's index serves 384 only), and finds what an exact scan does."""
    from repoctx.store.postgres import migrate
    from tests.test_scoped_dense import Spy

    migrate(pg_url)
    pair = JointEmbedder([(HashEmbedder(384, "a"), 1.0), (HashEmbedder(384, "b"), 0.5)])
    settings = Settings(database_url=pg_url, embedder="none", vector_cache=tmp_path / "vec.sqlite")
    Index(write_tree(tmp_path / "repo", FILES), settings, embedder=pair, name="shop").update()
    reader = Index(settings=settings, repos=(), embedder=pair)
    spy = Spy(reader.store)
    dense = reader.dense_index()
    hits = dense.search("check the password", 3)
    (sql, args), *_ = spy.dense_queries()
    assert "::vector(768))" in sql  # the expression the 768 index was built on
    with reader.store.pool.connection() as conn:
        conn.execute("SET enable_seqscan = off")  # a table this small would be scanned otherwise
        plan = "\n".join(r[0] for r in conn.execute("EXPLAIN " + sql, args).fetchall())
    assert "repoctx_vectors_hnsw768" in plan
    scoped = reader.dense_index().search("check the password", 3, Scope(repos=("shop",)))  # a scope: an exact scan
    assert hits and hits[0] == pytest.approx(scoped[0])  # ties below may come in another order
    assert [s for _, s in hits] == pytest.approx([s for _, s in scoped], abs=1e-5)
    assert reader.search("check the password", k=1)[0].capsule.qualname == "authenticate_user"
