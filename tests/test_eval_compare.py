"""Two eval runs compared by halves (repoctx.evaluate.compare, bench/eval_halves.py)."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from repoctx.evaluate.compare import compare, markdown, within

ROOT = Path(__file__).resolve().parent.parent


def row(iid: str, file_rank: int | None, fn_rank: int | None = None, second_file: int | None = None) -> dict:
    files = {"a.py": file_rank} | ({"b.py": second_file} if second_file is not None else {})
    ranks = [r for r in files.values() if r]
    return {
        "instance_id": iid,
        "file_rank": min(ranks) if ranks else None,
        "function_rank": fn_rank,
        "gold_file_ranks": files,
        "gold_function_ranks": {"a.py:f": fn_rank} if fn_rank != -1 else {},
    }


def test_every_gold_must_be_within_k():
    r = row("x", 1, 3, second_file=4)
    assert within(r, "file", 3) is False and within(r, "file", 5) is True
    assert within(row("y", 1, -1), "function", 10) is None  # no gold function: not counted


def test_rows_are_paired_and_split_into_odd_and_even_halves():
    order = [f"r{i}" for i in range(1, 7)]  # r1, r3, r5: the odd half
    before = {
        "rows": [
            row("r1", 2, 12),
            row("r2", 1, 1),
            row("r3", 1, 4),
            row("r4", 3, None),
            row("r5", 1, 1),
            row("r6", 1, 2),
        ]
    }
    after = {
        "rows": [
            row("r1", 1, 8),
            row("r2", 1, 1),
            row("r3", 1, 4),
            row("r4", 1, 9),
            row("r5", 2, 1),
            row("r6", 1, 2),
            row("r9", 1, 1),
        ]
    }
    got = compare(before, after, order)
    assert got["rows"] == 6 and got["only_after"] == ["r9"] and got["only_before"] == []
    odd, even = got["parts"]["odd"], got["parts"]["even"]
    assert odd["rows"] == 3 and even["rows"] == 3
    # odd: r1 gained at file Acc@1, r5 lost it; even: r4 gained
    assert odd["file"]["acc@1"] == {"before": 66.7, "after": 66.7, "gained": 1, "lost": 1, "p": 1.0}
    assert even["file"]["acc@1"]["gained"] == 1 and even["file"]["acc@1"]["after"] == 100.0
    assert odd["function"]["acc@10"]["gained"] == 1 and even["function"]["acc@10"]["gained"] == 1
    assert got["parts"]["all"]["file"]["mrr"] == {
        "before": round(100 * (0.5 + 1 + 1 + 1 / 3 + 1 + 1) / 6, 1),
        "after": round(100 * (1 + 1 + 1 + 1 + 0.5 + 1) / 6, 1),
    }
    # file Acc@1 did not rise in the odd half: the rule does not hold
    assert got["rule"]["held"] is False
    assert "file Acc@1, odd half: 66.7 -> 66.7 (not raised)" in got["rule"]["lines"]
    table = markdown(got, "main", "candidate")
    assert "| odd half | 3 |" in table and "**not held**" in table and "1 after" in table


def test_the_rule_holds_only_when_both_lines_rise_on_both_halves():
    order = ["r1", "r2", "r3", "r4"]
    before = {"rows": [row("r1", 2, 12), row("r2", 2, 12), row("r3", 1, 1), row("r4", 1, 1)]}
    after = {"rows": [row("r1", 1, 3), row("r2", 1, 3), row("r3", 1, 1), row("r4", 1, 1)]}
    assert compare(before, after, order)["rule"]["held"] is True
    assert compare(after, before, order)["rule"]["held"] is False
    with pytest.raises(ValueError, match="not in the dataset"):
        compare(before, after, ["r1", "r2"])


def test_the_bench_script_reads_eval_json(tmp_path):
    dataset = tmp_path / "dev.jsonl"
    dataset.write_text("".join(json.dumps({"instance_id": f"r{i}"}) + "\n" for i in range(1, 5)))
    runs = {}
    for name, ranks in (("a", (2, 2, 1, 1)), ("b", (1, 1, 1, 1))):
        runs[name] = tmp_path / f"{name}.json"
        result = {"rows": [row(f"r{i}", r, 12 if r == 2 else 3) for i, r in enumerate(ranks, 1)]}
        runs[name].write_text(json.dumps({"wheel": {"hybrid+graph": result}, "sdist": {"hybrid+graph": result}}))
    out = subprocess.run(
        [
            sys.executable,
            str(ROOT / "bench" / "eval_halves.py"),
            str(runs["a"]),
            str(runs["b"]),
            "--tree",
            "wheel",
            "--dataset",
            str(dataset),
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "**held**" in out and "| even half | 2 |" in out
    bad = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "eval_halves.py"), str(runs["a"]), str(runs["b"]), "--config", "nope"],
        capture_output=True,
        text=True,
    )
    assert bad.returncode == 2 and "nope" in bad.stderr and "Traceback" not in bad.stderr
    # two runs saved in one results file, named
    both = tmp_path / "both.json"
    both.write_text(json.dumps({"what": "two runs", "before": json.loads(runs["a"].read_text())["wheel"]["hybrid+graph"],
                                "after": json.loads(runs["b"].read_text())["wheel"]["hybrid+graph"]}))
    named = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "eval_halves.py"), f"{both}#before", f"{both}#after", "--dataset", str(dataset)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert named.split("\n", 1)[1] == out.split("\n", 1)[1]  # the same table as from the two files
    missing = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "eval_halves.py"), f"{both}#before", f"{both}#nope"],
        capture_output=True,
        text=True,
    )
    assert missing.returncode == 2 and "'nope'" in missing.stderr and "Traceback" not in missing.stderr


def test_runs_are_scored_again_against_the_datasets_mended_gold(tmp_path):
    """bench/eval_halves.py --regold: function level against the dataset's gold_functions, which may only have lost
    keys since the runs (a class the history named as function gold, never in a function ranking, made its row a
    miss at every k); a row left with none leaves function level, a key the run never scored is refused."""
    sys.path.insert(0, str(ROOT / "bench"))
    from eval_halves import regold

    run = {"rows": [{**row("r1", 1, 3), "gold_function_ranks": {"a.py:f": 3, "a.py:C": None}},
                    {**row("r2", 1, None), "gold_function_ranks": {"a.py:D": None}},
                    row("r3", 1, 12)]}
    assert within(run["rows"][0], "function", 10) is False  # the class can never be within k
    got = regold(run, {"r1": ["a.py:f"], "r2": []})
    assert within(got["rows"][0], "function", 10) is True and got["rows"][0]["function_rank"] == 3
    assert within(got["rows"][1], "function", 10) is None  # no function gold left: not counted
    assert got["rows"][2] == run["rows"][2]  # a row the gold does not name stays as it was
    with pytest.raises(ValueError, match="a.py:g"):
        regold(run, {"r1": ["a.py:g"]})
    dataset = tmp_path / "rows.jsonl"
    dataset.write_text("".join(json.dumps({"instance_id": i, "gold_functions": g}) + "\n"
                               for i, g in (("r1", ["a.py:f"]), ("r2", []), ("r3", ["a.py:f"]))))
    runs = tmp_path / "runs.json"
    runs.write_text(json.dumps({"a": run, "b": run}))
    out = subprocess.run([sys.executable, str(ROOT / "bench" / "eval_halves.py"), f"{runs}#a", f"{runs}#b",
                          "--dataset", str(dataset), "--regold", "--json"], capture_output=True, text=True, check=True)
    fn = json.loads(out.stdout)["parts"]["all"]["function"]
    assert fn["rows"] == 2 and fn["acc@10"]["before"] == 50.0  # r1 now within 10, r3 (rank 12) not; r2 left out


def test_the_goal_script_reads_each_variant_against_the_goal_and_the_default(tmp_path):
    def result(ranks: list[tuple[int, int]]) -> dict:
        rows = [row(f"r{i}", f, fn) for i, (f, fn) in enumerate(ranks, 1)]
        n = len(rows)
        pct = lambda hits: round(100 * hits / n, 1)  # noqa: E731
        return {
            "n": n,
            "file": {"acc@1": pct(sum(f == 1 for f, _ in ranks)), "acc@5": pct(sum(f <= 5 for f, _ in ranks))},
            "function": {"acc@10": pct(sum(fn <= 10 for _, fn in ranks))},
            "rows": rows,
        }

    runs = tmp_path / "runs"
    runs.mkdir()
    # the default misses the goal (file Acc@1 50); the windows reach it on every line
    default = result([(1, 3), (2, 12), (1, 1), (3, 4)])
    windows = result([(1, 3), (1, 2), (1, 1), (1, 4)])
    for name, res in (("default", default), ("windows", windows)):
        (runs / f"{name}-both.json").write_text(json.dumps({"wheel": {"hybrid+graph": res}, "sdist": {"hybrid+graph": res}}))
    script = [sys.executable, str(ROOT / "bench" / "goal.py"), str(tmp_path / "rows.jsonl"), "--tree", "both"]
    out = subprocess.run(
        [*script, "--variants", "default,windows", "--out", str(runs), "--reuse"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "| wheel | default | 4 | 50.0 | 100.0 | 75.0 | not met |  |" in out
    assert "| sdist | windows | 4 | 100.0 | 100.0 | 100.0 | met | 50.0 → 100.0 (+2 −0" in out
    assert "75.0 → 100.0 (+1 −0" in out
    # an option run alone reads the saved default to compare against
    alone = subprocess.run(
        [*script, "--variants", "windows", "--out", str(runs), "--reuse"], capture_output=True, text=True, check=True
    ).stdout
    assert "| wheel | default | 4 |" in alone and "| wheel | windows | 4 | 100.0 | 100.0 | 100.0 | met | 50.0 → 100.0" in alone
    bad = subprocess.run([*script, "--variants", "default,nope", "--out", str(runs)], capture_output=True, text=True)
    assert bad.returncode == 2 and "nope" in bad.stderr and "Traceback" not in bad.stderr
