"""One grammar for the path patterns of access rules, read the same way by Python, SQLite and PostgreSQL.

The red team's case: a grant excluding ``s[!x]cret/*`` excluded nothing on SQLite (whose GLOB negates with
``[^x]`` and read ``!`` literally), so every hidden file leaked. Here: the grammar itself, that case on
both stores, a property test comparing what each backend's compiled WHERE admits with the reference
matcher (real queries on a real SQLite table and a real PostgreSQL), and patterns refused where grants are
made (the key store, roles files, the CLI, the MCP keys file) and where a tool reads one."""
from __future__ import annotations

import json
import re
import sqlite3
import time
from collections import Counter

import psycopg
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st
from typer.testing import CliRunner

from repoctx import Index, Settings
from repoctx.store.base import Grant, Scope, glob_regex
from repoctx.store.globs import MAX_PATTERN, GlobError, matches, parse
from tests.conftest import write_tree

# --------------------------------------------------------------------------- the grammar


@pytest.mark.parametrize("pattern, path, ok", [
    ("*", "a/b/c.py", True), ("*.py", "a/b.py", True), ("*.py", "a/b.pyc", False), ("src/*", "src/a/b.py", True),
    ("src/*", "lib/src/a.py", False), ("**/*.py", "a/b.py", True), ("**/*.py", "b.py", False),
    ("**", "anything/at/all", True), ("a/?.py", "a/b.py", True), ("a?b", "a/b", True), ("a?b", "ab", False),
    ("a/[bc].py", "a/c.py", True), ("a/[bc].py", "a/d.py", False), ("a/[!bc].py", "a/c.py", False),
    ("a/[!bc].py", "a/d.py", True), ("a/[^bc].py", "a/d.py", True), ("a/[^bc].py", "a/b.py", False),
    ("a[!b]c", "a/c", True), ("a[^b]c", "a/c", True), ("a[!/]c", "a/c", False), ("[a-c]x", "bx", True),
    ("[a-c]x", "dx", False), ("[a-cx-z]", "y", True), ("[a-]", "-", True), ("[-a]", "-", True),
    ("[\\]]", "]", True), ("[\\]]", "\\", False), ("[!\\]]", "]", False), ("[\\-]", "-", True),
    ("[\\--/]", ".", True), ("[\\^]", "^", True), ("[\\^]", "a", False), ("[^^]", "^", False), ("[^^]", "a", True),
    ("[!!]", "!", False), ("[!!]", "a", True), ("\\*", "*", True), ("\\*", "a", False), ("\\?", "?", True),
    ("\\[x]", "[x]", True), ("\\[x]", "x", False), ("\\\\", "\\", True), ("a\\b", "ab", True), ("]", "]", True),
    ("!x", "!x", True), ("^x", "^x", True), ("a.b", "a.b", True), ("a.b", "axb", False), ("a+b", "a+b", True),
    ("a+b", "aab", False), ("(a|b)", "(a|b)", True), ("(a|b)", "a", False), ("$x", "$x", True),
    ("{a,b}", "{a,b}", True), ("{a,b}", "a", False), ("Secret/*", "secret/a", False), ("*.PY", "a.py", False),
    ("é/*", "é/x", True), ("[é-ü]", "ö", True), ("[é-ü]", "e", False), ("?", "😀", True), ("[😀-😂]", "😁", True),
    ("中*", "中文/a.py", True), ("*", "a\nb", True), ("?", "\n", True), ("[!a]", "\n", True), ("a", "a\n", False),
    ("s[!x]cret/*", "secret/a.py", True), ("s[!x]cret/*", "sxcret/a.py", False),
])
def test_grammar(pattern, path, ok):
    assert matches(pattern, path) is ok
    assert Scope(include=(pattern,)).allows("r", path) is ok
    assert Scope(grants=(Grant("*", exclude=(pattern,)),)).allows("r", path) is not ok
    assert bool(re.match(glob_regex(pattern), path)) is ok


