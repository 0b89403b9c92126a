"""SQLite's lexical postings (schema 9, store/postings.py): the codec, a transaction's windows and runs, keys that
collide, and a store updated in every way reading as a fresh one (postings, lengths, totals and rankings)."""

from __future__ import annotations

import os

import numpy as np
import pytest

from tests.conftest import write_tree

from repoctx import Index, Settings
from repoctx.store import postings
from repoctx.store.postings import (
    CorruptPostings,
    decode_varints,
    encode_varints,
    lengths_of,
    pack,
    read_lengths,
    stats,
    unpack_many,
)

TREE = {
    "shop/orders.py": (
        "class Order:\n    def total(self):\n        return sum(line.price for line in self.lines)\n\n"
        "    def refund(self, amount):\n        return self.total() - amount\n\n\n"
        "def place_order(cart):\n    order = Order()\n    order.lines = cart\n    return order\n"
    ),
    "shop/cart.py": "def add_line(cart, item):\n    cart.append(item)\n    return cart\n\n\ndef total(cart):\n    return 0\n",
    "shop/pay.py": "from shop.orders import place_order\n\n\ndef pay(cart):\n    return place_order(cart).total()\n",
    "docs/orders.md": "# Orders\n\nAn order's total is the sum of its lines; a refund takes an amount off.\n",
}
QUERIES = (["order", "total"], ["refund", "amount"], ["cart", "line"], ["place_order"], ["lines", "price", "sum"])


def test_varints_read_back_every_value_and_a_cut_one_is_refused():
    rng = np.random.default_rng(7)
    values = np.concatenate(
        [
            [0, 1, 127, 128, 129, 16383, 16384, (1 << 21) - 1, 1 << 21, (1 << 35) + 5, (1 << 62) - 1],
            rng.integers(0, 1 << 30, 5000),
            rng.integers(0, 300, 5000),
        ]
    ).astype(np.int64)
    data = encode_varints(values)
    assert np.array_equal(decode_varints(data), values)
    assert encode_varints(np.zeros(0, np.int64)) == b"" and len(decode_varints(b"")) == 0
    with pytest.raises(CorruptPostings):
        decode_varints(data[:-1] + bytes([data[-1] | 0x80]))


def test_several_terms_postings_unpack_together():
    lists = [([3, 9, 200, 70_000], [1, 10, 3, 300]), ([], []), ([1], [65_000]), ([5, 6], [2, 2])]
    blobs = [pack(np.array(r, np.int64), np.array(w, np.int64)) for r, w in lists]
    which, rowids, wtf = unpack_many(blobs, [len(r) for r, _ in lists])
    assert which.tolist() == [0, 0, 0, 0, 2, 3, 3]
    assert rowids.tolist() == [3, 9, 200, 70_000, 1, 5, 6] and wtf.tolist() == [1, 10, 3, 300, 65_000, 2, 2]
    with pytest.raises(CorruptPostings):  # counted more postings than the bytes hold
        unpack_many(blobs, [5, 0, 1, 2])


def _postings_by_id(ix: Index) -> tuple:
    db = ix.store.db
    id_of = dict(db.execute("SELECT rowid, id FROM capsules"))
    rows = db.execute("SELECT term, n, p FROM lex WHERE n > 0").fetchall()
    which, rowids, wtf = unpack_many([r[2] for r in rows], [r[1] for r in rows])
    assert all(r in id_of for r in rowids.tolist())  # no posting of a unit gone
    units = np.array(sorted(id_of), dtype=np.int64)
    lengths = dict(zip(map(id_of.get, units.tolist()), lengths_of(read_lengths(db), units).tolist(), strict=True))
    return (
        sorted(zip([rows[i][0] for i in which.tolist()], map(id_of.get, rowids.tolist()), wtf.tolist(), strict=True)),
        lengths,
        stats(db),
    )


def _fresh(tmp_path, root, name) -> tuple:
    with Index(root, Settings(index_dir=tmp_path / name, embedder="none")) as ix:
        ix.update()
        return _postings_by_id(ix), [ix.store.lexical(q, 10, ix.scope()) for q in QUERIES]


