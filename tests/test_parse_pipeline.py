"""A large update parses in a forked worker while the indexer writes (issue 39's cold index): what the index holds
and what the update reports are the same as when every file is parsed in process, and a worker that dies midway
costs time, never a file."""

from __future__ import annotations

import os

import pytest
from tests.conftest import write_tree
from tests.test_index_size import BASE, _state

import repoctx.indexer as indexer
from repoctx import Index, Settings

TREE = {
    **BASE,
    **{
        f"pkg/gen/m{i}.py": f"from pkg.models import Model\n\n\ndef make_{i}():\n    return Model().save()\n"
        for i in range(12)
    },
    "web/app.js": "import {x} from './util';\nexport function run(a) { return x(a) + 1; }\nclass W { go() { run(1); } }\n",
    "web/util.js": "export function x(v) { return v * 2; }\n",
    "conf/settings.py": 'AWS_SECRET_ACCESS_KEY = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"\n\n\ndef load():\n    return 1\n',
    "bad/latin1.py": "def caf\xe9():\n    return 'ol\xe9'\n".encode("latin-1"),
    "bad/broken.py": "def broken(:\n    return\n\nclass Fine:\n    def ok(self):\n        return broken()\n",
    "data/blob.bin": b"\x00\x01\x02" * 100,
    "static/min.js": "var a=1;" * 4000,
    "notes/README.md": "# Notes\n\nCall make_3() to build a model.\n",
}


def _report(rep) -> dict:
    d = rep.to_dict()
    d.pop("seconds")
    return d


def _index(tmp_path, root, name, monkeypatch, min_files: int, any_threads: bool = True) -> tuple[dict, dict]:
    monkeypatch.setattr(indexer, "PIPELINE_MIN_FILES", min_files)
    if any_threads:  # threads other tests left behind (background fills) must not turn the worker off here
        monkeypatch.setattr(indexer, "_can_fork", lambda: True)
    ix = Index(root, Settings(index_dir=tmp_path / name, embedder="none"))
    try:
        rep = ix.update()
        return _state(ix), _report(rep)
    finally:
        ix.close()


@pytest.fixture
def root(tmp_path):
    return write_tree(tmp_path / "repo", TREE)


def test_a_worker_parse_indexes_what_an_in_process_parse_does(tmp_path, root, monkeypatch):
    calls: list[int] = []
    real = indexer._parse_in_worker

    def spy(*a, **k):
        calls.append(1)
        yield from real(*a, **k)

    monkeypatch.setattr(indexer, "_parse_in_worker", spy)
    here = _index(tmp_path, root, "here", monkeypatch, 10**9)
    assert not calls
    worker = _index(tmp_path, root, "worker", monkeypatch, 1)
    assert calls, "the worker path was not taken"
    assert worker == here
    assert here[1]["redacted"] and here[1]["syntax_errors"] and here[1]["invalid_utf8"] and here[1]["skipped"]


def test_a_worker_that_dies_midway_leaves_the_rest_to_this_process(tmp_path, root, monkeypatch):
    here = _index(tmp_path, root, "here", monkeypatch, 10**9)
    parent = os.getpid()
    real = indexer._parse_one
    seen = [0]
    parsed_here = [0]

    def dies_on_the_fifth(*a, **k):
        if os.getpid() != parent:
            seen[0] += 1
            if seen[0] == 5:
                os._exit(3)  # as a kill -9 or the OOM killer would end it: no goodbye on the pipe
        else:
            parsed_here[0] += 1
        return real(*a, **k)

    monkeypatch.setattr(indexer, "_parse_one", dies_on_the_fifth)
    monkeypatch.setattr(indexer, "_BATCH_FILES", 1)
    assert _index(tmp_path, root, "worker", monkeypatch, 1) == here
    assert 0 < parsed_here[0] < len(TREE) - 4  # the worker's first four stood; this process parsed the rest


def test_an_update_from_a_thread_parses_in_process(tmp_path, root, monkeypatch):
    """A process with other threads never forks (a lock one of them holds would stay held in the child)."""
    import threading

    forked: list[int] = []
    monkeypatch.setattr(indexer, "_parse_in_worker", lambda *a, **k: forked.append(1) or iter(()))
    out: list = []
    t = threading.Thread(target=lambda: out.append(_index(tmp_path, root, "thread", monkeypatch, 1, False)))
    t.start()
    t.join()
    assert not forked
    assert out and out[0][0]["counts"] == _index(tmp_path, root, "here", monkeypatch, 10**9)[0]["counts"]


