"""Evaluation corpora: PyPI releases unpacked, or git commits checked out, so that they look like
the repository.

A row of the evaluation set (see the evaluation data's README, ``../shared/eval/README.md`` beside the
project) names its corpus as either

* ``{"pypi": NAME, "version": V, "path_prefix": P, "mode": M}``: the wheel ``NAME==V`` unpacked,
  with every file ``f`` of the wheel at the repository path ``P + f``; or, in sdist mode
  (``materialize(row, tree="sdist")``), the same release's sdist unpacked with its top folder
  stripped (``Django-4.2.16/django/db/...`` is ``django/db/...``): the repository's tests and docs
  as a checkout has them, every path already repository-relative (``P`` does not apply); or
* ``{"git": PATH_OR_URL, "commit": REV, "path_prefix": P}``: the files of commit ``REV`` of a git
  repository, every file ``f`` of the commit at ``P + f`` (``P`` is usually ``""``). A local path
  (relative to the current directory) is read in place, nothing is written to it; a URL
  (``https://``, ``ssh://``, ``file://``, ``user@host:path``) is cloned once with ``git clone --bare``
  into the cache and fetched again only when a commit is missing from the clone. The tree is a checkout of
  ``REV`` as a user has one: its ``.git`` reads the repository's objects in place (git alternates) and its
  HEAD is ``REV``, so that indexing it mines the history up to ``REV`` and no further (a file-level search
  weighs the files that similar past commits changed, see ``repoctx.history``). Under a ``path_prefix``
  the tree holds the files only.

Rows that carry a ``revert_patch`` get their own tree with that patch applied in reverse
(``git apply -R``, exact context; a patch that does not apply is an error, never fuzzed in), files only:
a checkout's history would reach the commit whose change is reverted, which is the answer.

Layout of the cache (``$REPOCTX_CACHE`` or ``~/.cache/repoctx``)::

    wheels/                         downloaded distributions (any ``*.whl`` / sdist dropped here is used)
    wheels/sdists/                  sdists fetched for sdist mode (apart, so that the wheel mode never takes one)
    git/NAME-HASH.git               bare clones of git URLs (HASH of the URL)
    trees/NAME-VERSION[--PREFIX]/   materialized release trees (the wheel)
    trees/sdist/NAME-VERSION/       materialized sdists (sdist mode)
    trees/git/NAME-HASH-SHA12-co/   materialized commits (HASH of the repository, SHA12 of the commit): checkouts
    trees/git/NAME-HASH-SHA12--PREFIX/    the same under a path_prefix: files only
    trees/reverted/INSTANCE-HASH/   per-instance trees with the gold patch reverted

Trees only ever appear by an atomic rename of a fully written temporary directory, so the
existence of a tree directory means it is complete. No package code is ever run: wheels and
sdists are only unpacked (``pip download`` is used for wheels only, which never builds anything; an
sdist is fetched as a file from the index, since ``pip download --no-binary`` runs its build backend
to read its metadata).

One file of a snapshot that cannot be read (a wheel member with a bad checksum or a compression
method zipfile lacks, a tar member cut short, a git blob a partial clone never fetched) is left out
of the tree rather than failing it: the tree is built from everything else and the files left out
are listed, with why, in ``TREE.unread.json`` beside it (:func:`unread_files`).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import urllib.request
import zipfile
import zlib
from collections.abc import Callable
from contextlib import ExitStack
from functools import partial
from pathlib import Path, PurePosixPath
from typing import IO, Any

__all__ = [
    "CorpusError",
    "cache_dir",
    "corpus_kind",
    "fetch_sdist",
    "fetch_wheel",
    "materialize",
    "load_rows",
    "unread_files",
]

_SDIST_EXTS = (".tar.gz", ".tgz", ".tar.bz2", ".zip")

# (python version, abis) tried in turn for binary wheels, as in the eval README.
_BINARY_TARGETS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("3.9", ("cp39",)),
    ("3.8", ("cp38",)),
    ("3.7", ("cp37m", "cp37")),
    ("3.10", ("cp310",)),
    ("3.11", ("cp311",)),
    ("3.6", ("cp36m",)),
)
_PLATFORMS = (
    "manylinux2014_x86_64",
    "manylinux2010_x86_64",
    "manylinux1_x86_64",
    "manylinux_2_17_x86_64",
    "manylinux_2_28_x86_64",
    "linux_x86_64",
    "any",
)
_PURE_PYTHONS = ("3.11", "3.9", "3.8", "3.7", "3.10")


class CorpusError(RuntimeError):
    """A corpus could not be fetched or materialized."""


# what reading one member of an archive can raise when that member (not the disk) is at fault
_UNREADABLE = (
    zipfile.BadZipFile,
    tarfile.TarError,
    zlib.error,
    EOFError,
    NotImplementedError,
    RuntimeError,
    OSError,
    ValueError,
)
_CHUNK = 1 << 20


def _copy_member(opener, dest: Path, name: str, unread: list[tuple[str, str]]) -> None:
    """Copy one archive member to ``dest``; a member that cannot be read is left out and listed in
    ``unread`` as (repository path, reason). Errors writing ``dest`` (a full disk) still fail the tree."""

    def read_error(exc: BaseException) -> None:
        dest.unlink(missing_ok=True)
        unread.append((name, _one_line(f"{type(exc).__name__}: {exc}", 300)))

    try:
        src = opener()
    except _UNREADABLE as exc:
        read_error(exc)
        return
    if src is None:  # (tarfile: not a regular file after all)
        return
    with src, open(dest, "wb") as out:
        while True:
            try:
                chunk = src.read(_CHUNK)
            except _UNREADABLE as exc:
                out.close()
                read_error(exc)
                return
            if not chunk:
                return
            out.write(chunk)


# --------------------------------------------------------------------------- paths / names


def cache_dir() -> Path:
    """The cache root: ``$REPOCTX_CACHE`` if set, else ``~/.cache/repoctx``."""
    env = os.environ.get("REPOCTX_CACHE")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "repoctx"


def _canon_name(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _canon_version(version: str) -> str:
    """PEP 440 normal form with trailing zero release components dropped (``1.0.0`` == ``1.0``)."""
    try:
        from packaging.version import InvalidVersion, Version
    except ImportError:  # pragma: no cover - packaging is normally present
        return version.lower()
    try:
        v = Version(version)
    except InvalidVersion:
        return version.lower()
    release = list(v.release)
    while len(release) > 1 and release[-1] == 0:
        release.pop()
    head = (f"{v.epoch}!" if v.epoch else "") + ".".join(map(str, release))
    return head + str(v)[len(v.base_version) :]  # pre/post/dev/local suffix unchanged


def _parse_dist_filename(filename: str) -> tuple[str, str, str] | None:
    """``(canonical name, canonical version, kind)`` of a wheel/sdist file name, kind 'wheel'|'sdist'."""
    if filename.endswith(".whl"):
        parts = filename[:-4].split("-")
        if len(parts) < 5:
            return None
        return _canon_name(parts[0]), _canon_version(parts[1]), "wheel"
    for ext in _SDIST_EXTS:
        if filename.endswith(ext):
            stem = filename[: -len(ext)]
            if "-" not in stem:
                return None
            name, version = stem.rsplit("-", 1)
            return _canon_name(name), _canon_version(version), "sdist"
    return None


def _wheel_rank(filename: str) -> tuple[int, str]:
    """Prefer pure-Python wheels, then any binary wheel (deterministic by name)."""
    return (0 if filename.endswith("-none-any.whl") else 1, filename)


def _find_cached(wheels: Path, name: str, version: str, kind: str | None = None) -> Path | None:
    """A cached distribution of ``name==version``: a wheel if any, else an sdist; only that ``kind``
    ('wheel' | 'sdist') when given."""
    if not wheels.is_dir():
        return None
    want = (_canon_name(name), _canon_version(version))
    found_wheels: list[Path] = []
    found_sdists: list[Path] = []
    for p in wheels.iterdir():
        if not p.is_file():
            continue
        parsed = _parse_dist_filename(p.name)
        if parsed is None or parsed[:2] != want:
            continue
        if kind is None or parsed[2] == kind:
            (found_wheels if parsed[2] == "wheel" else found_sdists).append(p)
    if found_wheels:
        return min(found_wheels, key=lambda p: _wheel_rank(p.name))
    if found_sdists:
        return sorted(found_sdists)[0]
    return None


# --------------------------------------------------------------------------- fetching


def _pip_download(spec: str, dest: Path, extra: list[str]) -> tuple[bool, str]:
    cmd = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "--no-deps",
        "--disable-pip-version-check",
        "--no-input",
        "-d",
        str(dest),
        *extra,
        spec,
    ]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=1800)
    except subprocess.TimeoutExpired:
        return False, "pip download timed out"
    return proc.returncode == 0, (proc.stderr or proc.stdout)[-2000:]


def _download_attempts() -> list[list[str]]:
    attempts = [["--only-binary", ":all:", "--python-version", v] for v in _PURE_PYTHONS]
    for version, abis in _BINARY_TARGETS:
        args = ["--only-binary", ":all:", "--python-version", version, "--implementation", "cp"]
        for abi in (*abis, "abi3", "none"):
            args += ["--abi", abi]
        for plat in _PLATFORMS:
            args += ["--platform", plat]
        attempts.append(args)
    return attempts


def _download_sdist(name: str, version: str, dest: Path) -> tuple[bool, str]:
    """Fetch the sdist file itself from PyPI's JSON API (pip would run its build backend)."""
    url = f"https://pypi.org/pypi/{name}/{version}/json"
    try:
        with urllib.request.urlopen(url, timeout=120) as resp:
            meta = json.load(resp)
        for f in meta.get("urls", []):
            if f.get("packagetype") != "sdist":
                continue
            target = dest / f["filename"]
            with urllib.request.urlopen(f["url"], timeout=600) as resp, open(target, "wb") as out:
                shutil.copyfileobj(resp, out)
            want = f.get("digests", {}).get("sha256")
            if want and hashlib.sha256(target.read_bytes()).hexdigest() != want:
                target.unlink()
                return False, f"sha256 mismatch for {f['filename']}"
            return True, ""
        return False, "no sdist on PyPI"
    except Exception as exc:  # noqa: BLE001 - network errors, 404, bad JSON
        return False, f"sdist download failed: {exc}"


