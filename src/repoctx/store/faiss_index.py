"""A repository's vectors for the embedded store, persisted beside the SQLite file and swapped in
atomically so readers always see a whole set: up to ``HNSW_MIN_VECTORS`` a plain int8 matrix with one
float32 scale per row (exact inner product of the dequantised rows = cosine within ~1e-3; a reader maps it
and reads a whole scan from the file a block at a time, so a one-shot CLI search neither loads a copy nor
keeps the pages it scanned; nothing heavier than numpy to import), past it FAISS HNSW (float32)."""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

# Flat inner product is exact and measured 9.2 ms/query at 100k x 384 on one thread (FACTS.md), ~1 ms at
# Django's 12k; past ~250k it would eat the 20-30 ms query budget, so larger indexes use HNSW (M=32:
# 0.2 ms/query at 100k, 31.6 s to build).
HNSW_MIN_VECTORS = 250_000
# An HNSW set is grown in place by an update (new and changed units' vectors added to the stored graph, the
# positions of removed or changed ones marked dead and filtered out of every search) until the dead are this
# share of the graph; then the next update builds it afresh.
HNSW_MAX_DEAD_SHARE = 0.2
_SCAN_ROWS = 8192  # rows quantized this many at a time (a float32 copy of 8192 x 384 is 12 MiB)
_SCORE_ROWS = 2048  # an int8 matrix is scored this many rows at a time (a float32 copy of 2048 x 384: 3 MiB)
# An update of a few files writes its vectors as a patch beside the stored int8 set (``write_patch``: a one-file edit
# of Django wrote 18 MiB of rows and 5 MiB of ids and hashes for one vector); once the patch's rows and the set's
# rows it hides pass this share of the set (or PATCH_MIN_ROWS), the next update writes the set whole again.
PATCH_MAX_SHARE = 0.1
PATCH_MIN_ROWS = 2048


def _row_dots(block: np.ndarray, vec: np.ndarray) -> np.ndarray:
    """Inner products of ``vec`` with each int8 row of ``block``, in float32. numpy's own loop, one thread:
    BLAS spread a block over every core, each spinning while it waits (Django's 48k rows: 55 ms of CPU a
    scan on two loaded cores, 12 ms on one), and summed a row in an order that depends on the core count and
    the block's size (scores moved by 3e-8 from machine to machine); this sum is the row's alone."""
    return np.einsum("ij,j->i", np.asarray(block, dtype=np.float32), vec)


def quantize(matrix: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(int8 rows, float32 scale per row): row i is ``q[i] * scale[i]`` within half a step of its largest
    component (a unit-norm MiniLM row: cosine with its original > 0.9999). A quarter of float32's bytes."""
    m = np.asarray(matrix, dtype=np.float32)
    if m.ndim != 2:
        m = m.reshape(len(m), -1)
    q = np.empty(m.shape, dtype=np.int8)
    scale = np.empty(len(m), dtype=np.float32)
    for i in range(0, len(m), _SCAN_ROWS):  # a block at a time: the float temporaries stay ~12 MiB
        block = m[i : i + _SCAN_ROWS]
        peak = np.abs(block).max(axis=1) if block.size else np.zeros(len(block), dtype=np.float32)
        scale[i : i + _SCAN_ROWS] = np.where(peak > 0, peak / 127.0, 1.0)
        q[i : i + _SCAN_ROWS] = np.clip(np.rint(block / scale[i : i + _SCAN_ROWS, None]), -127, 127)
    return q, scale


def dequantize(q: np.ndarray, scale: np.ndarray) -> np.ndarray:
    out = np.array(q, dtype=np.float32)  # one float32 copy, scaled in place (Django's set: 74 MB, not twice that)
    out *= np.asarray(scale, dtype=np.float32)[:, None]
    return out


class Int8Matrix:
    """A stored set's int8 rows (memory-mapped) and their scales; ``file``: the rows' file, open, when they are
    stored in one (a scan of every row reads it a block at a time rather than through the map)."""

    def __init__(self, q: np.ndarray, scale: np.ndarray, file=None):
        self.q, self.scale = q, scale
        self.file = file

    def __del__(self) -> None:
        if self.file is not None:
            self.file.close()

    def __len__(self) -> int:
        return len(self.q)

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self.q.shape)

    @property
    def ndim(self) -> int:
        return int(self.q.ndim)

    def __getitem__(self, rows) -> Int8Matrix:
        """Some rows, read into memory (``rows``: positions or a slice)."""
        return Int8Matrix(np.asarray(self.q[rows]), np.asarray(self.scale[rows], dtype=np.float32))

    def dequantize(self) -> np.ndarray:
        return dequantize(self.q, self.scale)

    def scores(self, vec: np.ndarray, rows: np.ndarray | None = None) -> np.ndarray:
        """Inner products of ``vec`` with every row (or with ``rows``), a block at a time."""
        if rows is None and self.file is not None:
            try:
                return self._read_scores(vec)
            except (OSError, ValueError):  # the file is not what the map holds: read through the map
                pass
        n = len(self.q) if rows is None else len(rows)
        out = np.empty(n, dtype=np.float32)
        for i in range(0, n, _SCORE_ROWS):
            pick = slice(i, i + _SCORE_ROWS) if rows is None else rows[i : i + _SCORE_ROWS]
            out[i : i + _SCORE_ROWS] = _row_dots(self.q[pick], vec)
        return out * (self.scale if rows is None else self.scale[rows])

    def _read_scores(self, vec: np.ndarray) -> np.ndarray:
        """``scores`` of every row, read from the file with ``pread``: the pages stay in the page cache, shared,
        instead of being mapped into this process, where each one read counts towards its resident memory
        until it ends (Django's 48k rows: 18 MiB of a one-shot search's peak). The same products."""
        n, dim = self.q.shape
        offset = int(getattr(self.q, "offset", -1))
        if offset < 0:
            raise ValueError("not a mapped file")
        fd = self.file.fileno()
        out = np.empty(n, dtype=np.float32)
        for i in range(0, n, _SCORE_ROWS):
            m = min(_SCORE_ROWS, n - i)
            data = os.pread(fd, m * dim, offset + i * dim)
            if len(data) != m * dim:
                raise ValueError("short read")
            out[i : i + m] = _row_dots(np.frombuffer(data, dtype=np.int8).reshape(m, dim), vec)
        return out * self.scale


