"""The command line, the top floor: a thin shell over ``repoctx.Index``.

The core commands live here; ``cli.copilot`` (ask, chat, sessions) and ``cli.service`` (serve, worker, keys,
roles) hold the others' glue and are imported only when one of their commands runs, so the core commands
work with only the core installed."""

from __future__ import annotations

import json
import os
import re
import sqlite3
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, NoReturn

# Before numpy is first imported (nothing above imports it): numpy's OpenBLAS otherwise starts a thread per core
# that spins beside a command's own work, while no command multiplies matrices large enough for a second thread
# (vector scans use numpy's own loop, faiss its OpenMP, onnxruntime its pool). A one-shot hybrid `repoctx search`
# on Django: 0.42 -> 0.35 s wall, 0.41 -> 0.34 s CPU at load 2.3. A value the user set is kept
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import typer

from repoctx.config import ConfigError, Settings, remember_settings, resolve_settings
from repoctx.store.base import IndexBusy, SchemaMismatch, StoreError

if TYPE_CHECKING:  # imported by each command that opens an index: `repoctx search` loads its model first
    from repoctx.index import Index


class _Surfaces(typer.core.TyperGroup):
    """The copilot (ask, chat, sessions), the service (serve, worker, keys, roles) and the MCP server are
    thin shells over the same library, each with its commands in its own module. They are imported only when
    one of their commands runs (or the help lists them), so `repoctx search` never pays for Strands, FastAPI
    or MCP."""

    LAZY: ClassVar[dict[str, str]] = {
        "ask": "repoctx.cli.copilot",
        "chat": "repoctx.cli.copilot",
        "sessions": "repoctx.cli.copilot",
        "serve": "repoctx.cli.service",
        "worker": "repoctx.cli.service",
        "keys": "repoctx.cli.service",
        "roles": "repoctx.cli.service",
        "mcp": "repoctx.cli.mcp",
    }

    def list_commands(self, ctx) -> list[str]:
        return super().list_commands(ctx) + [n for n in self.LAZY if n not in self.commands]

    def get_command(self, ctx, cmd_name: str):
        if cmd_name in self.LAZY and cmd_name not in self.commands:
            import importlib

            surface = typer.Typer()
            importlib.import_module(self.LAZY[cmd_name]).register(surface)
            for name, cmd in typer.main.get_group(surface).commands.items():
                self.commands.setdefault(name, cmd)
        return super().get_command(ctx, cmd_name)


class _Commands(typer.Typer):
    """The ``repoctx`` command. A process that ran one of the ``QUICK`` commands ends without tearing itself
    down: the reads write nothing, ``index`` closes its store first (``ctx.call_on_close``), and unwinding a
    loaded model, the vector set's ids and every module costs a one-shot hybrid search ~40 ms of CPU (Django,
    6 runs at load 3.4: 0.36 -> 0.31 s CPU), a one-file reindex ~80 ms. Output is flushed first. Only the
    command as a process (``repoctx ...``, ``python -m repoctx.cli``) does so: a caller that runs the app in its
    own process (``CliRunner``) goes through click, not here."""

    QUICK: ClassVar[frozenset[str]] = frozenset({"search", "context", "grep", "outline", "symbol", "index"})

    def __call__(self, *args, **kwargs):
        if args or kwargs or len(sys.argv) < 2 or sys.argv[1] not in self.QUICK:
            return super().__call__(*args, **kwargs)
        # typer makes a click command of every registered one before it parses the line: the group it makes here
        # holds the one named (and ``db``, so that it stays a group): the line, its help and its errors read the
        # same, a one-shot search skips building the others (~20M instructions of ~900M, callgrind)
        every = self.registered_commands
        self.registered_commands = [c for c in every if _command_name(c) == sys.argv[1]]
        try:
            super().__call__()
            code = 0
        except SystemExit as e:  # click ends every command with one
            code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        finally:
            self.registered_commands = every
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):  # a reader gone (`| head`): what it read, it has
                code = code or 1
        os._exit(code)


def _command_name(info: typer.models.CommandInfo) -> str:
    """The name typer gives a registered command (its own, else its function's, ``_`` read as ``-``)."""
    return info.name or typer.main.get_command_name(info.callback.__name__ if info.callback else "")


app = _Commands(cls=_Surfaces, add_completion=False, no_args_is_help=True, help="The whole repository as context.")


