"""Access control end to end on a real PostgreSQL: a key whose role sees only some paths of one repository
asks 200 fuzzed questions through every endpoint -- /chat (a scripted model that calls every tool and
repeats whatever the tools returned), /search, /context, /retrieve, /repos -- and no restricted capsule,
path, file content or repository name ever appears in a response. The admin key, asking the same
searches, does see them (so the markers are reachable and the test means something)."""
from __future__ import annotations

import asyncio
import json
import random
import zlib

import pytest

from repoctx.copilot.scripted import ScriptedToolModel, last_tool_results

from test_service_support import MARKERS, PUBLIC_REPO, VAULT_REPO, Env, parse_sse

pytestmark = pytest.mark.asyncio

WORDS = ["verify", "session", "token", "signature", "basket", "add", "item", "total", "price", "cache", "evict",
         "oldest", "ledger", "rotate", "master", "secret", "credentials", "store", "private", "keys", "load",
         "unseal", "vault", "sequence", "shares", "share", "combine", "canary", "zq", "seal", "entries", "signing",
         "guide", "docs", "lru", "payload", "sign", "expiry", "quantity", "x9", "readme", "key", "helper", "sum"]
SYMBOLS = ["rotate_ledger", "Basket.add_item", "check_signature", "verify_session_token", "seal_entries", "sign",
           "LRUCache.get", "Basket", "total_price", "evict_oldest"]
GLOBS = ["*", "*.py", "src/*", "*secret*", "*vault*", "docs/*", "*zq*", "*.md", "*private*"]
TEMPLATES = ["How does {a} {b} work and where is {c} {d} handled?", "Where is the {a} {b}?", "{a} {b} {c}",
             "what calls {a}", "{a}", "Compare how {a} and {b} {c} are done."]


def question(rng: random.Random) -> str:
    picks = {k: rng.choice(WORDS) for k in "abcd"}
    if rng.random() < 0.25:
        return " ".join(rng.sample(WORDS, rng.randint(1, 6)))
    if rng.random() < 0.15:
        return rng.choice(SYMBOLS)
    return rng.choice(TEMPLATES).format(**picks)


def _q(messages) -> str:
    for msg in reversed(messages):
        if msg.get("role") == "user":
            texts = [b["text"] for b in msg.get("content") or [] if "text" in b]
            if texts:
                return texts[-1]
    return ""


def curious_model() -> ScriptedToolModel:
    """Calls every tool with arguments drawn from the question, then reads what it listed, then answers by
    repeating everything the tools returned (so any leak in a tool result reaches the response)."""

    def first(messages):
        q = _q(messages)
        rng = random.Random(zlib.crc32(q.encode()))
        words = q.replace("?", "").split() or ["token"]
        return {"tools": [
            {"tool": "search_code", "input": {"query": q, "k": rng.randint(1, 20),
                                               "level": rng.choice(["symbol", "file"]),
                                               "mode": rng.choice(["auto", "standard", "agentic"])}},
            {"tool": "get_context", "input": {"query": q, "budget": rng.choice([100, 500, 2000])}},
            {"tool": "symbol", "input": {"name": rng.choice(words + SYMBOLS)}},
            {"tool": "grep", "input": {"pattern": rng.choice(words + SYMBOLS), "ignore_case": rng.random() < 0.5}},
            {"tool": "outline", "input": {"path": rng.choice(["src/auth/tokens.py", "src/cart/basket.py",
                                                              "docs/guide.md"])}},
            {"tool": "callers", "input": {"symbol": rng.choice(SYMBOLS + words)}},
            {"tool": "callees", "input": {"symbol": rng.choice(SYMBOLS)}},
            {"tool": "list_files", "input": {"glob": rng.choice(GLOBS)}},
        ]}

    def second(messages):
        q = _q(messages)
        rng = random.Random(zlib.crc32(q.encode()) + 1)
        listed = []
        for res in last_tool_results(messages):
            for block in res.get("content") or []:
                data = block.get("json")
                if data is None and "text" in block:
                    try:
                        data = json.loads(block["text"])
                    except ValueError:
                        data = None
                if isinstance(data, dict) and "files" in data and isinstance(data["files"], list):
                    listed += data["files"]
        guess = rng.choice([f"src/{rng.choice(WORDS)}.py", f"docs/{rng.choice(WORDS)}.md", "../README.md",
                            "/etc/passwd", f"src/auth/{rng.choice(WORDS)}.py", "README.md"])
        calls = [{"tool": "read_file", "input": {"path": guess}}]
        if listed:
            calls.append({"tool": "read_file", "input": {"path": rng.choice(listed), "start": 1, "end": 40}})
        return {"tools": calls}

    def answer(messages):
        everything = []
        for msg in messages:
            for block in msg.get("content") or []:
                if "toolResult" in block:
                    everything.append(block["toolResult"])
        return "Here is what I found: " + json.dumps(everything, ensure_ascii=False)[:20000]

    return ScriptedToolModel([first, second, answer], chunk=256)


