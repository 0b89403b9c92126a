"""Repositories from git URLs: what a URL may be, where credentials come from, and a cache of clones.

* ``parse_git_url(url, repo_roots)`` accepts ``https://host/path``, ``ssh://[user@]host[:port]/path``, the scp form
  ``user@host:path``, and a local repository (an absolute path or ``file://`` URL) under ``REPOCTX_REPO_ROOTS``.
  Anything else is refused (``http://``, ``git://``, ``ext::`` -- which runs commands --, options in disguise). A
  URL that carries a password or token (``https://user:token@host/...``) is **refused**, not stripped: the
  credential would otherwise be lost silently, and a refusal tells the administrator to name a server-side one
  instead. Refusals never repeat the URL.
* ``Credentials`` reads ``REPOCTX_GIT_CREDENTIALS``: a TOML or JSON file (or inline JSON) of named entries,
  each a username and password/token (or ``*_env``: the name of an environment variable holding it), or an SSH
  key file, with optional URL prefixes it applies to when a registration names none, and an optional webhook
  secret. Entries are read on the server only: the database keeps an entry's *name*, never its secret.
* ``GitCache`` keeps one bare partial clone (``--filter=blob:none``) per remote URL under ``REPOCTX_GIT_CACHE``,
  fetches one branch at a time into it, and checks each registered entry out into a worktree of its own, so
  several branches of one repository share a clone. Git runs with a closed environment: no terminal prompts,
  no system or global configuration, no hooks, no credential helpers, only the https/ssh protocols (file for a
  local remote), a time limit that kills the whole process group. A password reaches git through
  ``GIT_ASKPASS`` (a script that answers only for the remote's own host, from environment variables of that one
  git process), an SSH key through ``GIT_SSH_COMMAND``: never on a command line. Git's messages are scrubbed of
  secrets and URL userinfo before they reach a log, an exception or a job record.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import re
import signal
import subprocess
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import unquote, urlsplit

__all__ = [
    "GitError",
    "GitUrlError",
    "CredentialError",
    "GitUrl",
    "parse_git_url",
    "url_key",
    "check_branch",
    "Credential",
    "Credentials",
    "GitCache",
    "scrub",
    "redact_url",
]


class GitError(RuntimeError):
    """A git operation failed; the message is scrubbed (no secret, no URL userinfo). ``retry``: worth another
    attempt later (a network failure), not when the remote refused us or does not exist."""

    def __init__(self, message: str, retry: bool = True):
        super().__init__(message)
        self.retry = retry


class GitUrlError(ValueError):
    """A repository URL or branch the service will not use (the message never repeats the URL)."""


class CredentialError(GitError):
    """A named credential that the server's configuration does not have (or cannot read)."""

    def __init__(self, message: str):
        super().__init__(message, retry=False)


# ------------------------------------------------------------------------------------ URLs
@dataclass(frozen=True)
class GitUrl:
    url: str  # as git is given it: no credential in it
    kind: str  # https | ssh | local
    host: str  # host[:port] for https/ssh ('' for local)
    path: str  # the repository path on the host (a resolved absolute path for local)

    @property
    def key(self) -> str:
        return url_key(self)


_SCP = re.compile(r"^(?:(?P<user>[A-Za-z0-9._-]+)@)?(?P<host>[A-Za-z0-9.-]+|\[[0-9A-Fa-f:.]+\]):(?P<path>[^/].*|/.*)$")
_HOST = re.compile(
    r"^(?:[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?)(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?)*$"
    r"|^\[[0-9A-Fa-f:.]+\]$"
)
_BRANCH = re.compile(r"^[A-Za-z0-9._/+-]{1,200}$")


def check_branch(branch: str) -> str:
    """A branch name git would accept as ``refs/heads/<branch>`` (a conservative subset), else GitUrlError."""
    b = (branch or "").strip()
    if (
        not _BRANCH.match(b)
        or b.startswith(("-", "/", "."))
        or b.endswith(("/", ".", ".lock"))
        or ".." in b
        or "//" in b
        or "/." in b
        or b == "@"
    ):
        raise GitUrlError(
            "branch must be a plain branch name (letters, digits, '.', '_', '-', '+', '/'; no '..', "
            "no leading '-' or '.', no trailing '/', '.' or '.lock')"
        )
    return b


