"""The core installs alone (issue 43): a fresh venv with `pip install -c constraints.txt <repo>` (no extras, not
editable) runs `repoctx index`, `search`, `context` and `mcp`, and FastAPI, Strands and psycopg are not in it.
A cheap twin runs the same commands in this venv with every package outside the core made unimportable,
which answers in seconds where the fresh install takes minutes."""
from __future__ import annotations

import asyncio
import importlib.metadata as md
import json
import os
import re
import shutil
import subprocess
import sys
import time
import tomllib
from pathlib import Path

import pytest
from mcp import Client, StdioServerParameters
from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[1]
CONSTRAINTS = ROOT / "constraints.txt"
# what the extras bring and the core must run without
ABSENT = ("fastapi", "strands", "psycopg", "psycopg_pool", "procrastinate", "pgvector", "jinja2")
INSTALL_TIMEOUT = 1800

INVOICE = '''"""Invoices of the shop."""


def compute_invoice_total(lines, tax_rate=0.2):
    """Sum the line items of an invoice and add the sales tax."""
    subtotal = sum(qty * price for qty, price in lines)
    return round(subtotal * (1 + tax_rate), 2)


def format_invoice_number(year, serial):
    """The printed invoice number, like 2026-000042."""
    return f"{year}-{serial:06d}"
'''

MAIL = '''from billing.invoice import compute_invoice_total


def send_invoice_email(address, lines):
    """E-mail an invoice's total to a customer."""
    total = compute_invoice_total(lines)
    return {"to": address, "body": f"You owe {total}"}
'''

# longer than a window and without a grammar: indexed as text windows (capsules/fallback.py, the text splitter)
POLICY = "\n\n".join(
    [f"Clause {i}. Refunds are paid within thirty days of a written request, in the currency of the order."
     for i in range(1, 16)]
    + ["Clause 16. Chargebacks older than ninety days are written off by the treasury desk."]) + "\n"


def write_tree(root: Path) -> Path:
    for rel, text in {"billing/__init__.py": "", "billing/invoice.py": INVOICE, "billing/mail.py": MAIL,
                      "POLICY.txt": POLICY, "README.md": "# shop\n\nBilling code.\n"}.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    return root


