"""Shared pieces of the service tests: a corpus with restricted paths and repositories, an app on a real
PostgreSQL, an SSE parser, scripted models. (No tests here.)"""
from __future__ import annotations

import asyncio
import json
import socket
import threading
import time
from pathlib import Path
from typing import Any, AsyncIterable

import httpx
from strands.models.model import Model

from repoctx import Index, Settings
from repoctx.service.app import create_app
from repoctx.service.config import ServiceSettings
from tests.conftest import write_tree

# ---------------------------------------------------------------------------------------------- corpus
PUBLIC_REPO = "shop"
VAULT_REPO = "private-vault-x9"  # a repository the restricted key may not see at all

SHOP = {
    "src/auth/tokens.py": '''"""Token checks for the shop's HTTP API."""


def verify_session_token(token, now):
    """Verify a session token's signature and expiry."""
    if not token:
        return False
    return check_signature(token) and token.expires > now


def check_signature(token):
    return token.signature == sign(token.payload)


def sign(payload):
    return "sig:" + payload
''',
    "src/cart/basket.py": '''class Basket:
    """A shopping basket: items and their quantities."""

    def add_item(self, item, quantity=1):
        self.items[item] = self.items.get(item, 0) + quantity
        return rotate_ledger(self.items)

    def total_price(self, prices):
        return sum(prices[i] * q for i, q in self.items.items())


def rotate_ledger(items):
    """Append the basket to the ledger; the vault helper seals it."""
    return seal_entries(items)
''',
    "src/cache/lru.py": '''class LRUCache:
    """Least recently used cache with a fixed capacity."""

    def get(self, key):
        return self.entries.get(key)

    def evict_oldest(self):
        return self.entries.pop(next(iter(self.entries)))
''',
    "docs/guide.md": "# Shop guide\n\nThe basket keeps items; tokens are verified per request.\n",
    # restricted inside the public repository: a directory outside the grant, and an excluded file
    "secret/zq_credentials_store.py": '''"""ZQ_CANARY_7731: master credentials."""


def seal_entries(items):
    """Seal ledger entries with the master key."""
    return zq_rotate_master_secret(items)


def zq_rotate_master_secret(items):
    """ZQ_CANARY_7731 rotate the master secret."""
    return {"key": "ZQ_CANARY_7731", "items": items}
''',
    "src/zq_private_keys.py": '''def zq_load_private_keys(path):
    """ZQ_CANARY_5519 private signing keys."""
    return open(path).read()


def verify_private_signature(token):
    return "ZQ_CANARY_5519" in token
''',
}

VAULT = {
    "vault/zq_unseal.py": '''def zq_unseal_vault_sequence(shares):
    """ZQ_CANARY_9043 unseal the vault with key shares."""
    return combine_shares(shares)


def combine_shares(shares):
    """Combine the key shares of the vault (verify each token first)."""
    return sum(shares)


def verify_share_token(token):
    return token == "ZQ_CANARY_9043"
''',
    "README.md": "# private-vault-x9\n\nUnseal sequence and share tokens. ZQ_CANARY_9043\n",
}

# strings that must never reach the restricted key, whatever it asks
MARKERS = ["private-vault-x9", "zq_credentials_store", "secret/", "zq_rotate_master_secret", "ZQ_CANARY_7731",
           "zq_private_keys", "zq_load_private_keys", "ZQ_CANARY_5519", "verify_private_signature",
           "zq_unseal", "ZQ_CANARY_9043", "combine_shares", "verify_share_token",
           "vault/zq_unseal.py"]

DEV_GRANTS = dict(repo=PUBLIC_REPO, include=["src/*", "docs/*"], exclude=["src/zq_private_*"])


