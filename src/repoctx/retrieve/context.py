"""KC-RAG context building: the question's task decides how the retrieved capsules are compressed
into a token budget.

``build_context`` is the I/O edge (search, then graph reads through one ``Scope``); ``assemble`` is
the pure core that turns hits plus a small graph reader into a ``Context``.

Budget rule: every piece is all-or-nothing, except the code_query/refactor *target*, which is cut at
a line boundary with a visible marker when it alone does not fit. Whatever is not shown is listed in
``Context.left_out`` as a citation (for a cut target: the omitted line range), so ``citations`` and
``left_out`` never overlap.
"""
from __future__ import annotations

import posixpath
import re
import textwrap
from dataclasses import dataclass, field
from typing import Protocol

from repoctx.embed import count_tokens
from repoctx.store.base import EVERYTHING, Scope
from repoctx.types import Capsule, Context, FileHit, Hit

TASKS = ("code_query", "refactor", "code_gen", "search")
DEFAULT_BUDGETS = {"code_query": 2000, "refactor": 1500, "code_gen": 600, "search": 800}
SEARCH_K = {"code_query": 10, "refactor": 10, "code_gen": 10, "search": 30}

CODE_KINDS = ("function", "method", "class")
MAX_RELATED = 5  # code_query: other top hits shown as signatures, after the callees
MAX_LAYOUT_DIRS = 5
MAX_DIR_FILES = 25
MAX_NAME_FILES = 8

# ---------------------------------------------------------------- task classification

_PREFIX = re.compile(
    r"^(?:"
    r"(?:please|pls|kindly|hey|hi|ok|okay|so|now|then|also|and|quick question)[,:!]?\s+"
    r"|(?:can|could|would|will) you(?: please)?\s+"
    r"|help me(?: to)?\s+"
    r"|i(?: would|'d| d)? (?:want|need|like|wish) to\s+"
    r"|we (?:need|want|have|should|must) to\s+"
    r"|(?:we|i) should\s+"
    r"|let'?s\s+"
    r"|how (?:do|can|should|would|could|might) (?:i|we|you|one)\s+"
    r"|how to\s+"
    r"|what(?:'s| is) the (?:best |right |cleanest |easiest |proper )?way to\s+"
    r"|is (?:there a|it possible) (?:(?:good |clean |simple )?way )?to\s+"
    r"|show me how to\s+"
    r"|go ahead and\s+"
    r"|try to\s+"
    r")"
)

_REFACTOR_ANYWHERE = re.compile(
    r"\brefactor\w*|\brenam(?:e|es|ed|ing)\b|\bclean(?:[\s-]?up)\b|\bcleanup\b"
    r"|\bchange (?:the |its |their |a )?(?:\w+ )?signatures?\b|\bsignature changes?\b"
    r"|\bcallers? of\b|\bcall[\s-]?sites?\b|\b(?:who|what) calls\b|\bdeduplicat\w*"
    r"|\badd (?:an? |the |one )?(?:new |extra |optional )?(?:parameter|argument|param|arg|kwarg)s?\b"
)
_REFACTOR_VERBS = frozenset(
    "move extract inline split rename restructure reorganize reorganise simplify consolidate decouple "
    "replace convert migrate deprecate tidy untangle merge refactor dedupe deduplicate".split())
_CODE_GEN_VERBS = frozenset(
    "add implement write create generate scaffold build introduce draft bootstrap stub".split())
_SEARCH_VERBS = frozenset("find list locate enumerate grep search".split())
_QUESTION_WORDS = frozenset(
    "how what what's whats why where when which who whose does do did is are was were can could should "
    "would will explain describe tell".split())
_CODE_GEN_ANYWHERE = re.compile(
    r"\bscaffold\w*|\bboilerplate\b|\b(?:add|implement|write|create|generate|build) (?:a |an |the )?new\b")