def parse_git_url(url: str, repo_roots: tuple[str, ...] | list[str] = ()) -> GitUrl:
    """The URL git will be given, or GitUrlError saying why not (see the module docstring)."""
    raw = (url or "").strip()
    if not raw or len(raw) > 2000:
        raise GitUrlError("url must be 1-2000 characters")
    if any(ord(c) < 32 or c == "\x7f" or c.isspace() for c in raw):
        raise GitUrlError("url must not contain spaces or control characters")
    if raw.startswith("-"):
        raise GitUrlError("url must not start with '-'")
    if "::" in raw.split("://", 1)[0]:  # <helper>::<address> runs git-remote-<helper> (ext:: runs any command)
        raise GitUrlError(
            "url must be https://, ssh://, user@host:path or a local path (remote helpers like ext:: are refused)"
        )
    low = raw.lower()
    if low.startswith(("https://", "ssh://", "file://", "http://", "git://")) or "://" in raw:
        parts = urlsplit(raw)
        scheme = parts.scheme.lower()
        if scheme == "file":
            return _local(unquote(parts.path), repo_roots, bool(parts.netloc))
        if scheme not in ("https", "ssh"):
            raise GitUrlError(
                "url must be https://, ssh://, user@host:path or a local path (http://, git:// and "
                "other transports are refused)"
            )
        if parts.query or parts.fragment:
            raise GitUrlError("url must not have a query or a fragment")
        if parts.password is not None or (scheme == "https" and parts.username is not None):
            raise GitUrlError(
                "url carries a credential: register the URL without it and name a server-side "
                'credential instead ("credential": NAME, an entry of REPOCTX_GIT_CREDENTIALS)'
            )
        host = parts.hostname or ""
        if not host or not _HOST.match(host if ":" not in host else f"[{host}]"):
            raise GitUrlError("url has no valid host")
        try:
            port = parts.port
        except ValueError:
            raise GitUrlError("url has an invalid port") from None
        path = parts.path
        if not path.strip("/"):
            raise GitUrlError("url has no repository path")
        netloc_host = f"[{host}]" if ":" in host else host
        hostport = f"{netloc_host}:{port}" if port else netloc_host
        user = f"{parts.username}@" if scheme == "ssh" and parts.username else ""
        return GitUrl(f"{scheme}://{user}{hostport}{path}", scheme, hostport, path)
    if raw.startswith("/"):
        return _local(raw, repo_roots, False)
    m = _SCP.match(raw)
    if m and not m.group("host").startswith("-"):
        path = m.group("path")
        if not path.strip("/"):
            raise GitUrlError("url has no repository path")
        if ":" in (m.group("user") or ""):
            raise GitUrlError("url carries a credential: name a server-side credential instead")
        return GitUrl(raw, "ssh", m.group("host"), "/" + path.lstrip("/"))
    raise GitUrlError("url must be https://, ssh://, user@host:path or an absolute local path")


def under_roots(path: Path, roots) -> bool:
    """Whether ``path`` (already resolved) is one of ``roots`` or inside one, each root resolved the same way."""
    for r in roots:
        base = Path(r).expanduser().resolve()
        if path == base or path.is_relative_to(base):
            return True
    return False


def _local(path: str, repo_roots, has_host: bool) -> GitUrl:
    if has_host:
        raise GitUrlError("a file:// url must not name a host")
    p = Path(path)
    if not p.is_absolute():
        raise GitUrlError("a local repository must be an absolute path")
    resolved = p.resolve()
    if not repo_roots:
        raise GitUrlError(
            "a local repository needs REPOCTX_REPO_ROOTS on the server (the folders repositories may come from)"
        )
    if not under_roots(resolved, repo_roots):
        raise GitUrlError("the local repository is outside the folders REPOCTX_REPO_ROOTS allows")
    return GitUrl(str(resolved), "local", "", str(resolved))


def url_key(u: GitUrl | str) -> str:
    """One key per repository whatever the URL's form: https and ssh URLs of one host path agree
    (``github.com/acme/web``: lower case, no user, port, ``.git`` or trailing slash); a local one is
    ``local:<resolved path>``."""
    if isinstance(u, str):
        try:
            u = parse_git_url(u, ("/",))
        except GitUrlError:
            return ""
    if u.kind == "local":
        return "local:" + u.path.rstrip("/")
    host = u.host.lower()
    host = host.split("]", 1)[0] + "]" if host.startswith("[") else host.split(":", 1)[0]  # no port
    path = u.path.strip("/")
    if path.endswith(".git"):
        path = path[:-4]
    return f"{host}/{path.strip('/').lower()}"


