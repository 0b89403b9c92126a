"""grep, outline and symbol over the indexed snapshot (issue 40), on SQLite and on a real PostgreSQL with pg_trgm.

grep's answers are checked against the real ``git grep -n -P`` on a committed fixture (literal and regex
patterns, case-insensitive, path globs, unicode, anchors, patterns without a trigram), and against a brute-force
reading of every line for generated patterns (the trigram prefilter never loses a match). Scope, redaction,
incremental updates, paging and bounds are behaviour a caller would notice."""
from __future__ import annotations

import os
import re
import sqlite3
import subprocess
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings as hsettings, strategies as st

from repoctx import Index, Scope, Settings
from repoctx.store.base import Grant, StoreError
from repoctx.store.grep import GrepLimits, PatternError, compile_pattern
from tests.conftest import write_tree

FIXTURE = {
    "src/app.py": (
        "import os\nfrom src.util import get_search_results, helper\n\n\n"
        "class ModelAdmin:\n    \"\"\"Admin for one model.\"\"\"\n\n"
        "    def get_search_results(self, request, queryset, search_term):\n"
        "        results = helper(queryset)  # 100 results max\n"
        "        return results, False\n\n"
        "    def get_queryset(self, request):\n        return self.model.objects.all()\n\n"
        "def main():\n\tadmin = ModelAdmin()\n\treturn admin.get_search_results(None, [], '')   \n"),
    "src/util.py": (
        "def helper(items):\n    return [x for x in items if x]\n\n"
        "def get_search_results(term):\n    return helper([term, 2024, 31337])\n\n"
        "def naïve_sum(values):\n    \"\"\"Sum naïvely: École, Ελλάδα, 日本語, emoji 🎉.\"\"\"\n    return sum(values);\n"),
    "src/copy_of_util.py": None,  # the same text as src/util.py (stored once)
    "src/pkg/__init__.py": "",
    "docs/guide.md": (
        "# Guide\n\nThe ÉCOLE of search: get_search_results finds results.\n\n"
        "Use `grep` for text; use symbol for a body.\nxx marks xxx the spot\nfoo|bar is not a regex here\n"
        "a.b and a*b and (x) and [y]\n"),
    "docs/café.md": "Café au lait\ncafé noir\nCAFÉ CRÈME\nno final newline here",
    "web/main.js": (
        "export function getSearchResults(q) {\n  const url = `/search?q=${q}`;\n  return fetch(url);\n}\n\n"
        "function helper() { return 42; }\n"),
    "data/blank.txt": "\n\n   \nline four\n\n",
    "README.md": "repoctx grep fixture\n\nTrailing spaces here   \nTabs\there\n",
}
FIXTURE["src/copy_of_util.py"] = FIXTURE["src/util.py"]

# (pattern, fixed, ignore_case, path globs)
CASES = [
    ("get_search_results", False, False, ()),
    ("return", False, False, ()),
    ("def ", False, False, ()),
    ("self.", True, False, ()),
    ("a.b", True, False, ()),
    ("(x)", True, False, ()),
    ("foo|bar", True, False, ()),
    ("[y]", True, False, ()),
    ("naïve", False, False, ()),
    ("École", False, False, ()),
    ("école", False, True, ()),
    ("CAFÉ", False, True, ()),
    ("RETURN", False, True, ()),
    ("Get_Search", False, True, ()),
    ("日本", False, False, ()),
    ("🎉", False, False, ()),
    (r"def [a-z_]+\(", False, False, ()),  # (PCRE's \\w is ASCII, Python's is not: naïve_sum)
    (r"^class ", False, False, ()),
    (r"^\s*$", False, False, ()),
    (r"^$", False, False, ()),
    (r"\d{3,}", False, False, ()),
    (r"\d\d", False, False, ()),
    (r"(?:get|set)_\w+", False, False, ()),
    (r"\bimport\b", False, False, ()),
    (r";$", False, False, ()),
    (r"\)$", False, False, ()),
    (r"\s+$", False, False, ()),
    (r"^\w", False, False, ()),
    (r"x{2,}", False, False, ()),
    (r"[A-Z]{3}", False, False, ()),
    (r"here$", False, False, ()),
    (r"results|helper", False, False, ()),
    (r"get_search_results\(self", False, False, ()),
    (".", False, False, ()),
    ("return", False, False, ("src/*.py",)),
    ("return", False, False, ("*.js", "docs/*")),
    ("e", False, True, ("docs/*",)),
    (r"search", False, True, ("*util*",)),
]


