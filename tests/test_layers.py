"""The import floors: a module may import from its own floor and the floors below, never from one above.

Every ``import`` under src/repoctx counts, wherever it is written (module level, inside a function, under
``if TYPE_CHECKING``), absolute or relative. CONTRIBUTING.md shows the same map."""
from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parent.parent / "src"

# Bottom to top. A name covers the module and everything under it (``repoctx.store`` covers
# ``repoctx.store.sqlite``); the longest name that matches wins. ``repoctx`` alone (the package's
# ``__init__``, which re-exports ``Index``) sits with ``index``. Every ``__main__`` and the CLI are the top.
FLOORS: list[tuple[str, ...]] = [
    ("repoctx.types", "repoctx.config", "repoctx.tokens", "repoctx.heap"),
    ("repoctx.providers",),
    ("repoctx.ingest", "repoctx.capsules"),
    ("repoctx.graph", "repoctx.store"),
    ("repoctx.vectors", "repoctx.indexer", "repoctx.history", "repoctx.retrieve", "repoctx.render", "repoctx.watch"),
    ("repoctx", "repoctx.index"),
    ("repoctx.copilot", "repoctx.evaluate"),
    ("repoctx.service", "repoctx.mcp"),
    ("repoctx.cli",),
]
TOP = len(FLOORS) - 1


def _modules() -> dict[str, Path]:
    out = {}
    for path in sorted((SRC / "repoctx").rglob("*.py")):
        parts = list(path.relative_to(SRC).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


MODULES = _modules()


def floor_of(module: str) -> int | None:
    if module.rsplit(".", 1)[-1] == "__main__":
        return TOP
    best, floor = -1, None
    for level, names in enumerate(FLOORS):
        for name in names:
            if module == name or (name != "repoctx" and module.startswith(name + ".")):
                if len(name) > best:
                    best, floor = len(name), level
    return floor


def _target(name: str) -> str:
    """The module an imported dotted name lives in: the longest prefix that is a module."""
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name


def imports_of(module: str, path: Path) -> list[tuple[int, str]]:
    """(line, imported repoctx module) for every import in the file."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    out = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names if a.name.split(".")[0] == "repoctx"]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[:len(base) - (node.level - 1)]
                source = ".".join(base + ([node.module] if node.module else []))
            else:
                source = node.module or ""
            if source.split(".")[0] != "repoctx":
                continue
            for a in node.names:  # `from repoctx import render` imports a module; `from repoctx.x import f` a name
                sub = f"{source}.{a.name}"
                out.append((node.lineno, sub if sub in MODULES else source))
    return [(line, _target(name)) for line, name in out if _target(name)]


def arrows_up() -> list[str]:
    found = []
    for module, path in MODULES.items():
        here = floor_of(module)
        if here is None:
            continue
        for line, target in imports_of(module, path):
            there = floor_of(target)
            if there is not None and there > here:
                found.append(f"{path.relative_to(SRC.parent)}:{line}: {module} (floor {here}) -> {target} "
                             f"(floor {there})")
    return found


def test_every_module_has_a_floor():
    missing = [m for m in MODULES if floor_of(m) is None]
    assert not missing, (f"{', '.join(missing)} on no floor: add it (or its package) to FLOORS in "
                         "tests/test_layers.py and to the floors in CONTRIBUTING.md")


def test_no_import_from_a_lower_floor_to_a_higher_one():
    found = arrows_up()
    assert not found, "imports that point up a floor:\n" + "\n".join(found)


@pytest.mark.parametrize("module, floor", [("repoctx.store.sqlite", 3), ("repoctx", 5), ("repoctx.mcp.__main__", TOP),
                                           ("repoctx.cli", TOP), ("repoctx.providers.llm", 1)])
def test_the_map_reads_as_written(module, floor):
    assert floor_of(module) == floor


def test_the_walk_sees_function_level_and_relative_imports(tmp_path, monkeypatch):
    pkg = tmp_path / "repoctx"
    (pkg / "store").mkdir(parents=True)
    for name in ("__init__.py", "store/__init__.py", "index.py"):
        (pkg / name).write_text("")
    (pkg / "store" / "base.py").write_text("def f():\n    from ..index import Index\n    from .. import index\n")
    mods = {"repoctx": pkg / "__init__.py", "repoctx.store": pkg / "store/__init__.py",
            "repoctx.index": pkg / "index.py", "repoctx.store.base": pkg / "store/base.py"}
    monkeypatch.setitem(globals(), "MODULES", mods)
    monkeypatch.setitem(globals(), "SRC", tmp_path)
    assert imports_of("repoctx.store.base", mods["repoctx.store.base"]) == [(2, "repoctx.index"), (3, "repoctx.index")]
    assert [a.split(": ", 1)[1] for a in arrows_up()] == [
        "repoctx.store.base (floor 3) -> repoctx.index (floor 5)"] * 2


def test_providers_and_the_cli_import_without_the_optional_stacks():
    """Strands, LangChain, FastAPI and psycopg load only inside what needs them: with them refused, the providers
    and the CLI import, a provider that needs one says which extra to install, and the CLI lists its commands."""
    code = """
import importlib.abc, sys
class Refuse(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("strands", "langchain_core", "fastapi", "psycopg", "psycopg_pool", "procrastinate"):
            raise ImportError(f"No module named {name!r}")
sys.meta_path.insert(0, Refuse())
import repoctx.providers.embedding, repoctx.providers.llm
from repoctx.providers.llm import ProviderUnavailable, build_model
try:
    build_model("openai:m@http://127.0.0.1:9/v1")
except ProviderUnavailable as e:
    print(e)
from typer.testing import CliRunner
from repoctx.cli import app
result = CliRunner().invoke(app, ["--help"])
print(result.exit_code, "chat" in result.output and "serve" in result.output)
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "pip install 'repoctx[openai]'" in out.stdout and out.stdout.rstrip().endswith("0 True"), out.stdout