def redact_url(text: str) -> str:
    """``scheme://user:secret@host`` → ``scheme://***@host`` anywhere in ``text``."""
    return re.sub(r"(?i)\b([a-z][a-z0-9+.-]*://)[^/@\s'\"]+@", r"\1***@", text or "")


def scrub(text: str, secrets: tuple[str, ...] | list[str] = (), limit: int = 300) -> str:
    """One line of git output fit for a log or a job record: no URL userinfo, no known secret, bounded."""
    out = redact_url(str(text or ""))
    for s in secrets:
        if s and len(s) >= 4:
            out = out.replace(s, "***")
    line = " ".join(ln.strip() for ln in out.splitlines() if ln.strip() and not ln.startswith("hint:"))
    return line if len(line) <= limit else line[: limit - 1] + "…"


# ------------------------------------------------------------------------------------ credentials
@dataclass(frozen=True)
class Credential:
    name: str
    username: str | None = field(default=None, repr=False)
    password: str | None = field(default=None, repr=False)
    ssh_key: str | None = None
    known_hosts: str | None = None
    urls: tuple[str, ...] = ()
    hook_secret: str | None = field(default=None, repr=False)
    problem: str | None = None  # why this server cannot use it (a *_env variable it names is not set)

    @property
    def secrets(self) -> tuple[str, ...]:
        return tuple(s for s in (self.password, self.hook_secret) if s)


_ENTRY_KEYS = {
    "username",
    "password",
    "password_env",
    "token",
    "token_env",
    "ssh_key",
    "known_hosts",
    "urls",
    "hook_secret",
    "hook_secret_env",
}
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")


def _entry(name: str, raw: dict, env) -> Credential:
    if not _NAME.match(name):
        raise CredentialError(
            "credential names are 1-100 of A-Z a-z 0-9 . _ - (REPOCTX_GIT_CREDENTIALS has one that is not)"
        )
    if not isinstance(raw, dict):
        raise CredentialError(f"credential {name!r} must be a table of settings")
    unknown = set(raw) - _ENTRY_KEYS
    if unknown:
        raise CredentialError(f"credential {name!r} has unknown settings: {', '.join(sorted(unknown))}")
    missing: list[str] = []

    def secret(key: str) -> str | None:
        if raw.get(key) is not None:
            return str(raw[key])
        var = raw.get(f"{key}_env")
        if var is None:
            return None
        value = env.get(str(var))
        if not value:
            missing.append(f"{key}_env names {var}, which is not set on this server")
        return value or None

    password = secret("password") or secret("token")
    username = raw.get("username")
    if password and not username:
        username = "x-access-token"  # what GitHub wants beside a token; GitLab accepts any name with a token
    urls = raw.get("urls") or ()
    if isinstance(urls, str):
        urls = (urls,)
    return Credential(
        name,
        str(username) if username else None,
        password,
        raw.get("ssh_key"),
        raw.get("known_hosts"),
        tuple(str(u) for u in urls),
        secret("hook_secret"),
        f"credential {name!r}: " + "; ".join(missing) if missing else None,
    )


