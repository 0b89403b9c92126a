"""Dense vectors: a content-hash cache shared by every index (so an unchanged capsule is never
embedded twice, across versions of a repo too), the fill that hands a repository's vectors to its
store, and the retriever that embeds a question and asks the store (vector search lives there)."""

from __future__ import annotations

import hashlib
import re
import sqlite3
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from repoctx.config import default_cache_dir  # re-exported
from repoctx.ingest.languages import is_test_path
from repoctx.store.base import EVERYTHING, Scope
from repoctx.store.faiss_index import dequantize, quantize


class VectorCache:
    """(model id, text hash) → vector, in one SQLite file (WAL) that many processes may share. A vector is kept
    as int8 with one float32 scale (``store.faiss_index.quantize``): 388 bytes a MiniLM row instead of 1,536,
    the hash as 16 bytes and the model as a number (Django's 48k units: 216 MiB as float32 rows keyed by text).
    Vectors of a cache written before (table ``vec``, float32) are read when asked for and moved over."""

    def __init__(self, path: Path | None = None):
        self.path = Path(path) if path else default_cache_dir() / "vectors.sqlite"
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.db = sqlite3.connect(str(self.path), timeout=60, isolation_level=None, check_same_thread=False)
        # a new file gives back the pages of vectors it forgets (``forget``); a file made before keeps them for reuse.
        # Set on a new file only: on one with tables it changes nothing, yet writes (every open paid a write and
        # a checkpoint on close, ~25 ms of a one-file update or a one-shot search)
        if self.db.execute("SELECT 1 FROM sqlite_master LIMIT 1").fetchone() is None:
            self.db.execute("PRAGMA auto_vacuum=INCREMENTAL")
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute("PRAGMA synchronous=NORMAL")
        self.db.execute("CREATE TABLE IF NOT EXISTS models(id INTEGER PRIMARY KEY, name TEXT UNIQUE NOT NULL)")
        self.db.execute(
            "CREATE TABLE IF NOT EXISTS vec8(model INTEGER, hash BLOB, v BLOB, PRIMARY KEY(model, hash)) WITHOUT ROWID"
        )
        self._legacy = bool(self.db.execute("SELECT 1 FROM sqlite_master WHERE type='table' AND name='vec'").fetchone())
        self._models: dict[str, int] = {}
        self._lock = threading.Lock()

    def _model_id(self, model: str) -> int:
        mid = self._models.get(model)
        if mid is None:
            self.db.execute("INSERT OR IGNORE INTO models(name) VALUES(?)", (model,))
            mid = self._models[model] = self.db.execute("SELECT id FROM models WHERE name=?", (model,)).fetchone()[0]
        return mid

    def get_many(self, model: str, hashes: list[str]) -> dict[str, np.ndarray]:
        return {h: as_vector(v) for h, v in self.get_stored(model, hashes).items()}

    def get_stored(self, model: str, hashes: list[str]) -> dict[str, bytes | np.ndarray]:
        """``get_many`` with each vector as the cache keeps it (``as_vector`` reads it): a quarter of the memory
        for a fill that holds a whole repository's cached vectors until the store has them."""
        out: dict[str, bytes | np.ndarray] = {}
        with self._lock:
            mid = self._model_id(model)
            for i in range(0, len(hashes), 500):
                chunk = hashes[i : i + 500]
                for h, v in self.db.execute(
                    f"SELECT hash, v FROM vec8 WHERE model=? AND hash IN ({','.join('?' * len(chunk))})",
                    [mid] + [bytes.fromhex(h) for h in chunk],
                ):
                    out[h.hex()] = v
            if self._legacy and len(out) < len(hashes):
                moved = self._from_legacy(model, [h for h in hashes if h not in out])
                out.update(moved)
        return out

    def _from_legacy(self, model: str, hashes: list[str]) -> dict[str, np.ndarray]:
        got: dict[str, np.ndarray] = {}
        for i in range(0, len(hashes), 500):
            chunk = hashes[i : i + 500]
            for h, dim, v in self.db.execute(
                f"SELECT hash, dim, v FROM vec WHERE model=? AND hash IN ({','.join('?' * len(chunk))})",
                [model] + chunk,
            ):
                got[h] = np.frombuffer(v, dtype=np.float32, count=dim)
        if not got:
            return {}
        self._put(model, list(got.items()))
        keys = list(got)
        back = dequantize(*quantize(np.stack([got[h] for h in keys])))  # as a later read gives them
        return dict(zip(keys, back, strict=True))

    def _put(self, model: str, items: list[tuple[str, np.ndarray]]) -> None:
        if not items:
            return
        mid = self._model_id(model)
        q, scale = quantize(np.stack([np.asarray(v, dtype=np.float32) for _, v in items]))
        self.db.execute("BEGIN")
        self.db.executemany(
            "INSERT OR REPLACE INTO vec8 VALUES(?,?,?)",
            ((mid, bytes.fromhex(h), scale[i : i + 1].tobytes() + q[i].tobytes()) for i, (h, _) in enumerate(items)),
        )
        self.db.execute("COMMIT")

    def put_many(self, model: str, items: list[tuple[str, np.ndarray]]) -> None:
        with self._lock:
            self._put(model, items)

    def close(self) -> None:
        self.db.close()

    def forget(self, model: str, hashes: list[str]) -> None:
        """Drop these vectors of ``model`` and give their pages back to the file system."""
        if not hashes:
            return
        with self._lock:
            mid = self._model_id(model)
            self.db.execute("BEGIN")
            for i in range(0, len(hashes), 500):
                chunk = hashes[i : i + 500]
                self.db.execute(
                    f"DELETE FROM vec8 WHERE model=? AND hash IN ({','.join('?' * len(chunk))})",
                    [mid] + [bytes.fromhex(h) for h in chunk],
                )
            self.db.execute("COMMIT")
            # run to its end by sqlite3_exec: through ``execute`` (then stepped or not) it frees one page
            self.db.executescript("PRAGMA incremental_vacuum;")
            self.db.execute("PRAGMA wal_checkpoint(TRUNCATE)")