def test_a_worker_that_dies_while_linking_leaves_the_rest_to_this_process(tmp_path, root, monkeypatch):
    """A cold update's edges come from the worker a few files at a time; should it die midway, the files it did not
    link are resolved here, over every parsed file: the same edges, in the same order."""
    here = _index(tmp_path, root, "here", monkeypatch, 10**9)
    real_link, real_resolve = indexer._link, indexer.resolve_file
    resolved_here = [0]

    def dies_after_one_message(parsed):
        chunks = real_link(parsed)
        yield next(chunks)
        os._exit(3)

    def counted(*a, **k):
        resolved_here[0] += 1  # (in the worker, its own copy of the count)
        return real_resolve(*a, **k)

    monkeypatch.setattr(indexer, "_link", dies_after_one_message)
    monkeypatch.setattr(indexer, "_LINK_FILES", 3)
    monkeypatch.setattr(indexer, "resolve_file", counted)
    worker = _index(tmp_path, root, "worker", monkeypatch, 1)
    assert worker == here
    assert 0 < resolved_here[0] <= here[0]["counts"]["files"] - 3  # the three files of its one message stood


def test_a_cold_update_is_linked_by_its_worker(tmp_path, root, monkeypatch):
    resolved_here = [0]
    real_resolve = indexer.resolve_file

    def counted(*a, **k):
        resolved_here[0] += 1
        return real_resolve(*a, **k)

    monkeypatch.setattr(indexer, "resolve_file", counted)
    here = _index(tmp_path, root, "here", monkeypatch, 10**9)
    assert resolved_here[0] > 0
    resolved_here[0] = 0
    assert _index(tmp_path, root, "worker", monkeypatch, 1) == here
    assert resolved_here[0] == 0  # every file's edges came from the worker


def _trigram_hits(ix, needles: list[str]) -> dict[str, list[int]]:
    """The texts grep's trigram index gives for each needle (a contentless FTS5 table: only its index answers)."""
    db = ix.store.db

    def match(n: str) -> str:  # every trigram of the needle (detail=none reads no phrase)
        return " AND ".join(dict.fromkeys('"' + n[i : i + 3].replace('"', '""') + '"' for i in range(len(n) - 2)))

    return {
        n: [r[0] for r in db.execute("SELECT rowid FROM text_fts WHERE text_fts MATCH ? ORDER BY rowid", (match(n),))]
        for n in needles
    }


def test_trigrams_given_while_the_writer_waits_index_what_direct_inserts_do(tmp_path, root, monkeypatch):
    """A cold update gives its texts to grep's trigram index while it waits for the worker, a few at a time, the
    oldest at once past a bound: the index answers as when every text went in as it was written."""
    import repoctx.store.sqlite as sq

    needles = ["Model().save", "make_7", "return x(a)", "AWS_SECRET", "Notes", "caf", "zzz-nowhere"]
    direct: dict | None = None
    indexed_hits: dict | None = None
    real = sq.SQLiteRepoWriter.idle
    for label, deferred, step in (("direct", 0, 0), ("idle", 200, 40)):
        monkeypatch.setattr(sq, "_TRIGRAM_DEFERRED", deferred)
        monkeypatch.setattr(sq, "_TRIGRAM_STEP", step)
        idles: list[bool] = []
        monkeypatch.setattr(sq.SQLiteRepoWriter, "idle", lambda self, got=idles: got.append(real(self)) or got[-1])
        monkeypatch.setattr(indexer, "PIPELINE_MIN_FILES", 5)
        monkeypatch.setattr(indexer, "_can_fork", lambda: True)
        ix = Index(root, Settings(index_dir=tmp_path / label, embedder="none"))
        try:
            ix.update()
            ix.store.db.execute("INSERT INTO text_fts(text_fts, rank) VALUES('integrity-check', 1)")
            hits = _trigram_hits(ix, needles)
        finally:
            ix.close()
        if label == "direct":
            direct = hits
            assert all(hits[n] for n in needles[:-1]) and not hits["zzz-nowhere"]
        else:
            indexed_hits = hits
            assert False in idles  # it waited with nothing left to index (the worker's messages were late)
    assert indexed_hits == direct