def _git_grep(root: Path, pattern: str, fixed: bool, ignore_case: bool, paths: tuple) -> list[tuple[str, int, str]]:
    args = ["git", "-c", "core.quotePath=false", "-C", str(root), "grep", "-n", "-z", "--no-color", "-I",
            "-F" if fixed else "-P"]
    if ignore_case:
        args.append("-i")
    args += ["-e", pattern, "--", *paths]
    out = subprocess.run(args, capture_output=True, env={**os.environ, "LC_ALL": "C.UTF-8"})
    assert out.returncode in (0, 1), out.stderr.decode()
    rows = []
    for line in out.stdout.decode("utf-8").split("\n"):
        if line:
            path, n, text = line.split("\0", 2)
            rows.append((path, int(n), text))
    return sorted(rows)


def _ours(ix: Index, pattern: str, fixed: bool = False, ignore_case: bool = False, paths: tuple = (), **kw):
    got = ix.grep(pattern, fixed=fixed, ignore_case=ignore_case, paths=paths, limit=1000, **kw)
    assert got["total_exact"] and not got["truncated"] and got["total"] == len(got["matches"]), got
    return sorted((m["path"], m["line"], m["text"]) for m in got["matches"])


def _commit(root: Path) -> None:
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@x", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@x"}
    subprocess.run(["git", "init", "-q", str(root)], check=True)
    subprocess.run(["git", "-C", str(root), "add", "-A"], check=True)
    subprocess.run(["git", "-C", str(root), "commit", "-qm", "fixture"], check=True, env=env)


def _settings(backend: str, tmp: Path) -> Settings:
    if backend == "sqlite":
        return Settings(index_dir=tmp / "ix", embedder="none")
    from repoctx.store.postgres import migrate
    from tests.pg import fresh_database

    url = fresh_database()
    migrate(url)
    return Settings(database_url=url, embedder="none")


@pytest.fixture(scope="module", params=["sqlite", "postgres"])
def fixture_index(request, tmp_path_factory):
    tmp = tmp_path_factory.mktemp(f"grep-{request.param}")
    root = write_tree(tmp / "repo", FIXTURE)
    _commit(root)
    ix = Index(root, _settings(request.param, tmp))
    ix.update()
    yield root, ix
    ix.close()


@pytest.fixture(params=["sqlite", "postgres"])
def backend(request, tmp_path):
    return lambda: _settings(request.param, tmp_path)


# ------------------------------------------------------------------------------------------------ git grep
def test_every_fixture_file_is_indexed(fixture_index):
    root, ix = fixture_index
    tracked = subprocess.run(["git", "-c", "core.quotePath=false", "-C", str(root), "ls-files"], capture_output=True,
                             text=True).stdout.split()
    assert sorted(p for _, p in ix.files()) == sorted(tracked)


@pytest.mark.parametrize("pattern,fixed,ignore_case,paths", CASES)
def test_grep_equals_git_grep(fixture_index, pattern, fixed, ignore_case, paths):
    root, ix = fixture_index
    expected = _git_grep(root, pattern, fixed, ignore_case, paths)
    assert _ours(ix, pattern, fixed, ignore_case, paths) == expected


def test_identical_files_are_stored_once_and_both_found(fixture_index):
    root, ix = fixture_index
    got = ix.grep("naive|naïve", limit=50)
    assert {m["path"] for m in got["matches"]} == {"src/util.py", "src/copy_of_util.py"}
    texts = _count_texts(ix)
    assert texts == len({v for v in FIXTURE.values()})


