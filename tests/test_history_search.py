"""The tree's own history in a file-level search: an update of a git checkout mines its commits (files and
messages, incrementally), and the files that the past commits most like the question changed move up."""
from __future__ import annotations

import json
import threading
import zlib
from dataclasses import replace
from pathlib import Path

import pytest

from repoctx import Index, Settings
from repoctx.history import History
from repoctx.store.base import Scope
from tests.test_history import _commit, _git

TREE = {
    "shop/upload_form.py": "def upload_form(request):\n    \"\"\"The page for uploading files.\"\"\"\n"
                           "    return render(request, 'upload.html')\n",
    "shop/transfer.py": "def send_chunks(files, size=65536):\n    for f in files:\n        yield f.read(size)\n",
    "shop/cart.py": "def add_item(cart, item):\n    cart.append(item)\n    return cart\n",
}
QUESTION = "timeout when uploading big files"


@pytest.fixture
def repo(tmp_path) -> Path:
    root = tmp_path / "shop-repo"
    root.mkdir()
    _git(root, "init", "-q")
    _commit(root, TREE, "Start the shop")
    # what the project learned: uploads that time out were fixed in the transfer code, never in the form
    for i, message in enumerate(["Fix a timeout when uploading large files", "Raise the chunk size: big uploads timed "
                                 "out", "Fix the timeout of slow uploads"]):
        _commit(root, {"shop/transfer.py": TREE["shop/transfer.py"] + f"\n# {i}\n"}, message)
    _commit(root, {"shop/cart.py": TREE["shop/cart.py"] + "\n# x\n"}, "Let the cart hold twice the same item")
    return root


def _files(ix: Index, **kw) -> list[str]:
    return [f.path for f in ix.retrieve(QUESTION, k=3, level="file", mode="standard", **kw).files]


def test_the_files_past_commits_changed_move_up(repo, tmp_path):
    without = Index(repo, Settings(index_dir=tmp_path / "a", embedder="none", history=False))
    without.update()
    base = _files(without)
    assert base[0] == "shop/upload_form.py" and "shop/transfer.py" in base  # the question's words are the form's
    assert without.last_history is None and not without.history_path().exists()

    ix = Index(repo, Settings(index_dir=tmp_path / "b", embedder="none"))
    ix.update()
    assert ix.last_history.mined == 4 and ix.last_history.history.complete  # (the first commit adds, changes nothing)
    got = ix.retrieve(QUESTION, k=3, level="file", mode="standard")
    assert [f.path for f in got.files][0] == "shop/transfer.py"
    assert any(e.step == "History" for e in got.events)
    assert [f.path for f in ix.search(QUESTION, k=3, level="file")][0] == "shop/transfer.py"
    assert ix.retrieve("add an item to the cart", k=3, level="file", mode="standard").files[0].path == "shop/cart.py"
    # a scope that hides the transfer code: the history never brings back a file the search did not find
    hidden = _files(ix, scope=Scope(exclude=("shop/transfer.py",)))
    assert "shop/transfer.py" not in hidden and hidden[0] == "shop/upload_form.py"


def test_a_store_wide_index_reads_the_history_its_repository_s_update_mined(repo, tmp_path):
    """The service and a multi-repository MCP server search a store, not a root: the history mined by the update of
    a registered checkout (in the same cache) moves its files there too; another repository's files do not move."""
    settings = Settings(index_dir=tmp_path / "store", embedder="none")
    Index(repo, settings).update()
    other = tmp_path / "other"
    other.mkdir()
    (other / "uploads.py").write_text("def timeout_uploading(files):\n    return 'uploading big files timeout'\n")
    Index(other, settings).update()
    wide = Index(settings=settings, repos=("shop-repo", "other"))
    got = [(f.capsules[0].capsule.repo, f.path) for f in
           wide.retrieve(QUESTION, k=5, level="file", mode="standard").files]
    assert ("other", "uploads.py") in got and got.index(("shop-repo", "shop/transfer.py")) < got.index(
        ("shop-repo", "shop/upload_form.py"))
    plain = Index(settings=Settings(index_dir=tmp_path / "store", embedder="none", history=False),
                  repos=("shop-repo", "other"))
    base = [(f.capsules[0].capsule.repo, f.path) for f in
            plain.retrieve(QUESTION, k=5, level="file", mode="standard").files]
    assert base.index(("shop-repo", "shop/upload_form.py")) < base.index(("shop-repo", "shop/transfer.py"))


