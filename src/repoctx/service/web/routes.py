"""The web pages' routes (``web_router``): public HTML and assets, and the authenticated reads the pages need.

Public (no key; no data): ``GET /`` (the search page), ``GET /ui/search``, ``/ui/repos``, ``/ui/chat``,
``/ui/file`` (page shells), ``GET /ui/static/*``, ``GET /ui/pygments.css``.

Authenticated like every API endpoint (the middleware in ``app.py``), each answering only within the key's scope:

* ``GET /whoami`` -> ``{principal, role, admin}``: what the page may offer (an admin's reindex button).
* ``GET /file?path=P&repo=R&start=S&end=E`` -> the copilot's ``read_file`` under the key's scope (``{repo, path,
  start, end, total_lines, truncated, symbols, note}``) with ``lines`` (the raw text) and ``html`` (highlighted,
  one ``span.line`` per line; ``mark=S-E`` marks lines ``hit``). A file outside the scope is 404, as one that does
  not exist.
* ``POST /highlight`` ``{items: [{text, path, start?}]}`` -> ``{html: [...]}``: text the caller already holds
  (search snippets, grep lines, symbol bodies) highlighted for the file's language; it reads nothing.
* ``GET /sessions`` -> ``{sessions: [{id, principal, created, updated, messages}]}``: the key's principal's
  copilot sessions (``?all=true`` for admin keys: every principal's); ``GET /sessions/{id}`` -> ``{id, messages:
  [{role, text}]}`` (the principal's own session, text only) to reopen it."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Annotated

from fastapi import APIRouter, HTTPException, Query
from fastapi.responses import HTMLResponse, PlainTextResponse, RedirectResponse
from fastapi.staticfiles import StaticFiles
from jinja2 import Environment, FileSystemLoader, select_autoescape
from pydantic import Field, StringConstraints

from repoctx.service.app import REPO_NAME, PrincipalDep, _Model  # (app.py imports this module lazily)
from repoctx.service.limits import error_body

from .highlight import highlight_lines, pygments_css

HERE = Path(__file__).parent
PAGE_PREFIX = "/ui/"  # pages and their assets: public
PAGE_PATHS = ("/",)
SESSION_ID = r"^[A-Za-z0-9_-]{1,128}$"
_NUMBERED = re.compile(r"^\s*\d+\| ?")
# pages load only their own scripts and styles; data comes from this origin's API
CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
    "frame-ancestors 'none'; base-uri 'none'; form-action 'self'"
)
PAGES = {"search": "Search", "repos": "Repositories", "chat": "Chat", "file": "File"}

__all__ = ["web_router", "PAGE_PATHS", "PAGE_PREFIX"]


class HighlightItem(_Model):
    text: Annotated[str, StringConstraints(max_length=100_000)]
    path: Annotated[str, StringConstraints(max_length=4096)] = ""
    start: int = Field(1, ge=1)


class HighlightRequest(_Model):
    items: list[HighlightItem] = Field(max_length=100)


def _templates() -> Environment:
    return Environment(loader=FileSystemLoader(str(HERE / "templates")), autoescape=select_autoescape(["html"]))


def web_router(svc, threaded: Callable) -> APIRouter:
    """The routes above, bound to one ``Service`` (``app.py``) and its ``threaded`` runner. Mount the static
    folder with ``mount_static(app)``."""
    router = APIRouter()
    env = _templates()

    def page(name: str) -> HTMLResponse:
        html = env.get_template(f"{name}.html").render(page=name, title=PAGES[name], pages=PAGES)
        return HTMLResponse(
            html,
            headers={
                "Content-Security-Policy": CSP,
                "X-Content-Type-Options": "nosniff",
                "Referrer-Policy": "no-referrer",
                "Cache-Control": "no-store",
            },
        )

    # ---- public: pages hold no data
    @router.get("/", include_in_schema=False)
    async def home():
        return page("search")

    @router.get("/ui/", include_in_schema=False)
    async def ui_home():
        return RedirectResponse("/", status_code=307)

    @router.get("/ui/pygments.css", include_in_schema=False)
    async def code_css():
        return PlainTextResponse(pygments_css(), media_type="text/css")

    @router.get("/ui/{name}", include_in_schema=False)
    async def ui_page(name: str):
        if name not in PAGES:
            raise HTTPException(404, error_body("not_found", "no such page"))
        return page(name)

    # ---- authenticated reads for the pages
    @router.get("/whoami", tags=["web"], summary="The key's principal, role and whether it is an admin")
    async def whoami(p: PrincipalDep) -> dict:
        return {"principal": p.name, "role": p.role, "admin": p.admin}

    @router.get(
        "/file", tags=["web"], summary="Lines of a file in the key's scope (the copilot's read_file), highlighted"
    )
    async def read_file(
        p: PrincipalDep,
        path: Annotated[str, Query(min_length=1, max_length=4096)],
        repo: Annotated[str | None, Query(pattern=REPO_NAME)] = None,
        start: Annotated[int, Query(ge=1)] = 1,
        end: Annotated[int, Query(ge=0)] = 0,
        mark: Annotated[str | None, Query(pattern=r"^\d{1,9}-\d{1,9}$")] = None,
    ) -> dict:
        from repoctx.copilot.tools import RepoTools

        def work():
            scope = svc.scope_for(p, [repo] if repo else None)
            out = RepoTools(svc.index, scope).read_file(path, start, end, repo or "")
            if "error" in out:
                code = out["error"]
                status = 404 if code == "not_served" else 400
                raise HTTPException(
                    status,
                    error_body(
                        "not_found" if status == 404 else code,
                        "file not found" if status == 404 else out.get("detail", ""),
                    ),
                )
            lines = [_NUMBERED.sub("", ln, count=1) for ln in out.pop("text").split("\n")]
            marked: tuple[int, int] | None = None
            if mark:  # "<first>-<last>" (the query's pattern)
                lo, hi = mark.split("-")
                marked = (int(lo), int(hi))
            out["lines"] = lines
            out["html"] = highlight_lines(lines, out["path"], out["start"], marked)
            return out

        return await threaded(work)

    @router.post("/highlight", tags=["web"], summary="Text the caller holds, highlighted for a file's language")
    async def highlight(req: HighlightRequest, p: PrincipalDep) -> dict:
        return {"html": [highlight_lines(it.text.split("\n"), it.path, it.start) for it in req.items]}

    @router.get(
        "/sessions",
        tags=["copilot"],
        summary="The key's copilot sessions, newest first (admin: ?all=true for every principal's)",
    )
    async def sessions(p: PrincipalDep, all: bool = False) -> dict:
        if all and not p.admin:
            raise HTTPException(403, error_body("forbidden", "every principal's sessions need an admin key"))

        def work():
            repo = svc.session_repository(p.name)
            try:
                return {"sessions": repo.list_sessions(every_principal=all)}
            finally:
                _close(repo)

        return await threaded(work)

    @router.get("/sessions/{session_id}", tags=["copilot"], summary="One of the key's sessions: its messages' text")
    async def session(session_id: str, p: PrincipalDep) -> dict:
        from repoctx.copilot.agent import AGENT_ID

        if not re.match(SESSION_ID, session_id):
            raise HTTPException(404, error_body("not_found", "session not found"))

        def work():
            repo = svc.session_repository(p.name)
            try:
                if repo.read_session(session_id) is None:
                    raise HTTPException(404, error_body("not_found", "session not found"))
                out = []
                for m in repo.list_messages(session_id, AGENT_ID):
                    msg = m.message if hasattr(m, "message") else m
                    text = "".join(b.get("text", "") for b in msg.get("content") or [] if isinstance(b, dict))
                    if text.strip():
                        out.append({"role": msg.get("role"), "text": text})
                return {"id": session_id, "messages": out}
            finally:
                _close(repo)

        return await threaded(work)

    def _close(repo) -> None:
        close = getattr(repo, "close", None)
        if callable(close) and not svc._postgres_sessions():
            close()

    return router


def mount_static(app) -> None:
    app.mount("/ui/static", StaticFiles(directory=str(HERE / "static")), name="ui-static")