def test_a_literal_is_found_through_the_trigram_index(fixture_index):
    _, ix = fixture_index
    got = ix.grep("getSearchResults")
    assert got["prefilter"].startswith("trigrams of") and got["files_scanned"] == 1
    assert [(m["path"], m["line"]) for m in got["matches"]] == [("web/main.js", 1)]
    none = ix.grep(r"\d\d")
    assert none["prefilter"].startswith("none") and none["files_scanned"] == len(FIXTURE)


def test_context_lines(fixture_index):
    _, ix = fixture_index
    m = ix.grep("return results", context=2)["matches"][0]
    assert (m["path"], m["line"]) == ("src/app.py", 10)
    assert m["before"] == ["    def get_search_results(self, request, queryset, search_term):",
                           "        results = helper(queryset)  # 100 results max"]
    assert m["after"] == ["", "    def get_queryset(self, request):"]
    first = ix.grep("^import os", context=3)["matches"][0]
    assert first["line"] == 1 and first["before"] == [] and len(first["after"]) == 3


# ------------------------------------------------------------------------------------------------ paging
def test_paging_visits_each_match_once(fixture_index):
    _, ix = fixture_index
    whole = ix.grep("e", limit=1000)
    assert whole["total"] > 30
    seen, offset, pages = [], 0, 0
    while offset is not None:
        page = ix.grep("e", limit=7, offset=offset)
        assert page["total"] == whole["total"] and len(page["matches"]) <= 7
        seen += [(m["repo"], m["path"], m["line"]) for m in page["matches"]]
        assert page["truncated"] == (page["next_offset"] is not None)
        offset = page["next_offset"]
        pages += 1
    assert seen == [(m["repo"], m["path"], m["line"]) for m in whole["matches"]]
    assert len(set(seen)) == len(seen) == whole["total"] and pages == -(-whole["total"] // 7)
    assert seen == sorted(seen)
    past = ix.grep("e", offset=whole["total"] + 5)
    assert past["matches"] == [] and past["total"] == whole["total"] and past["next_offset"] is None


def test_bounds_say_what_they_cut(fixture_index):
    _, ix = fixture_index
    ix.grep_limits = GrepLimits(max_file_matches=2)
    try:
        got = ix.grep("e", limit=1000)
        assert not got["total_exact"] and got["truncated"] and got["cut"][0].startswith("per file:")
        assert max(sum(1 for m in got["matches"] if m["path"] == p) for p in {m["path"] for m in got["matches"]}) == 2
        ix.grep_limits = GrepLimits(max_seconds=0.0)
        got = ix.grep(".", limit=10)
        assert got["cut"] and got["cut"][0].startswith("time:") and not got["total_exact"]
        ix.grep_limits = GrepLimits(max_total=5)
        got = ix.grep(".", limit=1000)
        assert got["total"] >= 5 and got["cut"][-1].startswith("count:") and not got["total_exact"]
        ix.grep_limits = GrepLimits(max_line_chars=10)
        assert ix.grep("Trailing spaces")["matches"][0]["text"] == "Trailing s…"
    finally:
        ix.grep_limits = GrepLimits()


def test_bad_arguments_and_bad_regex(fixture_index):
    _, ix = fixture_index
    with pytest.raises(PatternError, match=r"unterminated character set at position 2") as e:
        ix.grep("ab[c")
    assert isinstance(e.value, ValueError) and e.value.position == 2
    with pytest.raises(ValueError, match="missing \\), unterminated subpattern at position 0"):
        ix.grep("(abc")
    with pytest.raises(ValueError, match="nothing to repeat at position 0"):
        ix.grep("*.py")
    assert ix.grep("*.py", fixed=True)["total"] == 0
    with pytest.raises(ValueError, match="limit"):
        ix.grep("x", limit=0)
    with pytest.raises(ValueError, match="context"):
        ix.grep("x", context=99)
    with pytest.raises(ValueError, match="path pattern"):
        ix.grep("x", paths=("src/[",))


# ------------------------------------------------------------------------------------------------ the prefilter
_ALPHABET = "aAbeEiIıİkKKsSſxé É_.(\t1"


@hsettings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.sampled_from(["ab", "abe", "bea", "ı", "İ", "K", "ſ", "s", "k", "é", "É", "x", ".", "a|b",
                                 "[ab]", "[iI]", "\\w", "\\d", "e+", "(ke|sa)", "^", "$", "(?i:as)", "x?", "_", " ",
                                 "abes", "KISS", "kis", "(abe){2}"]), min_size=1, max_size=6),
       st.booleans())