def as_vector(v: bytes | np.ndarray) -> np.ndarray:
    """A vector as ``VectorCache.get_stored`` gives it (a stored row: float32 scale, then int8 values) as float32."""
    if isinstance(v, np.ndarray):
        return v
    scale = np.frombuffer(v, dtype=np.float32, count=1)
    return np.frombuffer(v, dtype=np.int8, offset=4).astype(np.float32) * scale[0]


# A joint embedder (``providers.embedding.JointEmbedder``) keeps its members' vectors in the cache, never its own:
# a member indexed alone, or in another pair, reuses them, and the cache holds each model's vector of a text once.
def cached_vectors(
    cache: VectorCache, embedder, hashes: list[str], held: dict[str, set[str]] | None = None
) -> dict[str, bytes | np.ndarray]:
    """``cache.get_stored`` under ``embedder``: a joint embedder's vectors made from its members' (a text every
    member has), kept as the cache keeps a row (``as_vector`` reads either form). ``held``: filled with the hashes
    each member has, by model id, so that ``keep_vectors`` need not read them again."""
    members = getattr(embedder, "members", None)
    if not members:
        return cache.get_stored(embedder.model_id, hashes)
    got = [cache.get_stored(m.model_id, hashes) for m in members]
    if held is not None:
        held.update((m.model_id, set(g)) for m, g in zip(members, got, strict=True))
    both = [h for h in hashes if all(h in g for g in got)]
    out: dict[str, bytes | np.ndarray] = {}
    for start in range(0, len(both), _HAND_ROWS):  # a whole repository's set: as int8 rows, never all as float32
        part = both[start : start + _HAND_ROWS]
        q, scale = quantize(embedder.join([np.stack([as_vector(g.pop(h)) for h in part]) for g in got]))
        out.update((h, scale[i : i + 1].tobytes() + q[i].tobytes()) for i, h in enumerate(part))
    return out