def wait_for(cond, timeout: float, step: float = 0.05):
    """The first truthy value of cond(), polled every `step` seconds for `timeout` seconds; else cond() once more."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        value = cond()
        if value:
            return value
        time.sleep(step)
    return cond()


def migrate_all(url: str) -> None:
    from repoctx.copilot import sessions
    from repoctx.service.auth import migrate_postgres
    from repoctx.store.postgres import migrate

    migrate(url)  # the store's tables
    sessions.migrate_postgres(url)  # the copilot's sessions
    migrate_postgres(url)  # keys, roles, jobs


def index_repo(settings: Settings, store, root: Path, name: str) -> None:
    Index(root, settings, name=name, store=store).update()


class Env:
    """An app on a real PostgreSQL with both repositories indexed, an admin key and a restricted key."""

    def __init__(self, url: str, base: Path, *, model_factory=None, stream_timeout: float = 20.0,
                 tools_factory=None, inprocess_workers: int = 0, index: bool = True, migrate: bool = True,
                 request_timeout: float = 60.0, **conf):
        if migrate:
            migrate_all(url)
        self.url = url
        self.base = base
        # watch=False: these tests edit files and run index jobs themselves (test_watch.py tests the watch)
        self.settings = Settings(database_url=url, embedder="none", watch=False)
        conf.setdefault("rate_limit", "")  # these tests send more than a production limit; test_service_limits
        # tests the limit itself
        self.conf = ServiceSettings(stream_timeout=stream_timeout, request_timeout=request_timeout, job_lease=3,
                                    job_poll=0.1, **conf)
        self.app = create_app(self.settings, service=self.conf, model_factory=model_factory,
                              tools_factory=tools_factory, inprocess_workers=inprocess_workers)
        self.svc = self.app.state.service
        self.shop = write_tree(base / PUBLIC_REPO, SHOP)
        self.vault = write_tree(base / VAULT_REPO, VAULT)
        if index:
            index_repo(self.settings, self.svc.store, self.shop, PUBLIC_REPO)
            index_repo(self.settings, self.svc.store, self.vault, VAULT_REPO)
        ks = self.svc.keys
        if ks.role("dev") is None:
            ks.add_role("dev", **DEV_GRANTS)
        self.admin_key = ks.add_key("root", "admin")[1]
        self.dev_key = ks.add_key("dev1", "dev")[1]

    def client(self) -> httpx.AsyncClient:
        return httpx.AsyncClient(transport=httpx.ASGITransport(app=self.app), base_url="http://repoctx.test",
                                 timeout=60)

    @staticmethod
    def auth(key: str) -> dict:
        return {"Authorization": f"Bearer {key}"}

    def close(self) -> None:
        self.svc.close()


# ---------------------------------------------------------------------------------------------- SSE
def parse_sse(text: str) -> list[tuple[str, Any]]:
    """(event, JSON data) of each frame; comments (pings) skipped."""
    out = []
    for block in text.replace("\r\n", "\n").split("\n\n"):
        event, data = "message", []
        for line in block.split("\n"):
            if line.startswith("event:"):
                event = line[6:].strip()
            elif line.startswith("data:"):
                data.append(line[5:].lstrip(" "))
        if data:
            out.append((event, json.loads("\n".join(data))))
    return out


# ---------------------------------------------------------------------------------------------- models
class SlowModel(Model):
    """Says one word, then thinks for ``seconds``; records whether its call was cancelled."""

    def __init__(self, seconds: float = 30.0, text: str = "Thinking"):
        self.seconds = seconds
        self.text = text
        self.config: dict[str, Any] = {"model_id": "slow"}
        self.started = threading.Event()
        self.cancelled = threading.Event()
        self.finished = threading.Event()

    def update_config(self, **kw: Any) -> None:
        self.config.update(kw)

    def get_config(self) -> dict[str, Any]:
        return self.config

    async def stream(self, messages, tool_specs=None, system_prompt=None, **kwargs) -> AsyncIterable[dict]:
        self.started.set()
        yield {"messageStart": {"role": "assistant"}}
        yield {"contentBlockStart": {"start": {}}}
        yield {"contentBlockDelta": {"delta": {"text": self.text}}}
        try:
            await asyncio.sleep(self.seconds)
        except asyncio.CancelledError:
            self.cancelled.set()
            raise
        yield {"contentBlockDelta": {"delta": {"text": " done."}}}
        yield {"contentBlockStop": {}}
        yield {"messageStop": {"stopReason": "end_turn"}}
        self.finished.set()

    async def structured_output(self, output_model, prompt, system_prompt=None, **kwargs):
        raise NotImplementedError
        yield  # pragma: no cover


# ---------------------------------------------------------------------------------------------- uvicorn
class LiveServer:
    """The app under a real uvicorn on 127.0.0.1 (a thread), for streaming and disconnect tests."""

    def __init__(self, app):
        import uvicorn

        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=self.port, log_level="warning",
                                                    lifespan="off"))
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> "LiveServer":
        self.thread.start()
        deadline = time.time() + 10
        while not self.server.started and time.time() < deadline:
            time.sleep(0.02)
        assert self.server.started, "uvicorn did not start"
        return self

    def __exit__(self, *exc) -> None:
        self.server.should_exit = True
        self.thread.join(10)