def test_the_history_is_mined_incrementally_within_its_budget(repo, tmp_path):
    ix = Index(repo, Settings(index_dir=tmp_path / "ix", embedder="none"))
    ix.update()
    assert ix.last_history.mined == 4
    ix.update()  # nothing new: the head is the one it saw, and only the kept history's first line is read
    assert ix.last_history.mined == 0 and ix.last_history.history.commits == [] and ix.last_history.history.complete
    assert ix.retrieve(QUESTION, k=3, level="file", mode="standard").files[0].path == "shop/transfer.py"
    _commit(repo, {"shop/cart.py": TREE["shop/cart.py"] + "\n# y\n"}, "Fix the cart when uploading big files times out")
    ix.update()
    assert ix.last_history.mined == 1 and ix.last_history.incremental
    # a budget spent at once: the newest commits only, the history marked incomplete, the index whole
    ix.history_path().unlink()  # (the mined history is the tree's, whichever index reads it: start again)
    other = Index(repo, Settings(index_dir=tmp_path / "ix2", embedder="none", history_budget=1e-9))
    report = other.update()
    assert not other.last_history.history.complete and other.store.n_capsules() == ix.store.n_capsules()
    assert not report.notes
    # later updates with time to spare go back for what the budget left out; a save's refresh does not
    again = Index(repo, Settings(index_dir=tmp_path / "ix2", embedder="none"))
    again.update(history_backfill=False)
    assert again.last_history.mined == 0 and not again.last_history.history.complete
    again.update()
    assert again.last_history.backfilled == 5 and again.last_history.history.complete
    assert len(History.load(again.history_path()).commits) == 5


def test_no_history_outside_a_git_checkout_and_no_git_is_a_note(repo, tmp_path, monkeypatch):
    plain = tmp_path / "plain"
    plain.mkdir()
    (plain / "a.py").write_text(TREE["shop/transfer.py"])
    ix = Index(plain, Settings(index_dir=tmp_path / "p", embedder="none"))
    ix.update()
    assert ix.last_history is None and not ix.history_path().exists()
    # a folder inside a checkout that git tracks nothing in (an unpacked tree in a cache or build folder) has no
    # history of its own: the enclosing project's is not its
    unpacked = repo / "build" / "unpacked"
    unpacked.mkdir(parents=True)
    (unpacked / "a.py").write_text(TREE["shop/transfer.py"])
    inner = Index(unpacked, Settings(index_dir=tmp_path / "inner", embedder="none"))
    inner.update()
    assert inner.last_history is None
    # no git on the machine: the index is whole, the note says why the history was not read
    monkeypatch.setenv("PATH", str(tmp_path / "nowhere"))
    broken = Index(repo, Settings(index_dir=tmp_path / "b", embedder="none"))
    report = broken.update()
    assert broken.store.n_capsules() >= 3 and any("git history was not read" in n for n in report.notes)
    assert _files(broken)[0] == "shop/upload_form.py"


@pytest.fixture(params=["sqlite", "postgres"])
def shared(request, tmp_path) -> Settings:
    """A store every process of a team's service shares: the embedded one in a folder, or a fresh PostgreSQL one."""
    if request.param == "sqlite":
        return Settings(index_dir=tmp_path / "store", embedder="none")
    from repoctx.store.postgres import migrate
    from tests.pg import fresh_database

    url = fresh_database()
    migrate(url)
    return Settings(database_url=url, embedder="none")


def test_the_history_reaches_every_process_of_the_store_through_it(repo, tmp_path, monkeypatch, shared):
    """A team's API runs where the worker's checkout and cache are not: the history an update mined is kept in the
    store, and a search on another machine (another cache, no checkout) votes with it. A second worker with an empty
    cache takes it from the store and mines only the new commits; dropping the repository drops it."""
    monkeypatch.setenv("REPOCTX_CACHE", str(tmp_path / "worker-a"))
    first = Index(repo, shared)
    first.update()
    assert first.last_history.mined == 4
    monkeypatch.setenv("REPOCTX_CACHE", str(tmp_path / "api"))
    away = repo.rename(tmp_path / "elsewhere")  # the API's machine has no checkout
    api = Index(settings=shared, repos=("shop-repo",))
    assert _files(api)[0] == "shop/transfer.py"
    assert _files(Index(settings=replace(shared, history=False), repos=("shop-repo",)))[0] == "shop/upload_form.py"
    # it mined nothing (no checkout): what its cache holds is the vote it built from the store's copy
    assert [f.suffix for f in (tmp_path / "api" / "history").iterdir()] == [".npz"]
    away.rename(repo)
    _commit(repo, {"shop/transfer.py": TREE["shop/transfer.py"] + "\n# again\n"}, "Fix uploads timing out once more")
    monkeypatch.setenv("REPOCTX_CACHE", str(tmp_path / "worker-b"))
    second = Index(repo, shared)
    second.update()
    assert second.last_history.mined == 1 and second.last_history.incremental
    kept = second.store.history("shop-repo")
    assert kept is not None and kept[1] is not None
    hist = History.parse(zlib.decompress(kept[1]).decode())
    assert hist is not None and len(hist.commits) == 5 and hist.commits[0].message == "Fix uploads timing out once more"
    assert second.store.history("shop-repo", known=kept[0]) == (kept[0], None)  # the same stamp: no body sent
    # the API sees the newer history once its stamp is checked again; it reads it aside, voting with the last meanwhile
    import repoctx.index as index_module

    slow, read = threading.Event(), index_module._similar_commits
    monkeypatch.setattr(index_module, "_similar_commits", lambda *a: slow.wait(10) and read(*a))
    before = api._history["shop-repo"]
    assert before[1] != kept[0]
    api._history["shop-repo"] = (0.0, before[1], before[2])  # its check is due
    assert _files(api)[0] == "shop/transfer.py" and api._history["shop-repo"][2] is before[2]  # not waited for
    aside = api._history_aside["shop-repo"]
    api._history["shop-repo"] = (0.0, before[1], before[2])  # due again while the read goes on: no second read
    assert _files(api)[0] == "shop/transfer.py" and api._history_aside["shop-repo"] is aside
    slow.set()
    aside.join(10)
    assert api._history["shop-repo"][1] == kept[0] and api._history["shop-repo"][2] is not before[2]
    assert not api._history_aside
    second.update()  # nothing new: the store is not written again
    assert second.store.history("shop-repo", known=kept[0]) == (kept[0], None)
    second.store.put_history("shop-repo", '{"damaged": true}', b"not zlib")  # a damaged copy: no votes, no failure
    api._history.clear()
    assert _files(api)[0] == "shop/upload_form.py"
    second.store.drop_repo("shop-repo")
    assert second.store.history("shop-repo") is None


