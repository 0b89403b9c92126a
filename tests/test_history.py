"""Mining a repository's history: commit message → the functions it changed, named at its parent."""
from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from repoctx.evaluate.history import HistoryRanker, fuse, history_field, is_fix
from repoctx.evaluate.metrics import mcnemar
from repoctx.history import (
    History,
    _log_commits,
    changed_symbols,
    clean_message,
    mine,
    parse_diff,
    partial_clone,
    update_history,
)

DIFF = """\
diff --git a/pkg/core.py b/pkg/core.py
index 1111111111111111111111111111111111111111..2222222222222222222222222222222222222222 100644
--- a/pkg/core.py
+++ b/pkg/core.py
@@ -3 +3 @@ def add(a, b):
-    return a - b
+    return a + b
@@ -10,0 +11,2 @@ class Box:
+        self.y = 0
+        self.z = 0
@@ -20,3 +22,0 @@ class Box:
-    def gone(self):
-        pass
-
diff --git a/new.py b/new.py
new file mode 100644
index 0000000000000000000000000000000000000000..3333333333333333333333333333333333333333
--- /dev/null
+++ b/new.py
@@ -0,0 +1 @@
+x = 1
diff --git a/old name.py b/renamed.py
similarity index 90%
rename from old name.py
rename to renamed.py
index 4444444444444444444444444444444444444444..5555555555555555555555555555555555555555 100644
--- a/old name.py
+++ b/renamed.py
@@ -7 +7 @@
-a
+b
"""

PARENT = """\
def add(a, b):
    '''Add.'''
    return a - b


class Box:
    size = 1

    def __init__(self):
        self.x = 0

    def area(self):
        def inner():
            return self.x
        return inner()

    def empty(self):
        pass

    def gone(self):
        pass

"""


def test_hunks_become_parent_line_ranges():
    files = parse_diff(DIFF.splitlines())
    assert [(f.old_path, f.old_blob[:4], f.hunks, f.new_path) for f in files] == [
        ("pkg/core.py", "1111", ((3, 1, -1), (10, 0, 8), (20, 3, -1)), ""),  # an insertion keeps its indent
        ("old name.py", "4444", ((7, 1, -1),), "renamed.py"),  # a renamed file is named by its path at the parent
    ]  # the added file has no parent version
    pure = "diff --git a/a.py b/b/a.py\nsimilarity index 100%\nrename from a.py\nrename to b/a.py\n"
    assert [(f.old_path, f.hunks, f.new_path) for f in parse_diff(pure.splitlines())] == [("a.py", (), "b/a.py")]


def test_ranges_name_the_units_at_the_parent():
    # line 3: add's body; lines appended to __init__'s body (after its last line, line 10); lines 20-22: gone
    assert changed_symbols("pkg/core.py", PARENT, [(3, 1, -1), (10, 0, 8), (20, 3, -1)]) == [
        "pkg/core.py:add", "pkg/core.py:Box.__init__", "pkg/core.py:Box.gone"]
    # a def nested in a method counts as the method; a class attribute as the class
    assert changed_symbols("pkg/core.py", PARENT, [(14, 1, -1)]) == ["pkg/core.py:Box.area"]
    assert changed_symbols("pkg/core.py", PARENT, [(7, 1, -1)]) == ["pkg/core.py:Box"]
    # a method added after the last one, or between two, changes the class, not its neighbour
    assert changed_symbols("pkg/core.py", PARENT, [(21, 0, 4)]) == ["pkg/core.py:Box"]
    assert changed_symbols("pkg/core.py", PARENT, [(16, 0, 4)]) == ["pkg/core.py:Box"]
    assert changed_symbols("pkg/core.py", PARENT, [(21, 0, 8)]) == ["pkg/core.py:Box.gone"]
    # module level: nothing
    assert changed_symbols("pkg/core.py", PARENT, [(4, 1, -1)]) == []
    assert changed_symbols("pkg/core.py", PARENT, [(4, 0, 0)]) == []
    assert changed_symbols("README.md", "text\n", [(1, 1, -1)]) == []


