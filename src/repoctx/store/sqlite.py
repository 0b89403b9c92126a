"""The embedded store: one SQLite file in WAL mode, FTS5 for BM25. One writer, many readers;
an index update is one transaction, so a crash leaves the previous index whole."""
from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Iterable

from repoctx.capsules.parse import own_text
from repoctx.graph import Cand, ref_key
from repoctx.store.base import EVERYTHING, FileRecord, Scope
from repoctx.tokens import fts_text
from repoctx.types import Capsule, Edge

SCHEMA_VERSION = "1"
# BM25 column weights: name, qualname, path, signature, docstring, body
BM25_WEIGHTS = (10.0, 6.0, 3.0, 4.0, 2.0, 1.0)

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, value TEXT);
CREATE TABLE IF NOT EXISTS files(
  path TEXT PRIMARY KEY, language TEXT, size INTEGER, mtime_ns INTEGER, hash TEXT, module TEXT,
  imports TEXT, method TEXT, note TEXT);
CREATE INDEX IF NOT EXISTS files_module ON files(module);
CREATE TABLE IF NOT EXISTS capsules(
  rowid INTEGER PRIMARY KEY, id TEXT UNIQUE NOT NULL, repo TEXT, path TEXT, language TEXT, kind TEXT,
  name TEXT, qualname TEXT, signature TEXT, params TEXT, returns TEXT, docstring TEXT, decorators TEXT,
  start_line INTEGER, end_line INTEGER, text TEXT, content_hash TEXT, parent TEXT, module TEXT);
CREATE INDEX IF NOT EXISTS capsules_path ON capsules(path);
CREATE INDEX IF NOT EXISTS capsules_name ON capsules(name);
CREATE INDEX IF NOT EXISTS capsules_qualname ON capsules(qualname);
CREATE INDEX IF NOT EXISTS capsules_module ON capsules(module) WHERE kind = 'module';
CREATE TABLE IF NOT EXISTS edges(
  src TEXT NOT NULL, kind TEXT NOT NULL, dst_name TEXT NOT NULL, dst_key TEXT, dst TEXT, src_path TEXT);
CREATE INDEX IF NOT EXISTS edges_src ON edges(src);
CREATE INDEX IF NOT EXISTS edges_dst ON edges(dst);
CREATE INDEX IF NOT EXISTS edges_key ON edges(dst_key);
CREATE INDEX IF NOT EXISTS edges_path ON edges(src_path);
CREATE VIRTUAL TABLE IF NOT EXISTS fts USING fts5(
  name, qualname, path, signature, docstring, body, tokenize = "unicode61 tokenchars '_'");
