"""How fast an index update mines a git checkout's history, files and messages only (issue 44), and how a log longer
than the budget is taken back, update by update.

Two kinds of history:

* the three real ones in ``../shared/history`` (click, attrs, marshmallow: 1,800-3,400 commits each), cloned whole;
* a synthetic one of ``--commits`` commits (30,000 by default, what the issue names) made with ``git fast-import``:
  400 Python files under ``pkg/``, each commit changing 1-3 of them with a message that names them, and one commit in
  ten changing only a docs file (a log lists it; the mining leaves it out).

For each: ``mine(symbols=False)`` of the whole log (median of ``--repeat`` runs: commits, seconds, commits a second),
then, as the product runs it, ``update_history(time_budget=B)`` from nothing, then again with the same HEAD until the
history is complete (the backfill), with the commits each update added. The last row checks that the backfilled
history lists exactly the commits of one unbounded mine, in its order. A second table gives the cost of the vote a
file-level search reads from each history: built by a process's first search, loaded from the machine's cache after.

    python bench/history_mining.py                       # table to bench/results/history_mining.md
    python bench/history_mining.py --commits 60000 --budgets 3,1
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from repoctx.config import Settings
from repoctx.history import History, mine, update_history

ROOT = Path(__file__).resolve().parent.parent


def _git_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env.update(
        GIT_CONFIG_NOSYSTEM="1",
        GIT_AUTHOR_NAME="b",
        GIT_AUTHOR_EMAIL="b@b",
        GIT_COMMITTER_NAME="b",
        GIT_COMMITTER_EMAIL="b@b",
    )
    return env


def synthetic(where: Path, n: int, seed: int = 1) -> Path:
    """A repository of ``n`` linear commits made by ``git fast-import`` (deterministic for a seed)."""
    repo = where / f"synthetic-{n}"
    subprocess.run(["git", "init", "-q", "-b", "main", str(repo)], check=True, env=_git_env())
    rnd = random.Random(seed)
    files = [f"pkg/mod{i}.py" for i in range(400)]
    text = {f: f"def f{i}():\n    return {i}\n" for i, f in enumerate(files)}
    docs = "notes\n"
    out: list[bytes] = []
    for c in range(n):
        if c and c % 10 == 0:
            docs += f"note {c}\n"
            changed, msg = {"docs/notes.md": docs}, f"Docs: note {c}\n"
        else:
            names = files if c == 0 else rnd.sample(files, rnd.choice((1, 1, 2, 3)))
            for f in names:
                text[f] += f"# change {c}\n"
            changed = {f: text[f] for f in names}
            msg = f"Fix the {rnd.choice(('empty', 'none', 'unicode', 'large'))} case in {' '.join(names[:3])} (#{c})\n"
        head = f"commit refs/heads/main\ncommitter b <b@b> {1_500_000_000 + c * 60} +0000\n"
        out.append(f"{head}data {len(msg.encode())}\n{msg}".encode())  # (a commit follows the branch's last)
        for f, body in changed.items():
            data = body.encode()
            out.append(f"M 100644 inline {f}\ndata {len(data)}\n".encode() + data + b"\n")
    subprocess.run(["git", "-C", str(repo), "fast-import", "--quiet"], input=b"".join(out), check=True, env=_git_env())
    subprocess.run(["git", "-C", str(repo), "checkout", "-q", "main"], check=True, env=_git_env())
    return repo


def clone(bundle: Path, where: Path) -> Path:
    repo = where / bundle.stem
    subprocess.run(["git", "clone", "-q", str(bundle), str(repo)], check=True, env=_git_env(), capture_output=True)
    return repo


def measure(repo: Path, budgets: list[float], repeat: int, scratch: Path) -> list[dict]:
    times, whole = [], []
    for _ in range(repeat):
        r = mine(repo, symbols=False)
        times.append(r.seconds)
        whole = [c.sha for c in r.commits]
    out = []
    for budget in budgets:
        path = scratch / f"{repo.name}.jsonl"
        path.unlink(missing_ok=True)
        got = update_history(repo, path, time_budget=budget, symbols=False, load=False)
        steps = [(got.mined, got.seconds)]
        while not got.history.complete and len(steps) < 100:
            got = update_history(repo, path, time_budget=budget, symbols=False, load=False)
            steps.append((got.backfilled, got.seconds))
        hist = History.load(path)
        out.append(
            {
                "repo": repo.name,
                "commits": len(whole),
                "seconds": statistics.median(times),
                "rate": len(whole) / statistics.median(times),
                "budget": budget,
                "steps": steps,
                "same": hist is not None and [c.sha for c in hist.commits] == whole and hist.complete,
            }
        )
    return out


def vote(name: str, path: Path, repeat: int) -> dict:
    """The similar commits' vote a file-level search reads from the stored history (``index._similar_commits``): built
    (parsed, tokenized, indexed, written to the cache) by a process's first search, loaded from the cache after, and
    one query's ranking. Medians of ``repeat`` runs; REPOCTX_CACHE points at the scratch folder."""
    import zlib

    from repoctx.index import _similar_commits

    body = zlib.compress(path.read_bytes(), 1)
    cache = Path(os.environ["REPOCTX_CACHE"]) / "history"
    built, loaded, ranked = [], [], []
    similar = None
    for _ in range(repeat):
        for f in cache.glob("votes-*.npz"):
            f.unlink()
        t = time.perf_counter()
        similar = _similar_commits(body, name)
        built.append(time.perf_counter() - t)
        t = time.perf_counter()
        similar = _similar_commits(body, name)
        loaded.append(time.perf_counter() - t)
        t = time.perf_counter()
        for q in QUERIES:
            similar.rank(q)
        ranked.append((time.perf_counter() - t) / len(QUERIES))
    size = sum(f.stat().st_size for f in cache.glob("votes-*.npz"))
    return {
        "repo": name,
        "voters": len(similar.changed) if similar is not None else 0,
        "body": len(body),
        "built": statistics.median(built),
        "loaded": statistics.median(loaded),
        "rank": statistics.median(ranked),
        "size": size,
    }


