"""``repoctx ask``, ``repoctx chat`` and ``repoctx sessions``: the copilot on the command line.

``copilot_app`` is a standalone Typer app; ``register(app)`` adds the same commands to another one
(the main ``repoctx`` CLI)."""

from __future__ import annotations

import asyncio
import json
import logging
import math
import os
import re
import sys
import threading
from pathlib import Path

import typer
from rich.console import Console
from rich.markup import escape

copilot_app = typer.Typer(
    add_completion=False, no_args_is_help=True, help="Ask questions about a repository; answers cite their sources."
)
sessions_app = typer.Typer(add_completion=False, no_args_is_help=True, help="Saved copilot conversations.")

_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


def parse_duration(text: str) -> float:
    """'7d', '12h', '30m', '45s', '2w' or plain seconds -> seconds. Any finite size: ``prune_sessions`` reads an
    age beyond the epoch as the epoch (no session is that old, so nothing goes)."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smhdw]?)\s*", text or "")
    if not m:
        raise typer.BadParameter(f"{text!r} is not a duration: use e.g. 7d, 12h, 30m or 45s")
    seconds = float(m.group(1)) * _UNITS[m.group(2) or "s"]
    if not math.isfinite(seconds):
        raise typer.BadParameter(f"{text!r} is too long a duration")
    return seconds


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


def _why(e: BaseException) -> str:
    first = str(e).strip().splitlines()[0] if str(e).strip() else ""
    return f"{type(e).__name__}: {first}" if first else type(e).__name__


def _turn_timeout(err: Console) -> float:
    from repoctx.config import ConfigError
    from repoctx.copilot.agent import turn_timeout_from_env

    try:
        return turn_timeout_from_env()
    except ConfigError as e:
        raise _fail(err, str(e), 2) from None


def _timeout_message(seconds: float) -> str:
    from repoctx.copilot.agent import TIMEOUT_ENV

    return (
        f"no answer within {seconds:g} s, so the turn was stopped: the model stalled or is slow "
        f"({TIMEOUT_ENV}={seconds:g}; raise it for a slow model)"
    )


class _Watchdog:
    """The last resort behind a turn's deadline: the turn is cancelled at ``timeout``, but a provider or tool
    that blocks its thread cannot be cancelled, and the process would wait for it. Past ``timeout`` plus a
    grace this prints the timeout's one line, releases an in-process model and ends the process."""

    def __init__(self, timeout: float, copilot):
        self.timeout = timeout
        self.copilot = copilot
        self.grace = min(10.0, max(2.0, timeout / 4))
        self._timer: threading.Timer | None = None

    def _fire(self) -> None:
        try:
            sys.stdout.write("\n")
            sys.stdout.flush()
            sys.stderr.write(f"error: {_timeout_message(self.timeout)}\n")
            sys.stderr.flush()
            if self.copilot.owns_model:  # an in-process llama.cpp server is stopped, if it stops promptly
                from repoctx.providers.llm import close_model

                closer = threading.Thread(target=close_model, args=(self.copilot._model,), daemon=True)
                closer.start()
                closer.join(2.0)
        finally:
            os._exit(1)

    def __enter__(self) -> _Watchdog:
        if not math.isfinite(self.timeout):  # REPOCTX_STREAM_TIMEOUT=inf: no deadline
            return self
        self._timer = threading.Timer(self.timeout + self.grace, self._fire)
        self._timer.daemon = True
        self._timer.start()
        return self

    def __exit__(self, *exc) -> None:
        if self._timer is not None:
            self._timer.cancel()


