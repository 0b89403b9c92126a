"""The service's web pages in a real browser: Playwright driving Debian's headless chromium against a real uvicorn
(embedded SQLite store, scripted models). Sign in, search and open a cited hit at its lines, exact names and grep,
a streamed chat with its trace and a working citation, reopened sessions, the repositories page and its reindex
button, a key limited to one path that never sees another, a stopped model that ends in a visible error, and axe-core
finding no violation in either theme. Each page's screenshot is taken and checked; it lands in docs/img/ only when
``REPOCTX_SCREENSHOTS`` names that folder (`make screenshots`), so a test run leaves the working tree as it was."""
from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import time
from pathlib import Path
from typing import Any, AsyncIterable

import httpx
import pytest
from strands.models.model import Model

from repoctx import Settings
from repoctx.copilot.agent import parse_citations
from repoctx.copilot.scripted import ScriptedToolModel, last_tool_results
from repoctx.service.app import create_app
from repoctx.service.config import ServiceSettings

from test_service_support import SHOP, VAULT, LiveServer, write_tree

playwright_api = pytest.importorskip("playwright.sync_api", reason="pip install -e '.[test]'")  # a dependency of [test]
from axe_playwright_python.sync_playwright import Axe  # noqa: E402

# what the key limited to src/auth/ of shop must never see, anywhere in a page
FORBIDDEN = ["src/cart", "src/cache", "docs/guide", "secret/", "zq_", "ZQ_CANARY", "private-vault-x9", "basket.py",
             "lru.py", "LRUCache", "seal_entries", "rotate_ledger", "evict_oldest"]


# ---------------------------------------------------------------------------------------------- models
def cite_first(messages) -> str:
    found = parse_citations(json.dumps(last_tool_results(messages)))
    return (f"Session tokens are verified in {found[0]['citation']}, which checks the signature and the expiry."
            if found else "I found nothing relevant.")


class Paced(ScriptedToolModel):
    """A scripted model whose text arrives a little at a time, so a page can be seen streaming."""

    async def stream(self, *args, **kwargs):
        async for ev in super().stream(*args, **kwargs):
            if "contentBlockDelta" in ev:
                await asyncio.sleep(0.06)
            yield ev


class StoppedModel(Model):
    """Starts to answer, then its provider goes away."""

    def __init__(self):
        self.config: dict[str, Any] = {"model_id": "stopped"}

    def update_config(self, **kw: Any) -> None:
        self.config.update(kw)

    def get_config(self) -> dict[str, Any]:
        return self.config

    async def stream(self, messages, tool_specs=None, system_prompt=None, **kwargs) -> AsyncIterable[dict]:
        yield {"messageStart": {"role": "assistant"}}
        yield {"contentBlockStart": {"start": {}}}
        yield {"contentBlockDelta": {"delta": {"text": "Looking"}}}
        await asyncio.sleep(0.2)
        raise ConnectionError("the model provider stopped answering")

    async def structured_output(self, output_model, prompt, system_prompt=None, **kwargs):
        raise NotImplementedError
        yield  # pragma: no cover


