"""An update of a few files patches the stored int8 vector set (store/faiss_index.py ``write_patch``) instead of
writing it whole: searches see the stored rows and the patch, never a replaced or removed unit's vector, and the
set equals the one a full rebuild gives."""

import numpy as np
import pytest
from tests.conftest import write_tree
from tests.test_dense import FILES, HashEmbedder

from repoctx import Index, Settings
from repoctx.retrieve.hybrid import SearchOptions

QUESTIONS = ["render invoice pdf", "make token v2", "authenticate user password", "refund order total", "x"]


def _index(tmp_path, name, emb):
    settings = Settings(index_dir=tmp_path / name, vector_cache=tmp_path / f"{name}.sqlite")
    return Index(tmp_path / "repo", settings, embedder=emb)


@pytest.fixture
def pair(tmp_path, monkeypatch):
    """(an index that patches, one that writes every set whole as before patches existed, their embedder), over
    one tree: each step updates both and they must answer alike."""
    from repoctx.store.sqlite import SQLiteRepoWriter

    write_tree(tmp_path / "repo", FILES)
    emb = HashEmbedder()
    ix, ref = _index(tmp_path, "idx", emb), _index(tmp_path, "ref", emb)
    real = SQLiteRepoWriter.patch_rows
    monkeypatch.setattr(
        SQLiteRepoWriter, "patch_rows", lambda self, *a: None if self.store is ref.store else real(self, *a)
    )
    ix.update()
    ref.update()
    yield ix, ref, emb
    ix.close()
    ref.close()


def _live(ix) -> tuple[list[str], np.ndarray]:
    """The live units' ids and vectors in stored order, as a search reads the set."""
    fx = ix.store.faiss_for(ix.repo)
    index, ids = fx._read(fx.meta())
    rows = index.dequantize()
    live = [i for i, cid in enumerate(ids) if cid]
    return [ids[i] for i in live], rows[live]


def _alike(ix, ref):
    ref.update()
    (ids, rows), (want_ids, want_rows) = _live(ix), _live(ref)
    assert ids == want_ids and len(set(ids)) == len(ids)  # the same units in the same order: ties rank alike
    assert np.array_equal(rows, want_rows)
    dense = SearchOptions(lexical=False)
    for q in QUESTIONS:
        assert [(h.capsule.id, h.score) for h in ix.search(q, k=5, options=dense)] == [
            (h.capsule.id, h.score) for h in ref.search(q, k=5, options=dense)
        ]


def test_edits_patch_the_set_and_searches_read_it_as_a_whole_set(pair, tmp_path):
    ix, ref, emb = pair
    fx = ix.store.faiss_for(ix.repo)
    rows_file = fx.meta()["npy"]
    # a unit added, one changed
    (tmp_path / "repo/auth/tokens.py").write_text(
        "def make_token(user):\n    return 'v2' + str(user)\n\n\ndef refund(order):\n    return order.total\n"
    )
    ix.update()
    meta = fx.meta()
    assert "patch" in meta and meta["int8"] == rows_file and "npy" not in meta  # the stored rows are not written again
    assert (ix.last_embed.embedded, ix.last_embed.total) == (2, meta["count"])
    assert len(meta["patch"]["hidden"]) == 1  # the changed unit's old row
    assert ix.vectors_status()["current"]
    _alike(ix, ref)
    # a patch of the patch: a file removed, the added unit removed again; the last patch's files are gone
    first_patch = meta["patch"]["rows"]
    (tmp_path / "repo/billing/invoice.py").unlink()
    (tmp_path / "repo/auth/tokens.py").write_text("def make_token(user):\n    return 'v2' + str(user)\n")
    ix.update()
    meta = fx.meta()
    assert "patch" in meta and not (fx.dir / first_patch).exists()
    assert not any(cid.startswith(f"{ix.repo}:billing/") or cid.endswith("#refund") for cid in _live(ix)[0])
    _alike(ix, ref)
    got_ids, _, _ = fx.reusable(emb.model_id, None, 1)
    assert "" not in got_ids and len(got_ids) == len(set(got_ids)) == meta["count"]


def test_a_patch_past_its_share_writes_the_set_whole(pair, tmp_path, monkeypatch):
    from repoctx.store import faiss_index

    ix, ref, _ = pair
    monkeypatch.setattr(faiss_index, "PATCH_MIN_ROWS", 0)
    monkeypatch.setattr(faiss_index, "PATCH_MAX_SHARE", 0.01)
    (tmp_path / "repo/auth/login.py").write_text("def authenticate_user(username, password):\n    return False\n")
    ix.update()
    fx = ix.store.faiss_for(ix.repo)
    assert "patch" not in fx.meta() and "npy" in fx.meta()
    assert [p.name for p in fx.dir.iterdir() if "patch" in p.name] == []
    _alike(ix, ref)


def test_an_interrupted_patch_leaves_the_last_set_and_the_next_update_mends_it(pair, tmp_path, monkeypatch):
    from repoctx.store.faiss_index import FaissIndex

    ix, ref, _ = pair
    fx = ix.store.faiss_for(ix.repo)
    before = fx.meta()

    def killed(*a, **k):
        raise KeyboardInterrupt

    with monkeypatch.context() as m:
        m.setattr(FaissIndex, "write_patch", killed)
        (tmp_path / "repo/auth/tokens.py").write_text("def make_token(user):\n    return 'v9' + str(user)\n")
        with pytest.raises(KeyboardInterrupt):
            ix.update()
    assert fx.meta() == before and ix.search("make token", k=1, options=SearchOptions(lexical=False))
    assert not ix.vectors_status()["current"]
    ix.update()  # nothing changed on disk since: the set is mended from every unit
    assert ix.vectors_status()["current"]
    _alike(ix, ref)