@pytest.mark.parametrize("pattern, reason", [
    ("src/[abc", "unclosed '['"), ("[", "unclosed '['"), ("a[!", "unclosed '['"), ("[a-", "unclosed '['"),
    ("[]", "empty class"), ("[!]", "empty class"), ("[^]", "empty class"), ("[]a]", "empty class"),
    ("[z-a]", "reversed range"), ("[é-a]", "reversed range"), ("a\\", "trailing lone backslash"),
    ("[a\\", "trailing lone backslash"), ("a\x00b", "control character U+0000"), ("a\nb", "control character U+000A"),
    ("a\x7fb", "control character U+007F"), ("[\x01]", "control character U+0001"), ("\ud800", "lone surrogate"),
    ("x" * (MAX_PATTERN + 1), "longer than 500"), ("", "empty pattern"), ("[[:alpha:]]", "POSIX classes"),
    ("[[.a.]]", "POSIX classes"), ("[[=a=]]", "POSIX classes"), ("[a-c-e]", "'-'"), ("[--z]", "'-'"),
    ("[a--]", "'-'"),
])
def test_grammar_refuses(pattern, reason):
    with pytest.raises(GlobError) as e:
        parse(pattern)
    assert reason in e.value.reason, e.value.reason
    assert isinstance(e.value, ValueError)
    # refused where a rule is made, before any backend is asked
    with pytest.raises(GlobError):
        Scope(include=(pattern,))
    with pytest.raises(GlobError):
        Grant("*", exclude=(pattern,))


def test_longest_pattern_is_accepted_and_one_string_is_not_a_list():
    assert parse("x" * MAX_PATTERN).sqlite == "x" * MAX_PATTERN
    with pytest.raises(GlobError, match="list of patterns"):
        Scope(exclude="secret/*")  # a bare string would have been read as one pattern per character


@pytest.mark.parametrize("pattern, sqlite, postgres", [
    ("s[!x]cret/*", "s[^x]cret/*", r"^s[^x]cret\/.*$"),
    ("**/*.py", "*/*.py", r"^.*\/.*\.py$"),
    ("\\*\\?\\[", "[*][?][[]", r"^\*\?\[$"),
    ("[\\]\\-\\^a-c]", "[]-a-c^]", r"^[\u002d\u005d-\u005ea-c]$"),
    ("[\\^]", "^", r"^[\u005e]$"),
    ("[!\\^]", "[^^]", r"^[^\u005e]$"),
    ("[\\]-a]", "[]_-a^]", r"^[\u005d-a]$"),
    ("[é-ü]", "[é-ü]", r"^[\u00e9-\u00fc]$"),
])
def test_translations(pattern, sqlite, postgres):
    g = parse(pattern)
    assert (g.sqlite, g.postgres) == (sqlite, postgres)


def test_many_stars_do_not_backtrack_forever():
    pattern, path = "*a" * 60 + "*b", "a" * 400
    t0 = time.perf_counter()
    assert not matches(pattern, path)
    assert matches(pattern, path + "b")
    assert time.perf_counter() - t0 < 1.0


# --------------------------------------------------------------------------- the red team's case, on both stores

HIDDEN = {
    "secret/a.py": "def zq_hidden_rotation_key():\n    \"\"\"The zq hidden rotation key.\"\"\"\n    return 7731\n",
    "sxcret/b.py": "def zq_visible_sx():\n    \"\"\"A zq file the rule keeps visible.\"\"\"\n    return 1\n",
    "src/c.py": "def zq_public_api():\n    \"\"\"The zq public api.\"\"\"\n    return zq_hidden_rotation_key()\n",
}


@pytest.fixture(params=["sqlite", "postgres"])
def store_settings(request, tmp_path):
    if request.param == "sqlite":
        return Settings(index_dir=tmp_path / "store", embedder="none")
    from repoctx.store.postgres import migrate

    url = request.getfixturevalue("pg_url")
    migrate(url)
    return Settings(database_url=url, embedder="none")


