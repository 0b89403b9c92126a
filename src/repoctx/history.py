"""A repository's own history as supervision: each commit's message → the functions, methods and classes it
changed, named as they were at its parent (``path:qualname``, the capsule parser's qualnames, so the names match
what the index stores).

How: one ``git log --no-merges -p -U0`` stream gives every commit's message and the old-side line ranges of its
hunks; the parent's version of each modified file (its blob, from the diff's ``index`` line) is read through one
``git cat-file --batch`` process and parsed with ``repoctx.capsules``; each changed line goes to the innermost
capsule that holds it (a def nested in a function counts as that function, as gold locations count it). Local
git only, never the network.

Bounded and incremental: ``mine`` reads newest first and stops after ``max_commits`` or ``time_budget`` seconds;
``update_history`` keeps the mined commits in a JSON-lines file with the head they reach and mines only the
commits after it. The diff → line-range parsing (``parse_diff``) and the range → capsule mapping
(``changed_symbols``) are pure.
"""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, overload

from repoctx.capsules.fallback import parse_any
from repoctx.capsules.parse import parse_source, supported
from repoctx.ingest.languages import GRAMMAR_EXT, is_test_path, language_of
from repoctx.tokens import code_tokens
from repoctx.types import DEFS, Capsule

HISTORY_VERSION = 2  # 2: renames recorded
_MARK = "\x1e\x1frepoctx-commit "  # starts each commit's header in the log stream (no message holds it)
_END = "\x1e\x1frepoctx-end"
_HUNK = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+\d+(?:,\d+)? @@")
_INDEX = re.compile(r"^index ([0-9a-f]+)\.\.([0-9a-f]+)")
_EMPTY_BLOB = re.compile(r"^0+$")
# a commit touching more files than this is a sweep (a reformat, a rename of a package, a licence header): its
# message says nothing about each function, and parsing every file would cost most of the budget
MAX_FILES = 40
_TRAILER = re.compile(
    r"^[A-Za-z][A-Za-z-]*-by:|^(?:Change-Id|Reviewed-on|Closes|Refs|See|Fixes):?\s*(?:#|https?:|$)", re.IGNORECASE
)
# (owner/repo)#12, gh-12, a URL. Possessive runs and no IGNORECASE: the same matches as the plain pattern, in under
# half its time over 39,000 messages (a run of [\w.-] cannot hold the "/" or "#" after it, so nothing backtracks)
_ISSUE_REF = re.compile(r"(?:\b[\w.-]++/[\w.-]++)?#\d+|\b[gG][hH]-\d+\b|[hH][tT][tT][pP][sS]?://\S+")


@dataclass(frozen=True)
class FileDiff:
    """One file a commit modified: its path and blob at the parent, and the parent's lines the commit changed as
    ``(start, count, indent)`` hunks. ``count == 0``: lines were inserted after line ``start``, the first of them
    that is not blank indented by ``indent`` columns (-1: all blank), which tells whose body they extend.
    ``new_path``: the path after the commit, when it renamed the file (a pure rename has no hunks)."""

    old_path: str
    old_blob: str
    hunks: tuple[tuple[int, int, int], ...]
    new_path: str = ""


@dataclass
class MinedCommit:
    sha: str
    parents: list[str]
    time: int  # committer time, unix seconds
    message: str
    symbols: list[str] = field(default_factory=list)  # "path:qualname" at the parent, in file order
    files: list[str] = field(default_factory=list)  # code files modified (paths at the parent)
    sweep: bool = False  # more than MAX_FILES files: files listed, symbols not mapped
    renames: list[tuple[str, str]] = field(default_factory=list)  # (path at the parent, path after)

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> MinedCommit:
        return cls(
            d["sha"],
            list(d.get("parents") or []),
            int(d.get("time") or 0),
            d.get("message") or "",
            list(d.get("symbols") or []),
            list(d.get("files") or []),
            bool(d.get("sweep")),
            [(a, b) for a, b in d.get("renames") or []],
        )


@dataclass
class MineReport:
    commits: list[MinedCommit]  # newest first
    head: str | None  # the commit the mining started from (what the next incremental run starts after)
    seconds: float = 0.0
    complete: bool = True  # False: a bound (max_commits, time_budget) stopped it before the range's end
    files_parsed: int = 0
    read: int = 0  # the log's entries taken (code or not): a later ``mine(skip=...)`` goes on after them

    @property
    def rate(self) -> float:
        return len(self.commits) / self.seconds if self.seconds > 0 else 0.0


# ---- pure: the diff text → changed line ranges → capsule names


def _unquote(path: str) -> str:
    """A path as git prints it in ``---``/``+++`` lines (C-quoted when it has unusual bytes)."""
    path = path.rstrip("\t")
    if len(path) >= 2 and path[0] == '"' and path[-1] == '"':
        raw = path[1:-1].encode("latin-1", "backslashreplace").decode("unicode_escape")
        path = raw.encode("latin-1", "replace").decode("utf-8", "replace")
    return path


