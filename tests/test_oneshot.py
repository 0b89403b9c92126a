"""One-shot commands (issue 39): a `repoctx search` in a fresh process answers what the library answers in
process, prints what rich would print, and a no-op `repoctx index` writes nothing."""

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from tests.conftest import write_tree
from typer.testing import CliRunner

import repoctx.cli as cli
from repoctx import Index, Settings, render
from repoctx.cli import app

runner = CliRunner()
SRC = Path(__file__).resolve().parent.parent / "src"
FILES = {
    "shop/cart.py": (
        "class Cart:\n"
        '    """A shopping cart: items and their quantities."""\n\n'
        "    def add(self, item: str, quantity: int = 1) -> None:\n"
        '        """Put an item in the cart."""\n'
        "        self.items[item] = self.items.get(item, 0) + quantity\n\n"
        "    def total(self, prices: dict[str, float]) -> float:\n"
        '        """The price of everything in the cart."""\n'
        "        return sum(prices[i] * q for i, q in self.items.items())\n"
    ),
    "shop/tax.py": (
        "def vat(amount: float, rate: float = 0.2) -> float:\n"
        '    """Value added tax on an amount."""\n'
        "    return amount * rate\n\n\n"
        "def with_vat(amount: float) -> list[float]:\n"
        "    return [amount, amount + vat(amount)]\n"
    ),
    "shop/ship.py": (
        "def shipping_cost(weight_kg: float, express: bool = False) -> float:\n"
        '    """What delivery costs for a parcel of this weight."""\n'
        "    return (5.0 if express else 2.5) * max(weight_kg, 1.0)\n"
    ),
    "tests/test_cart.py": "from shop.cart import Cart\n\n\ndef test_total():\n    assert Cart().total({}) == 0\n",
    "README.md": "# shop\n\nA tiny shop: a cart, taxes and shipping.\n",
}
QUESTIONS = ("how is the price of the cart computed", "value added tax", "Cart.add", "delivery cost of a parcel")


def _fresh_process(args: list[str], env: dict) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "repoctx.cli", *args],
        env={**env, "PYTHONPATH": str(SRC)},
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.fixture(scope="module")
def shop(tmp_path_factory):
    """The shop indexed with the default embedder (vectors included), and the environment that finds it."""
    base = tmp_path_factory.mktemp("oneshot")
    root = write_tree(base / "shop", FILES)
    env = {k: v for k, v in os.environ.items() if not k.startswith("REPOCTX_")}
    env.update(REPOCTX_INDEX_DIR=str(base / "ix"), REPOCTX_CACHE=str(base / "cache"))
    done = _fresh_process(["index", str(root)], env)
    assert done.returncode == 0, done.stderr
    return root, env


def test_a_fresh_search_process_ranks_as_the_library_does(shop, monkeypatch):
    root, env = shop
    monkeypatch.setenv("REPOCTX_CACHE", env["REPOCTX_CACHE"])  # the model's optimised graph: the same file
    settings = Settings(
        index_dir=Path(env["REPOCTX_INDEX_DIR"]), vector_cache=Path(env["REPOCTX_CACHE"]) / "vectors.sqlite"
    )
    with Index(root, settings, create=False) as ix:
        assert ix.vectors_status()["current"]  # hybrid: the dense signal takes part
        for question in QUESTIONS:
            for level in ("symbol", "file"):
                got = _fresh_process(["search", question, "--repo", str(root), "--level", level, "--json"], env)
                assert got.returncode == 0, got.stderr
                res = ix.retrieve(question, k=10, level=level)
                want = render.wire(render.retrieval_dict(res, "brief", index=ix))
                assert json.loads(got.stdout)["results"] == want["results"], (question, level)
                assert "dense" in got.stdout or level == "file" or question == "Cart.add"


@pytest.mark.parametrize("detail", ["brief", "signatures", "full"])
def test_plain_output_is_what_rich_prints(shop, monkeypatch, detail):
    root, env = shop
    for k, v in env.items():
        if k.startswith("REPOCTX_"):
            monkeypatch.setenv(k, v)
    for question in QUESTIONS:
        args = ["search", question, "--repo", str(root), "--detail", detail]
        plain = runner.invoke(app, args)
        monkeypatch.setattr(cli, "_plain_is_rich", lambda *texts: False)
        styled = runner.invoke(app, args)
        monkeypatch.undo()
        for k, v in env.items():
            if k.startswith("REPOCTX_"):
                monkeypatch.setenv(k, v)
        assert plain.exit_code == styled.exit_code == 0
        assert plain.output == styled.output and "route: " in plain.output


