"""What a one-unit edit costs on an HNSW vector set (SQLite store, past ``HNSW_MIN_VECTORS``): grown in
place against built afresh, on synthetic unit vectors of the default model's dimension.

    python bench/hnsw_update.py [--n 260000] [--dim 384] [--json]

Builds a set of ``--n`` random unit vectors (HNSW, as ``FaissIndex.write`` makes it), then writes the set
after an edit (one unit's vector changed, one unit removed, one added) twice: grown in place (the
default) and built afresh (``HNSW_MAX_DEAD_SHARE`` set to 0); prints wall seconds of each write, the
set's file size, and recall@10 of 200 queries (a unit's own vector plus noise) against exact search.
"""
from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path

import numpy as np

from repoctx.store import faiss_index
from repoctx.store.faiss_index import FaissIndex


def recall(fx: FaissIndex, ids: list[str], m: np.ndarray, rng) -> float:
    picks = rng.choice(len(ids), 200, replace=False)
    found = 0
    for p in picks:
        q = m[p] + 0.3 * rng.normal(size=m.shape[1]).astype(np.float32)
        q /= np.linalg.norm(q)
        exact = {ids[i] for i in np.argsort(-(m @ q))[:10]}
        found += len(exact & {c for c, _ in fx.search(q, 10)})
    return found / (200 * 10)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=260_000)
    ap.add_argument("--dim", type=int, default=384)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    rng = np.random.default_rng(0)
    m = rng.normal(size=(a.n, a.dim)).astype(np.float32)
    m /= np.linalg.norm(m, axis=1, keepdims=True)
    ids, hashes = [f"u{i}" for i in range(a.n)], [f"h{i}" for i in range(a.n)]
    # the edit: u5 changed, u6 removed, one unit added
    new = rng.normal(size=(2, a.dim)).astype(np.float32)
    new /= np.linalg.norm(new, axis=1, keepdims=True)
    ids2 = [c for c in ids if c != "u6"] + [f"u{a.n}"]
    hashes2 = [("h5x" if c == "u5" else h) for c, h in zip(ids, hashes) if c != "u6"] + [f"h{a.n}"]
    m2 = np.vstack([np.delete(m, 6, axis=0), new[1:]])
    m2[5] = new[0]
    rows = []
    with tempfile.TemporaryDirectory(prefix="repoctx-hnsw-") as tmp:
        for name, share in (("grown in place (default)", faiss_index.HNSW_MAX_DEAD_SHARE), ("built afresh", 0.0)):
            fx = FaissIndex(Path(tmp) / name.split()[0])
            t0 = time.perf_counter()
            fx.write("bench:384", a.dim, ids, m, hashes=hashes, text_version=1, hnsw_min=1)
            cold = time.perf_counter() - t0
            faiss_index.HNSW_MAX_DEAD_SHARE = share
            t0 = time.perf_counter()
            fx.write("bench:384", a.dim, ids2, m2, hashes=hashes2, text_version=1, hnsw_min=1)
            edit = time.perf_counter() - t0
            meta = fx.meta()
            rows.append({"write": name, "first_build_s": round(cold, 1), "edit_s": round(edit, 2),
                         "dead": meta.get("dead", 0), "mb": round(os.path.getsize(fx.dir / meta["faiss"]) / 1e6, 1),
                         "recall@10": round(recall(fx, ids2, m2, rng), 3)})
    out = {"n": a.n, "dim": a.dim, "cpus": os.cpu_count(), "rows": rows}
    if a.json:
        print(json.dumps(out, indent=1))
        return
    print(f"HNSW set of {a.n:,} x {a.dim} unit vectors, one-unit edit (one changed, one removed, one added); "
          f"{os.cpu_count()} CPUs\n")
    print("| write after the edit | first build s | edit s | dead positions | file MB | recall@10 vs exact |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['write']} | {r['first_build_s']} | {r['edit_s']} | {r['dead']} | {r['mb']} | {r['recall@10']} |")


if __name__ == "__main__":
    main()