def parse_diff(lines: Iterable[str]) -> list[FileDiff]:
    """The files a ``git diff -U0 --full-index`` (or one commit's part of ``git log -p -U0``) modified, with the
    parent-side hunks. Added files (no parent version) and binary files are left out; a deleted file keeps its
    hunks (its functions were changed: removed); a renamed file is listed even without hunks."""
    out: list[FileDiff] = []
    old_path: str | None = None
    old_blob = ""
    renamed = ("", "")
    hunks: list[tuple[int, int, int]] = []
    pending = False  # the last hunk is an insertion still waiting for its first non-blank line

    def flush() -> None:
        old = old_path or renamed[0]
        has_parent = bool(old_blob) and not _EMPTY_BLOB.match(old_blob)
        if old and ((hunks and has_parent) or renamed[1]):
            out.append(FileDiff(old, old_blob if has_parent else "", tuple(hunks) if has_parent else (), renamed[1]))

    for line in lines:
        if pending and line.startswith("+") and line[1:].strip():
            body = line[1:].expandtabs(8)
            hunks[-1] = (hunks[-1][0], 0, len(body) - len(body.lstrip()))
            pending = False
            continue
        if line.startswith("diff --git "):
            flush()
            old_path, old_blob, renamed, hunks, pending = None, "", ("", ""), [], False
        elif line.startswith("rename from "):
            renamed = (_unquote(line[12:]), renamed[1])
        elif line.startswith("rename to "):
            renamed = (renamed[0], _unquote(line[10:]))
        elif line.startswith("index "):
            m = _INDEX.match(line)
            if m:
                old_blob = m.group(1)
        elif line.startswith("--- "):
            name = _unquote(line[4:])
            old_path = None if name == "/dev/null" else name[2:] if name[:2] in ("a/", '"a') else name
        elif line.startswith("@@ "):
            m = _HUNK.match(line)
            if m:
                count = 1 if m.group(2) is None else int(m.group(2))
                hunks.append((int(m.group(1)), count, -1))
                pending = count == 0
    flush()
    return out


_CODE_SUFFIXES = tuple(sorted(GRAMMAR_EXT))


def is_code_path(path: str) -> bool:
    """Whether the log's pathspecs (``*.py``, ... a grammar's extensions, case as written) let ``path`` through."""
    return path.endswith(_CODE_SUFFIXES)


def parse_raw(
    lines: Iterable[str], keep: Callable[[str], bool] | None = None
) -> tuple[list[str], list[tuple[str, str]]]:
    """What one commit's part of ``git log --raw --no-abbrev`` says of the files :func:`parse_diff` lists, without a
    diff: the files whose content changed (paths at the parent; an added one has none), and the renames (path at the
    parent, path after). ``keep``: the paths a log limited by pathspecs would have shown (a log read whole, then
    filtered, lists the same): a rename whose new name it drops reads as its old path deleted, one whose old name
    it drops as an addition (not listed)."""
    files: list[str] = []
    renames: list[tuple[str, str]] = []
    for line in lines:
        if not line.startswith(":"):
            continue
        meta, _, names = line.partition("\t")
        fields = meta.split()
        if len(fields) < 5:
            continue
        old_blob, new_blob, status = fields[2], fields[3], fields[4]
        paths = [_unquote(n) for n in names.split("\t")]
        if not paths or (keep is not None and not keep(paths[0])):
            continue
        if status.startswith("R") and len(paths) == 2:
            if keep is None or keep(paths[1]):
                renames.append((paths[0], paths[1]))
            else:  # renamed to a name the pathspecs leave out: they saw the old path deleted
                new_blob = "0" * len(old_blob)
        if old_blob != new_blob and not _EMPTY_BLOB.match(old_blob):
            files.append(paths[0])
    return files, renames


def _owners(capsules: list[Capsule], n_lines: int) -> list[Capsule | None]:
    """Line (1-based) → the innermost function, method or class capsule holding it (None: module level)."""
    owner: list[Capsule | None] = [None] * (n_lines + 2)
    units = sorted(
        (c for c in capsules if c.kind in ("function", "method", "class")), key=lambda c: (c.start_line, -c.end_line)
    )
    for c in units:  # an inner unit comes after its outer one and overwrites its lines
        for i in range(max(c.start_line, 1), min(c.end_line, n_lines) + 1):
            owner[i] = c
    return owner


class SpanMap:
    """The capsules of one file version, ready to name the units a set of hunks changed."""

    def __init__(self, path: str, capsules: list[Capsule], lines: list[str]):
        self.path = path
        self.by_id = {c.id: c for c in capsules}
        self.n_lines = len(lines)
        self.owner = _owners(capsules, self.n_lines)
        self.indent: dict[str, int] = {}
        for c in capsules:
            first = lines[c.start_line - 1].expandtabs(8) if 0 < c.start_line <= len(lines) else ""
            self.indent[c.id] = len(first) - len(first.lstrip())

    def _unit_parent(self, c: Capsule) -> Capsule | None:
        p = self.by_id.get(c.parent) if c.parent else None
        return p if p is not None and p.kind in ("function", "method", "class") else None

    def _named(self, c: Capsule) -> Capsule:
        while c.kind in DEFS and c.parent:  # a def nested in a function counts as the function
            p = self.by_id.get(c.parent)
            if p is None or p.kind not in DEFS:
                break
            c = p
        return c

    def _inserted_into(self, a: int, indent: int) -> Capsule | None:
        """The unit lines inserted after line a extend: the innermost unit holding line a whose first line is
        indented less than they are (lines appended to a function's body are its own; a method added after
        the last one belongs to the class). Without an indent (blank lines): the unit that holds a and a+1."""
        c = self.owner[a] if 0 < a <= self.n_lines else None
        if indent < 0:
            while c is not None and c.end_line < a + 1:
                c = self._unit_parent(c)
            return c
        while c is not None and self.indent[c.id] >= indent:
            c = self._unit_parent(c)
        return c

    def changed(self, hunks: Iterable[tuple[int, int, int]]) -> list[Capsule]:
        """The units the hunks change, each once, in file order. Changed or deleted lines count for the
        innermost unit holding them (none at module level); inserted lines as ``_inserted_into`` says."""
        seen: dict[str, Capsule] = {}
        for start, count, indent in hunks:
            if count == 0:
                c = self._inserted_into(start, indent)
                if c is not None:
                    c = self._named(c)
                    seen.setdefault(c.id, c)
                continue
            for i in range(max(start, 1), min(start + count - 1, self.n_lines) + 1):
                c = self.owner[i]
                if c is not None:
                    c = self._named(c)
                    seen.setdefault(c.id, c)
        return sorted(seen.values(), key=lambda c: (c.start_line, c.end_line))