_SEARCH_ANYWHERE = re.compile(
    r"\bwhere are (?:all|the)\b|\bwhich (?:files?|modules?|classes|functions|methods|places|tests|parts)\b"
    r"|\bwhat files\b|\busages? of\b"
    r"|\b(?:all|every) (?:the |of the )?(?:places?|occurrences?|usages?|uses|references|files|modules|classes"
    r"|functions|methods|subclasses|implementations|tests|definitions)\b"
    r"|\bwhere (?:else )?(?:is|are) [\w.]+ (?:used|called|referenced|imported)\b"
    r"|^show (?:me )?(?:all|every)\b|^give me (?:a list|all)\b|^get all\b"
)


def classify_task(query: str) -> str:
    """The KC-RAG task of a question: ``refactor``, ``code_gen``, ``search`` or ``code_query`` (default).

    Rule-based: strong refactor phrases anywhere win; then the leading imperative verb (after polite
    or "how do I" prefixes); then search / code-generation phrases; otherwise a question about code.
    """
    q = " ".join(query.lower().replace("’", "'").split())
    if _REFACTOR_ANYWHERE.search(q):
        return "refactor"
    prev = None
    while prev != q:
        prev, q = q, _PREFIX.sub("", q, count=1)
    words = re.findall(r"[a-z_']+", q)
    verb = words[0] if words else ""
    if verb in _REFACTOR_VERBS:
        return "refactor"
    if verb in _CODE_GEN_VERBS:
        return "code_gen"
    if verb in _SEARCH_VERBS or _SEARCH_ANYWHERE.search(q):
        return "search"
    if verb not in _QUESTION_WORDS and _CODE_GEN_ANYWHERE.search(q):
        return "code_gen"
    return "code_query"


# ---------------------------------------------------------------- graph reads (the I/O edge)

class GraphReader(Protocol):
    def callees(self, ids: list[str]) -> list[Capsule]: ...
    def callers(self, ids: list[str]) -> list[Capsule]: ...
    def file_capsules(self, repo: str, path: str) -> list[Capsule]: ...
    def visible_paths(self, repo: str, dirs: list[str]) -> list[str]: ...
    def namesakes(self, c: Capsule) -> list[Capsule]: ...


class StoreReader:
    """The reads the context builder needs, each through one ``Scope``."""

    def __init__(self, store, scope: Scope = EVERYTHING):
        self.store = store
        self.scope = scope

    def callees(self, ids: list[str]) -> list[Capsule]:
        dsts = [e.dst for e in self.store.edges_from(ids, ("calls",), self.scope) if e.dst]
        return self.store.capsules(list(dict.fromkeys(dsts)), self.scope)

    def callers(self, ids: list[str]) -> list[Capsule]:
        srcs = [e.src for e in self.store.edges_to(ids, ("calls",), self.scope)]
        return self.store.capsules(list(dict.fromkeys(srcs)), self.scope)

    def file_capsules(self, repo: str, path: str) -> list[Capsule]:
        return self.store.file_capsules(repo, path, self.scope)

    def namesakes(self, c: Capsule) -> list[Capsule]:
        """Other functions, methods and classes with the same name, in the same repository."""
        return [d for d in self.store.by_names([c.name], self.scope.with_repos((c.repo,)) if c.repo else self.scope)
                if d.id != c.id and d.name == c.name and d.kind in CODE_KINDS]

    def visible_paths(self, repo: str, dirs: list[str]) -> list[str]:
        """The files directly in ``dirs``, plus one file under each of their subdirectories, that the
        scope lets the caller see (enough to draw each directory with its subdirectories collapsed)."""
        all_paths = [p for r, p in self.store.paths(self.scope.with_repos((repo,))) if r == repo]
        out: list[str] = []
        for d in dict.fromkeys(dirs):
            pre = d + "/" if d else ""
            seen_sub: set[str] = set()
            for p in all_paths:
                if not p.startswith(pre):
                    continue
                rest = p[len(pre):]
                sub = rest.split("/", 1)[0] if "/" in rest else None
                if sub is not None and sub in seen_sub:
                    continue
                out.append(p)
                if sub is not None:
                    seen_sub.add(sub)
        return sorted(set(out))


# ---------------------------------------------------------------- the budget

