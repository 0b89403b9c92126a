"""Second-stage lane re-ranking, coverage-aware selection and parallel-implementation alignment."""
import json
import math

import pytest

from repoctx.retrieve.agentic import AgenticRetriever, focus_match, sibling_groups
from repoctx.retrieve.planner import SubQuery
from repoctx.retrieve.rerank import (WEIGHTS_FILE, LinearReranker, lane_features, load_reranker, rerank,
                                     rerank_question)
from repoctx.types import Capsule, Hit
from tests.conftest import open_index

BACKENDS = {
    "cache/backends/filebased.py": (
        "class FileBasedCache:\n"
        "    def _cull(self):\n        \"\"\"Remove a fraction of the files when there are too many.\"\"\"\n"
        "        for fname in self._list_cache_files()[: self._max_entries // 3]:\n            self._delete(fname)\n\n"
        "    def clear(self):\n        pass\n"),
    "cache/backends/db.py": (
        "class DatabaseCache:\n"
        "    def _cull(self, cursor, now):\n        \"\"\"Delete expired rows, then every third row above the maximum.\"\"\"\n"
        "        cursor.execute('DELETE FROM cache WHERE expires < %s', [now])\n\n"
        "    def clear(self):\n        pass\n"),
    "cache/backends/locmem.py": (
        "class LocMemCache:\n"
        "    def _cull(self):\n        \"\"\"Pop the oldest entries.\"\"\"\n        self._cache.popitem(last=False)\n\n"
        "    def clear(self):\n        self._cache.clear()\n"),
    "cache/backends/base.py": (
        "class BaseCache:\n"
        "    def validate_maximum_size_of_entries(self, entries):\n"
        "        \"\"\"Which entries to throw away once the cache reaches its maximum size.\"\"\"\n        return entries\n"),
}
QUESTION = ("How do the file-based, database and local-memory cache backends each decide which entries to throw "
            "away once the cache reaches its maximum size?")


def cap(qual: str, path: str = "a.py", kind: str = "function", lines: int = 3, text: str = "") -> Capsule:
    return Capsule(id=f"{path}#{qual}", path=path, language="python", kind=kind, name=qual.split(".")[-1],
                   qualname=qual, signature=f"def {qual.split('.')[-1]}()", start_line=1, end_line=lines,
                   text=text, content_hash=qual)


def test_sibling_groups_find_the_entity_that_differs():
    subs = [SubQuery(t, t) for t in ("the SQLite backend: how is autocommit managed",
                                     "the PostgreSQL backend: how is autocommit managed",
                                     "how is the password hashed")]
    groups = sibling_groups(subs)
    assert len(groups) == 1 and set(groups[0]) == {0, 1}  # the password question is no sibling
    assert "sqlite" in groups[0][0] and "postgresql" in groups[0][1] and "autocommit" not in groups[0][0]
    assert focus_match(cap("DatabaseWrapper._set_autocommit", "db/backends/sqlite3/base.py"), {"sqlite"}) == 1.0
    # abbreviations count: "local memory" is where LocMemCache lives
    assert focus_match(cap("LocMemCache._cull", "cache/locmem.py"), {"local", "memory"}) == 1.0


def test_alignment_gives_each_entity_its_own_override(make_repo, tmp_path):
    ix = open_index(make_repo(BACKENDS), tmp_path / "idx")
    ix.update()
    events = list(AgenticRetriever(ix, reranker=None).stream(QUESTION))
    aligned = [e for e in events if e.data and e.data.get("aligned")]
    assert aligned, "the sibling sub-queries were aligned"
    added = {a["added"].split(" :: ")[1] for a in aligned[0].data["aligned"]}
    assert {"DatabaseCache._cull", "LocMemCache._cull"} <= added
    result = events[-1].data["result"]
    top = [h.capsule.qualname for h in result.hits[:6]]
    assert {"FileBasedCache._cull", "DatabaseCache._cull", "LocMemCache._cull"} <= set(top)