class _LazyConsole:
    """A rich ``Console`` made on first use: importing rich costs a one-shot command ~20 ms of CPU, which
    `repoctx search` writing to a pipe never needs (it prints plain text there)."""

    def __init__(self, **options) -> None:
        self._options = options
        self._console: Any = None

    def get(self):
        if self._console is None:
            from rich.console import Console

            self._console = Console(**self._options)
        return self._console

    def __getattr__(self, name: str):
        return getattr(self.get(), name)


console = _LazyConsole(soft_wrap=True)  # citations and errors stay on one line
err = _LazyConsole(stderr=True, soft_wrap=True)


def _fail(message: str, code: int = 2) -> NoReturn:
    from rich.text import Text

    # plain text: markup would eat a glob's backslash
    err.print(Text.assemble(("error:", "red"), " ", message), highlight=False)
    raise typer.Exit(code)


def _why(e: BaseException) -> str:
    """One sentence naming a storage failure, without paths' internals or a traceback."""
    text = str(e).lower()
    if (isinstance(e, OSError) and e.errno == 28) or "disk is full" in text or "no space" in text:
        return "the disk is full"
    if "disk i/o error" in text:
        return "a write to the disk failed (is it full?)"
    if (
        (isinstance(e, OSError) and e.errno in (13, 30))
        or "readonly" in text
        or "read-only" in text
        or "unable to open database" in text
    ):
        return "it is not writable (set REPOCTX_INDEX_DIR to a writable folder)"
    if isinstance(e, StoreError):
        return str(e)
    return f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else 'failed'}"


def _settings(*roots) -> Settings:
    """The settings for the repositories at ``roots``: the environment's, completed by what their last
    ``repoctx index`` used (``resolve_settings``: the one rule the MCP server follows too)."""
    from repoctx.providers.embedding import check_spec

    try:
        settings = resolve_settings([r for r in roots if r is not None])
        check_spec(settings.embedder)  # REPOCTX_EMBEDDER, or what the last `repoctx index` used
    except (ConfigError, ValueError) as e:
        _fail(str(e))
    return settings


def _open(repo: Path) -> Index:
    """A repository on disk, for indexing (its store is created if missing)."""
    from repoctx.index import Index

    try:
        return Index(repo, _settings(repo))
    except (FileNotFoundError, ConfigError, ValueError, StoreError) as e:
        _fail(str(e))


def _check_mode(mode: str) -> None:
    if mode not in ("auto", "standard", "agentic"):
        _fail("--mode must be auto, standard or agentic")


def _model_loading(settings: Settings, repos: list[str]):
    """The embedder of ``settings`` with its model loading in a thread from now on, when the index it will read
    holds vectors (a ``vectors.json`` in its folder; SQLite only); else None. A one-shot search imports the
    retrieval code, opens the store and reads its lexical signals while onnxruntime builds the session beside
    it, mostly outside the GIL, instead of after them."""
    if settings.embedder in ("none", "", None) or settings.database_url:
        return None
    if settings.index_dir:
        folders = [Path(settings.index_dir)]
    else:
        folders = [settings.index_dir_for(Path(r).resolve()) for r in repos if Path(r).is_dir()]
    if not any(next((f / "vectors").glob("*/vectors.json"), None) is not None for f in folders):
        return None
    from repoctx.providers.embedding import get_embedder

    try:
        embedder = get_embedder(settings.embedder)
    except (ImportError, ValueError):
        return None  # the index's own embedder says why, when it is asked for
    start = getattr(embedder, "load_in_background", None)
    if start is None:  # a remote model: nothing to load
        return None
    start()
    return embedder


def _open_indexed(repos: list[str], all_repos: bool = False, model: bool = False) -> Index:
    """The repositories a read names (paths or registered names; ``--all``: every one in the store),
    without ever creating an index. ``model``: the read embeds its question (``_model_loading``)."""
    repos = list(repos) or ([] if all_repos else ["."])
    settings = _settings(*repos)
    embedder = _model_loading(settings, repos) if model else None
    from repoctx.index import Index, open_store  # after the model's loading began: it runs beside these imports

    shared = bool(settings.database_url or settings.index_dir)
    try:
        if all_repos or len(repos) > 1 or not Path(repos[0]).is_dir():
            if not shared and (all_repos or len(repos) > 1):
                _fail(
                    "searching several repositories needs one shared store: set REPOCTX_INDEX_DIR (a folder) or "
                    "REPOCTX_DATABASE_URL, then `repoctx index` each repository"
                )
            first = next((Path(r) for r in repos if Path(r).is_dir()), None)
            store = open_store(settings, first.resolve() if first else None, create=False)
            names = []
            for r in repos:
                rec = store.repo_by_root(str(Path(r).resolve())) if Path(r).is_dir() else store.repo(r)
                if rec is None:
                    _fail(
                        f"{r} is not indexed here: run `repoctx index {r}`"
                        if Path(r).is_dir()
                        else f"no repository named {r!r} in this store (`repoctx repos` lists them)",
                        1,
                    )
                names.append(rec.name)
            ix = Index(settings=settings, repos=tuple(names), store=store, embedder=embedder)
        else:
            ix = Index(repos[0], settings, embedder, create=False)
    except SchemaMismatch as e:
        _fail(str(e), 1)
    except StoreError:
        _fail(
            f"{Path(repos[0]).resolve() if repos else 'the store'} is not indexed: run `repoctx index "
            f"{repos[0] if repos else 'PATH'}`",
            1,
        )
    except (FileNotFoundError, ValueError) as e:
        _fail(str(e))
    if not ix.indexed():
        _fail(
            f"{ix.root or ', '.join(ix.repos) or 'the store'} is not indexed: run `repoctx index "
            f"{repos[0] if repos else 'PATH'}`",
            1,
        )
    return ix


