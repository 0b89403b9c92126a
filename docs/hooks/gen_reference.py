"""mkdocs hook: the CLI reference and the HTTP API pages, generated at build time.

Nothing here is written to docs/: the pages (and ``reference/openapi.json``) exist only in the build,
so they cannot go stale. The CLI page walks the Typer app (``repoctx.cli:app``) as click sees it; the
HTTP page renders the OpenAPI spec of a service app built over an empty temporary index (no embedder,
no workers), as the tests build it. The benchmark tables in ``bench/results/*.md`` are published under
``benchmarks/results/`` the same way, so pages can link the measured tables, and ``bench/README.md`` as
``benchmarks/scripts.md``.
"""
from __future__ import annotations

import json
import re
import tempfile
from pathlib import Path

from mkdocs.structure.files import File, InclusionLevel

ROOT = Path(__file__).resolve().parents[2]
CLI_PAGE = "reference/cli.md"
HTTP_PAGE = "reference/http.md"
SPEC_FILE = "reference/openapi.json"
RESULTS_DIR = "benchmarks/results"
SCRIPTS_PAGE = "benchmarks/scripts.md"


# ---------------------------------------------------------------- CLI


def _is_group(cmd) -> bool:
    return hasattr(cmd, "list_commands")  # typer may vendor its own click: duck types, not isinstance


def _context(cmd, name: str, parent=None):
    return cmd.context_class(cmd, info_name=name, parent=parent)


def _walk(cmd, ctx, path: list[str]):
    """Every command below ``cmd``, depth first, with the words that call it."""
    yield path, cmd
    if _is_group(cmd):
        for name in cmd.list_commands(ctx):
            try:
                sub = cmd.get_command(ctx, name)
            except ImportError as e:  # a surface whose extra is not installed
                yield path + [name], e
                continue
            if sub is None or getattr(sub, "hidden", False):
                continue
            yield from _walk(sub, _context(sub, name, ctx), path + [name])


def _cell(text: str | None) -> str:
    return " ".join((text or "").split()).replace("|", "\\|")


def _param_row(p) -> str:
    if p.param_type_name == "argument":
        name = f"`{p.human_readable_name}`"
        kind = "argument" + ("" if p.required else ", optional") + (", repeatable" if p.nargs == -1 else "")
        help_ = getattr(p, "help", None) or ""
    else:
        names = ", ".join(f"`{o}`" for o in [*p.opts, *p.secondary_opts])
        name = names
        kind = "flag" if getattr(p, "is_flag", False) else f"option ({p.type.name})"
        if getattr(p, "multiple", False):
            kind += ", repeatable"
        help_ = getattr(p, "help", None) or ""
    default = p.default
    show = "" if default in (None, False, (), []) or callable(default) or (getattr(p, "is_flag", False) and default is False) \
        else f"`{default}`"
    if p.required:
        show = "required"
    return f"| {name} | {kind} | {show} | {_cell(help_)} |"


def cli_markdown() -> str:
    import typer

    from repoctx.cli import app

    root = typer.main.get_command(app)
    ctx = _context(root, "repoctx")
    out = ["# CLI reference", "",
           "Generated at build time from the Typer app (`repoctx.cli:app`): every command, its arguments and "
           "options, as `repoctx COMMAND --help` prints them. Usage and examples: [Getting started]"
           "(../getting-started.md) and [Usage](../usage.md).", ""]
    body = []
    for path, cmd in _walk(root, ctx, ["repoctx"]):
        title = " ".join(path)
        if isinstance(cmd, ImportError):
            body += [f"## `{title}`", "", f"Not available in this build: `{cmd}` (install the extra that adds it, "
                     "e.g. `pip install 'repoctx[all]'`).", ""]
            continue
        if len(path) == 1:
            out += [_cell(cmd.help), "", "| command | what it does |", "|---|---|"]
            continue
        anchor = "-".join(path[1:])
        if len(path) == 2:
            out.append(f"| [`{title}`](#{anchor}) | {_cell(cmd.get_short_help_str(limit=200))} |")
        level = "#" * min(len(path), 4)
        sub_ctx = _context(cmd, path[-1])
        usage = re.sub(r"\{(\w+)\}", lambda m: m.group(1).upper(), " ".join(cmd.collect_usage_pieces(sub_ctx)))
        body += [f"{level} `{title}` {{#{anchor}}}", "", "```text", f"{title} {usage}".rstrip(),
                 "```", "", (cmd.help or "").strip(), ""]
        if _is_group(cmd):
            subs = [n for n in cmd.list_commands(sub_ctx)]
            body += ["Subcommands: " + ", ".join(f"[`{n}`](#{anchor}-{n})" for n in subs) + ".", ""]
        params = [p for p in cmd.get_params(sub_ctx) if not getattr(p, "hidden", False) and p.name != "help"]
        if params:
            body += ["| name | kind | default | meaning |", "|---|---|---|---|", *(_param_row(p) for p in params), ""]
    return "\n".join(out + [""] + body) + "\n"


# ---------------------------------------------------------------- HTTP


def openapi_spec() -> dict:
    try:
        from repoctx.config import Settings
        from repoctx.service.app import create_app
        from repoctx.service.config import ServiceSettings
    except ImportError as e:  # pragma: no cover - the docs build needs the service's dependencies
        raise SystemExit(f"the HTTP API page needs the service: pip install '.[service,docs]' ({e})") from e
    with tempfile.TemporaryDirectory(prefix="repoctx-docs-") as d:
        app = create_app(Settings(index_dir=Path(d), embedder="none"),
                         service=ServiceSettings(key_cache_seconds=0), inprocess_workers=0)
        try:
            return app.openapi()
        finally:
            app.state.service.close()