def test_linear_reranker_round_trip_and_order():
    model = LinearReranker(["lines", "module"], [0.0, 0.0], [1.0, 1.0], [1.0, -10.0], 0.0, {"prior_shift": 1.0})
    again = LinearReranker.from_json(model.to_json())
    assert again == model
    with pytest.raises(ValueError):
        LinearReranker.from_json(json.dumps({"features": ["a"], "mean": [], "std": [1.0], "weights": [1.0]}))
    small, big, mod = cap("wrapper", lines=2), cap("implementation", lines=80), cap("m", kind="module", lines=500)
    hits = [Hit(small, 0.9, {"lexical": {"rank": 1, "score": 9.0}}), Hit(mod, 0.8, {}), Hit(big, 0.7, {})]
    feats = lane_features(["implementation"], hits, {}, {}, {})
    out = rerank(model, feats, hits)
    assert [h.capsule.qualname for h in out] == ["implementation", "wrapper", "m"]
    assert out[0].why["rerank"]["was"] == 3 and "score" in out[0].why["rerank"]


def test_a_unit_is_also_measured_against_the_rest_of_its_lane():
    """The same name overlap reads differently in a lane whose best unit matches every word and in one where
    nothing matches better: the gap to the lane's best and the count of units above it say which."""
    exact, half, none = cap("parse_template"), cap("parse"), cap("render")
    feats = lane_features(["parse", "template"], [Hit(h, 1.0, {}) for h in (half, exact, none)], {}, {}, {})
    assert [f["name"] for f in feats] == [0.5, 1.0, 0.0]
    assert [f["name_gap"] for f in feats] == [0.5, 0.0, 1.0]
    assert [round(f["name_lrank"], 6) for f in feats] == [round(math.log(2), 6), 0.0, round(math.log(3), 6)]
    alone = lane_features(["parse", "template"], [Hit(half, 1.0, {})], {}, {}, {})[0]
    assert alone["name"] == 0.5 and alone["name_gap"] == 0.0 and alone["name_lrank"] == 0.0


def test_the_question_as_one_lane_moves_all_but_the_kept_units(make_repo, tmp_path):
    ix = open_index(make_repo({"a.py": "def a():\n    pass\n"}), tmp_path / "idx")
    model = LinearReranker(["lines"], [0.0], [1.0], [1.0], 0.0, {})  # bigger units first
    sizes = {"tiny": 1, "named": 2, "big": 90, "mid": 40, "deep": 500}
    hits = [Hit(cap(q, lines=n), 1.0 / i, {}) for i, (q, n) in enumerate(sizes.items(), 1)]
    out = rerank_question(ix.store, model, ["x"], hits, "question", depth=4, keep={"a.py#named"})
    # "named" keeps its second place, the others of the first four re-ordered around it, "deep" (past the
    # depth) stays last whatever its size; scores are the first stage's
    assert [h.capsule.qualname for h in out] == ["big", "named", "mid", "tiny", "deep"]
    assert "rerank" not in out[1].why and out[0].why["rerank"]["was"] == 3 and out[0].score == hits[2].score
    assert rerank_question(ix.store, model, ["x"], hits[:1], "question") == hits[:1]


def test_selection_leaves_the_next_slot_to_an_unsure_lane(make_repo, tmp_path):
    ix = open_index(make_repo({"a.py": "def a():\n    pass\n"}), tmp_path / "idx")
    model = LinearReranker(["lines"], [0.0], [1.0], [0.0], 0.0, {"prior_shift": 0.0})
    ar = AgenticRetriever(ix, reranker=model, k=2)

    def lane(*scored):
        return [Hit(cap(q), 1.0, {"rerank": {"score": s, "was": i}}) for i, (q, s) in enumerate(scored, 1)]

    sure = lane(("sure_best", 4.0), ("sure_second", 3.5))  # p 0.98, 0.97
    unsure = lane(("unsure_best", -0.5))  # p 0.38
    assert [h.capsule.qualname for h in ar._select([sure, unsure])] == ["sure_best", "unsure_best"]


def test_shipped_weights_load_and_match_the_features():
    model = load_reranker()
    assert model is not None and WEIGHTS_FILE.exists()
    produced = lane_features(["x"], [Hit(cap("x"), 1.0, {})], {}, {}, {})[0]
    assert set(model.features) <= set(produced)
    assert model.meta["trained_on"] and all("multipart" not in p for p in model.meta["trained_on"])


def test_a_failing_reranker_is_a_failed_event_and_the_first_stage_order_stands(make_repo, tmp_path):
    ix = open_index(make_repo(BACKENDS), tmp_path / "idx")
    ix.update()

    class Broken(LinearReranker):
        def score(self, f):
            raise RuntimeError("weights corrupt")

    broken = Broken(["lines"], [0.0], [1.0], [1.0], 0.0, {})
    events = list(AgenticRetriever(ix, reranker=broken).stream(QUESTION))
    failed = [e for e in events if e.status == "FAILED"]
    assert failed and "second-stage ranking failed" in failed[0].message and "weights corrupt" in failed[0].message
    result = events[-1].data["result"]
    assert events[-1].step == "Result" and result.hits