def test_a_folder_of_a_checkout_has_the_history_of_its_files_named_from_it(repo, tmp_path):
    """A package of a monorepo indexed alone: the commits that changed its files (and only those), its paths named
    from the folder, as the index names them; the vote moves its files as the checkout's would."""
    _commit(repo, {"docs/notes.py": "def notes():\n    return 'uploading big files timeout'\n"}, "Fix the timeout notes")
    ix = Index(repo / "shop", Settings(index_dir=tmp_path / "pkg", embedder="none"))
    ix.update()
    hist = ix.last_history.history
    assert ix.last_history.mined == 4 and hist.complete
    assert {f for c in hist.commits for f in c.files} == {"transfer.py", "cart.py"}
    assert "Fix the timeout notes" not in {c.message for c in hist.commits}
    assert _files(ix)[0] == "transfer.py"
    plain = Index(repo / "shop", Settings(index_dir=tmp_path / "pkg2", embedder="none", history=False))
    plain.update()
    assert _files(plain)[0] == "upload_form.py"


def test_the_cli_says_what_history_an_index_keeps(repo, tmp_path, monkeypatch):
    from typer.testing import CliRunner

    from repoctx.cli import app

    monkeypatch.setenv("REPOCTX_INDEX_DIR", str(tmp_path / "cli"))
    monkeypatch.setenv("REPOCTX_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("REPOCTX_EMBEDDER", "none")
    runner = CliRunner()
    got = runner.invoke(app, ["index", str(repo)])
    assert got.exit_code == 0, got.output
    assert "git history: 4 commits to" in got.output and "(4 new" in got.output and "back to the first commit" in got.output
    again = runner.invoke(app, ["index", str(repo), "--json"])
    history = json.loads(again.output)["history"]
    assert history["kept"] and history["commits"] == 4 and history["complete"] and history["mined"] == 0
    status = runner.invoke(app, ["status", str(repo)])
    assert status.exit_code == 0 and "git history: 4 commits to" in status.output
    off = runner.invoke(app, ["index", str(repo)], env={"REPOCTX_HISTORY": "0"})
    assert off.exit_code == 0 and "git history" not in off.output


def test_a_file_the_history_moved_names_the_past_commits_that_voted_for_it(repo, tmp_path):
    """Why a file moved: the past commits most like the question that changed it, best first (two at most), with
    their titles, in the hit, its JSON and its text; a file no past commit voted for names none."""
    from repoctx import render

    ix = Index(repo, Settings(index_dir=tmp_path / "b", embedder="none"))
    ix.update()
    got = ix.retrieve(QUESTION, k=3, level="file", mode="standard")
    top = got.files[0]
    assert top.path == "shop/transfer.py" and len(top.history) == 2
    titles = [t for _, t in top.history]
    assert set(titles) <= {"Fix a timeout when uploading large files", "Raise the chunk size: big uploads timed out",
                           "Fix the timeout of slow uploads"}
    shas = _git(repo, "log", "--format=%H", "--", "shop/transfer.py").split()
    assert all(sha in shas for sha, _ in top.history)
    assert all(not f.history for f in got.files if f.path != "shop/transfer.py")  # the cart's commit is not like it
    d = render.retrieval_dict(got, "brief")
    first = d["results"][0]
    assert [h["commit"] for h in first["history"]] == [sha[:12] for sha, _ in top.history]
    assert "history" not in d["results"][1]
    text = render.retrieval_text(got, "brief")
    assert f'past commits like it: {top.history[0][0][:12]} "{titles[0]}"' in text
    assert text.count("past commits like it") == 1
    plain = Index(repo, Settings(index_dir=tmp_path / "b", embedder="none", history=False))
    assert all(not f.history for f in plain.retrieve(QUESTION, k=3, level="file", mode="standard").files)