def clean_env(work: Path, **extra: str) -> dict[str, str]:
    """This process's environment minus repoctx's settings and this venv, with the index and caches in work/."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("REPOCTX_") and k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")}
    env.update(REPOCTX_INDEX_DIR=str(work / "index"), REPOCTX_CACHE=str(work / "cache"), **extra)
    return env


def run(cmd: list[str], env: dict[str, str], timeout: float = 300) -> subprocess.CompletedProcess:
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, f"{cmd} exited {done.returncode}\nstdout:\n{done.stdout}\nstderr:\n{done.stderr}"
    return done


def check_core_commands(repoctx: list[str], tree: Path, env: dict[str, str]) -> None:
    """index, search, context and the MCP server over stdio answer with the right code."""
    report = json.loads(run([*repoctx, "index", str(tree), "--json"], env).stdout)
    assert set(report["added"]) >= {"billing/invoice.py", "billing/mail.py", "POLICY.txt"}, report
    assert report["vectors"]["embedded"] > 0, report  # the shipped MiniLM ran (onnxruntime, tokenizers)

    found = json.loads(run([*repoctx, "search", "sum the line items of an invoice and add the tax",
                            "--repo", str(tree), "-k", "3", "--json"], env).stdout)
    assert found["results"][0].startswith("billing/invoice.py:4-7 :: compute_invoice_total("), found

    found = json.loads(run([*repoctx, "search", "chargebacks written off by the treasury desk",
                            "--repo", str(tree), "-k", "3", "--json"], env).stdout)
    assert found["results"][0].startswith("POLICY.txt:"), found

    ctx = json.loads(run([*repoctx, "context", "how is an invoice total computed", "--repo", str(tree),
                          "--json"], env).stdout)
    assert "def compute_invoice_total(lines, tax_rate=0.2):" in ctx["text"], ctx
    assert any("compute_invoice_total" in c for c in map(str, ctx["citations"])), ctx

    async def mcp_session() -> None:
        params = StdioServerParameters(command=repoctx[0], args=[*repoctx[1:], "mcp", "--repo", str(tree)], env=env)
        async with Client(params, read_timeout_seconds=120) as client:
            tools = {t.name for t in (await client.list_tools()).tools}
            assert {"search_code", "get_context", "symbol"} <= tools, tools
            r = await client.call_tool("search_code", {"query": "sum the line items of an invoice", "k": 3})
            assert not r.is_error, r
            assert r.structured_content["results"][0].startswith(
                "billing/invoice.py:4-7 :: compute_invoice_total("), r.structured_content
            r = await client.call_tool("symbol", {"name": "send_invoice_email"})
            assert r.structured_content["matches"][0]["citation"] == "billing/mail.py:4-7 :: send_invoice_email"

    asyncio.run(asyncio.wait_for(mcp_session(), 300))


# ------------------------------------------------------------------------------------- a fresh venv
def _source_copy(dest: Path) -> Path:
    """What the sdist holds, copied: pip builds in the source folder, and the working tree stays clean."""
    dest.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(ROOT / name, dest / name)
    shutil.copytree(ROOT / "src", dest / "src", ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    return dest


@pytest.fixture(scope="module")
def core_venv(tmp_path_factory) -> Path:
    base = tmp_path_factory.mktemp("core-venv")
    venv = base / "venv"
    env = clean_env(base)
    started = time.monotonic()
    run([sys.executable, "-m", "venv", str(venv)], env, timeout=300)
    py = str(venv / "bin" / "python")
    run([py, "-m", "pip", "install", "-q", "pip==25.3"], env, timeout=INSTALL_TIMEOUT)
    run([py, "-m", "pip", "install", "-q", "-c", str(CONSTRAINTS), str(_source_copy(base / "source"))], env,
        timeout=INSTALL_TIMEOUT)
    seconds = time.monotonic() - started
    packages = run([py, "-m", "pip", "list", "--format=json"], env).stdout
    print(f"\ncore install: {seconds:.0f} s, {len(json.loads(packages))} packages")
    return venv


def test_core_install_leaves_the_extras_out(core_venv, tmp_path):
    py = str(core_venv / "bin" / "python")
    probe = ("import importlib.util, json, sys, repoctx; "
             f"print(json.dumps({{'present': [m for m in {ABSENT!r} if importlib.util.find_spec(m)], "
             "'repoctx': repoctx.__file__}))")
    seen = json.loads(run([py, "-c", probe], clean_env(tmp_path)).stdout)
    assert seen["present"] == [], seen
    assert Path(seen["repoctx"]).is_relative_to(core_venv), seen  # installed, not this checkout


def test_core_install_indexes_searches_and_serves_mcp(core_venv, tmp_path):
    tree = write_tree(tmp_path / "shop")
    check_core_commands([str(core_venv / "bin" / "repoctx")], tree, clean_env(tmp_path / "work"))


# ----------------------------------------------------------------- this venv, the extras unimportable
def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def core_distributions() -> set[str]:
    """The distributions `pip install .` brings: pyproject's dependencies and theirs, as installed here."""
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    seen: dict[str, set[str]] = {}
    todo = [Requirement(r) for r in deps]
    while todo:
        req = todo.pop()
        if req.marker and not req.marker.evaluate({"extra": ""}):
            continue
        name = _norm(req.name)
        if name in seen and set(req.extras) <= seen[name]:
            continue
        seen[name] = seen.get(name, set()) | set(req.extras)
        try:
            requires = md.distribution(req.name).requires or []
        except md.PackageNotFoundError:
            continue
        for spec in requires:
            sub = Requirement(spec)
            if sub.marker and not any(sub.marker.evaluate({"extra": e}) for e in ("", *seen[name])):
                continue
            todo.append(Requirement(str(sub).split(";")[0]))
    return set(seen)


def blocked_modules() -> set[str]:
    """Top-level modules here that only distributions outside the core provide."""
    core = core_distributions() | {"repoctx", "pip", "setuptools"}
    return {mod for mod, dists in md.packages_distributions().items()
            if not any(_norm(d) in core for d in dists)}


SITECUSTOMIZE = '''import sys

BLOCKED = frozenset({blocked!r})


class NotInTheCore:
    """A module of an extra: missing, as after `pip install .`."""

    @staticmethod
    def find_spec(name, path=None, target=None):
        if name.partition(".")[0] in BLOCKED:
            raise ModuleNotFoundError(f"No module named {{name!r}} (not in the core install)", name=name)
        return None


sys.meta_path.insert(0, NotInTheCore)
'''


def test_core_commands_run_without_the_extras_here(tmp_path):
    blocked = blocked_modules()
    assert set(ABSENT) <= blocked, sorted(set(ABSENT) - blocked)
    assert not {"mcp", "numpy", "tree_sitter", "typer"} & blocked
    hook = tmp_path / "hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(SITECUSTOMIZE.format(blocked=sorted(blocked)))
    env = clean_env(tmp_path / "work", PYTHONPATH=str(hook))
    refused = subprocess.run([sys.executable, "-c", "import fastapi"], env=env, capture_output=True, text=True)
    assert refused.returncode != 0 and "not in the core install" in refused.stderr, refused.stderr
    repoctx = Path(sys.executable).parent / "repoctx"
    shop = write_tree(tmp_path / "shop")
    check_core_commands([str(repoctx)], shop, env)
    # the schemas of what is installed are migrated; the copilot's sessions are skipped, saying how to add them
    migrated = subprocess.run([str(repoctx), "db", "migrate", "--repo", str(shop)], env=env, capture_output=True,
                              text=True)
    assert migrated.returncode == 0, migrated.stderr
    assert "sessions skipped" in migrated.stdout and "repoctx[copilot]" in migrated.stdout, migrated.stdout