def test_a_text_let_go_before_its_trigrams_were_indexed_leaves_no_trace(tmp_path, root):
    """A text kept and let go in one transaction (its file written twice) never reaches the trigram index: a
    'delete' of a row a contentless FTS5 table never had would corrupt it."""
    ix = Index(root, Settings(index_dir=tmp_path / "ix", embedder="none"))
    try:
        ix.update()
        w = ix.store.writer(ix.repo)
        rec = w.files()["notes/README.md"]
        with w.transaction():
            w.put_file(rec, [], {}, "first version mentions aardvark\n")
            w.put_file(rec, [], {}, "second version mentions zebra\n")
            assert w._trigrams  # not indexed yet
        assert not w._trigrams
        ix.store.db.execute("INSERT INTO text_fts(text_fts, rank) VALUES('integrity-check', 1)")
        last = ix.store.db.execute("SELECT max(id) FROM texts").fetchone()[0]
        assert _trigram_hits(ix, ["aardvark", "zebra"]) == {"aardvark": [], "zebra": [last]}
        with pytest.raises(RuntimeError), w.transaction():  # a rolled-back transaction's texts are forgotten
            w.put_file(rec, [], {}, "third version mentions okapi\n")
            raise RuntimeError("stop")
        assert not w._trigrams and _trigram_hits(ix, ["okapi"]) == {"okapi": []}
    finally:
        ix.close()


def _pg_state(ix) -> dict:
    st, sc = ix.store, ix.scope()
    caps = st.all_capsules(sc)
    ids = [c.id for c in caps]
    return {
        "capsules": [(c.id, c.kind, c.qualname, c.start_line, c.end_line, c.text) for c in caps],
        "edges": st.all_edges(sc),
        "counts": st.counts(sc),
        "to": sorted(map(repr, st.edges_to(ids, (), sc))),
        "lexical": [st.lexical(q.split(), 10, sc) for q in ("save model", "render", "make model", "slugify text")],
        "grep": sorted((m["path"], m["line"]) for m in ix.grep("Model", limit=1000)["matches"]),
    }


def test_postgres_writes_a_large_update_from_a_thread_as_it_would_at_the_end(tmp_path, root, monkeypatch):
    """A large update hands its buffered rows to a thread to write while it goes on (the server writes while the
    indexer parses): the store holds what one flush at the end would have written; a write that fails there fails
    the update, and the transaction leaves nothing behind."""
    import repoctx.store.postgres as pgs
    from tests.pg import fresh_database

    states = []
    real = pgs.PostgresRepoWriter._hand_off
    for lines in (10**9, 7):  # one flush at the end; a hand-off every few units
        monkeypatch.setattr(pgs, "_BEHIND_LINES", lines)
        monkeypatch.setattr(pgs, "_BEHIND_EDGES", lines)  # (edges are handed off too, counts applied once at the end)
        monkeypatch.setattr(pgs, "_RIDS_AHEAD", 3)
        handed: list[int] = []
        monkeypatch.setattr(pgs.PostgresRepoWriter, "_hand_off", lambda self, got=handed: got.append(1) or real(self))
        url = fresh_database()
        pgs.migrate(url)
        ix = Index(root, Settings(database_url=url, embedder="none"))
        try:
            ix.update()
            states.append(_pg_state(ix))
        finally:
            ix.close()
        assert bool(handed) == (lines == 7)
    assert states[0] == states[1] and states[0]["capsules"] and states[0]["grep"]

    def broken(self, conn, taken):
        raise RuntimeError("the server went away")

    url = fresh_database()
    pgs.migrate(url)
    monkeypatch.setattr(pgs.PostgresRepoWriter, "_write", broken)
    ix = Index(root, Settings(database_url=url, embedder="none"))
    try:
        with pytest.raises(RuntimeError, match="server went away"):
            ix.update()
        monkeypatch.undo()
        assert ix.store.counts(ix.scope())["capsules"] == 0  # rolled back whole
    finally:
        ix.close()
