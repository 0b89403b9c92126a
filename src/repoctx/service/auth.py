"""API keys, principals and roles.

* A key belongs to a principal (its name) and names a role. ``repoctx keys add NAME --role ROLE`` prints
  the key once; only its SHA-256 is stored (the key carries 256 random bits, so a fast hash is enough),
  and a presented key is compared in constant time (``hmac.compare_digest``).
* A role is a list of grants -- a repository (``*`` for any) with path globs to include and exclude -- or
  ``admin`` (every repository, and may register repositories). The role ``admin`` always exists. Roles
  live in the same database (``repoctx roles add ...``); ``REPOCTX_ROLES`` may name a TOML or JSON file of
  roles that take precedence over the stored ones of the same name::

      [roles.frontend]
      grants = [{repo = "web", include = ["src/*"], exclude = ["src/secrets/*"]},
                {repo = "docs"}]
      [roles.ops]
      admin = true

* A principal's role becomes a ``Scope(grants=...)`` that every read compiles into its query.

Tables live beside the index: ``<REPOCTX_INDEX_DIR>/service.sqlite``, or PostgreSQL tables created by
``migrate_postgres(url)`` (which ``repoctx db migrate`` calls)."""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import re
import secrets
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from repoctx.service.db import ServiceDB, migrate_postgres as _migrate_service_tables
from repoctx.store.base import Grant, Scope
from repoctx.store.globs import GlobError, check as check_glob

__all__ = ["Principal", "Role", "KeyStore", "migrate_postgres", "load_roles_file", "ADMIN_ROLE", "KEY_PREFIX"]

KEY_PREFIX = "rcx"
ADMIN_ROLE = "admin"
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.@:-]{0,127}$")  # principals double as session namespaces
_KEY = re.compile(r"^rcx_([0-9a-f]{12})_([A-Za-z0-9_-]{20,100})$")
_DUMMY_HASH = hashlib.sha256(b"repoctx: no such key").hexdigest()
log = logging.getLogger("repoctx.service")


def migrate_postgres(url: str) -> int:
    """Create or upgrade the service's PostgreSQL tables (API keys, roles, index jobs). Idempotent."""
    return _migrate_service_tables(url)


def _check_name(kind: str, name: str) -> str:
    if not isinstance(name, str) or not _NAME.match(name):
        raise ValueError(f"{kind} name {name!r}: use 1-128 letters, digits, '_', '.', '@', ':' or '-'")
    return name


def hash_key(key: str) -> str:
    return hashlib.sha256(key.encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class Role:
    name: str
    admin: bool = False
    grants: tuple[Grant, ...] = ()

    def scope(self) -> Scope:
        return Scope() if self.admin else Scope(grants=self.grants)

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "admin": self.admin,
            "grants": [{"repo": g.repo, "include": list(g.include), "exclude": list(g.exclude)} for g in self.grants],
        }


@dataclass(frozen=True)
class Principal:
    name: str
    role: str
    admin: bool
    scope: Scope  # the role's grants; every read goes through it
    key_id: str = ""


def _grant(d: dict) -> Grant:
    """One grant from its table; a path pattern the grammar refuses (``repoctx.store.globs``) is a
    :class:`GlobError` naming it: an access rule is never stored or read as something it did not say."""
    if not isinstance(d, dict):
        raise ValueError(f"a grant is a table with repo/include/exclude, not {d!r}")
    unknown = set(d) - {"repo", "include", "exclude"}
    if unknown:
        raise ValueError(f"unknown grant fields: {', '.join(sorted(unknown))}")
    repo = str(d.get("repo") or "*")
    rules = {}
    for field in ("include", "exclude"):
        pats = d.get(field) or []
        if isinstance(pats, str):
            pats = [pats]
        if not isinstance(pats, (list, tuple)):
            raise ValueError(f"a grant's {field} is a list of path patterns, not {pats!r}")
        rules[field] = tuple(str(p) for p in pats)
        for p in rules[field]:
            try:
                check_glob(p)
            except GlobError as e:
                raise GlobError(p, f"{e.reason} (in the {field} of a grant for repository {repo!r})") from None
    return Grant(repo, rules["include"], rules["exclude"])


