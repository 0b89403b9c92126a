"""The HTTP service's endpoints on a real PostgreSQL: keys, validation, search/context/retrieve,
repositories and their indexing jobs, OpenAPI and Prometheus metrics."""
from __future__ import annotations

import asyncio
import time

import pytest

from test_service_support import MARKERS, PUBLIC_REPO, VAULT_REPO, Env, parse_sse, write_tree

pytestmark = pytest.mark.asyncio


@pytest.fixture
def env(pg_url, tmp_path):
    e = Env(pg_url, tmp_path, inprocess_workers=1, repo_roots=(str(tmp_path),))
    yield e
    e.close()


ENDPOINTS = [("POST", "/search", {"query": "token"}), ("POST", "/context", {"query": "token"}),
             ("POST", "/retrieve", {"query": "token"}), ("POST", "/chat", {"session_id": "s1", "message": "hi"}),
             ("GET", "/repos", None), ("GET", f"/repos/{PUBLIC_REPO}", None),
             ("POST", "/repos", {"name": "x", "path": "/tmp"}), ("GET", "/metrics", None),
             ("POST", "/grep", {"pattern": "token"}), ("GET", "/outline?path=src/auth/tokens.py", None),
             ("POST", "/symbol", {"name": "sign"})]


async def test_every_endpoint_but_health_needs_a_valid_key(env):
    async with env.client() as c:
        assert (await c.get("/health")).json()["status"] == "ok"
        for method, path, body in ENDPOINTS:
            for headers in ({}, env.auth("rcx_000000000000_" + "A" * 43), env.auth("not-a-key"),
                            {"Authorization": env.dev_key}, {"Authorization": f"Basic {env.dev_key}"}):
                r = await c.request(method, path, json=body, headers=headers)
                assert r.status_code == 401, (method, path, headers, r.text)
                assert r.headers["www-authenticate"] == "Bearer"
                assert r.json()["error"] == "unauthorized"
        # malformed bodies without a key are 401 too (the key is checked first)
        r = await c.post("/search", content=b"{not json", headers={"content-type": "application/json"})
        assert r.status_code == 401
        # a revoked key stops working
        ks = env.svc.keys
        key_id, key = ks.add_key("temp", "dev")
        assert (await c.get("/repos", headers=env.auth(key))).status_code == 200
        assert ks.revoke(key_id) == 1
        assert (await c.get("/repos", headers=env.auth(key))).status_code == 401


async def test_bad_requests_are_4xx_with_a_reason(env):
    h = env.auth(env.dev_key)
    cases = [
        ("/search", {"query": ""}, "query"), ("/search", {"query": "   "}, "query"),
        ("/search", {"query": "x", "k": 0}, "k"), ("/search", {"query": "x", "k": 51}, "k"),
        ("/search", {"query": "x", "level": "line"}, "level"), ("/search", {"query": "x", "mode": "magic"}, "mode"),
        ("/search", {"query": "x", "repos": ["../etc"]}, "repos.0"), ("/search", {"query": "x", "extra": 1}, "extra"),
        ("/search", {}, "query"), ("/context", {"query": "x", "budget": 5}, "budget"),
        ("/context", {"query": "x", "task": "poetry"}, "task"), ("/retrieve", {"query": "x", "k": -1}, "k"),
        ("/chat", {"session_id": "bad id!", "message": "hi"}, "session_id"),
        ("/chat", {"session_id": "x" * 129, "message": "hi"}, "session_id"),
        ("/chat", {"session_id": "ok", "message": ""}, "message"),
    ]
    async with env.client() as c:
        for path, body, field in cases:
            r = await c.post(path, json=body, headers=h)
            assert r.status_code == 422, (path, body, r.text)
            err = r.json()
            assert err["error"] == "invalid_request" and isinstance(err["detail"], str), err
            assert any(d["field"] == field for d in err["fields"]), (path, body, err)
            assert all(d["reason"] for d in err["fields"])
            assert "\"input\"" not in r.text  # inputs are never echoed back
        r = await c.post("/search", content=b"{nope", headers={**h, "content-type": "application/json"})
        assert r.status_code == 422
        # registering needs an admin key; a bad name or a relative path is refused with a reason
        assert (await c.post("/repos", json={"name": "a", "path": "/tmp"}, headers=h)).status_code == 403
        ha = env.auth(env.admin_key)
        r = await c.post("/repos", json={"name": "a b", "path": "/tmp"}, headers=ha)
        assert r.status_code == 422
        r = await c.post("/repos", json={"name": "ab", "path": "relative/dir"}, headers=ha)
        assert r.status_code == 400 and "absolute" in r.json()["detail"]
        r = await c.post("/repos", json={"name": PUBLIC_REPO, "path": str(env.base / "elsewhere")}, headers=ha)
        assert r.status_code in (400, 409)