def test_text_rich_would_change_goes_through_rich(monkeypatch):
    monkeypatch.delenv("FORCE_COLOR", raising=False)
    monkeypatch.delenv("TTY_COMPATIBLE", raising=False)
    assert cli._plain_is_rich("a.py:1-2 :: f(x: list[str]) — lexical #1", "one intent")
    assert not cli._plain_is_rich("func main() {\n\tprintln()\n}")  # rich expands the tab
    assert not cli._plain_is_rich("status :ok: here")  # rich makes it an emoji
    assert cli._plain_is_rich("a.py:1-2 :: f — x::ok: here")  # rich's scan takes "::" (no emoji), then "ok: here"
    assert not cli._plain_is_rich("a:::ok:")  # "::", then ":ok:"
    assert not cli._plain_is_rich("plain", "a [bold] reason")  # markup in a line printed with it
    monkeypatch.setenv("FORCE_COLOR", "1")
    assert not cli._plain_is_rich("plain")


def test_a_no_op_index_writes_nothing_though_some_files_are_passed_over(tmp_path, monkeypatch):
    monkeypatch.setenv("REPOCTX_EMBEDDER", "none")
    monkeypatch.setenv("REPOCTX_INDEX_DIR", str(tmp_path / "ix"))
    files = {
        **FILES,
        "shop/blob.txt": b"PNG\x00\x01\x02 not text",
        "static/site.css": "a{color:red}" * 600,  # one line of 7 kB: minified
    }
    root = write_tree(tmp_path / "shop", files)
    first = runner.invoke(app, ["index", str(root), "--json"])
    assert first.exit_code == 0, first.output
    skipped = {s["path"]: s["reason"] for s in json.loads(first.output)["skipped"]}
    assert skipped == {"shop/blob.txt": "binary", "static/site.css": "minified"}
    db = sqlite3.connect(tmp_path / "ix" / "index.sqlite")
    version = db.execute("PRAGMA data_version").fetchone()[0]
    again = runner.invoke(app, ["index", str(root), "--json"])
    assert again.exit_code == 0, again.output
    report = json.loads(again.output)
    assert {s["path"]: s["reason"] for s in report["skipped"]} == skipped
    assert not (report["added"] or report["modified"] or report["deleted"]) and report["unchanged"] == len(FILES)
    assert db.execute("PRAGMA data_version").fetchone()[0] == version  # no other connection committed
    status = runner.invoke(app, ["status", str(root), "--json"])  # and status calls the index fresh
    assert status.exit_code == 0 and json.loads(status.output)["fresh"], status.output
    # a file the index holds that becomes binary still leaves it
    (root / "shop/ship.py").write_bytes(b"\x00\x01binary now")
    gone = json.loads(runner.invoke(app, ["index", str(root), "--json"]).output)
    assert gone["modified"] == [] and {s["path"]: s["reason"] for s in gone["skipped"]}["shop/ship.py"] == "binary"
    with Index(root, Settings(index_dir=tmp_path / "ix", embedder="none"), create=False) as ix:
        assert "shop/ship.py" not in {p for _, p in ix.files()}


def test_index_counts_are_the_repositorys_in_a_shared_store(tmp_path, monkeypatch):
    monkeypatch.setenv("REPOCTX_EMBEDDER", "none")
    monkeypatch.setenv("REPOCTX_INDEX_DIR", str(tmp_path / "ix"))
    a = write_tree(tmp_path / "a", FILES)
    b = write_tree(tmp_path / "b", {"lib/one.py": "def one():\n    return two()\n\n\ndef two():\n    return 2\n"})
    assert runner.invoke(app, ["index", str(a)]).exit_code == 0
    out_b = runner.invoke(app, ["index", str(b)]).output
    with Index(b, Settings(index_dir=tmp_path / "ix", embedder="none"), create=False) as ix:
        counts = ix.store.counts(ix.scope())
    assert f"{counts['files']} files" in out_b and f"{counts['capsules']} capsules, {counts['edges']} edges" in out_b
    assert counts["files"] == 1  # b's, not the store's
    out_a = runner.invoke(app, ["index", str(a)]).output  # a no-op, two repositories in the store
    with Index(a, Settings(index_dir=tmp_path / "ix", embedder="none"), create=False) as ix:
        counts = ix.store.counts(ix.scope())
        whole = ix.store.counts()
    assert f"{counts['capsules']} capsules, {counts['edges']} edges" in out_a and whole["edges"] > counts["edges"]


