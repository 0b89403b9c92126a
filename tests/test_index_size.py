"""The compact SQLite layout (schemas 5 and 6, issue 39): edges as integers, a contentless lexical index, units' texts
read from their file's. Whatever was updated incrementally reads exactly as a fresh index of the same tree."""

from __future__ import annotations

import os
import re
import sqlite3
from contextlib import contextmanager

import numpy as np

from tests.conftest import write_tree

from repoctx import Index, Settings
from repoctx.store.postings import lengths_of, read_lengths, stats, unpack_many

BASE = {
    "pkg/__init__.py": "",
    "pkg/models.py": (
        'class Base:\n    """The base of every model."""\n\n'
        "    def save(self):\n        return self.validate()\n\n"
        "    def validate(self):\n        return True\n\n\n"
        "class Model(Base):\n    def save(self):\n        return super().save()\n\n    def clean(self):\n"
        "        return self.validate()\n"
    ),
    "pkg/views.py": (
        "from pkg.models import Model\n\n\n"
        "def render(request):\n    m = Model()\n    m.save()\n    return m.clean()\n\n\n"
        "def helper():\n    return render(None)\n"
    ),
    "pkg/util.py": "def slugify(text):\n    return text.lower().replace(' ', '-')\n",
    "docs/guide.md": "# Guide\n\nSave a model with save(); validate it first.\n\n## Rendering\n\nrender() the view.\n",
}


def _state(ix: Index) -> dict:
    st, sc = ix.store, ix.scope()
    caps = st.all_capsules(sc)
    ids = [c.id for c in caps]
    id_of = dict(st.db.execute("SELECT rowid, id FROM capsules"))
    rows = st.db.execute("SELECT term, n, p FROM lex WHERE n > 0").fetchall()
    which, rowids, wtf = unpack_many([r[2] for r in rows], [r[1] for r in rows])
    # each posting by its unit's id (a unit written again keeps its rowid, a new one takes a new one), with each
    # unit's length: what BM25 reads
    vocab = sorted(zip([rows[i][0] for i in which.tolist()], map(id_of.get, rowids.tolist()), wtf.tolist()))
    units = np.array(sorted(id_of), dtype=np.int64)
    lengths = sorted(zip(map(id_of.get, units.tolist()), lengths_of(read_lengths(st.db), units).tolist()))
    return {
        "capsules": [(c.id, c.kind, c.qualname, c.start_line, c.end_line, c.text, c.docstring, c.parent) for c in caps],
        "edges": st.all_edges(sc),
        "counts": st.counts(sc),
        "vocab": vocab,
        "from": sorted(map(repr, st.edges_from(ids, (), sc))),
        "to": sorted(map(repr, st.edges_to(ids, (), sc))),
        "lexical": [st.lexical(q.split(), 10, sc) for q in ("save model", "render", "validate", "slugify text")],
        "lengths": lengths,
        "stats": stats(st.db),
    }


def _fresh(tmp_path, root, name) -> dict:
    ix = Index(root, Settings(index_dir=tmp_path / name, embedder="none"))
    try:
        ix.update()
        return _state(ix)
    finally:
        ix.close()


@contextmanager
def _traced(db):
    """The SQL statements run on ``db`` while the block runs."""
    seen: list[str] = []
    db.set_trace_callback(seen.append)
    try:
        yield seen
    finally:
        db.set_trace_callback(None)


@contextmanager
def _indexed(tmp_path):
    """BASE indexed under tmp_path, open while the block runs."""
    ix = Index(write_tree(tmp_path / "repo", BASE), Settings(index_dir=tmp_path / "ix", embedder="none"))
    try:
        ix.update()
        yield ix
    finally:
        ix.close()


def _plan(db, sql: str) -> str:
    return " | ".join(r[3] for r in db.execute("EXPLAIN QUERY PLAN " + sql, [None] * sql.count("?")).fetchall())