def span_map(path: str, text: str) -> SpanMap | None:
    """The parser's capsules of one file version; None for a language without a grammar."""
    language = language_of(path)
    if language is None or language not in set(GRAMMAR_EXT.values()):
        return None
    pf = parse_source(path, text, language, calls=False) if supported(language) else parse_any(path, text, language)
    if pf.method != "tree-sitter" and pf.method != "regex":
        return None
    lines = text.split("\n")
    if text.endswith("\n"):
        lines.pop()
    return SpanMap(path, pf.capsules, lines)


def changed_symbols(path: str, parent_text: str, hunks: Iterable[tuple[int, int, int]]) -> list[str]:
    """``path:qualname`` of the units that hunks (parent-side, as ``parse_diff`` gives them) change in the
    parent's text of ``path``."""
    sm = span_map(path, parent_text)
    return [] if sm is None else [f"{path}:{c.qualname}" for c in sm.changed(hunks)]


def clean_message(message: str) -> str:
    """A commit message as words a question could share: trailers (Signed-off-by, Co-authored-by), issue and
    pull-request numbers and URLs dropped. The title and the body are kept."""
    keep = [line for line in message.splitlines() if not _TRAILER.match(line.strip())]
    text = "\n".join(keep)
    return (_ISSUE_REF.sub(" ", text) if "#" in text or "-" in text or "://" in text else text).strip()


# ---- git at the edges


def _git_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env.update(GIT_TERMINAL_PROMPT="0", GIT_CONFIG_NOSYSTEM="1", LC_ALL="C")
    return env


def _git(repo: Path, *args: str, check: bool = True) -> str:
    proc = subprocess.run(
        ["git", "-C", str(repo), "-c", "core.quotePath=false", *args], capture_output=True, env=_git_env(), timeout=600
    )
    if check and proc.returncode != 0:
        raise RuntimeError(f"git {args[0]} failed: {proc.stderr.decode('utf-8', 'replace').strip()[:300]}")
    return proc.stdout.decode("utf-8", "replace")


def head_commit(repo: str | Path, rev: str = "HEAD") -> str | None:
    """The commit ``rev`` names in ``repo`` (its HEAD by default), or None when it names none."""
    out = _git(Path(repo), "rev-parse", "--verify", "-q", f"{rev}^{{commit}}", check=False).strip()
    return out or None


def tracked_folder(root: str | Path) -> tuple[Path, str] | None:
    """(the work tree's top, ``root``'s folder in it) when ``root`` is a folder inside a git work tree that git
    tracks files in (a package of a monorepo), else None: not in git, or a folder git does not track (an unpacked
    tree in a cache or build folder inside a checkout: the enclosing project's history is not its own)."""
    root = Path(root).resolve()
    top = _git(root, "rev-parse", "--show-toplevel", check=False).strip()
    if not top:
        return None
    rel = Path(os.path.relpath(root, Path(top).resolve())).as_posix()
    if rel in (".", "") or rel.startswith("../"):
        return None
    listed = subprocess.run(
        ["git", "-C", top, "ls-files", "--error-unmatch", "--", rel],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=_git_env(),
        timeout=60,
    )
    return (Path(top), rel) if listed.returncode == 0 else None


def is_ancestor(repo: str | Path, older: str, newer: str) -> bool:
    proc = subprocess.run(
        ["git", "-C", str(repo), "merge-base", "--is-ancestor", older, newer],
        capture_output=True,
        env=_git_env(),
        timeout=60,
    )
    return proc.returncode == 0


