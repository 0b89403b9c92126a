"""The docs site builds with `mkdocs build --strict`: a broken link, a missing page or a nav entry that names
nothing fails it. The CLI reference and the HTTP API are generated from the code at build time, so they
name the commands and paths the code has today."""
from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_docs_site_builds_strict_with_generated_reference(tmp_path):
    missing = [m for m in ("mkdocs", "material") if importlib.util.find_spec(m) is None]
    assert not missing, (f"{', '.join(missing)} not installed: the docs build needs the `docs` extra "
                         "(pip install -e '.[docs]')")
    site = tmp_path / "site"
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    run = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-d", str(site)], cwd=ROOT,
                         capture_output=True, text=True, timeout=600, env=env)
    assert run.returncode == 0, f"mkdocs build --strict failed:\n{run.stdout}\n{run.stderr}"

    cli = (site / "reference" / "cli" / "index.html").read_text(encoding="utf-8")
    for command in ("repoctx index", "repoctx search", "repoctx context", "repoctx mcp", "repoctx keys add"):
        assert command in cli, command
    assert "--budget" in cli and "--detail" in cli

    http = (site / "reference" / "http" / "index.html").read_text(encoding="utf-8")
    for path in ("/search", "/context", "/chat", "/repos/{name}", "/health"):
        assert path in http, path
    assert "SearchRequest" in http
    assert '"/chat"' in (site / "reference" / "openapi.json").read_text(encoding="utf-8")

    # nothing generated lands in docs/: the pages exist only in the build
    assert not list((ROOT / "docs").glob("reference/*.md"))