def test_messages_are_cleaned_of_numbers_and_trailers():
    msg = "Fix Box.area for empty boxes (#123)\n\nCloses #45, see https://x.org/y\n\nCo-authored-by: A <a@b.c>"
    cleaned = clean_message(msg)
    assert "123" not in cleaned and "45" not in cleaned and "https" not in cleaned and "Co-authored" not in cleaned
    assert cleaned.startswith("Fix Box.area for empty boxes")
    assert is_fix(msg) and is_fix("Add a prefix option\n\ncloses #12") and not is_fix("Add a prefix option")
    assert not is_fix("Fix typo in the docs") and not is_fix("apply ruff fixes")


def _git(repo: Path, *args: str) -> str:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env.update(GIT_AUTHOR_NAME="t", GIT_AUTHOR_EMAIL="t@t", GIT_COMMITTER_NAME="t", GIT_COMMITTER_EMAIL="t@t",
               GIT_CONFIG_NOSYSTEM="1", HOME=str(repo))
    return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, check=True, env=env, text=True).stdout


def _commit(repo: Path, files: dict[str, str], message: str) -> str:
    for name, text in files.items():
        (repo / name).parent.mkdir(parents=True, exist_ok=True)
        (repo / name).write_text(text)
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", message)
    return _git(repo, "rev-parse", "HEAD").strip()


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    r = tmp_path / "r"
    r.mkdir()
    _git(r, "init", "-q", "-b", "main")
    _commit(r, {"shapes.py": PARENT, "README.md": "shapes\n"}, "Initial shapes")
    return r


def test_mining_a_repository_names_what_each_commit_changed(repo: Path):
    fixed = PARENT.replace("return a - b", "return a + b")
    fix = _commit(repo, {"shapes.py": fixed}, "Fix add subtracting instead of adding\n\nFixes #7")
    docs = _commit(repo, {"README.md": "shapes, fixed\n"}, "Docs only")
    grown = fixed.replace("    def empty(self):\n        pass\n", "    def empty(self):\n        return self.x == 0\n")
    grown = grown.replace("            return self.x\n", "            return self.x * 2\n")
    second = _commit(repo, {"shapes.py": grown, "extra.py": "def new():\n    pass\n"},
                     "Box: area doubles, empty says so")
    report = mine(repo)
    assert report.complete and report.head == second
    got = {c.message.splitlines()[0]: c.symbols for c in report.commits}
    assert got == {
        "Box: area doubles, empty says so": ["shapes.py:Box.area", "shapes.py:Box.empty"],  # extra.py is new
        "Fix add subtracting instead of adding": ["shapes.py:add"],
    }  # the first commit adds files only; the docs commit changes no code
    assert docs not in {c.sha for c in report.commits}
    assert [c.sha for c in report.commits] == [second, fix]  # newest first
    bounded = mine(repo, max_commits=1)
    assert [c.sha for c in bounded.commits] == [second] and not bounded.complete


def test_test_files_are_listed_but_named_only_when_asked(repo: Path):
    _commit(repo, {"tests/test_shapes.py": "def test_add():\n    assert add(1, 1) == 0\n"}, "Test add")
    _commit(repo, {"tests/test_shapes.py": "def test_add():\n    assert add(1, 1) == 2\n"}, "Fix the add test")
    newest = mine(repo, max_commits=1).commits[0]
    assert newest.files == ["tests/test_shapes.py"] and newest.symbols == []
    assert mine(repo, max_commits=1, tests=True).commits[0].symbols == ["tests/test_shapes.py:test_add"]


def test_incremental_mining_reads_only_the_new_commits(repo: Path, tmp_path: Path):
    _commit(repo, {"shapes.py": PARENT.replace("return a - b", "return a + b")}, "Fix add")
    path = tmp_path / "history.jsonl"
    first = update_history(repo, path)
    assert first.mined == 1 and not first.incremental
    again = update_history(repo, path)
    assert again.mined == 0 and again.incremental  # nothing new: nothing mined
    text = PARENT.replace("return a - b", "return a + b")
    text = text.replace("gone(self):\n        pass", "gone(self):\n        return 1")
    new = _commit(repo, {"shapes.py": text}, "Fix gone returning None")
    third = update_history(repo, path)
    assert third.incremental and third.mined == 1  # the earlier fix is not read again
    hist = History.load(path)
    assert hist is not None and hist.head == new
    assert [c.symbols for c in hist.commits] == [["shapes.py:Box.gone"], ["shapes.py:add"]]