def test_incremental_updates_read_as_a_fresh_index(tmp_path):
    root = write_tree(tmp_path / "repo", BASE)
    ix = Index(root, Settings(index_dir=tmp_path / "ix", embedder="none"))
    try:
        ix.update()
        assert _state(ix) == _fresh(tmp_path, root, "fresh0")
        # a method renamed, a class's bases changed, a file deleted, one added, one left alone but touched
        (root / "pkg" / "models.py").write_text(
            BASE["pkg/models.py"].replace("def clean", "def tidy").replace("class Model(Base)", "class Model")
        )
        (root / "pkg" / "util.py").unlink()
        write_tree(
            root, {"pkg/forms.py": "from pkg.util import slugify\n\n\ndef clean(form):\n    return slugify(form)\n"}
        )
        os.utime(root / "pkg" / "views.py")
        report = ix.update()
        assert report.changed and report.deleted == ["pkg/util.py"]
        assert _state(ix) == _fresh(tmp_path, root, "fresh1")
        # the file back as it was: the edges of the unchanged views.py reach its units again
        (root / "pkg" / "models.py").write_text(BASE["pkg/models.py"])
        ix.update()
        state = _state(ix)
        assert state == _fresh(tmp_path, root, "fresh2")
        assert ("repo:pkg/views.py#render", "calls", "Model.clean", "repo:pkg/models.py#Model.clean") in state["edges"]
    finally:
        ix.close()


def test_the_layout_keeps_no_second_copy(tmp_path):
    """Edges hold integers, not ids and paths; the lexical index keeps no text of its own; a unit whose text is
    its file's keeps none either."""
    root = write_tree(tmp_path / "repo", BASE)
    ix = Index(root, Settings(index_dir=tmp_path / "ix", embedder="none"))
    try:
        ix.update()
        db = sqlite3.connect(tmp_path / "ix" / "index.sqlite")
        tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        assert "fts_content" not in tables
        assert [r[1] for r in db.execute("PRAGMA table_info(edges)")] == ["src", "seq", "kind", "name", "dst"]
        assert db.execute("SELECT count(*) FROM edges").fetchone()[0] == ix.store.counts()["edges"] > 0
        db.close()
    finally:
        ix.close()


def test_two_repositories_in_one_file_rebuild_one_without_the_other(tmp_path):
    """A rebuild empties the shared lexical index and gives it the other repository's units again."""
    a = write_tree(tmp_path / "a", BASE)
    b = write_tree(tmp_path / "b", {"lib/core.py": "def compute_total(items):\n    return sum(items)\n"})
    settings = Settings(index_dir=tmp_path / "ix", embedder="none")
    ia, ib = Index(a, settings), Index(b, settings)
    try:
        ia.update()
        ib.update()
        before = [cid for cid, _ in ib.store.lexical(["compute", "total"], 5, ib.scope())]
        w = ia.store.writer(ia.repo)
        with w.transaction():
            w.clear()
        assert ia.store.lexical(["save", "model"], 5, ia.scope()) == []
        assert [cid for cid, _ in ib.store.lexical(["compute", "total"], 5, ib.scope())] == before != []
        ia.update()
        assert ia.store.lexical(["slugify"], 5, ia.scope())[0][0] == "a:pkg/util.py#slugify"
    finally:
        ia.close()
        ib.close()


def test_a_large_write_leaves_no_large_wal_and_never_waits_for_a_reader(tmp_path, monkeypatch):
    """A cold build is one transaction: its write-ahead log is copied into the database and truncated after it
    (Django's was 101 MiB beside a 93 MiB index). A reader mid-read makes the checkpoint skip, not wait."""
    from repoctx.store.sqlite import SQLiteStore

    monkeypatch.setattr(SQLiteStore, "WAL_KEEP", 0)
    root = write_tree(tmp_path / "repo", BASE)
    ix = Index(root, Settings(index_dir=tmp_path / "ix", embedder="none"))
    wal = tmp_path / "ix" / "index.sqlite-wal"
    try:
        ix.update()
        assert not wal.exists() or wal.stat().st_size == 0
        before = _state(ix)

        reader = sqlite3.connect(tmp_path / "ix" / "index.sqlite")
        reader.execute("BEGIN")
        reader.execute("SELECT count(*) FROM capsules").fetchone()  # holds a read snapshot
        (root / "pkg" / "util.py").write_text("def slugify(text):\n    return text.strip().lower()\n")
        ix.update()  # the checkpoint cannot truncate under the reader: skipped, the write stands
        assert wal.stat().st_size > 0
        reader.rollback()
        reader.close()
        assert ix.store.shrink_wal() and wal.stat().st_size == 0
        assert _state(ix) != before
        hits = ix.search("slugify strip lower", k=1)
        assert hits and hits[0].capsule.path == "pkg/util.py" and "strip" in hits[0].capsule.text
    finally:
        ix.close()


