"""The re-ranker's overlap features with cached tokens (``tokens.name_token_set``, ``tokens.term_forms``) are
the same values as before the caches: the old ``name_tokens``/``term_in`` are kept here as the reference, and
the scores and order of a fixed lane were recorded with the code before the change."""

from __future__ import annotations

import pytest
from hypothesis import given, settings, strategies as st

from repoctx.retrieve.agentic import content_terms
from repoctx.retrieve.rerank import _overlap, lane_features, load_reranker
from repoctx.tokens import ABBREVIATIONS, base_forms, code_tokens, name_token_set, name_tokens, term_forms, term_in
from repoctx.types import Capsule, Hit


def ref_term_in(term: str, tokens: set[str]) -> bool:  # tokens.term_in before the cache
    return (
        term in tokens
        or any(a in tokens for a in ABBREVIATIONS.get(term, ()))
        or any(f in tokens for f in base_forms(term))
    )


def ref_name_tokens(text: str) -> set[str]:  # tokens.name_tokens before the cache
    toks = set(code_tokens(text))
    return toks | {t.rstrip("0123456789") for t in toks if t[-1].isdigit() and len(t.rstrip("0123456789")) > 2}


def ref_overlap(terms: list[str], text: str) -> float:  # rerank._overlap before the cache
    if not terms:
        return 0.0
    toks = ref_name_tokens(text)
    return sum(1 for t in terms if ref_term_in(t, toks)) / len(terms)


WORDS = [
    "sqlite3",
    "py3k",
    "HTTPServer",
    "get_json",
    "URLRouter",
    "resolved",
    "entries",
    "stopped",
    "running",
    "config",
    "cfg",
    "conf",
    "database",
    "db",
    "__init__",
    "_cull",
    "LocMemCache",
    "x2",
    "ab12",
    "IPv6Address",
    "utf8",
    "md5sum",
    "base64",
    "the",
    "is",
    "A",
    "a_b_c",
    "ABCDef",
    "parse_args",
    "tokenizing",
    "tokenize",
    "memory",
    "mem",
    "values",
    "val",
    "déjà",
    "Ünïcode",
    "x",
    "9lives",
    "v2beta1",
    "HTTP2Connection",
]
texts = st.lists(
    st.one_of(st.sampled_from(WORDS), st.text(alphabet="aAbBqQzZ_0129 .-/:()\n\tçé", max_size=24)), max_size=40
).map(lambda parts: " ".join(parts))
terms = st.one_of(
    st.sampled_from([*ABBREVIATIONS, *(w.lower() for w in WORDS), "caches", "copied", "matrices", "entry"]),
    st.text(alphabet="abcdeilnorsty3", min_size=1, max_size=12),
)


@settings(max_examples=400, deadline=None)
@given(texts)
def test_name_tokens_as_before(text):
    expected = ref_name_tokens(text)
    assert name_tokens(text) == expected
    assert name_token_set(text) == expected
    assert name_token_set(text) == expected  # from the cache now
    long = (text + "\n") * 40  # past the short-text cache
    assert name_token_set(long) == ref_name_tokens(long)


@settings(max_examples=400, deadline=None)
@given(terms, texts)
def test_term_in_and_overlap_as_before(term, text):
    toks = ref_name_tokens(text)
    assert term_in(term, toks) == ref_term_in(term, toks)
    assert term_in(term, name_token_set(text)) == ref_term_in(term, toks)
    assert term in term_forms(term)
    some = [term, *term.split("e")[:2]]
    some = [t for t in some if t]
    assert _overlap(some, text) == ref_overlap(some, text)


def test_long_texts_past_every_cache():
    text = "def HTTP2Connection_sqlite3(resolved_entries): return cfg.values\n" * 2000  # > LONG_TEXT
    assert name_token_set(text) == ref_name_tokens(text)


def cap(i: int, qual: str, path: str, kind: str, doc: str, body: str, sig: str = "") -> Capsule:
    name = qual.split(".")[-1]
    return Capsule(id=f"c{i}", path=path, language="python", kind=kind, name=name, qualname=qual,
                   signature=sig or f"def {name}(self)", start_line=1, end_line=3 + 7 * i % 40, text=body,
                   content_hash=f"h{i}", docstring=doc)  # fmt: skip


