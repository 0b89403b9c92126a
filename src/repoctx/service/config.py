"""The service's own settings: ``REPOCTX_*`` environment variables over defaults, validated once.

The store is named by the library's ``Settings`` (``REPOCTX_DATABASE_URL`` for PostgreSQL, else the
SQLite files in ``REPOCTX_INDEX_DIR``); these are what only the HTTP service and its workers read."""

from __future__ import annotations

import os
from dataclasses import dataclass, replace

from repoctx.config import float_env


def _bool_env(name: str, default: bool) -> bool:
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    return raw.strip().lower() in ("1", "true", "yes", "on")


@dataclass(frozen=True)
class ServiceSettings:
    stream_timeout: float = 60.0  # REPOCTX_STREAM_TIMEOUT: seconds any streamed answer may take in all
    request_timeout: float = 60.0  # REPOCTX_REQUEST_TIMEOUT: seconds a plain (JSON) read may take
    metrics_public: bool = False  # REPOCTX_METRICS_PUBLIC=1: /metrics answers without a key
    roles_file: str | None = None  # REPOCTX_ROLES: a TOML or JSON file of roles (over the roles in the database)
    key_cache_seconds: float = 5.0  # REPOCTX_KEY_CACHE: how long a checked key is trusted (revocation delay)
    job_lease: float = 30.0  # REPOCTX_JOB_LEASE: a worker's claim on a job lasts this long unless renewed
    job_poll: float = 1.0  # REPOCTX_JOB_POLL: how often an idle worker looks for a job
    job_attempts: int = 3  # REPOCTX_JOB_ATTEMPTS: claims of one job before it is marked failed
    inprocess_jobs: bool | None = None  # REPOCTX_INPROCESS_JOBS: run index jobs in the API process
    # (default: yes with SQLite, no with PostgreSQL, where `repoctx worker` processes run them)
    max_turns: int = 32  # REPOCTX_MAX_TURNS: copilot turns running at once in this process (then 429)
    turn_tool_calls: int = 6  # per-turn budget handed to the copilot (Limits)
    turn_model_calls: int = 8
    # --- limits a hostile or careless client meets (issue 38)
    store_timeout: float = 5.0  # REPOCTX_STORE_TIMEOUT: seconds to reach the store before answering 503
    retry_after: int = 5  # REPOCTX_RETRY_AFTER: the Retry-After (seconds) of a 503 while the store is away
    rate_limit: str = "300/minute"  # REPOCTX_RATE_LIMIT: requests per key, in the `limits` notation
    # ("300/minute", "10/second;300/minute"); "" turns the limit off
    max_body: int = 1 << 20  # REPOCTX_MAX_BODY: bytes a request body may have (then 413)
    body_timeout: float = 10.0  # REPOCTX_BODY_TIMEOUT: seconds a client may take to send its body (then 408)
    repo_roots: tuple[str, ...] = ()  # REPOCTX_REPO_ROOTS: folders (os.pathsep-separated) under which
    # POST /repos may register a path; empty: registration by path is refused (403)
    job_timeout: float = 3600.0  # REPOCTX_JOB_TIMEOUT: seconds one index job may run before it fails
    job_max_files: int = 200_000  # REPOCTX_JOB_MAX_FILES: files one index job may take in
    job_max_bytes: int = 4 << 30  # REPOCTX_JOB_MAX_BYTES: bytes of source one index job may read
    # --- repositories from git (issue 41)
    git_cache: str | None = None  # REPOCTX_GIT_CACHE: the workers' clones and worktrees (default:
    # <cache>/repoctx/git); a cache only: deleting it costs one full fetch per repository
    git_credentials: str | None = None  # REPOCTX_GIT_CREDENTIALS: a TOML/JSON file of named credentials (or inline
    # JSON); registrations name an entry, the database never holds a secret
    git_timeout: float = 600.0  # REPOCTX_GIT_TIMEOUT: seconds one git command (fetch, checkout) may take
    git_poll: float = 300.0  # REPOCTX_GIT_POLL: seconds between polls of every git entry's branch head (the fallback
    # for hosts that cannot send webhooks); 0 turns polling off
    hook_secret: str | None = None  # REPOCTX_HOOK_SECRET: the server's webhook secret (an entry's credential may
    # carry its own: hook_secret / hook_secret_env)

    @classmethod
    def from_env(cls, **overrides) -> ServiceSettings:
        inproc = os.environ.get("REPOCTX_INPROCESS_JOBS")
        base = cls(
            stream_timeout=float_env("REPOCTX_STREAM_TIMEOUT", 60.0),
            request_timeout=float_env("REPOCTX_REQUEST_TIMEOUT", 60.0),
            metrics_public=_bool_env("REPOCTX_METRICS_PUBLIC", False),
            roles_file=os.environ.get("REPOCTX_ROLES") or None,
            key_cache_seconds=float_env("REPOCTX_KEY_CACHE", 5.0, lo=-1e-9),
            job_lease=float_env("REPOCTX_JOB_LEASE", 30.0),
            job_poll=float_env("REPOCTX_JOB_POLL", 1.0),
            job_attempts=int(float_env("REPOCTX_JOB_ATTEMPTS", 3)),
            max_turns=int(float_env("REPOCTX_MAX_TURNS", 32)),
            store_timeout=float_env("REPOCTX_STORE_TIMEOUT", 5.0),
            retry_after=int(float_env("REPOCTX_RETRY_AFTER", 5.0)),
            rate_limit=os.environ.get("REPOCTX_RATE_LIMIT", "300/minute").strip(),
            max_body=int(float_env("REPOCTX_MAX_BODY", float(1 << 20))),
            body_timeout=float_env("REPOCTX_BODY_TIMEOUT", 10.0),
            repo_roots=tuple(p for p in os.environ.get("REPOCTX_REPO_ROOTS", "").split(os.pathsep) if p.strip()),
            job_timeout=float_env("REPOCTX_JOB_TIMEOUT", 3600.0),
            job_max_files=int(float_env("REPOCTX_JOB_MAX_FILES", 200_000.0)),
            job_max_bytes=int(float_env("REPOCTX_JOB_MAX_BYTES", float(4 << 30))),
            inprocess_jobs=None if inproc in (None, "") else _bool_env("REPOCTX_INPROCESS_JOBS", False),
            git_cache=os.environ.get("REPOCTX_GIT_CACHE") or None,
            git_credentials=os.environ.get("REPOCTX_GIT_CREDENTIALS") or None,
            git_timeout=float_env("REPOCTX_GIT_TIMEOUT", 600.0),
            git_poll=float_env("REPOCTX_GIT_POLL", 300.0, lo=-1e-9),
            hook_secret=os.environ.get("REPOCTX_HOOK_SECRET") or None,
        )
        out = replace(base, **{k: v for k, v in overrides.items() if v is not None})
        from repoctx.service.limits import parse_rate_limit

        parse_rate_limit(out.rate_limit)  # a ConfigError naming REPOCTX_RATE_LIMIT at startup
        return out

    def git_cache_dir(self):
        from pathlib import Path

        from repoctx.config import default_cache_dir

        return Path(self.git_cache).expanduser() if self.git_cache else default_cache_dir() / "git"