def test_what_a_row_can_say_is_not_stored_twice(tmp_path):
    """Schema 7: grep's texts are compressed, a unit's id and parent are made from its repository, path and
    qualname; a unit whose id or parent is not of that form keeps it whole, and each reads back as written."""
    from repoctx.store.base import FileRecord
    from repoctx.types import Capsule

    body = "def render(request):\n    return request\n" * 200
    root = write_tree(tmp_path / "repo", {**BASE, "pkg/long.py": body})
    ix = Index(root, Settings(index_dir=tmp_path / "ix", embedder="none"))
    try:
        ix.update()
        db = sqlite3.connect(tmp_path / "ix" / "index.sqlite")
        z = db.execute(
            "SELECT t.z FROM texts t JOIN files f ON f.text_hash = t.hash WHERE f.path = 'pkg/long.py'"
        ).fetchone()[0]
        assert isinstance(z, bytes) and len(z) < len(body) // 20
        assert ix.store.file_text("repo", "pkg/long.py", ix.scope()) == body
        stored = db.execute("SELECT count(*) FROM capsules WHERE id_whole IS NOT NULL OR parent_whole IS NOT NULL")
        assert stored.fetchone()[0] == 0
        assert db.execute("SELECT count(*) FROM capsules WHERE id_tail IS NULL").fetchone()[0] > 0
        db.close()

        odd = [
            Capsule(
                id="elsewhere#x",
                path="odd.py",
                language="python",
                kind="function",
                name="x",
                qualname="x",
                signature="def x()",
                start_line=1,
                end_line=2,
                text="def x():\n    pass\n",
                content_hash="h1",
                params=["a"],
                decorators=["@d"],
                parent="repo:other.py#Holder",
            ),
            Capsule(
                id="repo:odd.py#y.2",
                path="odd.py",
                language="python",
                kind="function",
                name="y",
                qualname="y",
                signature="def y()",
                start_line=3,
                end_line=4,
                text="def y():\n    pass\n",
                content_hash="h2",
                parent="repo:odd.py#",
            ),
        ]
        w = ix.store.writer("repo")
        with w.transaction():
            w.put_file(
                FileRecord("odd.py", "python", 1, 1, "h", "odd", {}, "tree-sitter"),
                odd,
                {},
                "def x():\n    pass\ndef y():\n    pass\n",
            )
        got = ix.store.file_capsules("repo", "odd.py", ix.scope())
        assert [(c.id, c.parent, c.params, c.decorators, c.text) for c in got] == [
            (c.id, c.parent, c.params, c.decorators, c.text) for c in odd
        ]
        assert [c.id for c in ix.store.capsules(["repo:odd.py#y.2", "elsewhere#x"], ix.scope())] == [
            "repo:odd.py#y.2",
            "elsewhere#x",
        ]
        assert w.cands_by_name("x")[0] == ("elsewhere#x", "odd.py", "x", "function", "odd")
    finally:
        ix.close()