def keep_vectors(
    cache: VectorCache, embedder, items: list[tuple[str, np.ndarray]], held: dict[str, set[str]] | None = None
) -> dict[str, list[str]]:
    """``cache.put_many`` under ``embedder``: a joint embedder's vectors are kept as its members' parts, each only
    where the cache lacks that member's vector (one a model alone cached stays as it was). ``held``: what
    ``cached_vectors`` found each member has (read from the cache when not given). What was written, by model id:
    what ``forget_vectors`` may take back."""
    members = getattr(embedder, "members", None)
    hashes = [h for h, _ in items]
    if not members or not items:
        cache.put_many(embedder.model_id, items)
        return {embedder.model_id: hashes}
    wrote = {}
    for m, part in zip(members, embedder.split(np.stack([v for _, v in items])), strict=True):
        had = held[m.model_id] if held is not None else cache.get_stored(m.model_id, hashes)
        new = [(h, v) for h, v in zip(hashes, part, strict=True) if h not in had]
        cache.put_many(m.model_id, new)
        wrote[m.model_id] = [h for h, _ in new]
    return wrote


def as_cached(embedder, matrix: np.ndarray) -> np.ndarray:
    """The vectors as a later ``cached_vectors`` read of them gives them back (``keep_vectors`` keeps int8)."""
    members = getattr(embedder, "members", None)
    if members:
        matrix = embedder.join([dequantize(*quantize(p)) for p in embedder.split(matrix)])
    return dequantize(*quantize(matrix))


def forget_vectors(cache: VectorCache, wrote: dict[str, list[str]]) -> None:
    """Take back what ``keep_vectors`` wrote (by model id)."""
    for model, hashes in wrote.items():
        cache.forget(model, hashes)


# The order a fill embeds units in, by where they are: the project's code first (questions are mostly about
# it), then tests, then documentation prose and examples, then markup, data and translations. Django 4.2's
# sdist: 12,0xx code units, 29,4xx test, 6,4xx docs, ~700 other (bench/results/big_tree.md). Every unit keeps
# its lexical and name signals meanwhile; dense search answers over what is embedded so far.
EMBED_ORDER = ("code", "test", "docs", "other")
_DOCS_PATH = re.compile(r"(^|/)(docs?|documentation|examples?|samples?|demos?)/")
_PROSE = frozenset({".txt", ".rst", ".md", ".markdown", ".mdx", ".tex", ".adoc", ".rdoc"})
_OTHER_PATH = re.compile(r"(^|/)(locale|locales|i18n|l10n)/")
_MARKUP_DATA = frozenset(
    ".html .htm .css .scss .less .svg .json .xml .yaml .yml .toml .ini .cfg .po .pot .csv .tsv".split()
)


def embed_class(path: str) -> str:
    """Which of ``EMBED_ORDER`` a unit at ``path`` belongs to."""
    if is_test_path(path):
        return "test"
    dot = path.rfind(".")
    ext = path[dot:].lower() if dot > path.rfind("/") else ""
    if ext in _PROSE or _DOCS_PATH.search(path):
        return "docs"
    if ext in _MARKUP_DATA or _OTHER_PATH.search(path):
        return "other"
    return "code"


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
    # per class of ``EMBED_ORDER``: units to embed (not cached), and seconds after the fill began when every
    # unit of the class had its vector searchable (published)
    classes: dict[str, int] = field(default_factory=dict)
    ready_s: dict[str, float] = field(default_factory=dict)
    rebuilt: bool = False
    model_changed_from: str | None = None

    def to_dict(self) -> dict:
        return {k: dict(v) if isinstance(v, dict) else v for k, v in self.__dict__.items()}