def test_a_class_calls_what_its_methods_call(make_repo, tmp_path):
    """A class's behaviour lives in its methods: its callees are the outside units they call (calls between
    its own methods stay inside), so the re-ranker does not read every class as a leaf."""
    from repoctx.retrieve.rerank import degrees
    ix = open_index(make_repo({"m.py": (
        "def helper():\n    return 1\n\n\ndef other():\n    return 2\n\n\n"
        "class Strategy:\n    def run(self):\n        return helper() + self.step()\n\n"
        "    def step(self):\n        return other() + helper()\n")}), tmp_path / "idx")
    ix.update()
    caps = {c.qualname: c for c in ix.store.all_capsules()}
    ids = [caps["Strategy"].id, caps["Strategy.run"].id, caps["helper"].id]
    plain = degrees(ix.store, ids)
    assert plain[caps["Strategy"].id] == (0, 0)  # no call edge starts at the class itself
    deg = degrees(ix.store, ids, {caps["Strategy"].id})
    assert deg[caps["Strategy"].id][1] == 2  # helper and other, each once; run → step stays inside
    assert deg[caps["Strategy.run"].id] == plain[caps["Strategy.run"].id]
    assert deg[caps["helper"].id][0] == 2  # called from run and from step


def test_name_phrase_reads_a_name_as_words():
    from repoctx.retrieve.rerank import name_phrase
    assert name_phrase(cap("RelatedPopulator", "django/db/models/query.py")) == "related populator (django db models query)"
    assert name_phrase(cap("FDCapture._start", "src/_pytest/capture.py")) == "fd capture start (pytest capture)"


def test_name_similarity_only_under_the_model_the_reranker_was_trained_with():
    """Another embedding model's similarities mean something else, and a remote one would be paid for
    every candidate: the re-ranker then goes without them."""
    from types import SimpleNamespace

    dense = SimpleNamespace(embedder=SimpleNamespace(model_id="local:minilm"))
    index = SimpleNamespace(dense_index=lambda scope=None: dense)
    model = LinearReranker(["rank"], [0.0], [1.0], [1.0], 0.0, {"embedder": "local:minilm"})
    assert AgenticRetriever(index, reranker=model)._dense() is dense
    model.meta["embedder"] = "bedrock:amazon.titan-embed-text-v2:0"
    assert AgenticRetriever(index, reranker=model)._dense() is None
    assert AgenticRetriever(index, reranker=None)._dense() is None
    assert load_reranker().meta["embedder"].startswith("local:")  # the shipped model: the offline default


def test_each_embedding_model_gets_the_weights_fitted_under_it(tmp_path, monkeypatch):
    """The name-similarity feature holds for one model: an index under the code-tuned model loads the
    weights fitted with it; a model with no file of its own (or a file fitted under another model) gets
    the default weights."""
    from types import SimpleNamespace

    from repoctx.retrieve import rerank as rr

    default = tmp_path / "rerank_weights.json"
    monkeypatch.setattr(rr, "WEIGHTS_FILE", default)
    rr.load_reranker.cache_clear()
    try:
        assert rr.weights_file("local:minilm-code2-int8:128").name == "rerank_weights.minilm-code2-int8.json"
        assert rr.weights_file("openai:text/embed 3").name == "rerank_weights.openai_text_embed_3.json"
        assert rr.weights_file(None) == default
        mk = lambda emb, w: LinearReranker(["rank"], [0.0], [1.0], [w], 0.0, {"embedder": emb}).to_json()
        default.write_text(mk("local:minilm-l6-v2-int8:128", 1.0))
        rr.weights_file("local:minilm-code2-int8:128").write_text(mk("local:minilm-code2-int8:128", 2.0))
        rr.weights_file("local:other:128").write_text(mk("local:minilm-l6-v2-int8:128", 3.0))
        assert rr.load_reranker(embedder="local:minilm-code2-int8:128").weights == [2.0]
        assert rr.load_reranker(embedder="bedrock:amazon.titan-embed-text-v2:0").weights == [1.0]
        assert rr.load_reranker(embedder="local:other:128").weights == [1.0]  # misnamed file: not its weights
        assert rr.load_reranker().weights == [1.0]

        index = SimpleNamespace(embedder=SimpleNamespace(model_id="local:minilm-code2-int8:128"),
                                dense_index=lambda scope=None: None)
        assert AgenticRetriever(index).reranker.weights == [2.0]
        assert AgenticRetriever(SimpleNamespace(embedder=None, dense_index=lambda scope=None: None)).reranker.weights == [1.0]
    finally:
        rr.load_reranker.cache_clear()


