"""The release-note miner of the embedding trainer (bench/embedder/releases.py): a changelog section cut
into entries, the units a release changed, and an entry paired with the unit it talks about."""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))

from embedder.releases import changed_units, clean_entry, pair_entries, release_entries  # noqa: E402

CHANGES = """\
Changelog
=========

2.1.0 (2024-03-02)
------------------

- Fix ``Client.retry`` losing the backoff when the server sends a Retry-After
  header (`#412 <https://example.org/412>`__).
- Docs: typo in the quickstart guide was fixed by somebody.
- Add :func:`parse_duration` for human-readable timeouts like "1m30s". By @someone

2.0.1 (2024-01-10)
------------------

- Headers are no longer lower-cased when sent.
"""

OLD = '''\
class Client:
    def retry(self, response):
        delay = self.backoff
        return delay

    def send(self, request):
        return request


def parse_duration(text):
    return int(text)
'''

NEW = '''\
class Client:
    def retry(self, response):
        delay = max(self.backoff, int(response.headers.get("Retry-After", 0)))
        return delay

    def send(self, request):
        return request


def parse_duration(text):
    minutes, _, seconds = text.partition("m")
    return int(minutes) * 60 + int(seconds.rstrip("s") or 0)
'''


def test_a_release_section_is_cut_into_clean_entries():
    entries = release_entries({"CHANGES.rst": CHANGES.encode()}, "2.1.0")
    assert entries == [
        "Fix Client.retry losing the backoff when the server sends a Retry-After header.",
        'Add parse_duration for human-readable timeouts like "1m30s".',
    ]  # the docs entry is housekeeping; links, roles and credits are gone
    assert release_entries({"CHANGES.rst": CHANGES.encode()}, "2.0.1") == [
        "Headers are no longer lower-cased when sent."]
    assert release_entries({"CHANGES.rst": CHANGES.encode()}, "1.9.0") == []
    # one file per release (docs/releases/v2.1.0.rst)
    one = "What's new in 2.1\n=================\n\n* Fix the retry delay of ``Client.retry`` under load.\n"
    assert release_entries({"docs/releases/v2.1.0.rst": one.encode()}, "2.1.0") == [
        "Fix the retry delay of Client.retry under load."]
    assert clean_entry("DOC: reword the tutorial (#5837)") == ""


def test_an_entry_is_paired_with_the_old_code_of_the_unit_it_names():
    changed, pool = changed_units({"pkg/client.py": OLD}, {"pkg/client.py": NEW})
    assert sorted(r["qualname"] for r in changed) == ["Client.retry", "parse_duration"]  # not send, not the class
    assert len(pool) == 4  # Client, retry, send, parse_duration
    entries = release_entries({"CHANGES.rst": CHANGES.encode()}, "2.1.0")
    pairs = pair_entries(entries, changed)
    assert [(e.split()[1], r["qualname"]) for e, r, _ in pairs] == [
        ("Client.retry", "Client.retry"), ("parse_duration", "parse_duration")]
    retry = next(r for _, r, _ in pairs if r["qualname"] == "Client.retry")
    assert "delay = self.backoff" in retry["text"]  # the code before the fix, as the index embeds it
    # an entry that names nothing that changed is left out
    assert pair_entries(["Improve performance of the event loop considerably"], changed) == []


