"""ingest → capsules → graph → store, incrementally, in one transaction per update.

A ``kill -9`` at any moment leaves the previous committed index whole (SQLite WAL); the next
update redoes what was lost. Only one indexer writes at a time (a lock file); readers never wait.
"""

from __future__ import annotations

import gc
import hashlib
import json
import logging
import os
import re
import subprocess
import threading
import time
from collections.abc import Callable, Generator, Iterator
from contextlib import closing, contextmanager
from dataclasses import asdict, dataclass, field, fields
from operator import attrgetter
from pathlib import Path
from typing import Any

from repoctx.capsules.fallback import parse_any
from repoctx.capsules.parse import PARSER_VERSION, ParsedFile, lexical_bodies
from repoctx.config import Settings
from repoctx.graph import (
    Cand,
    Resolver,
    SrcInfo,
    ancestors,
    class_of,
    contains_edges,
    file_bases,
    ref_key,
    resolve_file,
)
from repoctx.heap import trim
from repoctx.ingest.walk import SourceFile, WalkReport, load_text, walk
from repoctx.store.base import FileRecord, IndexBusy, RepoWriter, Store, capsule_id  # noqa: F401 (IndexBusy re-exported)
from repoctx.tokens import TOKENIZER_VERSION
from repoctx.types import Capsule, Edge, Ref

ProgressFn = Callable[[dict], None]
log = logging.getLogger("repoctx.indexer")


@dataclass
class UpdateReport:
    files_seen: int = 0
    added: list[str] = field(default_factory=list)
    modified: list[str] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)
    unchanged: int = 0
    capsules_written: int = 0
    edges_reresolved: int = 0
    skipped: list[tuple[str, str]] = field(default_factory=list)
    invalid_utf8: list[str] = field(default_factory=list)
    syntax_errors: list[str] = field(default_factory=list)
    redacted: list[str] = field(default_factory=list)
    seconds: float = 0.0
    git_head: str | None = None
    git_dirty: bool | None = None
    notes: list[str] = field(default_factory=list)  # what the user should hear about this update
    # an update that changed nothing: the store's record of the last one that did (``last_change``), which
    # may have been another process's (an MCP server's or the service's background refresh)
    previous_change: dict | None = None
    # for the vector fill, not the report: the files whose units this update rewrote or removed, and the
    # repository's generation it wrote (``vectors.fill_vectors`` patches the last set with those files' units)
    written: list[str] = field(default_factory=list)
    generation: int | None = None

    @property
    def changed(self) -> bool:
        return bool(self.added or self.modified or self.deleted)

    def to_dict(self) -> dict:
        d = asdict(self)
        del d["written"], d["generation"]
        d["skipped"] = [{"path": p, "reason": r} for p, r in self.skipped]
        return d


def file_hash(data: bytes) -> str:
    return hashlib.blake2b(data, digest_size=16).hexdigest()


def classify(sf: SourceFile, rec: FileRecord | None, need_data: bool) -> tuple[str, bytes | None, str | None]:
    """unchanged (same mtime and size) | touched (new mtime, same content) | changed, with the bytes and
    their hash when read. A new file is read only when the caller needs its bytes. Raises OSError."""
    if rec is not None and rec.size == sf.size and rec.mtime_ns == sf.mtime_ns:
        return "unchanged", None, None
    if rec is None and not need_data:
        return "changed", None, None
    data = sf.abspath.read_bytes()
    h = file_hash(data)
    if rec is not None and rec.hash == h:
        return "touched", None, None
    return "changed", data, h


def git_state(root: Path) -> tuple[str | None, bool | None]:
    """(HEAD, dirty) of the git checkout holding ``root``; (None, None) outside git. A repository git refuses
    because another user owns it ('dubious ownership', ``safe.directory``) still gets its HEAD, read from the
    ``.git`` files (dirty: None), and one warning per process."""
    try:
        head = _git(root, "rev-parse", "HEAD", timeout=10)
        if head.returncode != 0:
            if "dubious ownership" in head.stderr or "safe.directory" in head.stderr:
                _warn_untrusted(root)
                return read_git_head(root), None
            return None, None
        dirty = _git(root, "status", "--porcelain", "--untracked-files=no", timeout=30)
        return head.stdout.strip(), bool(dirty.stdout.strip())
    except (OSError, subprocess.SubprocessError):
        return None, None


class _Beside:
    """``fn(*args)`` run in a thread from now on; ``result()`` waits for it and returns it (or raises what it did).
    What ``ThreadPoolExecutor(1).submit(...).result()`` gives, without importing concurrent.futures (~6 ms a process,
    on the one-file update's path)."""

    def __init__(self, fn: Callable[..., Any], *args: Any) -> None:
        self._out: list[Any] = []
        self._err: list[BaseException] = []
        self._thread = threading.Thread(target=self._run, args=(fn, args), name="repoctx-beside", daemon=True)
        self._thread.start()

    def _run(self, fn: Callable[..., Any], args: tuple) -> None:
        try:
            self._out.append(fn(*args))
        except BaseException as e:  # noqa: BLE001 - handed to the caller by result()
            self._err.append(e)

    def result(self) -> Any:
        self._thread.join()
        if self._err:
            raise self._err[0]
        return self._out[0]


