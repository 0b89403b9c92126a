"""What an index job indexes: the folder of a path entry, or the fetched head of a git entry's branch checked out
in the worker's cache. Every kind of worker (``repoctx worker``, the in-process one of the embedded service) asks
``Checkouts.prepare`` for the folder and reports the commit it indexed with ``Checkouts.indexed``."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

from repoctx.service.db import ServiceDB
from repoctx.service.git import Credentials, GitCache, GitError, parse_git_url, scrub
from repoctx.service.sources import RepoSource, Sources

log = logging.getLogger("repoctx.service.checkout")

__all__ = ["Checkouts", "Prepared"]


@dataclass
class Prepared:
    root: Path
    source: RepoSource | None = None
    commit: str | None = None  # the commit checked out (git entries)


class Checkouts:
    def __init__(self, db: ServiceDB, conf):
        self.sources = Sources(db)
        self.credentials = Credentials(conf.git_credentials)
        self.git = GitCache(conf.git_cache_dir(), timeout=conf.git_timeout)
        self.repo_roots = tuple(conf.repo_roots)

    def prepare(self, repo: str, root_hint: str | None = None) -> Prepared:
        """The folder to index for ``repo``: a git entry's branch is fetched and checked out first (GitError with a
        scrubbed reason when that fails); a path entry (or a repository registered before sources were kept) is its
        path. FileNotFoundError when the folder is not on this machine."""
        src = self.sources.get(repo)
        if src is None or src.kind != "git":
            root = Path((src.path if src is not None and src.path else None) or root_hint or "")
            if not str(root) or not root.is_dir():
                raise FileNotFoundError(f"{root or '(no path)'} is not a directory on this worker")
            return Prepared(root, src)
        try:
            u = parse_git_url(src.url or "", self.repo_roots)
        except ValueError as e:  # e.g. REPOCTX_REPO_ROOTS on this worker does not allow a local remote
            raise GitError(f"the entry's url is not usable on this worker: {e}", retry=False) from None
        cred = self.credentials.for_url(u.url, src.credential)
        since = self.sources.now()
        try:
            with self.git.lock(u):
                previous = src.indexed_commit
                commit = self.git.fetch(u, cred, src.branch or "")
                behind = self.git.behind(u, previous, commit)
                self.sources.saw_head(repo, commit, fetched=True, behind=behind, since=since)
                root = self.git.checkout(u, cred, repo, commit)
        except GitError as e:
            self.sources.failed(repo, str(e))
            raise
        except OSError as e:  # the cache folder: disk full, permissions
            reason = scrub(f"git cache: {type(e).__name__}: {e}", cred.secrets if cred else ())
            self.sources.failed(repo, reason)
            raise GitError(reason) from None
        return Prepared(root, src, commit)

    def poll(self, enqueue) -> int:
        """Ask each git remote for the heads of its registered branches (``git ls-remote``, one call per URL and
        credential) and ``enqueue(name)`` each entry whose head is not its indexed commit (a moved branch, or an
        entry whose last job failed); how many were queued. The fallback for hosts that cannot send webhooks."""
        from repoctx.service.git import GitUrlError

        groups: dict[tuple[str, str], list[RepoSource]] = {}
        for src in self.sources.all("git"):
            groups.setdefault((src.url or "", src.credential or ""), []).append(src)
        queued = 0
        for (url, cred_name), entries in groups.items():
            try:
                u = parse_git_url(url, self.repo_roots)
                cred = self.credentials.for_url(u.url, cred_name or None)
                heads = self.git.ls_remote(u, cred, sorted({e.branch for e in entries if e.branch}))
            except (GitError, GitUrlError) as e:
                log.warning("poll: %s: %s", ", ".join(e.name for e in entries), e)
                for src in entries:
                    self.sources.failed(src.name, str(e))
                continue
            for src in entries:
                head = heads.get(src.branch or "")
                if head and head != src.indexed_commit:
                    self.sources.saw_head(src.name, head, fetched=False)
                    enqueue(src.name)
                    queued += 1
        if queued:
            log.info("poll: %d entr%s queued", queued, "y" if queued == 1 else "ies")
        return queued

    def indexed(self, prepared: Prepared) -> None:
        if prepared.source is not None and prepared.commit:
            self.sources.indexed(prepared.source.name, prepared.commit)