# A set's ids (schema of its vectors.json: a name without ``.json``): a magic line, their count, then per id its
# end in the text (uint32, little-endian), then the ids joined by NUL (never part of a path or a name). A search
# reads the ids of the rows it returns only; a JSON list of Django's 48k ids (4.2 MB) was parsed whole by every
# one-shot search (~100M instructions, a quarter of what the question's vector costs).
_IDS_MAGIC = b"repoctx-ids 1\n\0\0"


def pack_ids(ids: Sequence[str]) -> bytes | None:
    """``ids`` as ``PackedIds`` reads them; None when one holds a NUL (then the set keeps them as JSON)."""
    text = "\0".join(ids).encode()
    seps = np.flatnonzero(np.frombuffer(text, dtype=np.uint8) == 0)  # each id's end but the last's
    if len(seps) != max(len(ids) - 1, 0) or len(text) >= 2**32:
        return None
    ends = np.append(seps, len(text)) if ids else seps
    return _IDS_MAGIC + np.int64(len(ids)).tobytes() + ends.astype("<u4").tobytes() + text


class _IdsView(Sequence[str]):
    """What ``PackedIds`` and ``PatchedIds`` share: iterated and searched through all the ids decoded at once, an
    empty id found from their empty positions."""

    def decoded(self) -> list[str]:
        raise NotImplementedError

    def empty(self) -> np.ndarray:
        raise NotImplementedError

    def starting(self, prefixes: tuple[str, ...]) -> list[int]:
        raise NotImplementedError

    def __iter__(self) -> Iterator[str]:
        return iter(self.decoded())

    def __contains__(self, value: object) -> bool:
        if value == "":
            return bool(len(self.empty()))
        return value in self.decoded()


