"""Dense vectors: a content-hash cache shared by every index (so an unchanged capsule is never
embedded twice, across versions of a repo too), the fill that hands a repository's vectors to its
store, and the retriever that embeds a question and asks the store (vector search lives there)."""
from __future__ import annotations

import hashlib
import sqlite3
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from repoctx.config import default_cache_dir  # re-exported
from repoctx.store.base import EVERYTHING, Scope


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
    kept: int = 0  # unchanged units whose vectors the store carried over from its last set
    seconds: float = 0.0
    rebuilt: bool = False
    model_changed_from: str | None = None

    def to_dict(self) -> dict:
        return dict(self.__dict__)


class DenseRetriever:
    """What hybrid search calls: embeds the question and asks the store for the nearest capsules in
    scope (the store applies the scope inside its vector search)."""

    def __init__(self, store, embedder, cache: VectorCache | None = None):
        self.store = store
        self.embedder = embedder
        self.cache = cache  # where the short texts ``similarities`` compares (unit names) outlive the process
        self._qcache: dict[str, np.ndarray] = {}
        self._lock = threading.Lock()

    def _remember(self, texts: list[str]) -> None:
        """Embed the texts not seen yet, in one batch, and keep their vectors (questions and names recur)."""
        with self._lock:
            todo = [t for t in dict.fromkeys(texts) if t not in self._qcache]
            if not todo:
                return
            if len(self._qcache) + len(todo) > 4096:
                self._qcache.clear()
                todo = list(dict.fromkeys(texts))
        vecs = self.embedder.encode([t[:4000] for t in todo])
        with self._lock:
            for t, v in zip(todo, vecs, strict=True):
                self._qcache[t] = np.asarray(v, dtype=np.float32)

    def vector(self, text: str) -> np.ndarray:
        """The embedding of a query or short text."""
        self._remember([text])
        return self._qcache[text]

    def similarities(self, pairs: list[tuple[str, list[str]]]) -> list[list[float]]:
        """For each (query, short texts): the cosine of the query with each text, all embedded in one batch.
        With a vector cache, the short texts' vectors are read from it and the new ones kept in it (a unit's
        name recurs across questions and processes; the queries are kept in memory only)."""
        texts = list(dict.fromkeys(t for _, ts in pairs for t in ts))
        vecs = self._stored(texts)
        fresh = [t for t in texts if t not in vecs]
        self._remember([q for q, _ in pairs] + fresh)
        with self._lock:
            vecs.update((t, self._qcache[t]) for t in fresh)
            qv = {q: self._qcache[q] for q, _ in pairs}
        self._store(fresh, vecs)
        return [[float(vecs[t] @ qv[q]) for t in ts] for q, ts in pairs]

    @staticmethod
    def _short_key(text: str) -> str:
        return text_hash("short\0" + text)  # never the key of a unit's own embedding text

    def _stored(self, texts: list[str]) -> dict[str, np.ndarray]:
        if self.cache is None or not texts:
            return {}
        keys = {self._short_key(t): t for t in texts}
        try:
            got = self.cache.get_many(self.embedder.model_id, list(keys))
        except sqlite3.Error:  # a cache that cannot be read costs time, not answers
            return {}
        return {keys[h]: v for h, v in got.items()}

    def _store(self, texts: list[str], vecs: dict[str, np.ndarray]) -> None:
        if self.cache is None or not texts:
            return
        try:
            self.cache.put_many(self.embedder.model_id, [(self._short_key(t), vecs[t]) for t in texts])
        except sqlite3.Error:
            pass

    def search(self, query: str, k: int, scope: Scope = EVERYTHING) -> list[tuple[str, float]]:
        return self.store.dense(self.vector(query), self.embedder.model_id, k, scope)


def fill_vectors(writer, embedder, cache: VectorCache, progress: Callable[[dict], None] | None = None,
                 batch: int = 256, publish_every: float = 30.0) -> EmbedReport:
    """Embed what the cache lacks for one repository and hand every vector the store needs to its sink.
    While a long first fill runs, what is done so far is published every ``publish_every`` seconds so
    dense search already answers over it."""
    from repoctx.providers.embedding import embed_text

    t0 = time.perf_counter()
    model = embedder.model_id
    max_len = getattr(embedder, "max_length", 256)
    report = EmbedReport(model=model)
    state = writer.store.vector_state(writer.repo, model)
    if state.model and state.model != model:
        report.model_changed_from = state.model
    rows, whole = writer.embed_rows(model)
    texts: dict[str, str] = {}
    hashes: list[str] = []
    for r in rows:
        t = embed_text(r, max_length=max_len)
        h = text_hash(t)
        hashes.append(h)
        texts[h] = t
    report.total = len(rows)
    have = cache.get_many(model, list(texts))
    todo = [h for h in texts if h not in have]
    report.cached = len(texts) - len(todo)
    dim = embedder.dim
    sink = writer.vector_sink(model, dim, whole)
    report.kept = int(getattr(sink, "kept", 0))
    report.total += report.kept
    emit = progress or (lambda e: None)
    emit({"event": "embed", "done": 0, "total": len(todo), "cached": report.cached})

    def hand_over(ready: set[str]) -> None:
        """Give the sink every row whose vector exists and that it has not had yet."""
        idx = [i for i, h in enumerate(hashes) if h in ready]
        if not idx:
            return
        matrix = np.zeros((len(idx), dim), dtype=np.float32)
        for j, i in enumerate(idx):
            v = have[hashes[i]]
            if v.shape[0] != dim:
                raise ValueError(f"cached vector for {model} has dimension {v.shape[0]}, model says {dim}")
            matrix[j] = v
        sink.add([rows[i].id for i in idx], matrix)

    hand_over(set(have))
    publish = getattr(sink, "publish", None)  # a sink that can show a partial set while the rest is embedded
    last_publish = time.perf_counter()
    try:
        for start in range(0, len(todo), batch):
            chunk = todo[start:start + batch]
            vecs = np.asarray(embedder.encode([texts[h] for h in chunk]), dtype=np.float32)
            cache.put_many(model, list(zip(chunk, vecs, strict=True)))  # committed per batch: a kill loses one batch
            for h, v in zip(chunk, vecs, strict=True):
                have[h] = v
            hand_over(set(chunk))
            report.embedded += len(chunk)
            rate = report.embedded / max(time.perf_counter() - t0, 1e-6)
            emit({"event": "embed", "done": report.embedded, "total": len(todo), "rate": rate,
                  "eta": (len(todo) - report.embedded) / rate})
            if publish and time.perf_counter() - last_publish > publish_every and report.embedded < len(todo):
                publish(len(rows))
                last_publish = time.perf_counter()
    except BaseException:  # interrupted: what was embedded stays searchable (and cached for the next fill)
        if publish and report.embedded:
            publish(len(rows))
        raise
    sink.finish()
    report.rebuilt = bool(rows) or whole
    report.seconds = time.perf_counter() - t0
    return report
