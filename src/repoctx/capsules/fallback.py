"""No grammar table for a file: a regex symbol pass, then LangChain text windows."""

from __future__ import annotations

import re
from functools import lru_cache

from repoctx.capsules.parse import ParsedFile, content_hash, line_count
from repoctx.types import Capsule

_SYMBOL = re.compile(
    r"^(?P<indent>[ \t]*)(?:(?:export|public|private|protected|internal|static|async|override|open|final|"
    r"abstract|inline|suspend|data|sealed|pub|local)\s+)*"
    r"(?P<kw>def|function|func|fun|fn|class|interface|trait|object|struct|enum|module|sub|proc|"
    r"procedure|macro|defmodule|defp?)\s+(?P<name>[A-Za-z_][\w$!?]*)"
)
_SHELL_FN = re.compile(r"^(?P<indent>)(?:function\s+)?(?P<name>[A-Za-z_][\w-]*)\s*\(\)\s*\{")
_CLASSY = {"class", "interface", "trait", "object", "struct", "enum", "module", "defmodule"}


@lru_cache(maxsize=32)
def _splitter(language: str, chunk_size: int, overlap: int):
    from langchain_text_splitters import Language, RecursiveCharacterTextSplitter

    aliases = {
        "javascript": "js",
        "typescript": "ts",
        "tsx": "ts",
        "csharp": "csharp",
        "make": None,
        "dockerfile": None,
        "yaml": None,
        "toml": None,
        "json": None,
        "ini": None,
        "text": None,
        "sql": None,
        "css": None,
        "xml": None,
        "bash": None,
    }
    name = aliases.get(language, language)
    try:
        lang = Language(name) if name else None
    except ValueError:
        lang = None
    if lang is not None:
        try:
            return RecursiveCharacterTextSplitter.from_language(
                lang, chunk_size=chunk_size, chunk_overlap=overlap, add_start_index=True
            )
        except ValueError:
            pass
    return RecursiveCharacterTextSplitter(chunk_size=chunk_size, chunk_overlap=overlap, add_start_index=True)


def _module_capsule(path: str, language: str, text: str, n_lines: int) -> Capsule:
    return Capsule(
        id=f"{path}#<module>",
        path=path,
        language=language,
        kind="module",
        name=path.rsplit("/", 1)[-1],
        qualname=path,
        signature=f"file {path}",
        start_line=1,
        end_line=max(n_lines, 1),
        text=text,
        content_hash=content_hash(text),
    )


def regex_symbols(path: str, text: str, language: str) -> ParsedFile | None:
    """Definitions found by line patterns; None when there are none."""
    lines = text.split("\n")
    found: list[tuple[int, int, str, str]] = []  # (line index, indent, keyword, name)
    for i, line in enumerate(lines):
        m = _SYMBOL.match(line) or (_SHELL_FN.match(line) if language == "bash" else None)
        if m:
            kw = m.groupdict().get("kw") or "function"
            found.append((i, len(m.group("indent").expandtabs(4)), kw, m.group("name")))
    if not found:
        return None
    mod = _module_capsule(path, language, text, line_count(text))
    capsules = [mod]
    classes: list[tuple[int, int, str, str]] = []  # (indent, end, qual, id)
    seen: dict[str, int] = {}
    for j, (i, indent, kw, name) in enumerate(found):
        end = len(lines) - 1
        for k in range(j + 1, len(found)):
            if found[k][1] <= indent:
                end = found[k][0] - 1
                break
        while end > i and not lines[end].strip():
            end -= 1
        classes = [c for c in classes if c[0] < indent and i <= c[1]]
        prefix = classes[-1][2] if classes else ""
        qual = f"{prefix}.{name}" if prefix else name
        cid = f"{path}#{qual}"
        seen[cid] = seen.get(cid, 0) + 1
        if seen[cid] > 1:
            cid = f"{cid}~{seen[cid]}"
        kind = "class" if kw in _CLASSY else ("method" if classes else "function")
        body = "\n".join(lines[i : end + 1])
        doc_lines: list[str] = []
        k = i - 1
        while k >= 0 and re.match(r"^\s*(#|//|--|\*|/\*)", lines[k]):
            doc_lines.insert(0, re.sub(r"^\s*(#+|//+|--|/\*\*?|\*/?)\s?", "", lines[k]))
            k -= 1
        capsules.append(
            Capsule(
                id=cid,
                path=path,
                language=language,
                kind=kind,
                name=name,
                qualname=qual,
                signature=lines[i].strip()[:300],
                start_line=i + 1,
                end_line=end + 1,
                text=body,
                content_hash=content_hash(body),
                docstring="\n".join(doc_lines).strip(),
                parent=classes[-1][3] if classes else mod.id,
            )
        )
        if kind == "class":
            classes.append((indent, end, qual, cid))
    return ParsedFile(path, language, path, capsules, [], method="regex")


def _chunks(splitter, text: str, overlap: int) -> list[tuple[int, str]]:
    """(start index, text) of each chunk: what the splitter's ``create_documents([text])`` with ``add_start_index``
    gives as documents, without a deep-copied metadata dict and a Document a chunk."""
    out = []
    index = previous = 0
    for chunk in splitter.split_text(text):
        index = text.find(chunk, max(0, index + previous - overlap))
        previous = len(chunk)
        out.append((index, chunk))
    return out


def windows(path: str, text: str, language: str, chunk_size: int = 1200, overlap: int = 150) -> ParsedFile:
    """Overlapping text windows with true line spans, so any file stays searchable."""
    n_lines = line_count(text)
    capsules = [_module_capsule(path, language, "" if len(text) > chunk_size else text, n_lines)]
    if len(text) > chunk_size:
        seen: dict[str, int] = {}
        pos, newlines = 0, 0  # newlines in text[:pos]: each window counts from the previous one, not from 0
        for start, chunk in _chunks(_splitter(language, chunk_size, overlap), text, overlap):
            if start < 0:
                start = 0
            if start >= pos:
                newlines += text.count("\n", pos, start)
            else:
                newlines -= text.count("\n", start, pos)
            pos = start
            start_line = newlines + 1
            end_line = start_line + chunk.count("\n")
            qual = f"{path}[{start_line}-{end_line}]"
            seen[qual] = seen.get(qual, 0) + 1
            if seen[qual] > 1:  # one very long line split into several windows
                qual = f"{qual}~{seen[qual]}"
            capsules.append(
                Capsule(
                    id=f"{path}#{qual}",
                    path=path,
                    language=language,
                    kind="window",
                    name=path.rsplit("/", 1)[-1],
                    qualname=qual,
                    signature=chunk.split("\n", 1)[0][:200],
                    start_line=start_line,
                    end_line=end_line,
                    text=chunk,
                    content_hash=content_hash(chunk),
                    parent=capsules[0].id,
                )
            )
    return ParsedFile(path, language, path, capsules, [], method="window")


def parse_any(path: str, text: str, language: str, chunk_size: int = 1200, overlap: int = 150) -> ParsedFile:
    """Tree-sitter where a table exists, else regex symbols, else windows. Never raises on content."""
    from repoctx.capsules.parse import parse_source, supported

    if supported(language):
        return parse_source(path, text, language)
    from repoctx.ingest.languages import has_grammar

    if has_grammar(language) or language in ("perl", "lua", "elixir", "r", "haskell", "make"):
        pf = regex_symbols(path, text, language)
        if pf is not None:
            return pf
    return windows(path, text, language, chunk_size, overlap)
