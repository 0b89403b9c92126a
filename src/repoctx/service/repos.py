"""The repository and job endpoints of the service (``repos_router``): ``GET /repos``, ``POST /repos`` (admin: a
path under ``REPOCTX_REPO_ROOTS``, or a git URL and branch), ``GET /repos/{name}``, ``GET /jobs`` and ``GET
/jobs/{id}`` (admin), ``POST /jobs/{id}/cancel`` (admin).

A git URL never carries a credential (``git.py`` refuses one; the refusal does not repeat the URL): a registration
names a server-side credential instead (``"credential": NAME``, an entry of ``REPOCTX_GIT_CREDENTIALS``), and only
that name is stored. What a key that is not an admin sees of a repository is unchanged by git: a job's state (not its
counts, worker or detail), the branch and commits (not the URL, the credential's name or a path)."""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Annotated, Any, Literal

from fastapi import APIRouter, HTTPException, Path as PathParam, Query
from pydantic import Field, StringConstraints, model_validator

from repoctx.service.app import REPO_NAME, PrincipalDep, RepoName, _Model
from repoctx.service.git import CredentialError, Credentials, GitUrlError, check_branch, parse_git_url, under_roots
from repoctx.service.limits import error_body
from repoctx.service.sources import Sources
from repoctx.store.base import Scope, check_repo_name

__all__ = ["RegisterRequest", "repos_router"]

CREDENTIAL_NAME = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$"
JobStatus = Literal["queued", "running", "cancelling", "done", "failed", "cancelled"]


class RegisterRequest(_Model):
    """A path on the indexing machines (``path``), or a git URL and branch (``url``, ``branch``, ``credential``)."""

    name: RepoName = Field(description="The repository's name in the store (one entry per branch of a URL).")
    path: Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=4096)] | None = Field(
        None, description="Its root directory on the machine(s) that index it (under REPOCTX_REPO_ROOTS)."
    )
    url: Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=2000)] | None = Field(
        None,
        description="https://host/path, ssh://host/path, user@host:path, or a local repository path (under "
        "REPOCTX_REPO_ROOTS). Never with a credential in it.",
    )
    branch: Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=200)] | None = Field(
        None, description="The branch to follow (with url)."
    )
    credential: Annotated[str, StringConstraints(pattern=CREDENTIAL_NAME)] | None = Field(
        None, description="The name of a server-side credential (an entry of REPOCTX_GIT_CREDENTIALS), with url."
    )

    @model_validator(mode="after")
    def _one_source(self) -> RegisterRequest:
        if (self.path is None) == (self.url is None):
            raise ValueError("give either path or url (with branch)")
        if self.url is None and (self.branch is not None or self.credential is not None):
            raise ValueError("branch and credential go with url")
        if self.url is not None and self.branch is None:
            raise ValueError("url needs a branch")
        return self


def _forbidden(detail: str) -> HTTPException:
    return HTTPException(403, error_body("forbidden", detail))


def _invalid(detail: str) -> HTTPException:
    return HTTPException(400, error_body("invalid_request", detail))