def _stored_grants(role: str, grants: list) -> tuple[Grant, ...]:
    """A stored role's grants. One that no longer reads (written before the grammar refused its pattern)
    allows nothing: grants only ever add access, so dropping a whole grant can narrow a role, never widen it."""
    out = []
    for g in grants:
        try:
            out.append(_grant(g))
        except ValueError as e:
            log.warning(
                "role %r: a stored grant is ignored (it allows nothing): %s; "
                "fix it with `repoctx roles remove` and `repoctx roles add`",
                role,
                e,
            )
    return tuple(out)


def load_roles_file(path: str | Path) -> dict[str, Role]:
    """Roles from a TOML (``[roles.NAME]``) or JSON (``{"roles": {NAME: {...}}}``) file. A grant the
    grammar refuses fails the whole file, naming the role."""
    path = Path(path)
    text = path.read_text(encoding="utf-8")
    if path.suffix.lower() == ".json":
        data = json.loads(text)
    else:
        import tomllib

        data = tomllib.loads(text)
    roles = data.get("roles", data) if isinstance(data, dict) else None
    if not isinstance(roles, dict):
        raise ValueError(f"{path}: expected a table of roles")
    out = {}
    for name, spec in roles.items():
        _check_name("role", name)
        spec = spec or {}
        try:
            grants = tuple(_grant(g) for g in spec.get("grants") or [])
        except GlobError as e:
            raise GlobError(e.pattern, f"{e.reason}, role {name!r} of {path}") from None
        out[name] = Role(name, bool(spec.get("admin", False)), grants)
    return out