def _git(root: Path, *args: str, timeout: float) -> subprocess.CompletedProcess:
    env = {**os.environ, "LC_ALL": "C", "LANGUAGE": ""}  # English messages: the refusal is recognised by its words
    return subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, timeout=timeout, env=env)


_untrusted_warned: set[str] = set()  # roots whose refusal this process has reported (once each, not per update)
_untrusted_lock = threading.Lock()


def _warn_untrusted(root: Path) -> None:
    key = str(Path(root).resolve())
    with _untrusted_lock:
        if key in _untrusted_warned:
            return
        _untrusted_warned.add(key)
    log.warning(
        "git refuses to read %s: the repository belongs to another user (git's safe.directory check). "
        "repoctx read its HEAD from .git and cannot tell whether the tree is dirty; to let git read it: "
        "git config --global --add safe.directory %s",
        key,
        key,
    )


_SHA = re.compile(r"^[0-9a-f]{40}([0-9a-f]{24})?$")


def read_git_head(root: Path) -> str | None:
    """The commit HEAD names, read from the files of the ``.git`` holding ``root`` (a folder, or a worktree's
    ``gitdir:`` file), loose refs then packed-refs. No git runs: a repository another user owns is never asked
    to run its own configuration (hooks, fsmonitor, filters) on our behalf."""
    try:
        start = Path(root).resolve()
        dotgit = next((d / ".git" for d in (start, *start.parents) if (d / ".git").exists()), None)
        if dotgit is None:
            return None
        gitdir = dotgit
        if dotgit.is_file():
            line = dotgit.read_text(encoding="utf-8", errors="replace").strip()
            if not line.startswith("gitdir:"):
                return None
            gitdir = (dotgit.parent / line[len("gitdir:") :].strip()).resolve()
        common = gitdir
        if (gitdir / "commondir").is_file():
            common = (gitdir / (gitdir / "commondir").read_text(encoding="utf-8").strip()).resolve()
        head = (gitdir / "HEAD").read_text(encoding="utf-8", errors="replace").strip()
        for _ in range(5):  # a symbolic ref may name another symbolic ref
            if _SHA.match(head):
                return head
            if not head.startswith("ref:"):
                return None
            ref = head[4:].strip()
            if not ref.startswith("refs/") or ".." in ref.split("/"):
                return None
            head = ""
            for base in (gitdir, common):
                if (base / ref).is_file():
                    head = (base / ref).read_text(encoding="utf-8", errors="replace").strip()
                    break
            else:
                packed = common / "packed-refs"
                lines = packed.read_text(encoding="utf-8", errors="replace").splitlines() if packed.is_file() else []
                head = next((ln.split(" ", 1)[0] for ln in lines if ln.endswith(" " + ref)), "")
        return None
    except (OSError, ValueError):
        return None


class StoreLookup:
    """Resolver lookups answered by the store (sees the transaction's own writes), memoised per update."""

    def __init__(self, store: RepoWriter):
        self.store = store
        self._names: dict[str, list[Cand]] = {}
        self._mods: dict[str, Cand | None] = {}

    def by_name(self, name: str) -> list[Cand]:
        if name not in self._names:
            self._names[name] = [Cand(*r) for r in self.store.cands_by_name(name)]
        return self._names[name]

    def module(self, key: str) -> Cand | None:
        if key not in self._mods:
            row = self.store.module_cand(key)
            self._mods[key] = Cand(*row) if row else None
        return self._mods[key]

    def bases(self, class_id: str) -> list[tuple[str, str, str]]:
        # not memoised: an update writes inheritance edges while it resolves
        return self.store.bases_of([class_id]).get(class_id, [])


def _parse_one(sf: SourceFile, data: bytes, settings: Settings, repo: str) -> tuple[ParsedFile | None, str, dict]:
    """Parse one file's bytes; returns (parsed or None, note, flags). Never raises on content.
    Capsule ids come back namespaced by the repository."""
    loaded = load_text(data, redact_secrets=not settings.index_secrets, path=sf.path)
    if loaded is None:
        return None, "binary", {}
    if loaded.minified:
        return None, "minified", {}
    flags = {"invalid_utf8": loaded.invalid_utf8, "redactions": loaded.redactions, "text": grep_text(loaded.text)}
    from repoctx.capsules.fallback import windows

    try:
        if settings.parse_mode == "windows":
            pf = windows(sf.path, loaded.text, sf.language, settings.window_chunk_size, settings.window_overlap)
        else:
            pf = parse_any(sf.path, loaded.text, sf.language, settings.window_chunk_size, settings.window_overlap)
    except Exception as e:  # noqa: BLE001 - a parser bug must cost one file, not the index
        pf = windows(sf.path, loaded.text, sf.language, settings.window_chunk_size, settings.window_overlap)
        flags["parse_failed"] = f"{type(e).__name__}"
    pf = namespaced(pf, repo)
    flags["bodies"] = lexical_bodies(pf.capsules)
    return pf, "", flags