class DenseRetriever:
    """What hybrid search calls: embeds the question and asks the store for the nearest capsules in
    scope (the store applies the scope inside its vector search)."""

    def __init__(
        self,
        store,
        embedder,
        cache: VectorCache | None = None,
        joint: DenseRetriever | None = None,
        windows: bool = False,
    ):
        self.store = store
        self.embedder = embedder
        self.cache = cache  # where the short texts ``similarities`` compares (unit names, windows) outlive the process
        self.windows = windows  # a search compares its candidates' further body windows (hybrid.window_shares)
        self._qcache: dict[str, np.ndarray] = {}
        self._lock = threading.Lock()
        self._ahead: dict[str, threading.Thread] = {}  # texts being embedded ahead of their search, and by what
        self._primary: DenseRetriever | None = None
        self._joint = joint  # the retriever whose joint embedder's first model this is: its vectors hold ours

    def primary(self) -> DenseRetriever:
        """This retriever under a joint embedder's first model (itself under any other embedder): the model a
        re-ranker's name similarity was fitted under."""
        first = getattr(self.embedder, "primary", None)
        if first is None:
            return self
        if self._primary is None:
            self._primary = DenseRetriever(self.store, first, self.cache, joint=self)
        return self._primary

    def prefetch(self, texts: list[str]) -> None:
        """Start embedding ``texts`` (loading the model first, if need be) in a thread, so that a search reads
        its other signals meanwhile: a one-shot search's question is embedded while BM25 answers. A later
        ``vector`` of one of them waits for it; a failure here is met again, and raised, by that call."""
        with self._lock:
            todo = [t for t in dict.fromkeys(texts) if t not in self._qcache and t not in self._ahead]
            if not todo:
                return
            ahead = threading.Thread(target=self._remember_ahead, args=(todo,), daemon=True)
            for t in todo:
                self._ahead[t] = ahead
            ahead.start()  # under the lock: whoever finds it in _ahead may join it

    def _remember_ahead(self, texts: list[str]) -> None:
        try:
            for t in texts:  # one at a time, as the search would ask for them: the same vectors, whatever the model
                self._remember([t], wait=False)
        except Exception:  # noqa: BLE001 - the search's own call embeds them again and reports what failed
            pass
        finally:
            with self._lock:
                for t in texts:
                    if self._ahead.get(t) is threading.current_thread():
                        del self._ahead[t]

    def _remember(self, texts: list[str], wait: bool = True) -> None:
        """Embed the texts not seen yet, in one batch, and keep their vectors (questions and names recur)."""
        if wait:  # a text being embedded ahead is waited for, never embedded twice at once
            with self._lock:
                pending = {self._ahead[t] for t in texts if t in self._ahead}
            for ahead in pending:
                if ahead is not threading.current_thread():
                    ahead.join()
        with self._lock:
            todo = [t for t in dict.fromkeys(texts) if t not in self._qcache]
            if not todo:
                return
            if len(self._qcache) + len(todo) > 4096:
                self._qcache.clear()
                todo = list(dict.fromkeys(texts))
        vecs = dict(self._from_joint(todo))  # a question the pair's search embedded: the first model's part of it
        todo = [t for t in todo if t not in vecs]
        if todo:
            vecs.update(zip(todo, self.embedder.encode([t[:4000] for t in todo]), strict=True))
        with self._lock:
            for t, v in vecs.items():
                self._qcache[t] = np.asarray(v, dtype=np.float32)

    def _from_joint(self, texts: list[str]) -> list[tuple[str, np.ndarray]]:
        joint = self._joint
        if joint is None:
            return []
        with joint._lock:
            got = [(t, joint._qcache[t]) for t in texts if t in joint._qcache]
        if not got:
            return []
        first = joint.embedder.split(np.stack([v for _, v in got]))[0]
        return [(t, first[i]) for i, (t, _) in enumerate(got)]

    def vector(self, text: str) -> np.ndarray:
        """The embedding of a query or short text."""
        self._remember([text])
        return self._qcache[text]

    def similarities(self, pairs: list[tuple[str, list[str]]]) -> list[list[float]]:
        """For each (query, short texts): the cosine of the query with each text, all embedded in one batch.
        With a vector cache, the short texts' vectors are read from it and the new ones kept in it (a unit's
        name, a function's body window recur across questions and processes; the queries are kept in memory only)."""
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
            got = cached_vectors(self.cache, self.embedder, list(keys))
        except sqlite3.Error:  # a cache that cannot be read costs time, not answers
            return {}
        return {keys[h]: as_vector(v) for h, v in got.items()}

    def _store(self, texts: list[str], vecs: dict[str, np.ndarray]) -> None:
        """Keep the fresh texts' vectors in the cache, and use them as the cache gives them back (int8), so a
        score is the same the first time and every later one."""
        if self.cache is None or not texts:
            return
        back = as_cached(self.embedder, np.stack([vecs[t] for t in texts]))
        vecs.update(zip(texts, back, strict=True))
        try:
            keep_vectors(self.cache, self.embedder, [(self._short_key(t), vecs[t]) for t in texts])
        except sqlite3.Error:
            pass

    def search(self, query: str, k: int, scope: Scope = EVERYTHING) -> list[tuple[str, float]]:
        with self._lock:
            ready = query in self._qcache
        warm = getattr(self.store, "warm_dense", None)
        if not ready and warm is not None:  # the vector set is read while the question's vector is made
            warm(self.embedder.model_id, scope)
        return self.store.dense(self.vector(query), self.embedder.model_id, k, scope)