class PackedIds(_IdsView):
    """A set's ids as ``pack_ids`` wrote them: one id decoded when asked for (``ids[row]``), all of them by one split
    when iterated (a scoped search's positions); the positions of the empty ones (a grown set's dead rows) from the
    ends alone."""

    def __init__(self, data: bytes) -> None:
        if not data.startswith(_IDS_MAGIC):
            raise ValueError("not a packed ids file")
        head = len(_IDS_MAGIC)
        n = int(np.frombuffer(data, dtype="<i8", count=1, offset=head)[0])
        self._ends = np.frombuffer(data, dtype="<u4", count=n, offset=head + 8)
        self._data, self._base = data, head + 8 + 4 * n
        self._text = memoryview(data)[self._base :]
        if n and int(self._ends[-1]) != len(self._text):
            raise ValueError("a packed ids file cut short")
        self._all: list[str] | None = None

    def __len__(self) -> int:
        return len(self._ends)

    def __getitem__(self, i: Any) -> Any:  # an int: one id; a slice: a list
        if isinstance(i, slice):
            return self.decoded()[i]
        n = len(self._ends)
        if i < 0:
            i += n
        if not 0 <= i < n:
            raise IndexError(i)
        start = int(self._ends[i - 1]) + 1 if i else 0
        return bytes(self._text[start : int(self._ends[i])]).decode()

    def decoded(self) -> list[str]:
        if self._all is None:
            self._all = bytes(self._text).decode().split("\0") if len(self._ends) else []
        return self._all

    def empty(self) -> np.ndarray:
        """Positions of the empty ids."""
        lengths = np.diff(self._ends.astype(np.int64), prepend=-1) - 1
        return np.flatnonzero(lengths == 0)

    def starting(self, prefixes: tuple[str, ...]) -> list[int]:
        """Positions of the ids that start with one of ``prefixes`` (non-empty), in order: found in the packed text
        (a search in C) and placed by the ends, nothing decoded (Django's 48k ids: ~0.2 ms, against ~20 ms to
        decode them all and test each)."""
        data, base = self._data, self._base  # the text is data[base:]
        starts: set[int] = set()
        for prefix in prefixes:
            pat = prefix.encode()
            if not pat:
                raise ValueError("an empty prefix")
            if data.startswith(pat, base):
                starts.add(0)
            at = data.find(b"\0" + pat, base)
            while at >= 0:
                starts.add(at + 1 - base)
                at = data.find(b"\0" + pat, at + 1)
        if not starts:
            return []
        # the id at position i spans ends[i-1]+1 .. ends[i]: its start is the first end at or after it
        return [int(i) for i in np.searchsorted(self._ends, sorted(starts), side="left")]


class PatchedIds(_IdsView):
    """A patched set's ids, per position: the stored rows' (packed: ``PackedIds``), empty where the patch hid a row,
    then the patch's own rows'. Read as ``PackedIds`` are (one id when asked for, all of them when iterated), so a
    one-file update or a search over a patched set decodes no more than over a whole one (Django: ~20 ms a
    process)."""

    def __init__(self, base: PackedIds, hidden: Sequence[int], extra: list[str]) -> None:
        self._base, self._hidden, self._extra = base, frozenset(hidden), extra
        self._nb = len(base)
        self._all: list[str] | None = None

    def __len__(self) -> int:
        return self._nb + len(self._extra)

    def __getitem__(self, i: Any) -> Any:  # an int: one id; a slice: a list
        if isinstance(i, slice):
            return self.decoded()[i]
        n = len(self)
        if i < 0:
            i += n
        if not 0 <= i < n:
            raise IndexError(i)
        if i >= self._nb:
            return self._extra[i - self._nb]
        return "" if i in self._hidden else self._base[i]

    def decoded(self) -> list[str]:
        if self._all is None:
            self._all = _hide(list(self._base.decoded()), self._hidden, self._extra)
        return self._all

    def empty(self) -> np.ndarray:
        """Positions of the empty ids: the stored rows' own, those the patch hid, the patch's empty ones."""
        gone = set(self._base.empty().tolist()) | self._hidden
        gone.update(self._nb + j for j, cid in enumerate(self._extra) if not cid)
        return np.array(sorted(gone), dtype=np.int64)

    def starting(self, prefixes: tuple[str, ...]) -> list[int]:
        """Positions of the ids that start with one of ``prefixes``, in order (``PackedIds.starting``)."""
        found = [i for i in self._base.starting(prefixes) if i not in self._hidden]
        return found + [self._nb + j for j, cid in enumerate(self._extra) if cid.startswith(prefixes)]


def _hide(values: list[str], hidden: Iterable[int], extra: list[str]) -> list[str]:
    """Per-position values (ids or hashes) of a patched set: the stored rows' ``values`` (changed in place), emptied
    at the positions the patch hid, then the patch's own ``extra``."""
    for i in hidden:
        values[i] = ""
    return values + extra


def ids_starting(ids: Sequence[str], prefixes: tuple[str, ...]) -> list[int]:
    """Positions of the ids (a set's, packed or a list) that start with one of ``prefixes``, in order."""
    if isinstance(ids, _IdsView):
        return ids.starting(prefixes)
    return [i for i, cid in enumerate(ids) if cid.startswith(prefixes)]


def empty_ids(ids: Sequence[str]) -> list[int]:
    """Positions of a set's empty ids (rows no unit owns: a patch hid them, or a grown set's dead rows)."""
    if isinstance(ids, _IdsView):
        return [int(i) for i in ids.empty()]
    return [i for i, cid in enumerate(ids) if not cid]