# A cold or large update parses in a forked worker process while this one writes what was parsed (tokens, FTS rows,
# grep's text): the two halves take about as long, and the machine has a second core for one of them. Below this many
# files (a one-file update) the fork is not worth its cost; a caller with other threads never forks (a lock another
# thread holds would stay held in the child).
PIPELINE_MIN_FILES = 200
_BATCH_FILES = 16  # files per message from the worker: fewer, larger pickles, and writes start soon
_AHEAD = 32  # messages read ahead of the writer at most (what a slow writer holds in memory)
# The worker also makes a file's tokens (the writer's largest share of Python work) when the writer is this many files
# behind it; when the writer is keeping up, the writer makes them: whichever side has time does it.
_TOKENIZE_BEHIND = 2 * _BATCH_FILES
# Both processes give their heap's free pages back every this many files: the worker's file bytes once parsed, each
# batch's pickles and the writer's unpacked results are freed but glibc keeps the pages, so both grew to their peak
# together (Django's cold index: the pair's summed PSS peaked at ~265 MiB, ~230 with this; a trim takes ~1 ms).
_TRIM_FILES = 8 * _BATCH_FILES


# what parse_stream yields after every file's result; after it, edges a worker resolved ({path: [Edge]}, a few
# files at a time) and LINKED once every parsed file's were given
PARSED_ALL = object()
LINKED = object()


def parse_stream(
    to_parse: list[tuple[SourceFile, bytes | None, str]],
    settings: Settings,
    repo: str,
    ahead: Callable[[list, dict, str | None], dict] | None = None,
    link: bool = False,
    idle: Callable[[], bool] | None = None,
) -> Generator[Any, None, None]:
    """``_parse_one`` of each file, in order: in a worker process for a large update where one can be forked, else
    here. The caller may drop each file's bytes from ``to_parse`` once its result is yielded. A worker that dies or
    fails leaves the files it did not return to be parsed here: the results are the same either way. A worker also
    makes what the store's writer would make of each file when the writer is behind (``ahead``, flag ``ahead``:
    SQLite's compressed text and its units' postings), so the writer only writes them.
    After the results comes ``PARSED_ALL``; then, with ``link`` (a cold update: every unit is among these files)
    and a worker that parsed them all, each file's edges as it resolved them over those files (while the writer
    writes its last files), {path: [Edge, ...]} a few files at a time in their order, and ``LINKED`` after the last.
    Whatever files the worker did not link (none, or it died) the caller resolves itself. While nothing from a
    worker is there to give, ``idle()`` is called (the writer's work that can wait; it says whether it did any)."""
    start = 0
    said_all = False
    if len(to_parse) >= PIPELINE_MIN_FILES and _can_fork():
        for item in _parse_in_worker(to_parse, settings, repo, ahead, link, idle):
            if item is PARSED_ALL:
                said_all = True
            elif item is not LINKED and not isinstance(item, dict):  # a file's result (edges come after PARSED_ALL)
                start += 1
            yield item
    for sf, data, _h in to_parse[start:]:  # what no worker parsed (none, or one that died)
        assert data is not None
        yield _parse_one(sf, data, settings, repo)
    if not said_all:
        yield PARSED_ALL


def _can_fork() -> bool:
    import multiprocessing

    return threading.active_count() == 1 and "fork" in multiprocessing.get_all_start_methods()


def _parse_worker(
    to_parse: list[tuple[SourceFile, bytes | None, str]],
    settings: Settings,
    repo: str,
    ahead: Callable[[list, dict, str | None], dict] | None,
    link: bool,
    conn,
    consumed,
) -> None:
    """The forked child: parse every file (it has their bytes from the fork) and send the results in order, in
    batches, as plain tuples (a dataclass pickles several times slower). ``consumed``: how many results the writer
    has taken (shared memory)."""
    import pickle

    gc.disable()  # a short-lived process: its garbage goes with it
    batch: list = []
    kept: list[ParsedFile] = []  # with ``link``: every file's units and references, their texts let go once sent

    try:
        sent_upto = 0
        for produced, (sf, data, _h) in enumerate(to_parse):
            assert data is not None
            to_parse[produced] = None  # type: ignore[call-overload]  # this copy's bytes go once parsed
            pf, note, flags = _parse_one(sf, data, settings, repo)
            del data
            if pf is not None and ahead is not None and produced - consumed.value > _TOKENIZE_BEHIND:
                flags["ahead"] = ahead(pf.capsules, flags["bodies"], flags.get("text"))
            batch.append((_pack(pf) if pf is not None else None, note, flags))
            if pf is not None and link:
                kept.append(pf)
            if len(batch) >= _BATCH_FILES:
                conn.send_bytes(pickle.dumps(batch, pickle.HIGHEST_PROTOCOL))
                batch = []
                sent_upto = _let_texts_go(kept, sent_upto)
                if produced % _TRIM_FILES < _BATCH_FILES:
                    trim()
        if batch:
            conn.send_bytes(pickle.dumps(batch, pickle.HIGHEST_PROTOCOL))
            batch = []
            _let_texts_go(kept, sent_upto)
        conn.send_bytes(pickle.dumps(("parsed",), pickle.HIGHEST_PROTOCOL))
        if link:
            for chunk in _link(kept):
                conn.send_bytes(pickle.dumps(("edges", chunk), pickle.HIGHEST_PROTOCOL))
            conn.send_bytes(pickle.dumps(("linked",), pickle.HIGHEST_PROTOCOL))
    except BaseException as e:  # noqa: BLE001 - the parent parses what is left itself
        log.debug("parse worker stopped: %r", e)
    finally:
        conn.close()