def test_the_prefilter_never_loses_a_line(prefilter_index, parts, ignore_case):
    """Generated patterns over text with the characters case folding treats differently (ı İ K ſ É): what grep
    returns is what reading every line with ``re`` returns, on both backends."""
    pattern = "".join(parts)
    try:
        rx = re.compile(pattern, re.MULTILINE | (re.IGNORECASE if ignore_case else 0))
    except re.error:
        return
    ix, texts = prefilter_index
    expected = sorted((path, i, line) for path, text in texts.items()
                      for i, line in enumerate(text.split("\n")[:-1] if text.endswith("\n") else text.split("\n"), 1)
                      if rx.search(line))
    assert _ours(ix, pattern, ignore_case=ignore_case) == expected


@pytest.fixture(scope="module", params=["sqlite", "postgres"])
def prefilter_index(request, tmp_path_factory):
    import random

    rnd = random.Random(40)
    words = ["abe", "bea", "KISS", "kıss", "KİSS", "ſabes", "ABES", "école", "ÉCOLE", "x_ke", "sa", "(abe)", "1.5",
             "İstanbul", "\tkiss", "abeabe", "beab", "a b", "as", "AS"]
    texts = {f"f{i}.txt": "".join(" ".join(rnd.choice(words) for _ in range(rnd.randint(0, 4))) + "\n"
                                  for _ in range(rnd.randint(1, 6))) for i in range(40)}
    tmp = tmp_path_factory.mktemp(f"pre-{request.param}")
    root = write_tree(tmp / "repo", texts)
    ix = Index(root, _settings(request.param, tmp))
    ix.update()
    assert len(ix.files()) == len(texts)
    yield ix, texts
    ix.close()


def test_trigram_derivation():
    def shown(pattern, **kw):
        return compile_pattern(pattern, **kw).describe()

    assert shown("get_search_results") == "trigrams of 'get_search_results'"
    assert shown("foo|barbaz") == "trigrams of ('barbaz' OR 'foo')"
    assert shown(r"def (get|set)_\w+\(self") == "trigrams of (('def get_?' OR 'def set_?') AND '?(self')"
    assert shown("abc+") == "trigrams of 'abc'"
    assert shown(r"\w+_id") == "trigrams of '?_id'"
    assert shown("a.b.c").startswith("none")
    assert shown("ab|c").startswith("none")  # an alternative without a trigram: every file may match
    assert shown("(abc)?def").startswith("trigrams of 'def'")
    # under ignore_case, letters re folds with characters the indexes do not (i/ı/İ, k/K, s/ſ) are alternatives
    assert shown("Kiss", ignore_case=True) == "trigrams of '????'"
    assert shown("ÉCOLE", ignore_case=True) == "trigrams of '?cole'"
    # PostgreSQL: LIKE of what pg_trgm can take trigrams from (words of 3, or of 2 between non-word characters)
    from repoctx.store.grep import fts5_query, postgres_filter

    assert postgres_filter(compile_pattern(r"def \w+_id\(").prefilter, "t", False) == \
        ("(t LIKE %s AND t LIKE %s)", ["%def _%", "%_\\_id(%"])
    assert postgres_filter(compile_pattern("x.ab.c").prefilter, "t", False) is None
    assert postgres_filter(compile_pattern("Kiss", ignore_case=True).prefilter, "t", True) is None
    assert postgres_filter(compile_pattern("content-type", ignore_case=True).prefilter, "t", True) == \
        ("t ILIKE %s", ["%content-type%"])
    assert fts5_query(compile_pattern("abcd").prefilter) == '("abc" AND "bcd")'


