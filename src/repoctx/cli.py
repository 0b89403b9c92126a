"""The command line: a thin shell over ``repoctx.Index``."""
from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from repoctx.config import ConfigError, Settings
from repoctx.index import Index
from repoctx.indexer import IndexBusy

app = typer.Typer(add_completion=False, no_args_is_help=True, help="The whole repository as context.")
console = Console(soft_wrap=True)  # citations and errors stay on one line
err = Console(stderr=True, soft_wrap=True)


def _open(repo: Path) -> Index:
    try:
        return Index(repo, Settings.from_env())
    except (FileNotFoundError, ConfigError) as e:
        err.print(f"[red]error:[/] {e}")
        raise typer.Exit(2)


def _check_mode(mode: str) -> None:
    if mode not in ("auto", "standard", "agentic"):
        err.print("[red]error:[/] --mode must be auto, standard or agentic")
        raise typer.Exit(2)


def _open_indexed(repo: Path) -> Index:
    ix = _open(repo)
    if ix.store.meta("complete") != "1":
        err.print(f"[red]error:[/] {ix.root} is not indexed: run `repoctx index {repo}`")
        raise typer.Exit(1)
    return ix


def _run_update(ix: Index, as_json: bool):
    interactive = sys.stderr.isatty() and not as_json
    if not interactive:
        return ix.update()
    with Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                  TextColumn("{task.fields[rate]}"), TimeElapsedColumn(), console=err, transient=True) as bar:
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
            elif e["event"] == "embed":
                bar.update(task, description="embedding", total=max(e["total"], 1), completed=e["done"],
                           rate=f"{e.get('rate', 0):,.0f} capsules/s")
        return ix.update(progress=on)


@app.command()
def index(repo: Path = typer.Argument(Path("."), help="Repository root."),
          as_json: bool = typer.Option(False, "--json", help="Print the report as JSON."),
          verbose: bool = typer.Option(False, "-v", "--verbose", help="List skipped files.")):
    """Index (or incrementally re-index) a repository."""
    ix = _open(repo)
    try:
        report = _run_update(ix, as_json)
    except IndexBusy as e:
        err.print(f"[red]error:[/] {e}")
        raise typer.Exit(3)
    emb = ix.last_embed
    if as_json:
        out = report.to_dict()
        out["vectors"] = emb.to_dict() if emb else ix.vectors_status()
        print(json.dumps(out))
        return
    counts = ix.store.counts()
    problems = len(report.skipped) + len(report.invalid_utf8) + len(report.syntax_errors)
    console.print(
        f"indexed {ix.root.name}: {report.files_seen} files ({len(report.added)} added, {len(report.modified)} "
        f"modified, {len(report.deleted)} deleted), {counts['capsules']} capsules, {counts['edges']} edges "
        f"in {report.seconds:.2f}s; {problems} reported (skipped {len(report.skipped)}, invalid UTF-8 "
        f"{len(report.invalid_utf8)}, syntax errors {len(report.syntax_errors)}, redacted {len(report.redacted)})")
    if emb is not None:
        if emb.model_changed_from:
            console.print(f"embedding model changed from {emb.model_changed_from} to {emb.model}: "
                          f"re-embedded the index", highlight=False)
        console.print(f"vectors: {emb.total} capsules, {emb.embedded} embedded, {emb.cached} from cache "
                      f"in {emb.seconds:.1f}s ({emb.model})", highlight=False)
    if verbose:
        for path, reason in report.skipped:
            console.print(f"  skipped {path}: {reason}")
        for path in report.syntax_errors:
            console.print(f"  syntax errors (indexed what parsed) {path}")
        for path in report.invalid_utf8:
            console.print(f"  invalid UTF-8 (replaced) {path}")


@app.command()
def status(repo: Path = typer.Argument(Path(".")), as_json: bool = typer.Option(False, "--json")):
    """Say whether the index is fresh or stale, and what changed."""
    ix = _open(repo)
    st = ix.status()
    if as_json:
        print(json.dumps(st))
        return
    if not st["indexed"]:
        console.print("not indexed: run `repoctx index`")
        raise typer.Exit(1)
    state = "fresh" if st["fresh"] else "stale"
    console.print(f"{state}: {st['counts']['files']} files, {st['counts']['capsules']} capsules; "
                  f"indexed at git {(st['indexed_git_head'] or '-')[:12]}, now {(st['git_head'] or '-')[:12]}"
                  f"{' (dirty)' if st['git_dirty'] else ''}")
    for key in ("added", "modified", "deleted"):
        for p in st[key]:
            console.print(f"  {key}: {p}")
    v = st["vectors"]
    if v["enabled"]:
        state = "current" if v["current"] else (f"built with {v['indexed_model']}, run `repoctx index`"
                                                 if v["indexed_model"] else "not built yet")
        console.print(f"vectors: {v['count']} ({v['model']}): {state}", highlight=False)