class Credentials:
    """The entries of ``REPOCTX_GIT_CREDENTIALS`` (a file is read again when it changes)."""

    def __init__(self, source: str | None, env=None):
        self.source = (source or "").strip()
        self.env = env if env is not None else os.environ
        self._lock = threading.Lock()
        self._stamp: tuple | None = None
        self._entries: dict[str, Credential] = {}

    @property
    def configured(self) -> bool:
        return bool(self.source)

    def _load(self) -> dict[str, Credential]:
        if not self.source:
            return {}
        if self.source.startswith("{"):
            stamp: tuple = ("inline",)
        else:
            try:
                st = os.stat(self.source)
            except OSError:
                raise CredentialError("REPOCTX_GIT_CREDENTIALS names a file this server cannot read") from None
            stamp = (st.st_mtime_ns, st.st_size)
        with self._lock:
            if stamp == self._stamp:
                return self._entries
            if self.source.startswith("{"):
                text, toml = self.source, False
            else:
                try:
                    text = Path(self.source).read_text(encoding="utf-8")
                except OSError:
                    raise CredentialError("REPOCTX_GIT_CREDENTIALS names a file this server cannot read") from None
                toml = not text.lstrip().startswith("{")
            try:
                if toml:
                    import tomllib

                    data = tomllib.loads(text)
                else:
                    data = json.loads(text)
            except Exception as e:  # noqa: BLE001 - the parser's message may quote a line of the file: a secret, maybe
                raise CredentialError(
                    f"REPOCTX_GIT_CREDENTIALS does not parse as {'TOML' if toml else 'JSON'} ({type(e).__name__})"
                ) from None
            if not isinstance(data, dict):
                raise CredentialError("REPOCTX_GIT_CREDENTIALS must be a table of named entries")
            self._entries = {str(k): _entry(str(k), v, self.env) for k, v in data.items()}
            self._stamp = stamp
            return self._entries

    def names(self) -> list[str]:
        return sorted(self._load())

    def entries(self) -> list[Credential]:
        """Every entry, usable here or not (CredentialError only when the file itself cannot be read)."""
        try:
            return list(self._load().values())
        except CredentialError:
            return []

    def get(self, name: str) -> Credential:
        """The entry ``name``, usable on this server (CredentialError: unknown, or a variable it names is unset)."""
        entries = self._load()
        if name not in entries:
            raise CredentialError(f"no credential named {name!r} in the server's REPOCTX_GIT_CREDENTIALS")
        entry = entries[name]
        if entry.problem:
            raise CredentialError(entry.problem)
        return entry

    def for_url(self, url: str, name: str | None) -> Credential | None:
        """The credential a source uses: the one it names, else the first entry whose ``urls`` prefix its URL."""
        if name:
            return self.get(name)
        for cred in self._load().values():
            if any(url.startswith(prefix) for prefix in cred.urls):
                return self.get(cred.name)
        return None

    def all_secrets(self) -> tuple[str, ...]:
        try:
            return tuple(s for c in self._load().values() for s in c.secrets)
        except CredentialError:
            return ()


# ------------------------------------------------------------------------------------ the cache
_ASKPASS = """#!/bin/sh
# repoctx: answers git's credential prompts for one remote host only, from this git process's environment
case "$1" in
  *"//$REPOCTX_GIT_HOST'"*|*"@$REPOCTX_GIT_HOST'"*) ;;
  *) exit 1 ;;
esac
case "$1" in
  Username*) printf '%s\\n' "$REPOCTX_GIT_USERNAME" ;;
  Password*) printf '%s\\n' "$REPOCTX_GIT_PASSWORD" ;;
  *) exit 1 ;;
esac
"""

_PASSTHROUGH = (
    "GIT_SSL_CAINFO",
    "GIT_SSL_CAPATH",
    "SSL_CERT_FILE",
    "SSL_CERT_DIR",
    "https_proxy",
    "HTTPS_PROXY",
    "no_proxy",
    "NO_PROXY",
    "all_proxy",
    "ALL_PROXY",
)

_REFUSED = (
    "authentication failed",
    "could not read username",
    "could not read password",
    "permission denied",
    "repository not found",
    "does not appear to be a git repository",
    "not found",
    "access denied",
    "couldn't find remote ref",
    "invalid username or password",
    "403",
    "401",
    "host key verification failed",
)


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "-", text).strip("-.")[:60] or "repo"