def _download_sdist_simple(name: str, version: str, dest: Path) -> tuple[bool, str]:
    """Fetch the sdist file of ``name==version`` from PyPI's simple index (PEP 691 JSON), checked against
    its sha256; the JSON API (:func:`_download_sdist`) when the simple index fails. Nothing is built."""
    want = (_canon_name(name), _canon_version(version))
    url = f"https://pypi.org/simple/{_canon_name(name)}/"
    try:
        req = urllib.request.Request(url, headers={"Accept": "application/vnd.pypi.simple.v1+json"})
        with urllib.request.urlopen(req, timeout=120) as resp:
            files = json.load(resp).get("files", [])
        found = [f for f in files if _parse_dist_filename(str(f.get("filename", ""))) == (*want, "sdist")]
        if not found:
            return False, f"no sdist of {name}=={version} in {url}"
        # a pinned release's yanked file is still that release (as pip does for ==), taken last
        f = min(found, key=lambda f: (bool(f.get("yanked")), not f["filename"].endswith(".tar.gz"), f["filename"]))
        target = dest / f["filename"]
        with urllib.request.urlopen(f["url"], timeout=600) as resp, open(target, "wb") as out:
            shutil.copyfileobj(resp, out)
        sha = (f.get("hashes") or {}).get("sha256")
        if sha and hashlib.sha256(target.read_bytes()).hexdigest() != sha:
            target.unlink()
            return False, f"sha256 mismatch for {f['filename']}"
        return True, ""
    except Exception as exc:  # noqa: BLE001 - network errors, 404, bad JSON
        ok, err = _download_sdist(name, version, dest)
        return ok, "" if ok else f"{url}: {exc}; {err}"