def _run_update(ix: Index, as_json: bool):
    """Index with progress on a terminal. The lexical index and graph commit first (searchable from
    then on, by any process); vectors fill after, with a rate and an estimate of the end."""
    interactive = sys.stderr.isatty() and not as_json
    if not interactive:
        return ix.update(by="`repoctx index` run")
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    with Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[rate]}"),
        TimeElapsedColumn(),
        TextColumn("eta"),
        TimeRemainingColumn(),
        console=err.get(),
        transient=True,
    ) as bar:
        task = bar.add_task("scanning", total=None, rate="")
        t0 = time.perf_counter()

        def on(e: dict) -> None:
            if e["event"] == "plan":
                bar.update(task, description="parsing", total=max(e["to_parse"], 1), completed=0)
            elif e["event"] == "parse":
                rate = e["done"] / max(time.perf_counter() - t0, 1e-6)
                bar.update(task, completed=e["done"], rate=f"{rate:,.0f} files/s")
            elif e["event"] == "link":
                bar.update(task, description="linking")
            elif e["event"] == "done":
                bar.console.print(
                    f"lexical index and graph written in {e['seconds']:.1f}s: search works now (vectors follow)",
                    highlight=False,
                )
            elif e["event"] == "embed":
                if e["done"] == 0:
                    bar.reset(task, description="embedding", total=max(e["total"], 1), rate="")
                bar.update(
                    task,
                    description="embedding",
                    total=max(e["total"], 1),
                    completed=e["done"],
                    rate=f"{e.get('rate', 0):,.0f} units/s",
                )

        return ix.update(progress=on, by="`repoctx index` run")