def test_history_field_reranks_the_candidates():
    commits = [
        _mc("a", "Fix unicode handling of the echo output", ["m.py:echo"]),
        _mc("b", "Speed up option parsing", ["m.py:parse"]),
        _mc("c", "Reformat everything", ["m.py:echo", "m.py:parse"], sweep=True),
    ]
    field = history_field(commits, keep={"m.py:echo", "m.py:parse"})
    assert "reformat" not in field["m.py:echo"]  # a sweep says nothing about each function
    ranked = [k for k, _ in HistoryRanker(field).rank("echo breaks on unicode")]
    assert ranked == ["m.py:echo"]
    assert fuse(["m.py:parse", "m.py:echo"], ranked, 0.0) == ["m.py:parse", "m.py:echo"]
    assert fuse(["m.py:parse", "m.py:echo"], ranked, 1.0) == ["m.py:echo", "m.py:parse"]
    assert mcnemar([{"a": 0}, {"a": 1}, {"a": 0}], [{"a": 1}, {"a": 1}, {"a": 1}], "a")[:2] == (2, 0)


def test_renamed_files_carry_their_history_to_the_new_name():
    newest = _mc("c", "Move the package under src", [])
    newest.renames = [("m.py", "src/m.py")]
    older = _mc("b", "Fix echo", ["m.py:echo"])
    field = history_field([newest, older])
    assert set(field) == {"src/m.py:echo"}


def _mc(sha, message, symbols, sweep=False):
    from repoctx.history import MinedCommit

    return MinedCommit(sha, [], 0, message, symbols, sorted({s.split(":")[0] for s in symbols}), sweep)


def test_files_only_mining_lists_what_the_patch_path_lists(tmp_path):
    """``mine(symbols=False)`` reads ``git log --raw`` instead of the patches: the same commits, files (paths at the
    parent), renames and sweeps, edits, a rename with and without changes, a deletion and an empty file filled."""
    repo = tmp_path / "r"
    repo.mkdir()
    _git(repo, "init", "-q")
    body = "".join(f"def f{i}(x):\n    return x + {i}\n\n" for i in range(30))
    _commit(repo, {"a.py": body, "b.py": body.replace("f", "g"), "c.py": "", "n.md": "notes"}, "Start")
    _commit(repo, {"a.py": body + "def h():\n    pass\n"}, "Add h")
    _git(repo, "mv", "b.py", "pkg_b.py")
    _commit(repo, {}, "Move b")
    _git(repo, "mv", "pkg_b.py", "b2.py")
    _commit(repo, {"b2.py": body.replace("f", "g") + "def k():\n    pass\n"}, "Move b again, and add k")
    _commit(repo, {"c.py": "def filled():\n    return 1\n"}, "Fill c")
    _git(repo, "rm", "-q", "a.py")
    _commit(repo, {}, "Drop a")
    _commit(repo, {f"m{i}.py": f"def m{i}():\n    pass\n" for i in range(3)}, "Add three")
    _commit(repo, {f"m{i}.py": f"def m{i}():\n    return {i}\n" for i in range(3)}, "Touch three")
    full, files_only = mine(repo), mine(repo, symbols=False, max_files=2)
    patch_small = mine(repo, max_files=2)
    assert [c.sha for c in files_only.commits] == [c.sha for c in full.commits]
    for a, b, s in zip(full.commits, files_only.commits, patch_small.commits, strict=True):
        assert (a.files, a.renames) == (b.files, b.renames) and b.sweep == s.sweep and not b.symbols
    assert {c.message: c.files for c in files_only.commits}["Fill c"] == ["c.py"]
    assert {c.message: c.renames for c in files_only.commits}["Move b"] == [("b.py", "pkg_b.py")]
    assert any(c.sweep for c in files_only.commits)