# ------------------------------------------------------------------------------------------------ scope
def test_a_grant_that_excludes_a_path_never_yields_its_lines(fixture_index):
    _, ix = fixture_index
    everything = {m["path"] for m in ix.grep(".", limit=1000)["matches"]}
    assert "docs/guide.md" in everything and "src/util.py" in everything
    hidden = Scope(grants=(Grant("*", exclude=("docs/*", "src/util.py")),))
    for pattern in (".", "get_search_results", "ÉCOLE", r"^\s*$"):
        got = ix.grep(pattern, scope=hidden, limit=1000)
        assert not {m["path"] for m in got["matches"]} & {"docs/guide.md", "docs/café.md", "src/util.py"}
    assert ix.grep("ÉCOLE", scope=hidden)["total"] == 0
    # a request's paths narrow the scope, they never widen it
    only_src = Scope(include=("src/*",))
    assert ix.grep("ÉCOLE", scope=only_src, paths=("docs/*",))["total"] == 0
    assert ix.grep(".", repos=["someone-else"])["total"] == 0
    assert ix.grep(".", repos=[])["total"] == 0
    assert ix.grep("ÉCOLE", repos=[ix.repo])["total"] == 1
    # outline and symbol answer a hidden file as an absent one
    assert ix.outline("src/util.py", scope=hidden)["units"] == []
    assert ix.outline("src/util.py", scope=hidden)["hint"] == ix.outline("src/nope.py")["hint"].replace(
        "src/nope.py", "src/util.py")
    assert {m["path"] for m in ix.symbol("get_search_results", scope=hidden)["matches"]} == {"src/app.py",
                                                                                          "src/copy_of_util.py"}
    assert ix.store.file_text(ix.repo, "src/util.py", hidden) is None
    assert ix.store.file_text(ix.repo, "src/util.py").startswith("def helper")


# ------------------------------------------------------------------------------------------------ redaction
SECRET = "sk_live_51HxQ2fLkJd8sP3mZ9qRtYvWnX4cB7eA"


def test_grep_never_shows_what_the_index_redacted(backend, make_repo):
    root = make_repo({"conf/settings.py": f'import os\nSTRIPE_KEY = "{SECRET}"\nDEBUG = True\n',
                      "conf/other.py": "def f():\n    return 'sk_live_'\n"})
    ix = Index(root, backend())
    try:
        report = ix.update()
        assert "conf/settings.py" in report.redacted
        for pattern, fixed in ((SECRET, True), ("51HxQ2fL", True), (r"sk_live_\w{10,}", False), (".", False),
                               ("Q2f", False)):
            for m in ix.grep(pattern, fixed=fixed, limit=1000)["matches"]:
                assert "51HxQ2fL" not in m["text"]
        lines = [m["text"] for m in ix.grep("STRIPE", context=1)["matches"]]
        assert lines == ['STRIPE_KEY = "[REDACTED]"']
        assert ix.grep(SECRET, fixed=True)["total"] == 0
        assert SECRET not in (ix.store.file_text(ix.repo, "conf/settings.py") or "")
    finally:
        ix.close()


# ------------------------------------------------------------------------------------------------ updates
def _count_texts(ix: Index) -> int:
    if ix.store.backend == "sqlite":
        return ix.store.db.execute("SELECT count(*) FROM texts").fetchone()[0]
    return ix.store._q("SELECT count(*) FROM repoctx_texts")[0][0]


def test_an_update_is_seen_by_grep(backend, make_repo):
    root = make_repo({"a.py": "def alpha():\n    return 'first'\n", "b.py": "def beta():\n    return 'second'\n",
                      "c.py": "def gamma():\n    return 'second'\n"})
    ix = Index(root, backend())
    try:
        ix.update()
        assert _ours(ix, "second") == [("b.py", 2, "    return 'second'"), ("c.py", 2, "    return 'second'")]
        assert _count_texts(ix) == 3
        (root / "a.py").write_text("def alpha():\n    # now mentions zebra\n    return 'first'\n")
        (root / "b.py").unlink()
        report = ix.update()
        assert report.modified == ["a.py"] and report.deleted == ["b.py"]
        assert _ours(ix, "zebra") == [("a.py", 2, "    # now mentions zebra")]
        assert _ours(ix, "second") == [("c.py", 2, "    return 'second'")]
        assert _ours(ix, "first") == [("a.py", 3, "    return 'first'")]
        assert _count_texts(ix) == 2  # the old text of a.py and b.py's are gone, not orphaned
        (root / "c.py").write_text((root / "a.py").read_text())  # two files, one text
        ix.update()
        assert _count_texts(ix) == 1 and [p for p, _, _ in _ours(ix, "zebra")] == ["a.py", "c.py"]
        (root / "a.py").unlink()
        ix.update()
        assert _count_texts(ix) == 1 and [p for p, _, _ in _ours(ix, "zebra")] == ["c.py"]
    finally:
        ix.close()