def fetch_sdist(
    name: str,
    version: str,
    cache: Path | None = None,
    download: Callable[[str, str, Path], tuple[bool, str]] | None = None,
) -> Path:
    """Path of the cached sdist of ``name==version`` (in ``CACHE/wheels/sdists``, or one dropped in
    ``CACHE/wheels``).

    Without it in the cache, ``download(name, version, dest_dir) -> (ok, error)`` puts it in
    ``dest_dir`` (default: from PyPI's simple index, :func:`_download_sdist_simple`); a cached sdist
    needs no network. Raises :class:`CorpusError` saying where to put the file to run offline."""
    cache = Path(cache) if cache is not None else cache_dir()
    wheels = cache / "wheels" / "sdists"  # not in wheels/ itself, where fetch_wheel would take it for a wheel
    hit = _find_cached(wheels, name, version, "sdist") or _find_cached(wheels.parent, name, version, "sdist")
    if hit is not None:
        return hit
    wheels.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=wheels, prefix=".dl-") as tmp:
        ok, err = (download or _download_sdist_simple)(name, version, Path(tmp))
        got = _find_cached(Path(tmp), name, version, "sdist") if ok else None
        if got is None:
            raise CorpusError(
                f"could not fetch the sdist of {name}=={version}: none in {wheels} and the download "
                f"failed ({_one_line(err or 'no sdist file was written', 300)}); to run offline, "
                f"put NAME-VERSION.tar.gz (or .zip) there"
            )
        final = wheels / got.name
        os.replace(got, final)
    return final


def fetch_wheel(name: str, version: str, cache: Path | None = None) -> Path:
    """Path of a cached distribution of ``name==version``: a wheel, or an sdist only if no wheel exists.

    Looks in ``CACHE/wheels`` first; otherwise downloads with ``pip download --no-deps`` trying
    pure-Python then binary-wheel targets (no package code is run). Raises :class:`CorpusError`.
    """
    cache = Path(cache) if cache is not None else cache_dir()
    wheels = cache / "wheels"
    hit = _find_cached(wheels, name, version)
    if hit is not None:
        return hit
    wheels.mkdir(parents=True, exist_ok=True)
    spec = f"{name}=={version}"
    errors: list[str] = []
    with tempfile.TemporaryDirectory(dir=wheels, prefix=".dl-") as tmp:
        tmp_path = Path(tmp)
        ok = False
        for extra in _download_attempts():
            ok, err = _pip_download(spec, tmp_path, extra)
            if ok and _find_cached(tmp_path, name, version) is not None:
                break
            ok = False
            errors.append(err.strip().splitlines()[-1] if err.strip() else "pip failed")
        if not ok:
            ok, err = _download_sdist(name, version, tmp_path)
            if not ok:
                errors.append(err)
        got = _find_cached(tmp_path, name, version) if ok else None
        if got is None:
            uniq = list(dict.fromkeys(e for e in errors if e))
            raise CorpusError(f"could not fetch {name}=={version}: no wheel or sdist found ({'; '.join(uniq[-3:])})")
        final = wheels / got.name
        os.replace(got, final)  # atomic within the same directory tree
    return final


