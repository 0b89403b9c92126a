"""How much of a real repository redaction touches, and what it costs: Django 4.2 (the PyPI wheel, unpacked).

    python bench/redaction_share.py              # markdown table
    python bench/redaction_share.py --examples 40  # plus redacted lines (to judge false positives)
    python bench/redaction_share.py --write      # also bench/results/redaction_django.md

"before" is the hand-written redact() walk.py had until the detect-secrets rewrite (its regexes are
copied below); "after" is repoctx.ingest.secrets (detect-secrets' plugins + a few extras). Both run
on exactly the texts the indexer would redact: files that walk() yields, decoded and newline-normalised
by load_text(redact_secrets=False), minus binary and minified ones. A capsule is "changed" when its
text differs between parsing the original file and parsing the redacted file (same capsule id).
Redaction times are wall-clock per call (perf_counter), best of --repeat runs over all files; the
one-off import of detect-secrets is reported on its own.
"""
from __future__ import annotations

import argparse
import re
import statistics
import subprocess
import sys
import tempfile
import time
import zipfile
from collections import Counter
from pathlib import Path

from repoctx.capsules.fallback import parse_any
from repoctx.config import Settings
from repoctx.ingest.walk import load_text, walk

RESULTS = Path(__file__).parent / "results" / "redaction_django.md"

# ----------------------------------------------------------------------------- before (copied verbatim)

_SECRET_PATTERNS = [  # one scan for all token shapes: cloud keys, GitHub/Slack/OpenAI/Google tokens, JWTs
    re.compile(r"-----BEGIN [A-Z ]*PRIVATE KEY-----.*?-----END [A-Z ]*PRIVATE KEY-----", re.S),
    re.compile(r"\b(?:(?:AKIA|ASIA)[0-9A-Z]{16}|gh[pousr]_[A-Za-z0-9]{36,}|github_pat_[A-Za-z0-9_]{40,}"
               r"|xox[abprs]-[A-Za-z0-9-]{10,}|sk-[A-Za-z0-9_-]{20,}|AIza[0-9A-Za-z_-]{35}"
               r"|eyJ[A-Za-z0-9_-]{10,}\.eyJ[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_-]{10,})\b"),
]
_SECRET_WORDS = ("password", "passwd", "secret", "key", "token")
_ASSIGNED_SECRET = re.compile(
    r"""(?i)((?:password|passwd|secret|api[_-]?key|access[_-]?key|auth[_-]?token|token|private[_-]?key)"""
    r"""[A-Za-z0-9_]*["']?\s*[:=]\s*["'])([^"'\s]{8,})(["'])"""
)
_BEFORE_KINDS = ["private key block", "token shape", "assigned secret"]


def redact_before(text: str, kinds: Counter | None = None) -> tuple[str, int]:
    count = 0

    def keep_lines(kind: str):
        def sub(m: re.Match) -> str:
            nonlocal count
            count += 1
            if kinds is not None:
                kinds[kind] += 1
            return "[REDACTED]" + "\n" * m.group(0).count("\n")
        return sub

    for pat, kind in zip(_SECRET_PATTERNS, _BEFORE_KINDS):
        text = pat.sub(keep_lines(kind), text)

    def assigned(m: re.Match) -> str:
        nonlocal count
        if m.group(2).startswith("[REDACTED"):
            return m.group(0)
        count += 1
        if kinds is not None:
            kinds["assigned secret"] += 1
        return m.group(1) + "[REDACTED]" + m.group(3)

    low = text.lower()
    if any(word in low for word in _SECRET_WORDS):
        text = _ASSIGNED_SECRET.sub(assigned, text)
    return text, count


# ----------------------------------------------------------------------------- corpus