@app.command()
def index(
    ctx: typer.Context,
    repo: Path = typer.Argument(Path("."), help="Repository root."),
    name: str | None = typer.Option(None, "--name", help="Register it under this name (default: its folder's)."),
    as_json: bool = typer.Option(False, "--json", help="Print the report as JSON."),
    verbose: bool = typer.Option(False, "-v", "--verbose", help="List skipped files."),
):
    """Index (or incrementally re-index) a repository."""
    settings = _settings(repo)
    from repoctx.index import Index

    try:
        ix = Index(repo, settings, name=name)
    except (FileNotFoundError, ValueError) as e:
        _fail(str(e))
    except (OSError, sqlite3.Error, StoreError) as e:
        where = settings.index_dir or (settings.database_url and "the database") or f"{repo}/.repoctx"
        _fail(f"could not open the index at {where}: {_why(e)}", 1)
    ctx.call_on_close(ix.close)  # its store's files whole (SQLite: the log checkpointed) before the process ends
    try:
        report = _run_update(ix, as_json)
    except IndexBusy as e:
        _fail(str(e), 3)
    except (OSError, sqlite3.Error, StoreError) as e:
        _fail(
            f"could not write the index at {ix.index_dir or 'the database'}: {_why(e)}; the previous index is "
            "left as it was",
            1,
        )
    if ix.index_dir and ix.root and not ix.settings.index_dir and not ix.index_dir.is_relative_to(ix.root):
        _say(
            f"note: {ix.root} is read-only, so its index is kept in {ix.index_dir} (REPOCTX_INDEX_DIR picks "
            "another place)",
            highlight=False,
            stderr=True,
        )
    for note in report.notes:
        _say(f"note: {note}", highlight=False, stderr=True)
    if ix.root is not None:
        remember_settings(ix.root, settings)  # so a process started without REPOCTX_* finds this index
    emb = ix.last_embed
    mined = ix.last_history
    history = ix.history_status() if mined is not None else None
    if as_json:
        out = report.to_dict()
        out["vectors"] = emb.to_dict() if emb else ix.vectors_status()
        if history is not None:
            out["history"] = history | {"mined": mined.mined, "backfilled": mined.backfilled}
        print(json.dumps(out))
        return
    counts = ix.store.counts(ix.scope())
    if not report.changed and report.previous_change:  # e.g. an MCP server's background refresh got there first
        from repoctx.indexer import describe_no_change

        _say(describe_no_change(report.previous_change), highlight=False)
    problems = len(report.skipped) + len(report.invalid_utf8) + len(report.syntax_errors)
    _say(
        f"indexed {ix.repo}: {report.files_seen} files ({len(report.added)} added, {len(report.modified)} "
        f"modified, {len(report.deleted)} deleted), {counts['capsules']} capsules, {counts['edges']} edges "
        f"in {report.seconds:.2f}s; {problems} reported (skipped {len(report.skipped)}, invalid UTF-8 "
        f"{len(report.invalid_utf8)}, syntax errors {len(report.syntax_errors)}, redacted {len(report.redacted)})"
    )
    if emb is not None:
        if emb.model_changed_from:
            _say(
                f"embedding model changed from {emb.model_changed_from} to {emb.model}: re-embedded the index",
                highlight=False,
            )
        _say(
            f"vectors: {emb.total} capsules, {emb.embedded} embedded, {emb.cached} from cache"
            + (f", {emb.kept} unchanged" if emb.kept else "")
            + f" in {emb.seconds:.1f}s ({emb.model})",
            highlight=False,
        )
    if history is not None and history["kept"]:
        _say(_history_line(history, mined.mined, mined.backfilled, mined.seconds), highlight=False)
    if verbose:
        for path, reason in report.skipped:
            _say(f"  skipped {path}: {reason}")
        for path in report.syntax_errors:
            _say(f"  syntax errors (indexed what parsed) {path}")
        for path in report.invalid_utf8:
            _say(f"  invalid UTF-8 (replaced) {path}")


def _history_line(h: dict, mined: int | None = None, backfilled: int = 0, seconds: float = 0.0) -> str:
    """One line on a repository's mined git history (``Index.history_status``), and on what this update mined."""
    line = f"git history: {h['commits']:,} commits to {(h['head'] or '-')[:12]}"
    if mined is not None:
        older = f", {backfilled:,} older" if backfilled else ""
        line += f" ({mined - backfilled:,} new{older}, {seconds:.2f}s)"
    return line + (", back to the first commit" if h["complete"] else ", older ones come with the next updates")


def _say(text: str, highlight: bool = True, *, stderr: bool = False) -> None:
    """One line of a command's report: printed as it is when rich would print the same bytes (``_plain_is_rich``),
    so a command run from a script never loads rich (~20 ms of CPU), else by rich as before."""
    if _plain_is_rich("", text):
        print(text, file=sys.stderr if stderr else sys.stdout)
    else:
        (err if stderr else console).print(text, highlight=highlight)


@app.command()
def status(repo: Path = typer.Argument(Path(".")), as_json: bool = typer.Option(False, "--json")):
    """Say whether the index is fresh or stale, and what changed."""
    from repoctx.index import Index

    try:
        ix = Index(repo, _settings(repo), create=False)
    except SchemaMismatch as e:
        _fail(str(e), 1)
    except StoreError:
        if as_json:
            print(json.dumps({"indexed": False}))
        else:
            console.print(f"not indexed: run `repoctx index {repo}`")
        raise typer.Exit(1) from None
    except (FileNotFoundError, ValueError) as e:
        _fail(str(e))
    st = ix.status()
    if as_json:
        print(json.dumps(st))
        return
    if not st["indexed"]:
        console.print("not indexed: run `repoctx index`")
        raise typer.Exit(1)
    state = "fresh" if st["fresh"] else "stale"
    console.print(
        f"{state}: {st['counts']['files']} files, {st['counts']['capsules']} capsules; "
        f"indexed at git {(st['indexed_git_head'] or '-')[:12]}, now {(st['git_head'] or '-')[:12]}"
        f"{' (dirty)' if st['git_dirty'] else ''}"
    )
    for key in ("added", "modified", "deleted"):
        for p in st[key]:
            console.print(f"  {key}: {p}")
    if st["history"]["kept"]:
        console.print(_history_line(st["history"]), highlight=False)
    v = st["vectors"]
    if v["enabled"]:
        if v["current"]:
            state = "current"
        elif v["indexed_model"] and v["indexed_model"] != v["model"]:
            state = f"built with {v['indexed_model']}, run `repoctx index`"
        elif v["count"]:
            state = "filling (searches use what exists)"
        else:
            state = "not built yet"
        console.print(
            f"vectors: {v['count']} of {v['total']} units ({100 * v['coverage']:.0f}%, {v['model']}): {state}",
            highlight=False,
        )


