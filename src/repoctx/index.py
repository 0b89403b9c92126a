"""``repoctx.Index``: the small public surface the CLI, API and MCP server all call."""
from __future__ import annotations

from pathlib import Path

from repoctx.config import Settings
from repoctx.indexer import ProgressFn, UpdateReport, stale_files, update_index, writer_lock
from repoctx.retrieve.hybrid import SearchOptions, search, to_files
from repoctx.store.base import EVERYTHING, Scope
from repoctx.store.sqlite import SQLiteStore
from repoctx.types import Capsule, Edge, FileHit, Hit


class IndexError_(RuntimeError):
    pass


class Index:
    """An index of one repository. ``Index(path).update()`` builds or refreshes it; ``search`` reads it."""

    def __init__(self, root: str | Path, settings: Settings | None = None):
        self.root = Path(root).resolve()
        if not self.root.is_dir():
            raise FileNotFoundError(f"not a directory: {root}")
        self.settings = settings or Settings.from_env()
        self.index_dir = self.settings.index_dir_for(self.root)
        self.store = SQLiteStore(self.index_dir / "index.sqlite", repo=self.root.name)
        self._dense = None

    # ---- writing
    def update(self, progress: ProgressFn | None = None, wait: bool = True) -> UpdateReport:
        with writer_lock(self.index_dir, wait=wait):
            report = update_index(self.root, self.store, self.settings, progress)
        return report

    def status(self) -> dict:
        out = stale_files(self.root, self.store, self.settings)
        out["counts"] = self.store.counts()
        out["indexed"] = self.store.meta("complete") == "1"
        return out

    # ---- reading
    def search(self, query: str, k: int = 10, level: str = "symbol", scope: Scope = EVERYTHING,
               options: SearchOptions | None = None) -> list[Hit] | list[FileHit]:
        opts = options or SearchOptions(k=k, level=level)
        hits = search(self.store, query, opts, self.dense_index(), scope)
        if level == "file":
            return to_files(hits, opts.file_agg)[:k]
        return hits[:k]

    def dense_index(self):
        return self._dense

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