class BlobReader:
    """One ``git cat-file --batch`` process for the whole mining: blobs by id, as text."""

    def __init__(self, repo: Path):
        self.proc = subprocess.Popen(
            ["git", "-C", str(repo), "cat-file", "--batch"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env=_git_env(),
        )

    def read(self, obj: str) -> str | None:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(obj.encode() + b"\n")
        self.proc.stdin.flush()
        header = self.proc.stdout.readline().decode("utf-8", "replace").split()
        if len(header) < 3 or header[1] == "missing":
            return None
        size = int(header[2])
        data = self.proc.stdout.read(size)
        self.proc.stdout.read(1)  # the newline after the object
        if header[1] != "blob" or b"\x00" in data[:8000]:
            return None
        return data.decode("utf-8", "replace")

    def close(self) -> None:
        if self.proc.poll() is None:
            try:
                self.proc.stdin.close()  # type: ignore[union-attr]
                self.proc.wait(timeout=10)
            except (OSError, subprocess.TimeoutExpired):
                self.proc.kill()


def _pathspecs(under: str | None = None) -> list[str]:
    return [f"{under}/*{ext}" if under else f"*{ext}" for ext in sorted(GRAMMAR_EXT)]


def partial_clone(repo: str | Path) -> bool:
    """Whether ``repo`` is a partial clone (blobs fetched from a promisor remote when first needed, as the service's
    clones of git URLs are): there, rename detection by content would fetch the blobs of every added or deleted
    file's pair, one by one, with no credentials and while an index update waits."""
    out = _git(Path(repo), "config", "--get-regexp", r"^(remote\..*\.promisor|extensions\.partialclone)$", check=False)
    return any(line.split(None, 1)[-1].strip().lower() not in ("false", "") for line in out.splitlines() if " " in line)


def _log_commits(
    repo: Path,
    rev_range: list[str],
    max_commits: int | None,
    patch: bool = True,
    skip: int = 0,
    exact_renames: bool = False,
    under: str | None = None,
) -> Iterator[tuple[list[str], list[str]]]:
    """(header fields + message lines, diff lines) per commit, newest first, streamed from one git log; without
    ``patch``, its ``--raw`` lines instead of the diff (the files only: several times faster), of every file: the
    caller keeps the code files (``parse_raw(keep=is_code_path)``). Thirty wildcard pathspecs make git match every
    entry of every tree it compares instead of skipping the unchanged subtrees: 30,000 synthetic commits over 400
    files, 8,000 of them in 3.6 s with them against 0.4 s without. A patch is limited by them still (a diff of every
    file would print the docs' and data's changes too). ``exact_renames``: a rename is a path whose blob moved
    unchanged (what needs no blob's content: a partial clone's). ``under``: a folder of the repository (no slash at
    either end): only its files, named from it (``--relative``), every commit that changed one listed (a folder's
    pathspec prunes the walk cheaply; ``--full-history`` keeps the side branches it would simplify away). A log
    that git ends with an error raises RuntimeError, its last commit not given (it may be cut short)."""
    args = [
        "git",
        "-C",
        str(repo),
        "-c",
        "core.quotePath=false",
        "log",
        "--no-merges",
        *(("-p", "-U0", "--full-index") if patch else ("--raw", "--no-abbrev")),
        "-M100%" if exact_renames else "-M",
        "--no-color",
        "--no-ext-diff",
        "--diff-filter=MDR",
        f"--format={_MARK}%H %ct %P%n%B{_END}",
    ]
    if max_commits is not None:
        args.append(f"-n{max_commits}")
    if skip:
        args.append(f"--skip={skip}")
    if under:
        args += [f"--relative={under}/", "--full-history"]
    args += [*rev_range, "--", *(_pathspecs(under) if patch else (under,) if under else ())]
    with tempfile.TemporaryFile() as err:  # git's message when it fails (a pipe unread could fill)
        proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=err, env=_git_env())
        assert proc.stdout is not None
        head: list[str] | None = None
        diff: list[str] = []
        in_message = False
        try:
            for raw in proc.stdout:
                line = raw.decode("utf-8", "replace").rstrip("\n")
                if line.startswith(_MARK):
                    if head is not None:
                        yield head, diff
                    head, diff, in_message = [line[len(_MARK) :]], [], True
                elif in_message:
                    if line.endswith(_END):
                        head.append(line[: -len(_END)])  # type: ignore[union-attr]
                        in_message = False
                    else:
                        head.append(line)  # type: ignore[union-attr]
                else:
                    diff.append(line)
            if proc.wait() != 0:
                err.seek(0)
                message = err.read().decode("utf-8", "replace").strip()[:300]
                raise RuntimeError(f"git log failed: {message or f'exit status {proc.returncode}'}")
            if head is not None:
                yield head, diff
        finally:
            if proc.poll() is None:
                proc.kill()
            proc.wait()


def mine(
    repo: str | Path,
    since: str | None = None,
    until: str = "HEAD",
    max_commits: int | None = None,
    time_budget: float | None = None,
    max_files: int = MAX_FILES,
    tests: bool = False,
    symbols: bool = True,
    skip: int = 0,
    under: str | None = None,
) -> MineReport:
    """Mine the commits reachable from ``until`` and not from ``since`` (all of them when ``since`` is None),
    newest first, stopping after ``max_commits`` commits or ``time_budget`` seconds; ``skip``: the log's first
    entries that an earlier run took (its ``read``), to go on where it stopped; ``under``: a folder of the repository
    whose history alone is mined, its files named from it (an index of that folder). Merges and commits that
    change no code file (by the grammar languages' extensions) are not listed. Test files are listed in a
    commit's files but their functions are named only with ``tests=True`` (parsing them is a third of the cost
    on the three bundles measured, and the history signal leaves tests out). ``symbols=False``: the files only, no
    parse of any parent (what the search's file signal reads)."""
    repo = Path(repo)
    t0 = time.perf_counter()
    head = _git(repo, "rev-parse", "--verify", f"{until}^{{commit}}").strip()
    rev_range = [head] if since is None else [f"{since}..{head}"]
    blobs = BlobReader(repo)
    maps: dict[str, SpanMap | None] = {}  # blob id → spans (a file changed by several commits in a row)
    commits: list[MinedCommit] = []
    complete = True
    parsed = 0
    read = 0
    try:
        # without patches the log lists every commit that changed a file, code or not: it is bounded here, by code
        # commits, as a log limited to the code files is by ``-n``
        log = _log_commits(repo, rev_range, max_commits if symbols else None, symbols, skip, partial_clone(repo), under)
        for header, diff in log:
            if time_budget is not None and time.perf_counter() - t0 > time_budget:
                complete = False
                break
            fields = header[0].split()
            sha, ctime, parents = fields[0], int(fields[1]), fields[2:]
            message = "\n".join(header[1:]).strip()
            if symbols:
                diffs = parse_diff(diff)
                files = [f for f in diffs if f.hunks]
                changed = [f.old_path for f in files]
                renames = [(f.old_path, f.new_path) for f in diffs if f.new_path]
            else:
                files = []
                changed, renames = parse_raw(diff, keep=is_code_path)
                if not changed and not renames:  # no code file: what a log limited to them would not list
                    read += 1
                    continue
                if max_commits is not None and len(commits) >= max_commits:
                    complete = False
                    break
            read += 1
            mc = MinedCommit(sha, parents, ctime, message, files=changed, renames=renames)
            if len(changed) > max_files:
                mc.sweep = True
            elif symbols:
                for fd in files:
                    if not tests and is_test_path(fd.old_path):
                        continue
                    if fd.old_blob not in maps:
                        text = blobs.read(fd.old_blob)
                        maps[fd.old_blob] = span_map(fd.old_path, text) if text is not None else None
                        parsed += 1
                        if len(maps) > 256:
                            maps.pop(next(iter(maps)))
                    sm = maps[fd.old_blob]
                    if sm is not None:
                        mc.symbols += [f"{fd.old_path}:{c.qualname}" for c in sm.changed(fd.hunks)]
            commits.append(mc)
        else:
            if symbols and max_commits is not None and len(commits) >= max_commits:  # git's -n may have cut it
                complete = False
    finally:
        blobs.close()
    return MineReport(commits, head, time.perf_counter() - t0, complete, parsed, read)