CANDIDATES = [
    cap(0, "FileBasedCache._cull", "django/core/cache/backends/filebased.py", "method",
        "Remove a fraction of the files when there are too many.",
        "for fname in self._list_cache_files()[: self._max_entries // 3]:\n    self._delete(fname)"),
    cap(1, "DatabaseCache._cull", "django/core/cache/backends/db.py", "method",
        "Delete expired rows, then every third row above the maximum.",
        "cursor.execute('DELETE FROM cache WHERE expires < %s', [now])\nnum_entries = cursor.fetchone()[0]"),
    cap(2, "LocMemCache._cull", "django/core/cache/backends/locmem.py", "method", "Pop the oldest entries.",
        "if self._cull_frequency == 0:\n    self._cache.clear()\nelse:\n    self._cache.popitem(last=False)"),
    cap(3, "BaseCache", "django/core/cache/backends/base.py", "class", "Base class for cache backends.",
        "class BaseCache:\n    def __init__(self, params):\n        self.default_timeout = params.get('timeout')\n"
        "        self._max_entries = int(options.get('max_entries', 300))"),
    cap(4, "DatabaseWrapper.get_new_connection", "django/db/backends/sqlite3/base.py", "method",
        "Open a new sqlite3 connection with the configured settings.",
        "conn = Database.connect(**conn_params)\nconn.execute('PRAGMA foreign_keys = ON')\nreturn conn",
        "def get_new_connection(self, conn_params)"),
    cap(5, "get_json", "src/flask/wrappers.py", "function", "Parse the request body as JSON.",
        "data = self.get_data(cache=cache)\nreturn self.json_module.loads(data)", "def get_json(self, force=False)"),
    cap(6, "Config.from_envvar", "src/flask/config.py", "method",
        "Load a configuration from an environment variable pointing to a configuration file.",
        "rv = os.environ.get(variable_name)\nif not rv:\n    raise RuntimeError(...)\nreturn self.from_pyfile(rv)"),
    cap(7, "test_config_from_envvar", "tests/test_config.py", "function", "",
        "monkeypatch.setattr('os.environ', {})\napp = flask.Flask(__name__)\nassert not app.config.from_envvar('FOO')"),
    cap(8, "utils", "src/pkg/utils/py3k.py", "module", "Compatibility helpers for py3k.",
        "import sys\nPY3 = sys.version_info[0] == 3\nresolved_values = {}\n"),
    cap(9, "HTTP2Connection.stop_stream", "src/h2/connection.py", "method", "Stopped streams are resolved.",
        "self._streams.pop(stream_id)\nself.stopped = True\nrunning_tasks -= 1"),
    cap(10, "docs/cache.rst:1-40", "docs/cache.rst", "window", "",
         "Local-memory caching\n====================\nThe cache throws away the oldest entries once it reaches "
         "its maximum size (MAX_ENTRIES); the database cache culls every third row."),
    cap(11, "_make_key", "django/core/cache/backends/base.py", "function", "Build the cache key.",
        "return '%s:%s:%s' % (key_prefix, version, key)", "def _make_key(key, key_prefix, version)"),
]  # fmt: skip
QUESTIONS = [
    "How do the file-based, database and local-memory cache backends each decide which entries to throw away "
    "once the cache reaches its maximum size?",
    "where is the sqlite3 database connection configured",
    "load configuration from environment variables",
    "parse the request body as json",
    "py3k compatibility of resolved values when a stream is stopped",
]
# recorded with the code before the caches (2026-12-05, repoctx 7fff507): the shipped standard weights' scores
# for the lane of CANDIDATES under each of QUESTIONS (same degrees, ranks and counts as below), in reranked order
RECORDED = [  # one list per question of QUESTIONS, in its order
    [
        ("c11", 2.302204115524925),
        ("c5", 1.3049833856183173),
        ("c2", 0.6896986517832309),
        ("c1", 0.1485473496801233),
        ("c4", 0.09419128468295401),
        ("c9", -0.2434440668898471),
        ("c6", -0.9116921065547052),
        ("c0", -1.2155213713458122),
        ("c3", -1.8376231063970272),
        ("c10", -2.6535104274213834),
        ("c8", -6.167939218133583),
        ("c7", -6.886947709314919),
    ],
    [
        ("c11", 2.625659587289006),
        ("c5", 1.2527408997213096),
        ("c2", 0.75249189551882),
        ("c1", 0.1707936040364495),
        ("c9", -0.32090272042259016),
        ("c4", -0.41144050157127887),
        ("c6", -0.8335281545116132),
        ("c3", -1.0560576358909102),
        ("c0", -1.3876195373443365),
        ("c10", -2.918713055988426),
        ("c8", -6.167939218133583),
        ("c7", -6.886947709314919),
    ],
    [
        ("c11", 2.625659587289006),
        ("c5", 1.2527408997213096),
        ("c2", 0.75249189551882),
        ("c1", 0.24825225756919256),
        ("c4", 0.22760752246643756),
        ("c9", -0.2434440668898471),
        ("c3", -1.0560576358909102),
        ("c0", -1.3876195373443365),
        ("c6", -1.8224334360081151),
        ("c10", -3.1015617566279516),
        ("c8", -6.167939218133583),
        ("c7", -6.810664284006955),
    ],
    [
        ("c11", 2.625659587289006),
        ("c2", 0.75249189551882),
        ("c5", 0.5209024361004766),
        ("c1", 0.24825225756919256),
        ("c4", 0.22760752246643756),
        ("c9", -0.2434440668898471),
        ("c6", -0.8335281545116132),
        ("c3", -1.0560576358909102),
        ("c0", -1.3876195373443365),
        ("c10", -3.1015617566279516),
        ("c8", -6.167939218133583),
        ("c7", -6.886947709314919),
    ],
    [
        ("c11", 2.625659587289006),
        ("c5", 1.2527408997213096),
        ("c2", 0.75249189551882),
        ("c1", 0.24825225756919256),
        ("c4", 0.22760752246643756),
        ("c9", -0.12493335644767245),
        ("c6", -0.8335281545116132),
        ("c3", -1.0560576358909102),
        ("c0", -1.3876195373443365),
        ("c10", -3.1015617566279516),
        ("c8", -6.479688353264969),
        ("c7", -6.886947709314919),
    ],
]