# --------------------------------------------------------------------------- unpacking


def _safe_rel(name: str) -> PurePosixPath | None:
    p = PurePosixPath(name.replace("\\", "/"))
    if p.is_absolute() or not p.parts or any(part in ("..", "") for part in p.parts):
        return None
    return p


def _is_wheel_metadata(first: str) -> bool:
    return first.endswith(".dist-info") or first.endswith(".data")


def _unpack_wheel(wheel: Path, root: Path, prefix: str) -> list[tuple[str, str]]:
    """Unpack; returns the members that could not be read (repository path, reason)."""
    base = root / prefix if prefix else root
    unread: list[tuple[str, str]] = []
    with zipfile.ZipFile(wheel) as zf:
        for info in zf.infolist():
            if info.is_dir():
                continue
            rel = _safe_rel(info.filename)
            if rel is None or _is_wheel_metadata(rel.parts[0]):
                continue
            dest = base.joinpath(*rel.parts)
            dest.parent.mkdir(parents=True, exist_ok=True)
            _copy_member(lambda i=info: zf.open(i), dest, prefix + rel.as_posix(), unread)
    return unread


def _unpack_sdist(sdist: Path, root: Path) -> list[tuple[str, str]]:
    """An sdist already mirrors the repository: strip its top directory, drop build metadata. Returns the
    members that could not be read (repository path, reason)."""

    def members(stack: ExitStack) -> list[tuple[str, Callable[[], IO[bytes] | None]]]:
        """(member name, opener) of every file; the archive stays open until ``stack`` closes."""
        out: list[tuple[str, Callable[[], IO[bytes] | None]]] = []
        if sdist.name.endswith(".zip"):
            zf = stack.enter_context(zipfile.ZipFile(sdist))
            for info in zf.infolist():
                if not info.is_dir():
                    out.append((info.filename, partial(zf.open, info)))
        else:
            tf = stack.enter_context(tarfile.open(sdist))  # noqa: SIM115 - closed with the stack
            for m in tf.getmembers():
                if m.isfile():
                    out.append((m.name, partial(tf.extractfile, m)))
        return out

    unread: list[tuple[str, str]] = []
    with ExitStack() as stack:
        for name, opener in members(stack):
            rel = _safe_rel(name)
            if rel is None or len(rel.parts) < 2:
                continue
            rel = PurePosixPath(*rel.parts[1:])
            if rel.parts[0].endswith(".egg-info") or rel.as_posix() == "PKG-INFO":
                continue
            dest = root.joinpath(*rel.parts)
            dest.parent.mkdir(parents=True, exist_ok=True)
            _copy_member(opener, dest, rel.as_posix(), unread)
    return unread


def _publish(tmp: Path, final: Path) -> Path:
    """Atomically move a finished temp tree to ``final``; if someone else won, keep theirs."""
    try:
        os.rename(tmp, final)
    except OSError:
        if final.is_dir():
            shutil.rmtree(tmp, ignore_errors=True)
        else:
            raise
    return final


def _unread_path(tree: Path) -> Path:
    return tree.with_name(tree.name + ".unread.json")


def unread_files(tree: str | os.PathLike[str]) -> list[dict[str, str]]:
    """The files of a materialized tree's snapshot that could not be read and were left out of it:
    ``[{"path": repository path, "reason": ...}]`` (empty when the tree is whole)."""
    try:
        data = json.loads(_unread_path(Path(tree)).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return []
    return [{"path": str(d["path"]), "reason": str(d["reason"])} for d in data if isinstance(d, dict) and "path" in d]


def _build_atomically(final: Path, build) -> Path:
    """``build(tmp)`` fills a temporary tree and returns the files it had to leave out, if any: listed
    beside the tree before the tree appears, so a tree is never seen without its list."""
    if final.is_dir():
        return final
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=final.parent, prefix=f".tmp-{final.name}-"))
    try:
        unread = build(tmp) or []
        side = _unread_path(final)
        if unread:
            part = side.with_name(f".{side.name}.{os.getpid()}")
            part.write_text(json.dumps([{"path": p, "reason": r} for p, r in unread], indent=1), encoding="utf-8")
            os.replace(part, side)
        else:
            side.unlink(missing_ok=True)
        return _publish(tmp, final)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