# ---- the mined history kept beside an index, updated incrementally


@dataclass
class History:
    head: str | None
    commits: list[MinedCommit]  # newest first
    complete: bool = True  # False: older commits were left out by a bound
    seconds: float = 0.0  # mining time of the commits listed, summed over the updates that mined them
    # where the older commits left out go on: the commit whose log a bound cut, and how many of that log's entries
    # were taken (its oldest listed commits are this history's last); None when complete, or not known
    tail: tuple[str, int] | None = None

    def save(self, path: str | Path, keep_from: str | Path | None = None) -> None:
        """Write the history: its first line, then its commits. ``keep_from``: a kept history whose commits (all
        but its first line) are copied, unread, before this one's, which are then the older ones (a backfill)."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(path.suffix + f".{os.getpid()}.tmp")
        kept_commits = 0
        if keep_from is not None:  # their count, for the first line (a status reads it there, not the commits)
            counted = History.meta(keep_from).get("commits")
            if isinstance(counted, int):
                kept_commits = counted
            else:  # a history saved before the count was kept: its lines, after the first
                with Path(keep_from).open("rb") as kept:
                    kept.readline()
                    while chunk := kept.read(1 << 20):
                        kept_commits += chunk.count(b"\n")
        with tmp.open("w", encoding="utf-8") as f:
            f.write(
                json.dumps(
                    {
                        "version": HISTORY_VERSION,
                        "head": self.head,
                        "complete": self.complete,
                        "seconds": round(self.seconds, 3),
                        "commits": kept_commits + len(self.commits),
                        **({"tail": list(self.tail)} if self.tail and not self.complete else {}),
                    }
                )
                + "\n"
            )
            if keep_from is not None:
                with Path(keep_from).open("rb") as kept:
                    kept.readline()
                    f.flush()
                    shutil.copyfileobj(kept, f.buffer)
            for c in self.commits:
                f.write(json.dumps(c.to_dict(), ensure_ascii=False) + "\n")
        os.replace(tmp, path)

    @staticmethod
    def meta(path: str | Path) -> dict:
        """The first line of a kept history (its version, head, completeness, seconds), or {}."""
        try:
            with Path(path).open(encoding="utf-8") as f:
                meta = json.loads(f.readline() or "{}")
        except (OSError, ValueError):
            return {}
        return meta if isinstance(meta, dict) else {}

    @classmethod
    def load(cls, path: str | Path) -> History | None:
        try:
            with Path(path).open(encoding="utf-8") as f:
                return cls._read(f)
        except OSError:
            return None

    @classmethod
    def parse(cls, text: str) -> History | None:
        """A history from a kept file's text (as the store keeps it), or None when it is not one this version reads."""
        return cls._read(iter(text.splitlines()))

    @classmethod
    def _read(cls, lines: Iterator[str]) -> History | None:
        try:
            meta = json.loads(next(lines, "") or "{}")
            if not isinstance(meta, dict) or meta.get("version") != HISTORY_VERSION:
                return None
            commits = [MinedCommit.from_dict(json.loads(line)) for line in lines if line.strip()]
        except (ValueError, KeyError, TypeError, AttributeError):
            return None
        return cls(
            meta.get("head"),
            commits,
            bool(meta.get("complete", True)),
            float(meta.get("seconds") or 0.0),
            _tail(meta),
        )


def _tail(meta: dict) -> tuple[str, int] | None:
    tail = meta.get("tail")
    if isinstance(tail, list) and len(tail) == 2 and isinstance(tail[0], str) and isinstance(tail[1], int):
        return tail[0], tail[1]
    return None


@dataclass
class HistoryUpdate:
    history: History
    mined: int  # commits mined by this update, the older ones it went back for included
    seconds: float
    incremental: bool  # True: only the commits after the previous head were read
    backfilled: int = 0  # of ``mined``: older commits that an earlier update's bound had left out