def leaks(text: str) -> list[str]:
    low = text.lower()
    return [m for m in MARKERS if m.lower() in low]


@pytest.fixture
def env(pg_url, tmp_path):
    e = Env(pg_url, tmp_path, model_factory=curious_model, stream_timeout=30)
    yield e
    e.close()


async def test_a_restricted_key_never_sees_restricted_capsules_paths_or_repositories(env):
    rng = random.Random(20260611)
    queries = [question(rng) for _ in range(200)]
    hd, ha = env.auth(env.dev_key), env.auth(env.admin_key)
    seen = {"search_hits": 0, "admin_marker_hits": 0, "chat_tool_results": 0, "requests": 0}
    sem = asyncio.Semaphore(4)

    async def one(c, i: int, q: str) -> None:
        async with sem:
            k = rng.randint(1, 50)
            level, mode = rng.choice(["symbol", "file"]), rng.choice(["auto", "auto", "standard", "agentic"])
            calls = [
                c.post("/search", json={"query": q, "k": k, "level": level, "mode": mode,
                                        "detail": rng.choice(["signatures", "full"])}, headers=hd),
                c.post("/context", json={"query": q, "budget": rng.choice([100, 800, 4000]),
                                         "task": rng.choice([None, "code_query", "refactor", "code_gen", "search"]),
                                         "mode": rng.choice(["standard", "auto"])}, headers=hd),
                c.post("/retrieve", json={"query": q, "k": k, "level": level, "mode": mode}, headers=hd),
                c.post("/chat", json={"session_id": f"fuzz-{i}", "message": q}, headers=hd),
                c.get("/repos", headers=hd),
                c.get(f"/repos/{rng.choice([PUBLIC_REPO, VAULT_REPO, rng.choice(WORDS)])}", headers=hd),
                c.post("/search", json={"query": q, "repos": [rng.choice([VAULT_REPO, PUBLIC_REPO])]}, headers=hd),
                c.post("/search", json={"query": q, "k": 50, "mode": "standard"}, headers=ha),
            ]
            if i % 10 == 0:  # a wrong or missing key, now and then, on any endpoint
                calls.append(c.post("/search", json={"query": q}, headers=env.auth(env.dev_key[:-2] + "xx")))
                calls.append(c.post("/chat", json={"session_id": "x", "message": q}))
            rs = await asyncio.gather(*calls)
            search, context, retrieve, chat, repos, repo, named, admin = rs[:8]
            for r in rs[:7]:
                seen["requests"] += 1
                assert r.status_code in (200, 404), (q, r.request.url, r.status_code, r.text[:300])
                found = leaks(r.text)
                assert not found, (q, str(r.request.url), found, r.text[:2000])
            for r in rs[8:]:
                assert r.status_code == 401 and not leaks(r.text)
            assert search.status_code == context.status_code == retrieve.status_code == chat.status_code == 200
            assert repo.status_code == (200 if repo.request.url.path.endswith(PUBLIC_REPO) else 404)
            if VAULT_REPO in json.loads(named.request.content)["repos"]:
                assert named.status_code == 404
            seen["search_hits"] += search.json()["count"] > 0
            assert [e for e, _ in parse_sse(retrieve.text)][-1] == "results"
            events = parse_sse(chat.text)
            assert events[-1][0] == "done", events[-3:]
            seen["chat_tool_results"] += sum(1 for e, d in events if e == "trace" and d.get("step") == "tool_result")
            assert {d["repo"] for d in search.json()["results"]} <= {PUBLIC_REPO}
            assert admin.status_code == 200
            seen["admin_marker_hits"] += bool(leaks(admin.text))

    async with env.client() as c:
        await asyncio.gather(*(one(c, i, q) for i, q in enumerate(queries)))

    assert seen["requests"] == 200 * 7
    assert seen["search_hits"] >= 100, seen  # the restricted key does find its own code
    assert seen["admin_marker_hits"] >= 20, seen  # the same searches reach the restricted code for an admin
    assert seen["chat_tool_results"] >= 200 * 7, seen  # every chat called every tool (and read_file at least once)
