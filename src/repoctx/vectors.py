"""Dense vectors: a content-hash cache shared by every index (so an unchanged capsule is never
embedded twice, across versions of a repo too) and a FAISS index per repository index, swapped in
atomically so readers always see a whole one."""
from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np

from repoctx.store.base import EVERYTHING, Scope

EMBED_KINDS = ("function", "method", "class", "module", "window")
# Flat inner product is exact and measured 9.2 ms/query at 100k x 384 on one thread (FACTS.md), ~1 ms at
# Django's 12k; past ~250k it would eat the 20-30 ms query budget, so larger indexes use HNSW (M=32:
# 0.2 ms/query at 100k, 31.6 s to build).
HNSW_MIN_VECTORS = 250_000


def default_cache_dir() -> Path:
    return Path(os.environ.get("REPOCTX_CACHE") or Path.home() / ".cache" / "repoctx")


class VectorCache:
    """(model id, text hash) → vector, in one SQLite file (WAL) that many processes may share."""

    def __init__(self, path: Path | None = None):
        self.path = Path(path) if path else default_cache_dir() / "vectors.sqlite"
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.db = sqlite3.connect(str(self.path), timeout=60, isolation_level=None, check_same_thread=False)
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute("PRAGMA synchronous=NORMAL")
        self.db.execute("CREATE TABLE IF NOT EXISTS vec(model TEXT, hash TEXT, dim INTEGER, v BLOB, "
                        "PRIMARY KEY(model, hash)) WITHOUT ROWID")
        self._lock = threading.Lock()

    def get_many(self, model: str, hashes: list[str]) -> dict[str, np.ndarray]:
        out: dict[str, np.ndarray] = {}
        with self._lock:
            for i in range(0, len(hashes), 500):
                chunk = hashes[i:i + 500]
                for h, dim, v in self.db.execute(
                        f"SELECT hash, dim, v FROM vec WHERE model=? AND hash IN ({','.join('?' * len(chunk))})",
                        [model] + chunk):
                    out[h] = np.frombuffer(v, dtype=np.float32, count=dim)
        return out

    def put_many(self, model: str, items: list[tuple[str, np.ndarray]]) -> None:
        with self._lock:
            self.db.execute("BEGIN")
            self.db.executemany("INSERT OR REPLACE INTO vec VALUES(?,?,?,?)",
                                ((model, h, int(v.shape[0]), np.asarray(v, dtype=np.float32).tobytes())
                                 for h, v in items))
            self.db.execute("COMMIT")


def text_hash(text: str) -> str:
    return hashlib.blake2b(text.encode("utf-8", "replace"), digest_size=16).hexdigest()


@dataclass
class EmbedReport:
    model: str
    total: int = 0
    embedded: int = 0  # texts sent to the model
    cached: int = 0
    seconds: float = 0.0
    rebuilt: bool = False
    model_changed_from: str | None = None

    def to_dict(self) -> dict:
        return dict(self.__dict__)


class FaissIndex:
    """Exact inner-product search over unit vectors (cosine). Persisted beside the SQLite store."""

    def __init__(self, index_dir: Path):
        self.dir = Path(index_dir)
        self.meta_path = self.dir / "vectors.json"
        self._loaded_mtime: float | None = None
        self._index = None
        self._ids: list[str] = []
        self._lock = threading.Lock()

    def meta(self) -> dict | None:
        try:
            return json.loads(self.meta_path.read_text())
        except (OSError, ValueError):
            return None

    def write(self, model: str, dim: int, ids: list[str], matrix: np.ndarray, generation: str = "",
              hnsw_min: int = HNSW_MIN_VECTORS) -> None:
        import faiss

        if len(ids) >= hnsw_min:
            index = faiss.IndexHNSWFlat(dim, 32, faiss.METRIC_INNER_PRODUCT)
            index.hnsw.efSearch = 128
        else:
            index = faiss.IndexFlatIP(dim)
        if len(ids):
            index.add(np.ascontiguousarray(matrix, dtype=np.float32))
        stamp = f"{time.time_ns()}"
        faiss_path = self.dir / f"vectors-{stamp}.faiss"
        ids_path = self.dir / f"vectors-{stamp}.ids.json"
        faiss.write_index(index, str(faiss_path))
        ids_path.write_text(json.dumps(ids))
        tmp = self.meta_path.with_suffix(".json.tmp")
        tmp.write_text(json.dumps({"model": model, "dim": dim, "count": len(ids), "faiss": faiss_path.name,
                                   "ids": ids_path.name, "generation": generation}))
        old = self.meta()
        os.replace(tmp, self.meta_path)  # the swap: readers see the old set or the new, never half
        if old:
            for name in (old.get("faiss"), old.get("ids")):
                if name:
                    try:
                        (self.dir / name).unlink()
                    except OSError:
                        pass

    def _load(self) -> bool:
        try:
            mtime = self.meta_path.stat().st_mtime_ns
        except OSError:
            return False
        if self._index is not None and mtime == self._loaded_mtime:
            return True
        meta = self.meta()
        if not meta:
            return False
        import faiss

        try:
            index = faiss.read_index(str(self.dir / meta["faiss"]))
            ids = json.loads((self.dir / meta["ids"]).read_text())
        except (OSError, RuntimeError, ValueError, KeyError):
            return self._index is not None  # mid-swap: keep what we had
        self._index, self._ids, self._loaded_mtime, self._meta = index, ids, mtime, meta
        return True

    def search_vector(self, vec: np.ndarray, k: int) -> list[tuple[str, float]]:
        import faiss

        with self._lock:
            if not self._load() or not self._ids:
                return []
            faiss.omp_set_num_threads(1)
            scores, idx = self._index.search(np.asarray(vec, dtype=np.float32).reshape(1, -1), min(k, len(self._ids)))
        return [(self._ids[i], float(s)) for s, i in zip(scores[0], idx[0]) if i >= 0]

    @property
    def model(self) -> str | None:
        m = self.meta()
        return m["model"] if m else None