# ---------------------------------------------------------------------------------------------- fixtures
@pytest.fixture(scope="module")
def chromium_path() -> str:
    path = shutil.which("chromium")
    if not path:
        pytest.fail("Debian's chromium is not installed: `make test` installs it (apt-get install -y chromium); "
                    "playwright's own browser download is not reachable here")
    return path


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    base = tmp_path_factory.mktemp("web")
    write_tree(base / "repos" / "shop", SHOP)
    write_tree(base / "repos" / "private-vault-x9", VAULT)
    models = {"make": lambda: Paced([{"tool": "search_code", "input": {"query": "verify session token"}},
                                     cite_first])}
    app = create_app(Settings(index_dir=base / "ix", embedder="none", watch=False),
                     service=ServiceSettings(rate_limit="", job_poll=0.05, stream_timeout=30,
                                             repo_roots=(str(base / "repos"),)),
                     model_factory=lambda: models["make"](), inprocess_workers=1)
    svc = app.state.service
    ks = svc.keys
    ks.add_role("auth-only", repo="shop", include=["src/auth/*"])
    keys = {"admin": ks.add_key("root", "admin")[1], "auth": ks.add_key("ana", "auth-only")[1]}
    with LiveServer(app) as server:
        with httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {keys['admin']}"}) as c:
            for name in ("shop", "private-vault-x9"):
                r = c.post("/repos", json={"name": name, "path": str(base / "repos" / name)})
                assert r.status_code == 202, r.text
            deadline = time.monotonic() + 60
            for name in ("shop", "private-vault-x9"):
                while (c.get(f"/repos/{name}").json().get("job") or {}).get("status") != "done":
                    assert time.monotonic() < deadline, c.get(f"/repos/{name}").json()
                    time.sleep(0.1)
        yield {"url": server.url, "keys": keys, "models": models, "svc": svc}
    svc.close()


@pytest.fixture(scope="module")
def browser(chromium_path):
    with playwright_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=chromium_path, headless=True, args=["--no-sandbox"])
        yield b
        b.close()


@pytest.fixture
def page(browser):
    ctx = browser.new_context(viewport={"width": 1280, "height": 860}, color_scheme="light")
    pg = ctx.new_page()
    pg.set_default_timeout(15000)
    pg.errors = []  # console errors: a page that works logs none (a missing icon is a 401 here)
    pg.on("console", lambda m: (print("console:", m.type, m.text, m.location.get("url")),
                                m.type == "error" and pg.errors.append(f"{m.text} {m.location.get('url')}")))
    pg.on("pageerror", lambda e: print("pageerror:", e))
    yield pg
    ctx.close()


# ---------------------------------------------------------------------------------------------- helpers
def sign_in(page, site, who: str = "admin", path: str = "/") -> None:
    """By keyboard: the key field, the key, Enter."""
    page.goto(site["url"] + path)
    page.get_by_label("API key").focus()
    page.keyboard.type(site["keys"][who])
    page.keyboard.press("Enter")
    page.locator("#who").wait_for(state="visible")


def search(page, query: str, kind: str = "search", detail: str = "full", paths: str = "") -> None:
    page.get_by_label("Mode").select_option(kind)
    page.get_by_label("Detail").select_option(detail)
    page.get_by_label("Path filter").fill(paths)
    page.get_by_label("Query, exact name or pattern").fill(query)
    page.get_by_label("Query, exact name or pattern").press("Enter")
    page.wait_for_function("() => /result|Error/.test(document.getElementById('status').textContent)")


def chat(page, message: str):
    page.get_by_label("Message", exact=True).fill(message)
    page.get_by_role("button", name="Send").click()
    answer = page.locator(".msg.assistant").last
    return answer


def visible_text(page) -> str:
    return page.content() + page.locator("body").inner_text()


def assert_no_violations(page, what: str) -> None:
    results = Axe().run(page)
    assert results.violations_count == 0, f"{what}: {results.generate_report()}"


@pytest.fixture(scope="module")
def shots(tmp_path_factory) -> Path:
    """Where the screenshots go: ``REPOCTX_SCREENSHOTS`` (docs/img/ from `make screenshots`), else a temporary folder."""
    wanted = os.environ.get("REPOCTX_SCREENSHOTS")
    folder = Path(wanted) if wanted else tmp_path_factory.mktemp("screenshots")
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def shot(page, folder: Path, name: str) -> None:
    path = folder / name
    page.screenshot(path=str(path), full_page=False)
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 10_000, f"{name}: not a page's screenshot"