def test_an_update_whose_vectors_were_not_filled_is_never_patched_over(pair, tmp_path):
    """The set must be whole for the generation just before the update's: an update without a fill in between
    (another process's, or ``embed=False``) leaves changes a patch of the next update's files would miss."""
    ix, ref, _ = pair
    (tmp_path / "repo/auth/tokens.py").write_text("def make_token(user):\n    return 'v7' + str(user)\n")
    ix.update(embed=False)
    (tmp_path / "repo/auth/login.py").write_text("def authenticate_user(username, password):\n    return None\n")
    ix.update()
    assert "patch" not in ix.store.faiss_for(ix.repo).meta()
    _alike(ix, ref)


def test_a_unit_of_a_path_with_a_hash_sign_is_told_from_another_files(pair, tmp_path):
    """Ids are ``repo:path#qualname``: a removed unit of ``auth/x`` is hidden, one of ``auth/x#y.py`` (untouched) is
    not."""
    ix, ref, _ = pair
    write_tree(
        tmp_path / "repo", {"auth/x": "def gone():\n    return 1\n", "auth/x#y.py": "def stays():\n    return 2\n"}
    )
    ix.update()
    _alike(ix, ref)
    (tmp_path / "repo/auth/x").write_text("def other():\n    return 3\n")
    ix.update()
    assert "patch" in ix.store.faiss_for(ix.repo).meta()
    _alike(ix, ref)


class _LoadingEmbedder(HashEmbedder):
    """An embedder that can load in the background (as LocalMiniLM does), recording when it is asked to and how
    many files were written by then."""

    def __init__(self, store_of):
        super().__init__()
        self.asked: list[int] = []
        self._store_of = store_of

    def load_in_background(self) -> None:
        self.asked.append(self._store_of().counts()["files"])


def test_the_model_starts_loading_once_the_walk_finds_files_to_parse(tmp_path):
    """An update with files to parse starts the model's load (``load_in_background``) before they are parsed and
    written, so the two overlap; an update with nothing to parse never loads it, nor one that embeds nothing."""
    write_tree(tmp_path / "repo", FILES)
    holder: dict = {}
    emb = _LoadingEmbedder(lambda: holder["ix"].store)
    ix = holder["ix"] = _index(tmp_path, "idx", emb)
    ix.update()
    assert emb.asked == [0]  # at the plan: no file written yet
    ix.update()
    assert emb.asked == [0]  # a no-op
    edited = tmp_path / "repo" / "billing" / "invoice.py"
    edited.write_text(edited.read_text() + "\ndef z():\n    pass\n")
    seen: list[dict] = []
    ix.update(embed=False)
    assert emb.asked == [0]
    edited.write_text(edited.read_text() + "\ndef y():\n    pass\n")
    ix.update(progress=seen.append)
    assert len(emb.asked) == 2 and any(e.get("event") == "plan" for e in seen)  # the caller's progress still sees all
    ix.close()


def test_a_big_update_does_not_load_the_model_while_it_parses(tmp_path, monkeypatch):
    """Beside many files' parse the model's load costs memory at the parse's peak: only a few files' update
    starts it early (index.PRELOAD_MAX_FILES)."""
    import repoctx.index

    monkeypatch.setattr(repoctx.index, "PRELOAD_MAX_FILES", 1)
    write_tree(tmp_path / "repo", FILES)
    holder: dict = {}
    emb = _LoadingEmbedder(lambda: holder["ix"].store)
    ix = holder["ix"] = _index(tmp_path, "idx", emb)
    ix.update()
    assert emb.asked == [] and len(FILES) > 1
    ix.close()


def test_an_update_starts_the_model_at_its_first_change_before_the_walk_ends(tmp_path, monkeypatch):
    """An index that has files starts the model's load when the walk meets the first changed file, not once the walk
    has ended (the plan), so the load runs beside the walk's rest too; the caller's progress hears no such event."""
    import repoctx.indexer

    files = dict(FILES) | {f"zz/more{i}.py": f"def more_{i}():\n    return {i}\n" for i in range(5)}
    write_tree(tmp_path / "repo", files)
    walked: list[str] = []
    real_walk = repoctx.indexer.walk

    def walk(*args, **kwargs):
        for sf in real_walk(*args, **kwargs):
            walked.append(sf.path)
            yield sf

    monkeypatch.setattr(repoctx.indexer, "walk", walk)
    holder: dict = {}
    seen: list[dict] = []
    emb = _LoadingEmbedder(lambda: holder["ix"].store)
    at_load: list[tuple[int, list[str]]] = []
    emb.load_in_background = lambda: at_load.append((len(walked), [e["event"] for e in seen]))  # type: ignore[method-assign]
    ix = holder["ix"] = _index(tmp_path, "idx", emb)
    ix.update(embed=False)
    edited = tmp_path / "repo" / "billing" / "invoice.py"
    edited.write_text(edited.read_text() + "\ndef z():\n    pass\n")
    walked.clear()
    ix.update(progress=seen.append)
    assert len(at_load) == 1
    n, events = at_load[0]
    assert walked.index("billing/invoice.py") + 1 == n < len(files) and events == []  # mid-walk, before the plan
    assert "plan" in [e["event"] for e in seen] and "first_change" not in [e["event"] for e in seen]
    ix.update(progress=seen.append)
    assert len(at_load) == 1  # a no-op: not asked again
    ix.close()