def test_an_index_of_schema_6_is_rebuilt_never_read(tmp_path):
    """Schema 6 kept texts uncompressed and ids whole: opened read-only it is named another version's, and the
    next update rebuilds it."""
    import pytest

    from repoctx.store.base import SchemaMismatch
    from repoctx.store.sqlite import SCHEMA_VERSION

    root = write_tree(tmp_path / "repo", BASE)
    settings = Settings(index_dir=tmp_path / "ix", embedder="none")
    with Index(root, settings) as first:
        first.update()
    db = sqlite3.connect(tmp_path / "ix" / "index.sqlite")
    db.executescript(
        "DROP TABLE text_fts; DROP TABLE texts; CREATE TABLE texts(id INTEGER PRIMARY KEY, repo TEXT NOT NULL, "
        "hash TEXT NOT NULL, text TEXT NOT NULL, UNIQUE(repo, hash)); INSERT INTO texts(repo, hash, text) "
        "SELECT repo, text_hash, 'plain' FROM files; UPDATE meta SET value='6' WHERE key='schema_version';"
        "CREATE TABLE bulk(b BLOB); WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 300) "
        "INSERT INTO bulk SELECT randomblob(4000) FROM n;"  # an old index's pages, given back by the rebuild
    )
    db.close()
    with pytest.raises(SchemaMismatch, match="repoctx index"):
        Index(root, settings, create=False)
    ix = Index(root, settings)
    try:
        assert ix.store.meta("schema_version") == str(SCHEMA_VERSION) == "9"
        assert ix.store.db.execute("PRAGMA freelist_count").fetchone()[0] == 0  # the old tables' pages given back
        assert ix.update().capsules_written > 0
        assert [(m["path"], m["line"]) for m in ix.grep("validate")["matches"]] == [
            ("docs/guide.md", 3),
            ("pkg/models.py", 5),
            ("pkg/models.py", 7),
            ("pkg/models.py", 16),
        ]
        assert _state(ix) == _fresh(tmp_path, root, "fresh")
    finally:
        ix.close()


def test_a_write_runs_with_a_small_page_cache_and_reads_get_theirs_back(tmp_path):
    """A cold build writes ~100 MiB of pages in one transaction: past a small cache they go to the WAL instead of
    being held in memory; searches after it, even after a write that failed, have their cache back."""
    import pytest

    from repoctx.store.sqlite import SQLiteStore

    root = write_tree(tmp_path / "repo", BASE)
    ix = Index(root, Settings(index_dir=tmp_path / "ix", embedder="none"))
    try:
        ix.update()
        db, w = ix.store.db, ix.store.writer(ix.repo)
        cache = lambda: db.execute("PRAGMA cache_size").fetchone()[0]  # noqa: E731
        assert cache() == -SQLiteStore.READ_CACHE_KIB
        with w.transaction():
            assert cache() == -SQLiteStore.WRITE_CACHE_KIB < 0
            w.set_meta("probe", "1")
        assert cache() == -SQLiteStore.READ_CACHE_KIB
        with pytest.raises(RuntimeError), w.transaction():
            raise RuntimeError("interrupted")
        assert cache() == -SQLiteStore.READ_CACHE_KIB
        assert ix.store.meta("probe", ix.repo) == "1"
    finally:
        ix.close()


def test_edge_lookups_by_target_and_name_use_their_partial_indexes(tmp_path):
    """The indexes of edges' targets and names leave NULLs out: every lookup must still be served by them (a plan
    that scans the edges would answer the same, only slowly, so the plans are checked)."""
    with _indexed(tmp_path) as ix:
        st, sc = ix.store, ix.scope()
        db = st.db
        with _traced(db) as seen:
            assert st.edges_to(["repo:pkg/models.py#Base.validate"], (), sc)
            w = st.writer(ix.repo)
            assert w.edges_needing({"validate"}, {"repo:pkg/models.py#Base.save"}, set())
        lookups = [q for q in seen if "e.dst IN" in q or "e.name IN" in q]
        assert len(lookups) >= 3
        for q in lookups:
            plan = _plan(db, q)
            assert "SCAN e" not in plan and ("edges_dst" in plan or "edges_name" in plan), (q, plan)