@app.command()
def search(query: str = typer.Argument(..., help="A question or identifiers."),
           repo: Path = typer.Option(Path("."), "--repo", "-r"),
           k: int = typer.Option(10, "-k", min=1, max=200),
           level: str = typer.Option("symbol", "--level", help="symbol | file"),
           mode: str = typer.Option("auto", "--mode", help="auto (router decides) | standard | agentic (multi-part questions)"),
           trace: bool = typer.Option(False, "--trace", help="Print the agentic trace live."),
           as_json: bool = typer.Option(False, "--json")):
    """Search the index: exact identifiers and paths first, then ranked matches."""
    if level not in ("symbol", "file"):
        err.print("[red]error:[/] --level must be symbol or file")
        raise typer.Exit(2)
    _check_mode(mode)
    ix = _open_indexed(repo)
    route = None
    if mode == "standard" and level == "file":
        hits = ix.search(query, k=k, level="file")
    else:
        route, events = ix.retrieve(query, k=k * 5 if level == "file" else k, mode=mode)  # files need a deeper pool
        if trace and not as_json:
            err.print(f"[bold]route[/]: {route.mode} ({route.reason})", highlight=False)
        result = None
        for ev in events:
            if trace and not as_json:
                colour = {"SUCCEEDED": "green", "FAILED": "red"}.get(ev.status, "yellow")
                sub = f" [dim]{ev.sub_query}[/]" if ev.sub_query else ""
                err.print(f"[{colour}]{ev.step:<22} {ev.status:<11}[/] {ev.message}{sub}", highlight=False)
            if ev.step == "Result":
                result = ev.data["result"]
        hits = result.hits if hasattr(result, "hits") else result
        if level == "file":
            from repoctx.retrieve.hybrid import to_files

            hits = to_files(hits)
        hits = hits[:k]
    if as_json:
        out = {"route": route.to_dict() if route else {"mode": "standard", "reason": "chosen by the caller"},
               "hits": [h.to_dict() for h in hits]}
        print(json.dumps(out))
        return
    if route is not None and not trace:
        console.print(f"[dim]route: {route.mode} ({route.reason})[/]", highlight=False)
    for i, h in enumerate(hits, 1):
        if level == "file":
            console.print(f"{i:>3}. {h.path}  [dim]{h.score:.4f}[/]", highlight=False)
        else:
            sig = ", ".join(f"{k}#{v.get('rank', '')}" if isinstance(v, dict) and "rank" in v else k
                            for k, v in h.why.items() if k != "sub_queries")
            console.print(f"{i:>3}. {h.capsule.citation}  [dim]{h.score:.4f} {sig}[/]", highlight=False)


@app.command()
def context(query: str = typer.Argument(...),
            repo: Path = typer.Option(Path("."), "--repo", "-r"),
            task: Optional[str] = typer.Option(None, "--task", help="code_query | refactor | code_gen | search (default: classified)"),
            budget: Optional[int] = typer.Option(None, "--budget", min=1, help="token budget"),
            mode: str = typer.Option("auto", "--mode", help="auto (router decides) | standard | agentic"),
            as_json: bool = typer.Option(False, "--json")):
    """Context for a task, compressed inside a token budget, with citations."""
    from repoctx.retrieve.context import TASKS

    if task is not None and task not in TASKS:
        err.print(f"[red]error:[/] --task must be one of {', '.join(TASKS)}")
        raise typer.Exit(2)
    _check_mode(mode)
    ix = _open_indexed(repo)
    ctx = ix.context(query, task=task, budget=budget, mode=mode)
    if as_json:
        print(json.dumps(ctx.to_dict()))
        return
    print(ctx.text)
    err.print(f"[dim]{ctx.task}: {ctx.tokens}/{ctx.budget} tokens, {len(ctx.citations)} cited, "
              f"{len(ctx.left_out)} left out[/]", highlight=False)


def main() -> None:  # pragma: no cover
    app()


if __name__ == "__main__":  # pragma: no cover
    main()


@app.command("eval")
def eval_cmd(dataset: Path = typer.Argument(..., help="JSONL in the shared/eval format."),
             limit: Optional[int] = typer.Option(None, "--limit", min=1),
             as_json: bool = typer.Option(False, "--json"),
             ablation: bool = typer.Option(False, "--ablation", help="Compare baseline, capsules+dense, BM25, hybrid, hybrid+graph."),
             config: Optional[str] = typer.Option(None, "--config", help="Configs by name, comma-separated."),
             repo: list[str] = typer.Option([], "--repo", help="Only rows of this GitHub repo (repeatable)."),
             quiet: bool = typer.Option(False, "-q", "--quiet")):
    """Localization quality on real issues: Acc@k, Recall@k and MRR at file and function level."""
    from repoctx.evaluate import ABLATION, CONFIGS, DEFAULT, evaluate, markdown_table

    if not dataset.is_file():
        err.print(f"[red]error:[/] no such dataset: {dataset}")
        raise typer.Exit(2)
    chosen = tuple(c.strip() for c in config.split(",")) if config else ()
    unknown = [c for c in chosen if c not in CONFIGS]
    if unknown:
        err.print(f"[red]error:[/] unknown config {unknown[0]!r}; one of {', '.join(CONFIGS)}")
        raise typer.Exit(2)
    configs = ABLATION if ablation else (chosen or (DEFAULT,))
    results = evaluate(dataset, limit, configs, progress=None if quiet else (lambda s: err.print(s, highlight=False)),
                       repos=tuple(repo))
    if as_json:
        out = {k: {kk: vv for kk, vv in v.items() if kk != "rows"} for k, v in results.items()}
        print(json.dumps(out[configs[0]] if len(configs) == 1 else out))
        return
    console.print(markdown_table(results), highlight=False)
