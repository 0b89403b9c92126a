"""The pinned release-note packages (bench/embedder/release_list.py): no evaluation project among them, each
pinned to exact final releases, and the matcher that pairs a changelog entry with the functions it names."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))

from embedder.release_list import (
    EVAL_DIR,
    evaluation_projects,
    excluded,
    load_pins,
    normalize,
    ranked_names,
    write_pins,
)
from embedder.releases import code_names, pair_entries


def test_evaluation_projects_come_from_the_eval_rows_and_the_tuning_sets(tmp_path):
    ev, tr = tmp_path / "eval", tmp_path / "train"
    ev.mkdir()
    tr.mkdir()
    (ev / "rows.jsonl").write_text(
        json.dumps({"repo": "acme/Road_Runner", "corpus": {"pypi": "Coyote.Tools", "version": "1.0"}}) + "\n\n"
    )
    (tr / "beeper-b.jsonl").write_text("")
    names = evaluation_projects(ev, tr)
    assert {"road-runner", "coyote-tools", "beeper"} <= names
    assert {"django", "scikit-learn", "requests"} <= names  # the fixed SWE-bench Lite list, always
    assert excluded("Road.Runner", names) and excluded("beeper", names) and not excluded("beep", names)
    assert normalize("Typing_Extensions") == normalize("typing.extensions") == "typing-extensions"


@pytest.mark.skipif(not EVAL_DIR.is_dir(), reason="../shared/eval is not beside this checkout")
def test_the_real_evaluation_sets_are_read():
    names = evaluation_projects()
    # every repository of the dev split and every tuning project of bench/data/train
    with (EVAL_DIR / "swebench_lite_dev.jsonl").open() as f:
        repos = {normalize(json.loads(line)["repo"].rsplit("/", 1)[-1]) for line in f if line.strip()}
    assert repos and repos <= names
    assert {"click", "jinja2", "werkzeug", "xarray", "sympy", "pytest", "sphinx", "matplotlib"} <= names


def test_no_pinned_package_is_an_evaluation_project_and_each_is_pinned_to_final_releases():
    from packaging.version import Version

    pins = load_pins()
    assert len(pins) >= 200, "bench/embedder/release_pins.json: run `train_embedder.py pin`"
    projects = evaluation_projects()
    assert not [n for n in pins if excluded(n, projects)]
    for name, versions in pins.items():
        parsed = [Version(v) for v in versions]
        assert len(versions) >= 2 and parsed == sorted(parsed) and len(set(parsed)) == len(parsed), name
        assert not any(v.is_prerelease or v.is_devrelease for v in parsed), name


def test_pins_and_ranks_round_trip(tmp_path):
    path = tmp_path / "pins.json"
    write_pins({"attrs": ["25.4.0", "26.1.0"], "idna": ["3.9", "3.10"]}, {"cutoff": "2026-12-01"}, path)
    assert load_pins(path) == {"attrs": ["25.4.0", "26.1.0"], "idna": ["3.9", "3.10"]}
    assert json.loads(path.read_text())["cutoff"] == "2026-12-01"
    ranks = tmp_path / "pypi.tsv"
    ranks.write_text(
        "name\tversion\tmonth\trank\tsummary\nb\t1\t2026-01\t2\tx\nzz\t1\t2026-01\t\ty\na\t1\t2026-01\t1\tx\n"
    )
    assert ranked_names(ranks) == ["a", "b"]  # unranked names are no candidates


def _unit(qualname: str, path: str = "pkg/core.py") -> dict:
    return {"qualname": qualname, "name": qualname.rsplit(".", 1)[-1], "path": path, "text": qualname}


def test_an_entry_is_paired_with_each_changed_unit_it_names_even_in_a_big_release():
    changed = [_unit(f"helper_{i}") for i in range(100)] + [
        _unit("Client.retry", "pkg/client.py"),
        _unit("parse_duration", "pkg/timeouts.py"),
        _unit("Marker.__repr__", "pkg/markers.py"),
        _unit("Marker.evaluate", "pkg/markers.py"),
    ]
    got = pair_entries(
        [
            "Fix Client.retry and parse_duration losing the backoff",
            "Improve performance of the event loop considerably",
            "Don't produce a broken repr if Marker fails to construct",
            "Make Marker a little faster",
            "Type hints for helper_1, helper_2, helper_3, helper_4 and helper_5",
        ],
        changed,
    )
    assert [(e.split()[0], r["qualname"]) for e, r, _ in got] == [
        ("Fix", "Client.retry"),
        ("Fix", "parse_duration"),
        ("Don't", "Marker.__repr__"),
    ]
    # a module-qualified name; a bare name shared by too many changed units names none
    assert [r["qualname"] for _, r, _ in pair_entries(["Fix timeouts.parse_duration on empty text"], changed)] == [
        "parse_duration"
    ]
    many = [_unit("__init__", f"pkg/m{i}.py") for i in range(5)]
    assert pair_entries(["Fix __init__ of the readers"] * 1, many + changed) == []


def test_code_names_are_what_an_entry_writes_as_code():
    assert code_names("Fix Client.retry and parse_duration, HTTPResponse and getAttr in v1.2.3, e.g. now") == [
        ("Client", "retry"),
        ("parse_duration",),
        ("HTTPResponse",),
        ("getAttr",),
    ]
    assert code_names("Plain words only. Version bumps.") == []


def _sdist(dest: Path, name: str, version: str, files: dict[str, str]) -> dict:
    import io
    import tarfile

    dest.mkdir(parents=True, exist_ok=True)
    filename = f"{name}-{version}.tar.gz"
    with tarfile.open(dest / filename, "w:gz") as tf:
        for rel, text in files.items():
            data = text.encode()
            info = tarfile.TarInfo(f"{name}-{version}/{rel}")
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))
    return {"filename": filename, "url": "file:///nowhere"}  # cached: never fetched


def test_a_pinned_chain_is_mined_offline_and_a_broken_sdist_costs_only_its_release_pairs(tmp_path):
    from embedder.releases import mine_releases

    changes = "Changes\n=======\n\n{v}\n---\n\n- Fix ``Client.retry`` losing the backoff after a redirect.\n"
    v1 = {
        "pkg/client.py": "class Client:\n    def retry(self):\n        return 1\n\n"
        "    def send(self):\n        return 2\n",
        "tests/test_client.py": "def test_retry():\n    pass\n",
        "CHANGES.rst": changes.format(v="1.0"),
    }
    v2 = {
        **v1,
        "pkg/client.py": v1["pkg/client.py"].replace("return 1", "return 3"),
        "CHANGES.rst": changes.format(v="1.1"),
    }
    sd = tmp_path / "sdists"
    chain = [("1.0", _sdist(sd, "pkg", "1.0", v1)), ("1.1", _sdist(sd, "pkg", "1.1", v2))]
    (sd / "pkg-1.2.tar.gz").write_bytes(b"not a tarball")
    chain.append(("1.2", {"filename": "pkg-1.2.tar.gz", "url": "file:///nowhere"}))
    for negatives in (True, False):
        pairs, stats = mine_releases("pkg", tmp_path, chain=chain, negatives=negatives)
        assert [(p["version"], p["release"], p["qualname"], p["shared_words"]) for p in pairs] == [
            ("1.0", "1.1", "Client.retry", 30)
        ]
        assert "return 1" in pairs[0]["positive"]  # the code before the fix
        assert (pairs[0]["neg_file"] is not None) == negatives  # Client.send, from the same file
        assert stats["bad_archive"] == 1 and stats["release_pairs"] == 1 and stats["pairs"] == 1


def test_what_links_leave_in_an_entry_is_cleaned_away():
    from embedder.releases import clean_entry

    assert clean_entry("Preserve RootModel core metadata by @someone in #123") == "Preserve RootModel core metadata"
    assert (
        clean_entry("Faster regex on Python 3.11.5+ for Version (#1, #2)")
        == "Faster regex on Python 3.11.5+ for Version"
    )
    assert clean_entry("Fix logging in") == "Fix logging in"  # a sentence that ends in "in" keeps it


def test_select_pins_in_rank_order_skips_evaluation_projects_and_resumes(tmp_path, monkeypatch):
    from embedder import release_list, releases

    ranks = tmp_path / "pypi.tsv"
    ranks.write_text(
        "name\tversion\tmonth\trank\tsummary\n"
        + "".join(
            f"{n}\t1\t2026-01\t{i}\tx\n"
            for i, n in enumerate(["django", "alpha", "nolog", "beta", "gamma", "delta"], 1)
        )
    )
    monkeypatch.setattr(release_list, "PINS", tmp_path / "pins.json")
    monkeypatch.setattr(release_list, "evaluation_projects", lambda *a: frozenset({"django"}))
    asked = []

    def qualifies(name, work):
        asked.append(name)
        return ([], "no_changelog_section") if name == "nolog" else ([("1.0", {}), ("1.1", {})], "")

    monkeypatch.setattr(release_list, "qualifies", qualifies)
    fetched = []
    monkeypatch.setattr(releases, "fetch_sdist", lambda info, dest: fetched.append(info))  # the older sdists
    tally = release_list.select(tmp_path, 2, ranks)
    assert list(release_list.load_pins()) == ["alpha", "beta"]
    assert tally == {"evaluation_project": 1, "no_changelog_section": 1, "pinned": 2, "candidates_seen": 4}
    assert "django" not in asked and len(fetched) == 2
    tally = release_list.select(tmp_path, 3, ranks, resume=True)  # one more, from where the first run stopped
    assert list(release_list.load_pins()) == ["alpha", "beta", "gamma"]
    assert tally["pinned"] == 3 and tally["candidates_seen"] == 5
    assert json.loads((tmp_path / "pins.json").read_text())["complete"] is True