def django_tree() -> Path:
    """Django 4.2 unpacked: repoctx's corpus cache if it works, else pip download + unzip in /tmp."""
    try:
        from repoctx.corpus import materialize

        return materialize({"corpus": {"pypi": "Django", "version": "4.2", "path_prefix": ""}, "instance_id": "bench"})
    except Exception as e:  # noqa: BLE001 - fall back to a plain download
        print(f"(corpus cache unavailable: {type(e).__name__}: {e}; using pip download)", file=sys.stderr)
    tree = Path(tempfile.gettempdir()) / "repoctx-bench-django-4.2"
    if not (tree / "django").is_dir():
        wheels = Path(tempfile.gettempdir()) / "djwheel"
        if not list(wheels.glob("Django-4.2-*.whl")) and not list(wheels.glob("django-4.2-*.whl")):
            subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary", ":all:",
                            "-d", str(wheels), "django==4.2"], check=True)
        whl = next(iter(list(wheels.glob("Django-4.2-*.whl")) + list(wheels.glob("django-4.2-*.whl"))))
        tmp = tree.with_name(tree.name + ".part")
        with zipfile.ZipFile(whl) as zf:
            zf.extractall(tmp)
        tmp.rename(tree)
    return tree


def texts(root: Path) -> list[tuple[str, str, str]]:
    out = []
    for sf in walk(root, Settings()):
        loaded = load_text(sf.abspath.read_bytes(), redact_secrets=False)
        if loaded is None or loaded.minified:
            continue
        out.append((sf.path, sf.language, loaded.text))
    return out


# ----------------------------------------------------------------------------- measure


def timed(fn, files: list[tuple[str, str, str]], repeat: int) -> tuple[float, list[float]]:
    best_total, best_each = float("inf"), []
    for _ in range(repeat):
        each = []
        for _, _, text in files:
            t0 = time.perf_counter()
            fn(text)
            each.append(time.perf_counter() - t0)
        if sum(each) < best_total:
            best_total, best_each = sum(each), each
    return best_total, best_each


def changed_capsules(path: str, language: str, before: str, after: str) -> tuple[int, int]:
    caps = parse_any(path, before, language).capsules
    if before == after:
        return len(caps), 0
    new = {c.id: c.text for c in parse_any(path, after, language).capsules}
    return len(caps), sum(1 for c in caps if new.get(c.id) != c.text)