# ---------------------------------------------------------------------------------------------- tests
def test_pages_are_public_and_data_needs_the_key(site):
    r = httpx.get(site["url"] + "/")
    assert r.status_code == 200 and "<h1>Search</h1>" in r.text and "Content-Security-Policy" in r.headers
    assert httpx.get(site["url"] + "/ui/static/app.js").status_code == 200
    assert '<link rel="icon" href="/ui/static/favicon.svg"' in r.text
    assert httpx.get(site["url"] + "/ui/static/favicon.svg").headers["content-type"].startswith("image/svg+xml")
    assert httpx.get(site["url"] + "/ui/pygments.css").headers["content-type"].startswith("text/css")
    assert httpx.get(site["url"] + "/file", params={"path": "src/auth/tokens.py"}).status_code == 401
    assert httpx.get(site["url"] + "/sessions").status_code == 401
    # no data in a page: the repositories only come from the API
    assert "shop" not in httpx.get(site["url"] + "/ui/repos").text


def test_sign_in_search_and_open_a_cited_hit_at_its_lines(page, site, shots):
    page.goto(site["url"] + "/")
    assert page.locator("#signed-out").is_visible()
    page.get_by_label("API key").fill("rcx_000000000000_not-a-real-key-at-all")
    page.get_by_label("API key").press("Enter")
    page.get_by_role("alert").filter(has_text="refused").wait_for()

    sign_in(page, site)
    assert page.locator("#who-name").inner_text() == "root (admin)"
    assert page.evaluate("sessionStorage.getItem('repoctx.key')") == site["keys"]["admin"]
    assert page.evaluate("localStorage.getItem('repoctx.key')") is None
    search(page, "verify session token signature expiry")
    first = page.locator(".hit").first
    link = first.locator("a.cite-link")
    assert link.inner_text().startswith("shop:src/auth/tokens.py:")  # the admin sees two repositories
    assert first.locator(".qualname").inner_text() == "verify_session_token"
    assert first.locator(".why").inner_text().startswith("why:")
    assert first.locator("pre.code .line .k").count() > 0  # highlighted on the server: Pygments' token classes
    start, end = map(int, re.search(r":(\d+)-(\d+)$", link.inner_text()).groups())
    shot(page, shots, "web-search.png")

    link.click()
    page.wait_for_url(re.compile(r"/ui/file\?"))
    hits = page.locator("#code .line.hit")
    hits.first.wait_for()
    assert hits.count() == end - start + 1
    assert int(hits.first.get_attribute("data-n")) == start
    assert "def verify_session_token" in hits.first.inner_text()
    assert page.locator("#where").inner_text().startswith("shop:src/auth/tokens.py:")

    # exact names and grep, as in the CLI; the path filter keeps what matches
    page.goto(site["url"] + "/")
    search(page, "check_signature", kind="symbol")
    assert page.locator(".hit .qualname").first.inner_text() == "check_signature"
    search(page, "sig:", kind="grep", paths="src/*")
    assert page.locator(".hit a.cite-link").first.inner_text().startswith("shop:src/auth/tokens.py:")
    search(page, "sig:", kind="grep", paths="docs/*")
    assert page.locator(".hit").count() == 0
    search(page, "token", detail="brief", paths="docs/*")
    assert all(t.startswith("shop:docs/") for t in page.locator(".hit a.cite-link").all_inner_texts())


