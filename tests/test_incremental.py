import os
import signal
import subprocess
import sys
import time

from repoctx.capsules.parse import PARSER_VERSION
from tests.conftest import open_index, snapshot, write_tree

BASE = {
    "pkg/__init__.py": "from .core import Engine\n",
    "pkg/core.py": (
        "from pkg.util import helper, shared\n\n"
        "class Engine:\n    \"\"\"Runs things.\"\"\"\n    def start(self):\n        return helper(self.step())\n\n"
        "    def step(self):\n        return shared()\n"
    ),
    "pkg/util.py": "def helper(x):\n    return x\n\ndef shared():\n    return 1\n",
    "pkg/cli.py": "from pkg.core import Engine\nimport pkg.util as u\n\ndef main():\n    Engine().start()\n    return u.shared()\n",
    "README.md": "# Demo\nSome docs.\n",
}


def cold_snapshot(root, tmp_path, name):
    ix = open_index(root, tmp_path / name)
    ix.update()
    snap = snapshot(ix)
    ix.close()
    return snap


def test_incremental_equals_cold_rebuild(make_repo, tmp_path):
    root = make_repo(BASE)
    ix = open_index(root, tmp_path / "inc")
    first = ix.update()
    assert sorted(first.added) == sorted(BASE)
    assert snapshot(ix) == cold_snapshot(root, tmp_path, "cold0")

    # edit: helper moves down two lines and shared is renamed -> callers re-resolve
    write_tree(root, {"pkg/util.py": "# moved\n\ndef helper(x):\n    return x\n\ndef shared_v2():\n    return 2\n"})
    r = ix.update()
    assert r.modified == ["pkg/util.py"] and not r.added and not r.deleted
    assert r.edges_reresolved > 0
    assert snapshot(ix) == cold_snapshot(root, tmp_path, "cold1")

    # add a file that defines the missing name again -> unresolved edges resolve
    write_tree(root, {"pkg/extra.py": "def shared():\n    return 3\n"})
    r = ix.update()
    assert r.added == ["pkg/extra.py"]
    assert snapshot(ix) == cold_snapshot(root, tmp_path, "cold2")

    # delete
    os.remove(root / "pkg/extra.py")
    r = ix.update()
    assert r.deleted == ["pkg/extra.py"]
    assert snapshot(ix) == cold_snapshot(root, tmp_path, "cold3")

    # rename
    os.rename(root / "pkg/cli.py", root / "pkg/command.py")
    r = ix.update()
    assert r.deleted == ["pkg/cli.py"] and r.added == ["pkg/command.py"]
    assert snapshot(ix) == cold_snapshot(root, tmp_path, "cold4")


def test_noop_and_touch_do_not_reparse(make_repo, tmp_path):
    root = make_repo(BASE)
    ix = open_index(root, tmp_path / "idx")
    ix.update()
    r = ix.update()
    assert not r.changed and r.capsules_written == 0
    os.utime(root / "pkg/core.py", ns=(time.time_ns(), time.time_ns() + 10**9))
    r = ix.update()
    assert not r.changed and r.unchanged == len(BASE)
    assert ix.status()["fresh"]


def test_status_reports_what_changed(make_repo, tmp_path):
    root = make_repo(BASE)
    ix = open_index(root, tmp_path / "idx")
    assert not ix.status()["indexed"]
    ix.update()
    write_tree(root, {"pkg/util.py": "def helper(x):\n    return 2 * x\n", "new.py": "def n():\n    pass\n"})
    os.remove(root / "README.md")
    st = ix.status()
    assert not st["fresh"]
    assert st["modified"] == ["pkg/util.py"] and st["added"] == ["new.py"] and st["deleted"] == ["README.md"]


def test_git_head_recorded(make_repo, tmp_path):
    root = make_repo(BASE)
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@t"}
    subprocess.run(["git", "init", "-q"], cwd=root, check=True)
    subprocess.run(["git", "add", "-A"], cwd=root, check=True)
    subprocess.run(["git", "commit", "-qm", "x"], cwd=root, check=True, env=env)
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True).stdout.strip()
    ix = open_index(root, tmp_path / "idx")
    ix.update()
    assert ix.meta("git_head") == head and ix.meta("git_dirty") == "0"
    write_tree(root, {"pkg/util.py": "def helper(x):\n    return 3\n"})
    ix.update()
    assert ix.meta("git_dirty") == "1"


CHILD = """
import sys
from pathlib import Path
from repoctx import Index, Settings
ix = Index(sys.argv[1], Settings(index_dir=Path(sys.argv[2]), embedder="none"))
def on(e):
    if e["event"] == "link":
        print("LINKING", flush=True)
        sys.stdin.readline()  # hold the write transaction open until the test says go
ix.update(progress=on)
print("DONE", flush=True)
"""


def test_kill_9_mid_index_keeps_previous_index(make_repo, tmp_path):
    files = {f"mod{i:03d}.py": f"def func_{i}(x):\n    return helper_{i}(x)\n\ndef helper_{i}(x):\n    return x\n"
             for i in range(300)}
    root = make_repo(files)
    idx = tmp_path / "idx"
    ix = open_index(root, idx)
    ix.update()
    before = snapshot(ix)
    assert ix.search("func_7")[0].capsule.qualname == "func_7"
    ix.close()
    # change every file, then kill the indexer while it writes its transaction
    for i in range(300):
        (root / f"mod{i:03d}.py").write_text(f"def renamed_{i}(x):\n    return x + {i}\n" * 3)
    proc = subprocess.Popen([sys.executable, "-c", CHILD, str(root), str(idx)], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)
    line = proc.stdout.readline()
    assert line.strip() == "LINKING"  # the write transaction is open
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    ix = open_index(root, idx)
    assert snapshot(ix) == before  # previous index fully queryable
    assert ix.search("func_7")[0].capsule.qualname == "func_7"
    r = ix.update()
    assert len(r.modified) == 300
    assert ix.find("renamed_5")
    assert snapshot(ix) == cold_snapshot(root, tmp_path, "cold")