_HAND_ROWS = 4096  # rows handed to the sink at a time


def fill_vectors(
    writer,
    embedder,
    cache: VectorCache,
    progress: Callable[[dict], None] | None = None,
    batch: int = 256,
    publish_every: float = 30.0,
    keep: bool = True,
    changed: tuple[list[str], int] | None = None,
) -> EmbedReport:
    """Embed what the cache lacks for one repository and hand every vector the store needs to its sink.
    Units are embedded class by class in ``EMBED_ORDER`` (the project's code first); when a class is done, and
    every ``publish_every`` seconds of a long first fill, what is done so far is published so dense search
    already answers over it. Each batch is written to ``cache`` as it is embedded (a fill that is killed loses
    one batch); ``keep=False``: the cache forgets them again once the store holds the whole set (the store
    is their cache from then on: an unchanged unit keeps its vector). ``changed``: (the files an update rewrote or
    removed, the generation it wrote), for a store that can patch its last set with those files' units alone."""
    from repoctx.providers.embedding import embed_text

    t0 = time.perf_counter()
    model = embedder.model_id
    max_len = getattr(embedder, "max_length", 256)
    report = EmbedReport(model=model)
    rows: list  # its items are let go below (None)
    patch_rows = getattr(writer, "patch_rows", None)
    got = patch_rows(model, *changed) if changed is not None and patch_rows is not None else None
    if got is not None:  # a patch of this model's set
        rows, whole = got, True
    else:
        state = writer.store.vector_state(writer.repo, model)
        if state.model and state.model != model:
            report.model_changed_from = state.model
        rows, whole = writer.embed_rows(model)
    n_rows = len(rows)
    texts: dict[str, str] = {}
    hashes: list[str] = []
    ids: list[str] = []
    rank: dict[str, int] = {}  # a text's class (its first unit's), as a position in EMBED_ORDER
    for i, r in enumerate(rows):
        rows[i] = None  # each unit's whole text let go once its embedding text is made (Django: ~60 MiB of them)
        t = embed_text(r, max_length=max_len)
        h = text_hash(t)
        hashes.append(h)
        ids.append(r.id)
        texts[h] = t
        rank.setdefault(h, EMBED_ORDER.index(embed_class(r.path)))
    report.total = n_rows
    del rows
    held: dict[str, set[str]] = {}  # a joint embedder's: the texts each of its models has in the cache
    have = cached_vectors(cache, embedder, list(texts), held)
    todo = sorted((h for h in texts if h not in have), key=rank.__getitem__)  # stable: the store's order within
    report.cached = len(texts) - len(todo)
    texts = {h: texts[h] for h in todo}  # the cached ones' texts are not needed again
    for h in todo:
        name = EMBED_ORDER[rank[h]]
        report.classes[name] = report.classes.get(name, 0) + 1
    dim = embedder.dim
    sink = writer.vector_sink(model, dim, whole)
    report.kept = int(getattr(sink, "kept", 0))
    report.total += report.kept
    emit = progress or (lambda e: None)
    emit({"event": "embed", "done": 0, "total": len(todo), "cached": report.cached})

    last_row = {h: i for i, h in enumerate(hashes)}  # a text's last unit: its vector is let go once that is handed

    def hand_over(ready: set[str]) -> None:
        """Give the sink every row whose vector exists and that it has not had yet, ``_HAND_ROWS`` at a time, each
        text's vector let go after its last unit's (no second copy of a whole cached set)."""
        idx = [i for i, h in enumerate(hashes) if h in ready]
        for start in range(0, len(idx), _HAND_ROWS):
            part = idx[start : start + _HAND_ROWS]
            matrix = np.zeros((len(part), dim), dtype=np.float32)
            for j, i in enumerate(part):
                h = hashes[i]
                v = as_vector(have[h])
                if v.shape[0] != dim:
                    raise ValueError(f"cached vector for {model} has dimension {v.shape[0]}, model says {dim}")
                matrix[j] = v
                if last_row[h] == i:  # every row of this text is handed over: the sink holds its vector now
                    del have[h]
            sink.add([ids[i] for i in part], matrix)

    # a fill of one batch that the cache would forget at its end is not written to it at all (a kill loses that one
    # batch either way): a one-file edit's write, vacuum and checkpoint of the cache for one vector
    spill = keep or len(todo) > batch
    wrote: dict[str, list[str]] = {}  # what the fill added to the cache, by model id
    reserve = getattr(sink, "reserve", None)
    if reserve is not None:
        reserve(len(hashes))
    hand_over(set(have))
    publish = getattr(sink, "publish", None)  # a sink that can show a partial set while the rest is embedded
    last_publish = time.perf_counter()
    # a class is ready when its last text is embedded; classes with nothing to embed are ready now
    last_of: dict[int, int] = {rank[h]: i for i, h in enumerate(todo)}
    for name in EMBED_ORDER:
        if EMBED_ORDER.index(name) not in last_of:
            report.ready_s[name] = 0.0
    try:
        for start in range(0, len(todo), batch):
            chunk = todo[start : start + batch]
            vecs = np.asarray(embedder.encode([texts.pop(h) for h in chunk]), dtype=np.float32)  # texts let go
            if spill:
                # committed per batch: a kill loses one batch
                for m, hs in keep_vectors(cache, embedder, list(zip(chunk, vecs, strict=True)), held or None).items():
                    wrote.setdefault(m, []).extend(hs)
            for h, v in zip(chunk, vecs, strict=True):
                have[h] = v
            hand_over(set(chunk))
            report.embedded += len(chunk)
            done = [c for c, last in last_of.items() if start <= last < start + len(chunk)]
            more = report.embedded < len(todo)
            if publish and more and (done or time.perf_counter() - last_publish > publish_every):
                publish(n_rows)
                last_publish = time.perf_counter()
            for c in done:
                report.ready_s[EMBED_ORDER[c]] = time.perf_counter() - t0
                emit({"event": "embed_class", "class": EMBED_ORDER[c], "seconds": report.ready_s[EMBED_ORDER[c]]})
            rate = report.embedded / max(time.perf_counter() - t0, 1e-6)
            emit(
                {
                    "event": "embed",
                    "done": report.embedded,
                    "total": len(todo),
                    "rate": rate,
                    "eta": (len(todo) - report.embedded) / rate,
                }
            )
    except BaseException:  # interrupted: what was embedded stays searchable (and cached for the next fill)
        if publish and report.embedded:
            publish(n_rows)
        raise
    sink.finish()
    if spill and not keep:
        forget_vectors(cache, wrote)
    if todo:  # the last class is searchable once the whole set is
        report.ready_s[EMBED_ORDER[rank[todo[-1]]]] = time.perf_counter() - t0
    report.rebuilt = bool(n_rows) or whole
    report.seconds = time.perf_counter() - t0
    return report