def test_signatures_docstrings_and_parents_kept_as_positions_read_back_whole(tmp_path):
    """Schema 8: a signature or docstring that is a part of its unit's text is kept as where it is, a method's
    parent as the length of its qualname's prefix, a class's lexical body as the runs of its lines; one that is
    not (a signature joined from two lines) is kept whole. Every unit reads back as parsed, by every read path."""
    from repoctx.store.base import FileRecord
    from repoctx.types import Capsule

    root = write_tree(tmp_path / "repo", BASE)
    ix = Index(root, Settings(index_dir=tmp_path / "ix", embedder="none"))
    try:
        ix.update()
        db = sqlite3.connect(tmp_path / "ix" / "index.sqlite")
        kinds = dict(db.execute("SELECT typeof(signature), count(*) FROM capsules GROUP BY 1").fetchall())
        assert kinds.get("integer", 0) > 0
        assert db.execute("SELECT count(*) FROM capsules WHERE typeof(docstring) = 'integer'").fetchone()[0] > 0
        assert db.execute("SELECT count(*) FROM capsules WHERE typeof(parent_tail) = 'integer'").fetchone()[0] > 0
        assert db.execute("SELECT count(*) FROM capsules WHERE typeof(lex) = 'blob'").fetchone()[0] > 0  # line runs
        assert db.execute("SELECT count(*) FROM units WHERE typeof(kind) = 'integer'").fetchone()[0] > 0
        db.close()
        base = ix.store.capsules(["repo:pkg/models.py#Base"], ix.scope())[0]
        assert (base.signature, base.docstring) == ("class Base", "The base of every model.")
        save = ix.store.capsules(["repo:pkg/models.py#Model.save"], ix.scope())[0]
        assert (save.signature, save.parent) == ("def save(self)", "repo:pkg/models.py#Model")

        text = 'def joined(a,\n           b):  # why\n    """Says so."""\n    return a\n'
        unit = Capsule(
            id="repo:odd.py#joined",
            path="odd.py",
            language="cython",
            kind="function",
            name="joined",
            qualname="joined",
            signature="def joined(a, b): # why",
            docstring="Says so.",
            start_line=1,
            end_line=4,
            text=text,
            content_hash="h1",
            parent="repo:odd.py#Outer.inner",
        )
        w = ix.store.writer("repo")
        with w.transaction():
            w.put_file(FileRecord("odd.py", "python", 1, 1, "h", "odd", {}, "tree-sitter"), [unit], {}, text)
        for got in (
            ix.store.file_capsules("repo", "odd.py", ix.scope())[0],
            ix.store.capsules([unit.id], ix.scope())[0],
            ix.store.by_names(["joined"], ix.scope())[0],
        ):
            assert (got.signature, got.docstring, got.parent, got.text, got.language, got.kind) == (
                unit.signature,
                unit.docstring,
                unit.parent,
                unit.text,
                "cython",
                "function",
            )  # not its file's
        rows, _ = w.embed_rows("probe-model")
        assert [(r.signature, r.docstring) for r in rows if r.id == unit.id] == [(unit.signature, unit.docstring)]
        assert ix.store.lexical(["says"], 5, ix.scope())[0][0] == unit.id  # the docstring column, from its position
        macro = Capsule(
            id="repo:m.c#SWAP",
            path="m.c",
            language="c",
            kind="macro",
            name="SWAP",
            qualname="SWAP",
            signature="#define SWAP",
            start_line=1,
            end_line=1,
            text="#define SWAP(a, b)\n",
            content_hash="h",
        )
        with w.transaction():  # a kind the store has no number for is kept by its name
            w.put_file(FileRecord("m.c", "c", 1, 1, "h", "m", {}, "tree-sitter"), [macro], {}, macro.text)
        assert [c.kind for c in ix.store.file_capsules("repo", "m.c", ix.scope())] == ["macro"]
    finally:
        ix.close()