def test_negated_class_exclude_hides_the_folder_on_every_backend(store_settings, tmp_path):
    ix = Index(write_tree(tmp_path / "shop", HIDDEN), store_settings, name="shop")
    ix.update()
    scope = Scope(grants=(Grant("*", exclude=("s[!x]cret/*",)),))
    assert sorted(p for _, p in ix.store.paths(scope)) == ["src/c.py", "sxcret/b.py"]
    hits = ix.search("zq hidden rotation key", k=10, scope=scope)
    assert hits and not any(h.capsule.path.startswith("secret/") for h in hits)
    text = json.dumps(ix.context("zq hidden rotation key", budget=1500, scope=scope).to_dict())
    assert "7731" not in text and "secret/a.py" not in text
    assert not ix.find("zq_hidden_rotation_key", scope)
    # the same rule with [^x], and unscoped the file is there (the check above is not vacuous)
    assert "secret/a.py" not in {p for _, p in ix.store.paths(Scope(exclude=("s[^x]cret/*",)))}
    assert "secret/a.py" in {p for _, p in ix.store.paths(Scope())}
    ix.close()


# --------------------------------------------------------------------------- every backend against the reference

PATH_CHARS = "ab/._-xé中😀 \n" + "*?[]\\!^"  # paths may hold any character but NUL
LITERAL_CHARS = "abcxyz019/._-é中😀Ω ü!^]{}()+$|@#%&,;=~'\"<>"  # written as themselves in a pattern
ESCAPABLE = LITERAL_CHARS + "*?[\\aZ"
CLASS_CHARS = "abcxyz/.-_!^]\\[éü中😀Ω09 *?"
CLASS_SPECIAL = set("]\\-[^!")


def _ok(cp: int) -> bool:
    return 0 < cp <= 0x10FFFF and not 0xD800 <= cp <= 0xDFFF