OLDER_SCHEMAS = {
    # schema 2: no texts at all
    2: "DROP TABLE text_fts; DROP TABLE texts; DROP INDEX files_text; ALTER TABLE files DROP COLUMN text_hash; "
       "UPDATE meta SET value='2' WHERE key='schema_version';",
    # schema 3 (a few hours of issue 40): zlib-compressed texts in a BLOB column
    3: "DROP TABLE text_fts; DROP TABLE texts; CREATE TABLE texts(id INTEGER PRIMARY KEY, repo TEXT NOT NULL, hash TEXT "
       "NOT NULL, data BLOB NOT NULL, UNIQUE(repo, hash)); INSERT INTO texts(repo, hash, data) SELECT repo, text_hash, "
       "x'00' FROM files; CREATE VIRTUAL TABLE text_fts USING fts5(text, content='', tokenize='trigram', "
       "detail='none'); UPDATE meta SET value='3' WHERE key='schema_version';",
}


@pytest.mark.parametrize("version", sorted(OLDER_SCHEMAS))
def test_an_index_from_before_grep_is_rebuilt_with_its_texts(make_repo, tmp_path, version):
    """An older SQLite index (no texts, or schema 3's compressed ones) is named as another version's when opened
    read-only, and rebuilt whole by the next update (schema 5 changed every table grep's texts sit beside)."""
    from repoctx.store.base import SchemaMismatch
    from repoctx.store.sqlite import SCHEMA_VERSION

    root = make_repo({"a.py": "def alpha():\n    return 'first'\n", "b.md": "# notes\nalpha beta\n"})
    settings = Settings(index_dir=tmp_path / "ix", embedder="none")
    ix = Index(root, settings)
    ix.update()
    ix.close()
    db = sqlite3.connect(tmp_path / "ix" / "index.sqlite")
    db.executescript(OLDER_SCHEMAS[version])
    db.close()
    with pytest.raises(SchemaMismatch, match="repoctx index"):
        Index(root, settings, create=False)
    ix = Index(root, settings)
    try:
        assert ix.store.meta("schema_version") == str(SCHEMA_VERSION)
        report = ix.update()
        assert report.capsules_written > 0
        assert _ours(ix, "alpha") == [("a.py", 1, "def alpha():"), ("b.md", 2, "alpha beta")]
        assert not ix.update().changed
    finally:
        ix.close()


def test_postgres_names_a_missing_extension():
    import psycopg

    from repoctx.store.postgres import require_extension
    from tests.pg import fresh_database

    with psycopg.connect(fresh_database(), autocommit=True) as conn:
        with pytest.raises(StoreError, match="does not have the extension no_such_ext_40 \\(grep's trigram index"):
            require_extension(conn, "no_such_ext_40", "grep's trigram index")
        require_extension(conn, "pg_trgm", "grep's trigram index")
        assert conn.execute("SELECT 1 FROM pg_extension WHERE extname = 'pg_trgm'").fetchone()