@dataclass
class _Packer:
    """Text pieces added in order while they fit; whitespace-joined, so token counts add up."""

    budget: int
    parts: list[tuple[str, list[str]]] = field(default_factory=list)
    used: int = 0
    left_out: list[str] = field(default_factory=list)
    _sections: set[str] = field(default_factory=set)

    def room(self) -> int:
        return self.budget - self.used

    def heading_cost(self, section: str | None) -> int:
        return count_tokens(f"## {section}\n") if section and section not in self._sections else 0

    def add(self, text: str, citations: tuple[str, ...] | list[str] = (), section: str | None = None,
            record: bool = True) -> bool:
        """Add ``text`` (under ``section``, whose heading comes with its first piece) if it fits;
        otherwise list ``citations`` as left out unless ``record`` is false (the caller will retry)."""
        if section and section not in self._sections:
            text = f"## {section}\n" + text
        n = count_tokens(text)
        if n > self.room():
            if record:
                self.left_out.extend(citations)
            return False
        if section:
            self._sections.add(section)
        self.parts.append((text, list(citations)))
        self.used += n
        return True

    def upgrade(self, old: str, new: str) -> bool:
        """Swap a piece already added (a signature) for a fuller one (the whole body) if the difference fits."""
        for i, (text, cites) in enumerate(self.parts):
            if old in text:
                grown = text.replace(old, new, 1)
                delta = count_tokens(grown) - count_tokens(text)
                if delta > self.room():
                    return False
                self.parts[i] = (grown, cites)
                self.used += delta
                return True
        return False

    def finish(self, task: str, budget: int) -> Context:
        text = "".join(t for t, _ in self.parts).rstrip() + "\n" if self.parts else ""
        tokens = count_tokens(text)
        while tokens > budget and self.parts:  # belt and braces: the final text is what counts
            _, cites = self.parts.pop()
            self.left_out.extend(cites)
            text = "".join(t for t, _ in self.parts).rstrip() + "\n" if self.parts else ""
            tokens = count_tokens(text)
        citations = list(dict.fromkeys(c for _, cites in self.parts for c in cites))
        left_out = [c for c in dict.fromkeys(self.left_out) if c not in citations]
        return Context(task=task, text=text, citations=citations, tokens=tokens, budget=budget, left_out=left_out)


# ---------------------------------------------------------------- rendering pieces

def _fence(text: str) -> str:
    fence = "```"
    while fence in text:
        fence += "`"
    return fence


def _doc_first_line(c: Capsule) -> str:
    for line in c.docstring.splitlines():
        if line.strip():
            return line.strip()
    return ""


def _doc_comment(c: Capsule, doc: str) -> str:
    if c.language == "python":
        return f'"""{doc}"""'
    if c.language in ("ruby", "bash", "shell", "r", "perl", "elixir", "yaml", "toml", "makefile"):
        return f"# {doc}"
    return f"// {doc}"


def _signature_piece(c: Capsule) -> str:
    sig = c.signature or c.qualname
    doc = _doc_first_line(c)
    out = f"### {c.citation}\n{sig}\n"
    if doc:
        out += f"    {_doc_comment(c, doc)}\n"
    return out + "\n"


def _whole_piece(c: Capsule) -> str:
    body = textwrap.dedent(c.text).rstrip("\n")
    fence = _fence(body)
    return f"### {c.citation}\n{fence}{c.language}\n{body}\n{fence}\n\n"


def _cite(c: Capsule, start: int, end: int) -> str:
    return f"{c.path}:{start}-{end} :: {c.qualname}"