def test_chat_streams_tokens_with_a_live_trace_and_citations_that_open_the_lines(page, site, shots):
    site["models"]["make"] = lambda: Paced([{"tool": "search_code", "input": {"query": "verify session token"}},
                                            cite_first])
    sign_in(page, site, path="/ui/chat")
    session = page.get_by_label("Session", exact=True).input_value()
    assert session
    answer = chat(page, "Where are session tokens verified?")
    # the answer is seen growing before the turn is done
    page.wait_for_function("() => { const a = document.querySelector('.msg.assistant.streaming .body');"
                           " return a && a.textContent.length > 0; }")
    partial = answer.locator(".body").inner_text()
    page.locator(".msg.assistant[data-done='true']").wait_for()
    full = answer.locator(".body").inner_text()
    assert len(partial) < len(full) and full.startswith("Session tokens are verified in src/auth/tokens.py:")
    assert int(answer.get_attribute("data-tokens")) > 5
    trace = page.locator("#trace")
    assert trace.locator(".ev.tool").first.inner_text().startswith("tool search_code")
    assert "verify session token" in trace.locator(".ev.tool").first.inner_text()
    assert trace.locator(".ev.tool_result").count() >= 1 and trace.locator(".ev.done").count() == 1
    cite = answer.locator(".citations a.cite-link").first
    assert cite.inner_text().startswith("src/auth/tokens.py:")
    page.wait_for_function("() => document.querySelector('#sessions button')")
    assert session in page.locator("#sessions").inner_text()
    shot(page, shots, "web-chat.png")

    start = int(re.search(r":(\d+)-", cite.inner_text()).group(1))
    cite.click()
    page.wait_for_url(re.compile(r"/ui/file\?"))
    page.locator("#code .line.hit").first.wait_for()
    assert int(page.locator("#code .line.hit").first.get_attribute("data-n")) == start

    # sessions are listed and reopened (the key stays for the tab)
    page.goto(site["url"] + "/ui/chat")
    page.get_by_role("button", name="New session").click()
    assert page.locator(".msg").count() == 0
    page.locator("#sessions").get_by_role("button", name=session).click()
    page.locator(".msg.user").first.wait_for()
    assert page.locator(".msg.user").first.inner_text().endswith("Where are session tokens verified?")
    assert "Session tokens are verified in" in page.locator(".msg.assistant").first.inner_text()
    assert page.get_by_label("Session", exact=True).input_value() == session


def test_a_stopped_model_ends_in_a_visible_error(page, site):
    site["models"]["make"] = StoppedModel
    sign_in(page, site, path="/ui/chat")
    chat(page, "Are you there?")
    alert = page.locator(".msg.error[role='alert']")
    alert.wait_for(state="visible")
    assert alert.inner_text().startswith("Error: ")
    assert "stopped" in alert.inner_text() or "ConnectionError" in alert.inner_text()
    page.locator(".msg.assistant[data-done='true'], .msg.error").first.wait_for()
    assert page.get_by_role("button", name="Send").is_enabled()


def test_repositories_page_shows_source_commit_job_and_an_admin_reindex(page, site, shots):
    sign_in(page, site, path="/ui/repos")
    row = page.locator("tr[data-repo='shop']")
    row.wait_for()
    cells = row.locator("td").all_inner_texts()
    assert cells[0].startswith("path ") and cells[0].endswith("/repos/shop")
    assert "done" in cells[3]
    assert "indexed" in cells[2]
    shot(page, shots, "web-repos.png")
    row.get_by_role("button", name="Reindex shop").click()
    page.wait_for_function("() => /reindex (queued|running|done)/.test(document.getElementById('status').textContent)")
    page.wait_for_function("() => document.querySelector(\"tr[data-repo='shop'] .job\")?.textContent === 'done'",
                           timeout=30000)

    assert "reindex" in page.locator("#status").inner_text()  # the action's outcome stays beside the summary
    assert page.errors == []

    other = page.context.new_page()
    sign_in(other, site, who="auth", path="/ui/repos")
    other.locator("tr[data-repo='shop']").wait_for()
    assert other.locator("button.reindex").count() == 0
    assert "/repos/shop" not in visible_text(other)  # a path on the server is for admins
    assert "private-vault-x9" not in visible_text(other)