def test_files_only_mining_reads_the_whole_log_and_keeps_the_code_commits(tmp_path):
    """The files-only log is read without pathspecs (git matches them against every entry of every tree it compares)
    and filtered here: a commit touching docs only, or only a file's mode, is not listed; a code file renamed to a
    name no grammar reads counts as deleted; ``max_commits`` counts code commits. A commit on a branch whose merge
    left the code as the main line had it, which a log limited by pathspecs simplifies away, is listed too."""
    repo = tmp_path / "r"
    repo.mkdir()
    _git(repo, "init", "-q", "-b", "main")
    _commit(repo, {"a.py": "def a():\n    return 1\n", "b.py": "def b():\n    return 2\n", "n.md": "notes"}, "Start")
    _commit(repo, {"n.md": "more notes"}, "Docs only")
    (repo / "a.py").chmod(0o755)
    _commit(repo, {}, "Mode only")
    _git(repo, "mv", "b.py", "b.txt")
    _commit(repo, {}, "Park b as text")
    _git(repo, "checkout", "-q", "-b", "side")
    side = _commit(repo, {"a.py": "def a():\n    return 10\n"}, "Fix a on the side")
    _git(repo, "checkout", "-q", "main")
    _commit(repo, {"a.py": "def a():\n    return 10\n"}, "Fix a on main too")
    _git(repo, "merge", "-q", "--no-edit", "side")
    _commit(repo, {"a.py": "def a():\n    return 11\n"}, "Last")
    got = mine(repo, symbols=False)
    by_message = {c.message: c for c in got.commits}
    assert set(by_message) == {"Park b as text", "Fix a on the side", "Fix a on main too", "Last"}  # Start: additions
    assert by_message["Park b as text"].files == ["b.py"] and by_message["Park b as text"].renames == []
    assert by_message["Fix a on the side"].sha == side and by_message["Fix a on the side"].files == ["a.py"]
    assert got.complete
    two = mine(repo, symbols=False, max_commits=2)
    assert [c.message for c in two.commits] == [c.message for c in got.commits][:2] and not two.complete
    every = mine(repo, symbols=False, max_commits=len(got.commits))
    assert len(every.commits) == len(got.commits) and every.complete


@pytest.mark.parametrize("symbols", [False, True])
def test_a_history_cut_by_its_bound_goes_back_to_older_commits_update_by_update(tmp_path, symbols):
    """A bound (here ``max_commits``, in the product the time budget) leaves the oldest commits out; each later
    update takes up to its bound of them, after any new commit, until the log ends: then the history lists what one
    unbounded mine lists, in the same order. ``backfill=False`` (a watched save's refresh) leaves it as it is."""
    repo = tmp_path / "r"
    repo.mkdir()
    _git(repo, "init", "-q", "-b", "main")
    _commit(repo, {"a.py": "def a():\n    return 0\n", "n.md": "0"}, "Start")
    for i in range(1, 8):
        _commit(repo, {"a.py": f"def a():\n    return {i}\n"} if i != 4 else {"n.md": "docs"}, f"Change {i}")
    path = tmp_path / "history.jsonl"
    first = update_history(repo, path, max_commits=2, symbols=symbols)
    assert first.mined == 2 and not first.history.complete and first.backfilled == 0
    assert History.meta(path)["tail"][1] == 2
    assert update_history(repo, path, max_commits=2, symbols=symbols, load=False, backfill=False).mined == 0
    second = update_history(repo, path, max_commits=2, symbols=symbols, load=False)
    assert second.backfilled == 2 and not second.history.complete
    newest = _commit(repo, {"a.py": "def a():\n    return 8\n"}, "Change 8")
    third = update_history(repo, path, max_commits=2, symbols=symbols)
    assert (third.mined, third.backfilled) == (2, 1)  # the new commit, then one older (2 a run)
    while not (hist := History.load(path)).complete:
        assert update_history(repo, path, max_commits=2, symbols=symbols, load=False).backfilled > 0
    assert "tail" not in History.meta(path) and History.meta(path)["commits"] == len(hist.commits) == 7
    whole = mine(repo, symbols=symbols)
    assert [c.sha for c in hist.commits] == [c.sha for c in whole.commits] and hist.head == newest
    assert [c.message for c in hist.commits] == [f"Change {i}" for i in (8, 7, 6, 5, 3, 2, 1)]


