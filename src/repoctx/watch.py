"""Watch an indexed tree and say when something the index holds has changed: ``TreeWatcher``.

The folders watched are the ones the walk enters (``repoctx.ingest.walk.walk_dirs``), each on its own
(not recursively), so nothing under .git, .repoctx, ignored, vendored or output folders is watched or
wakes anyone; a change counts when the walk would index that file (``Folder.keeps_file``). A new, renamed
or deleted folder, or an edited .gitignore / .repoctxignore, changes the set of folders: the watch starts
again over the new set, then reports the change (so a file written into a new folder is not missed).

Changes are batched by watchfiles: a batch closes ``step_ms`` after the last change of a burst, and at the
latest ``debounce_ms`` after its first. While nothing changes nothing runs but watchfiles' wait (a sleep
that wakes every ``step_ms`` to look at the stop flag; no walk, no stat).

Watching is off, with a note saying why (``status()``), when the tree has more folders than
``Settings.watch_max_dirs`` (``REPOCTX_WATCH_MAX_DIRS``), when ``Settings.watch`` is false (``REPOCTX_WATCH=0``)
or when the system refuses more watches (Linux: ``fs.inotify.max_user_watches``). The bound is set by what a
refresh costs, not the watch: each refresh is an incremental update that walks the whole tree. On Django 4.2's
sdist (3,183 folders, 3,917 files) that update is ~0.23 s and a save is found by the MCP server 0.39 s later;
listing and watching the folders costs 0.06 + 0.06 s, and 0.23 + 0.05 s for 10,000 empty folders, 0.41 + 0.17 s
for 30,000 (bench/results/big_tree.md). At 10,000 folders of a real tree the refresh is ~3x Django's, still
inside 2 s; past that a save would wait on the walk, and one process holds that many inotify watches.
"""

from __future__ import annotations

import errno
import logging
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path

from repoctx.config import Settings
from repoctx.ingest.walk import IGNORE_FILES, Folder, walk_dirs

log = logging.getLogger("repoctx.watch")

ADDED, MODIFIED, DELETED = 1, 2, 3  # watchfiles' change codes (watchfiles.Change)
DEBOUNCE_MS = 1000  # a burst of changes is reported at most this long after its first change
STEP_MS = 100  # ... and this long after its last
RETRY_S = 1.0  # a folder that vanished while the watch was being set up: look again after this long

ChangeFn = Callable[[list[str]], None]
"""Called (on the watcher's thread) with the repository paths that changed, or [] when the folders or their
ignore rules changed (anything may have); keep it short."""