class KeyStore:
    """Keys and roles in the service database (see the module docstring)."""

    def __init__(
        self,
        db: ServiceDB | str | Path,
        *,
        roles_file: str | Path | None = None,
        cache_seconds: float = 5.0,
        owns_db: bool | None = None,
    ):
        self.db = db if isinstance(db, ServiceDB) else ServiceDB(db)
        self._owns_db = (not isinstance(db, ServiceDB)) if owns_db is None else owns_db
        self.roles_file = roles_file
        self._file_roles = load_roles_file(roles_file) if roles_file else {}
        self.cache_seconds = cache_seconds
        self._cache: dict[str, tuple[Principal, float]] = {}
        self._lock = threading.Lock()

    def close(self) -> None:
        if self._owns_db:
            self.db.close()

    # ---------------------------------------------------------------- roles
    def role(self, name: str) -> Role | None:
        if name in self._file_roles:
            return self._file_roles[name]
        rows = self.db.q("SELECT name, admin, grants FROM repoctx_roles WHERE name=?", (name,))
        if rows:
            return Role(rows[0][0], bool(rows[0][1]), _stored_grants(rows[0][0], json.loads(rows[0][2] or "[]")))
        if name == ADMIN_ROLE:
            return Role(ADMIN_ROLE, admin=True)
        return None

    def roles(self) -> list[Role]:
        names = {r[0] for r in self.db.q("SELECT name FROM repoctx_roles")} | set(self._file_roles) | {ADMIN_ROLE}
        # a role deleted between the two reads is left out, not listed as None
        return [r for n in sorted(names) if (r := self.role(n)) is not None]

    def add_role(
        self,
        name: str,
        *,
        repo: str | None = None,
        include: list[str] | tuple = (),
        exclude: list[str] | tuple = (),
        admin: bool = False,
    ) -> Role:
        """Create the role if missing; add a grant (when ``repo``/``include``/``exclude`` is given) and/or make
        it an admin role. Grants accumulate: call again to allow another repository."""
        _check_name("role", name)
        if name in self._file_roles:
            raise ValueError(f"role {name!r} is defined in {self.roles_file}: edit that file")
        g = None
        if repo is not None or include or exclude:  # refused (GlobError) before anything is written
            g = _grant({"repo": repo or "*", "include": list(include), "exclude": list(exclude)})
        with self.db.transaction() as run:
            rows = run("SELECT admin, grants FROM repoctx_roles WHERE name=?", (name,))
            grants = json.loads(rows[0][1]) if rows else []
            is_admin = bool(rows[0][0]) if rows else False
            if g is not None:
                grants.append({"repo": g.repo, "include": list(g.include), "exclude": list(g.exclude)})
            is_admin = is_admin or admin
            if rows:
                run(
                    "UPDATE repoctx_roles SET admin=?, grants=? WHERE name=?", (int(is_admin), json.dumps(grants), name)
                )
            else:
                run(
                    "INSERT INTO repoctx_roles(name, admin, grants, created) VALUES(?,?,?,?)",
                    (name, int(is_admin), json.dumps(grants), time.time()),
                )
        self._cache.clear()
        role = self.role(name)
        if role is None:  # deleted by another request in between
            raise ValueError(f"role {name!r} was removed while it was being changed")
        return role

    def remove_role(self, name: str) -> bool:
        n = self.db.q("DELETE FROM repoctx_roles WHERE name=? RETURNING name", (name,))
        self._cache.clear()
        return bool(n)

    # ---------------------------------------------------------------- keys
    def add_key(self, name: str, role: str) -> tuple[str, str]:
        """A new key for principal ``name`` with ``role``: (key id, the key). The key is shown only here."""
        _check_name("principal", name)
        if self.role(role) is None:
            raise ValueError(f"no role {role!r}: create it with `repoctx roles add {role} --repo NAME ...`")
        key_id = secrets.token_hex(6)
        key = f"{KEY_PREFIX}_{key_id}_{secrets.token_urlsafe(32)}"
        self.db.q(
            "INSERT INTO repoctx_api_keys(key_id, name, role, hash, created) VALUES(?,?,?,?,?)",
            (key_id, name, role, hash_key(key), time.time()),
        )
        return key_id, key

    def keys(self, include_revoked: bool = False) -> list[dict[str, Any]]:
        where = "" if include_revoked else " WHERE revoked IS NULL"
        rows = self.db.q(f"SELECT key_id, name, role, created, revoked FROM repoctx_api_keys{where} ORDER BY created")
        return [{"id": r[0], "name": r[1], "role": r[2], "created": r[3], "revoked": r[4]} for r in rows]

    def revoke(self, name_or_id: str) -> int:
        """Revoke one key (by id) or every key of a principal (by name); how many were revoked."""
        rows = self.db.q(
            "UPDATE repoctx_api_keys SET revoked=? WHERE revoked IS NULL AND (key_id=? OR name=?) RETURNING key_id",
            (time.time(), name_or_id, name_or_id),
        )
        self._cache.clear()
        return len(rows)

    def peek(self, key: str) -> Principal | None:
        """The principal of a recently checked key, without touching the database (None if not cached)."""
        hit = self._cache.get(hash_key(key)) if self.cache_seconds > 0 else None
        return hit[0] if hit is not None and hit[1] > time.monotonic() else None

    def authenticate(self, key: str | None) -> Principal | None:
        """The principal a presented key belongs to, or None (unknown, malformed or revoked)."""
        if not key:
            return None
        digest = hash_key(key)
        now = time.monotonic()
        with self._lock:
            hit = self._cache.get(digest)
        if hit is not None and hit[1] > now:
            return hit[0]
        m = _KEY.match(key)
        rows = (
            self.db.q("SELECT name, role, hash FROM repoctx_api_keys WHERE key_id=? AND revoked IS NULL", (m.group(1),))
            if m
            else []
        )
        stored = rows[0][2] if rows else _DUMMY_HASH
        if not hmac.compare_digest(stored, digest) or not rows or m is None:  # no rows when m is None
            return None
        name, role_name = rows[0][0], rows[0][1]
        role = self.role(role_name)
        if role is None:  # a deleted role allows nothing
            role = Role(role_name, admin=False, grants=())
        principal = Principal(name, role_name, role.admin, role.scope(), m.group(1))
        if self.cache_seconds > 0:
            with self._lock:
                if len(self._cache) > 10000:
                    self._cache.clear()
                self._cache[digest] = (principal, now + self.cache_seconds)
        return principal