def repos_router(svc, threaded: Callable) -> APIRouter:
    """The endpoints above, bound to one ``Service`` (``app.py``) and its ``threaded`` runner."""
    router = APIRouter()
    conf = svc.conf
    sources = Sources(svc.db)
    credentials = Credentials(conf.git_credentials)

    def need_admin(p, what: str) -> None:
        if not p.admin:
            raise _forbidden(f"{what} needs an admin key")

    # ---- repositories
    @router.get("/repos", tags=["repositories"], summary="The repositories this key may see")
    async def list_repos(p: PrincipalDep) -> dict:
        def work():
            out = []
            for rec in svc.store.repos(p.scope):
                meta = rec.meta or {}
                out.append(
                    {
                        "name": rec.name,
                        "indexed": meta.get("complete") == "1",
                        "indexed_at": float(meta["indexed_at"]) if meta.get("indexed_at") else None,
                    }
                )
            return {"repos": out}

        return await threaded(work)

    @router.post(
        "/repos",
        tags=["repositories"],
        status_code=202,
        summary="Register a repository (a path, or a git URL and branch) and queue its indexing (admin keys)",
    )
    async def register_repo(req: RegisterRequest, p: PrincipalDep) -> dict:
        need_admin(p, "registering repositories")

        def work():
            check_repo_name(req.name)
            if req.url is not None:
                src, root = register_git(req)
            else:
                src, root = register_path(req)
            job = svc.jobs.enqueue(req.name, root)
            return {
                "name": req.name,
                "status": job.status,
                "job": job.to_dict(admin=True),
                "source": src.to_dict(admin=True),
                "progress_url": f"/repos/{req.name}",
            }

        return await threaded(work)

    def register_path(req: RegisterRequest):
        assert req.path is not None  # RegisterRequest._one_source: a path, or a url with a branch
        root = Path(req.path).expanduser()
        if not root.is_absolute():
            raise _invalid("path must be absolute")
        root = root.resolve()  # symlinks and '..' first: the allow-list is about where the files really are
        if not conf.repo_roots:
            raise _forbidden(
                "registration by path needs REPOCTX_REPO_ROOTS on the server (the folders repositories may come from)"
            )
        if not under_roots(root, conf.repo_roots):
            raise _forbidden("path is outside the folders REPOCTX_REPO_ROOTS allows")
        if svc.runs_jobs and not root.is_dir():
            raise _invalid("path is not a directory on this server")
        existing = svc.store.repo(req.name)
        current = sources.get(req.name)
        if (current is not None and current.kind != "path") or (
            existing is not None and existing.root and existing.root != str(root)
        ):
            raise HTTPException(
                409, error_body("conflict", f"repository {req.name!r} is registered from another source")
            )
        svc.store.register_repo(req.name, str(root))
        return sources.put_path(req.name, str(root)), str(root)

    def register_git(req: RegisterRequest):
        assert req.url is not None and req.branch is not None  # RegisterRequest._one_source
        try:
            u = parse_git_url(req.url, conf.repo_roots)
            branch = check_branch(req.branch)
        except GitUrlError as e:  # the reason, never the URL
            if "REPOCTX_REPO_ROOTS" in str(e):
                raise _forbidden(str(e)) from None
            raise _invalid(str(e)) from None
        if req.credential and credentials.configured:  # the name only: the secret may live on the workers alone
            try:
                known = credentials.names()
            except CredentialError as e:
                raise _invalid(str(e)) from None
            if req.credential not in known:
                raise _invalid(f"no credential named {req.credential!r} in the server's REPOCTX_GIT_CREDENTIALS")
        if u.kind == "local" and svc.runs_jobs and not Path(u.path).is_dir():
            raise _invalid("the local repository is not a directory on this server")
        current = sources.get(req.name)
        existing = svc.store.repo(req.name)
        if current is not None and (current.kind != "git" or current.url_key != u.key or current.branch != branch):
            raise HTTPException(
                409, error_body("conflict", f"repository {req.name!r} is registered from another source")
            )
        if current is None and existing is not None:
            raise HTTPException(
                409, error_body("conflict", f"repository {req.name!r} is registered from another source")
            )
        if existing is None:
            svc.store.register_repo(req.name, "")  # its worktree's path, once a worker has checked it out
        return sources.put_git(req.name, u.url, u.key, branch, req.credential), ""

    @router.get(
        "/repos/{name}",
        tags=["repositories"],
        summary="A repository's source, indexing job, commits (indexed, branch head, lag), freshness and "
        "vector coverage",
    )
    async def repo_status(
        name: str,
        p: PrincipalDep,
        check: bool = Query(False, description="Also compare the files on disk with the index."),
    ):
        def work():
            if not re.match(REPO_NAME, name) or not svc.visible(p, name):
                raise HTTPException(404, error_body("not_found", "repository not found"))
            rec = svc.store.repo(name)
            meta = rec.meta or {}
            scope = replace(p.scope, repos=(name,))
            job = svc.jobs.latest(name)
            src = sources.get(name)
            indexed_at = float(meta["indexed_at"]) if meta.get("indexed_at") else None
            out: dict[str, Any] = {
                "name": name,
                "indexed": meta.get("complete") == "1",
                "job": job.to_dict(admin=p.admin) if job else None,
                "source": src.to_dict(p.admin) if src else {"kind": "path"},
                "freshness": {
                    "indexed_at": indexed_at,
                    "age_seconds": round(time.time() - indexed_at, 1) if indexed_at else None,
                    "git_head": meta.get("git_head") or None,
                    "generation": int(meta.get("generation") or 0),
                },
                "counts": svc.store.counts(scope),
                "vectors": _vectors(name, p.admin),
            }
            if src is not None and src.kind == "git":
                out["commits"] = src.commits()
                if p.admin and src.last_error:
                    out["commits"]["last_error"] = src.last_error
            if p.admin:
                out["root"] = rec.root
            if check:
                out["freshness"].update(_stale(rec, scope))
            return out

        return await threaded(work)

    def _vectors(name: str, admin: bool) -> dict:
        emb = svc.index.embedder
        if emb is None:
            return {"enabled": False, "coverage": None, "current": False}
        st = svc.store.vector_state(name, emb.model_id)
        out = {
            "enabled": True,
            "model": emb.model_id,
            "coverage": round(st.count / st.total, 4) if st.total else 1.0,
            "current": st.current,
        }
        if admin:
            out.update(count=st.count, total=st.total, indexed_model=st.model)
        return out

    def _stale(rec, scope: Scope) -> dict:
        from repoctx.indexer import stale_files

        root = Path(rec.root or "")
        if not rec.root or not root.is_dir():
            return {"checked": False, "reason": "the repository's files are not on this server"}
        st = stale_files(root, svc.store.writer(rec.name), svc.settings)
        seen = {k: [x for x in st.get(k, []) if scope.allows(rec.name, x)] for k in ("added", "modified", "deleted")}
        return {
            "checked": True,
            "fresh": not any(seen.values()),
            **{k: len(v) for k, v in seen.items()},
            "changed_paths": sorted(x for v in seen.values() for x in v)[:20],
        }

    # ---- jobs
    def job_or_404(job_id: int):
        job = svc.jobs.get(job_id)
        if job is None:
            raise HTTPException(404, error_body("not_found", "job not found"))
        return job

    @router.get("/jobs", tags=["jobs"], summary="Index jobs, newest first (admin keys)")
    async def list_jobs(
        p: PrincipalDep,
        repo: Annotated[str | None, Query(pattern=REPO_NAME)] = None,
        status: Annotated[JobStatus | None, Query()] = None,
        limit: Annotated[int, Query(ge=1, le=500)] = 100,
    ) -> dict:
        need_admin(p, "the job list")

        def work():
            return {"jobs": [j.to_dict(admin=True) for j in svc.jobs.list(repo=repo, status=status, limit=limit)]}

        return await threaded(work)

    @router.get("/jobs/{job_id}", tags=["jobs"], summary="One index job (admin keys)")
    async def get_job(job_id: Annotated[int, PathParam(ge=1)], p: PrincipalDep) -> dict:
        need_admin(p, "a job's record")

        def work():
            return job_or_404(job_id).to_dict(admin=True)

        return await threaded(work)

    @router.post(
        "/jobs/{job_id}/cancel",
        tags=["jobs"],
        status_code=202,
        summary="Cancel a queued job, or ask a running one to stop at its next progress step (admin keys)",
    )
    async def cancel_job(job_id: Annotated[int, PathParam(ge=1)], p: PrincipalDep) -> dict:
        need_admin(p, "cancelling a job")

        def work():
            job_or_404(job_id)
            if not svc.jobs.cancel(job_id):
                now = svc.jobs.get(job_id)
                raise HTTPException(
                    409, error_body("conflict", f"the job is {now.status if now else 'gone'}: nothing to cancel")
                )
            return svc.jobs.get(job_id).to_dict(admin=True)

        return await threaded(work)

    return router