async def test_search_context_and_retrieve_see_only_the_keys_scope(env):
    async with env.client() as c:
        ha, hd = env.auth(env.admin_key), env.auth(env.dev_key)
        q = {"query": "verify token signature", "k": 10, "detail": "signatures"}
        admin = (await c.post("/search", json=q, headers=ha)).json()
        dev = (await c.post("/search", json=q, headers=hd)).json()
        admin_repos = {h["repo"] for h in admin["results"]}
        assert VAULT_REPO in admin_repos and PUBLIC_REPO in admin_repos
        assert {h["repo"] for h in dev["results"]} == {PUBLIC_REPO}
        assert all(h["path"].startswith(("src/", "docs/")) and not h["path"].startswith("src/zq_private_")
                   for h in dev["results"])
        assert dev["results"][0]["citation"].startswith("src/auth/tokens.py:")
        # naming repositories: one it may see narrows, one it may not is 404 like one that does not exist
        r = await c.post("/search", json={**q, "repos": [PUBLIC_REPO]}, headers=hd)
        assert r.status_code == 200
        for name in (VAULT_REPO, "no-such-repo"):
            r = await c.post("/search", json={**q, "repos": [name]}, headers=hd)
            assert r.status_code == 404 and r.json() == {"error": "not_found", "detail": "repository not found"}
        r = await c.post("/search", json={**q, "repos": [VAULT_REPO]}, headers=ha)
        assert r.status_code == 200 and {h["repo"] for h in r.json()["results"]} == {VAULT_REPO}
        # file level
        r = (await c.post("/search", json={**q, "level": "file", "k": 3}, headers=hd)).json()
        assert r["level"] == "file" and 1 <= r["count"] <= 3 and r["results"][0]["path"] == "src/auth/tokens.py"
        # context
        ctx = (await c.post("/context", json={"query": "how is a session token verified", "budget": 500},
                            headers=hd)).json()
        assert ctx["tokens"] <= 500 and any(ci.startswith("src/auth/tokens.py") for ci in ctx["citations"])
        # retrieve: trace events, then results
        r = await c.post("/retrieve", json={"query": "basket total price", "mode": "standard"}, headers=hd)
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
        events = parse_sse(r.text)
        kinds = [e for e, _ in events]
        assert kinds[0] == "trace" and events[0][1]["step"] == "Routing" and kinds[-1] == "results"
        assert set(kinds[:-1]) == {"trace"}
        top = events[-1][1]["results"][0]  # brief: one line per hit, its citation first
        assert events[-1][1]["detail"] == "brief" and ":: Basket.total_price(" in top, top
        r = await c.post("/retrieve", json={"query": "basket total price", "mode": "standard", "detail": "full"},
                         headers=hd)
        assert parse_sse(r.text)[-1][1]["results"][0]["snippet"].lstrip().startswith("def total_price")
        # agentic retrieval streams its plan
        r = await c.post("/retrieve", json={"query": "How are tokens verified and how does the basket add items?",
                                            "mode": "agentic"}, headers=hd)
        events = parse_sse(r.text)
        assert any(d.get("step") == "Planning" for e, d in events if e == "trace") and events[-1][0] == "results"