def test_search_while_indexing(make_repo, tmp_path):
    files = {f"m{i:03d}.py": f"def fn_{i}():\n    return {i}\n" for i in range(200)}
    root = make_repo(files)
    idx = tmp_path / "idx"
    ix = open_index(root, idx)
    ix.update()
    for i in range(200):
        (root / f"m{i:03d}.py").write_text(f"def other_{i}():\n    return {i}\n")
    proc = subprocess.Popen([sys.executable, "-c", CHILD, str(root), str(idx)], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "LINKING"
    hits = ix.search("fn_3")  # a reader during the open write transaction sees the last good index
    assert hits and hits[0].capsule.qualname == "fn_3"
    proc.stdin.write("go\n")
    proc.stdin.flush()
    assert proc.stdout.readline().strip() == "DONE"
    proc.wait()
    assert ix.search("other_3")[0].capsule.qualname == "other_3"


def test_a_function_named_like_its_module_is_indexed(make_repo, tmp_path):
    # peewee's runtests.py defines runtests(): the function's id was the module's, and the whole index failed
    # with "UNIQUE constraint failed: capsules.id"
    root = make_repo({"runtests.py": "import sys\n\ndef runtests(suite):\n    return suite.run()\n",
                      "pkg/__init__.py": "def pkg():\n    return 1\n"})
    ix = open_index(root, tmp_path / "idx")
    ix.update()
    hits = ix.search("runtests suite run", k=5)
    assert any(h.capsule.qualname == "runtests" and h.capsule.kind == "function" for h in hits)
    assert {c.kind for c in ix.store.all_capsules() if c.path == "runtests.py"} == {"module", "function"}
    ix.close()


def test_a_typed_receiver_re_resolves_when_its_method_appears(make_repo, tmp_path):
    root = make_repo(BASE | {"pkg/run.py": "from pkg.core import Engine\n\ndef run():\n    e = Engine()\n    return e.stop()\n"})
    ix = open_index(root, tmp_path / "inc")
    ix.update()
    assert {e.dst_name: e.dst for e in ix.callees("repo:pkg/run.py#run")}["Engine.stop"] is None
    write_tree(root, {"pkg/core.py": BASE["pkg/core.py"] + "\n    def stop(self):\n        return 0\n"})
    assert ix.update().modified == ["pkg/core.py"]
    assert {e.dst_name: e.dst for e in ix.callees("repo:pkg/run.py#run")}["Engine.stop"] == "repo:pkg/core.py#Engine.stop"
    assert snapshot(ix) == cold_snapshot(root, tmp_path, "cold")


def test_an_index_parsed_by_earlier_rules_is_rebuilt_whole(make_repo, tmp_path):
    root = make_repo(BASE)
    ix = open_index(root, tmp_path / "idx")
    ix.update()
    w = ix.store.writer(ix.repo)
    with w.transaction():
        w.set_meta("parser", "1")
    r = ix.update()
    assert sorted(r.added) == sorted(BASE) and any("rebuilt it whole" in n for n in r.notes)
    assert ix.meta("parser") == PARSER_VERSION and snapshot(ix) == cold_snapshot(root, tmp_path, "cold")
    assert ix.update().unchanged == len(BASE)  # and only once


HIERARCHY = {
    "app/__init__.py": "",
    "app/base.py": "class Base:\n    def validate(self):\n        return True\n\nclass Other:\n    def validate(self):\n        return False\n",
    "app/mixins.py": "from app.base import Base, Other\n\nclass Middle(Base):\n    pass\n",
    "app/models.py": "from app.mixins import Middle\n\nclass Order(Middle):\n    def save(self):\n        return self.validate()\n",
}


def test_inherited_calls_follow_a_change_of_bases_elsewhere(make_repo, tmp_path):
    root = make_repo(HIERARCHY)
    ix = open_index(root, tmp_path / "inc")
    ix.update()

    def target():
        return [e.dst for e in ix.callees("repo:app/models.py#Order.save")]

    assert target() == ["repo:app/base.py#Base.validate"]
    # Middle's bases change; models.py (which holds the call) is unchanged
    write_tree(root, {"app/mixins.py": "from app.base import Base, Other\n\nclass Middle(Other):\n    pass\n"})
    assert ix.update().modified == ["app/mixins.py"]
    assert target() == ["repo:app/base.py#Other.validate"]
    assert snapshot(ix) == cold_snapshot(root, tmp_path, "cold1")
    # Middle gains its own validate: the nearest definition wins
    write_tree(root, {"app/mixins.py": "from app.base import Base, Other\n\nclass Middle(Other):\n"
                                       "    def validate(self):\n        return None\n"})
    ix.update()
    assert target() == ["repo:app/mixins.py#Middle.validate"]
    assert snapshot(ix) == cold_snapshot(root, tmp_path, "cold2")
    # Middle loses its bases and its method: nothing is inherited any more
    write_tree(root, {"app/mixins.py": "class Middle:\n    pass\n"})
    ix.update()
    assert target() == [None]
    assert snapshot(ix) == cold_snapshot(root, tmp_path, "cold3")