def _add_truncated(packer: _Packer, c: Capsule, section: str) -> None:
    """Show the first lines of ``c`` that fit, a marker, and list the omitted range as left out."""
    body_lines = textwrap.dedent(c.text).rstrip("\n").split("\n")
    fence = _fence(c.text)

    def render(n: int) -> str:
        shown_end = c.start_line + n - 1
        marker = f"... [truncated: lines {shown_end + 1}-{c.end_line} not shown]"
        return (f"### {_cite(c, c.start_line, shown_end)}\n{fence}{c.language}\n"
                + "".join(line + "\n" for line in body_lines[:n]) + f"{marker}\n{fence}\n\n")

    room = packer.room() - packer.heading_cost(section)
    # Prefix sums of per-line counts give the candidate; the real count of the rendering decides.
    sizes = [count_tokens(line + "\n") for line in body_lines]
    overhead = count_tokens(render(0))
    n, total = 0, overhead
    while n < len(body_lines) - 1 and total + sizes[n] <= room:
        total += sizes[n]
        n += 1
    while n > 0 and count_tokens(render(n)) > room:
        n -= 1
    if n == 0:
        packer.left_out.append(c.citation)
        return
    shown_end = c.start_line + n - 1
    packer.add(render(n), [_cite(c, c.start_line, shown_end)], section=section)
    packer.left_out.append(_cite(c, shown_end + 1, c.end_line))


def _members(reader: GraphReader, cls: Capsule) -> list[Capsule]:
    return [m for m in reader.file_capsules(cls.repo, cls.path) if m.parent == cls.id]


def _outline_piece(cls: Capsule, members: list[Capsule]) -> str:
    lines = [cls.signature or cls.qualname]
    doc = _doc_first_line(cls)
    if doc:
        lines.append("    " + _doc_comment(cls, doc))
    lines += ["    " + (m.signature or m.name) for m in members if m.kind in CODE_KINDS]
    return f"### {cls.citation}\n" + "\n".join(lines) + "\n\n"


# ---------------------------------------------------------------- per-task assembly

def _code_hits(hits: list[Hit]) -> list[Capsule]:
    caps = [h.capsule for h in hits]
    return [c for c in caps if c.kind in CODE_KINDS] or caps


def _target(packer: _Packer, hits: list[Hit], reader: GraphReader) -> tuple[Capsule, list[Capsule]]:
    """Add the target piece (whole, or cut when it alone exceeds the budget). A top class too big
    to show whole gives way to an outline plus its best-ranked method (else the best function)."""
    cands = _code_hits(hits)
    top = cands[0]
    if top.kind == "class":
        members = _members(reader, top)
        if packer.add(_whole_piece(top), [top.citation], section="Target", record=False):
            return top, members
        fallback = next((c for c in cands[1:] if c.kind == "method" and c.parent == top.id), None) \
            or next((c for c in cands[1:] if c.kind in ("function", "method")), None)
        if fallback is None:
            _add_truncated(packer, top, "Target")
            return top, members
        packer.add(_outline_piece(top, members), [top.citation], section="Target class (outline)")
        top = fallback
    if not packer.add(_whole_piece(top), [top.citation], section="Target", record=False):
        _add_truncated(packer, top, "Target")
    return top, []


def _add_unseen(packer: _Packer, caps: list[Capsule], shown: set[str], piece, section: str) -> None:
    for c in caps:
        if c.id not in shown:
            shown.add(c.id)
            packer.add(piece(c), [c.citation], section=section)


def _fill(packer: _Packer, signed: list[Capsule], more: list[Capsule], shown: set[str]) -> None:
    """With budget left, related hits shown as signatures are shown whole (in rank order), then further
    hits whole: a large budget is filled with relevant code, not left empty. Callee and caller
    signatures stay signatures: that is the task's shape."""
    for c in signed:
        if packer.room() <= 0:
            return
        packer.upgrade(_signature_piece(c), _whole_piece(c))
    for c in more:
        if packer.room() <= 0:
            return
        if c.id not in shown:
            shown.add(c.id)
            packer.add(_whole_piece(c), [c.citation], section="More relevant code", record=False)


def _assemble_code_query(packer: _Packer, hits: list[Hit], reader: GraphReader) -> None:
    target, members = _target(packer, hits, reader)
    own = {target.id} | {m.id for m in members}
    shown = set(own)
    callees = [c for c in reader.callees(list(own)) if c.id not in shown]
    _add_unseen(packer, callees, shown, _signature_piece, "Callees (signatures)")
    code = [c for c in _code_hits(hits) if c.parent not in own]
    related = [c for c in code if c.id not in shown][:MAX_RELATED]
    for c in related:
        shown.add(c.id)
        packer.add(_signature_piece(c), [c.citation], section="Related (signatures)")
    _fill(packer, related, code, shown)