def test_a_whole_set_read_from_its_file_scores_as_its_map_does(tmp_path):
    import numpy as np

    from repoctx.store.faiss_index import FaissIndex, Int8Matrix

    rng = np.random.default_rng(7)
    rows = rng.standard_normal((20_000, 48)).astype(np.float32)  # more than one block of rows
    rows /= np.linalg.norm(rows, axis=1, keepdims=True)
    ids = [f"r:f.py#u{i}" for i in range(len(rows))]
    fx = FaissIndex(tmp_path / "v")
    fx.write("m", 48, ids, rows)
    stored, _ = fx._read(fx.meta())
    assert isinstance(stored, Int8Matrix) and stored.file is not None
    mapped = Int8Matrix(stored.q, stored.scale)  # no file: every row read through the map
    for q in rng.standard_normal((5, 48)).astype(np.float32):
        assert np.array_equal(stored.scores(q), mapped.scores(q))
    query = rows[42]
    assert fx.search(query, 5)[0][0] == ids[42]
    fx.write("m", 48, ids[:100], rows[:100])  # swapped: the old files are unlinked
    found = FaissIndex(tmp_path / "v").search(query, 100)
    assert found[0][0] == ids[42] and sorted(i for i, _ in found) == sorted(ids[:100])
    assert np.array_equal(stored.scores(query), mapped.scores(query))  # the set read before still reads whole


def test_carried_int8_rows_are_stored_as_a_float32_carry_stored_them(tmp_path):
    import numpy as np

    from repoctx.store.faiss_index import FaissIndex, Int8Matrix
    from repoctx.store.sqlite import FaissSink

    rng = np.random.default_rng(3)
    rows = rng.standard_normal((3000, 32)).astype(np.float32)
    rows /= np.linalg.norm(rows, axis=1, keepdims=True)
    ids = [f"r:f.py#u{i}" for i in range(len(rows))]
    old = FaissIndex(tmp_path / "old")
    old.write("m", 32, ids, rows, hashes=[f"h{i}" for i in range(len(rows))], text_version=1)
    _, floats, _ = old.reusable("m", 32, 1)
    _, int8, _ = old.reusable("m", 32, 1, int8=True)
    assert isinstance(int8, Int8Matrix) and isinstance(floats, np.ndarray)
    fresh = rng.standard_normal((5, 32)).astype(np.float32)
    keep = list(range(0, 3000, 2))
    out = {}
    for name, carried, reserve in (
        ("floats", floats[keep], False),
        ("int8", int8[keep], False),
        ("int8-reserved", int8[keep], True),
        ("floats-reserved", floats[keep], True),
    ):
        fx = FaissIndex(tmp_path / name)
        sink = FaissSink(fx, "m", 32, "1")  # as a fill hands them over: the carried rows, then the new ones
        sink.add([ids[i] for i in keep], carried)
        if reserve:
            sink.reserve(len(fresh))
        sink.add(["new"] * 5, fresh)
        sink.finish()
        stored, _ = fx._read(fx.meta())
        out[name] = (np.asarray(stored.q), stored.scale)
    for name in ("int8", "int8-reserved", "floats-reserved"):
        assert np.array_equal(out["floats"][0], out[name][0]) and np.array_equal(out["floats"][1], out[name][1])


def test_the_optimised_graph_kept_in_the_cache_gives_the_same_vectors(tmp_path, monkeypatch):
    import numpy as np

    from repoctx.providers.embedding import LocalMiniLM

    texts = ["how is the price of the cart computed", FILES["shop/cart.py"], "def vat(amount, rate)"]
    blocked = tmp_path / "not-a-folder"
    blocked.write_text("")
    monkeypatch.setenv("REPOCTX_CACHE", str(blocked))  # nowhere to keep it: optimised in the session only
    plain = LocalMiniLM().encode(texts)
    monkeypatch.setenv("REPOCTX_CACHE", str(tmp_path / "cache"))
    first = LocalMiniLM().encode(texts)  # optimises and keeps the graph
    kept = list((tmp_path / "cache" / "onnx").glob("*.onnx"))
    assert len(kept) == 1 and not list((tmp_path / "cache" / "onnx").glob("*.tmp"))
    again = LocalMiniLM().encode(texts)  # loads the kept graph
    assert np.array_equal(plain, first) and np.array_equal(plain, again)
    kept[0].write_bytes(b"not a model")  # damaged: optimised again, and kept again
    assert np.array_equal(plain, LocalMiniLM().encode(texts)) and kept[0].stat().st_size > 1000