def test_the_standard_search_takes_its_own_weights_where_they_ship(tmp_path, monkeypatch):
    """role="standard": the whole-question weights of the index's model, else that model's lane weights,
    else the default model's whole-question weights, else its lane weights."""
    from repoctx.retrieve import rerank as rr

    default = tmp_path / "rerank_weights.json"
    monkeypatch.setattr(rr, "WEIGHTS_FILE", default)
    rr.load_reranker.cache_clear()
    code, minilm = "local:minilm-code2-int8:128", "local:minilm-l6-v2-int8:128"
    mk = lambda emb, w: LinearReranker(["rank"], [0.0], [1.0], [w], 0.0, {"embedder": emb}).to_json()
    try:
        assert rr.weights_file(None, "standard").name == "rerank_weights.standard.json"
        assert rr.weights_file(code, "standard").name == "rerank_weights.standard.minilm-code2-int8.json"
        with pytest.raises(ValueError, match="role"):
            rr.weights_file(None, "judge")
        default.write_text(mk(minilm, 1.0))
        assert rr.load_reranker(embedder=minilm, role="standard").weights == [1.0]  # no standard file: lanes'
        rr.weights_file(None, "standard").write_text(mk(minilm, 4.0))
        rr.weights_file(code).write_text(mk(code, 2.0))
        rr.load_reranker.cache_clear()
        assert rr.load_reranker(embedder=minilm, role="standard").weights == [4.0]
        assert rr.load_reranker(embedder=minilm).weights == [1.0]  # the lanes keep theirs
        assert rr.load_reranker(embedder=code, role="standard").weights == [2.0]  # its own model before another's
        rr.weights_file(code, "standard").write_text(mk(code, 5.0))
        rr.load_reranker.cache_clear()
        assert rr.load_reranker(embedder=code, role="standard").weights == [5.0]
        assert rr.load_reranker(embedder=code).weights == [2.0]
    finally:
        rr.load_reranker.cache_clear()


def test_a_joint_embedder_takes_its_own_weights_else_its_first_models(tmp_path, monkeypatch):
    """A pair's weights file is named for both models and the weight; without one, its first model's weights
    serve it (``embedder_ids`` lists the pair, then that model), never the second model's."""
    from types import SimpleNamespace

    from repoctx.retrieve import rerank as rr

    monkeypatch.setattr(rr, "WEIGHTS_FILE", tmp_path / "rerank_weights.json")
    rr.load_reranker.cache_clear()
    code, minilm = "local:minilm-code2-int8:128", "local:minilm-l6-v2-int8:128"
    pair = f"{minilm}+{code}*0.5"
    mk = lambda emb, w: LinearReranker(["rank"], [0.0], [1.0], [w], 0.0, {"embedder": emb}).to_json()
    try:
        assert rr.weights_file(pair, "standard").name == (
            "rerank_weights.standard.minilm-l6-v2-int8+minilm-code2-int8x0.5.json"
        )
        rr.WEIGHTS_FILE.write_text(mk("local:default:128", 1.0))
        rr.weights_file(code, "standard").write_text(mk(code, 2.0))
        assert rr.load_reranker(embedder=(pair, minilm), role="standard").weights == [1.0]
        rr.weights_file(minilm, "standard").write_text(mk(minilm, 3.0))
        rr.load_reranker.cache_clear()
        assert rr.load_reranker(embedder=(pair, minilm), role="standard").weights == [3.0]
        rr.weights_file(pair, "standard").write_text(mk(minilm, 4.0))  # named for the pair, fitted under another
        rr.load_reranker.cache_clear()
        assert rr.load_reranker(embedder=(pair, minilm), role="standard").weights == [3.0]
        rr.weights_file(pair, "standard").write_text(mk(pair, 5.0))
        rr.load_reranker.cache_clear()
        assert rr.load_reranker(embedder=(pair, minilm), role="standard").weights == [5.0]
        assert rr.load_reranker(embedder=(pair, minilm)).weights == [1.0]  # the lanes: no file of their own
        index = SimpleNamespace(embedder=SimpleNamespace(model_id=pair, primary=SimpleNamespace(model_id=minilm)))
        assert rr.embedder_ids(index) == (pair, minilm)
        assert rr.embedder_ids(SimpleNamespace(embedder=None)) == ()
    finally:
        rr.load_reranker.cache_clear()