def _let_texts_go(kept: list[ParsedFile], start: int) -> int:
    """The sent files' unit texts and docstrings dropped (linking reads names only); returns how many are done."""
    for pf in kept[start:]:
        for c in pf.capsules:
            c.text = c.docstring = ""
    return len(kept)


_EDGE_FIELDS = attrgetter(*(f.name for f in fields(Edge)))


_LINK_FILES = 256  # files whose edges go in one message from the worker


def _link(parsed: list[ParsedFile]) -> Iterator[dict[str, list[tuple]]]:
    """Each file's edges, resolved over these files alone (a cold update: they are every unit there is), as the
    writer resolves them (``_all_bases``, ``_file_edges``). As tuples (``Edge(*t)``), ``_LINK_FILES`` files at a
    time, in their order."""
    resolver, memory = _memory_resolver(parsed)
    bases = _all_bases(resolver, parsed, memory)
    for a in range(0, len(parsed), _LINK_FILES):
        yield {
            pf.path: [_EDGE_FIELDS(e) for e in _file_edges(resolver, pf, bases)] for pf in parsed[a : a + _LINK_FILES]
        }


def _memory_resolver(parsed: list[ParsedFile]) -> tuple[Resolver, Any]:
    """A resolver over these files' units alone (a cold update's), and its lookup."""
    from repoctx.graph import MemoryLookup

    memory = MemoryLookup([c for pf in parsed for c in pf.capsules], {pf.path: pf.module for pf in parsed})
    return Resolver(memory), memory


def _all_bases(resolver: Resolver, parsed: list[ParsedFile], memory: Any = None) -> dict[str, list]:
    """The base classes of every parsed file's classes, resolved first, so a call through a class parsed later in
    the update resolves (given to ``memory``, a MemoryLookup, for its inherited-method lookups)."""
    bases: dict[str, list] = {}
    for pf in parsed:
        bases.update(file_bases(resolver, pf.capsules, pf.refs, pf.imports, pf.module))
    if memory is not None:
        memory.add_bases(bases)
    return bases


def _file_edges(resolver: Resolver, pf: ParsedFile, bases: dict[str, list]) -> list[Edge]:
    """One file's edges: containment, then its calls, imports and inheritance as resolved."""
    return contains_edges(pf.capsules) + resolve_file(resolver, pf.capsules, pf.refs, pf.imports, pf.module, bases)


def _put_edges(store: RepoWriter, edges: list[Edge], path: str) -> None:
    store.put_edges(((e, ref_key(e.dst_name) if e.kind != "contains" else None) for e in edges), path)


def _parse_in_worker(
    to_parse: list[tuple[SourceFile, bytes | None, str]],
    settings: Settings,
    repo: str,
    ahead: Callable[[list, dict, str | None], dict] | None,
    link: bool = False,
    idle: Callable[[], bool] | None = None,
) -> Iterator[Any]:
    """Results from a forked worker for a prefix of ``to_parse`` (all of it unless the worker died). A thread reads
    the pipe ahead (its reads release the GIL) so the worker never waits on the writer for long."""
    import multiprocessing
    import pickle
    import queue

    ctx = multiprocessing.get_context("fork")
    recv, send = ctx.Pipe(duplex=False)
    consumed = ctx.Value("q", 0, lock=False)  # one writer (here), one reader (the worker): no lock needed
    try:
        proc = ctx.Process(
            target=_parse_worker, args=(to_parse, settings, repo, ahead, link, send, consumed), daemon=True
        )
        proc.start()
    except OSError as e:  # no fork (memory, process limits): parse here
        log.debug("no parse worker: %r", e)
        recv.close()
        send.close()
        return
    send.close()
    inbox: queue.Queue[bytes | None] = queue.Queue(maxsize=_AHEAD)

    def pump() -> None:
        try:
            while True:
                inbox.put(recv.recv_bytes())
        except (EOFError, OSError):
            pass
        finally:
            inbox.put(None)

    reader = threading.Thread(target=pump, name="repoctx-parse-pipe", daemon=True)
    reader.start()

    def receive() -> bytes | None:
        while idle is not None:
            try:
                return inbox.get_nowait()
            except queue.Empty:
                if not idle():
                    break
        return inbox.get()

    try:
        while (msg := receive()) is not None:
            got = pickle.loads(msg)
            if isinstance(got, tuple):  # ("parsed",), then ("edges", {path: [edge fields]}) ..., ("linked",)
                if got[0] == "parsed":
                    yield PARSED_ALL
                elif got[0] == "edges":
                    yield {p: [Edge(*t) for t in es] for p, es in got[1].items()}
                else:
                    yield LINKED
                continue
            for packed, note, flags in got:
                consumed.value += 1
                yield (_unpack(packed) if packed is not None else None), note, flags
    finally:
        if proc.is_alive():  # the caller stopped early (an error while writing): the worker's results are moot
            proc.kill()
        while reader.is_alive():  # let the reader see EOF (the queue may be full)
            try:
                inbox.get(timeout=0.1)
            except queue.Empty:
                pass
        proc.join()
        recv.close()