def _files(meta: dict | None) -> list[str]:
    """The files of a stored set (its patch's too)."""
    if not meta:
        return []
    names = [meta.get(k) for k in ("faiss", "npy", "int8", "scale", "ids", "hashes")]
    patch = meta.get("patch") or {}
    names += [patch.get(k) for k in ("rows", "scale", "ids", "hashes")]
    return [n for n in names if n]


class PatchedInt8(Int8Matrix):
    """A stored int8 set and its patch, as one matrix: the set's rows (mapped from their file), then the patch's
    (a few rows, in memory). A position is the set's row ``i < len(base)``, else the patch's row ``i - len(base)``.
    Rows the patch replaces or removes stay in place; their ids are "" (``FaissIndex._read``)."""

    def __init__(self, base: Int8Matrix, patch: Int8Matrix):
        self.base, self.patch = base, patch
        self.file = None  # the base's, closed with it

    @property
    def q(self) -> np.ndarray:  # type: ignore[override]
        return np.concatenate([np.asarray(self.base.q), np.asarray(self.patch.q)])

    @property
    def scale(self) -> np.ndarray:  # type: ignore[override]
        return np.concatenate([np.asarray(self.base.scale, dtype=np.float32), self.patch.scale])

    def __len__(self) -> int:
        return len(self.base) + len(self.patch)

    @property
    def shape(self) -> tuple[int, ...]:
        return (len(self), self.base.shape[1])

    @property
    def ndim(self) -> int:
        return 2

    def __getitem__(self, rows) -> Int8Matrix:
        pos = np.arange(len(self))[rows] if isinstance(rows, slice) else np.asarray(rows, dtype=np.int64)
        n = len(self.base)
        q = np.empty((len(pos), self.shape[1]), dtype=np.int8)
        scale = np.empty(len(pos), dtype=np.float32)
        in_base = pos < n
        if in_base.any():
            got = self.base[pos[in_base]]
            q[in_base], scale[in_base] = got.q, got.scale
        if not in_base.all():
            got = self.patch[pos[~in_base] - n]
            q[~in_base], scale[~in_base] = got.q, got.scale
        return Int8Matrix(q, scale)

    def dequantize(self) -> np.ndarray:
        return np.concatenate([self.base.dequantize(), self.patch.dequantize()])

    def scores(self, vec: np.ndarray, rows: np.ndarray | None = None) -> np.ndarray:
        n = len(self.base)
        if rows is None:
            return np.concatenate([self.base.scores(vec), self.patch.scores(vec)])
        rows = np.asarray(rows, dtype=np.int64)
        out = np.empty(len(rows), dtype=np.float32)
        in_base = rows < n
        if in_base.any():
            out[in_base] = self.base.scores(vec, rows[in_base])
        if not in_base.all():
            out[~in_base] = self.patch.scores(vec, rows[~in_base] - n)
        return out


@dataclass
class StoredSet:
    """A stored int8 set as ``FaissIndex.patchable`` read it: its vectors.json, per position its id ("" once a patch
    hid it; ``PackedIds`` while no patch is applied: ``ids_starting`` and ``empty_ids`` read them without decoding
    them all) and content hash, how many of the positions are the stored rows' (the rest: its patch's), the rows."""

    meta: dict
    ids: Sequence[str]
    hashes: list[str]
    base_rows: int
    index: Int8Matrix