class DenseRetriever:
    """What hybrid search calls: embeds the question, searches FAISS, keeps only in-scope ids
    (the scope is applied again by the store when capsules are fetched)."""

    def __init__(self, faiss_index: FaissIndex, embedder):
        self.faiss = faiss_index
        self.embedder = embedder
        self._qcache: dict[str, np.ndarray] = {}

    def available(self) -> bool:
        return self.faiss.model == self.embedder.model_id

    def _remember(self, texts: list[str]) -> None:
        """Embed the texts not seen yet, in one batch, and keep their vectors (questions and names recur)."""
        todo = [t for t in dict.fromkeys(texts) if t not in self._qcache]
        if not todo:
            return
        if len(self._qcache) + len(todo) > 4096:
            self._qcache.clear()
            todo = list(dict.fromkeys(texts))
        for t, v in zip(todo, self.embedder.encode([t[:4000] for t in todo])):
            self._qcache[t] = np.asarray(v, dtype=np.float32)

    def vector(self, text: str) -> np.ndarray:
        """The embedding of a query or short text."""
        self._remember([text])
        return self._qcache[text]

    def similarities(self, pairs: list[tuple[str, list[str]]]) -> list[list[float]]:
        """For each (query, short texts): the cosine of the query with each text, all embedded in one batch."""
        self._remember([t for q, texts in pairs for t in [q, *texts]])
        return [[float(self._qcache[t] @ self._qcache[q]) for t in texts] for q, texts in pairs]

    def search(self, query: str, k: int, scope: Scope = EVERYTHING) -> list[tuple[str, float]]:
        if not self.available():
            return []
        return self.faiss.search_vector(self.vector(query), k)


def vectors_current(store, faiss_index: FaissIndex, embedder) -> bool:
    meta = faiss_index.meta()
    return bool(meta) and meta.get("model") == embedder.model_id and \
        meta.get("generation") == (store.meta("generation") or "")


def fill_vectors(store, faiss_index: FaissIndex, embedder, cache: VectorCache,
                 progress: Callable[[dict], None] | None = None, batch: int = 256) -> EmbedReport:
    """Embed what the cache lacks, then write a fresh FAISS index over every capsule of the store."""
    from repoctx.embed import embed_text

    t0 = time.perf_counter()
    model = embedder.model_id
    max_len = getattr(embedder, "max_length", 256)
    report = EmbedReport(model=model)
    old = faiss_index.model
    if old and old != model:
        report.model_changed_from = old
    rows = store.db.execute(
        f"SELECT id, path, qualname, signature, docstring, text FROM capsules WHERE kind IN "
        f"({','.join('?' * len(EMBED_KINDS))}) ORDER BY id", EMBED_KINDS).fetchall()
    ids, hashes, texts = [], [], {}
    for cid, path, qual, sig, doc, text in rows:
        t = embed_text({"path": path, "qualname": qual, "signature": sig, "docstring": doc, "text": text},
                       max_length=max_len)
        h = text_hash(t)
        ids.append(cid)
        hashes.append(h)
        texts[h] = t
    report.total = len(ids)
    have = cache.get_many(model, list(texts))
    todo = [h for h in texts if h not in have]
    report.cached = len(texts) - len(todo)
    emit = progress or (lambda e: None)
    emit({"event": "embed", "done": 0, "total": len(todo)})
    for start in range(0, len(todo), batch):
        chunk = todo[start:start + batch]
        vecs = np.asarray(embedder.encode([texts[h] for h in chunk]), dtype=np.float32)
        cache.put_many(model, list(zip(chunk, vecs)))  # committed per batch: a kill loses one batch
        for h, v in zip(chunk, vecs):
            have[h] = v
        report.embedded += len(chunk)
        rate = report.embedded / max(time.perf_counter() - t0, 1e-6)
        emit({"event": "embed", "done": report.embedded, "total": len(todo), "rate": rate})
    dim = embedder.dim
    matrix = np.zeros((len(ids), dim), dtype=np.float32)
    for i, h in enumerate(hashes):
        v = have[h]
        if v.shape[0] != dim:
            raise ValueError(f"cached vector for {model} has dimension {v.shape[0]}, model says {dim}")
        matrix[i] = v
    faiss_index.write(model, dim, ids, matrix, generation=store.meta("generation") or "")
    report.rebuilt = True
    report.seconds = time.perf_counter() - t0
    return report