@pytest.mark.parametrize("keys", ["crc32", "colliding"])
def test_windows_runs_and_colliding_keys_read_as_a_fresh_index(tmp_path, monkeypatch, keys):
    """Windows of 5 postings (every put a flush), keys that collide and go negative: after edits, a deletion,
    an unchanged file rewritten and a second repository in the same file, the postings by unit id, the units'
    lengths, the totals and the rankings are a fresh index's."""
    monkeypatch.setattr(postings, "FLUSH_POSTINGS", 5)
    if keys == "colliding":  # four home keys for every term, two of them negative: probes everywhere
        monkeypatch.setattr(postings, "term_key", lambda t: (len(t) % 4) - 2)
    root = write_tree(tmp_path / "repo", TREE)
    with Index(root, Settings(index_dir=tmp_path / "ix", embedder="none")) as ix:
        ix.update()
        assert (_postings_by_id(ix), [ix.store.lexical(q, 10, ix.scope()) for q in QUERIES]) == _fresh(
            tmp_path, root, "fresh0"
        )
        (root / "shop" / "orders.py").write_text(
            TREE["shop/orders.py"].replace("def refund", "def reimburse") + "\n\ndef cancel(order):\n    return None\n"
        )
        (root / "shop" / "cart.py").unlink()
        write_tree(root, {"shop/stock.py": "def reserve(item, amount):\n    return amount\n"})
        os.utime(root / "shop" / "pay.py")
        ix.update()
        got = (_postings_by_id(ix), [ix.store.lexical(q, 10, ix.scope()) for q in QUERIES])
        assert got == _fresh(tmp_path, root, "fresh1")
        held = {(t, cid.split("#")[0]) for t, cid, _ in got[0][0]}
        assert ("refund", "repo:shop/orders.py") not in held and ("reimburse", "repo:shop/orders.py") in held
        other = write_tree(tmp_path / "other", {"lib/orders.py": "def order_total(order):\n    return order.total\n"})
        with Index(other, Settings(index_dir=tmp_path / "ix", embedder="none")) as second:
            second.update()
            assert [cid for cid, _ in second.store.lexical(["order", "total"], 5, second.scope())] == [
                "other:lib/orders.py#order_total"
            ]
        # the repository's own results stay its own (the statistics are now the file's: both repositories')
        assert all(cid.startswith("repo:") for q in QUERIES for cid, _ in ix.store.lexical(q, 10, ix.scope()))


def test_a_unit_written_again_unchanged_writes_no_postings(tmp_path):
    root = write_tree(tmp_path / "repo", TREE)
    with Index(root, Settings(index_dir=tmp_path / "ix", embedder="none")) as ix:
        ix.update()

        def rows() -> dict:
            return {r[0]: r[1:] for r in ix.store.db.execute("SELECT term, n, p FROM lex")}

        before = rows()
        (root / "shop" / "orders.py").write_text(TREE["shop/orders.py"] + "\n\ndef cancel(order):\n    return None\n")
        ix.update()
        after = rows()
        changed = {t for t in after if after[t] != before.get(t)}
        assert "cancel" in changed  # the new function's terms
        assert not {"refund", "price", "amount"} & changed  # only Order's methods hold these: rewritten, not changed


def test_a_term_of_several_words_matches_the_units_holding_all_of_them(tmp_path):
    root = write_tree(tmp_path / "repo", TREE)
    with Index(root, Settings(index_dir=tmp_path / "ix", embedder="none")) as ix:
        ix.update()
        got = {cid for cid, _ in ix.store.lexical(["line.price"], 10, ix.scope())}
        assert "repo:shop/orders.py#Order.total" in got
        both = {cid for cid, _ in ix.store.lexical(["line"], 20, ix.scope())} & {
            cid for cid, _ in ix.store.lexical(["price"], 20, ix.scope())
        }
        assert got == both
        assert ix.store.lexical(["nowhere.price"], 10, ix.scope()) == []
        assert ix.store.doc_freqs(["order", "nowhere"], ix.scope()) == {"order": ix.store.doc_freqs(["order"])["order"]}


def test_unique_is_numpys_without_its_masked_array_import():
    rng = np.random.default_rng(7)
    for a in [rng.integers(-5, 50, n) for n in (0, 1, 2, 9, 500)] + [np.array([3, 3, 3]), np.array([5, 1, 5, 1])]:
        want, want_at = np.unique(a, return_inverse=True)
        got, (got2, at) = postings.unique(a), postings.unique_inverse(a)
        assert got.dtype == want.dtype and got.tolist() == want.tolist() == got2.tolist()
        assert at.tolist() == want_at.ravel().tolist()