def test_a_files_units_are_found_by_its_row_not_a_scan(tmp_path):
    """Schema 8: units name their file's row (``fid``), whose index replaced the one of (repo, path): every read and
    delete of one file's units must still be served by an index (a scan answers the same, only slowly)."""
    root = write_tree(tmp_path / "repo", BASE)
    ix = Index(root, Settings(index_dir=tmp_path / "ix", embedder="none"))
    try:
        ix.update()
        st = ix.store
        db = st.db
        with _traced(db) as seen:
            assert st.file_capsules("repo", "pkg/models.py", ix.scope())
            w = st.writer(ix.repo)
            assert w.capsule_rows("pkg/models.py") and w.module_cand("pkg/views.py")
            (root / "pkg" / "util.py").write_text("def slugify(text):\n    return text.strip()\n")
            ix.update()
        # by the path's row (a read) or by the row's id already read (a rewrite: put_file, delete_file)
        lookups = [
            q
            for q in seen
            if "fid = (SELECT fid FROM files" in q
            or (("FROM capsules" in q or "FROM units" in q) and re.search(r"\bfid=\d+\)?$", q))
        ]
        assert len(lookups) >= 5
        for q in lookups:
            plan = _plan(db, q)
            assert "SCAN" not in plan and "capsules_fid" in plan, (q, plan)
        assert ix.search("slugify strip", k=1)[0].capsule.path == "pkg/util.py"
    finally:
        ix.close()


def test_units_by_name_and_qualname_are_found_by_their_hash_indexes(tmp_path):
    """Schema 8: names and qualnames are indexed by a 32-bit hash (the value is tested too); every lookup by either
    must be served by those indexes, and answer as before (a unit named like another's qualname, both found)."""
    with _indexed(tmp_path) as ix:
        st, sc = ix.store, ix.scope()
        db = st.db
        with _traced(db) as seen:
            got = st.by_names(["save", "Model.clean", "nothing"], sc)
            counts = st.name_counts(["save", "validate", "render", "nothing"], sc)
            w = st.writer(ix.repo)
            cands = w.cands_by_name("render")
            module = w.module_cand("pkg.views")
        assert [c.id for c in got] == [
            "repo:pkg/models.py#Base.save",
            "repo:pkg/models.py#Model.clean",
            "repo:pkg/models.py#Model.save",
        ]
        assert counts == {"save": 2, "validate": 1, "render": 1}
        assert [c[0] for c in cands] == ["repo:pkg/views.py#render"] and module[0] == "repo:pkg/views.py#pkg.views"
        lookups = [q for q in seen if "nh" in q or "qh" in q]
        assert len(lookups) >= 4
        for q in lookups:
            plan = _plan(db, q)
            assert "SCAN" not in plan.replace("SCAN CONSTANT", "") and (
                "capsules_name" in plan or "capsules_qualname" in plan
            ), (q, plan)


def test_the_first_edges_are_indexed_at_commit_and_a_failed_write_keeps_the_indexes(tmp_path, monkeypatch):
    """A transaction that writes a file's first edges drops the edges' indexes and builds them once at its end; an
    update that fails after its edges were written rolls the drop back with the rest, and the next one indexes."""
    import pytest

    import repoctx.indexer as indexer

    def indexes(db) -> set[str]:
        return {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE tbl_name = 'edges' AND type = 'index'")}

    root = write_tree(tmp_path / "repo", BASE)
    ix = Index(root, Settings(index_dir=tmp_path / "ix", embedder="none"))
    try:
        real = indexer._write_meta
        dropped: list[set[str]] = []

        def fail(store, *args):
            dropped.append(indexes(store.db))  # what the writing transaction sees: its edges, no indexes yet
            raise RuntimeError("interrupted after the edges")

        monkeypatch.setattr(indexer, "_write_meta", fail)
        with pytest.raises(RuntimeError):
            ix.update()
        assert dropped == [set()]
        db = sqlite3.connect(tmp_path / "ix" / "index.sqlite")
        assert indexes(db) == {"edges_dst", "edges_name"}
        assert db.execute("SELECT count(*) FROM edges").fetchone()[0] == 0

        monkeypatch.setattr(indexer, "_write_meta", real)
        ix.update()
        assert indexes(db) == {"edges_dst", "edges_name"}
        assert db.execute("SELECT count(*) FROM edges").fetchone()[0] > 0
        assert "edges_dst" in _plan(db, "SELECT src FROM edges WHERE dst IN (?)")
        assert "edges_name" in _plan(db, "SELECT src FROM edges WHERE name IN (?)")
        db.close()
    finally:
        ix.close()