def _slug(s: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", s).strip("_")


# --------------------------------------------------------------------------- reverse patching


def _patched_paths(patch: str) -> list[str]:
    paths = []
    for line in patch.splitlines():
        if line.startswith(("--- ", "+++ ")):
            p = line[4:].split("\t")[0].strip()
            if p != "/dev/null" and "/" in p:
                p = p.split("/", 1)[1]
                if p not in paths:
                    paths.append(p)
    return paths


def _clean_git_env() -> dict[str, str]:
    """The environment for git subprocesses: no inherited ``GIT_*`` (an outer repo's GIT_DIR, the
    caller's GIT_INDEX_FILE...), never an interactive prompt for credentials."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env["GIT_TERMINAL_PROMPT"] = "0"
    env.setdefault("GIT_SSH_COMMAND", "ssh -o BatchMode=yes")
    return env


def _one_line(text: str, limit: int = 500) -> str:
    out = " / ".join(ln.strip() for ln in (text or "").splitlines() if ln.strip())
    return out if len(out) <= limit else out[: limit - 3] + "..."


def _reverse_apply(tree: Path, patch: str) -> tuple[bool, str]:
    """Apply ``patch`` in reverse inside ``tree`` with ``git apply -R`` (exact context, line offsets
    allowed). Without git, ``patch -R -p1 --fuzz=0`` (equally strict). A patch that does not apply
    cleanly is a failure: it is never forced in with fuzz, which could put the code in the wrong place."""
    data = patch if patch.endswith("\n") else patch + "\n"
    if shutil.which("git"):
        env = _clean_git_env()
        env["GIT_CEILING_DIRECTORIES"] = str(tree.parent)  # never treat an enclosing repo as ours
        proc = subprocess.run(
            ["git", "apply", "-R", "--whitespace=nowarn", "-"],
            cwd=tree,
            input=data,
            capture_output=True,
            text=True,
            env=env,
        )
        if proc.returncode == 0:
            return True, ""
        return False, "git apply -R: " + (_one_line(proc.stderr) or f"exit {proc.returncode}")
    if shutil.which("patch"):
        base = ["patch", "-R", "-p1", "--fuzz=0", "--batch", "--no-backup-if-mismatch", "-s"]
        dry = subprocess.run([*base, "--dry-run"], cwd=tree, input=data, capture_output=True, text=True)
        if dry.returncode != 0:
            return False, "patch -R --dry-run: " + _one_line(dry.stdout + dry.stderr)
        proc = subprocess.run(base, cwd=tree, input=data, capture_output=True, text=True)
        if proc.returncode == 0:
            return True, ""
        return False, "patch -R: " + _one_line(proc.stdout + proc.stderr)
    return False, "neither git nor patch is installed"


def _link_tree(src: Path, dst: Path, skip: tuple[str, ...] = ()) -> None:
    """Copy ``src`` into existing ``dst`` using hard links where possible (cheap, shares bytes), without the
    entries of ``src`` itself named in ``skip``."""

    def link_or_copy(s: str, d: str) -> None:
        try:
            os.link(s, d)
        except OSError:
            shutil.copy2(s, d)

    def ignore(folder: str, names: list[str]) -> list[str]:
        return [n for n in names if n in skip] if Path(folder) == src else []

    shutil.copytree(src, dst, copy_function=link_or_copy, dirs_exist_ok=True, ignore=ignore)


def _unshare(path: Path) -> None:
    """Replace a (possibly hard-linked) file by a private copy so editing it leaves the base intact."""
    if path.is_file():
        tmp = path.with_name(path.name + ".unshare")
        shutil.copy2(path, tmp)
        os.replace(tmp, path)


# --------------------------------------------------------------------------- git corpora

_URL_RE = re.compile(r"^(?:[A-Za-z][A-Za-z0-9+.-]*://|[\w.-]+@[\w.-]+:)")
_FULL_SHA_RE = re.compile(r"^[0-9a-fA-F]{40}$")


def _git(
    args: list[str],
    cwd: Path | None = None,
    timeout: float = 600,
    env_extra: dict | None = None,
    input: str | None = None,
) -> subprocess.CompletedProcess:
    env = _clean_git_env()
    if env_extra:
        env.update(env_extra)
    feed = {"input": input} if input is not None else {"stdin": subprocess.DEVNULL}
    try:
        return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, env=env, timeout=timeout, **feed)
    except subprocess.TimeoutExpired as exc:
        raise CorpusError(f"git {args[0]} timed out after {timeout:.0f}s") from exc
    except OSError as exc:  # git not installed
        raise CorpusError(f"cannot run git: {exc}") from exc


def _git_err(proc: subprocess.CompletedProcess) -> str:
    lines = [ln for ln in (proc.stderr or proc.stdout or "").strip().splitlines() if ln.strip()]
    return " / ".join(lines[-2:]) if lines else f"exit {proc.returncode}"


def _repo_name(source: str) -> str:
    tail = source.rstrip("/").replace(":", "/").rsplit("/", 1)[-1]
    tail = tail[:-4] if tail.endswith(".git") else tail
    return _slug(tail)[:40] or "repo"


def _resolve_commit(git_dir: Path, commit: str) -> str | None:
    proc = _git(["--git-dir", str(git_dir), "rev-parse", "--verify", "--quiet", f"{commit}^{{commit}}"])
    return proc.stdout.strip() if proc.returncode == 0 and proc.stdout.strip() else None


def _local_git_dir(path: Path) -> Path:
    proc = _git(["-C", str(path), "rev-parse", "--absolute-git-dir"])
    if proc.returncode != 0:
        raise CorpusError(f"not a git repository: {path} ({_git_err(proc)})")
    return Path(proc.stdout.strip())


def _clone(url: str, cache: Path) -> Path:
    """The bare clone of ``url`` in the cache (cloned on first use, atomically)."""
    final = cache / "git" / f"{_repo_name(url)}-{hashlib.sha256(url.encode()).hexdigest()[:10]}.git"
    if final.is_dir():
        return final
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=final.parent, prefix=f".tmp-{final.name}-"))
    try:
        proc = _git(["clone", "--bare", "--quiet", url, str(tmp / "repo.git")], timeout=3600)
        if proc.returncode != 0:
            raise CorpusError(f"git clone {url} failed: {_git_err(proc)}")
        return _publish(tmp / "repo.git", final)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _git_source(source: str, cache: Path) -> tuple[Path, str, bool]:
    """(git dir, identity of the repository, is a clone) for a corpus' ``git`` value."""
    if _URL_RE.match(source):
        return _clone(source, cache), source, True
    path = Path(source).expanduser().resolve()
    if not path.is_dir():
        raise CorpusError(f"no such git repository: {source}")
    return _local_git_dir(path), str(path), False


def _find_commit(git_dir: Path, commit: str, is_clone: bool, source: str) -> str:
    sha = _resolve_commit(git_dir, commit)
    if sha is None and is_clone:  # a commit newer than the clone, or only on a PR ref: fetch and retry
        _git(["--git-dir", str(git_dir), "fetch", "--quiet", "origin", commit], timeout=3600)
        _git(
            ["--git-dir", str(git_dir), "fetch", "--quiet", "--tags", "origin", "+refs/heads/*:refs/heads/*"],
            timeout=3600,
        )
        sha = _resolve_commit(git_dir, commit)
    if sha is None:
        raise CorpusError(f"commit {commit} not found in {source}")
    return sha


def _repository(git_dir: Path, sha: str, dest: Path) -> Path:
    """Make ``dest`` a git repository whose HEAD is ``sha`` (detached) and whose objects are ``git_dir``'s, read in
    place (``objects/info/alternates``; nothing is copied, and nothing is written to ``git_dir``): a checkout at
    that commit as a user has it, so that ``repoctx index`` mines its history, which ends at ``sha`` (no commit
    after it, no other ref). A shallow ``git_dir``'s boundary comes along. Returns the new git dir."""
    # where the objects and the shallow list are (a linked worktree's are its main repository's); git names them
    # from the current folder, as it was given the git dir
    proc = _git(["--git-dir", str(git_dir), "rev-parse", "--git-path", "objects", "--git-path", "shallow"])
    named = proc.stdout.splitlines() if proc.returncode == 0 else []
    if len(named) != 2:
        named = [str(git_dir / "objects"), str(git_dir / "shallow")]
    objects, shallow = (Path(n).resolve() for n in named)
    proc = _git(["init", "--quiet", "--template=", str(dest)])
    if proc.returncode != 0:
        raise CorpusError(f"git init failed: {_git_err(proc)}")
    new = dest / ".git"
    info = new / "objects" / "info"
    info.mkdir(parents=True, exist_ok=True)
    (info / "alternates").write_text(f"{objects}\n", encoding="utf-8")
    if shallow.is_file():
        shutil.copyfile(shallow, new / "shallow")
    (new / "HEAD").write_text(sha + "\n", encoding="ascii")
    # a partial clone's promisor remote comes along: its missing blobs are fetched from there as the source would
    # (into this repository), and its history is mined as a partial clone's, with no blob asked for
    proc = _git(["--git-dir", str(git_dir), "config", "--get-regexp", r"^(remote\..*|extensions\.partialclone)$"])
    entries = [ln.partition(" ") for ln in proc.stdout.splitlines()] if proc.returncode == 0 else []
    if any(k == "extensions.partialclone" or (k.endswith(".promisor") and v.lower() != "false") for k, _, v in entries):
        _git(["--git-dir", str(new), "config", "core.repositoryformatversion", "1"])
        for key, _, value in entries:
            _git(["--git-dir", str(new), "config", "--add", key, value])
    return new


def _checkout(
    git_dir: Path, sha: str, dest: Path, prefix: str = "", index: Path | None = None
) -> list[tuple[str, str]]:
    """Write the files of commit ``sha`` under ``dest`` (a private index, or ``index`` with the written files'
    stat data, as a checkout's own; the repository is not touched).
    Returns the files git could not write (repository path with ``prefix``, reason): one blob that cannot
    be read (a partial clone that never fetched it, a corrupt object) costs that file, not the commit.
    git stops at such a file, naming its blob or path: it is left out and the files not yet written are
    checked out again."""
    with tempfile.TemporaryDirectory(prefix="repoctx-gitidx-") as tmp:
        env = {"GIT_INDEX_FILE": str(index or Path(tmp) / "index")}
        base = ["--git-dir", str(git_dir), "--work-tree", str(dest)]
        proc = _git([*base, "read-tree", sha], env_extra=env)
        if proc.returncode != 0:
            raise CorpusError(f"git read-tree {sha[:12]} failed: {_git_err(proc)}")
        dest.mkdir(parents=True, exist_ok=True)
        checkout = [*base, "checkout-index", "--force", *(("--index",) if index else ()), f"--prefix={dest}/"]
        proc = _git([*checkout, "--all"], env_extra=env, timeout=3600)
        if proc.returncode == 0:
            return []
        listed = _git([*base, "ls-files", "-z", "--stage"], env_extra=env)
        entries = []  # (blob, path) of every file but submodules (mode 160000: never written)
        for e in listed.stdout.split("\0"):
            meta, _, path = e.partition("\t")
            parts = meta.split()
            if path and len(parts) == 3 and parts[0] != "160000":
                entries.append((parts[1], path))
        unread: dict[str, str] = {}
        while proc.returncode != 0:
            lines = [ln.strip() for ln in (proc.stderr or "").splitlines() if ln.strip()]
            bad = [
                (blob, path)
                for blob, path in entries
                if path not in unread
                and any(blob in ln or re.search(rf"(?<![\w./-]){re.escape(path)}(?![\w./-])", ln) for ln in lines)
            ]
            if listed.returncode != 0 or not bad or len(unread) + len(bad) >= len(entries):
                raise CorpusError(f"git checkout-index {sha[:12]} failed: {_git_err(proc)}")
            for blob, path in bad:
                said = [ln for ln in lines if blob in ln or path in ln]
                unread[path] = "git checkout-index: " + _one_line(" / ".join(dict.fromkeys(lines[:1] + said)), 300)
                target = dest / path
                if target.is_file() or target.is_symlink():
                    target.unlink()  # (git leaves the file it could not fill empty)
            rest = [p for _, p in entries if p not in unread and not os.path.lexists(dest / p)]
            if not rest:
                break
            proc = _git([*checkout, "--stdin", "-z"], env_extra=env, timeout=3600, input="\0".join(rest) + "\0")
        return [(prefix + path, reason) for path, reason in unread.items()]


def _git_base(corpus: dict, prefix: str, cache: Path) -> tuple[str, Path, Any]:
    """(key, final tree path, builder) of a git corpus; git runs only when the tree is not cached
    (or the commit is not given as a full SHA)."""
    source, commit = str(corpus["git"]), corpus.get("commit")
    if not commit or not isinstance(commit, str):
        raise CorpusError(f"git corpus {source} has no 'commit'")
    state: dict[str, Any] = {}

    def locate() -> tuple[Path, str, bool]:
        if "src" not in state:
            state["src"] = _git_source(source, cache)
        return state["src"]

    if _URL_RE.match(source):
        ident = source
    else:
        ident = str(Path(source).expanduser().resolve())
    if _FULL_SHA_RE.match(commit):
        sha = commit.lower()
    else:
        git_dir, ident, is_clone = locate()
        sha = _find_commit(git_dir, commit, is_clone, source)
    # "-co": a checkout with its history (trees of earlier versions, files only, had no suffix; rebuilt)
    key = f"{_repo_name(source)}-{hashlib.sha256(ident.encode()).hexdigest()[:8]}-{sha[:12]}" + (
        f"--{_slug(prefix.replace('/', '_'))}" if prefix else "-co"
    )

    def build(tmp: Path) -> list[tuple[str, str]]:
        git_dir, _, is_clone = locate()
        full = _find_commit(git_dir, sha, is_clone, source)
        if prefix:  # the files under a folder of the tree: no checkout of its own, so no history
            return _checkout(git_dir, full, tmp / prefix, prefix)
        own = _repository(git_dir, full, tmp)  # the files checked out by the source, as before: its fetches too
        return _checkout(git_dir, full, tmp, index=own / "index")

    return key, cache / "trees" / "git" / key, build


# --------------------------------------------------------------------------- public API


def corpus_kind(row: dict) -> str:
    """``"pypi"`` or ``"git"``; :class:`CorpusError` when the row names no corpus it can build."""
    corpus = row.get("corpus")
    if isinstance(corpus, dict):
        if corpus.get("pypi"):
            if not corpus.get("version"):
                raise CorpusError(f"pypi corpus {corpus['pypi']} has no 'version'")
            return "pypi"
        if corpus.get("git"):
            return "git"
    raise CorpusError(
        'no corpus: expected {"pypi": NAME, "version": V} or {"git": PATH_OR_URL, '
        f'"commit": SHA}}, got {json.dumps(corpus)[:200]}'
    )


TREES = ("wheel", "sdist")


def materialize(
    row: dict,
    cache: Path | None = None,
    tree: str = "wheel",
    download_sdist: Callable[[str, str, Path], tuple[bool, str]] | None = None,
) -> Path:
    """Directory laid out like the repository for ``row`` (corpus file ``f`` at ``path_prefix + f``).

    ``tree="sdist"``: a PyPI corpus is the release's sdist instead of its wheel (top folder stripped,
    tests and docs included; ``download_sdist`` as in :func:`fetch_sdist`); a git corpus is the same
    checkout in either mode. Rows with ``revert_patch`` get a private tree per ``instance_id`` with the
    patch reversed.
    Idempotent: the same input returns the same path without redoing work. Raises
    :class:`CorpusError` for anything that keeps the tree from being built.
    """
    cache = Path(cache) if cache is not None else cache_dir()
    if tree not in TREES:
        raise ValueError(f"tree must be one of {TREES}, got {tree!r}")
    kind = corpus_kind(row)
    corpus = row["corpus"]
    prefix = corpus.get("path_prefix") or ""
    if prefix and not prefix.endswith("/"):
        prefix += "/"
    if prefix and _safe_rel(prefix.rstrip("/")) is None:
        raise CorpusError(f"bad path_prefix {prefix!r}")
    trees = cache / "trees"
    iid = row.get("instance_id") or "row"

    if kind == "git":
        key, base_final, build_base = _git_base(corpus, prefix, cache)
        what = f"{corpus['git']}@{str(corpus['commit'])[:12]}"
    elif tree == "sdist":
        name, version = str(corpus["pypi"]), str(corpus["version"])
        key = f"sdist-{_canon_name(name)}-{_slug(version)}"
        base_final = trees / "sdist" / key[len("sdist-") :]
        what = f"{name}=={version} (sdist)"

        def build_base(tmp: Path) -> list[tuple[str, str]]:
            dist = fetch_sdist(name, version, cache, download_sdist)
            try:
                return _unpack_sdist(dist, tmp)
            except (zipfile.BadZipFile, tarfile.TarError, OSError) as exc:
                raise CorpusError(f"cannot unpack {dist.name} for {name}=={version}: {exc}") from exc
    else:
        name, version = str(corpus["pypi"]), str(corpus["version"])
        key = f"{_canon_name(name)}-{_slug(version)}" + (f"--{_slug(prefix.replace('/', '_'))}" if prefix else "")
        base_final = trees / key
        what = f"{name}=={version}"

        def build_base(tmp: Path) -> list[tuple[str, str]]:
            dist = fetch_wheel(name, version, cache)
            try:
                if dist.name.endswith(".whl"):
                    return _unpack_wheel(dist, tmp, prefix)
                return _unpack_sdist(dist, tmp)
            except (zipfile.BadZipFile, tarfile.TarError, OSError) as exc:
                raise CorpusError(f"cannot unpack {dist.name} for {name}=={version}: {exc}") from exc

    revert = row.get("revert_patch")
    if revert:
        digest = hashlib.sha256(f"{key}\0{revert}".encode()).hexdigest()[:10]
        final = trees / "reverted" / f"{_slug(iid)}-{digest}"
        if final.is_dir():
            return final

    base = _build_atomically(base_final, build_base)
    if not revert:
        return base

    def build_reverted(tmp: Path) -> list[tuple[str, str]]:
        # without the checkout's .git: its history would reach the commit whose change is reverted (the answer)
        _link_tree(base, tmp, skip=(".git",))
        for rel in _patched_paths(revert):
            _unshare(tmp / rel)
        ok, err = _reverse_apply(tmp, revert)
        if not ok:
            raise CorpusError(f"revert patch does not apply for {iid} ({what}): {err}")
        return [(d["path"], d["reason"]) for d in unread_files(base)]  # what the release lacks, this tree lacks

    return _build_atomically(final, build_reverted)


def load_rows(path: str | os.PathLike[str], limit: int | None = None) -> list[dict]:
    """Rows of a JSONL evaluation file (blank lines skipped), at most ``limit`` of them."""
    rows: list[dict] = []
    with open(path, encoding="utf-8") as fh:
        for line in fh:
            if limit is not None and len(rows) >= limit:
                break
            line = line.strip()
            if line:
                rows.append(json.loads(line))
    return rows