class TreeWatcher:
    """Watches the tree at ``root`` in a daemon thread and calls ``on_change(paths)`` for each batch of changes
    to files the walk would index. ``start()`` returns at once (the folders are listed on the thread);
    ``status()`` says whether the tree is watched, and if not why; ``stop()`` ends it."""

    def __init__(
        self,
        root: str | Path,
        settings: Settings,
        on_change: ChangeFn,
        *,
        name: str = "",
        debounce_ms: int = DEBOUNCE_MS,
        step_ms: int = STEP_MS,
    ):
        self.root = Path(root).resolve()
        self.settings = settings
        self.name = name or self.root.name
        self.on_change = on_change
        self.debounce_ms, self.step_ms = int(debounce_ms), int(step_ms)
        self.state = "starting"  # starting | on | off | stopped
        self.note = "listing the folders to watch"
        self.dirs = 0
        self.changes = 0  # batches reported
        self.last_change: float | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()  # set once the watch is on (or off)

    # ------------------------------------------------------------------ control
    def start(self) -> TreeWatcher:
        if not self.settings.watch:
            self._off("watching is turned off (REPOCTX_WATCH=0)", warn=False)
            return self
        self._thread = threading.Thread(target=self._run, daemon=True, name=f"repoctx-watch-{self.name}")
        self._thread.start()
        return self

    def stop(self, timeout: float | None = 5.0) -> None:
        self._stop.set()
        t = self._thread
        if t is not None and t is not threading.current_thread() and timeout != 0:
            t.join(timeout)
        if self.state in ("starting", "on"):
            self.state, self.note = "stopped", "stopped"

    def wait_ready(self, timeout: float | None = None) -> bool:
        """Block until the watch is on (or has been turned off); True when it is on."""
        self._ready.wait(timeout)
        return self.state == "on"

    @property
    def watching(self) -> bool:
        return self.state == "on"

    def status(self) -> dict:
        return {
            "watching": self.watching,
            "state": self.state,
            "folders": self.dirs,
            "note": self.note,
            "changes": self.changes,
            "last_change": self.last_change,
        }

    # ------------------------------------------------------------------ the thread
    def _off(self, note: str, warn: bool = True) -> None:
        self.state, self.note = "off", note
        self._ready.set()
        (log.warning if warn else log.info)("%s: %s", self.name, note)

    def _folders(self) -> dict[str, Folder] | None:
        bound = self.settings.watch_max_dirs
        out: dict[str, Folder] = {}
        for f in walk_dirs(self.root, self.settings):
            out[f.path] = f
            if len(out) > bound:
                return None
        return out

    def _run(self) -> None:
        from watchfiles._rust_notify import RustNotify  # watchfiles.watch() minus its generator (see _watch)

        rebuild = False  # the folders changed: report it once the new watch is set up
        try:
            while not self._stop.is_set():
                folders = self._folders()
                if folders is None:
                    self._off(
                        f"not watching: the tree has more than {self.settings.watch_max_dirs:,} folders "
                        "(REPOCTX_WATCH_MAX_DIRS); changes are picked up by the freshness check instead"
                    )
                    return
                try:
                    notify = RustNotify(list(folders), False, False, 300, False, False)
                except OSError as e:
                    if e.errno in (errno.ENOSPC, errno.EMFILE) or "inotify" in str(e).lower():
                        self._off(
                            f"not watching: the system refuses more file watches ({e}; on Linux raise "
                            "fs.inotify.max_user_watches / max_user_instances); changes are picked up by "
                            "the freshness check instead"
                        )
                        return
                    if self._stop.wait(RETRY_S):  # a folder vanished between listing and watching
                        return
                    rebuild = True
                    continue
                with notify:
                    self.dirs, self.state = len(folders), "on"
                    self.note = f"watching {len(folders):,} folders"
                    if not self._ready.is_set():
                        log.info("%s: %s", self.name, self.note)
                    self._ready.set()
                    if rebuild:
                        self._report([])
                    rebuild = self._watch(notify, folders)
                if not rebuild:
                    return
        except Exception as e:  # noqa: BLE001 - the freshness check still works without the watch
            self._off(f"not watching: {type(e).__name__}: {e}; changes are picked up by the freshness check instead")
        finally:
            self._ready.set()
            if self.state == "on":
                self.state, self.note = "stopped", "stopped"

    def _watch(self, notify, folders: dict[str, Folder]) -> bool:
        """Report changes until stopped (False) or until the set of folders to watch changes (True)."""
        while True:
            raw = notify.watch(self.debounce_ms, self.step_ms, 0, self._stop)
            if raw == "stop" or self._stop.is_set():
                return False
            if not isinstance(raw, set):  # 'signal' (main thread only) or 'timeout' (none asked)
                continue
            paths: list[str] = []
            rebuild = False
            for change, path in raw:
                kind = self._classify(change, path, folders)
                if kind == "tree":
                    rebuild = True
                elif kind == "file":
                    paths.append(os.path.relpath(path, self.root).replace(os.sep, "/"))
            if rebuild:
                return True  # the caller watches the new set of folders, then reports
            if paths:
                self._report(sorted(set(paths)))

    def _classify(self, change: int, path: str, folders: dict[str, Folder]) -> str:
        """ "file" (a file the walk indexes), "tree" (the folders to watch or their rules changed) or ""."""
        if path in folders:  # a watched folder itself: gone, or replaced by a file
            return "tree" if change == DELETED or not os.path.isdir(path) else ""
        parent, name = os.path.split(path)
        where = folders.get(parent)
        if where is None:
            return ""
        if name in IGNORE_FILES:
            return "tree"
        if change != DELETED and os.path.isdir(path) and not os.path.islink(path):
            return "tree" if where.enters(name) else ""
        return "file" if where.keeps_file(name) else ""

    def _report(self, paths: list[str]) -> None:
        self.changes += 1
        self.last_change = time.time()
        try:
            self.on_change(paths)
        except Exception as e:  # noqa: BLE001 - one failed callback must not end the watch
            log.warning("%s: change callback failed: %s: %s", self.name, type(e).__name__, e)


class Watchers:
    """Trees by name, each under its own ``TreeWatcher``; ``on_change(name, root)`` on a change to one (the
    service queues an index job for it). ``watch`` is idempotent, so a caller can hand it the full list of its
    repositories whenever that list may have changed."""

    def __init__(self, settings: Settings, on_change: Callable[[str, str], object]):
        self.settings = settings
        self.on_change = on_change
        self._lock = threading.Lock()
        self._by_name: dict[str, TreeWatcher] = {}
        self._closed = False

    def watch(self, name: str, root: str | Path) -> TreeWatcher | None:
        """Watch ``root`` as ``name`` (a no-op when it already is; another root replaces the watch). Once closed,
        nothing more is watched: a job that ends after the service closed (its ``_job_done`` asks to watch the paths
        registered since) must not start a watcher that nothing would stop."""
        root = Path(root)
        if not root.is_dir():
            return None
        root = root.resolve()
        with self._lock:
            if self._closed:
                return None
            w = self._by_name.get(name)
            if w is not None and w.root == root and w.state != "stopped":  # off (too big) stays off
                return w
            if w is not None:
                w.stop(0)

            def changed(paths: list[str], name: str = name, root: str = str(root)) -> None:
                self.on_change(name, root)

            w = self._by_name[name] = TreeWatcher(root, self.settings, changed, name=name).start()
            return w

    def forget(self, name: str) -> None:
        with self._lock:
            w = self._by_name.pop(name, None)
        if w is not None:
            w.stop(0)

    def status(self, name: str) -> dict | None:
        w = self._by_name.get(name)
        return w.status() if w is not None else None

    def close(self) -> None:
        with self._lock:
            self._closed = True
            watchers, self._by_name = list(self._by_name.values()), {}
        for w in watchers:
            w.stop()
