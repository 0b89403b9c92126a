"""Push webhooks (``hooks_router``): ``POST /hooks/github``, ``POST /hooks/gitlab`` and ``POST /hooks/generic``.

They are not API-key endpoints (the auth middleware lets ``/hooks/*`` through; the per-address rate limit and the
body limits still apply). Each delivery proves itself instead, and is refused without touching the queue when it
does not:

* GitHub: ``X-Hub-Signature-256: sha256=HMAC-SHA256(secret, body)``; delivery id ``X-GitHub-Delivery``.
* GitLab: ``X-Gitlab-Token: secret``; delivery id ``X-Gitlab-Event-UUID`` (or ``Idempotency-Key``).
* generic: ``X-Repoctx-Signature: sha256=HMAC-SHA256(secret, TIMESTAMP + "." + body)`` with
  ``X-Repoctx-Timestamp: TIMESTAMP`` (Unix seconds, at most 5 minutes from the server's clock either way) and
  ``X-Repoctx-Delivery: ID``; the body names ``{"url", "branch"}`` (or ``"ref"``) or ``{"repo"}`` (an entry's
  name), with an optional ``"after"`` commit.

The secret is the entry's own (``hook_secret`` of the credential the entry names) or else the server's
(``REPOCTX_HOOK_SECRET``); a delivery counts only for the entries whose secret it proves, so one repository's secret
cannot trigger another's. Comparisons are constant-time (``hmac.compare_digest``). Answers: 401 without a signature
(or token, or timestamp), 403 when it does not verify, is stale or was seen before (delivery ids are remembered in
``repoctx_hook_deliveries``, shared by every API process, for 30 days), 400 for a verified delivery without an id
or with a body that is not a push. A verified push of a branch queues one index job per matching entry (a job
already waiting for the entry absorbs it: a burst of pushes is one job) and records the pushed commit as the
branch head last seen."""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import re
import time
from dataclasses import dataclass
from typing import Any

from fastapi import APIRouter, HTTPException, Request

from repoctx.service.git import Credential, CredentialError, Credentials, url_key
from repoctx.service.limits import error_body
from repoctx.service.sources import RepoSource, Sources

log = logging.getLogger("repoctx.service.hooks")

__all__ = ["hooks_router", "sign_generic", "sign_github", "STALE_AFTER"]

STALE_AFTER = 300.0  # seconds a generic delivery's timestamp may differ from the server's clock
REMEMBER_DELIVERIES = 30 * 86400.0
_SHA = re.compile(r"^[0-9a-f]{40}([0-9a-f]{24})?$")
_DELIVERY = re.compile(r"^[A-Za-z0-9._:-]{1,200}$")


def sign_github(secret: str, body: bytes) -> str:
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


def sign_generic(secret: str, timestamp: str, body: bytes) -> str:
    return "sha256=" + hmac.new(secret.encode(), timestamp.encode() + b"." + body, hashlib.sha256).hexdigest()


def _same(a: str, b: str) -> bool:
    return hmac.compare_digest(a.encode("utf-8", "surrogateescape"), b.encode("utf-8", "surrogateescape"))


@dataclass
class Push:
    keys: list[str]  # url keys of the pushed repository
    branch: str | None  # None: not a branch push (a tag, a deletion, another event)
    after: str | None
    names: list[str]  # entry names given directly (generic hook)


def _refused(status: int, error: str, detail: str) -> HTTPException:
    return HTTPException(status, error_body(error, detail))


def _branch(ref: Any) -> str | None:
    if isinstance(ref, str) and ref.startswith("refs/heads/") and len(ref) > len("refs/heads/"):
        return ref[len("refs/heads/") :]
    return None


def _sha(value: Any) -> str | None:
    return value if isinstance(value, str) and _SHA.match(value) and set(value) != {"0"} else None


def _keys(*urls: Any) -> list[str]:
    return sorted({k for k in (url_key(u) for u in urls if isinstance(u, str) and u) if k})


def github_push(payload: dict) -> Push:
    repo = payload.get("repository")
    if not isinstance(repo, dict):
        repo = {}
    keys = _keys(repo.get("clone_url"), repo.get("ssh_url"), repo.get("git_url"), repo.get("html_url"), repo.get("url"))
    deleted = bool(payload.get("deleted"))
    return Push(keys, None if deleted else _branch(payload.get("ref")), _sha(payload.get("after")), [])


