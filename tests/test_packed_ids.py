"""A stored vector set's ids are packed (store/faiss_index.py ``pack_ids``): a search decodes the ids of the rows it
returns only. The same ids come back, empty ones (a grown set's dead rows) are found without decoding, an id with a
NUL keeps the JSON form, and a set written with JSON ids (before) is still read."""

import json

import numpy as np
import pytest

from repoctx.store.faiss_index import (
    FaissIndex,
    Int8Matrix,
    PackedIds,
    PatchedIds,
    empty_ids,
    ids_starting,
    pack_ids,
    quantize,
)

IDS = ["shop:a.py#f", "", "shop:ü/ñ.py#Klasse.método", "shop:b.py#g", "", "shop:c d.py#<module>"]


def test_packed_ids_read_back_one_by_one_and_whole():
    ids = PackedIds(pack_ids(IDS))
    assert len(ids) == len(IDS) and list(ids) == IDS and ids[:2] == IDS[:2]
    assert [ids[i] for i in range(len(IDS))] == IDS and ids[-1] == IDS[-1]
    assert ids.empty().tolist() == [1, 4] and "" in ids and "shop:b.py#g" in ids and "x" not in ids
    with pytest.raises(IndexError):
        ids[len(IDS)]
    assert list(PackedIds(pack_ids([]))) == [] and "" not in PackedIds(pack_ids(["a"]))
    assert pack_ids(["a\0b"]) is None
    with pytest.raises(ValueError):
        PackedIds(pack_ids(IDS)[:-3])  # cut short
    with pytest.raises(ValueError):
        PackedIds(b'["a"]')


@pytest.mark.parametrize(
    "prefixes",
    [("shop:a.py#",), ("shop:ü/ñ.py#",), ("shop:",), ("shop:b.py#g", "shop:b.py#"), ("shop:c d.py#", "shop:a.py#f"),
     ("a.py",), ("shop:zz.py#",), ("#f",)],
)
def test_packed_ids_found_by_prefix_as_a_list_finds_them(prefixes):
    """A one-file update finds its file's rows by the ids' prefix in the packed text (bytes, UTF-8), as a scan of
    the decoded list does: the same positions, in order, each once (overlapping prefixes too), none found inside an
    id or across its end."""
    ids = IDS + ["shop:a.py#f2", "xshop:a.py#h", "shop:a.py"]
    packed = PackedIds(pack_ids(ids))
    assert ids_starting(packed, prefixes) == ids_starting(list(ids), prefixes)
    assert ids_starting(packed, prefixes) == [i for i, cid in enumerate(ids) if cid.startswith(prefixes)]
    assert empty_ids(packed) == empty_ids(list(ids)) == [1, 4]


def test_a_patched_sets_ids_read_as_the_list_they_stand_for():
    """A patched set's ids (stored rows packed, the rows the patch hid empty, the patch's own after them) read as
    the list FaissIndex built before: one by one, whole, sliced, their empty positions, found by prefix."""
    hidden, extra = [0, 3], ["shop:a.py#f", "shop:new.py#h", "", "shop:b.py#g2"]
    want = [("" if i in hidden else cid) for i, cid in enumerate(IDS)] + extra
    ids = PatchedIds(PackedIds(pack_ids(IDS)), hidden, extra)
    assert len(ids) == len(want) and [ids[i] for i in range(len(want))] == want and list(ids) == want
    assert ids[-1] == want[-1] and ids[2:7] == want[2:7] and "shop:new.py#h" in ids and "shop:b.py#g" not in ids
    assert ids.empty().tolist() == [i for i, cid in enumerate(want) if not cid] == empty_ids(ids)
    for prefixes in [("shop:a.py#",), ("shop:b.py#",), ("shop:",), ("shop:ü/ñ.py#", "shop:new.py#")]:
        assert ids_starting(ids, prefixes) == [i for i, cid in enumerate(want) if cid.startswith(prefixes)]
    with pytest.raises(IndexError):
        ids[len(want)]


def _vectors(n: int) -> np.ndarray:
    rng = np.random.default_rng(7)
    m = rng.normal(size=(n, 8)).astype(np.float32)
    return m / np.linalg.norm(m, axis=1, keepdims=True)


@pytest.mark.parametrize("ids", [[f"r:p{i}.py#f" for i in range(50)], [f"r:p{i}.py#f\0x" for i in range(50)]])
def test_a_search_reads_packed_or_json_ids_alike(tmp_path, ids):
    m = _vectors(len(ids))
    fx = FaissIndex(tmp_path / "v")
    fx.write("m", 8, ids, Int8Matrix(*quantize(m)))
    meta = fx.meta()
    assert meta["ids"].endswith(".json") == ("\0" in ids[0])
    got = fx.search(m[3], 5)
    assert got[0][0] == ids[3] and len(got) == 5
    allowed = {ids[i] for i in (10, 20, 30)}
    assert {cid for cid, _ in fx.search(m[3], 5, allowed=allowed)} == allowed


def test_a_set_written_with_json_ids_is_still_read(tmp_path):
    ids = [f"r:p{i}.py#f" for i in range(20)]
    m = _vectors(len(ids))
    fx = FaissIndex(tmp_path / "v")
    fx.write("m", 8, ids, Int8Matrix(*quantize(m)))
    meta = fx.meta()
    old_name = meta["ids"] + ".json"  # as a set was written before packed ids
    (fx.dir / old_name).write_text(json.dumps(ids))
    (fx.dir / meta["ids"]).unlink()
    meta["ids"] = old_name
    fx.meta_path.write_text(json.dumps(meta))
    fresh = FaissIndex(tmp_path / "v")
    assert fresh.search(m[11], 3)[0][0] == ids[11]