def test_only_what_rich_would_change_goes_through_it(monkeypatch):
    monkeypatch.delenv("FORCE_COLOR", raising=False)
    monkeypatch.delenv("TTY_COMPATIBLE", raising=False)
    assert cli._plain_is_rich("", "vectors: 10 capsules in 0.1s (local:minilm-l6-v2-pc-int8:128)")  # no such emoji
    assert not cli._plain_is_rich("", "all :thumbs_up: done")


def test_a_question_embedded_ahead_is_embedded_once_and_holds_up_no_other():
    import threading

    import numpy as np

    from repoctx.vectors import DenseRetriever

    class Gated:
        model_id, dim = "gated", 4

        def __init__(self):
            self.calls: list[str] = []
            self.open = threading.Event()

        def encode(self, texts):
            self.calls += texts
            if "slow" in texts:
                assert self.open.wait(30)
            return np.ones((len(texts), 4), dtype=np.float32) * len(texts[0])

    emb = Gated()
    dense = DenseRetriever(store=None, embedder=emb)
    dense.prefetch(["slow"])
    dense.prefetch(["slow", "fast"])  # "slow" is on its way: only "fast" starts
    assert dense.vector("other").tolist() == [5.0] * 4  # answered while "slow" is still held up
    emb.open.set()
    assert dense.vector("slow").tolist() == [4.0] * 4 and dense.vector("fast").tolist() == [4.0] * 4
    assert sorted(emb.calls) == ["fast", "other", "slow"]  # each embedded once


def test_a_read_command_as_a_process_ends_with_its_own_code_and_whole_output(shop):
    """`repoctx search` and the other reads end their process without tearing it down: the exit code is the
    command's and every line is written first."""
    root, env = shop
    found = _fresh_process(["search", "value added tax", "--repo", str(root), "-k", "200", "--detail", "full"], env)
    assert found.returncode == 0 and found.stdout.startswith("route: ") and found.stdout.endswith("\n")
    assert found.stdout.count("\n") > 10 and "vat(amount" in found.stdout
    none = _fresh_process(["symbol", "NoSuchUnit", "--repo", str(root)], env)
    assert none.returncode == 1 and "no definition" in none.stdout + none.stderr
    empty = _fresh_process(["search", " ", "--repo", str(root)], env)
    assert empty.returncode == 2 and "the query is empty" in empty.stderr


def test_an_index_process_leaves_its_files_whole(tmp_path):
    """`repoctx index` ends without finalisers too: its store and the vector cache are closed first, their logs
    folded in (no -wal or -shm file left beside them)."""
    root = write_tree(tmp_path / "shop", FILES)
    env = {k: v for k, v in os.environ.items() if not k.startswith("REPOCTX_")}
    env.update(REPOCTX_INDEX_DIR=str(tmp_path / "ix"), REPOCTX_CACHE=str(tmp_path / "cache"))
    assert _fresh_process(["index", str(root)], env).returncode == 0
    (root / "shop" / "gift.py").write_text('def wrap_gift(item):\n    """Gift-wrap an item."""\n    return item\n')
    done = _fresh_process(["index", str(root)], env)
    assert done.returncode == 0, done.stderr
    assert "1 added" in done.stdout and "2 embedded" in done.stdout  # its module and its function
    left = [p.name for d in (tmp_path / "ix", tmp_path / "cache") for p in d.iterdir()]
    assert not [n for n in left if n.endswith(("-wal", "-shm"))], left
    got = _fresh_process(["search", "gift wrapping", "--repo", str(root), "--json"], env)
    assert "shop/gift.py" in json.dumps(json.loads(got.stdout)["results"][0])


@pytest.mark.parametrize(
    "args",
    [
        ["search", "--help"],
        ["grep", "--help"],
        ["index", "--help"],
        ["search"],
        ["search", "tax", "--no-such-option"],
        ["outline", "a.py", "-k", "3"],
    ],
)
def test_a_one_shot_process_reads_its_line_as_the_whole_app_does(tmp_path, args):
    """A one-shot command's process builds only the command it runs: its help, its usage errors and their exit
    codes are the ones the whole app gives (CliRunner builds every command)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("REPOCTX_")}
    env.update(REPOCTX_INDEX_DIR=str(tmp_path / "ix"), REPOCTX_CACHE=str(tmp_path / "cache"), COLUMNS="100")
    done = _fresh_process(args, {**env, "TERM": "dumb"})
    whole = CliRunner().invoke(app, args, env={"COLUMNS": "100", "TERM": "dumb"}, prog_name="python -m repoctx.cli")
    assert done.returncode == whole.exit_code == (0 if args[-1] == "--help" else 2)
    assert done.stdout + done.stderr == whole.output
    assert app.registered_commands and len(app.registered_commands) > 6  # the app itself is left whole