def gitlab_push(payload: dict) -> Push:
    project = payload.get("project")
    if not isinstance(project, dict):
        project = {}
    repo = payload.get("repository")
    if not isinstance(repo, dict):
        repo = {}
    keys = _keys(
        project.get("git_http_url"),
        project.get("git_ssh_url"),
        project.get("web_url"),
        repo.get("git_http_url"),
        repo.get("git_ssh_url"),
        repo.get("homepage"),
        repo.get("url"),
    )
    after = _sha(payload.get("checkout_sha")) or _sha(payload.get("after"))
    kind = payload.get("object_kind") or payload.get("event_name")
    branch = _branch(payload.get("ref")) if kind in ("push", None) and after else None
    return Push(keys, branch, after, [])


def generic_push(payload: dict) -> Push:
    branch = payload.get("branch") if isinstance(payload.get("branch"), str) else _branch(payload.get("ref"))
    names = [payload["repo"]] if isinstance(payload.get("repo"), str) else []
    return Push(_keys(payload.get("url")), branch or None, _sha(payload.get("after")), names)


def hooks_router(svc, threaded) -> APIRouter:
    """The endpoints above, bound to one ``Service`` (``app.py``) and its ``threaded`` runner."""
    router = APIRouter()
    conf = svc.conf
    sources = Sources(svc.db)
    credentials = Credentials(conf.git_credentials)

    def secret_of(src: RepoSource) -> str | None:
        """The entry's own webhook secret (from its credential), else the server's."""
        if src.credential:
            entry: Credential | None
            try:
                entry = credentials.get(src.credential)
            except CredentialError:  # its token may live on the workers alone: the hook secret may still be here
                entry = next((c for c in credentials.entries() if c.name == src.credential), None)
            own = entry.hook_secret if entry is not None else None
            if own:
                return own
        return conf.hook_secret

    def candidates(push: Push) -> list[RepoSource]:
        found = {s.name: s for s in sources.by_url_keys(push.keys)}
        for name in push.names:
            s = sources.get(name)
            if s is not None and s.kind == "git":
                found[s.name] = s
        return list(found.values())

    def verified(entries: list[RepoSource], prove) -> tuple[bool, list[RepoSource]]:
        """(whether any secret proves the delivery, the entries whose secret does). The server's secret is tried
        even without entries (a ping, a push of a repository nobody registered)."""
        secrets: dict[str, bool] = {}
        for s in {secret_of(e) for e in entries} | {conf.hook_secret}:
            if s:
                secrets[s] = prove(s)
        ok = [e for e in entries if secrets.get(secret_of(e) or "", False)]
        return any(secrets.values()), ok

    def remember(provider: str, delivery: str) -> bool:
        """True the first time a delivery id is seen (by any API process)."""
        rows = svc.db.q(
            "INSERT INTO repoctx_hook_deliveries(provider, delivery, received) VALUES(?, ?, {now}) "
            "ON CONFLICT (provider, delivery) DO NOTHING RETURNING delivery",
            (provider, delivery),
        )
        try:
            svc.db.q("DELETE FROM repoctx_hook_deliveries WHERE received < {now} - ?", (REMEMBER_DELIVERIES,))
        except Exception:  # noqa: BLE001 - housekeeping only
            pass
        return bool(rows)

    def accept(provider: str, delivery: str | None, push: Push, entries: list[RepoSource], event: str) -> dict:
        if not delivery or not _DELIVERY.match(delivery):
            raise _refused(400, "invalid_request", "the delivery has no usable id header")
        if not remember(provider, delivery):
            log.warning("hook %s: delivery %s refused: seen before", provider, delivery)
            raise _refused(403, "replayed", "this delivery was received before")
        if push.branch is None:
            return {"queued": [], "ignored": f"{event}: not a push of a branch"}
        queued = []
        for src in entries:
            if src.branch != push.branch:
                continue
            if push.after:
                sources.saw_head(src.name, push.after, fetched=False)
            job = svc.jobs.enqueue(src.name, "")
            queued.append({"repo": src.name, "job": job.id, "status": job.status})
        log.info("hook %s: delivery %s queued %s", provider, delivery, [q["repo"] for q in queued] or "nothing")
        return {"queued": queued}

    async def body_and_payload(request: Request) -> tuple[bytes, dict | None]:
        body = await request.body()
        try:
            payload = json.loads(body) if body else None
        except (ValueError, UnicodeDecodeError):
            payload = None
        return body, payload if isinstance(payload, dict) else None

    def not_a_push() -> HTTPException:
        return _refused(400, "invalid_request", "the body is not a JSON push event")

    def forged(provider: str) -> HTTPException:
        svc.metrics.auth_failures.inc()
        log.warning("hook %s: delivery refused: the signature does not verify", provider)
        return _refused(403, "forbidden", "the delivery's signature does not verify")

    def verified_push(provider: str, push: Push, payload: dict | None, matches) -> list[RepoSource]:
        """The entries whose secret `matches` the delivery; refuses a forged delivery, then a body that is no push."""
        ok, entries = verified(candidates(push), matches)
        if not ok:
            raise forged(provider)
        if payload is None:
            raise not_a_push()
        return entries

    @router.post(
        "/hooks/github",
        tags=["webhooks"],
        status_code=202,
        summary="A GitHub push webhook (X-Hub-Signature-256, X-GitHub-Delivery)",
    )
    async def github(request: Request) -> dict:
        given = request.headers.get("x-hub-signature-256")
        if not given:
            raise _refused(401, "unauthorized", "the delivery is not signed (X-Hub-Signature-256)")
        body, payload = await body_and_payload(request)
        push = github_push(payload or {})

        def work():
            entries = verified_push("github", push, payload, lambda s: _same(sign_github(s, body), given))
            event = request.headers.get("x-github-event", "")
            if event == "ping":
                accept("github", request.headers.get("x-github-delivery"), Push([], None, None, []), [], event)
                return {"queued": [], "ok": True}
            if event != "push":
                push.branch = None
            return accept("github", request.headers.get("x-github-delivery"), push, entries, event or "event")

        return await threaded(work)

    @router.post(
        "/hooks/gitlab",
        tags=["webhooks"],
        status_code=202,
        summary="A GitLab push webhook (X-Gitlab-Token, X-Gitlab-Event-UUID)",
    )
    async def gitlab(request: Request) -> dict:
        given = request.headers.get("x-gitlab-token")
        if not given:
            raise _refused(401, "unauthorized", "the delivery has no token (X-Gitlab-Token)")
        _body, payload = await body_and_payload(request)
        push = gitlab_push(payload or {})

        def work():
            entries = verified_push("gitlab", push, payload, lambda s: _same(s, given))
            delivery = request.headers.get("x-gitlab-event-uuid") or request.headers.get("idempotency-key")
            return accept("gitlab", delivery, push, entries, request.headers.get("x-gitlab-event", "event"))

        return await threaded(work)

    @router.post(
        "/hooks/generic",
        tags=["webhooks"],
        status_code=202,
        summary="A signed push notice from any host or CI (X-Repoctx-Signature over timestamp.body, "
        "X-Repoctx-Timestamp, X-Repoctx-Delivery)",
    )
    async def generic(request: Request) -> dict:
        given = request.headers.get("x-repoctx-signature")
        stamp = request.headers.get("x-repoctx-timestamp")
        if not given or not stamp:
            raise _refused(
                401, "unauthorized", "the delivery is not signed (X-Repoctx-Signature and X-Repoctx-Timestamp)"
            )
        body, payload = await body_and_payload(request)
        push = generic_push(payload or {})

        def work():
            ok, entries = verified(candidates(push), lambda s: _same(sign_generic(s, stamp, body), given))
            if not ok:
                raise forged("generic")
            try:
                age = abs(time.time() - float(stamp))
            except ValueError:
                age = float("inf")
            if not age <= STALE_AFTER:
                log.warning("hook generic: delivery refused: timestamp %.0f s away from this server's clock", age)
                raise _refused(
                    403, "stale", f"the delivery's timestamp is more than {STALE_AFTER:g} s from the server's clock"
                )
            if payload is None:
                raise not_a_push()
            return accept("generic", request.headers.get("x-repoctx-delivery"), push, entries, "push")

        return await threaded(work)

    return router