def _assemble_refactor(packer: _Packer, hits: list[Hit], reader: GraphReader) -> None:
    target, members = _target(packer, hits, reader)
    own = {target.id} | {m.id for m in members}
    shown = set(own)
    callers = [c for c in reader.callers(list(own)) if c.id not in shown]
    _add_unseen(packer, callers, shown, _signature_piece, "Callers (signatures)")
    # a rename or signature change touches every definition of the name (overrides, other implementations)
    namesakes = [c for c in reader.namesakes(target) if c.id not in shown]
    _add_unseen(packer, namesakes, shown, _signature_piece, "Other definitions of the name (signatures)")
    _add_unseen(packer, reader.callees(list(own)), shown, _whole_piece, "Callees (bodies)")
    _fill(packer, [], _code_hits(hits), shown)


def _layout_lines(paths: list[str], dirs: list[str], hit_files: set[str]) -> list[str]:
    """A tree of ``dirs`` (their files, and their subdirectories collapsed), with the ancestors."""
    tree: dict = {}

    def node(d: str) -> dict:
        cur = tree
        for part in [p for p in d.split("/") if p]:
            cur = cur.setdefault(part + "/", {})
        return cur

    for d in dirs:
        here = node(d)
        pre = d + "/" if d else ""
        files = [p for p in paths if posixpath.dirname(p) == d]
        for p in files[:MAX_DIR_FILES]:
            here[posixpath.basename(p) + (" *" if p in hit_files else "")] = None
        if len(files) > MAX_DIR_FILES:
            here[f"... {len(files) - MAX_DIR_FILES} more files"] = None
        for p in paths:
            if p.startswith(pre) and "/" in p[len(pre):]:
                here.setdefault(p[len(pre):].split("/", 1)[0] + "/", {})

    def render(t: dict, depth: int) -> list[str]:
        out: list[str] = []
        for key in sorted(t, key=lambda k: (k.endswith("/"), k.startswith("..."), k)):
            out.append("  " * depth + key)
            if t[key]:
                out += render(t[key], depth + 1)
        return out

    return render(tree, 0)


def _names_lines(caps: list[Capsule]) -> list[tuple[str, Capsule]]:
    """Classes and functions of one file as signatures, methods indented under their class."""
    by_id = {c.id: c for c in caps}
    out = []
    for c in caps:
        if c.kind not in CODE_KINDS:
            continue
        depth, parent = 0, by_id.get(c.parent or "")
        while parent is not None and parent.kind == "class":
            depth += 1
            parent = by_id.get(parent.parent or "")
        if parent is not None and parent.kind in ("function", "method"):
            continue  # local helpers are not part of a file's names
        out.append(("    " * depth + (c.signature or c.qualname), c))
    return out