def fixture_recall(redact_after) -> list[str]:
    """Recall on tests/fixtures/secrets (the forms of tests/test_secrets.py): how many secret values
    each version leaves readable. Django holds (almost) no secrets, so its share measures only the
    false-positive side."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from tests.test_secrets import FIXTURE, FORMS

    from repoctx.ingest.secrets import redact_report

    caught = {"before": 0, "after": 0}
    missed: dict[str, list[str]] = {"before": [], "after": []}
    for rel, form, marker in FORMS:
        text = load_text((FIXTURE / rel).read_bytes(), redact_secrets=False).text
        for name, fn in (("before", redact_before), ("after", redact_after)):
            if marker in fn(text)[0]:
                missed[name].append(form)
            else:
                caught[name] += 1
    kinds: Counter = Counter()
    for rel in sorted({rel for rel, _, _ in FORMS}):
        kinds.update(f.kind for f in redact_report(load_text((FIXTURE / rel).read_bytes(), redact_secrets=False).text)[1])
    out = ["", f"Recall on the {len(FORMS)} secret forms of tests/fixtures/secrets (values no longer readable):", "",
           "| | before | after |", "|---|---:|---:|",
           f"| forms redacted | {caught['before']}/{len(FORMS)} | {caught['after']}/{len(FORMS)} |", ""]
    for name in ("before", "after"):
        if missed[name]:
            out.append(f"{name} leaves readable: " + "; ".join(missed[name]) + ".")
    out += ["", "After, redactions on the fixture by detector type:", "", "| detector | redactions |", "|---|---:|"]
    out += [f"| {kind} | {n} |" for kind, n in kinds.most_common()]
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--examples", type=int, default=20, help="list up to this many redacted lines of each version")
    ap.add_argument("--write", action="store_true", help="also write bench/results/redaction_django.md")
    args = ap.parse_args()

    root = django_tree()
    files = texts(root)

    t0 = time.perf_counter()
    from repoctx.ingest import secrets

    secrets.find_secrets("password = 'x1'")  # builds the engine: imports detect-secrets once
    import_s = time.perf_counter() - t0

    rows = {}
    examples: dict[str, list[str]] = {"before": [], "after": []}
    for name, fn in (("before", redact_before), ("after", secrets.redact)):
        total, each = timed(fn, files, args.repeat)
        kinds: Counter = Counter()
        n_caps = n_changed = n_files = n_red = 0
        for path, language, text in files:
            if name == "before":
                new, n = redact_before(text, kinds)
            else:
                new, found = secrets.redact_report(text)
                n = len(found)
                kinds.update(f.kind for f in found)
            caps, changed = changed_capsules(path, language, text, new)
            n_caps += caps
            n_changed += changed
            n_red += n
            n_files += bool(n)
            if n and len(examples[name]) < args.examples:
                for a, b in zip(text.split("\n"), new.split("\n")):
                    if a != b and len(examples[name]) < args.examples:
                        examples[name].append(f"{path}: {a.strip()[:150]}")
        rows[name] = dict(total=total, each=each, kinds=kinds, caps=n_caps, changed=n_changed, files=n_files, red=n_red)

    b, a = rows["before"], rows["after"]
    in_wheel = sum(1 for p in root.rglob("*") if p.is_file())
    lines = [
        f"# Redaction on Django 4.2 ({len(files)} files indexed as text, {a['caps']} capsules)",
        "",
        f"The wheel unpacks to {in_wheel} files; walk() yields the {len(files)} repoctx indexes (no .po/.mo, "
        "images, minified or binary files).",
        "",
        f"`python bench/redaction_share.py` — {time.strftime('%Y-%m-%d')}, Python {sys.version.split()[0]}, "
        f"best of {args.repeat} (wall clock on a shared machine: compare within a run). before = the hand-written "
        "regexes walk.py had; after = detect-secrets plugins (repoctx.ingest.secrets).",
        "",
        "| | before (hand-written) | after (detect-secrets) |",
        "|---|---:|---:|",
        f"| files | {len(files)} | {len(files)} |",
        f"| capsules | {b['caps']} | {a['caps']} |",
        f"| files with a redaction | {b['files']} | {a['files']} |",
        f"| redactions | {b['red']} | {a['red']} |",
        f"| capsules changed by redaction | {b['changed']} ({100 * b['changed'] / b['caps']:.2f}%) "
        f"| {a['changed']} ({100 * a['changed'] / a['caps']:.2f}%) |",
        f"| redaction time, total | {b['total'] * 1000:.0f} ms | {a['total'] * 1000:.0f} ms |",
        f"| per file, mean | {1e6 * b['total'] / len(files):.0f} µs | {1e6 * a['total'] / len(files):.0f} µs |",
        f"| per file, median | {1e6 * statistics.median(b['each']):.0f} µs | {1e6 * statistics.median(a['each']):.0f} µs |",
        f"| per file, max | {1000 * max(b['each']):.1f} ms | {1000 * max(a['each']):.1f} ms |",
        f"| one-off: import detect-secrets + build | – | {import_s * 1000:.0f} ms |",
        "",
        "Redactions by detector type:",
        "",
        "| version | detector | redactions |",
        "|---|---|---:|",
    ]
    for name in ("before", "after"):
        for kind, n in rows[name]["kinds"].most_common() or [("(none)", 0)]:
            lines.append(f"| {name} | {kind} | {n} |")
    for name in ("before", "after"):
        lines += ["", f"Django lines {name} redacted (first {args.examples}):", ""]
        lines += [f"    {e}" for e in examples[name]] or ["    (none)"]
    lines += fixture_recall(secrets.redact)
    out = "\n".join(lines) + "\n"
    print(out)
    if args.write:
        RESULTS.parent.mkdir(parents=True, exist_ok=True)
        RESULTS.write_text(out)


if __name__ == "__main__":
    main()
