"""A repository's vectors for the embedded store: FAISS over unit vectors (inner product = cosine),
persisted beside the SQLite file and swapped in atomically so readers always see a whole set."""
from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path

import numpy as np

# Flat inner product is exact and measured 9.2 ms/query at 100k x 384 on one thread (FACTS.md), ~1 ms at
# Django's 12k; past ~250k it would eat the 20-30 ms query budget, so larger indexes use HNSW (M=32:
# 0.2 ms/query at 100k, 31.6 s to build).
HNSW_MIN_VECTORS = 250_000


class FaissIndex:
    def __init__(self, index_dir: Path):
        self.dir = Path(index_dir)
        self.meta_path = self.dir / "vectors.json"
        self._loaded_mtime: int | None = None
        self._index = None
        self._ids: list[str] = []
        self._pos: dict[str, int] = {}
        self._lock = threading.Lock()

    def meta(self) -> dict | None:
        try:
            return json.loads(self.meta_path.read_text())
        except (OSError, ValueError):
            return None

    @property
    def model(self) -> str | None:
        m = self.meta()
        return m["model"] if m else None

    def write(self, model: str, dim: int, ids: list[str], matrix: np.ndarray, generation: str = "",
              total: int | None = None, hnsw_min: int = HNSW_MIN_VECTORS) -> None:
        import faiss

        self.dir.mkdir(parents=True, exist_ok=True)
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
                                   "ids": ids_path.name, "generation": generation,
                                   "total": len(ids) if total is None else total}))
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
        self._index, self._ids, self._loaded_mtime = index, ids, mtime
        self._pos = {cid: i for i, cid in enumerate(ids)}
        return True

    def search(self, vec: np.ndarray, k: int, allowed: set[str] | None = None) -> list[tuple[str, float]]:
        """Nearest ids; ``allowed`` (ids in scope) becomes FAISS's id selector, so out-of-scope vectors
        are never candidates."""
        import faiss

        with self._lock:
            if not self._load() or not self._ids:
                return []
            index, ids, pos = self._index, self._ids, self._pos
        faiss.omp_set_num_threads(1)
        q = np.asarray(vec, dtype=np.float32).reshape(1, -1)
        if allowed is None:
            scores, idx = index.search(q, min(k, len(ids)))
        else:
            sel_pos = np.fromiter((pos[c] for c in allowed if c in pos), dtype=np.int64)
            if not len(sel_pos):
                return []
            sel = faiss.IDSelectorBatch(sel_pos)
            params = (faiss.SearchParametersHNSW(sel=sel) if isinstance(index, faiss.IndexHNSWFlat)
                      else faiss.SearchParameters(sel=sel))
            scores, idx = index.search(q, min(k, len(sel_pos)), params=params)
        return [(ids[i], float(s)) for s, i in zip(scores[0], idx[0]) if i >= 0]