def test_a_cut_history_whose_log_is_gone_stays_as_it_is(tmp_path):
    repo = tmp_path / "r"
    repo.mkdir()
    _git(repo, "init", "-q", "-b", "main")
    for i in range(4):
        _commit(repo, {"a.py": f"def a():\n    return {i}\n"}, f"Change {i}")
    path = tmp_path / "history.jsonl"
    update_history(repo, path, max_commits=1, symbols=False)
    hist = History.load(path)
    assert hist is not None and hist.tail is not None
    hist.tail = ("0" * 40, hist.tail[1])  # a commit the repository does not have (a rewritten, pruned history)
    hist.save(path)
    again = update_history(repo, path, max_commits=1, symbols=False)
    assert again.backfilled == 0 and not again.history.complete and again.history.tail is None
    assert len(History.load(path).commits) == 1


def test_a_partial_clone_is_mined_without_fetching_a_blob(tmp_path):
    """The service's clones of git URLs are partial (``--filter=blob:none``): rename detection by content would fetch
    the blobs of every added and deleted pair from the remote while the update waits. There a rename is a blob that
    moved unchanged; a file renamed with edits reads as its old path changed. No object is fetched."""
    src = tmp_path / "src"
    src.mkdir()
    _git(src, "init", "-q", "-b", "main")
    body = "".join(f"def f{i}(x):\n    return x + {i}\n\n" for i in range(20))
    _commit(src, {"a.py": body, "c.py": body.replace("f", "g")}, "Start")
    _git(src, "mv", "a.py", "b.py")
    _commit(src, {"b.py": body + "def h():\n    pass\n"}, "Move a to b and add h")
    _git(src, "mv", "c.py", "d.py")
    _commit(src, {}, "Move c to d")
    _commit(src, {"d.py": body.replace("f", "k")}, "Rename the g functions")
    _git(src, "config", "uploadpack.allowFilter", "true")
    bare = tmp_path / "clone.git"
    _git(tmp_path, "clone", "-q", "--bare", "--filter=blob:none", f"file://{src}", str(bare))
    _git(bare, "worktree", "add", "-q", str(tmp_path / "wt"), "main")
    objects = _git(bare, "count-objects", "-v")
    got = mine(tmp_path / "wt", symbols=False)
    assert _git(bare, "count-objects", "-v") == objects  # nothing fetched
    assert partial_clone(tmp_path / "wt") and not partial_clone(src)
    by_message = {c.message: (c.files, c.renames) for c in got.commits}
    assert by_message == {
        "Move a to b and add h": (["a.py"], []),
        "Move c to d": ([], [("c.py", "d.py")]),
        "Rename the g functions": (["d.py"], []),
    }
    full = {c.message: (c.files, c.renames) for c in mine(src, symbols=False).commits}
    assert full["Move a to b and add h"] == (["a.py"], [("a.py", "b.py")])  # a full clone compares contents


def test_a_log_git_fails_is_an_error_not_a_shorter_history(repo):
    with pytest.raises(RuntimeError, match="git log failed"):
        list(_log_commits(repo, ["no-such-revision"], None, patch=False))


# --------------------------------------------------------------------------- the similar commits' vote, built and kept


def _bm25(docs: dict[str, list[str]], query: str, limit: int, k1: float = 1.2, b: float = 0.75):
    """BM25 a posting at a time, in plain Python: what HistoryRanker's arrays must give, float for float."""
    import math
    from collections import Counter

    from repoctx.tokens import code_tokens

    length = {k: len(v) for k, v in docs.items()}
    avg = sum(length.values()) / len(docs)
    postings: dict[str, list[tuple[str, int]]] = {}
    for key, toks in docs.items():
        for term, tf in Counter(toks).items():
            postings.setdefault(term, []).append((key, tf))
    scores: dict[str, float] = {}
    for term in dict.fromkeys(code_tokens(query, keep_stopwords=False)):
        post = postings.get(term)
        if not post:
            continue
        idf = math.log(1 + (len(docs) - len(post) + 0.5) / (len(post) + 0.5))
        for key, tf in post:
            norm = tf + k1 * (1 - b + b * length[key] / avg)
            scores[key] = scores.get(key, 0.0) + idf * tf * (k1 + 1) / norm
    return sorted(scores.items(), key=lambda kv: (-kv[1], kv[0]))[:limit]