@app.command()
def search(
    query: str = typer.Argument(..., help="A question or identifiers."),
    repo: list[str] = typer.Option([], "--repo", "-r", help="Repository path or name (repeatable; default .)"),
    all_repos: bool = typer.Option(False, "--all", help="Every repository in the shared store."),
    k: int = typer.Option(10, "-k", min=1, max=200),
    level: str = typer.Option("symbol", "--level", help="symbol | file"),
    mode: str = typer.Option(
        "auto", "--mode", help="auto (router decides) | standard | agentic (multi-part questions)"
    ),
    trace: bool = typer.Option(False, "--trace", help="Print the retrieval trace live (with --json: include it)."),
    llm: bool = typer.Option(False, "--llm", help="Agentic path: plan and judge relevance with REPOCTX_LLM's model."),
    detail: str = typer.Option(
        "brief",
        "--detail",
        "-d",
        help="brief (one line per hit) | signatures (+ whole signature, docstring, "
        "caller/callee counts) | full (+ the code's first lines)",
    ),
    as_json: bool = typer.Option(
        False, "--json", help="The same fields as the service and MCP answer (repoctx.render), at --detail."
    ),
):
    """Search the index: exact identifiers and paths first, then ranked matches."""
    from repoctx import render

    if level not in ("symbol", "file"):
        _fail("--level must be symbol or file")
    try:
        detail = render.check_detail(detail)
    except ValueError as e:
        _fail(f"--{e}")
    _check_mode(mode)
    if not query.strip():
        _fail("the query is empty: ask a question or name a symbol")
    planner = judge = None
    if llm:
        from repoctx.retrieve.judge import llm_helpers

        try:
            planner, judge = llm_helpers()
        except Exception as e:  # noqa: BLE001 - not configured, provider package missing: one sentence
            _fail(str(e).splitlines()[0] if str(e) else type(e).__name__)
    ix = _open_indexed(repo, all_repos, model=True)

    def show(ev) -> None:
        colour = {"SUCCEEDED": "green", "FAILED": "red"}.get(ev.status, "yellow")
        sub = f" [dim]{ev.sub_query}[/]" if ev.sub_query else ""
        err.print(f"[{colour}]{ev.step:<22} {ev.status:<11}[/] {ev.message}{sub}", highlight=False)

    try:
        res = ix.retrieve(
            query,
            k=k,
            level=level,
            mode=mode,
            on_event=show if trace and not as_json else None,
            planner=planner,
            judge=judge,
        )
    except (StoreError, sqlite3.Error) as e:
        _fail(_why(e), 1)
    try:
        out = render.retrieval_dict(res, detail, index=ix, trace=trace)
    except (StoreError, sqlite3.Error) as e:
        _fail(_why(e), 1)
    if as_json:
        print(json.dumps(render.wire(out), ensure_ascii=False))
        return
    route = res.route
    many = len({r.get("repo") for r in out["results"]}) > 1 or not ix.root
    text = render.items_text(out["results"], detail, with_repo=many) if out["results"] else _NO_MATCHES
    if _plain_is_rich(text, route["reason"], *res.notes):  # the same bytes as rich, without loading it
        print(f"route: {route['mode']} ({route['reason']})")
        for note in res.notes:
            print(f"note: {note}", file=sys.stderr)
        print(text)
        return
    console.print(f"[dim]route: {route['mode']} ({route['reason']})[/]", highlight=False)
    for note in res.notes:
        err.print(f"[yellow]note:[/] {note}", highlight=False)
    if not out["results"]:
        console.print(_NO_MATCHES, highlight=False)
        return
    console.print(render.items_text(out["results"], detail, with_repo=many), highlight=False, markup=False)


_NO_MATCHES = "no matches: nothing indexed matches this query"
# what rich would change in printed text: tabs (expanded), control characters (dropped); in a line printed with
# markup, ``[`` too. ``:name:`` is an emoji when rich knows the name (``_emoji_changes``)
_RICH_CHANGES = re.compile(r"[\t\x00-\x09\x0b-\x1f\x7f]")
_MARKUP = re.compile(r"\[")
# a name between two colons: rich's own pattern (``:\S*?:``) also matches ``::`` (every ``path :: qualname`` line),
# whose empty name is no emoji, and loading its table to learn that costs ~3 ms
_COLONS = re.compile(r":[^\s:]+:")


