"""Wall time of one `repoctx search` (a fresh process, as a user types it) against `git grep` for the
same word, on an indexed Django 4.2 in a git repository. Median of 10 runs each, in one run.

    python bench/cli_latency.py                 # hybrid (the default embedder) and lexical-only
    python bench/cli_latency.py --runs 20

The Django tree (the PyPI wheel, unpacked; see repoctx.evaluate.corpus) is copied once into
``$REPOCTX_CACHE/bench/django-4.2-git`` and committed to git there; its index lives beside it and is
reused between runs (the first run embeds every unit: minutes). Goal: ≤ 1.0 s on an idle 2-core machine.
"""
from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

from repoctx.config import default_cache_dir
from repoctx.evaluate.corpus import fetch_wheel, materialize

QUERIES = [("queryset", "how are querysets filtered lazily"), ("csrf", "where is the csrf token checked"),
           ("migrate", "how are migrations applied to the database"), ("paginator", "how does the paginator count pages"),
           ("cookie", "how are signed cookies verified")]
REPOCTX = str(Path(sys.executable).with_name("repoctx"))


def _repo() -> Path:
    dst = default_cache_dir() / "bench" / "django-4.2-git"
    if not (dst / ".git").exists():
        fetch_wheel("Django", "4.2")
        src = materialize({"corpus": {"pypi": "Django", "version": "4.2", "path_prefix": ""}, "instance_id": "bench"})
        shutil.rmtree(dst, ignore_errors=True)
        shutil.copytree(src, dst)
        env = {**os.environ, "GIT_AUTHOR_NAME": "bench", "GIT_AUTHOR_EMAIL": "b@x", "GIT_COMMITTER_NAME": "bench",
               "GIT_COMMITTER_EMAIL": "b@x"}
        for cmd in (["git", "init", "-q"], ["git", "add", "-A"], ["git", "commit", "-qm", "django 4.2"]):
            subprocess.run(cmd, cwd=dst, check=True, env=env)
        (dst / ".git" / "info" / "exclude").write_text(".repoctx/\n")
    return dst


def _time(cmd: list[str], runs: int, cwd: Path, env: dict) -> tuple[float, float]:
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        res = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True)
        times.append(time.perf_counter() - t0)
        if res.returncode not in (0, 1):  # git grep: 1 = no match
            raise SystemExit(f"{' '.join(cmd)} failed: {res.stderr.strip()[:300]}")
    return statistics.median(times), min(times)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runs", type=int, default=10)
    args = ap.parse_args()
    repo = _repo()
    env = {k: v for k, v in os.environ.items() if k not in ("REPOCTX_INDEX_DIR", "REPOCTX_DATABASE_URL")}
    print("indexing (incremental; the first run embeds every unit) ...", file=sys.stderr, flush=True)
    subprocess.run([REPOCTX, "index", str(repo)], env=env, check=True, capture_output=True)
    rows = []
    one, five, _ = os.getloadavg()
    imp = _time([sys.executable, "-c", "import repoctx.cli"], args.runs, repo, env)
    rows.append(("python + import repoctx.cli", imp))
    for word, question in QUERIES[:2]:
        rows.append((f"git grep -n {word}", _time(["git", "grep", "-n", word], args.runs, repo, env)))
        rows.append((f"repoctx search {word} (hybrid)", _time([REPOCTX, "search", word, "--repo", "."], args.runs, repo, env)))
        rows.append((f"repoctx search \"{question}\" (hybrid)",
                     _time([REPOCTX, "search", question, "--repo", "."], args.runs, repo, env)))
        rows.append((f"repoctx search {word} (lexical only)",
                     _time([REPOCTX, "search", word, "--repo", "."], args.runs, repo, {**env, "REPOCTX_EMBEDDER": "none"})))
    print(f"Django 4.2 in git, {os.cpu_count()} CPUs, load avg 1m/5m {one:.2f}/{five:.2f} → "
          f"{os.getloadavg()[0]:.2f}; median (min) of {args.runs} runs, wall seconds\n")
    print("| command | median s | min s |\n|---|---|---|")
    for label, (med, low) in rows:
        print(f"| {label} | {med:.3f} | {low:.3f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