# a unit's and a reference's fields in their dataclass's order, as one tuple (pickled several times faster than the
# dataclass; ``Capsule(*t)`` and ``Ref(*t)`` make them again)
_CAPSULE_FIELDS = attrgetter(*(f.name for f in fields(Capsule)))
_REF_FIELDS = attrgetter(*(f.name for f in fields(Ref)))


def _pack(pf: ParsedFile) -> tuple:
    return (
        pf.path,
        pf.language,
        pf.module,
        [_CAPSULE_FIELDS(c) for c in pf.capsules],
        [_REF_FIELDS(r) for r in pf.refs],
        pf.imports,
        pf.syntax_errors,
        pf.method,
    )


def _unpack(t: tuple) -> ParsedFile:
    path, language, module, caps, refs, imports, syntax_errors, method = t
    return ParsedFile(
        path, language, module, [Capsule(*c) for c in caps], [Ref(*r) for r in refs], imports, syntax_errors, method
    )


def passed_over(data: bytes) -> str | None:
    """Why ``_parse_one`` would index nothing of these bytes ("binary", "minified"), judged as it judges them
    but without the secret scan: a new file the store holds nothing of is then not parsed, and an update that
    meets only such files (Django's sdist has four) writes nothing."""
    loaded = load_text(data, redact_secrets=False)
    if loaded is None:
        return "binary"
    return "minified" if loaded.minified else None


def grep_text(text: str) -> str:
    """The text kept for grep: the parsed text itself (decoded, line ends made ``\n``, secrets redacted as in the
    capsules), with NUL characters as U+FFFD, which PostgreSQL's text cannot hold (both backends keep the same)."""
    return text.replace("\x00", "\ufffd")


def _texts_to_keep(
    files: list[SourceFile], stored: dict[str, FileRecord], changed: set[str], settings: Settings
) -> list[tuple[str, str]]:
    """(path, text) of the unchanged files the store keeps no text of (indexed before grep existed): read and
    redacted as an update reads them, so grep covers every indexed file without parsing them again."""
    out = []
    for sf in files:
        rec = stored.get(sf.path)
        if rec is None or rec.text_hash or sf.path in changed:
            continue
        try:
            loaded = load_text(sf.abspath.read_bytes(), redact_secrets=not settings.index_secrets, path=sf.path)
        except OSError:
            continue
        if loaded is not None:
            out.append((sf.path, grep_text(loaded.text)))
    return out


def namespaced(pf: ParsedFile, repo: str) -> ParsedFile:
    """The parser's ids (``path#qualname``) made store-wide (``repo:path#qualname``): one string per unit, shared
    by its children's ``parent`` and its references' ``src`` (a string each held 35 MiB at Django's cold peak)."""
    ids: dict[str, str] = {}

    def store_wide(local: str) -> str:
        got = ids.get(local)
        if got is None:
            got = ids[local] = capsule_id(repo, local)
        return got

    for c in pf.capsules:
        c.id = store_wide(c.id)
        c.parent = store_wide(c.parent) if c.parent else None
        c.repo = repo
        for attr in ("docstring", "signature", "text", "returns"):  # a docstring's '\x00' escape is a real NUL
            value = getattr(c, attr, None)  # once decoded; PostgreSQL's text refuses it: U+FFFD on both backends
            if isinstance(value, str) and "\x00" in value:
                setattr(c, attr, value.replace("\x00", "\ufffd"))
    for r in pf.refs:
        r.src = store_wide(r.src)
    return pf