def _emoji_changes(text: str) -> bool:
    if not _COLONS.search(text):
        return False
    from rich._emoji_replace import _emoji_replace  # its table alone, not the console

    return _emoji_replace(text) != text


def _plain_is_rich(text: str, *marked_up: str) -> bool:
    """Whether printing ``text`` (and lines printed with markup, ``marked_up``) as they are gives what rich's
    consoles print: output that is not a terminal, no colour forced, nothing rich would render otherwise."""
    if sys.stdout.isatty() or sys.stderr.isatty() or any(os.environ.get(v) for v in ("FORCE_COLOR", "TTY_COMPATIBLE")):
        return False
    texts = (text, *marked_up)
    return not any(_RICH_CHANGES.search(t) or _emoji_changes(t) for t in texts) and not any(
        _MARKUP.search(t) for t in marked_up
    )


def _library_call(fn, *args, **kwargs):
    """One library call of a read command: a bad argument (a regex, a glob) exits 2 naming it, a store failure 1."""
    try:
        return fn(*args, **kwargs)
    except ValueError as e:
        _fail(str(e))
    except (StoreError, sqlite3.Error) as e:
        _fail(_why(e), 1)


@app.command()
def grep(
    pattern: str = typer.Argument(..., help="A Python regular expression, matched against each line."),
    fixed: bool = typer.Option(False, "--fixed", "-F", help="The pattern is a literal string."),
    ignore_case: bool = typer.Option(False, "--ignore-case", "-i"),
    path: list[str] = typer.Option(
        [], "--path", "-p", help="Only files matching this glob ('*' crosses '/'; repeatable: any of them)."
    ),
    repo: list[str] = typer.Option([], "--repo", "-r", help="Repository path or name (repeatable; default .)"),
    all_repos: bool = typer.Option(False, "--all", help="Every repository in the shared store."),
    limit: int = typer.Option(200, "--limit", "-n", min=1, max=1000, help="Matching lines shown."),
    offset: int = typer.Option(0, "--offset", min=0, help="Matching lines skipped (paging)."),
    context_lines: int = typer.Option(0, "--context", "-C", min=0, max=20, help="Lines shown around each match."),
    as_json: bool = typer.Option(False, "--json"),
):
    """Lines of the indexed files that match a pattern, like `git grep -n` over the indexed snapshot. Exits 1
    when nothing matches."""
    if not pattern:
        _fail("the pattern is empty")
    ix = _open_indexed(repo, all_repos)
    out = _library_call(
        ix.grep,
        pattern,
        fixed=fixed,
        ignore_case=ignore_case,
        paths=tuple(path),
        limit=limit,
        offset=offset,
        context=context_lines,
    )
    if as_json:
        print(json.dumps(out))
    else:
        from repoctx import render

        many = not ix.root or len({m["repo"] for m in out["matches"]}) > 1
        print(render.grep_text(out, with_repo=many, more="more: --offset {}"))
    if not out["total"]:
        raise typer.Exit(1)


@app.command()
def outline(
    path: str = typer.Argument(..., help="A file's path, relative to its repository's root."),
    repo: list[str] = typer.Option([], "--repo", "-r", help="Repository path or name (repeatable; default .)"),
    all_repos: bool = typer.Option(False, "--all", help="Every repository in the shared store."),
    as_json: bool = typer.Option(False, "--json"),
):
    """A file's classes, functions and methods: signatures, line spans, how many units call each."""
    ix = _open_indexed(repo, all_repos)
    out = _library_call(ix.outline, path)
    if as_json:
        print(json.dumps(out))
    else:
        from repoctx import render

        print(render.outline_text(out))
    if not out["units"] and not out.get("language"):
        raise typer.Exit(1)