CREATE VIRTUAL TABLE IF NOT EXISTS fts_vocab USING fts5vocab(fts, 'row');
"""

_COLS = ("id, repo, path, language, kind, name, qualname, signature, params, returns, docstring, decorators, "
         "start_line, end_line, text, content_hash, parent")


def _row_to_capsule(r) -> Capsule:
    return Capsule(id=r[0], repo=r[1] or "", path=r[2], language=r[3], kind=r[4], name=r[5], qualname=r[6],
                   signature=r[7], params=json.loads(r[8] or "[]"), returns=r[9] or "", docstring=r[10] or "",
                   decorators=json.loads(r[11] or "[]"), start_line=r[12], end_line=r[13], text=r[14],
                   content_hash=r[15], parent=r[16])


class SQLiteStore:
    def __init__(self, path: Path, repo: str = "", readonly: bool = False):
        self.path = Path(path)
        self.repo = repo
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.db = sqlite3.connect(str(self.path), timeout=30, isolation_level=None, check_same_thread=False)
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute("PRAGMA synchronous=NORMAL")
        self.db.execute("PRAGMA busy_timeout=30000")
        self.db.execute("PRAGMA cache_size=-65536")
        self.db.execute("PRAGMA temp_store=MEMORY")
        if not readonly:
            self.db.executescript(_SCHEMA)
            cur = self.meta("schema_version")
            if cur is None:
                self.db.execute("INSERT OR REPLACE INTO meta VALUES('schema_version', ?)", (SCHEMA_VERSION,))

    # ---- transactions
    def begin(self) -> None:
        self.db.execute("BEGIN IMMEDIATE")

    def commit(self) -> None:
        self.db.execute("COMMIT")

    def rollback(self) -> None:
        if self.db.in_transaction:
            self.db.execute("ROLLBACK")

    def close(self) -> None:
        self.db.close()

    # ---- writes
    def put_file(self, rec: FileRecord, capsules: list[Capsule]) -> None:
        self.delete_file(rec.path)
        self.db.execute("INSERT INTO files VALUES(?,?,?,?,?,?,?,?,?)",
                        (rec.path, rec.language, rec.size, rec.mtime_ns, rec.hash, rec.module,
                         json.dumps(rec.imports), rec.method, rec.note))
        children: dict[str, list[Capsule]] = {}
        for c in capsules:
            if c.parent:
                children.setdefault(c.parent, []).append(c)
        for c in capsules:
            cur = self.db.execute(
                f"INSERT INTO capsules({_COLS}, module) VALUES(?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                (c.id, c.repo or self.repo, c.path, c.language, c.kind, c.name, c.qualname, c.signature,
                 json.dumps(c.params), c.returns, c.docstring, json.dumps(c.decorators), c.start_line, c.end_line,
                 c.text, c.content_hash, c.parent, rec.module))
            body = own_text(c, children.get(c.id, [])) if c.kind == "class" else c.text
            body = body[:200_000]
            self.db.execute("INSERT INTO fts(rowid, name, qualname, path, signature, docstring, body) "
                            "VALUES(?,?,?,?,?,?,?)",
                            (cur.lastrowid, fts_text(c.name), fts_text(c.qualname), fts_text(c.path),
                             fts_text(c.signature), fts_text(c.docstring), fts_text(body)))

    def clear(self) -> None:
        for table in ("fts", "capsules", "edges", "files"):
            self.db.execute(f"DELETE FROM {table}")

    def touch_file(self, path: str, size: int, mtime_ns: int) -> None:
        self.db.execute("UPDATE files SET size=?, mtime_ns=? WHERE path=?", (size, mtime_ns, path))

    def delete_file(self, path: str) -> None:
        self.db.execute("DELETE FROM fts WHERE rowid IN (SELECT rowid FROM capsules WHERE path=?)", (path,))
        self.db.execute("DELETE FROM capsules WHERE path=?", (path,))
        self.db.execute("DELETE FROM edges WHERE src_path=?", (path,))
        self.db.execute("DELETE FROM files WHERE path=?", (path,))

    def put_edges(self, edges: Iterable[Edge], src_path: str) -> None:
        self.db.executemany("INSERT INTO edges VALUES(?,?,?,?,?,?)",
                            ((e.src, e.kind, e.dst_name, ref_key(e.dst_name) if e.kind != "contains" else None,
                              e.dst, src_path) for e in edges))

    def set_edge_dst(self, rowid: int, dst: str | None) -> None:
        self.db.execute("UPDATE edges SET dst=? WHERE rowid=?", (dst, rowid))

    def set_meta(self, key: str, value: str) -> None:
        self.db.execute("INSERT OR REPLACE INTO meta VALUES(?,?)", (key, value))

    # ---- reads
    def meta(self, key: str) -> str | None:
        r = self.db.execute("SELECT value FROM meta WHERE key=?", (key,)).fetchone()
        return r[0] if r else None

    def files(self) -> dict[str, FileRecord]:
        return {r[0]: FileRecord(r[0], r[1], r[2], r[3], r[4], r[5], json.loads(r[6] or "{}"), r[7], r[8] or "")
                for r in self.db.execute("SELECT * FROM files")}

    def counts(self) -> dict[str, int]:
        q = lambda sql: self.db.execute(sql).fetchone()[0]  # noqa: E731
        return {"files": q("SELECT count(*) FROM files"), "capsules": q("SELECT count(*) FROM capsules"),
                "edges": q("SELECT count(*) FROM edges"),
                "resolved_edges": q("SELECT count(*) FROM edges WHERE dst IS NOT NULL")}

    def capsules(self, ids: list[str], scope: Scope = EVERYTHING) -> list[Capsule]:
        if not ids:
            return []
        where, args = scope.sql("c")
        out: dict[str, Capsule] = {}
        for i in range(0, len(ids), 500):
            chunk = ids[i:i + 500]
            for r in self.db.execute(f"SELECT {_COLS} FROM capsules c WHERE id IN ({','.join('?' * len(chunk))})"
                                     f" AND {where}", chunk + args):
                out[r[0]] = _row_to_capsule(r)
        return [out[i] for i in ids if i in out]

    def all_capsules(self) -> list[Capsule]:
        return [_row_to_capsule(r) for r in self.db.execute(f"SELECT {_COLS} FROM capsules ORDER BY id")]

    def all_edges(self) -> list[tuple]:
        return self.db.execute("SELECT src, kind, dst_name, dst FROM edges ORDER BY src, kind, dst_name, dst").fetchall()

    def file_capsules(self, path: str, scope: Scope = EVERYTHING) -> list[Capsule]:
        where, args = scope.sql("c")
        return [_row_to_capsule(r) for r in self.db.execute(
            f"SELECT {_COLS} FROM capsules c WHERE path=? AND {where} ORDER BY start_line, end_line DESC",
            [path] + args)]

    def doc_freqs(self, terms: list[str]) -> dict[str, int]:
        if not terms:
            return {}
        out = {}
        for i in range(0, len(terms), 500):
            chunk = terms[i:i + 500]
            out.update(self.db.execute(f"SELECT term, doc FROM fts_vocab WHERE term IN ({','.join('?' * len(chunk))})",
                                       chunk).fetchall())
        return out

    def n_capsules(self) -> int:
        return self.db.execute("SELECT count(*) FROM capsules").fetchone()[0]

    def lexical(self, terms: list[str], k: int, scope: Scope = EVERYTHING) -> list[tuple[str, float]]:
        """BM25 over code tokens; terms are already tokenised. Higher score is better."""
        terms = [t for t in dict.fromkeys(terms) if t]
        if not terms:
            return []
        match = " OR ".join('"' + t.replace('"', '""') + '"' for t in terms)
        where, args = scope.sql("c")
        sql = (f"SELECT c.id, -bm25(fts, {', '.join(map(str, BM25_WEIGHTS))}) AS s FROM fts "
               f"JOIN capsules c ON c.rowid = fts.rowid WHERE fts MATCH ? AND {where} ORDER BY bm25(fts, "
               f"{', '.join(map(str, BM25_WEIGHTS))}) LIMIT ?")
        return [(r[0], r[1]) for r in self.db.execute(sql, [match] + args + [k])]

    def by_names(self, names: list[str], scope: Scope = EVERYTHING) -> list[Capsule]:
        if not names:
            return []
        where, args = scope.sql("c")
        ph = ",".join("?" * len(names))
        return [_row_to_capsule(r) for r in self.db.execute(
            f"SELECT {_COLS} FROM capsules c WHERE (name IN ({ph}) OR qualname IN ({ph})) AND kind != 'window' "
            f"AND {where} ORDER BY id", names + names + args)]

    def name_counts(self, names: list[str]) -> dict[str, int]:
        """How many definitions carry each name (a name defined everywhere says little)."""
        out: dict[str, int] = {}
        for i in range(0, len(names), 500):
            chunk = names[i:i + 500]
            out.update(self.db.execute(
                f"SELECT name, COUNT(*) FROM capsules WHERE name IN ({','.join('?' * len(chunk))}) "
                "AND kind IN ('function', 'method', 'class') GROUP BY name", chunk).fetchall())
        return out

    def by_path_suffix(self, fragments: list[str], scope: Scope = EVERYTHING) -> list[str]:
        where, args = scope.sql("c")
        out: list[str] = []
        for frag in fragments:
            rows = self.db.execute(
                f"SELECT c.id FROM capsules c WHERE c.kind = 'module' AND (c.path = ? OR c.path LIKE ? ESCAPE '\\') "
                f"AND {where} ORDER BY length(c.path) LIMIT 5",
                [frag, "%/" + frag.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")] + args)
            out.extend(r[0] for r in rows)
        return list(dict.fromkeys(out))

    def edges_from(self, ids: list[str], kinds: tuple[str, ...] = ()) -> list[Edge]:
        return self._edges("src", ids, kinds)

    def edges_to(self, ids: list[str], kinds: tuple[str, ...] = ()) -> list[Edge]:
        return self._edges("dst", ids, kinds)

    def _edges(self, col: str, ids: list[str], kinds: tuple[str, ...]) -> list[Edge]:
        if not ids:
            return []
        out = []
        kind_sql = f" AND kind IN ({','.join('?' * len(kinds))})" if kinds else ""
        for i in range(0, len(ids), 500):
            chunk = ids[i:i + 500]
            out += [Edge(*r) for r in self.db.execute(
                f"SELECT src, kind, dst_name, dst FROM edges WHERE {col} IN ({','.join('?' * len(chunk))}){kind_sql}",
                chunk + list(kinds))]
        return out

    # ---- graph lookups for incremental resolution
    def cands_by_name(self, name: str) -> list[Cand]:
        return [Cand(*r) for r in self.db.execute(
            "SELECT id, path, qualname, kind, module FROM capsules WHERE name=? AND kind NOT IN ('module','window') "
            "ORDER BY id", (name,))]

    def module_cand(self, key: str) -> Cand | None:
        r = self.db.execute("SELECT id, path, qualname, kind, module FROM capsules WHERE kind='module' AND "
                            "(qualname=? OR path=?) ORDER BY id LIMIT 1", (key, key)).fetchone()
        return Cand(*r) if r else None

    def edges_needing(self, keys: set[str], dsts: set[str], exclude_paths: set[str]) -> list[tuple]:
        """Edges outside exclude_paths whose target name is in keys or whose target is in dsts."""
        rows: dict[int, tuple] = {}
        sel = "SELECT rowid, src, kind, dst_name, dst, src_path FROM edges WHERE kind != 'contains' AND "
        for col, values in (("dst_key", sorted(keys)), ("dst", sorted(dsts))):
            for i in range(0, len(values), 500):
                chunk = values[i:i + 500]
                for r in self.db.execute(sel + f"{col} IN ({','.join('?' * len(chunk))})", chunk):
                    if r[5] not in exclude_paths:
                        rows[r[0]] = r
        return list(rows.values())

    def capsule_rows(self, path: str) -> list[tuple]:
        return self.db.execute("SELECT id, path, qualname, kind, module, language, name FROM capsules WHERE path=?",
                               (path,)).fetchall()