async def test_register_a_repository_and_follow_its_indexing(env, tmp_path):
    root = write_tree(tmp_path / "newrepo", {f"pkg/m{i}.py": f"def handler_{i}(x):\n    return x + {i}\n"
                                              for i in range(12)})
    async with env.client() as c:
        ha, hd = env.auth(env.admin_key), env.auth(env.dev_key)
        r = await c.post("/repos", json={"name": "newrepo", "path": str(root)}, headers=ha)
        assert r.status_code == 202 and r.json()["status"] == "queued"
        deadline = time.time() + 30
        while True:
            st = (await c.get("/repos/newrepo", headers=ha)).json()
            if st["job"]["status"] in ("done", "failed") or time.time() > deadline:
                break
            await asyncio.sleep(0.1)
        assert st["job"]["status"] == "done" and st["indexed"] is True, st
        assert st["job"]["result"]["files_seen"] == 12 and st["counts"]["files"] == 12
        assert st["freshness"]["indexed_at"] and st["freshness"]["age_seconds"] >= 0
        assert st["vectors"] == {"enabled": False, "coverage": None, "current": False}
        # stale check after an edit; then a re-registration re-indexes incrementally
        (root / "pkg/m0.py").write_text("def handler_0(x):\n    return x - 1\n")
        st = (await c.get("/repos/newrepo?check=true", headers=ha)).json()
        assert st["freshness"]["fresh"] is False and st["freshness"]["modified"] == 1
        r = await c.post("/repos", json={"name": "newrepo", "path": str(root)}, headers=ha)
        assert r.status_code == 202
        deadline = time.time() + 30
        while (st := (await c.get("/repos/newrepo", headers=ha)).json())["job"]["status"] != "done":
            assert time.time() < deadline
            await asyncio.sleep(0.1)
        assert st["job"]["result"]["modified"] == 1 and st["job"]["result"]["unchanged"] == 11
        # the restricted key does not see the new repository at all
        assert (await c.get("/repos/newrepo", headers=hd)).status_code == 404
        assert "newrepo" not in (await c.get("/repos", headers=hd)).text
        repos = (await c.get("/repos", headers=ha)).json()["repos"]
        assert {r["name"] for r in repos} == {PUBLIC_REPO, VAULT_REPO, "newrepo"}
        # a restricted principal sees counts of its own paths only, and no server paths
        st = (await c.get(f"/repos/{PUBLIC_REPO}", headers=hd)).json()
        assert "root" not in st and st["counts"]["files"] == 4  # 3 source files + the guide
        full = (await c.get(f"/repos/{PUBLIC_REPO}", headers=ha)).json()
        assert full["counts"]["files"] == 6 and full["root"] == str(env.shop)


async def test_openapi_documents_every_endpoint_and_metrics_count_requests(env):
    async with env.client() as c:
        spec = (await c.get("/openapi.json")).json()
        paths = spec["paths"]
        for method, path in [("post", "/chat"), ("post", "/search"), ("post", "/context"), ("post", "/retrieve"),
                             ("post", "/repos"), ("get", "/repos/{name}"), ("get", "/health"), ("get", "/metrics")]:
            assert method in paths[path], path
        body = spec["components"]["schemas"]["SearchRequest"]["properties"]
        assert body["k"]["maximum"] == 50 and set(body["level"]["enum"]) == {"symbol", "file"}
        assert "HTTPBearer" in spec["components"]["securitySchemes"]
        hd = env.auth(env.dev_key)
        for _ in range(3):
            await c.post("/search", json={"query": "cache"}, headers=hd)
        assert (await c.get("/metrics", headers=hd)).status_code == 403  # a scoped key: not the service's traffic
        text = (await c.get("/metrics", headers=env.auth(env.admin_key))).text
        assert 'repoctx_http_request_seconds_count{endpoint="/search",method="POST",status="200"} 3.0' in text
        assert "repoctx_index_queue_depth" in text and "repoctx_auth_failures_total" in text
        assert (await c.get("/metrics")).status_code == 401


