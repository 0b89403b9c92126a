"""Held-out rows from release notes (bench/release_rows.py): the gold is what the eval's function ranking can
hold, an entry naming two changed functions is one row, and no package a shipped model saw is among them."""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))

from embedder.packages import PACKAGES, VALIDATION
from embedder.release_list import evaluation_projects, normalize
from release_rows import HELDOUT, fitted_packages, gold_key, rows_of


def _pair(qualname: str, kind: str, query: str = "Fix the retry backoff.", path: str = "pkg/a.py"):
    return {
        "version": "1.0",
        "release": "1.1",
        "query": query,
        "path": path,
        "qualname": qualname,
        "kind": kind,
        "shared_words": 20,
    }


def test_gold_is_a_function_or_a_method_of_a_top_level_class():
    assert gold_key(_pair("retry", "function")) == "pkg/a.py:retry"
    assert gold_key(_pair("Client.retry", "method")) == "pkg/a.py:Client.retry"
    # the eval counts a nested unit as its outer function: such a pair is not a row of its own
    assert gold_key(_pair("retry.inner", "function")) is None
    assert gold_key(_pair("Client.Meta.retry", "method")) is None


def test_an_entry_naming_two_functions_is_one_row_with_both_as_gold():
    chain = {"1.0": {"filename": "pkg-1.0.tar.gz", "digests": {"sha256": "ab" * 32}}}
    pairs = [
        _pair("retry", "function"),
        _pair("Client.send", "method", path="pkg/b.py"),
        _pair("other", "function", query="Speed up parsing."),
        _pair("outer.inner", "function", query="Nested only."),
    ]
    rows = rows_of("pkg", pairs, chain, per_package=3)
    assert [r["query"] for r in rows] == ["Fix the retry backoff.", "Speed up parsing."]
    first = rows[0]
    assert first["gold_functions"] == ["pkg/a.py:retry", "pkg/b.py:Client.send"]
    assert first["gold_files"] == ["pkg/a.py", "pkg/b.py"]
    assert first["corpus"]["pypi"] == "pkg" and first["corpus"]["version"] == "1.0"
    assert first["sdist"] == "pkg-1.0.tar.gz" and first["sha256"] == "ab" * 32
    assert len({r["instance_id"] for r in rows}) == 2
    assert len(rows_of("pkg", pairs, chain, per_package=1)) == 1


def test_every_package_a_shipped_model_saw_is_left_out():
    fitted = fitted_packages()
    assert {normalize(n) for n in (*PACKAGES, *VALIDATION)} <= fitted
    reports = Path(__file__).resolve().parents[1] / "bench" / "data" / "reports" / "standard_2026-12-03.jsonl"
    lines = [line for line in reports.read_text().splitlines() if line.strip()]
    assert {normalize(json.loads(line)["package"]) for line in lines} <= fitted


def test_the_committed_rows_hold_no_fitted_package_and_no_evaluation_project():
    rows = [json.loads(line) for line in HELDOUT.read_text().splitlines() if line.strip()]
    assert len(rows) >= 250
    names = {normalize(r["corpus"]["pypi"]) for r in rows}
    assert not names & fitted_packages()
    assert not names & evaluation_projects()
    for r in rows:
        assert r["gold_functions"] and r["gold_files"] and r["query"]
        assert {g.split(":", 1)[0] for g in r["gold_functions"]} == set(r["gold_files"])
        assert len(r["sha256"]) == 64