QUERIES = (
    "Fix the fish shell completion when an option takes a choice",
    "validation error messages are not translated for nested fields",
    "handle the empty case",
)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bundles", type=Path, default=ROOT.parent / "shared" / "history")
    ap.add_argument("--commits", type=int, default=30_000)
    ap.add_argument(
        "--budgets",
        default=f"{Settings().history_budget:g},0.5",
        help="comma-separated update budgets (s) to take each history with (default: the product's, 0.5)",
    )
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "history_mining.md")
    args = ap.parse_args()
    budgets = [float(b) for b in args.budgets.split(",")]
    started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    load0 = os.getloadavg()[0]
    rows = []
    with tempfile.TemporaryDirectory(prefix="repoctx-mining-") as tmp:
        where = Path(tmp)
        repos = [clone(b, where) for b in sorted(args.bundles.glob("*.bundle"))]
        t = time.perf_counter()
        repos.append(synthetic(where, args.commits))
        print(f"synthetic log of {args.commits:,} commits made in {time.perf_counter() - t:.1f} s", file=sys.stderr)
        os.environ["REPOCTX_CACHE"] = str(where / "cache")
        votes = []
        for repo in repos:
            rows += measure(repo, budgets, args.repeat, where)
            print(rows[-len(budgets) :], file=sys.stderr)
            votes.append(vote(repo.name, where / f"{repo.name}.jsonl", args.repeat))
            print(votes[-1], file=sys.stderr)
    head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    lines = [
        "# Mining a checkout's history, files and messages only (issue 44)",
        "",
        f"Run {started} by `python bench/history_mining.py --commits {args.commits} --budgets {args.budgets}` at "
        f"repoctx {head.stdout.strip() or '?'}; {os.cpu_count()} CPUs, load {load0:.2f} at the start, "
        f"{os.getloadavg()[0]:.2f} at the end. `mine(symbols=False)`: median of {args.repeat} runs of the whole log. "
        "Updates: `update_history(time_budget=B)` from nothing, then with the same HEAD until complete (each later one "
        "goes back for what the budget left out); the seconds of an update include writing the history file.",
        "",
        "| history | code commits | whole log (s) | commits/s | budget B (s) | updates to complete: commits each "
        "(s each) | same commits as one mine |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        steps = ", ".join(f"{m:,} ({s:.2f})" for m, s in r["steps"])
        lines.append(
            f"| {r['repo']} | {r['commits']:,} | {r['seconds']:.2f} | {r['rate']:,.0f} | {r['budget']:g} | "
            f"{len(r['steps'])}: {steps} | "
            f"{'yes' if r['same'] else 'NO'} |"
        )
    lines += [
        "",
        "The vote a file-level search reads (`index._similar_commits` over the stored history: parsed, its messages "
        "tokenized and indexed, kept in `$REPOCTX_CACHE/history/votes-*.npz`, by a process's first file-level search; "
        "loaded from there by the next processes; medians of the same runs; a query: the mean of three):",
        "",
        "| history | voting commits | stored history (MiB, zlib) | first search builds it (s) "
        "| later processes load it (ms) | its file (MiB) | a query's vote (ms) |",
        "|---|---|---|---|---|---|---|",
    ]
    for v in votes:
        lines.append(
            f"| {v['repo']} | {v['voters']:,} | {v['body'] / 2**20:.2f} | {v['built']:.2f} | "
            f"{1000 * v['loaded']:.0f} | {v['size'] / 2**20:.1f} | {1000 * v['rank']:.1f} |"
        )
    args.out.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0 if all(r["same"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