class GitCache:
    """Clones under ``root``: ``clones/<slug>-<hash>.git`` per remote, ``worktrees/<entry>`` per registered
    entry (see the module docstring). One process-wide file lock per clone keeps git commands on one clone from
    different workers of a machine apart."""

    def __init__(self, root: str | Path, *, timeout: float = 600.0):
        self.root = Path(root).expanduser()
        self.timeout = float(timeout)

    # ---- places
    def clone_dir(self, u: GitUrl) -> Path:
        digest = hashlib.sha256(u.key.encode()).hexdigest()[:16]
        return self.root / "clones" / f"{_slug(u.key.rsplit('/', 1)[-1])}-{digest}.git"

    def worktree_dir(self, entry: str) -> Path:
        return self.root / "worktrees" / entry

    def _askpass(self) -> Path:
        path = self.root / "bin" / "askpass.sh"
        if not path.is_file() or path.read_text() != _ASKPASS:
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_suffix(f".{os.getpid()}.tmp")
            tmp.write_text(_ASKPASS)
            tmp.chmod(0o700)
            os.replace(tmp, path)
        return path

    @contextlib.contextmanager
    def lock(self, u: GitUrl) -> Iterator[None]:
        """This machine's lock on one clone (fetches and checkouts of its entries one at a time)."""
        path = self.clone_dir(u).with_suffix(".lock")
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "a+") as f:
            fcntl.flock(f, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(f, fcntl.LOCK_UN)

    # ---- running git
    def env(self, u: GitUrl, cred: Credential | None) -> dict[str, str]:
        home = self.root / "home"
        home.mkdir(parents=True, exist_ok=True)
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": str(home),
            "LANG": "C",
            "LC_ALL": "C",
            "LANGUAGE": "",
            "GIT_TERMINAL_PROMPT": "0",
            "GIT_CONFIG_NOSYSTEM": "1",
            "GIT_CONFIG_GLOBAL": os.devnull,
            "GIT_ASKPASS": str(self._askpass()),
            "GIT_PROTOCOL_FROM_USER": "0",
            "GIT_OPTIONAL_LOCKS": "0",
        }
        for name in _PASSTHROUGH:  # a private CA or a proxy the operator set for this process
            if os.environ.get(name):
                env[name] = os.environ[name]
        ssh = ["ssh", "-o", "BatchMode=yes", "-o", "ConnectTimeout=30"]
        known = cred.known_hosts if cred and cred.known_hosts else None
        if known:
            ssh += ["-o", "StrictHostKeyChecking=yes", "-o", f"UserKnownHostsFile={known}"]
        else:  # trust on first use, remembered in the cache (see docs/team.md to pin the hosts instead)
            ssh += ["-o", "StrictHostKeyChecking=accept-new", "-o", f"UserKnownHostsFile={home / 'known_hosts'}"]
        if cred and cred.ssh_key:
            ssh += ["-o", "IdentitiesOnly=yes", "-i", str(cred.ssh_key)]
        env["GIT_SSH_COMMAND"] = " ".join(_shell_quote(a) for a in ssh)
        if cred and cred.password:
            env.update(
                REPOCTX_GIT_HOST=u.host,
                REPOCTX_GIT_USERNAME=cred.username or "x-access-token",
                REPOCTX_GIT_PASSWORD=cred.password,
            )
        config = [
            ("core.hooksPath", os.devnull),
            ("credential.helper", ""),
            ("core.fsmonitor", "false"),
            ("protocol.allow", "never"),
            ("protocol.https.allow", "always"),
            ("protocol.ssh.allow", "always"),
            ("protocol.file.allow", "always" if u.kind == "local" else "never"),
            ("submodule.recurse", "false"),
            ("advice.detachedHead", "false"),
            ("gc.auto", "0"),
        ]
        env["GIT_CONFIG_COUNT"] = str(len(config))
        for i, (k, v) in enumerate(config):
            env[f"GIT_CONFIG_KEY_{i}"] = k
            env[f"GIT_CONFIG_VALUE_{i}"] = v
        return env

    def run(
        self,
        u: GitUrl,
        cred: Credential | None,
        *args: str,
        cwd: Path | None = None,
        timeout: float | None = None,
        what: str = "git",
    ) -> str:
        """``git args`` in the closed environment; stdout, or GitError with a scrubbed reason."""
        secrets = cred.secrets if cred else ()
        try:
            proc = subprocess.Popen(
                ["git", *args],
                cwd=str(cwd) if cwd else None,
                env=self.env(u, cred),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                start_new_session=True,
            )
        except OSError as e:
            raise GitError(f"{what}: cannot run git ({type(e).__name__})", retry=False) from None
        limit = timeout or self.timeout
        try:
            out, err = proc.communicate(timeout=limit)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)  # git's helpers (remote-https, ssh) with it
            proc.communicate()
            raise GitError(f"{what}: no answer within {limit:g} s (REPOCTX_GIT_TIMEOUT)") from None
        if proc.returncode != 0:
            reason = scrub(err.decode("utf-8", "replace"), secrets) or f"exit status {proc.returncode}"
            refused = any(s in reason.lower() for s in _REFUSED)
            raise GitError(f"{what} failed: {reason}", retry=not refused)
        return out.decode("utf-8", "replace")

    # ---- operations
    def ls_remote(self, u: GitUrl, cred: Credential | None, branches: list[str] | None = None) -> dict[str, str]:
        """{branch: commit} of the remote's heads (those named, or all)."""
        refs = [f"refs/heads/{b}" for b in branches] if branches else []
        out = self.run(u, cred, "ls-remote", "--heads", "--", u.url, *refs, what="git ls-remote")
        heads = {}
        for line in out.splitlines():
            sha, _, ref = line.partition("\t")
            if ref.startswith("refs/heads/"):
                heads[ref[len("refs/heads/") :]] = sha.strip()
        return heads

    def fetch(self, u: GitUrl, cred: Credential | None, branch: str) -> str:
        """Fetch ``branch`` into the clone (created on first use; blobs come with the checkout); its commit."""
        check_branch(branch)
        d = self.clone_dir(u)
        if not (d / "HEAD").is_file():
            tmp = d.with_name(d.name + f".{os.getpid()}.new")
            if tmp.exists():
                import shutil

                shutil.rmtree(tmp, ignore_errors=True)
            tmp.parent.mkdir(parents=True, exist_ok=True)
            self.run(u, cred, "init", "--quiet", "--bare", "--template=", str(tmp), what="git init")
            os.replace(tmp, d)
        self.run(u, cred, "config", "remote.origin.url", u.url, cwd=d, what="git config")
        if u.kind != "local":  # a partial clone: commits and trees now, blobs when a worktree needs them
            self.run(u, cred, "config", "remote.origin.promisor", "true", cwd=d, what="git config")
            self.run(u, cred, "config", "remote.origin.partialclonefilter", "blob:none", cwd=d, what="git config")
        self.run(
            u,
            cred,
            "fetch",
            "--quiet",
            "--no-tags",
            "--no-write-fetch-head",
            "--prune",
            "origin",
            f"+refs/heads/{branch}:refs/heads/{branch}",
            cwd=d,
            what="git fetch",
        )
        return self.run(
            u, cred, "rev-parse", "--verify", "--quiet", f"refs/heads/{branch}^{{commit}}", cwd=d, what="git rev-parse"
        ).strip()

    def behind(self, u: GitUrl, old: str | None, new: str) -> int | None:
        """Commits in ``new`` that ``old`` lacks (None when unknown: no old commit, or it is not in the clone)."""
        if not old or old == new:
            return 0 if old == new else None
        try:
            return int(
                self.run(
                    u, None, "rev-list", "--count", f"{old}..{new}", cwd=self.clone_dir(u), what="git rev-list"
                ).strip()
            )
        except (GitError, ValueError):
            return None

    def checkout(self, u: GitUrl, cred: Credential | None, entry: str, commit: str) -> Path:
        """The entry's worktree at ``commit`` (created on first use; only changed files are rewritten)."""
        d = self.clone_dir(u)
        wt = self.worktree_dir(entry)
        if not re.fullmatch(r"[0-9a-f]{40}([0-9a-f]{24})?", commit or ""):
            raise GitError("git checkout: not a commit id", retry=False)
        if (wt / ".git").is_file() and _worktree_of(wt, d):
            self.run(u, cred, "checkout", "--quiet", "--force", "--detach", commit, cwd=wt, what="git checkout")
            self.run(u, cred, "clean", "--quiet", "-ffdx", cwd=wt, what="git clean")
        else:
            if wt.exists():
                import shutil

                shutil.rmtree(wt, ignore_errors=True)
            self.run(u, cred, "worktree", "prune", cwd=d, what="git worktree prune")
            wt.parent.mkdir(parents=True, exist_ok=True)
            self.run(
                u,
                cred,
                "worktree",
                "add",
                "--quiet",
                "--force",
                "--detach",
                str(wt),
                commit,
                cwd=d,
                what="git worktree add",
            )
        return wt


def _worktree_of(wt: Path, clone: Path) -> bool:
    try:
        line = (wt / ".git").read_text().strip()
    except OSError:
        return False
    return line.startswith("gitdir:") and Path(line[7:].strip()).resolve().parent.parent == clone.resolve()


def _shell_quote(s: str) -> str:
    import shlex

    return shlex.quote(s)