def test_the_ranker_gives_the_plain_bm25_scores_and_ties():
    import random

    rng = random.Random(7)
    words = ["fix", "echo", "unicode", "option", "prompt", "choice", "path", "windows", "color", "flag"]
    docs = {f"{i:04x}": [rng.choice(words) for _ in range(rng.randint(0, 9))] for i in range(400)}
    docs["dup-a"] = docs["dup-b"] = ["echo", "unicode"]  # the same words: a tie, broken by key
    ranker = HistoryRanker(docs)
    for query in ("echo breaks on unicode", "fix the windows color flag", "prompt choice", "nothing matches", ""):
        for limit in (1, 5, 20, 1000):
            assert ranker.rank(query, limit) == _bm25(docs, query, limit)
    assert HistoryRanker({}).rank("echo") == []


def test_the_vote_is_built_once_and_loaded_after(tmp_path, monkeypatch):
    """The similar commits of a stored history are indexed by the first search of a process and kept on the
    machine: the next process loads them (the same votes), a damaged or older file is built again, and a newer
    history of the repository replaces its file."""
    import zlib

    import repoctx.index as index_module
    from repoctx.history import MinedCommit, SimilarCommits

    monkeypatch.setenv("REPOCTX_CACHE", str(tmp_path / "cache"))
    commits = [
        MinedCommit(f"{i:040x}", [f"{i + 1:040x}"], 1_700_000_000 - i, msg, files=files)
        for i, (msg, files) in enumerate(
            [
                ("Fix echo of unicode on Windows (#12)", ["src/click/utils.py", "src/click/_compat.py"]),
                ("Prompt shows the choices", ["src/click/termui.py"]),
                ("Fix echo color stripping\n\nSigned-off-by: A <a@b>", ["src/click/utils.py"]),
                ("Sweep", [f"f{j}.py" for j in range(50)]),
                ("Tests only: fix echo", ["tests/test_utils.py"]),
            ]
        )
    ]
    commits[3].sweep = True
    def body_of(history: History) -> bytes:
        history.save(tmp_path / "h.jsonl")
        return zlib.compress((tmp_path / "h.jsonl").read_bytes(), 1)

    body = body_of(History("f" * 40, commits))
    built = index_module._similar_commits(body, "click")
    kept = list((tmp_path / "cache" / "history").glob("votes-*.npz"))
    assert len(kept) == 1
    query = "echo breaks unicode on windows"
    want = SimilarCommits(commits, by="files").rank(query)
    assert built.rank(query) == want and want[0][0] == "src/click/utils.py"
    monkeypatch.setattr(SimilarCommits, "__init__", lambda *a, **k: pytest.fail("built again"))
    loaded = index_module._similar_commits(body, "click")
    assert loaded is not built and loaded.rank(query) == want
    assert loaded.rank("prompt choices")[0][0] == "src/click/termui.py"
    monkeypatch.undo()
    monkeypatch.setenv("REPOCTX_CACHE", str(tmp_path / "cache"))
    kept[0].write_bytes(b"not an npz")  # damaged: built again, and written again
    assert index_module._similar_commits(body, "click").rank(query) == want
    assert SimilarCommits.load(kept[0]) is not None
    newer = MinedCommit("e" * 40, ["f" * 40], 1_700_000_100, "Fix prompt", files=["src/click/termui.py"])
    newer_body = body_of(History("e" * 40, [newer, *commits]))
    index_module._similar_commits(newer_body, "click")
    assert [p for p in (tmp_path / "cache" / "history").glob("votes-*.npz")] != kept  # the older one removed
    assert len(list((tmp_path / "cache" / "history").glob("votes-*.npz"))) == 1
    index_module._similar_commits(body, "attrs")  # another repository keeps its own
    assert len(list((tmp_path / "cache" / "history").glob("votes-*.npz"))) == 2
    # a repository of the same name in another store keeps its own too: neither evicts the other's
    index_module._similar_commits(newer_body, "click", "/elsewhere/index.sqlite")
    assert len(list((tmp_path / "cache" / "history").glob("votes-*.npz"))) == 3
    monkeypatch.setattr(SimilarCommits, "__init__", lambda *a, **k: pytest.fail("built again"))
    index_module._similar_commits(newer_body, "click")
    index_module._similar_commits(newer_body, "click", "/elsewhere/index.sqlite")
    monkeypatch.undo()
    monkeypatch.setenv("REPOCTX_CACHE", str(tmp_path / "cache"))
    assert index_module._similar_commits(b"not zlib", "click") is None