def test_a_key_limited_to_one_path_never_sees_another(page, site):
    site["models"]["make"] = lambda: Paced([{"tool": "search_code", "input": {"query": "basket items ledger"}},
                                            {"tool": "grep", "input": {"pattern": "def "}}, cite_first])

    def clean(where: str) -> None:
        text = visible_text(page)
        leaked = [m for m in FORBIDDEN if m in text]
        assert not leaked, f"{where}: {leaked}"

    sign_in(page, site, who="auth")
    # the page lists the key's repositories once its /repos answers (a slow machine signs in before that)
    page.wait_for_function("() => document.querySelectorAll('#repo option').length > 1")
    assert page.locator("#repo option").all_inner_texts() == ["All I may see", "shop"]
    for query, kind in (("basket items ledger price", "search"), ("total_price", "symbol"), ("return", "grep"),
                        ("def ", "grep")):
        search(page, query, kind=kind)
        clean(f"{kind} {query!r}")
        paths = page.locator(".hit a.cite-link").all_inner_texts()
        assert all(p.startswith("src/auth/") for p in paths), paths
    assert page.locator(".hit").count() > 0  # grep "def " found the allowed file
    for d in ("brief", "signatures"):
        search(page, "cache evict oldest", detail=d)
        clean(f"search at {d}")

    page.goto(site["url"] + "/ui/file?repo=shop&path=src/cart/basket.py&start=1&end=3")
    page.wait_for_function("() => /Error/.test(document.getElementById('status').textContent)")
    assert "file not found" in page.locator("#status").inner_text()
    assert page.locator("#code .line").count() == 0
    page.goto(site["url"] + "/ui/file?repo=private-vault-x9&path=vault/zq_unseal.py")
    page.wait_for_function("() => /Error/.test(document.getElementById('status').textContent)")
    assert page.locator("#code .line").count() == 0

    page.goto(site["url"] + "/ui/repos")
    page.locator("tr[data-repo='shop']").wait_for()
    clean("repositories")

    page.goto(site["url"] + "/ui/chat")
    chat(page, "What does the basket do?")
    page.locator(".msg.assistant[data-done='true'], .msg.error").first.wait_for()
    page.locator("#trace .ev.done").wait_for()
    clean("chat")


def test_keyboard_contrast_and_labels_pass_axe_in_both_themes_and_at_phone_width(browser, site):
    for scheme in ("light", "dark"):
        ctx = browser.new_context(viewport={"width": 1280, "height": 860}, color_scheme=scheme)
        page = ctx.new_page()
        page.set_default_timeout(15000)
        page.goto(site["url"] + "/")
        page.keyboard.press("Tab")
        assert page.evaluate("document.activeElement.textContent") == "Skip to content"
        assert_no_violations(page, f"signed out, {scheme}")
        sign_in(page, site)
        search(page, "verify session token")
        assert_no_violations(page, f"search, {scheme}")
        page.locator(".hit a.cite-link").first.click()
        page.locator("#code .line.hit").first.wait_for()
        assert_no_violations(page, f"file, {scheme}")
        page.goto(site["url"] + "/ui/repos")
        page.locator("tr[data-repo='shop']").wait_for()
        assert_no_violations(page, f"repositories, {scheme}")
        site["models"]["make"] = lambda: Paced([{"tool": "search_code", "input": {"query": "verify token"}},
                                                cite_first])
        page.goto(site["url"] + "/ui/chat")
        chat(page, "Where are tokens verified?")
        page.locator(".msg.assistant[data-done='true']").wait_for()
        assert_no_violations(page, f"chat, {scheme}")
        # the toggle flips the theme and is remembered
        before = page.evaluate("getComputedStyle(document.body).backgroundColor")
        page.locator("#theme-toggle").click()
        assert page.evaluate("getComputedStyle(document.body).backgroundColor") != before
        assert_no_violations(page, f"chat, toggled from {scheme}")
        page.locator("#theme-toggle").click()
        ctx.close()

    phone = browser.new_context(viewport={"width": 390, "height": 844}, color_scheme="light", is_mobile=True)
    page = phone.new_page()
    page.set_default_timeout(15000)
    for path in ("/", "/ui/repos", "/ui/chat"):
        sign_in(page, site, path=path)
        page.wait_for_timeout(300)
        assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth + 1"), path
        assert_no_violations(page, f"{path} at phone width")
    phone.close()