def test_the_changelog_formats_of_other_projects():
    """Version lines with a date (dulwich, nltk), ``= 4.15.0 (date)`` (beautifulsoup4), bold versions (anyio),
    the ``releases`` extension's ``:release:`` lines (invoke, fabric) and zzzeek's ``.. changelog::`` /
    ``.. change::`` directives (alembic, mako, SQLAlchemy)."""
    dated = ("1.2.9\t2026-07-06\n\n * Bound the running length when decoding EWAH bitmaps, so a corrupt\n"
             "   index raises ``ValueError``. (Jelmer)\n\n1.2.8\t2026-06-01\n\n * Older entry with five words.\n")
    assert release_entries({"NEWS": dated.encode()}, "1.2.9") == [
        "Bound the running length when decoding EWAH bitmaps, so a corrupt index raises ValueError. (Jelmer)"]
    soup = ("= 4.15.0 (20260607)\n\n* It is now possible to call new_tag() directly, on Python\n  3.7.\n\n"
            "* Fix an unhandled exception in Tag.append when passed an empty soup. [bug=2140924]\n\n"
            "= 4.14.3 (20260101)\n\n* Old.\n")
    # "  3.7." continues an entry: it is not the next release's heading
    assert len(release_entries({"CHANGELOG": soup.encode()}, "4.15.0")) == 2
    bold = "Version history\n===============\n\n**4.9.0**\n\n- Fixed ``connect_tcp()`` producing cyclic references\n\n**4.8.0**\n\n- Added five words here too.\n"
    assert release_entries({"docs/versionhistory.rst": bold.encode()}, "4.9.0") == [
        "Fixed connect_tcp producing cyclic references"]
    roles = ("- :release:`3.0.2 <2026-04-06>`\n- :bug:`742` Define a custom ``__repr__`` for `~invoke.runners.Promise` so it\n"
             "  can be displayed in interactive sessions.\n- :support:`- backported` Minor tweaks to type hints of tasks.\n"
             "- :release:`3.0.1 <2026-04-05>`\n- :bug:`-` Something older that was fixed then.\n")
    assert release_entries({"sites/www/changelog.rst": roles.encode()}, "3.0.2") == [
        "Define a custom __repr__ for invoke.runners.Promise so it can be displayed in interactive sessions.",
        "Minor tweaks to type hints of tasks."]
    zzzeek = """\
.. changelog::
    :version: 1.20.1
    :released: October 21, 2026

    .. change::
        :tags: bug, autogenerate
        :tickets: 1085

        Fixed issue where a table comment set to an empty string would
        cause autogenerate to detect a change.  Pull request courtesy vineoy.

        .. sourcecode:: python

            op.create_table("t")

    .. change::
        :tags: tests

        Adjusted the test suite for a change in Pygments.

.. changelog::
    :version: 1.20.0

    .. change::
        :tags: feature

        Older feature with enough words.
"""
    assert release_entries({"doc/build/changelog/changelog_20.rst": zzzeek.encode()}, "1.20.1") == [
        "Fixed issue where a table comment set to an empty string would cause autogenerate to detect a change."]
    assert release_entries({"doc/build/changelog/changelog_20.rst": zzzeek.encode()}, "1.20.0") == [
        "Older feature with enough words."]


def test_a_release_unpacks_as_its_wheel_would_and_gold_matches_nested_defs(tmp_path):
    """bench/embedder/reports.py: the old release's sdist becomes the corpus of an issue-like row."""
    import io
    import json
    import tarfile

    from embedder.reports import gold_match, report_rows, unpack

    work = tmp_path / "work"
    (work / "sdists").mkdir(parents=True)
    archive = work / "sdists" / "demo_pkg-1.0.tar.gz"
    members = {"demo_pkg-1.0/demo/core.py": b"def run():\n    return 1\n",
               "demo_pkg-1.0/tests/test_core.py": b"def test_run():\n    pass\n",
               "demo_pkg-1.0/docs/conf.py": b"x = 1\n", "demo_pkg-1.0/../evil.py": b"x = 1\n",
               "demo_pkg-1.0/CHANGES.rst": b"1.1\n---\n- Fix run\n"}
    with tarfile.open(archive, "w:gz") as tf:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))
    (work / "releases").mkdir()
    (work / "releases" / "demo-pkg.jsonl").write_text(json.dumps(
        {"package": "demo-pkg", "version": "1.0", "path": "demo/core.py", "qualname": "run",
         "query": "Fix run returning the wrong value"}) + "\n")
    rows = report_rows(work, ["demo-pkg"])
    assert [(r["query"], r["gold"]) for r in rows] == [("Fix run returning the wrong value", ["demo/core.py:run"])]
    root = unpack(archive, Path(rows[0]["tree"]))
    assert sorted(str(p.relative_to(root)) for p in root.rglob("*.py")) == ["demo/core.py"]
    assert not (tmp_path / "work" / "evil.py").exists()
    assert gold_match(["demo/core.py:run"], ["demo/core.py:run.inner"])  # a nested def counts as its function
    assert not gold_match(["demo/core.py:runner"], ["demo/core.py:run"])


def _pair(package, qualname, query, path="pkg/core.py", release="2.0"):
    return {"package": package, "version": "1.0", "release": release, "path": path, "qualname": qualname,
            "query": query, "positive": f"{path} :: {qualname}\ndef {qualname.split('.')[-1]}(): return {query!r}",
            "neg_bm25": None, "neg_file": None}