def update_history(
    repo: str | Path,
    path: str | Path,
    max_commits: int | None = None,
    time_budget: float | None = None,
    max_files: int = MAX_FILES,
    tests: bool = False,
    symbols: bool = True,
    load: bool = True,
    head: str | None = None,
    backfill: bool = True,
    under: str | None = None,
) -> HistoryUpdate:
    """Bring the mined history at ``path`` up to the repository's HEAD: only the commits after the head it
    records are mined (all of them, within the bounds, when there is no file or the head is no longer an
    ancestor, as after a force push). ``load=False``: when the head is the one recorded, the history's first line
    is all that is read, and the update's history lists no commit but the older ones it went back for (an index's
    refresh after each save; the kept ones are copied, unread, when older ones are added after them). ``head``:
    the repository's HEAD when the caller has read it already (an index update has). ``backfill``: a history that a
    bound left incomplete goes on back to older commits with what is left of ``time_budget``, one update after
    another, until its log ends (``max_commits`` bounds what one update mines, not the history). ``under``: a folder
    of the repository whose history alone is kept (``mine``); one history file keeps one folder's."""
    t0 = time.perf_counter()
    head = head or head_commit(repo)
    bounds: dict[str, Any] = {"max_files": max_files, "tests": tests, "symbols": symbols, "under": under}
    if not load and head is not None:
        meta = History.meta(path)
        if meta.get("version") == HISTORY_VERSION and meta.get("head") == head:
            hist = History(head, [], bool(meta.get("complete", True)), float(meta.get("seconds") or 0.0), _tail(meta))
            older = _go_back(repo, hist, t0, time_budget, max_commits, bounds) if backfill else None
            if older is not None:  # its commits go after the kept ones, which are copied as they are, not read
                hist = _extended(hist, older)
                hist.save(path, keep_from=path)
            went_back = len(older.commits) if older else 0
            return HistoryUpdate(hist, went_back, time.perf_counter() - t0, True, went_back)
    old = History.load(path)
    if head is None:
        hist = History(None, [])
        hist.save(path)
        return HistoryUpdate(hist, 0, time.perf_counter() - t0, False)
    mined = 0
    incremental = True
    if old is not None and old.head == head:
        hist = old
    else:
        incremental = old is not None and old.head is not None and is_ancestor(repo, old.head, head)
        since = old.head if incremental and old else None
        report = mine(repo, since=since, until=head, max_commits=max_commits, time_budget=time_budget, **bounds)
        mined = len(report.commits)
        cut = None if report.complete else (head, report.read)
        if incremental and old is not None:
            if not report.complete:  # a gap between the new and the old commits: keep the new ones only
                hist = History(head, report.commits, False, report.seconds, cut)
            else:
                hist = History(head, report.commits + old.commits, old.complete, old.seconds + report.seconds, old.tail)
        else:
            hist = History(head, report.commits, report.complete, report.seconds, cut)
    room = None if max_commits is None else max_commits - mined
    older = _go_back(repo, hist, t0, time_budget, room, bounds) if backfill and room != 0 else None
    if older is not None:
        hist = _extended(hist, older)
    if old is None or old is not hist:
        hist.save(path)
    backfilled = len(older.commits) if older else 0
    return HistoryUpdate(hist, mined + backfilled, time.perf_counter() - t0, incremental, backfilled)


def _go_back(
    repo: str | Path,
    hist: History,
    t0: float,
    time_budget: float | None,
    max_commits: int | None,
    bounds: dict[str, Any],
) -> MineReport | None:
    """The older commits that a bound left out of ``hist``, within what is left of the budget, or None when it is
    whole, there is no time left or its cut log's commit is gone (then it stays as it is, told so by no tail)."""
    if hist.complete or hist.tail is None:
        return None
    left = None if time_budget is None else time_budget - (time.perf_counter() - t0)
    if left is not None and left <= 0.05:
        return None
    start, taken = hist.tail
    if head_commit(repo, start) is None:  # a rewritten, pruned history: the commit whose log was cut is no more
        return MineReport([], None, 0.0, False, 0, -1)
    return mine(repo, until=start, max_commits=max_commits, time_budget=left, skip=taken, **bounds)


def _extended(hist: History, older: MineReport) -> History:
    """``hist`` with the ``older`` commits after its own (a commit's log never changes: nothing repeats)."""
    tail = None
    if not older.complete and hist.tail is not None and older.read >= 0:
        tail = (hist.tail[0], hist.tail[1] + older.read)
    return History(hist.head, hist.commits + older.commits, older.complete, hist.seconds + older.seconds, tail)


def named_now(commits: Iterable[MinedCommit]) -> Iterator[tuple[MinedCommit, list[str], list[str]]]:
    """Each commit (newest first, as mined) with its symbols and files named as the newest commit names them: a
    file renamed since (by a later commit of the list) is carried to its new path."""
    forward: dict[str, str] = {}  # path at some older commit → the path at the newest one
    for c in commits:
        for old, new in c.renames:  # the commit's own renames first: its symbols are named at its parent
            forward[old] = forward.get(new, new)
        if not forward:
            yield c, c.symbols, c.files
            continue
        symbols = []
        for s in c.symbols:
            path, _, qual = s.partition(":")
            symbols.append(f"{forward.get(path, path)}:{qual}")
        yield c, symbols, [forward.get(f, f) for f in c.files]


def symbol_messages(commits: Iterable[MinedCommit], before: int | None = None) -> dict[str, list[str]]:
    """``path:qualname`` (named as the newest commit names it) → the cleaned messages of the commits that changed
    it (committed before ``before``, unix seconds, when given), newest first."""
    out: dict[str, list[str]] = {}
    for c, symbols, _files in named_now(commits):
        if before is not None and c.time >= before:
            continue
        msg = clean_message(c.message)
        for s in dict.fromkeys(symbols):
            out.setdefault(s, []).append(msg)
    return out


# ---- reading the history: past commits like a question vote for what they changed

VOTES_VERSION = 2  # SimilarCommits.save's layout; bumped when it changes (or when the tokens do)

# the similar commits' file ranking beside a search's (weighted reciprocal ranks): chosen on click's fix commits, file
# Acc@1 on attrs 28.0 -> 44.0 and marshmallow 36.2 -> 42.0 (bench/results/history_eval.md)
FILE_WEIGHT = 0.25


def _joined(strings: Iterable[str]) -> Any:
    """Strings as one array of bytes, NUL between them (no string holds a NUL: ids, tokens, paths, titles): what a
    saved vote keeps instead of a pickled list."""
    import numpy as np

    return np.frombuffer("\0".join(strings).encode(), dtype=np.uint8)