def update_index(
    root: Path, store: RepoWriter, settings: Settings, progress: ProgressFn | None = None, *, by: str = "index update"
) -> UpdateReport:
    """Bring the store up to date with the files under root. One transaction. ``by`` names who updates
    (e.g. "background refresh of the MCP server"): it is kept with a change, so an update that finds nothing
    left to do can say which one applied it."""
    t0 = time.perf_counter()
    report = UpdateReport()
    walk_report = WalkReport()
    emit = progress or (lambda e: None)
    # git's view of the checkout (two child processes: ~20-40 ms in a repository of a few thousand files) is asked
    # beside the walk, the child's wait outside the GIL
    git = _Beside(git_state, root)
    stored = store.files()
    if stored and (store.meta("tokenizer") != TOKENIZER_VERSION or (store.meta("parser") or "1") != PARSER_VERSION):
        # the lexical index was built with other tokens, or the files were parsed by other rules (other
        # references, so other edges): rebuild it whole (in this transaction)
        report.notes.append("the index was built by an earlier version (other tokens or parse rules): rebuilt it whole")
        stored = {}
        rebuild = True
    else:
        rebuild = False
    files: list[SourceFile] = []
    to_parse: list[tuple[SourceFile, bytes | None, str]] = []  # the bytes let go once the file is written
    touched: list[SourceFile] = []
    # each file is compared with its stored record as the walk finds it: an update's first change is known mid-walk
    # ("first_change", before "plan"), so the caller can start what the change will need (Index.update: the model)
    first_change = bool(stored)
    for sf in walk(root, settings, walk_report):
        files.append(sf)
        try:
            state, data, h = classify(sf, stored.get(sf.path), need_data=True)
        except OSError as e:
            walk_report.skip(sf.path, f"unreadable: {e.strerror}")
            continue
        if state == "changed":
            assert data is not None and h is not None  # need_data=True: a changed file comes with its bytes
            # a cold index parses every file in its one transaction anyway: the check is for updates
            skip = passed_over(data) if stored and sf.path not in stored else None
            if skip is not None:  # never stored, so never written: no transaction, no secret scan on a no-op
                walk_report.skip(sf.path, skip)
                continue
            to_parse.append((sf, data, h))
            if first_change:
                first_change = False
                emit({"event": "first_change", "path": sf.path})
        else:
            report.unchanged += 1
            if state == "touched":
                touched.append(sf)
    report.files_seen = len(files)
    seen_paths = {f.path for f in files}
    deleted = sorted(set(stored) - seen_paths)
    emit({"event": "plan", "files": len(files), "to_parse": len(to_parse), "deleted": len(deleted)})
    report.git_head, report.git_dirty = git.result()
    backfill = _texts_to_keep(files, stored, {sf.path for sf, _, _ in to_parse}, settings)
    if backfill:
        report.notes.append(
            f"kept the text of {len(backfill)} file{'s' if len(backfill) != 1 else ''} indexed before grep, for grep"
        )

    if not to_parse and not deleted:
        if touched or backfill:
            with store.transaction():
                for sf in touched:
                    store.touch_file(sf.path, sf.size, sf.mtime_ns)
                for path, text in backfill:
                    store.put_text(path, text)
        report.skipped = walk_report.skipped
        _finish_meta_if_needed(store, report)
        report.previous_change = last_change(store)
        report.seconds = time.perf_counter() - t0
        return report

    cold = not stored
    # definitions before the change: a name whose definitions are unchanged needs no re-resolution
    old_defs: set[tuple] = set()
    old_ids: set[str] = set()
    changed_paths = {sf.path for sf, _, _ in to_parse} | set(deleted)
    old_classes: set[str] = set()
    for path in changed_paths:
        if path in stored:
            for cid, cpath, qual, kind, module, _lang, name in store.capsule_rows(path):
                old_ids.add(cid)
                old_defs.add(_def_key(cid, cpath, qual, kind, module, name))
                if kind == "class":
                    old_classes.add(cid)
    # the bases of the changed files' classes before the change (a class without any listed as having none): with
    # the unchanged files' edges they give each class's old ancestors, should its bases change
    old_bases: dict[str, list] = {cid: [] for cid in old_classes} | (
        store.bases_of(sorted(old_classes)) if old_classes else {}
    )

    parsed: list[tuple[SourceFile, str, ParsedFile]] = []
    done = 0
    with _gc_paused(len(to_parse) >= PIPELINE_MIN_FILES), store.transaction():
        if rebuild:
            store.clear()
        for path in deleted:
            store.delete_file(path)
        report.deleted = deleted
        new_defs: set[tuple] = set()
        # each file is written as soon as it is parsed, and its bytes and texts let go: linking reads names only
        # (holding every file's until all were parsed made Django's cold peak RSS 385 MiB)
        # an error while writing stops the worker at once
        stream = parse_stream(
            to_parse, settings, store.repo, getattr(store, "ahead", None), link=cold, idle=getattr(store, "idle", None)
        )
        with closing(stream):
            for item in stream:
                if item is PARSED_ALL:
                    break
                pf, note, flags = item
                i = done
                sf, _, h = to_parse[i]
                to_parse[i] = (sf, None, h)
                done += 1
                if pf is None:
                    walk_report.skip(sf.path, note)
                    if sf.path in stored:  # a file that became binary or minified leaves the index
                        store.delete_file(sf.path)
                else:  # (a file written before is rewritten in place: its units keep their rows)
                    if flags.get("invalid_utf8"):
                        report.invalid_utf8.append(sf.path)
                    if flags.get("redactions"):
                        report.redacted.append(sf.path)
                    if pf.syntax_errors or flags.get("parse_failed"):
                        report.syntax_errors.append(sf.path)
                    parsed.append((sf, h, pf))
                    (report.modified if sf.path in stored else report.added).append(sf.path)
                    store.put_file(
                        FileRecord(
                            sf.path,
                            sf.language,
                            sf.size,
                            sf.mtime_ns,
                            h,
                            pf.module,
                            pf.imports,
                            pf.method,
                            f"syntax errors: {pf.syntax_errors}" if pf.syntax_errors else "",
                        ),
                        pf.capsules,
                        flags["bodies"],
                        flags.get("text"),
                        ahead=flags.get("ahead"),
                    )
                    report.capsules_written += len(pf.capsules)
                    for c in pf.capsules:
                        new_defs.add(_def_key(c.id, c.path, c.qualname, c.kind, pf.module, c.name))
                        c.text = c.docstring = ""
                if done % 50 == 0 or done == len(to_parse):
                    emit({"event": "parse", "done": done, "total": len(to_parse)})
                if done % _TRIM_FILES == 0 and len(to_parse) >= PIPELINE_MIN_FILES:
                    trim()
            # while the worker (if one parsed them all) resolves the edges of a cold update
            for sf in touched:
                store.touch_file(sf.path, sf.size, sf.mtime_ns)
            for path, text in backfill:
                store.put_text(path, text)
            store.files_written()
            emit({"event": "link", "files": len(parsed)})
            linked: set[str] = set()  # files whose edges a worker resolved: written in the parsed files' order
            at = 0
            for chunk in stream:
                if chunk is LINKED:
                    break
                for path, edges in chunk.items():
                    while at < len(parsed) and parsed[at][2].path != path:
                        at += 1
                    if at == len(parsed):
                        raise RuntimeError(f"the parse worker linked {path}, which was not parsed in this order")
                    _put_edges(store, edges, path)
                    linked.add(path)
        bases: dict[str, list] = {}
        unlinked = [pf for _, _, pf in parsed if pf.path not in linked]
        parsed_files = [pf for _, _, pf in parsed]
        if cold and unlinked:
            resolver, memory = _memory_resolver(parsed_files)
        else:
            resolver, memory = Resolver(StoreLookup(store)), None
        if unlinked:
            bases = _all_bases(resolver, parsed_files, memory)
            for pf in unlinked:
                _put_edges(store, _file_edges(resolver, pf, bases), pf.path)
        if not cold:
            names = {d[0] for d in old_defs ^ new_defs}
            # a class whose bases changed: calls elsewhere through it may now reach another ancestor's method
            # (an old ancestor's methods are read as they are now: any that changed are in ``names`` already)
            for cid in set(old_bases) | set(bases):
                if [b[0] for b in old_bases.get(cid, [])] != [b[0] for b in bases.get(cid, [])]:
                    names |= _ancestor_methods(store, old_bases, cid) | _ancestor_methods(store, bases, cid)
            gone = old_ids - {d[1] for d in new_defs}
            report.edges_reresolved = _reresolve(
                store, resolver, names, gone, {sf.path for sf, _, _ in parsed} | set(deleted)
            )
        _write_meta(store, report, by)
        report.written = sorted(changed_paths)
    if not report.changed:
        report.previous_change = last_change(store)
    report.skipped = walk_report.skipped
    report.seconds = time.perf_counter() - t0
    emit({"event": "done", "seconds": report.seconds})
    return report