def test_release_pairs_are_capped_per_package_by_a_fixed_subset():
    from embedder.mine import cap_release_pairs

    rows = [_pair("big", f"f{i}", f"fix f{i}") for i in range(40)]
    rows += [_pair(f"small{k}", f"g{i}", f"fix g{i}") for k in range(10) for i in range(6)]
    capped, cap = cap_release_pairs(rows, 0.1)
    counts = {}
    for r in capped:
        counts[r["package"]] = counts.get(r["package"], 0) + 1
    assert cap == counts["big"] < 40
    assert max(counts.values()) <= 0.1 * len(capped)
    assert all(counts[f"small{k}"] == 6 for k in range(10))
    again, _ = cap_release_pairs(list(reversed(rows)), 0.1)
    assert {r["qualname"] for r in again if r["package"] == "big"} == {
        r["qualname"] for r in capped if r["package"] == "big"}
    assert cap_release_pairs(rows, 0.0) == (rows, 0)


def test_release_pairs_get_negatives_from_their_package_never_a_positive_of_the_same_entry():
    from embedder.mine import pair_negatives

    rows = [
        _pair("p", "Client.retry", "Fix Client.retry backoff and Client.send headers"),
        _pair("p", "Client.send", "Fix Client.retry backoff and Client.send headers"),
        _pair("p", "Client", "Client keeps its backoff", release="3.0"),
        _pair("p", "parse_duration", "parse_duration reads backoff strings", path="pkg/util.py"),
        _pair("p", "Client.retry", "retry backoff again", release="3.0"),
        _pair("q", "alone", "the only pair of its package"),
    ]
    assert pair_negatives(rows) == 5
    for r in rows[:5]:
        for neg in (r["neg_bm25"], r["neg_file"]):
            if neg is None:
                continue
            assert neg["qualname"] != r["qualname"] and neg["text"] != r["positive"]
            assert not neg["qualname"].startswith(r["qualname"] + ".")
            assert not r["qualname"].startswith(neg["qualname"] + ".")
    # the two functions one entry names are never each other's negative
    assert rows[0]["neg_bm25"]["qualname"] not in ("Client.send", "Client", "Client.retry")
    assert rows[0]["neg_bm25"]["qualname"] == "parse_duration"
    assert rows[0]["neg_file"] is None  # its file holds only the entry's own units and the class around it
    assert rows[3]["neg_file"] is None and rows[3]["neg_bm25"] is not None
    assert rows[5]["neg_bm25"] is None and rows[5]["neg_file"] is None
    kept = {"path": "x.py", "qualname": "kept", "text": "def kept(): pass"}
    mined = [dict(_pair("p", "a", "fix a"), neg_file=kept), _pair("p", "b", "fix b")]
    pair_negatives(mined)
    assert mined[0]["neg_file"] == kept and mined[0]["neg_bm25"] is None  # the miner's own negatives are kept


def test_release_note_rows_are_pinned_by_sdist_and_sha256_and_read_back(tmp_path, monkeypatch, capsys):
    """bench/embedder/reports.py: ``pin`` names each row's release by sdist file and sha256, ``pinned_rows`` gives the
    rows back as ``report_rows`` gave them; an sdist that is not there with that sha256 (and PyPI not reachable) leaves
    its rows out, said, instead of fitting on other code."""
    import io
    import json
    import tarfile

    import embedder.releases
    from embedder.reports import pin, pinned_rows, report_rows

    work = tmp_path / "work"
    (work / "sdists").mkdir(parents=True)
    for version, body in (("1.0", b"def run():\n    return 1\n"), ("1.1", b"def run():\n    return 2\n")):
        with tarfile.open(work / "sdists" / f"demo_pkg-{version}.tar.gz", "w:gz") as tf:
            info = tarfile.TarInfo(f"demo_pkg-{version}/demo/core.py")
            info.size = len(body)
            tf.addfile(info, io.BytesIO(body))
    (work / "releases").mkdir()
    (work / "releases" / "demo-pkg.jsonl").write_text("".join(json.dumps(
        {"package": "demo-pkg", "version": v, "path": "demo/core.py", "qualname": "run", "query": f"Fix run in {v}"})
        + "\n" for v in ("1.0", "1.1")))
    rows = report_rows(work, ["demo-pkg"])
    pinned = pin(rows)
    assert [(r["sdist"], len(r["sha256"])) for r in pinned] == [("demo_pkg-1.0.tar.gz", 64),
                                                                ("demo_pkg-1.1.tar.gz", 64)]
    assert not any("tree" in r or "archive" in r for r in pinned)  # no local paths in what is committed
    f = tmp_path / "rows.jsonl"
    f.write_text("".join(json.dumps(r) + "\n" for r in pinned))
    assert pinned_rows(f, work) == rows

    def offline(url):
        raise OSError("network is off")

    monkeypatch.setattr(embedder.releases, "_json", offline)
    (work / "sdists" / "demo_pkg-1.1.tar.gz").write_bytes(b"another archive")
    assert pinned_rows(f, work) == rows[:1]
    assert "demo_pkg-1.1.tar.gz" in capsys.readouterr().err