def lane(question: str):
    hits = [Hit(c, 1.0 / (r + 1), {"lexical": {"rank": r + 1, "score": -9.0 + r * 0.7}})
            for r, c in enumerate(CANDIDATES)]  # fmt: skip
    qranks = {c.id: r for r, c in enumerate(reversed(CANDIDATES), 1)}
    counts = {c.id: i % 3 for i, c in enumerate(CANDIDATES)}
    degree = {c.id: (i % 4, (i * 5) % 7) for i, c in enumerate(CANDIDATES)}
    namesakes = {"_cull": 3, "get_json": 1, "utils": 5}
    return lane_features(content_terms(question), hits, qranks, counts, degree, namesakes)


FIELDS = {"name": "qualname", "path": "path", "doc": "docstring", "body": "text", "sig": "signature"}


@pytest.mark.parametrize("question", QUESTIONS)
def test_lane_overlaps_as_before(question):
    terms = content_terms(question)
    for f, c in zip(lane(question), CANDIDATES, strict=True):
        for feat, attr in FIELDS.items():
            assert f[feat] == ref_overlap(terms, getattr(c, attr)), (c.qualname, feat)


def scored(question: str) -> list[tuple[str, float]]:
    model = load_reranker(role="standard")
    assert model is not None
    out = [(c.id, model.score(f)) for c, f in zip(CANDIDATES, lane(question), strict=True)]
    return sorted(out, key=lambda x: -x[1])


@pytest.mark.parametrize("i", range(len(QUESTIONS)))
def test_lane_scores_and_order_as_recorded(i):
    got = scored(QUESTIONS[i])
    want = RECORDED[i]
    assert [i for i, _ in got] == [i for i, _ in want]
    assert [s for _, s in got] == pytest.approx([s for _, s in want], rel=1e-12, abs=1e-12)
