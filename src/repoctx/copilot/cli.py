"""``repoctx ask``, ``repoctx chat`` and ``repoctx sessions``: the copilot on the command line.

``copilot_app`` is a standalone Typer app; ``register(app)`` adds the same commands to another one
(the main ``repoctx`` CLI)."""
from __future__ import annotations

import asyncio
import json
import logging
import re
import sys
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console
from rich.markup import escape

copilot_app = typer.Typer(add_completion=False, no_args_is_help=True,
                          help="Ask questions about a repository; answers cite their sources.")
sessions_app = typer.Typer(add_completion=False, no_args_is_help=True, help="Saved copilot conversations.")

_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


def parse_duration(text: str) -> float:
    """'7d', '12h', '30m', '45s', '2w' or plain seconds -> seconds."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smhdw]?)\s*", text or "")
    if not m:
        raise typer.BadParameter(f"{text!r} is not a duration: use e.g. 7d, 12h, 30m or 45s")
    return float(m.group(1)) * _UNITS[m.group(2) or "s"]


def _consoles() -> tuple[Console, Console]:
    return Console(soft_wrap=True, highlight=False), Console(stderr=True, soft_wrap=True, highlight=False)


def _quiet_logs() -> None:
    """Library log records (e.g. the SDK logging a failing tool with its traceback) stay out of the terminal:
    the copilot reports failures as data."""
    for name in ("strands", "httpx", "openai", "botocore"):
        log = logging.getLogger(name)
        if not any(isinstance(h, logging.NullHandler) for h in log.handlers):
            log.addHandler(logging.NullHandler())
        log.propagate = False


def _fail(err: Console, message: str, code: int) -> typer.Exit:
    err.print(f"[red]error:[/] {escape(message)}")
    return typer.Exit(code)


def _open_copilot(repo: Path, session: str | None, err: Console, principal: str = "local"):
    """Provider checked first (no I/O), then the index, then the model and the session store."""
    from repoctx.config import ConfigError, Settings
    from repoctx.copilot.providers import ProviderNotConfigured, ProviderUnavailable, build_model, resolve_spec
    from repoctx.copilot.sessions import SessionStoreNotMigrated, validate_session_id
    from repoctx.index import Index

    try:
        spec = resolve_spec()
    except (ProviderNotConfigured, ProviderUnavailable) as e:
        raise _fail(err, str(e), 2)
    if session is not None:
        try:
            validate_session_id(session)
        except ValueError as e:
            raise _fail(err, str(e), 2)
    not_indexed = f"{Path(repo).resolve()} is not indexed: run `repoctx index {repo}`"
    try:
        settings = Settings.from_env()
        try:
            ix = Index(repo, settings, create=False)  # never create an index just to find it empty
        except TypeError:  # an Index without the create flag
            ix = Index(repo, settings)
    except (FileNotFoundError, ConfigError) as e:
        raise _fail(err, str(e), 2)
    except Exception as e:  # the store's "no index here"
        if type(e).__name__ in ("StoreError", "NotIndexed", "SchemaMismatch") or isinstance(e, OSError):
            raise _fail(err, not_indexed if type(e).__name__ != "SchemaMismatch" else str(e), 1)
        raise
    indexed = ix.indexed() if callable(getattr(ix, "indexed", None)) else ix.store.meta("complete") == "1"
    if not indexed:
        raise _fail(err, not_indexed, 1)
    try:
        model = build_model(spec)
    except (ProviderNotConfigured, ProviderUnavailable) as e:
        raise _fail(err, str(e), 2)
    except Exception as e:  # e.g. a GGUF file llama.cpp cannot load
        raise _fail(err, f"could not start the model {spec.describe()}: {type(e).__name__}: {e}", 2)
    from repoctx.copilot.agent import build_agent
    from repoctx.copilot.providers import close_model

    try:
        copilot = build_agent(ix, session, principal, model=model)
    except (SessionStoreNotMigrated, ValueError, ImportError) as e:
        close_model(model)
        raise _fail(err, str(e), 2)
    copilot.owns_model = True
    return copilot


class _Renderer:
    """Tokens as they arrive, one dim line per tool call, citations after the answer."""

    def __init__(self, out: Console, err: Console):
        self.out, self.err = out, err
        self.at_line_start = True

    def _newline(self) -> None:
        if not self.at_line_start:
            sys.stdout.write("\n")
            sys.stdout.flush()
            self.at_line_start = True

    def event(self, ev: dict) -> None:
        kind = ev["type"]
        if kind == "token":
            sys.stdout.write(ev["text"])
            sys.stdout.flush()
            self.at_line_start = ev["text"].endswith("\n")
        elif kind == "tool":
            self._newline()
            args = json.dumps(ev.get("input") or {}, ensure_ascii=False)
            self.out.print(f"[dim]· {escape(ev['name'])} {escape(args[:160])}[/]")
        elif kind == "tool_result":
            if ev.get("status") == "error":
                self.out.print(f"[dim]  ✗ {escape(ev['name'])} failed[/]")
        elif kind == "error":
            self._newline()
            self.err.print(f"[red]error:[/] {escape(ev['error'])}: {escape(ev.get('detail', ''))}")

    def finish(self, events: list[dict], sources: list[str]) -> None:
        self._newline()
        cites = [e for e in events if e["type"] == "citation"]
        if cites:
            self.out.print("[bold]sources[/]")
            for c in cites:
                mark = "✓" if c["verified"] else "[yellow]? not returned by a tool[/]"
                self.out.print(f"  {escape(c['citation'])}  {mark}")
        elif sources:
            self.out.print("[dim]consulted:[/]")
            for s in sources[:8]:
                self.out.print(f"[dim]  {escape(s)}[/]")
        done = events[-1]
        m = done["metrics"]
        tokens = f" · {m['tokens_in']}→{m['tokens_out']} tokens" if m.get("tokens_in") is not None else ""
        cut = f" · {m['limit_cut']} limit" if m.get("limit_cut") else ""
        self.err.print(f"[dim]{m['model_calls']} model calls · {m['tool_calls']} tool calls{tokens} · "
                       f"{m['latency_s']:.2f}s{cut}[/]")


async def _turn(copilot, question: str, renderer: _Renderer | None) -> list[dict]:
    from repoctx.copilot.agent import stream_turn

    events = []
    async for ev in stream_turn(copilot, question):
        events.append(ev)
        if renderer is not None:
            renderer.event(ev)
    if renderer is not None:
        turn = copilot.guard.turn
        renderer.finish(events, list(turn.turn_sources) if turn is not None else [])
    return events


def ask_cmd(question: str = typer.Argument(..., help="The question."),
            repo: Path = typer.Option(Path("."), "--repo", "-r", help="Repository root (indexed)."),
            session: Optional[str] = typer.Option(None, "--session", "-s", help="Save to / resume this session."),
            as_json: bool = typer.Option(False, "--json", help="Print the turn as JSON.")):
    """Ask one question about a repository."""
    _quiet_logs()
    out, err = _consoles()
    copilot = _open_copilot(repo, session, err)
    try:
        if as_json:
            from repoctx.copilot.agent import ask

            result = ask(copilot, question)
            out.print_json(json.dumps(result.to_dict(), default=str))
            failed = result.error is not None
        else:
            events = asyncio.run(_turn(copilot, question, _Renderer(out, err)))
            failed = "error" in events[-1]
    finally:
        copilot.close()
    if failed:
        raise typer.Exit(1)


def chat_cmd(repo: Path = typer.Option(Path("."), "--repo", "-r", help="Repository root (indexed)."),
             session: Optional[str] = typer.Option(None, "--session", "-s",
                                                   help="Save to / resume this session.")):
    """A conversation about a repository (Ctrl-D or `exit` to leave)."""
    _quiet_logs()
    out, err = _consoles()
    copilot = _open_copilot(repo, session, err)
    renderer = _Renderer(out, err)
    if session:
        n = len(copilot.agent.messages)
        err.print(f"[dim]session {escape(session)}" + (f" resumed ({n} messages)" if n else " (new)") + "[/]")

    async def repl() -> None:
        while True:
            try:
                line = await asyncio.to_thread(input, "you> ")
            except (EOFError, KeyboardInterrupt):
                sys.stdout.write("\n")
                return
            q = line.strip()
            if q in ("exit", "quit", "/exit", "/quit"):
                return
            if not q:
                continue
            await _turn(copilot, q, renderer)

    try:
        asyncio.run(repl())
    except KeyboardInterrupt:
        pass
    finally:
        copilot.close()


# ------------------------------------------------------------------------------------------ sessions
def _target(repo: Optional[Path], url: Optional[str]) -> str:
    from repoctx.config import Settings
    from repoctx.copilot.sessions import sessions_target

    if url:
        return url
    if repo is not None:
        return sessions_target(Settings.from_env().index_dir_for(Path(repo).resolve()))
    return sessions_target(None)


def _redact(target: str) -> str:
    return re.sub(r"://([^:/@]+):[^@]*@", r"://\1:***@", target)


@sessions_app.command("list")
def sessions_list(repo: Optional[Path] = typer.Option(None, "--repo", "-r", help="Sessions of this repository's index."),
                  url: Optional[str] = typer.Option(None, "--url", help="A postgresql:// URL or SQLite path."),
                  principal: Optional[str] = typer.Option(None, "--principal", help="Only this principal's."),
                  as_json: bool = typer.Option(False, "--json")):
    """List saved conversations, most recent first."""
    from repoctx.copilot.sessions import SessionStoreNotMigrated, list_sessions

    out, err = _consoles()
    target = _target(repo, url)
    try:
        rows = list_sessions(target, principal)
    except (SessionStoreNotMigrated, ValueError) as e:
        raise _fail(err, str(e), 2)
    if as_json:
        out.print_json(json.dumps(rows))
        return
    if not rows:
        err.print(f"[dim]no sessions in {escape(_redact(target))}[/]")
    for r in rows:
        out.print(f"{escape(r['id'])}  [dim]{escape(r['principal'])}  {r['messages']} messages  "
                  f"updated {r['updated'][:19]}[/]")


@sessions_app.command("prune")
def sessions_prune(older_than: str = typer.Option("7d", "--older-than", help="Age, e.g. 7d, 12h, 30m."),
                   repo: Optional[Path] = typer.Option(None, "--repo", "-r"),
                   url: Optional[str] = typer.Option(None, "--url", help="A postgresql:// URL or SQLite path."),
                   principal: Optional[str] = typer.Option(None, "--principal", help="Only this principal's.")):
    """Delete conversations not touched for a while."""
    from repoctx.copilot.sessions import SessionStoreNotMigrated, prune_sessions

    out, err = _consoles()
    seconds = parse_duration(older_than)
    try:
        n = prune_sessions(_target(repo, url), seconds, principal)
    except (SessionStoreNotMigrated, ValueError) as e:
        raise _fail(err, str(e), 2)
    out.print(f"pruned {n} session{'s' if n != 1 else ''}")


@sessions_app.command("migrate")
def sessions_migrate(repo: Optional[Path] = typer.Option(None, "--repo", "-r"),
                     url: Optional[str] = typer.Option(None, "--url", help="A postgresql:// URL or SQLite path.")):
    """Create or upgrade the session store's schema (what `repoctx db migrate` does for sessions)."""
    from repoctx.copilot.sessions import migrate

    out, _ = _consoles()
    target = _target(repo, url)
    version = migrate(target)
    out.print(f"sessions schema v{version} at {escape(_redact(target))}")


def register(app: typer.Typer) -> None:
    """Add ``ask``, ``chat`` and the ``sessions`` group to ``app``."""
    app.command("ask")(ask_cmd)
    app.command("chat")(chat_cmd)
    app.add_typer(sessions_app, name="sessions")


register(copilot_app)

if __name__ == "__main__":  # pragma: no cover
    copilot_app()