def _ref_name(schema: dict) -> str | None:
    ref = schema.get("$ref") or next((s.get("$ref") for s in schema.get("anyOf", []) + schema.get("allOf", []) if "$ref" in s), None)
    return ref.rsplit("/", 1)[-1] if ref else None


def _type(schema: dict) -> str:
    if "$ref" in schema:
        return _ref_name(schema) or "object"
    if "anyOf" in schema:
        return " \\| ".join(_type(s) for s in schema["anyOf"])
    if schema.get("type") == "array":
        return f"array of {_type(schema.get('items', {}))}"
    if "enum" in schema:
        return " \\| ".join(f"`{v}`" for v in schema["enum"])
    return schema.get("type", "any")


def _schema_table(name: str, schemas: dict) -> list[str]:
    s = schemas.get(name, {})
    props = s.get("properties", {})
    if not props:
        return []
    required = set(s.get("required", []))
    rows = ["| field | type | default | meaning |", "|---|---|---|---|"]
    for field, fs in props.items():
        default = "required" if field in required else (f"`{json.dumps(fs['default'])}`" if "default" in fs else "")
        rows.append(f"| `{field}` | {_type(fs)} | {default} | {_cell(fs.get('description') or fs.get('title', ''))} |")
    return rows + [""]


def http_markdown(spec: dict) -> str:
    schemas = spec.get("components", {}).get("schemas", {})
    security = spec.get("components", {}).get("securitySchemes", {})
    out = [f"# HTTP API", "",
           f"Generated at build time from the service's OpenAPI spec ({spec['info']['title']} "
           f"{spec['info']['version']}); the spec itself is [openapi.json](openapi.json). "
           f"{_cell(spec['info'].get('description'))}", ""]
    for name, sch in security.items():
        out += [f"**Authentication** ({name}, {sch.get('scheme', sch.get('type'))}): {_cell(sch.get('description'))} "
                "Keys, roles and limits: [The service](../service.md).", ""]
    out += ["| method | path | summary |", "|---|---|---|"]
    body = []
    for path, methods in spec["paths"].items():
        for method, op in methods.items():
            anchor = (method + path).replace("/", "-").replace("{", "").replace("}", "").strip("-").lower()
            out.append(f"| {method.upper()} | [`{path}`](#{anchor}) | {_cell(op.get('summary'))} |")
            body += [f"## {method.upper()} `{path}` {{#{anchor}}}", "", _cell(op.get("summary")), ""]
            desc = (op.get("description") or "").strip()
            if desc and desc != op.get("summary"):
                body += [desc, ""]
            body += ["Needs an API key (`Authorization: Bearer KEY`)." if op.get("security")
                     else "No `Authorization` header: see the summary for what guards it.", ""]
            params = op.get("parameters", [])
            if params:
                body += ["| parameter | in | type | required | meaning |", "|---|---|---|---|---|"]
                for p in params:
                    body.append(f"| `{p['name']}` | {p['in']} | {_type(p.get('schema', {}))} | "
                                f"{'yes' if p.get('required') else 'no'} | {_cell(p.get('description'))} |")
                body.append("")
            rb = op.get("requestBody")
            if rb:
                for ctype, media in rb.get("content", {}).items():
                    ref = _ref_name(media.get("schema", {}))
                    body += [f"Request body ({ctype}){': `' + ref + '`' if ref else ''}:", ""]
                    body += _schema_table(ref, schemas) if ref else []
            responses = op.get("responses", {})
            if responses:
                body += ["| status | meaning |", "|---|---|"]
                body += [f"| {code} | {_cell(r.get('description'))} |" for code, r in responses.items()]
                body.append("")
    return "\n".join(out + [""] + body) + "\n"


# ---------------------------------------------------------------- benchmark tables


def results_index(names: list[str]) -> str:
    lines = ["# Result tables", "",
             "The tables the benchmark scripts wrote (`bench/results/*.md`), published as they are in the "
             "repository. Which script writes which: [the scripts](../scripts.md) (`bench/README.md`).", ""]
    lines += [f"- [{n}]({n}.md)" for n in names]
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------- hook


def on_files(files, config):
    spec = openapi_spec()
    files.append(File.generated(config, CLI_PAGE, content=cli_markdown()))
    files.append(File.generated(config, HTTP_PAGE, content=http_markdown(spec)))
    files.append(File.generated(config, SPEC_FILE, content=json.dumps(spec, indent=2)))
    results = sorted((ROOT / "bench" / "results").glob("*.md"))
    for r in results:
        files.append(File.generated(config, f"{RESULTS_DIR}/{r.name}", content=r.read_text(encoding="utf-8"),
                                    inclusion=InclusionLevel.NOT_IN_NAV))
    files.append(File.generated(config, f"{RESULTS_DIR}/index.md", content=results_index([r.stem for r in results])))
    # bench/README.md (one text for the repository and the site): which script makes which table
    files.append(File.generated(config, SCRIPTS_PAGE, content=(ROOT / "bench" / "README.md").read_text(encoding="utf-8")))
    return files


_RESULT_SPAN = re.compile(r"(?<!\[)`bench/results/([\w.-]+)\.md`")


def on_page_markdown(markdown, page, config, files):
    """A hand-written page names a table as `bench/results/NAME.md`; on the site that name links the table."""
    depth = page.file.src_uri.count("/")
    up = "../" * depth

    def link(m: re.Match) -> str:
        if not (ROOT / "bench" / "results" / f"{m.group(1)}.md").exists():
            return m.group(0)
        return f"[{m.group(0)}]({up}{RESULTS_DIR}/{m.group(1)}.md)"

    if page.file.src_uri.startswith(RESULTS_DIR):
        return markdown
    return _RESULT_SPAN.sub(link, markdown)