def _open_copilot(repo: Path, session: str | None, err: Console, principal: str = "local"):
    """Provider checked first (no I/O), then the index, then the model and the session store."""
    from repoctx.config import ConfigError, Settings
    from repoctx.copilot.sessions import SessionStoreNotMigrated, validate_session_id
    from repoctx.index import Index
    from repoctx.providers.llm import ProviderNotConfigured, ProviderUnavailable, build_model, resolve_spec

    try:
        spec = resolve_spec()
    except (ProviderNotConfigured, ProviderUnavailable) as e:
        raise _fail(err, str(e), 2) from None
    if session is not None:
        try:
            validate_session_id(session)
        except ValueError as e:
            raise _fail(err, str(e), 2) from None
    not_indexed = f"{Path(repo).resolve()} is not indexed: run `repoctx index {repo}`"
    try:
        settings = Settings.from_env()
        try:
            ix = Index(repo, settings, create=False)  # never create an index just to find it empty
        except TypeError:  # an Index without the create flag
            ix = Index(repo, settings)
    except (FileNotFoundError, ConfigError) as e:
        raise _fail(err, str(e), 2) from None
    except Exception as e:  # the store's "no index here"
        if type(e).__name__ in ("StoreError", "NotIndexed", "SchemaMismatch") or isinstance(e, OSError):
            raise _fail(err, not_indexed if type(e).__name__ != "SchemaMismatch" else str(e), 1) from None
        raise
    indexed = ix.indexed() if callable(getattr(ix, "indexed", None)) else ix.store.meta("complete") == "1"
    if not indexed:
        raise _fail(err, not_indexed, 1)
    try:
        model = build_model(spec)
    except (ProviderNotConfigured, ProviderUnavailable) as e:
        raise _fail(err, str(e), 2) from None
    except Exception as e:  # noqa: BLE001 - e.g. a GGUF file llama.cpp cannot load
        raise _fail(err, f"could not start the model {spec.describe()}: {type(e).__name__}: {e}", 2) from None
    from repoctx.copilot.agent import build_agent
    from repoctx.providers.llm import close_model

    try:
        copilot = build_agent(ix, session, principal, model=model)
    except (SessionStoreNotMigrated, ValueError, ImportError) as e:
        close_model(model)
        raise _fail(err, str(e), 2) from None
    copilot.owns_model = True
    return copilot


class _Renderer:
    """Tokens as they arrive, one dim line per tool call, citations after the answer."""

    def __init__(self, out: Console, err: Console, timeout: float | None = None):
        self.out, self.err = out, err
        self.timeout = timeout
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
            if ev["error"] == "Timeout" and self.timeout is not None:
                self.err.print(f"[red]error:[/] {escape(_timeout_message(self.timeout))}")
            else:
                self.err.print(f"[red]error:[/] {escape(ev['error'])}: {escape(ev.get('detail', ''))}")

    def finish(self, events: list[dict], sources: list[str]) -> None:
        self._newline()
        if events[-1].get("stop_reason") == "timeout":
            return  # the error line already said it all
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
        self.err.print(
            f"[dim]{m['model_calls']} model calls · {m['tool_calls']} tool calls{tokens} · "
            f"{m['latency_s']:.2f}s{cut}[/]"
        )


async def _turn(copilot, question: str, renderer: _Renderer | None, timeout: float | None = None) -> list[dict]:
    from repoctx.copilot.agent import stream_turn

    events = []
    async for ev in stream_turn(copilot, question, timeout=timeout):
        events.append(ev)
        if renderer is not None:
            renderer.event(ev)
    if renderer is not None:
        turn = copilot.guard.turn
        renderer.finish(events, list(turn.turn_sources) if turn is not None else [])
    return events


def ask_cmd(
    question: str = typer.Argument(..., help="The question."),
    repo: Path = typer.Option(Path("."), "--repo", "-r", help="Repository root (indexed)."),
    session: str | None = typer.Option(None, "--session", "-s", help="Save to / resume this session."),
    as_json: bool = typer.Option(False, "--json", help="Print the turn as JSON."),
):
    """Ask one question about a repository."""
    _quiet_logs()
    out, err = _consoles()
    timeout = _turn_timeout(err)
    copilot = _open_copilot(repo, session, err)
    try:
        with _Watchdog(timeout, copilot):
            if as_json:
                from repoctx.copilot.agent import ask

                result = ask(copilot, question, timeout=timeout)
                out.print_json(json.dumps(result.to_dict(), default=str))
                failed = result.error is not None
                if result.stop_reason == "timeout":
                    err.print(f"[red]error:[/] {escape(_timeout_message(timeout))}")
            else:
                events = asyncio.run(_turn(copilot, question, _Renderer(out, err, timeout), timeout))
                failed = "error" in events[-1]
    finally:
        copilot.close()
    if failed:
        raise typer.Exit(1)


def chat_cmd(
    repo: Path = typer.Option(Path("."), "--repo", "-r", help="Repository root (indexed)."),
    session: str | None = typer.Option(None, "--session", "-s", help="Save to / resume this session."),
):
    """A conversation about a repository (Ctrl-D or `exit` to leave)."""
    _quiet_logs()
    out, err = _consoles()
    timeout = _turn_timeout(err)
    copilot = _open_copilot(repo, session, err)
    renderer = _Renderer(out, err, timeout)
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
            with _Watchdog(timeout, copilot):
                await _turn(copilot, q, renderer, timeout)

    try:
        asyncio.run(repl())
    except KeyboardInterrupt:
        pass
    finally:
        copilot.close()