async def test_slow_reads_end_at_their_deadline(pg_url, tmp_path):
    """A search that hangs is a 504 at the request deadline; a retrieval stream that hangs ends with an error event
    at the stream deadline (the library call is stubbed to hang; the database is real)."""
    e = Env(pg_url, tmp_path, request_timeout=0.5, stream_timeout=0.8)
    real_stream = e.svc.index.stream

    def hanging_retrieve(*a, **kw):
        time.sleep(3)

    def hanging_stream(*a, **kw):
        it = real_stream(*a, **kw)
        yield next(it)  # Routing
        time.sleep(3)
        yield from it

    e.svc.index.retrieve = hanging_retrieve
    e.svc.index.stream = hanging_stream
    try:
        async with e.client() as c:
            t0 = time.perf_counter()
            r = await c.post("/search", json={"query": "token"}, headers=e.auth(e.dev_key))
            assert r.status_code == 504 and r.json()["error"] == "Timeout"
            assert time.perf_counter() - t0 < 1.5
            t0 = time.perf_counter()
            r = await c.post("/retrieve", json={"query": "token"}, headers=e.auth(e.dev_key))
            events = parse_sse(r.text)
            assert time.perf_counter() - t0 < 2.0
            assert events[0][0] == "trace" and events[-1][0] == "error" and events[-1][1]["error"] == "Timeout"
            assert (await c.get("/health")).status_code == 200  # the server is not stuck behind the hung calls
    finally:
        e.close()