def test_the_shipped_standard_weights_name_the_rows_they_were_fitted_on():
    """The standard second stage's release-note rows are committed (bench/data/reports/), and the shipped weights
    record that file by its sha256: 326 rows of 133 releases of 70 packages, none an evaluation project."""
    import hashlib
    import json

    from embedder.release_list import evaluation_projects, normalize

    root = Path(__file__).resolve().parents[1]
    meta = json.loads((root / "src/repoctx/retrieve/rerank_weights.standard.json").read_text())["meta"]
    rel = meta["release_note_reports"]
    f = root / rel["rows"]
    assert hashlib.sha256(f.read_bytes()).hexdigest() == rel["rows_sha256"]
    rows = [json.loads(line) for line in f.read_text().splitlines()]
    assert len(rows) == rel["first_stage"]["n"] == 326 and len({r["id"] for r in rows}) == 326
    sdists = {}
    for r in rows:
        assert sdists.setdefault(r["sdist"], r["sha256"]) == r["sha256"]
        assert r["gold"] and all(":" in g and g.split(":")[0].endswith(".py") for g in r["gold"])
    assert (len(sdists), len({r["package"] for r in rows})) == (133, 70)
    assert not {normalize(r["package"]) for r in rows} & evaluation_projects()


def test_local_codes_release_pairs_are_pinned_as_its_card_says():
    """The shipped local:code model's release-note pairs (bench/data/reports/): every pair's two sdists lie in its
    package's pinned chain with the same sha256, consecutive in it; 743 pairs outside the validation packages and
    50 in them, as the model card states."""
    import json
    import re

    from embedder.packages import VALIDATION

    root = Path(__file__).resolve().parents[1]
    reports = root / "bench" / "data" / "reports"
    chains = json.loads((reports / "local_code_2026-12-02.chains.json").read_text())
    pairs = [json.loads(line) for line in (reports / "local_code_2026-12-02.pairs.jsonl").read_text().splitlines()]
    for p in pairs:
        chain = list(chains[p["package"]])
        assert chains[p["package"]][p["version"]] == {"sdist": p["old_sdist"], "sha256": p["old_sha256"]}
        assert chains[p["package"]][p["release"]] == {"sdist": p["new_sdist"], "sha256": p["new_sha256"]}
        assert chain.index(p["release"]) == chain.index(p["version"]) + 1
        assert p["path"].endswith(".py") and p["qualname"] and p["query"].strip()
    held = sum(p["package"] in VALIDATION for p in pairs)
    assert (len(pairs) - held, held) == (743, 50)
    card = (root / "src" / "repoctx" / "data" / "MINILM_CODE_CARD.md").read_text()
    assert re.search(r"743 to train on, 50 from the\s+validation packages", card)
    assert "local_code_2026-12-02.pairs.jsonl" in card


def test_train_rerank_names_a_missing_rows_file_before_any_work(tmp_path):
    """bench/train_rerank.py: a --reports-rows or --history file that is not there, or --reports beside
    --reports-rows, is a usage error (exit 2, one line), not a traceback after minutes of indexing."""
    import subprocess

    script = Path(__file__).resolve().parents[1] / "bench" / "train_rerank.py"
    for args, said in ((["--reports-rows", str(tmp_path / "none.jsonl")], "--reports-rows: no file"),
                       (["--history", str(tmp_path / "none.jsonl")], "--history: no file"),
                       (["--reports", "2", "--reports-rows", str(tmp_path / "none.jsonl")], "one or the other")):
        got = subprocess.run([sys.executable, str(script), "--role", "standard", "--no-write", *args],
                             capture_output=True, text=True)
        assert got.returncode == 2 and said in got.stderr and "Traceback" not in got.stderr, got.stderr