@app.command()
def symbol(
    name: str = typer.Argument(
        ..., help="A name: plain, qualified (Class.method), module-qualified, or path:qualname."
    ),
    repo: list[str] = typer.Option([], "--repo", "-r", help="Repository path or name (repeatable; default .)"),
    all_repos: bool = typer.Option(False, "--all", help="Every repository in the shared store."),
    body: bool = typer.Option(True, "--body/--no-body", help="Print each definition's code, or only where it is."),
    limit: int = typer.Option(10, "--limit", "-n", min=1, max=50, help="Definitions shown."),
    as_json: bool = typer.Option(False, "--json"),
):
    """Every definition of a name with its whole code (several are listed, none guessed). Exits 1 when none."""
    ix = _open_indexed(repo, all_repos)
    out = _library_call(ix.symbol, name, limit=limit)
    if not body:
        for m in out["matches"]:
            m.pop("text", None)
    if as_json:
        print(json.dumps(out))
    else:
        from repoctx import render

        print(render.symbol_text(out, body=body))
    if not out["matches"]:
        raise typer.Exit(1)


@app.command()
def context(
    query: str = typer.Argument(...),
    repo: list[str] = typer.Option([], "--repo", "-r", help="Repository path or name (repeatable; default .)"),
    all_repos: bool = typer.Option(False, "--all", help="Every repository in the shared store."),
    task: str | None = typer.Option(
        None, "--task", help="code_query | refactor | code_gen | search (default: classified)"
    ),
    budget: int | None = typer.Option(None, "--budget", min=1, help="token budget"),
    mode: str = typer.Option("auto", "--mode", help="auto (router decides) | standard | agentic"),
    as_json: bool = typer.Option(False, "--json"),
):
    """Context for a task, compressed inside a token budget, with citations."""
    from repoctx.retrieve.context import TASKS

    if task is not None and task not in TASKS:
        _fail(f"--task must be one of {', '.join(TASKS)}")
    _check_mode(mode)
    if not query.strip():
        _fail("the query is empty: ask a question or name a symbol")
    ix = _open_indexed(repo, all_repos, model=True)
    try:
        ctx = ix.context(query, task=task, budget=budget, mode=mode)
    except (StoreError, sqlite3.Error) as e:
        _fail(_why(e), 1)
    if as_json:
        print(json.dumps(ctx.to_dict()))
        return
    print(ctx.text)
    err.print(
        f"[dim]{ctx.task}: {ctx.tokens}/{ctx.budget} tokens, {len(ctx.citations)} cited, "
        f"{len(ctx.left_out)} left out[/]",
        highlight=False,
    )


@app.command("repos")
def repos_cmd(
    repo: Path | None = typer.Option(None, "--repo", "-r", help="A repository whose store to list."),
    as_json: bool = typer.Option(False, "--json"),
):
    """List the repositories in the store (REPOCTX_DATABASE_URL, REPOCTX_INDEX_DIR, or a repository's own)."""
    settings = _settings(repo or Path("."))
    from repoctx.index import open_store

    try:
        store = open_store(settings, (repo or Path(".")).resolve(), create=False)
    except StoreError as e:
        _fail(str(e), 1)
    recs = store.repos()
    if as_json:
        print(json.dumps([r.to_dict() for r in recs]))
        return
    for r in recs:
        console.print(
            f"{r.name}  {r.root}  [dim]{'indexed' if r.meta.get('complete') == '1' else 'incomplete'}[/]",
            highlight=False,
        )


db_app = typer.Typer(no_args_is_help=True, help="Schemas: the store, copilot sessions, service keys and jobs.")
app.add_typer(db_app, name="db")


@db_app.command("migrate")
def db_migrate(
    repo: Path | None = typer.Option(
        None, "--repo", "-r", help="With SQLite: the repository whose index folder holds the sessions."
    ),
):
    """Create or upgrade every schema repoctx keeps (store, copilot sessions, service keys and jobs): the
    PostgreSQL database of REPOCTX_DATABASE_URL, or the embedded sessions file. Never done on a request path.
    Without the copilot installed (`repoctx[copilot]`) there are no sessions to migrate: that part is skipped."""
    settings = _settings(repo)
    done = []
    try:
        if settings.database_url:
            from repoctx.service.auth import migrate_postgres as migrate_service
            from repoctx.store.postgres import migrate

            out = migrate(settings.database_url)
            done.append(f"store schema {out['version']}" + (f" (from {out['from']})" if out.get("from") else ""))
            done.append(f"service schema {migrate_service(settings.database_url)}")
        try:
            from repoctx.copilot.sessions import migrate as migrate_sessions, sessions_target
        except ImportError:  # the core or [postgres] alone: Strands (the copilot) is not installed
            done.append("sessions skipped (the copilot is not installed: pip install 'repoctx[copilot]')")
        else:
            index_dir = settings.index_dir or (settings.index_dir_for(repo.resolve()) if repo else None)
            done.append(f"sessions schema {migrate_sessions(sessions_target(index_dir))}")
    except (StoreError, OSError, sqlite3.Error) as e:
        _fail(f"could not migrate: {_why(e)}", 1)
    except Exception as e:  # noqa: BLE001 - psycopg errors and the like: named, never a traceback
        _fail(f"could not migrate: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}", 1)
    console.print("migrated: " + ", ".join(done), highlight=False, markup=False)