def _split(array: Any) -> list[str]:
    """The strings ``_joined`` made the array of."""
    return bytes(array).decode().split("\0") if len(array) else []


class HistoryRanker:
    """BM25 (k1 1.2, b 0.75) over one history field. The postings are numpy arrays (term, then document order) built
    by one sort of every (term, document) pair: a 39,000-commit history's messages in a fraction of the time a
    Counter per document took, and a query's terms are scored a whole posting list at a time. The scores are the
    ones the per-posting formula gives, in the same order of operations (so the same floats and the same ties)."""

    def __init__(self, docs: dict[str, list[str]], k1: float = 1.2, b: float = 0.75):
        import numpy as np

        self.k1, self.b = k1, b
        self.keys = list(docs)
        self.n = n = len(self.keys)
        self.vocab: dict[str, int] = {}
        vocab, ids = self.vocab, []
        for toks in docs.values():
            ids.extend([vocab.setdefault(t, len(vocab)) for t in toks])
        lengths = np.fromiter((len(v) for v in docs.values()), dtype=np.int64, count=n)
        self.lengths = lengths.astype(np.float64)
        self.avg = float(lengths.sum()) / n if n else 1.0
        m = max(n, 1)  # a (term, document) pair is term * m + document
        pairs = np.asarray(ids, dtype=np.int64) * m + np.repeat(np.arange(n, dtype=np.int64), lengths)
        pairs.sort()
        starts = np.flatnonzero(np.diff(pairs, prepend=-1)) if len(pairs) else np.zeros(0, dtype=np.int64)
        first = pairs[starts]
        self.tf = np.diff(np.append(starts, len(pairs))).astype(np.float64)  # (a numpy.unique without numpy.ma)
        self.docs = first % m
        self.ptr = np.searchsorted(first // m, np.arange(len(vocab) + 1))

    def rank(self, query: str, limit: int = 100) -> list[tuple[str, float]]:
        return [(self.keys[i], score) for i, score in self.rank_ids(query, limit)]

    def rank_ids(self, query: str, limit: int = 100) -> list[tuple[int, float]]:
        """(document's position in ``docs``, score), best first, ties by key."""
        import numpy as np

        scores = np.zeros(self.n, dtype=np.float64)
        k1, b = self.k1, self.b
        for term in dict.fromkeys(code_tokens(query, keep_stopwords=False)):
            t = self.vocab.get(term)
            if t is None:
                continue
            lo, hi = int(self.ptr[t]), int(self.ptr[t + 1])
            docs, tf = self.docs[lo:hi], self.tf[lo:hi]
            df = hi - lo
            idf = math.log(1 + (self.n - df + 0.5) / (df + 0.5))
            norm = tf + k1 * (1 - b + b * self.lengths[docs] / self.avg)
            scores[docs] += idf * tf * (k1 + 1) / norm  # (a document is once in a term's postings)
        hit = np.flatnonzero(scores > 0)  # every posting scores above 0 (idf > 0): the documents a term is in
        if len(hit) > limit:  # the limit best, and every one tied with the last of them (ties go by key)
            cut = np.partition(scores[hit], len(hit) - limit)[len(hit) - limit]
            hit = hit[scores[hit] >= cut]
        ranked = sorted((-float(scores[i]), self.keys[i], i) for i in hit.tolist())
        return [(i, -s) for s, _, i in ranked[:limit]]

    def arrays(self) -> dict[str, Any]:
        """Its state as arrays (``from_arrays``): keys and terms NUL-joined, no pickle."""
        import numpy as np

        return {
            "keys": _joined(self.keys),
            "terms": _joined(self.vocab),
            "params": np.array([self.k1, self.b, self.avg], dtype=np.float64),
            "lengths": self.lengths.astype(np.uint32),  # (token counts: whole numbers, kept as floats for the sums)
            "tf": self.tf.astype(np.uint32),
            "docs": self.docs.astype(np.int32),
            "ptr": self.ptr.astype(np.int64),
        }

    @classmethod
    def from_arrays(cls, a: Any) -> HistoryRanker:
        import numpy as np

        self = cls.__new__(cls)
        self.keys = _split(a["keys"])
        terms = _split(a["terms"])
        self.vocab = dict(zip(terms, range(len(terms)), strict=True))
        self.k1, self.b, self.avg = (float(x) for x in a["params"])
        self.lengths, self.tf = a["lengths"].astype(np.float64), a["tf"].astype(np.float64)
        self.docs, self.ptr = a["docs"].astype(np.int64), a["ptr"]
        self.n = len(self.keys)
        if len(self.lengths) != self.n or len(self.ptr) != len(terms) + 1 or len(self.docs) != len(self.tf):
            raise ValueError("inconsistent ranker arrays")
        return self


def fuse(base: Sequence[str], hist: Sequence[str], weight: float, k: int = 60) -> list[str]:
    """Weighted reciprocal-rank fusion: ``1/(k + rank in base) + weight/(k + rank in hist)``. Weight 0 keeps the
    base order; a key only the history ranks joins the list."""
    if weight <= 0 or not hist:
        return list(dict.fromkeys(base))
    score: dict[str, float] = {}
    for i, key in enumerate(dict.fromkeys(base), 1):
        score[key] = 1.0 / (k + i)
    for i, key in enumerate(dict.fromkeys(hist), 1):
        score[key] = score.get(key, 0.0) + weight / (k + i)
    order = {key: i for i, key in enumerate(dict.fromkeys([*base, *hist]))}
    return sorted(score, key=lambda key: (-score[key], order[key]))


@dataclass(frozen=True)
class Voter:
    """A past commit that voted for a file: its id and its title (the cleaned message's first line, cut)."""

    sha: str
    title: str


def _title(message: str, limit: int = 64) -> str:
    line = next((ln.strip() for ln in message.splitlines() if ln.strip()), "").replace("\0", " ")
    line = " ".join(line.split())
    return line if len(line) <= limit else line[: limit - 1].rstrip() + "…"


class SimilarCommits:
    """The other way to read the same history: the past commits whose messages are most like the query (BM25 over
    one document per commit) vote for the units they changed, each vote the commit's score relative to the best one,
    shared out by the square root of the number of units it changed (the similar-report score of BugLocator, Zhou
    et al., ICSE 2012, at function level)."""

    def __init__(
        self, commits: Iterable[MinedCommit], keep: set[str] | None = None, by: str = "symbols", depth: int = 20
    ):
        self.depth = depth
        changed: list[list[str]] = []  # the keys each voter changed, in the ranker's order of documents
        titles: list[str] = []  # each voter's title: its cleaned message's first line
        docs: dict[str, list[str]] = {}
        for c, symbols, files in named_now(commits):
            if c.sweep:
                continue
            keys = [
                k
                for k in dict.fromkeys(symbols if by == "symbols" else files)
                if (keep is None or k in keep) and not is_test_path(k.split(":", 1)[0])
            ]
            if keys:
                changed.append(keys)
                message = clean_message(c.message)
                titles.append(_title(message))
                docs[c.sha] = code_tokens(message, keep_stopwords=False)
        self.changed: Sequence[list[str]] = changed
        self.titles: Sequence[str] = titles
        self.commits = HistoryRanker(docs)

    def rank(self, query: str, limit: int = 100) -> list[tuple[str, float]]:
        return [(key, score) for key, score, _ in self.rank_voters(query, limit)]

    def rank_voters(self, query: str, limit: int = 100, voters: int = 2) -> list[tuple[str, float, list[Voter]]]:
        """``rank``, each key with the past commits that voted for it most (at most ``voters``, best first): what
        a file-level search shows beside a file the history moved."""
        hits = self.commits.rank_ids(query, limit=self.depth)
        votes: dict[str, float] = {}
        why: dict[str, list[Voter]] = {}
        for i, s in hits:
            keys = self.changed[i]
            for key in keys:
                votes[key] = votes.get(key, 0.0) + (s / hits[0][1]) / math.sqrt(len(keys))
                got = why.setdefault(key, [])
                if len(got) < voters:  # (hits come best first)
                    got.append(Voter(self.commits.keys[i], self.titles[i]))
        ranked = sorted(votes.items(), key=lambda kv: (-kv[1], kv[0]))[:limit]
        return [(key, score, why[key]) for key, score in ranked]

    def save(self, path: Path) -> None:
        """Write it to ``path`` (an uncompressed .npz, no pickle; written aside, then renamed), for ``load``: a
        39,000-commit history is read and indexed in ~2 s, loaded in milliseconds."""
        import numpy as np

        names: dict[str, int] = {}
        ids = [names.setdefault(k, len(names)) for keys in self.changed for k in keys]
        ptr = np.cumsum([0, *(len(keys) for keys in self.changed)], dtype=np.int64)
        arrays = {
            **{f"r_{k}": v for k, v in self.commits.arrays().items()},
            "version": np.array([VOTES_VERSION, self.depth], dtype=np.int64),
            "names": _joined(names),
            "titles": _joined(self.titles),
            "changed_ptr": ptr,
            "changed_ids": np.asarray(ids, dtype=np.int32),
        }
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}-{threading.get_ident()}.tmp")
        try:
            with tmp.open("wb") as f:
                np.savez(f, **arrays)
            os.replace(tmp, path)
        finally:
            tmp.unlink(missing_ok=True)

    @classmethod
    def load(cls, path: Path) -> SimilarCommits | None:
        """What ``save`` wrote at ``path``; None when there is none, or it is damaged or of another version."""
        import numpy as np

        try:
            with np.load(path, allow_pickle=False) as z:
                a = {k: z[k] for k in z.files}
            version, depth = (int(x) for x in a["version"])
            if version != VOTES_VERSION:
                return None
            self = cls.__new__(cls)
            self.depth = depth
            self.commits = HistoryRanker.from_arrays({k[2:]: v for k, v in a.items() if k.startswith("r_")})
            self.changed = _Changed(_split(a["names"]), a["changed_ptr"], a["changed_ids"])
            self.titles = _split(a["titles"])
            if len(self.changed) != self.commits.n or len(self.titles) != self.commits.n:
                return None
            return self
        except Exception:  # noqa: BLE001 - a cache: whatever is wrong with the file, the vote is built again
            return None


class _Changed(Sequence[list[str]]):
    """The keys each voter changed, read from ``SimilarCommits.save``'s arrays when a vote asks for them."""

    def __init__(self, names: list[str], ptr: Any, ids: Any):
        self.names, self.ptr, self.ids = names, ptr, ids
        if len(ptr) < 1 or int(ptr[-1]) != len(ids) or (len(ids) and int(ids.max()) >= len(names)):
            raise ValueError("inconsistent changed arrays")

    def __len__(self) -> int:
        return len(self.ptr) - 1

    @overload
    def __getitem__(self, i: int) -> list[str]: ...
    @overload
    def __getitem__(self, i: slice) -> Sequence[list[str]]: ...
    def __getitem__(self, i: int | slice) -> list[str] | Sequence[list[str]]:
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        return [self.names[j] for j in self.ids[int(self.ptr[i]) : int(self.ptr[i + 1])].tolist()]