# ------------------------------------------------------------------------------------------------ outline, symbol
GRAPH = {
    "shop/models.py": (
        "class Base:\n    def save(self):\n        return self.validate()\n\n"
        "    def validate(self):\n        return True\n\n"
        "class Order(Base):\n    def total(self):\n        return sum_lines(self)\n\n"
        "    class Meta:\n        ordering = ['id']\n\n"
        "def sum_lines(order):\n    def add(a, b):\n        return a + b\n    return 0\n"),
    "shop/checkout.py": (
        "from shop.models import Order, sum_lines\n\n"
        "def checkout(cart):\n    order = Order()\n    order.save()\n    sum_lines(order)\n    return order\n\n"
        "def refund(cart):\n    return sum_lines(cart)\n"),
    "shop/admin.py": "class Invoice:\n    def save(self):\n        return 1\n",
    "docs/notes.md": "# Notes\nNothing to parse here.\n",
}


@pytest.fixture(scope="module", params=["sqlite", "postgres"])
def graph_index(request, tmp_path_factory):
    tmp = tmp_path_factory.mktemp(f"graph-{request.param}")
    ix = Index(write_tree(tmp / "shop", GRAPH), _settings(request.param, tmp))
    ix.update()
    yield ix
    ix.close()


def test_outline_lists_units_with_their_callers(graph_index):
    out = graph_index.outline("shop/models.py")
    assert out["path"] == "shop/models.py" and out["language"] == "python" and out["hint"] is None
    rows = [(u["qualname"], u["kind"], u["depth"], u["parent"], u["start_line"], u["end_line"], u["callers"])
            for u in out["units"]]
    assert rows == [("Base", "class", 0, None, 1, 6, 0),
                    ("Base.save", "method", 1, "Base", 2, 3, 1),  # checkout's order.save()
                    ("Base.validate", "method", 1, "Base", 5, 6, 1),  # Base.save
                    ("Order", "class", 0, None, 8, 13, 1),  # checkout's Order()
                    ("Order.total", "method", 1, "Order", 9, 10, 0),
                    ("Order.Meta", "class", 1, "Order", 12, 13, 0),
                    ("sum_lines", "function", 0, None, 15, 18, 3),  # total, checkout, refund
                    ("sum_lines.add", "function", 1, "sum_lines", 16, 17, 0)]
    assert out["units"][1]["signature"] == "def save(self)"
    assert out["units"][1]["citation"] == "shop/models.py:2-3 :: Base.save"
    # callers are counted in scope: a caller the scope hides is not counted
    hidden = graph_index.outline("shop/models.py", scope=Scope(exclude=("shop/checkout.py",)))
    assert [u["callers"] for u in hidden["units"] if u["qualname"] == "sum_lines"] == [1]


def test_outline_of_a_file_without_units_or_unknown(graph_index):
    md = graph_index.outline("./docs/notes.md")
    assert md["units"] == [] and md["path"] == "docs/notes.md" and "grep" in md["hint"]
    gone = graph_index.outline("models.py")
    assert gone["units"] == [] and "shop/models.py" in gone["hint"]


def test_symbol_lists_every_match(graph_index):
    got = graph_index.symbol("save")
    assert got["total"] == 2 and not got["truncated"]
    assert [m["citation"] for m in got["matches"]] == ["shop/admin.py:2-3 :: Invoice.save",
                                                       "shop/models.py:2-3 :: Base.save"]
    assert got["matches"][1]["text"] == "    def save(self):\n        return self.validate()"
    orders = graph_index.symbol("Order")
    assert [(m["path"], m["kind"]) for m in orders["matches"]] == [("shop/models.py", "class")]
    assert orders["matches"][0]["text"].startswith("class Order(Base):") and "class Meta" in orders["matches"][0]["text"]
    one = graph_index.symbol("Base.save")
    assert [m["citation"] for m in one["matches"]] == ["shop/models.py:2-3 :: Base.save"]
    for spelled in ("shop.models.Order.total", "shop/models.py:Order.total", "shop/models.py::Order.total",
                    "shop/models.py:9-10 :: Order.total", "Order.total"):
        assert [m["citation"] for m in graph_index.symbol(spelled)["matches"]] == \
            ["shop/models.py:9-10 :: Order.total"], spelled
    assert graph_index.symbol("shop/admin.py:save")["matches"][0]["qualname"] == "Invoice.save"
    assert graph_index.symbol("shop/checkout.py:save")["matches"] == []
    capped = graph_index.symbol("save", limit=1)
    assert capped["total"] == 2 and capped["truncated"] and len(capped["matches"]) == 1 and "2 definitions" in \
        capped["hint"]