async def test_grep_outline_and_symbol_see_only_the_keys_scope(env):
    """The tools agents reach for by habit, over the indexed snapshot: one library call each, scoped by the key,
    validated like every request, a bad regex a 400 naming the problem."""
    async with env.client() as c:
        ha, hd = env.auth(env.admin_key), env.auth(env.dev_key)
        # grep
        admin = (await c.post("/grep", json={"pattern": r"ZQ_CANARY_\d+|def verify_\w+"}, headers=ha)).json()
        dev = (await c.post("/grep", json={"pattern": r"ZQ_CANARY_\d+|def verify_\w+"}, headers=hd)).json()
        assert {m["repo"] for m in admin["matches"]} == {PUBLIC_REPO, VAULT_REPO}
        assert [(m["path"], m["line"]) for m in dev["matches"]] == [("src/auth/tokens.py", 4)]
        assert dev["total"] == 1 and dev["matches"][0]["text"] == "def verify_session_token(token, now):"
        assert not any(mark in str(dev) for mark in MARKERS)
        r = (await c.post("/grep", json={"pattern": "TOKEN", "fixed": True, "ignore_case": True, "paths": ["docs/*"],
                                         "context": 1}, headers=hd)).json()
        assert [(m["path"], m["line"]) for m in r["matches"]] == [("docs/guide.md", 3)] and r["matches"][0]["before"]
        page = (await c.post("/grep", json={"pattern": "token", "limit": 2}, headers=hd)).json()
        rest = (await c.post("/grep", json={"pattern": "token", "offset": page["next_offset"]}, headers=hd)).json()
        every = (await c.post("/grep", json={"pattern": "token"}, headers=hd)).json()
        assert page["matches"] + rest["matches"] == every["matches"] and every["total"] > 2
        r = await c.post("/grep", json={"pattern": "ZQ_CANARY", "repos": [VAULT_REPO]}, headers=hd)
        assert r.status_code == 404 and r.json() == {"error": "not_found", "detail": "repository not found"}
        r = await c.post("/grep", json={"pattern": "def (verify"}, headers=hd)
        assert r.status_code == 400 and r.json()["error"] == "invalid_request"
        assert "missing ), unterminated subpattern at position 4" in r.json()["detail"]
        assert r.json()["fields"][0]["field"] == "pattern"
        for bad in ({"pattern": ""}, {"pattern": "x", "limit": 0}, {"pattern": "x", "fixed": "yes"},
                    {"pattern": "x", "context": 21}, {"pattern": "x", "paths": "src/*"}, {"pattern": "x", "nope": 1}):
            r = await c.post("/grep", json=bad, headers=hd)
            assert r.status_code == 422 and r.json()["error"] == "invalid_request", (bad, r.text)
        # outline
        r = (await c.get("/outline", params={"path": "src/cart/basket.py"}, headers=hd)).json()
        assert [u["qualname"] for u in r["units"]] == ["Basket", "Basket.add_item", "Basket.total_price",
                                                       "rotate_ledger"]
        assert {u["qualname"]: u["callers"] for u in r["units"]}["rotate_ledger"] == 1
        hidden = (await c.get("/outline", params={"path": "src/zq_private_keys.py"}, headers=hd)).json()
        missing = (await c.get("/outline", params={"path": "src/zq_nothing_here.py"}, headers=hd)).json()
        assert hidden["units"] == missing["units"] == []  # a hidden file answers as one that does not exist
        assert str(hidden).replace("zq_private_keys", "X") == str(missing).replace("zq_nothing_here", "X")
        assert (await c.get("/outline", params={"path": "src/zq_private_keys.py"}, headers=ha)).json()["units"]
        r = await c.get("/outline", params={"path": "README.md", "repo": VAULT_REPO}, headers=hd)
        assert r.status_code == 404
        assert (await c.get("/outline", headers=hd)).status_code == 422
        # symbol
        r = (await c.post("/symbol", json={"name": "Basket.total_price"}, headers=hd)).json()
        assert [m["citation"] for m in r["matches"]] == ["src/cart/basket.py:8-9 :: Basket.total_price"]
        assert "return sum(prices[i] * q" in r["matches"][0]["text"]
        r = (await c.post("/symbol", json={"name": "Basket.total_price", "body": False}, headers=hd)).json()
        assert "text" not in r["matches"][0]
        for name in ("zq_load_private_keys", "seal_entries", "combine_shares"):
            dev = (await c.post("/symbol", json={"name": name}, headers=hd)).json()
            assert dev["matches"] == [] and dev["total"] == 0 and dev["did_you_mean"] == [], name
            assert not any(m in str(dev).replace(name, "NAME") for m in MARKERS), dev  # (its own name echoed)
            assert (await c.post("/symbol", json={"name": name}, headers=ha)).json()["total"] == 1
        r = await c.post("/symbol", json={"name": "sign", "limit": 51}, headers=hd)
        assert r.status_code == 422 and r.json()["fields"][0]["field"] == "limit"


async def test_search_paths_narrow_the_keys_scope_and_never_widen_it(env):
    async with env.client() as c:
        hd = env.auth(env.dev_key)
        q = {"query": "verify token signature private keys", "k": 20, "detail": "signatures"}
        everything = (await c.post("/search", json=q, headers=hd)).json()["results"]
        assert {h["path"].split("/")[0] for h in everything} >= {"src"}
        only = (await c.post("/search", json={**q, "paths": ["src/auth/*"]}, headers=hd)).json()["results"]
        assert only and all(h["path"].startswith("src/auth/") for h in only)
        # a filter naming what the grant hides finds nothing: the grant's exclude still applies
        hidden = await c.post("/search", json={**q, "paths": ["src/zq_private_*", "*.env"]}, headers=hd)
        assert hidden.status_code == 200 and hidden.json()["results"] == []
        r = await c.post("/retrieve", json={**q, "mode": "standard", "paths": ["src/auth/*"]}, headers=hd)
        results = parse_sse(r.text)[-1][1]["results"]
        assert results and all(h["path"].startswith("src/auth/") for h in results)
        bad = await c.post("/search", json={**q, "paths": ["src/[z-a]"]}, headers=hd)
        assert bad.status_code == 400 and "reversed range" in bad.json()["detail"], bad.text