def test_the_shipped_standard_weights_were_fitted_for_the_standard_search():
    from repoctx.providers.embedding import get_embedder

    minilm = get_embedder("local").model_id
    model = load_reranker(embedder=minilm, role="standard")
    assert model.meta["role"] == "standard" and model.meta["embedder"] == minilm
    held = model.meta["held_out_coverage_at_10"]["all"]
    assert held["reranked"] > held["first_stage"]
    assert model is not load_reranker(embedder=minilm)


def test_the_code_tuned_model_ships_its_own_weights():
    from repoctx.providers.embedding import get_embedder

    code = get_embedder("local:code").model_id
    model = load_reranker(embedder=code)
    assert model is not None and model.meta["embedder"] == code
    assert model.meta["held_out_coverage_at_10"]["all"]["reranked"] > model.meta["held_out_coverage_at_10"]["all"]["first_stage"]
    assert load_reranker(embedder=get_embedder("local").model_id).meta["embedder"] == get_embedder("local").model_id


def test_a_training_lane_is_labelled_for_the_intent_it_serves():
    """bench/train_rerank.py: a lane's positives are the gold of its own intent (the one whose words the sub-query
    shares, then the one the lane ranks first), not every gold of the question; no gold in the lane, no positives."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
    from train_rerank import intent_gold

    intents = [{"intent": "parsing template source into nodes", "gold": ["t.py:Parser.parse", "t.py:Lexer.tokenize"]},
               {"intent": "auto-escaping rendered values", "gold": ["h.py:conditional_escape"]}]
    lane = ["h.py:conditional_escape", "t.py:Node", "t.py:Lexer.tokenize"]  # the other intent's gold ranks first
    assert intent_gold("how does the template engine parse source into a tree of nodes", lane, intents) \
        == {"t.py:Parser.parse", "t.py:Lexer.tokenize"}
    assert intent_gold("where is the output escaped", lane, intents) == {"h.py:conditional_escape"}  # ties: lane order
    assert intent_gold("anything", ["t.py:Node"], intents) == set()


def test_selection_spends_no_slot_twice_on_one_unit(make_repo, tmp_path):
    """A def nested in a function is that function to a reader, and the definitions of one name in one file
    (``@overload`` stubs) are one unit: of the k results, none repeats a unit already chosen."""
    src = ("from typing import overload\n\n\ndef collect(expr):\n    def make_term(x):\n        return x\n"
           "    return make_term(expr)\n\n\n@overload\ndef push(x: int) -> int: ...\n@overload\n"
           "def push(x: str) -> str: ...\ndef push(x):\n    return x\n\n\ndef other():\n    return 1\n\n\n"
           "def third():\n    return 2\n")
    ix = open_index(make_repo({"a.py": src}), tmp_path / "idx")
    ix.update()
    caps = {c.qualname: c for c in ix.store.file_capsules(ix.repo, "a.py")}
    pushes = [c for c in ix.store.file_capsules(ix.repo, "a.py") if c.qualname == "push"]
    assert "collect.make_term" in caps and len(pushes) >= 2
    model = LinearReranker(["lines"], [0.0], [1.0], [0.0], 0.0, {"prior_shift": 0.0})
    ar = AgenticRetriever(ix, reranker=model, k=3)

    def lane(*scored):
        return [Hit(c, 1.0, {"rerank": {"score": s, "was": i}}) for i, (c, s) in enumerate(scored, 1)]

    # the nested def and its function lead one lane, two push definitions the other: each unit once
    first = lane((caps["collect.make_term"], 1.0), (caps["collect"], 0.9), (caps["other"], -1.0))
    second = lane((pushes[0], 0.8), (pushes[1], 0.7), (caps["third"], -1.2))
    chosen = ar._select([first, second])
    assert [c.qualname for c in (h.capsule for h in chosen)] == ["collect.make_term", "push", "other"]