def _assemble_code_gen(packer: _Packer, hits: list[Hit], reader: GraphReader) -> None:
    repo = hits[0].capsule.repo  # the layout of the repository the best hit is in
    hit_files = list(dict.fromkeys(h.capsule.path for h in hits if h.capsule.repo == repo))
    dirs = list(dict.fromkeys(posixpath.dirname(p) for p in hit_files))[:MAX_LAYOUT_DIRS]
    paths = reader.visible_paths(repo, dirs)
    lines = _layout_lines(paths, dirs, set(hit_files))
    # The layout may take at most half the budget; the names of the hit files use the rest.
    cap = packer.budget // 2
    text = "## Layout (* = file with hits)\n"
    if count_tokens(text) <= cap:
        for i, line in enumerate(lines):
            more = f"... {len(lines) - i} more entries\n"
            if count_tokens(text + line + "\n" + (more if i < len(lines) - 1 else "")) > cap:
                if count_tokens(text + more) <= cap:
                    text += more
                break
            text += line + "\n"
        if text.count("\n") > 1:
            packer.add(text + "\n")

    # Hit files first, then their neighbours in the same directories: conventions to follow.
    neighbours = [p for p in paths if posixpath.dirname(p) in dirs and p not in hit_files]
    for path in (hit_files + neighbours)[:MAX_NAME_FILES]:
        caps = reader.file_capsules(repo, path)
        module = next((c for c in caps if c.kind == "module"), None)
        if module is None and not caps:
            continue
        cite = module.citation if module else \
            f"{path}:{min(c.start_line for c in caps)}-{max(c.end_line for c in caps)} :: {path}"
        names = _names_lines(caps)
        if not names:
            continue
        head = f"### {cite}\n"
        if not packer.add(head + names[0][0] + "\n", [cite], section="Existing names"):
            continue  # the file's citation, now in left_out, stands for all its names
        for i, (line, c) in enumerate(names[1:], 1):
            if not packer.add(line + "\n"):
                packer.left_out.extend(c.citation for _, c in names[i:])
                break
        packer.add("\n")


def _assemble_search(packer: _Packer, hits: list[Hit], reader: GraphReader) -> None:
    by_file: dict[str, list[Capsule]] = {}
    for h in hits:
        by_file.setdefault(h.capsule.path, []).append(h.capsule)
    for path, caps in by_file.items():
        symbols = [c for c in caps if c.kind != "module"] or caps
        headed = False
        for c in {c.id: c for c in symbols}.values():
            doc = _doc_first_line(c)
            line = f"  {c.qualname} (lines {c.start_line}-{c.end_line})" + (f" — {doc}" if doc else "") + "\n"
            if packer.add(("" if headed else f"{path}\n") + line, [c.citation]):
                headed = True


_ASSEMBLERS = {"code_query": _assemble_code_query, "refactor": _assemble_refactor,
               "code_gen": _assemble_code_gen, "search": _assemble_search}


def _nothing_found(task: str, query: str, budget: int) -> Context:
    for text in (f"No indexed code matched the query: {query.strip()[:200]}\n", "No indexed code matched.\n", ""):
        if count_tokens(text) <= budget:
            return Context(task=task, text=text, citations=[], tokens=count_tokens(text), budget=budget)
    return Context(task=task, text="", citations=[], tokens=0, budget=budget)


def assemble(task: str, query: str, hits: list[Hit], reader: GraphReader, budget: int) -> Context:
    """The pure core: compress ``hits`` for ``task`` into ``budget`` tokens, reading the graph via ``reader``."""
    if not hits:
        return _nothing_found(task, query, budget)
    packer = _Packer(budget)
    _ASSEMBLERS[task](packer, hits, reader)
    return packer.finish(task, budget)


def hits_for(task: str, budget: int) -> int:
    """How many hits a budget can use: the task's few, more when the budget has room (~250 tokens a unit)."""
    return max(SEARCH_K[task], min(100, budget // 250))


def build_context(index, query: str, task: str | None = None, budget: int | None = None,
                  scope: Scope = EVERYTHING, hits: list[Hit] | None = None) -> Context:
    """Retrieve for ``query`` (unless ``hits`` are given) and compress the result for the task.

    ``task`` defaults to ``classify_task(query)``; ``budget`` to the task's default. The returned
    text never exceeds ``budget`` tokens (MiniLM WordPiece, as ``count_tokens`` counts).
    """
    task = task or classify_task(query)
    if task not in TASKS:
        raise ValueError(f"unknown task {task!r}: expected one of {', '.join(TASKS)}")
    budget = DEFAULT_BUDGETS[task] if budget is None else int(budget)
    if budget < 0:
        raise ValueError("budget must be >= 0")
    if hits is None:
        hits = index.search(query, k=hits_for(task, budget), scope=scope)
    flat: list[Hit] = []
    for h in hits:
        flat.extend(h.capsules if isinstance(h, FileHit) else [h])
    return assemble(task, query, flat, StoreReader(index.store, scope), budget)
