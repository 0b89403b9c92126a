"""``repoctx.Index``: the small public surface the CLI, API and MCP server all call."""
from __future__ import annotations

import threading
from pathlib import Path

from repoctx.config import Settings
from repoctx.indexer import ProgressFn, UpdateReport, stale_files, update_index, writer_lock
from repoctx.retrieve.hybrid import SearchOptions, search, to_files
from repoctx.store.base import EVERYTHING, Scope
from repoctx.store.sqlite import SQLiteStore
from repoctx.types import Capsule, Edge, FileHit, Hit
from repoctx.vectors import DenseRetriever, EmbedReport, FaissIndex, VectorCache, fill_vectors, vectors_current


class Index:
    """An index of one repository. ``Index(path).update()`` builds or refreshes it; ``search`` reads it."""

    def __init__(self, root: str | Path, settings: Settings | None = None, embedder=None):
        self.root = Path(root).resolve()
        if not self.root.is_dir():
            raise FileNotFoundError(f"not a directory: {root}")
        self.settings = settings or Settings.from_env()
        self.index_dir = self.settings.index_dir_for(self.root)
        self.store = SQLiteStore(self.index_dir / "index.sqlite", repo=self.root.name)
        self._embedder = embedder  # any object with encode(texts) -> array, model_id and dim
        self._dense = None
        self._bg: threading.Thread | None = None
        self.last_embed: EmbedReport | None = None
        self.embed_error: str | None = None

    # ---- writing
    def update(self, progress: ProgressFn | None = None, wait: bool = True, embed: bool = True,
               background: bool = False) -> UpdateReport:
        """Refresh the lexical index and graph (one transaction), then fill dense vectors for what
        changed. With ``background=True`` vectors fill in a thread while lexical search already answers."""
        with writer_lock(self.index_dir, wait=wait):
            report = update_index(self.root, self.store, self.settings, progress)
        if embed and self.embedder is not None:
            if background:
                self._bg = threading.Thread(target=self._fill, args=(progress,), daemon=True)
                self._bg.start()
            else:
                self._fill(progress)
        return report

    @property
    def embedder(self):
        if self._embedder is not None:
            return self._embedder
        if self.settings.embedder in ("none", "", None):
            return None
        if self._embedder is None:
            from repoctx.embed import get_embedder

            self._embedder = get_embedder(self.settings.embedder)
        return self._embedder

    def _faiss(self) -> FaissIndex:
        return FaissIndex(self.index_dir)

    def _fill(self, progress: ProgressFn | None = None) -> EmbedReport | None:
        """Embed what the content-hash cache lacks and swap in a new vector index."""
        fx = self._faiss()
        if vectors_current(self.store, fx, self.embedder):
            return None
        try:
            with writer_lock(self.index_dir / "vectors", wait=True):
                if vectors_current(self.store, fx, self.embedder):
                    return None
                self.last_embed = fill_vectors(self.store, fx, self.embedder, VectorCache(self.settings.vector_cache),
                                               progress)
                self.embed_error = None
                return self.last_embed
        except Exception as e:  # lexical search keeps working; the reason is kept for status
            self.embed_error = f"{type(e).__name__}: {e}"
            raise

    def wait_vectors(self, timeout: float | None = None) -> None:
        if self._bg is not None:
            self._bg.join(timeout)

    def status(self) -> dict:
        out = stale_files(self.root, self.store, self.settings)
        out["counts"] = self.store.counts()
        out["indexed"] = self.store.meta("complete") == "1"
        out["vectors"] = self.vectors_status()
        return out

    # ---- reading
    def search(self, query: str, k: int = 10, level: str = "symbol", scope: Scope = EVERYTHING,
               options: SearchOptions | None = None) -> list[Hit] | list[FileHit]:
        opts = options or SearchOptions(k=k, level=level)
        hits = search(self.store, query, opts, self.dense_index(), scope)
        if level == "file":
            return to_files(hits, opts.file_agg)[:k]
        return hits[:k]

    def retrieve(self, query: str, k: int = 10, mode: str = "auto", scope: Scope = EVERYTHING, planner=None,
                 max_iterations: int = 5):
        """Standard or agentic retrieval, chosen by the router in ``auto`` mode. Returns
        ``(route, events)``: the route decision and an iterator of TraceEvents whose last event
        (Result) carries the hits in ``data["result"]`` (an AgenticResult, or a list of hits)."""
        from repoctx.retrieve.agentic import AgenticRetriever
        from repoctx.retrieve.router import Route, route

        if mode not in ("auto", "standard", "agentic"):
            raise ValueError(f"mode must be auto, standard or agentic, not {mode!r}")
        decision = route(query) if mode == "auto" else Route(mode, "chosen by the caller", "forced")
        if decision.mode == "agentic":
            retriever = AgenticRetriever(self, planner=planner, max_iterations=max_iterations, k=k, scope=scope)
            return decision, retriever.stream(query)
        return decision, self._standard_events(query, k, scope)

    def context(self, query: str, task: str | None = None, budget: int | None = None, mode: str = "standard",
                scope: Scope = EVERYTHING):
        """Context compressed to the task (code_query, refactor, code_gen, search) inside a token budget.
        With mode auto/agentic the hits come from the router / agentic loop."""
        from repoctx.retrieve.context import build_context

        hits = None
        if mode != "standard":
            _, events = self.retrieve(query, k=30, mode=mode, scope=scope)
            for ev in events:
                if ev.step == "Result":
                    res = ev.data["result"]
                    hits = res.hits if hasattr(res, "hits") else res
        return build_context(self, query, task=task, budget=budget, scope=scope, hits=hits)

    def _standard_events(self, query: str, k: int, scope: Scope):
        from repoctx.types import TraceEvent

        yield TraceEvent("Retrieval", "IN_PROGRESS", "standard retrieval", query)
        hits = self.search(query, k=k, scope=scope)
        yield TraceEvent("Retrieval", "SUCCEEDED", f"{len(hits)} hits", query, len(hits))
        yield TraceEvent("Result", "SUCCEEDED", f"{len(hits)} hits", hits=len(hits), data={"result": hits})

    def dense_index(self) -> DenseRetriever | None:
        if self.embedder is None:
            return None
        if self._dense is None:
            self._dense = DenseRetriever(self._faiss(), self.embedder)
        return self._dense if self._dense.available() else None

    def vectors_status(self) -> dict:
        meta = self._faiss().meta()
        emb = self.embedder
        return {"enabled": emb is not None, "model": emb.model_id if emb else None,
                "indexed_model": meta.get("model") if meta else None, "count": meta.get("count") if meta else 0,
                "current": bool(emb) and vectors_current(self.store, self._faiss(), emb),
                "error": self.embed_error}

    def capsule(self, capsule_id: str, scope: Scope = EVERYTHING) -> Capsule | None:
        got = self.store.capsules([capsule_id], scope)
        return got[0] if got else None

    def find(self, name: str, scope: Scope = EVERYTHING) -> list[Capsule]:
        """Capsules whose name or qualname is exactly ``name``."""
        return self.store.by_names([name], scope)

    def callees(self, capsule_id: str) -> list[Edge]:
        return self.store.edges_from([capsule_id], ("calls",))

    def callers(self, capsule_id: str) -> list[Edge]:
        return self.store.edges_to([capsule_id], ("calls",))

    def close(self) -> None:
        self.store.close()

    def __enter__(self) -> "Index":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