RELEASE_AFTER_UNITS = 5000  # an update that wrote this many units gives memory back after (``release_memory``)


def release_memory(store: Store) -> None:
    """What a large update leaves behind given back: the store's caches (``Store.release_memory``: SQLite's page
    cache) and the heap the update freed (glibc keeps it otherwise). A fill that follows in the same process then
    starts near where a fresh one would (Django's cold update: 270 -> 188 MiB)."""
    store.release_memory()
    trim()


@contextmanager
def _gc_paused(pause: bool) -> Iterator[None]:
    """No cyclic garbage collection during a large update: it makes hundreds of thousands of objects (units, names,
    edges) that live until it ends, and each full collection walked them all again (Django's cold update: ~1,200
    collections, ~1 s; what it leaves for the collector is a few hundred objects). Never re-enables a collector
    someone else had turned off."""
    was = gc.isenabled()
    if pause and was:
        gc.disable()
    try:
        yield
    finally:
        if pause and was:
            gc.enable()


def _def_key(cid: str, path: str, qual: str, kind: str, module: str, name: str) -> tuple:
    """What the resolver sees of a definition, keyed by the name references use to find it."""
    if kind != "module":
        key = name
    elif module == path:  # non-Python modules are found by relative path: ./util -> util
        key = path.rsplit("/", 1)[-1].split(".", 1)[0]
    else:
        key = module.rsplit(".", 1)[-1]
    return (key, cid, path, qual, kind, module)


def _ancestor_methods(store: RepoWriter, bases: dict[str, list], cls: str) -> set[str]:
    """Names of the methods defined in the ancestors of class ``cls``: each class's bases from ``bases`` where it has
    them, else from the store's inheritance edges."""

    def level_bases(ids: list[str]) -> dict[str, list]:
        return {c: bases[c] for c in ids if c in bases} | store.bases_of([c for c in ids if c not in bases])

    names: set[str] = set()
    for _bid, path, qual in ancestors([cls], level_bases):
        names.update(
            q[len(qual) + 1 :]
            for _id, _p, q, kind, *_ in store.capsule_rows(path)
            if kind == "method" and q.startswith(qual + ".") and "." not in q[len(qual) + 1 :]
        )
    return names