class FaissIndex:
    def __init__(self, index_dir: Path):
        self.dir = Path(index_dir)
        self.meta_path = self.dir / "vectors.json"
        self._loaded_mtime: int | None = None
        self._index: Any = None  # an exact matrix (np.ndarray) or a faiss HNSW index
        self._ids: list[str] | PackedIds = []
        self._pos: dict[str, int] | None = {}  # id -> stored position, made when a search first needs it
        # a grown HNSW set's selector of its live positions (dead ones no unit owns any more), made once per
        # loaded set: (IDSelectorBatch of the dead, IDSelectorNot of it; the second holds only a pointer)
        self._alive: tuple[Any, Any] | None = None
        # an int8 set's positions some unit owns, when a patch hid others (rows it replaced or removed)
        self._live_rows: np.ndarray | None = None
        # (stored file name, index, ids, hashes) of the HNSW set ``reusable`` read, for ``_grow`` to take
        # instead of reading the same file again (hundreds of MB past HNSW_MIN_VECTORS)
        self._read_for_grow: tuple | None = None
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

    def write(
        self,
        model: str,
        dim: int,
        ids: list[str],
        matrix: np.ndarray | Int8Matrix,
        generation: str = "",
        total: int | None = None,
        hnsw_min: int = HNSW_MIN_VECTORS,
        hashes: list[str] | None = None,
        text_version: int | None = None,
    ) -> None:
        """Swap in a new set. ``hashes``: per id, the content hash of the unit its vector was made from,
        and ``text_version`` the version of the text made from it (``embed.EMBED_TEXT_VERSION``): the next
        update keeps the vectors of unchanged units instead of rebuilding the whole set (``reusable``)."""
        self.dir.mkdir(parents=True, exist_ok=True)
        stamp = f"{time.time_ns()}"
        ids_path = self.dir / f"vectors-{stamp}.ids"
        hashes_path = self.dir / f"vectors-{stamp}.hashes.json"
        stored = None  # int8 rows and scales to store as they are
        floats = np.zeros((0, dim), dtype=np.float32)
        if isinstance(matrix, Int8Matrix) and len(ids) < hnsw_min:
            stored = (np.ascontiguousarray(matrix.q).reshape(len(ids), dim), matrix.scale)
        elif isinstance(matrix, Int8Matrix):
            floats = matrix.dequantize()
        else:
            floats = np.ascontiguousarray(matrix, dtype=np.float32).reshape(len(ids), dim)
        live = len(ids)
        if len(ids) >= hnsw_min:
            import faiss

            # a search in this process set FAISS to one thread (right for one query); a graph build uses all
            faiss.omp_set_num_threads(os.cpu_count() or 1)
            grown = self._grow(model, dim, ids, floats, hashes, text_version)
            if grown is None:
                index = faiss.IndexHNSWFlat(dim, 32, faiss.METRIC_INNER_PRODUCT)
                index.hnsw.efSearch = 128
                index.add(floats)
            else:  # stored positions: the old set's (dead ones as ""), then the added vectors'
                index, ids, hashes = grown
            data_path = self.dir / f"vectors-{stamp}.faiss"
            faiss.write_index(index, str(data_path))
            kind = "faiss"
        else:
            data_path = self.dir / f"vectors-{stamp}.npy"
            q, scale = stored if stored is not None else quantize(floats)
            np.save(data_path, q)
            scale_path = self.dir / f"vectors-{stamp}.scale.npy"
            np.save(scale_path, scale)
            kind = "npy"
        packed = pack_ids(ids)
        if packed is None:
            ids_path = ids_path.with_suffix(".ids.json")
            ids_path.write_text(json.dumps(ids))
        else:
            ids_path.write_bytes(packed)
        meta = {
            "model": model,
            "dim": dim,
            "count": live,
            kind: data_path.name,
            "ids": ids_path.name,
            "generation": generation,
            "total": live if total is None else total,
        }
        if kind == "npy":
            meta["scale"] = scale_path.name
        if len(ids) > live:
            meta["dead"] = len(ids) - live
        if hashes is not None and len(hashes) == len(ids):
            hashes_path.write_text(json.dumps(hashes))
            meta.update(hashes=hashes_path.name, text_version=text_version)
        old = self.meta()
        self._swap(meta)
        self._unlink(_files(old))

    def _swap(self, meta: dict) -> None:
        """``meta`` becomes the set's vectors.json: readers see the old set or the new, never half."""
        tmp = self.meta_path.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(meta))
        os.replace(tmp, self.meta_path)

    def _unlink(self, names: list[str]) -> None:
        for name in names:
            try:
                (self.dir / name).unlink()
            except OSError:
                pass

    def _grow(
        self,
        model: str,
        dim: int,
        ids: list[str],
        matrix: np.ndarray,
        hashes: list[str] | None,
        text_version: int | None,
    ):
        """The current HNSW set grown into the new one, or None when it must be built afresh (no HNSW set
        of this model, dimension and text version with hashes; or too many dead positions after the update).
        A unit whose id and content hash are unchanged keeps its stored position; the others' vectors are
        added to the graph, and the positions nobody owns any more become dead (id ""). Returns (index,
        ids, hashes) in stored order."""
        handed, self._read_for_grow = self._read_for_grow, None
        old = self.meta()
        if (
            hashes is None
            or len(hashes) != len(ids)
            or not old
            or "faiss" not in old
            or "hashes" not in old
            or old.get("model") != model
            or old.get("dim") != dim
            or old.get("text_version") != text_version
        ):
            return None
        if handed is not None and handed[0] == old["faiss"]:
            index, old_ids, old_hashes = handed[1:]
        else:
            try:
                index, old_ids = self._read(old)
                old_hashes = json.loads((self.dir / old["hashes"]).read_text())
            except (OSError, RuntimeError, ValueError, KeyError):
                return None
        if not (len(old_ids) == len(old_hashes) == index.ntotal):
            return None
        stored = {(cid, h): i for i, (cid, h) in enumerate(zip(old_ids, old_hashes, strict=True)) if cid}
        kept = set()
        added = []
        for row, key in enumerate(zip(ids, hashes, strict=True)):
            pos = stored.get(key)
            if pos is None or pos in kept:
                added.append(row)
            else:
                kept.add(pos)
        total = len(old_ids) + len(added)
        if total - len(ids) > HNSW_MAX_DEAD_SHARE * total:
            return None
        out_ids = [cid if i in kept else "" for i, cid in enumerate(old_ids)]
        out_hashes = [h if i in kept else "" for i, h in enumerate(old_hashes)]
        if added:
            index.add(np.ascontiguousarray(matrix[added]))
            out_ids += [ids[r] for r in added]
            out_hashes += [hashes[r] for r in added]
        return index, out_ids, out_hashes

    def reusable(
        self, model: str, dim: int | None, text_version: int, int8: bool = False
    ) -> tuple[list[str], np.ndarray | Int8Matrix, list[str]] | None:
        """(ids, vectors, content hashes) of the current set when its vectors can serve a new set of
        ``model``: same model and dimension (None: any), texts of ``text_version``, hashes recorded. A partial set (a
        first fill that was interrupted) serves too: each vector is right for its unit. None otherwise. The
        vectors come as float32; with ``int8``, an int8 set's as its ``Int8Matrix`` (``write`` stores them as
        they are)."""
        meta = self.meta()
        if (
            not meta
            or meta.get("model") != model
            or (dim is not None and meta.get("dim") != dim)
            or "hashes" not in meta
            or meta.get("text_version") != text_version
        ):
            return None
        try:
            index, ids = self._read(meta)
            hashes = self._hashes(meta)
            if isinstance(index, Int8Matrix):
                matrix = index if int8 else index.dequantize()
            elif isinstance(index, np.ndarray):
                matrix = index
            else:
                matrix = index.reconstruct_n(0, index.ntotal)
        except (OSError, RuntimeError, ValueError, KeyError):
            return None  # swapped meanwhile or damaged: the caller rebuilds from the vector cache
        if (
            not (len(ids) == len(hashes) == len(matrix))
            or matrix.ndim != 2
            or (dim is not None and matrix.shape[1] != dim)
        ):
            return None
        if "faiss" in meta:
            self._read_for_grow = (meta["faiss"], index, ids, hashes)
        if "" in ids:  # a grown HNSW set's dead positions: no unit's vector
            alive = [i for i, cid in enumerate(ids) if cid]
            ids, hashes, matrix = [ids[i] for i in alive], [hashes[i] for i in alive], matrix[alive]
        return ids, matrix if isinstance(matrix, Int8Matrix) else np.asarray(matrix, dtype=np.float32), hashes

    def patchable(self, model: str, text_version: int, generation: str) -> StoredSet | None:
        """The current set, when an update may patch it: int8 rows of ``model`` with hashes of texts of
        ``text_version``, whole (a vector of every unit) for ``generation``. None otherwise."""
        meta = self.meta()
        if (
            not meta
            or meta.get("model") != model
            or meta.get("text_version") != text_version
            or meta.get("generation") != generation
            or meta.get("count") != meta.get("total")
            or "hashes" not in meta
            or "scale" not in meta
            or not (meta.get("npy") or meta.get("int8"))
        ):
            return None
        try:
            index, ids = self._read(meta, packed=True)
            hashes = self._hashes(meta)
        except (OSError, ValueError, KeyError):
            return None
        if not isinstance(index, Int8Matrix) or not (len(ids) == len(hashes) == len(index)):
            return None
        base = index.base if isinstance(index, PatchedInt8) else index
        return StoredSet(meta, ids, hashes, len(base), index)

    def write_patch(
        self,
        stored: StoredSet,
        hidden: list[int],
        ids: list[str],
        matrix: np.ndarray | Int8Matrix,
        hashes: list[str],
        generation: str,
    ) -> None:
        """Swap in ``stored`` (read by ``patchable``) with its rows at ``hidden`` (positions no unit owns any more,
        or whose unit changed) left out and ``ids``' rows added: written as a patch beside the stored rows, which
        stay as they are; a patch grown past ``PATCH_MAX_SHARE`` writes the set whole instead. Readers see the old
        set or the new, never half (the same swap of vectors.json as ``write``)."""
        meta = stored.meta
        dim = int(meta["dim"])
        add = matrix if isinstance(matrix, Int8Matrix) else Int8Matrix(*quantize(matrix))
        if len(ids) != len(add) or len(ids) != len(hashes):
            raise ValueError("a patch's ids, rows and hashes differ in number")
        nb = stored.base_rows
        gone = set(empty_ids(stored.ids)) | set(hidden)
        keep = [i for i in range(nb, len(stored.ids)) if i not in gone]  # the last patch's rows that stay
        rows = stored.index[keep] if keep else Int8Matrix(np.zeros((0, dim), np.int8), np.zeros(0, np.float32))
        q = np.concatenate([np.asarray(rows.q).reshape(-1, dim), np.asarray(add.q).reshape(-1, dim)])
        scale = np.concatenate([np.asarray(rows.scale, dtype=np.float32), np.asarray(add.scale, dtype=np.float32)])
        patch_ids = [stored.ids[i] for i in keep] + list(ids)
        patch_hashes = [stored.hashes[i] for i in keep] + list(hashes)
        base_hidden = sorted(i for i in gone if i < nb)
        live = nb - len(base_hidden) + len(patch_ids)
        if len(patch_ids) + len(base_hidden) > max(PATCH_MIN_ROWS, PATCH_MAX_SHARE * nb):
            alive = [i for i in range(nb) if i not in gone]
            base = stored.index[alive]
            every = list(stored.ids)  # decoded once (one id at a time from packed ids is ~100x slower)
            self.write(
                meta["model"],
                dim,
                [every[i] for i in alive] + patch_ids,
                Int8Matrix(np.concatenate([base.q, q]), np.concatenate([base.scale, scale])),
                generation,
                hashes=[stored.hashes[i] for i in alive] + patch_hashes,
                text_version=meta.get("text_version"),
            )
            return
        stamp = f"{time.time_ns()}"
        names = {k: f"vectors-{stamp}.patch.{k}" for k in ("rows", "scale", "ids", "hashes")}
        names["rows"] += ".npy"
        names["scale"] += ".npy"
        names["ids"] += ".json"
        names["hashes"] += ".json"
        np.save(self.dir / names["rows"], q)
        np.save(self.dir / names["scale"], scale)
        (self.dir / names["ids"]).write_text(json.dumps(patch_ids))
        (self.dir / names["hashes"]).write_text(json.dumps(patch_hashes))
        new = {k: meta[k] for k in ("model", "dim", "scale", "ids", "hashes", "text_version")}
        # the stored rows under "int8", not "npy": a reader that knows no patch finds no set rather than a stale one
        new.update(int8=meta.get("npy") or meta["int8"], count=live, total=live, generation=generation)
        new["patch"] = dict(names, hidden=base_hidden)
        self._swap(new)
        self._unlink(_files({"patch": meta.get("patch")}))  # the last patch's files; the stored rows stay

    def _read_ids(self, name: str) -> list[str] | PackedIds:
        path = self.dir / name
        return json.loads(path.read_text()) if name.endswith(".json") else PackedIds(path.read_bytes())

    def _read(self, meta: dict, packed: bool = False):
        """(the stored vectors: an int8 matrix, a float32 one (a set written before int8) or a FAISS index,
        their ids) of the set ``meta`` names. A matrix is memory-mapped: the page cache holds it once for
        every process, and a one-shot search reads only the pages it scans. ``packed``: the ids may come as
        ``PackedIds`` or, patched, ``PatchedIds`` (a search's, a patch's), else a list."""
        rows_name = meta.get("npy") or meta.get("int8")
        if rows_name:
            index: Any = np.load(self.dir / rows_name, mmap_mode="r")
            if "scale" in meta:
                # opened now, with the map: a later swap that unlinks the file leaves both reading this set
                rows = open(self.dir / rows_name, "rb", buffering=0)  # noqa: SIM115 - closed with the set
                index = Int8Matrix(index, np.load(self.dir / meta["scale"]), rows)
        else:
            import faiss

            index = faiss.read_index(str(self.dir / meta["faiss"]))
        ids: Sequence[str] = self._read_ids(meta["ids"])
        patch = meta.get("patch")
        if patch is None and not packed:
            ids = list(ids)
        if patch is not None:  # the set's rows a patch replaced or removed keep their places, without an id
            if not isinstance(index, Int8Matrix) or len(ids) != len(index):
                raise ValueError("a patch of a set that is not int8 rows")
            if packed and isinstance(ids, PackedIds):
                ids = PatchedIds(ids, patch["hidden"], json.loads((self.dir / patch["ids"]).read_text()))
            else:
                ids = self._patched(list(ids), patch, "ids")
            index = PatchedInt8(
                index, Int8Matrix(np.load(self.dir / patch["rows"]), np.load(self.dir / patch["scale"]))
            )
            if len(ids) != len(index):
                raise ValueError("a patch whose ids and rows differ in number")
        return index, ids

    def _hashes(self, meta: dict) -> list[str]:
        """Per stored position (``_read``'s), the content hash its vector was made from ("" for a hidden row)."""
        hashes = json.loads((self.dir / meta["hashes"]).read_text())
        patch = meta.get("patch")
        return hashes if patch is None else self._patched(hashes, patch, "hashes")

    def _patched(self, values: list[str], patch: dict, key: str) -> list[str]:
        """Per-position ``values`` (ids or hashes) of the stored rows with ``patch`` applied: the rows it replaced
        or removed keep their places, emptied; its own rows' values follow."""
        return _hide(values, patch["hidden"], json.loads((self.dir / patch[key]).read_text()))

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
        try:
            index, ids = self._read(meta, packed=True)
        except (OSError, RuntimeError, ValueError, KeyError):
            return self._index is not None  # mid-swap: keep what we had
        self._index, self._ids, self._loaded_mtime = index, ids, mtime
        self._pos = None  # a search without a scope never asks (Django: 48k ids, ~10 ms a one-shot search)
        if isinstance(ids, _IdsView):
            dead = ids.empty().tolist()
        else:
            dead = [i for i, cid in enumerate(ids) if not cid] if "" in ids else []  # the scan in C first: mostly none
        self._alive = None
        self._live_rows = None
        if dead and isinstance(index, (np.ndarray, Int8Matrix)):
            live = np.ones(len(ids), dtype=bool)
            live[dead] = False
            self._live_rows = np.flatnonzero(live)
        elif dead:
            import faiss

            dead_sel = faiss.IDSelectorBatch(np.asarray(dead, dtype=np.int64))
            self._alive = (dead_sel, faiss.IDSelectorNot(dead_sel))
        return True

    def load(self) -> bool:
        """Read the current set (its ids, its rows mapped), as a search would first: whether there is one."""
        with self._lock:
            return self._load()

    def search(self, vec: np.ndarray, k: int, allowed: set[str] | None = None) -> list[tuple[str, float]]:
        """Nearest ids; ``allowed`` (ids in scope) becomes FAISS's id selector, so out-of-scope vectors
        are never candidates."""
        with self._lock:
            if not self._load() or not self._ids:
                return []
            index, ids, alive, live_rows = self._index, self._ids, self._alive, self._live_rows
            if self._pos is None and (allowed is not None or alive is not None):
                self._pos = {cid: i for i, cid in enumerate(ids) if cid}
            pos = self._pos or {}
        q: np.ndarray = np.asarray(vec, dtype=np.float32).reshape(-1)
        if isinstance(index, (np.ndarray, Int8Matrix)):
            if allowed is None:
                sel = None
            else:
                sel = np.fromiter((pos[c] for c in allowed if c in pos), dtype=np.int64)
                if not len(sel):
                    return []
                sel.sort()  # rows read in file order from the memory map
            if isinstance(index, Int8Matrix):
                scores = index.scores(q, sel)
            else:
                scores = np.asarray(index if sel is None else index[sel], dtype=np.float32) @ q
            if sel is None and live_rows is not None:
                # rows a patch replaced or removed are never candidates, and the others' scores are ranked as the
                # set written whole would rank them (ties too): the same scores in the same order
                sel, scores = live_rows, scores[live_rows]
            n = min(k, len(scores))
            if n <= 0:
                return []
            top = np.argpartition(-scores, n - 1)[:n] if n < len(scores) else np.arange(len(scores))
            top = top[np.argsort(-scores[top], kind="stable")]
            rows = sel[top] if sel is not None else top
            return [(ids[int(r)], float(scores[t])) for r, t in zip(rows, top, strict=True)]
        import faiss

        faiss.omp_set_num_threads(1)
        q = q.reshape(1, -1)
        if allowed is None and alive is None:
            scores, idx = index.search(q, min(k, len(ids)))
        else:
            if allowed is None:  # a grown set: its dead positions are never candidates
                assert alive is not None  # else the plain search above
                fsel, n = alive[1], len(pos)
            else:
                sel_pos = np.fromiter((pos[c] for c in allowed if c in pos), dtype=np.int64)
                if not len(sel_pos):
                    return []
                fsel, n = faiss.IDSelectorBatch(sel_pos), len(sel_pos)
            # the index's own efSearch: search parameters would otherwise bring faiss's default (16)
            # faiss's bundled stubs lack SearchParametersHNSW (the module has it)
            params = faiss.SearchParametersHNSW(sel=fsel, efSearch=index.hnsw.efSearch)  # type: ignore[attr-defined]
            scores, idx = index.search(q, min(k, n), params=params)
        return [(ids[i], float(s)) for s, i in zip(scores[0], idx[0], strict=True) if i >= 0]