@app.command("eval")
def eval_cmd(
    dataset: Path = typer.Argument(..., help="JSONL in the shared/eval format (corpus: pypi or git)."),
    limit: int | None = typer.Option(None, "--limit", min=1, help="First N rows (after --repo)."),
    as_json: bool = typer.Option(False, "--json", help="{config: {metrics, errors, per-row ranks}}."),
    ablation: bool = typer.Option(
        False, "--ablation", help="Compare baseline, capsules+dense, BM25, hybrid, first-stage, hybrid+graph."
    ),
    config: str | None = typer.Option(None, "--config", help="Configs by name, comma-separated."),
    repo: list[str] = typer.Option([], "--repo", help="Only rows of this GitHub repo (repeatable)."),
    tree: str = typer.Option(
        "wheel",
        "--tree",
        help="Index each PyPI release as its wheel, its sdist (tests and docs "
        "included, as a checkout has them), or both side by side.",
    ),
    history: bool = typer.Option(
        True,
        "--history/--no-history",
        help="A git corpus is a checkout of its commit: its past commits vote on the file ranking, as in a "
        "file-level search (--no-history: as REPOCTX_HISTORY=0).",
    ),
    quiet: bool = typer.Option(False, "-q", "--quiet", help="No per-row progress (skipped rows are still reported)."),
):
    """Localization quality on real issues: Acc@k, Recall@k and MRR at file and function level.

    A row whose corpus cannot be built is reported on stderr, listed under "errors" and skipped.
    With --tree both, --json is {"wheel": {config: ...}, "sdist": {config: ...}}."""
    from dataclasses import replace

    from rich.markup import escape

    from repoctx.evaluate.runner import ABLATION, CONFIGS, DEFAULT, evaluate_trees, markdown_table, markdown_trees

    if not dataset.is_file():
        err.print(f"[red]error:[/] no such dataset: {dataset}")
        raise typer.Exit(2)
    chosen = tuple(c.strip() for c in config.split(",")) if config else ()
    unknown = [c for c in chosen if c not in CONFIGS]
    if unknown:
        err.print(f"[red]error:[/] unknown config {unknown[0]!r}; one of {', '.join(CONFIGS)}")
        raise typer.Exit(2)
    configs = ABLATION if ablation else (chosen or (DEFAULT,))
    trees = {"wheel": ("wheel",), "sdist": ("sdist",), "both": ("wheel", "sdist")}.get(tree)
    if trees is None:
        err.print(f"[red]error:[/] unknown --tree {tree!r}; one of wheel, sdist, both")
        raise typer.Exit(2)
    reported: set[tuple[str, str]] = set()

    def on_error(cname: str, iid: str, reason: str) -> None:
        if (iid, reason) in reported:  # a corpus failure is skipped in every config: say it once
            return
        reported.add((iid, reason))
        err.print(f"[yellow]skipped[/] {escape(iid)} ({escape(cname)}): {escape(reason)}", highlight=False)

    try:
        by_tree = evaluate_trees(
            dataset,
            trees,
            limit=limit,
            configs=configs,
            progress=None if quiet else (lambda s: err.print(s, highlight=False, markup=False)),
            repos=tuple(repo),
            on_error=on_error,
            settings=None if history else replace(Settings.from_env(), history=False),
        )
    except (OSError, json.JSONDecodeError, UnicodeDecodeError) as e:  # unreadable dataset, a line that is not JSON
        err.print(f"[red]error:[/] cannot read {escape(str(dataset))}: {escape(str(e))}", highlight=False)
        raise typer.Exit(2) from None
    every = [r for results in by_tree.values() for r in results.values()]
    skipped = {e["instance_id"] for r in every for e in r["errors"]}
    if skipped:
        total = max(r["rows_total"] for r in every)
        err.print(f"{len(skipped)} of {total} rows skipped", highlight=False)
    if as_json:  # {config name: result} on one tree, {tree: {config name: result}} with --tree both
        print(json.dumps(by_tree if len(trees) > 1 else by_tree[trees[0]]))
        return
    if trees == ("wheel",):
        console.print(markdown_table(by_tree["wheel"]), highlight=False)
    else:
        console.print(markdown_trees(by_tree), highlight=False)