def test_symbol_none_gives_a_hint(graph_index):
    got = graph_index.symbol("Receipt.save")
    assert got["matches"] == [] and got["total"] == 0 and "Receipt.save" in got["hint"]
    assert got["did_you_mean"] == ["Base.save", "Invoice.save"]
    nothing = graph_index.symbol("no_such_thing")
    assert nothing["matches"] == [] and nothing["did_you_mean"] == [] and "grep" in nothing["hint"]
    hidden = graph_index.symbol("save", scope=Scope(exclude=("shop/*",)))
    assert hidden["matches"] == [] and hidden["did_you_mean"] == []


def test_two_repositories_in_one_store(backend, make_repo):
    """grep reads every repository of a view, each file under its own repository; dropping one leaves the other's
    texts (and its trigram index) whole."""
    settings = backend()
    one = make_repo({"x.py": "def shared():\n    return 'one'\n"}, name="one")
    two = make_repo({"x.py": "def shared():\n    return 'two'\n", "y.py": "def shared():\n    return 'one'\n"},
                    name="two")
    for root in (one, two):
        ix = Index(root, settings)
        ix.update()
        ix.close()
    ix = Index(settings=settings, repos=())
    try:
        got = [(m["repo"], m["path"], m["line"]) for m in ix.grep("shared|'one'", limit=100)["matches"]]
        assert got == [("one", "x.py", 1), ("one", "x.py", 2), ("two", "x.py", 1), ("two", "y.py", 1),
                       ("two", "y.py", 2)]
        assert ix.grep("'one'", repos=["two"])["total"] == 1
        assert _count_texts(ix) == 3  # one per repository and content: one/x.py and two/y.py are not shared
        ix.store.drop_repo("one")
        assert [(m["repo"], m["path"]) for m in ix.grep("'one'")["matches"]] == [("two", "y.py")]
        assert _count_texts(ix) == 2
        ix.store.drop_repo("two")
        assert ix.grep("shared")["total"] == 0 and _count_texts(ix) == 0
    finally:
        ix.close()


# ----------------------------------------------------------------------------------- the RE2 sieve
_ATOMS = ["a", "b", "é", "K", "1", "٣", "_", "-", " ", ".", r"\d", r"\w", r"\s", r"\D", r"\W", r"\S", "[a-c]",
          "[^a]", r"[\d_]", r"\b", r"\B", "^", "$", r"(?=a)", r"(?!b)", r"(?<=a)", r"\A", r"\Z", "(?:ab|1)"]
_TEXT_CHARS = "ab1٣_- .\tKéÉ\u212a\u0131x\n"


@hsettings(max_examples=600, deadline=None)
@given(parts=st.lists(st.tuples(st.sampled_from(_ATOMS), st.sampled_from(["", "*", "+", "?", "{2}", "{1,3}"])),
                      min_size=1, max_size=5),
       text=st.text(alphabet=_TEXT_CHARS, max_size=60))
def test_the_re2_sieve_never_skips_a_text_with_a_matching_line(parts, text):
    """The sieve matches a superset: where any line matches the Python pattern, RE2 finds something in the
    whole text (a sieve that skipped it would lose a grep result)."""
    from repoctx.store.grep import compile_pattern, match_lines

    pattern = "".join(a + (q if a not in ("^", "$", r"\b", r"\B", r"\A", r"\Z") and not a.startswith("(?")
                           else "") for a, q in parts)
    try:
        plan = compile_pattern(pattern)
    except ValueError:
        return
    lines = text.split("\n")
    if text.endswith("\n") or not text:  # an empty file has no line, as git counts them
        lines.pop()
    expected = [i for i, line in enumerate(lines, 1) if plan.regex.search(line)]
    if expected and plan.sieve is not None:
        assert plan.sieve.search(text) is not None, (pattern, text)
    assert match_lines(plan, text, 10_000)[0] == expected, (pattern, text)