@st.composite
def cases(draw):
    """(pattern, paths): a pattern made of every kind of token, with a path built to match it, that path's
    near misses, and random paths over the characters the pattern is about (range edges included)."""
    parts, witness, edges = [], [], set()
    for _ in range(draw(st.integers(1, 7))):
        kind = draw(st.sampled_from(["lit", "lit", "esc", "star", "dstar", "one", "class", "class"]))
        if kind == "lit":
            c = draw(st.sampled_from(LITERAL_CHARS))
            parts.append(c)
            witness.append(c)
        elif kind == "esc":
            c = draw(st.sampled_from(ESCAPABLE))
            parts.append("\\" + c)
            witness.append(c)
        elif kind in ("star", "dstar"):
            parts.append("*" if kind == "star" else "**")
            witness.append(draw(st.text(st.sampled_from(PATH_CHARS), max_size=6)))
        elif kind == "one":
            parts.append("?")
            witness.append(draw(st.sampled_from(PATH_CHARS)))
        else:
            neg = draw(st.sampled_from(["", "", "!", "^"]))
            items, chars = [], []
            for _ in range(draw(st.integers(1, 4))):
                a = draw(st.sampled_from(CLASS_CHARS))
                if draw(st.booleans()):
                    b = draw(st.sampled_from(CLASS_CHARS))
                    lo, hi = sorted((a, b), key=ord)
                    items.append(("\\" + lo if lo in CLASS_SPECIAL else lo) + "-" + ("\\" + hi if hi in CLASS_SPECIAL else hi))
                    chars.append((ord(lo), ord(hi)))
                    edges.update({ord(lo) - 1, ord(lo), ord(hi), ord(hi) + 1})
                else:
                    items.append("\\" + a if a in CLASS_SPECIAL else a)
                    chars.append((ord(a), ord(a)))
                    edges.update({ord(a) - 1, ord(a), ord(a) + 1})
            if draw(st.booleans()) and not neg:
                items.append("-")  # a bare '-' last is literal
                chars.append((ord("-"), ord("-")))
            parts.append("[" + neg + "".join(items) + "]")
            inside = [cp for lo, hi in chars for cp in {lo, hi, (lo + hi) // 2}]
            outside = [ord(c) for c in PATH_CHARS + "~" if not any(lo <= ord(c) <= hi for lo, hi in chars)]
            pool = outside if neg else inside
            witness.append(chr(draw(st.sampled_from(pool))) if pool else "~")
    pattern = "".join(parts)
    target = "".join(witness)
    alphabet = sorted({c for c in PATH_CHARS + target} | {chr(cp) for cp in edges if _ok(cp)})
    paths = [target]
    for _ in range(draw(st.integers(4, 10))):  # near misses
        if not target:
            break
        i = draw(st.integers(0, len(target) - 1))
        c = draw(st.sampled_from(alphabet))
        paths.append(draw(st.sampled_from([target[:i] + target[i + 1:], target[:i] + c + target[i:],
                                           target[:i] + c + target[i + 1:], target + c, c + target,
                                           "dir/" + target, target + "/x"])))
    paths += draw(st.lists(st.text(st.sampled_from(alphabet), min_size=1, max_size=12), min_size=4, max_size=10))
    shape = draw(st.sampled_from(["include", "exclude", "grant_include", "grant_exclude"]))
    return pattern, [p for p in paths if p], shape


def _scope(shape: str, pattern: str) -> Scope:
    return {"include": lambda: Scope(include=(pattern,)), "exclude": lambda: Scope(exclude=(pattern,)),
            "grant_include": lambda: Scope(grants=(Grant("r", include=(pattern,)),)),
            "grant_exclude": lambda: Scope(grants=(Grant("*", exclude=(pattern,)),))}[shape]()


@pytest.fixture(scope="module")
def tables():
    """A real SQLite table and a real PostgreSQL table of (batch, id, repo, path)."""
    from tests.pg import fresh_database

    lite = sqlite3.connect(":memory:")
    lite.execute("CREATE TABLE t(batch INTEGER, id INTEGER, repo TEXT, path TEXT)")
    lite.execute("CREATE INDEX t_batch ON t(batch)")
    pg = psycopg.connect(fresh_database(), autocommit=True)
    assert pg.execute("SHOW server_encoding").fetchone()[0] == "UTF8"
    pg.execute("CREATE TABLE t(batch int, id int, repo text, path text)")
    pg.execute("CREATE INDEX t_batch ON t(batch)")
    yield lite, pg
    lite.close()
    pg.close()


def test_every_backend_admits_what_the_reference_admits(tables):
    """>= 2,000 generated patterns, each over a batch of paths, on SQLite and on PostgreSQL: 0 differences."""
    lite, pg = tables
    done: Counter = Counter()

    @settings(max_examples=2000, deadline=None, database=None,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much])
    @given(cases())
    def agree(case):
        pattern, paths, shape = case
        scope = _scope(shape, pattern)  # the grammar accepts every generated pattern
        want = {i for i, p in enumerate(paths) if scope.allows("r", p)}
        hits = {i for i, p in enumerate(paths) if matches(pattern, p)}
        assert want == (hits if "include" in shape else set(range(len(paths))) - hits)
        done["batch"] += 1
        batch = done["batch"]
        rows = [(batch, i, "r", p) for i, p in enumerate(paths)]
        lite.executemany("INSERT INTO t VALUES(?,?,?,?)", rows)
        where, args = scope.compile("t.repo", "t.path", "?", "sqlite")
        got = {r[0] for r in lite.execute(f"SELECT t.id FROM t WHERE t.batch=? AND {where}", [batch] + args)}
        assert got == want, ("sqlite", pattern, parse(pattern).sqlite, [paths[i] for i in got ^ want])
        done["sqlite"] += 1
        with pg.cursor() as cur:
            cur.executemany("INSERT INTO t VALUES(%s,%s,%s,%s)", rows)
        where, args = scope.compile("t.repo", "t.path", "%s", "postgres")
        got = {r[0] for r in pg.execute(f"SELECT t.id FROM t WHERE t.batch=%s AND {where}", [batch] + args)}
        assert got == want, ("postgres", pattern, parse(pattern).postgres, [paths[i] for i in got ^ want])
        done["postgres"] += 1
        done["paths"] += len(paths)
        done["admitted"] += len(want)

    agree()
    assert done["sqlite"] >= 2000 and done["postgres"] >= 2000, done
    # the paths were about the patterns: both outcomes are common
    assert 0.1 < done["admitted"] / done["paths"] < 0.9, done


@st.composite
def broken(draw):
    """A valid pattern with one defect the grammar must refuse."""
    head = draw(st.text(st.sampled_from("ab/*?._é"), max_size=8))
    tail = draw(st.text(st.sampled_from("ab/*?._é"), max_size=8))
    defect = draw(st.sampled_from([
        "[" + draw(st.text(st.sampled_from("abc!"), max_size=3)), "[]", "[!]", "[^]", "[z-a]", "[b-a]", "[ü-é]",
        "\\", "\x00", "\n", "\x1b", "[[:digit:]]", "[a-c-e]", "[--z]", "x" * (MAX_PATTERN + 1)]))
    where = draw(st.sampled_from(["middle", "end"]))
    if defect in ("\\",) or defect.startswith("[") and "]" not in defect:
        where = "end"  # (an unclosed class or a lone backslash is only a defect at the end)
    return head + defect + (tail if where == "middle" else "")


@settings(max_examples=300, deadline=None, database=None)
@given(broken())
def test_refused_patterns_are_refused_before_any_backend(pattern):
    with pytest.raises(GlobError) as e:
        parse(pattern)
    assert e.value.reason
    for make in (lambda: Scope(include=(pattern,)), lambda: Scope(exclude=(pattern,)),
                 lambda: Grant("*", include=(pattern,)), lambda: Grant("r", exclude=(pattern,))):
        with pytest.raises(GlobError):
            make()


def test_ranges_over_non_ascii_compare_code_points_on_both_backends(tables):
    """Verified, not assumed: SQLite's GLOB and PostgreSQL's regex ranges go by code point, under every
    collation the server has (a collation's order would put 'ā' between 'a' and 'ÿ')."""
    lite, pg = tables
    patterns = ["[a-ÿ]", "[!a-ÿ]", "[é-ü]", "[ÿ-😀]", "[Ω-中]", "[\\]-é]", "[ -~]", "[^ -~]", "*[é-ü]*", "[A-z]"]
    paths = ["a", "z", "é", "è", "ü", "ö", "ā", "ÿ", "Ā", "Ω", "中", "😀", "😁", "A", "Z", "[", "_", "~", "\x7f", " "]
    collations = [r[0] for r in pg.execute("SELECT collname FROM pg_collation WHERE collprovider IN ('c', 'b', 'd') "
                                           "AND collencoding IN (-1, 6) ORDER BY collname")]
    assert {"C", "ucs_basic"} <= set(collations)
    for pattern in patterns:
        want = {p for p in paths if matches(pattern, p)}
        g = parse(pattern)
        got = {p for p in paths if lite.execute("SELECT ? GLOB ?", (p, g.sqlite)).fetchone()[0]}
        assert got == want, ("sqlite", pattern, got ^ want)
        for coll in collations:
            got = {p for p in paths if pg.execute(f'SELECT %s COLLATE "{coll}" ~ %s', (p, g.postgres)).fetchone()[0]}
            assert got == want, ("postgres", coll, pattern, got ^ want)
    assert matches("[a-ÿ]", "é") and not matches("[a-ÿ]", "ā")


# --------------------------------------------------------------------------- refused where a grant is made


@pytest.fixture
def key_store(tmp_path):
    from repoctx.service.auth import KeyStore
    from repoctx.service.db import ServiceDB

    ks = KeyStore(ServiceDB(tmp_path / "service.sqlite"), cache_seconds=0, owns_db=True)
    yield ks
    ks.close()


def test_add_role_refuses_a_pattern_it_cannot_translate(key_store):
    with pytest.raises(GlobError, match=r"unclosed '\['.*exclude of a grant for repository 'shop'"):
        key_store.add_role("dev", repo="shop", include=["src/*"], exclude=["src/[secret"])
    assert key_store.role("dev") is None  # nothing was written, not even the role
    with pytest.raises(GlobError, match="empty class"):
        key_store.add_role("dev", repo="shop", include=["src/[]x"])
    role = key_store.add_role("dev", repo="shop", exclude=["s[!x]cret/*"])
    assert role.grants == (Grant("shop", (), ("s[!x]cret/*",)),)
    assert not role.scope().allows("shop", "secret/a.py") and role.scope().allows("shop", "sxcret/a.py")


def test_a_stored_grant_that_no_longer_reads_allows_nothing(key_store, caplog):
    """Written before the grammar refused it: that grant is ignored (never read as something wider),
    the role's other grants still hold, and the log says which role to fix."""
    key_store.add_role("dev", repo="docs")
    key_store.db.q("UPDATE repoctx_roles SET grants=? WHERE name=?",
                   (json.dumps([{"repo": "shop", "include": ["src/*"], "exclude": ["src/[secret"]},
                                {"repo": "docs", "include": [], "exclude": []}]), "dev"))
    with caplog.at_level("WARNING", logger="repoctx.service"):
        role = key_store.role("dev")
    assert role.grants == (Grant("docs"),)
    assert not role.scope().allows("shop", "src/a.py") and role.scope().allows("docs", "x.md")
    assert "role 'dev'" in caplog.text and "unclosed" in caplog.text


@pytest.mark.parametrize("suffix", [".toml", ".json"])
def test_roles_file_refuses_a_pattern_it_cannot_translate(tmp_path, suffix):
    from repoctx.service.auth import load_roles_file

    f = tmp_path / f"roles{suffix}"
    if suffix == ".toml":
        f.write_text('[roles.frontend]\ngrants = [{repo = "web", include = ["src/*"], exclude = ["src/[z-a]*"]}]\n')
    else:
        f.write_text(json.dumps({"roles": {"frontend": {"grants": [{"repo": "web", "exclude": ["src/[z-a]*"]}]}}}))
    with pytest.raises(GlobError, match=r"reversed range.*role 'frontend'"):
        load_roles_file(f)


def test_cli_roles_add_refuses_with_a_message_and_no_traceback(tmp_path, monkeypatch):
    from repoctx.cli.service import service_app

    monkeypatch.delenv("REPOCTX_ROLES", raising=False)
    monkeypatch.delenv("REPOCTX_DATABASE_URL", raising=False)
    monkeypatch.setenv("REPOCTX_INDEX_DIR", str(tmp_path / "ix"))
    run = CliRunner().invoke
    r = run(service_app, ["roles", "add", "dev", "--repo", "shop", "--include", "src/*", "--exclude", "src/secret\\"])
    said = " ".join(r.output.split())
    assert r.exit_code == 2, said
    assert "trailing lone backslash" in said and "src/secret" in said, said
    assert r.exception is None or isinstance(r.exception, SystemExit)
    assert "Traceback" not in said
    r = run(service_app, ["roles", "add", "dev", "--repo", "shop", "--exclude", "[red]x[/]["])
    said = " ".join(r.output.split())
    assert r.exit_code == 2 and "'[red]x[/][': unclosed" in said and "write '\\[' for a literal" in said, said
    r = run(service_app, ["roles", "list", "--json"])
    assert "dev" not in {x["name"] for x in json.loads(r.stdout)}
    r = run(service_app, ["roles", "add", "dev", "--repo", "shop", "--exclude", "s[!x]cret/*"])
    assert r.exit_code == 0, r.output


def test_mcp_keys_file_refuses_a_pattern_it_cannot_translate(tmp_path):
    from repoctx.config import ConfigError
    from repoctx.mcp import keys_file_scope_for_key

    f = tmp_path / "keys.json"
    f.write_text(json.dumps({"k-ok-0123456789": {"exclude": ["s[!x]cret/*"]},
                             "k-secret-value-0123456789": {"grants": [{"repo": "r", "exclude": ["[[:alpha:]]"]}]}}))
    with pytest.raises(ConfigError, match=r"key #2: .*POSIX classes") as e:
        keys_file_scope_for_key(f)
    assert "k-secret-value" not in str(e.value)  # a key is a secret: named by its place


def test_mcp_keys_file_reads_one_string_as_one_pattern(tmp_path):
    """'exclude': "secret/*" (a string, not a list) was read as eight one-character patterns: it hid nothing."""
    from repoctx.mcp import keys_file_scope_for_key

    f = tmp_path / "keys.json"
    f.write_text(json.dumps({"k-one-0123456789": {"exclude": "secret/*"},
                             "k-two-0123456789": {"grants": [{"repo": "r", "exclude": "s[!x]cret/*"}]}}))
    scope_for_key = keys_file_scope_for_key(f)
    for key in ("k-one-0123456789", "k-two-0123456789"):
        sc = scope_for_key(key)
        assert not sc.allows("r", "secret/a.py") and sc.allows("r", "src/a.py"), key


def test_list_files_reads_its_glob_with_the_same_grammar(tmp_path):
    from repoctx.copilot.tools import RepoTools

    ix = Index(write_tree(tmp_path / "shop", HIDDEN), Settings(index_dir=tmp_path / "ix", embedder="none"), name="shop")
    ix.update()
    tools = RepoTools(ix, Scope())
    assert tools.list_files("s[^x]cret/*")["files"] == ["secret/a.py"]
    assert tools.list_files("s[!x]cret/*")["files"] == ["secret/a.py"]
    bad = tools.list_files("src/[c")
    assert bad["error"] == "invalid_argument" and "unclosed '['" in bad["detail"]
    ix.close()


# --------------------------------------------------------------------------- over HTTP


@pytest.mark.asyncio
async def test_http_key_whose_stored_grant_no_longer_reads_sees_nothing_of_it(pg_url, tmp_path):
    """A role stored with a pattern the grammar refuses (written by an older repoctx): its requests answer,
    not 500, and the unreadable grant shows nothing -- it is never read as a wider rule."""
    from test_service_support import PUBLIC_REPO, Env

    e = Env(pg_url, tmp_path)
    try:
        e.svc.keys.db.q("UPDATE repoctx_roles SET grants=? WHERE name=?",
                        (json.dumps([{"repo": PUBLIC_REPO, "include": ["src/*"], "exclude": ["src/[zq"]}]), "dev"))
        e.svc.keys._cache.clear()
        async with e.client() as c:
            for path, body in (("/search", {"query": "basket add item total price", "k": 10}),
                               ("/context", {"query": "basket add item total price"})):
                r = await c.post(path, json=body, headers=e.auth(e.dev_key))
                assert r.status_code == 200, (path, r.text)
                assert "src/cart" not in r.text and "add_item" not in r.text, (path, r.text)
            r = await c.post("/search", json={"query": "basket add item", "k": 10}, headers=e.auth(e.admin_key))
            assert r.status_code == 200 and "src/cart/basket.py" in r.text
    finally:
        e.close()