def _reresolve(store: RepoWriter, resolver: Resolver, names: set[str], old_ids: set[str], fresh_paths: set[str]) -> int:
    """Re-resolve edges of unchanged files that may point into what changed (base classes first: a call through
    a class resolves with the class's bases as they are now)."""
    rows = sorted(store.edges_needing(names, old_ids, fresh_paths), key=lambda r: r[2] != "inherits")
    if not rows:
        return 0
    files = store.files()
    info_cache: dict[str, dict[str, tuple]] = {}
    changed = 0
    for rowid, src, kind, dst_name, dst, src_path in rows:
        caps = info_cache.get(src_path)
        if caps is None:
            caps = info_cache[src_path] = {r[0]: r for r in store.capsule_rows(src_path)}
        row = caps.get(src)
        rec = files.get(src_path)
        if row is None or rec is None:
            continue
        kinds = {r[2]: r[3] for r in caps.values()}
        src_info = SrcInfo(row[0], row[1], row[2] if row[3] != "module" else "", row[3], rec.module, row[5])
        enclosing = class_of(src_info, kinds.get) if row[3] in ("method", "function") else None
        new = resolver.resolve(Ref(src, kind, dst_name), src_info, rec.imports, enclosing)
        if new != dst:
            store.set_edge_dst(rowid, new)
            changed += 1
    return changed


def _write_meta(store: RepoWriter, report: UpdateReport, by: str = "index update") -> None:
    if report.changed:
        store.set_meta(
            "last_change",
            json.dumps(
                {
                    "at": time.time(),
                    "by": by,
                    "added": len(report.added),
                    "modified": len(report.modified),
                    "deleted": len(report.deleted),
                }
            ),
        )
    store.set_meta("indexed_at", str(time.time()))
    store.set_meta("git_head", report.git_head or "")
    store.set_meta("git_dirty", "" if report.git_dirty is None else str(int(report.git_dirty)))
    store.set_meta("complete", "1")
    store.set_meta("tokenizer", TOKENIZER_VERSION)
    store.set_meta("parser", PARSER_VERSION)
    report.generation = int(store.meta("generation") or 0) + (1 if report.changed else 0)
    store.set_meta("generation", str(report.generation))


def _finish_meta_if_needed(store: RepoWriter, report: UpdateReport) -> None:
    if store.meta("git_head") != (report.git_head or "") or store.meta("git_dirty") != (
        "" if report.git_dirty is None else str(int(report.git_dirty))
    ):
        with store.transaction():
            _write_meta(store, report)


def last_change(store: RepoWriter) -> dict | None:
    """The last update that changed the repository's index: ``{"at", "by", "added", "modified", "deleted"}``."""
    try:
        rec = json.loads(store.meta("last_change") or "null")
    except ValueError:
        return None
    return rec if isinstance(rec, dict) and isinstance(rec.get("at"), (int, float)) else None


def describe_no_change(previous: dict | None, counts: bool = True, now: float | None = None) -> str:
    """What an update that found nothing to do says: "no changes since the background refresh of the MCP server
    at 10:42:03 UTC, which applied 3 files (2 changed, 1 added)". ``counts=False`` leaves the files out (a caller
    whose scope hides some of them)."""
    if not previous:
        return "no changes"
    at = float(previous["at"])
    same_day = time.gmtime(at)[:3] == time.gmtime(now if now is not None else time.time())[:3]
    when = time.strftime("%H:%M:%S UTC" if same_day else "%Y-%m-%d %H:%M:%S UTC", time.gmtime(at))
    out = f"no changes since the {previous.get('by') or 'index update'} at {when}"
    parts = [
        f"{int(previous.get(k) or 0)} {word}"
        for k, word in (("modified", "changed"), ("added", "added"), ("deleted", "deleted"))
        if previous.get(k)
    ]
    if counts and parts:
        n = sum(int(previous.get(k) or 0) for k in ("modified", "added", "deleted"))
        out += f", which applied {n} file{'s' if n != 1 else ''} ({', '.join(parts)})"
    return out


def stale_files(root: Path, store: RepoWriter, settings: Settings) -> dict:
    """What changed since the last index, without writing: mtime+size, then content hash to confirm."""
    stored = store.files()
    added: list[str] = []
    modified: list[str] = []
    seen = set()
    for sf in walk(root, settings, WalkReport()):
        seen.add(sf.path)
        rec = stored.get(sf.path)
        try:
            state = classify(sf, rec, need_data=False)[0]
        except OSError:
            state = "changed"
        if state == "changed" and rec is None:
            try:  # a binary or minified file the index never stores is not "added" each time it is asked
                if passed_over(sf.abspath.read_bytes()):
                    continue
            except OSError:
                pass
            added.append(sf.path)
        elif state == "changed":
            modified.append(sf.path)
    deleted = sorted(set(stored) - seen)
    head, dirty = git_state(root)
    return {
        "fresh": not (added or modified or deleted),
        "added": added,
        "modified": modified,
        "deleted": deleted,
        "git_head": head,
        "git_dirty": dirty,
        "indexed_git_head": store.meta("git_head") or None,
        "indexed_at": float(store.meta("indexed_at") or 0) or None,
    }