# ------------------------------------------------------------------------------------------ sessions
def _target(repo: Path | None, url: str | None, err: Console) -> str:
    """--url, else where ``repoctx ask`` keeps them: REPOCTX_SESSIONS_URL / REPOCTX_DATABASE_URL, else the
    sessions file in REPOCTX_INDEX_DIR (the shared index folder) or in the --repo's index folder."""
    from repoctx.config import ConfigError, Settings
    from repoctx.copilot.sessions import sessions_target

    if url:
        return url
    try:
        settings = Settings.from_env()
    except ConfigError as e:
        raise _fail(err, str(e), 2) from None
    index_dir = settings.index_dir or (settings.index_dir_for(Path(repo).resolve()) if repo is not None else None)
    return sessions_target(index_dir)


def _redact(target: str) -> str:
    return re.sub(r"://([^:/@]+):[^@]*@", r"://\1:***@", target)


@sessions_app.command("list")
def sessions_list(
    repo: Path | None = typer.Option(None, "--repo", "-r", help="Sessions of this repository's index."),
    url: str | None = typer.Option(None, "--url", help="A postgresql:// URL or SQLite path."),
    principal: str | None = typer.Option(None, "--principal", help="Only this principal's."),
    as_json: bool = typer.Option(False, "--json"),
):
    """List saved conversations, most recent first."""
    from repoctx.copilot.sessions import SessionStoreNotMigrated, list_sessions

    out, err = _consoles()
    target = _target(repo, url, err)
    try:
        rows = list_sessions(target, principal)
    except (SessionStoreNotMigrated, ValueError) as e:
        raise _fail(err, str(e), 2) from None
    except Exception as e:  # noqa: BLE001 - the database refused or is down: named, never a traceback
        raise _fail(err, f"could not list the sessions in {_redact(target)}: {_why(e)}", 1) from None
    if as_json:
        out.print_json(json.dumps(rows))
        return
    if not rows:
        err.print(f"[dim]no sessions in {escape(_redact(target))}[/]")
    for r in rows:
        out.print(
            f"{escape(r['id'])}  [dim]{escape(r['principal'])}  {r['messages']} messages  "
            f"updated {r['updated'][:19]}[/]"
        )


@sessions_app.command("prune")
def sessions_prune(
    older_than: str = typer.Option("7d", "--older-than", help="Age, e.g. 7d, 12h, 30m."),
    repo: Path | None = typer.Option(None, "--repo", "-r"),
    url: str | None = typer.Option(None, "--url", help="A postgresql:// URL or SQLite path."),
    principal: str | None = typer.Option(None, "--principal", help="Only this principal's."),
):
    """Delete conversations not touched for a while."""
    from repoctx.copilot.sessions import SessionStoreNotMigrated, prune_sessions

    out, err = _consoles()
    seconds = parse_duration(older_than)
    target = _target(repo, url, err)
    try:
        n = prune_sessions(target, seconds, principal)
    except (SessionStoreNotMigrated, ValueError) as e:
        raise _fail(err, str(e), 2) from None
    except Exception as e:  # noqa: BLE001 - the database refused or is down: named, never a traceback
        raise _fail(err, f"could not prune the sessions in {_redact(target)}: {_why(e)}", 1) from None
    out.print(f"pruned {n} session{'s' if n != 1 else ''}")


@sessions_app.command("migrate")
def sessions_migrate(
    repo: Path | None = typer.Option(None, "--repo", "-r"),
    url: str | None = typer.Option(None, "--url", help="A postgresql:// URL or SQLite path."),
):
    """Create or upgrade the session store's schema (what `repoctx db migrate` does for sessions)."""
    from repoctx.copilot.sessions import migrate

    out, err = _consoles()
    target = _target(repo, url, err)
    try:
        version = migrate(target)
    except Exception as e:  # noqa: BLE001 - the database refused or is down: named, never a traceback
        raise _fail(err, f"could not migrate the sessions in {_redact(target)}: {_why(e)}", 1) from None
    out.print(f"sessions schema v{version} at {escape(_redact(target))}")


def register(app: typer.Typer) -> None:
    """Add ``ask``, ``chat`` and the ``sessions`` group to ``app``."""
    app.command("ask")(ask_cmd)
    app.command("chat")(chat_cmd)
    app.add_typer(sessions_app, name="sessions")


register(copilot_app)

if __name__ == "__main__":  # pragma: no cover
    copilot_app()
