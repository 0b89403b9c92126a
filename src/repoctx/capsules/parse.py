"""Source text → capsules (whole semantic units) and unresolved references, via tree-sitter.

Pure: no I/O. Languages without a table in ``langs.SPECS`` go to ``fallback``.
"""

from __future__ import annotations

import ast
import hashlib
import re
import threading
from bisect import bisect_right
from dataclasses import dataclass, field
from functools import cache
from itertools import accumulate
from operator import attrgetter
from typing import TYPE_CHECKING, cast

from tree_sitter import Node, Query, QueryCursor

from repoctx.capsules.langs import SPECS, LangSpec
from repoctx.types import Capsule, Ref

if TYPE_CHECKING:
    from tree_sitter_language_pack import SupportedLanguage

# Bumped whenever what a parse yields (capsules, references) or how references resolve changes: an index made by
# other rules is rebuilt whole. 2: calls on a name whose class the source states are recorded as that class's
# (``_Receivers``); 3: the resolver finds a method a class inherits (``Resolver.inherited``).
PARSER_VERSION = "3"

_WS = re.compile(r"\s+")
_IDENT = re.compile(r"[A-Za-z_$][\w$]*")
_local = threading.local()


@dataclass
class ParsedFile:
    path: str
    language: str
    module: str
    capsules: list[Capsule]
    refs: list[Ref]
    imports: dict[str, str] = field(default_factory=dict)  # local alias -> dotted target
    syntax_errors: int = 0
    method: str = "tree-sitter"  # tree-sitter | regex | window


def line_count(text: str) -> int:
    """Lines as an editor numbers them: a final newline ends the last line, it does not start one."""
    return max(text.count("\n") + (0 if text.endswith("\n") else 1), 1)


def content_hash(text: str) -> str:
    return hashlib.blake2b(text.encode("utf-8", "replace"), digest_size=12).hexdigest()


def module_name(path: str, language: str) -> str:
    """Dotted module name for Python paths (``pkg/mod.py`` → ``pkg.mod``); the path elsewhere."""
    if language == "python":
        p = path[:-4] if path.endswith(".pyi") else path[:-3] if path.endswith(".py") else path
        parts = p.split("/")
        if parts[-1] == "__init__":
            parts = parts[:-1]
        # src layout and lib/ prefixes are not part of import names
        while parts and parts[0] in ("src", "lib") and len(parts) > 1:
            parts = parts[1:]
        return ".".join(parts) or path
    return path


@cache
def _language(name: str):
    from tree_sitter_language_pack import get_language

    return get_language(cast("SupportedLanguage", name))  # a name from langs.py's table


def _parser(name: str):
    cache = getattr(_local, "parsers", None)
    if cache is None:
        cache = _local.parsers = {}
    if name not in cache:
        from tree_sitter_language_pack import get_parser

        cache[name] = get_parser(cast("SupportedLanguage", name))
    return cache[name]


@cache
def _query(language: str, calls: bool = True) -> Query:
    """One query a language (and a mode), compiled once: definitions, and with ``calls`` the calls, the imports
    and, for Python, the names whose class the source states (``_RECEIVER_PATTERNS``), all in one pass."""
    spec = SPECS[language]
    lang = _language(language)

    def alt(types, cap):
        known = [t for t in types if lang.id_for_node_kind(t, True)]
        return f"[{' '.join(f'({t})' for t in known)}] @{cap}" if known else ""

    parts = [alt(spec.functions, "function"), alt(spec.classes, "class"), alt(spec.scopes, "scope")]
    if calls:
        # a Python call's callee is its first child: captured itself, it needs no field lookup (``_python_calls``)
        parts += ["(call function: _ @callee)" if language == "python" else alt(tuple(spec.calls), "call")]
        parts.append(alt(spec.imports, "import"))
        if language == "ruby":
            parts.append('((call method: (identifier) @_m) @import (#match? @_m "^require"))')
        if language == "python":
            parts.append(_RECEIVER_PATTERNS)
    return Query(lang, "\n".join(p for p in parts if p))


def supported(language: str) -> bool:
    return language in SPECS


class _Source:
    """A file's text addressed by tree-sitter's byte offsets. ASCII text (most source files) is sliced as it is: its
    byte offsets are its character offsets, so nothing is decoded per node."""

    __slots__ = ("ascii", "data", "text")

    def __init__(self, text: str) -> None:
        self.text = text
        self.data = text.encode("utf-8", "replace")
        self.ascii = text.isascii()

    def span(self, start: int, end: int) -> str:
        return self.text[start:end] if self.ascii else self.data[start:end].decode("utf-8", "replace")


def _text(node: Node | None, src: _Source) -> str:
    if node is None:
        return ""
    if src.ascii:
        return src.text[node.start_byte : node.end_byte]
    return src.data[node.start_byte : node.end_byte].decode("utf-8", "replace")


def _collapse(s: str, limit: int = 400) -> str:
    # printable text holds no whitespace but the ASCII space (every str.isspace() character is unprintable)
    s = s.strip() if s.isprintable() and "  " not in s else _WS.sub(" ", s).strip()
    return s if len(s) <= limit else s[: limit - 1] + "…"


_GENERIC = re.compile(r"<[^<>]*>")


def _strip_generics(name: str) -> str:
    """``Server<T>`` → ``Server`` (Rust impl types, C++ ``A<T>::f``, Java/C#/TS base lists)."""
    if "operator" in name:  # C++ operator<, operator<=>
        return name
    prev = None
    while prev != name:
        prev, name = name, _GENERIC.sub("", name)
    return name


_PLAIN_CALLEE = re.compile(r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*")
_DOTTED_CALLEE = re.compile(r"[A-Za-z_][\w]*(?:\s*\.\s*[A-Za-z_][\w]*)*")


def _callee(node: Node, spec: LangSpec, src: _Source) -> str | None:
    fields = spec.calls.get(node.type, ())
    parts = [_text(node.child_by_field_name(f), src) for f in fields]
    parts = [p for p in parts if p]
    if not parts:
        # object_creation_expression etc. without fields: first named child that looks like a name
        for child in node.named_children:
            if child.type in ("name", "qualified_name", "identifier", "type_identifier"):
                parts = [_text(child, src)]
                break
    if not parts:
        return None
    raw = ".".join(parts)
    if _PLAIN_CALLEE.fullmatch(raw):  # `f`, `self.f`, `a.b.c`: nothing below would change it
        return raw
    raw = raw.replace("->", ".").replace("::", ".").replace("?.", ".").replace("\\", ".").replace("$", "")
    raw = raw.rstrip("!")
    if _DOTTED_CALLEE.fullmatch(raw.strip()):
        return _WS.sub("", raw)
    idents = _IDENT.findall(raw.split("(")[-1] if ")" in raw else raw)
    return idents[-1] if idents else None


def _name_of(node: Node, src: _Source, language: str) -> str:
    n = node.child_by_field_name("name")
    if n is not None:
        return _text(n, src)
    decl = node.child_by_field_name("declarator")
    depth = 0
    while decl is not None and depth < 8:  # C/C++: unwrap pointer/function declarators
        if decl.type in (
            "identifier",
            "field_identifier",
            "qualified_identifier",
            "destructor_name",
            "operator_name",
            "type_identifier",
        ):
            return _text(decl, src)
        inner = decl.child_by_field_name("declarator")
        if inner is None:
            for c in decl.named_children:
                if c.type in (
                    "identifier",
                    "field_identifier",
                    "qualified_identifier",
                    "destructor_name",
                    "operator_name",
                ):
                    return _text(c, src)
            break
        decl = inner
        depth += 1
    t = node.child_by_field_name("type")  # rust impl, go type_spec fallbacks
    if t is not None:
        return _text(t, src)
    typedef = _typedef_of(node)  # C/C++: typedef struct { ... } name_t;
    if typedef is not None:
        d = typedef.child_by_field_name("declarator")
        if d is not None and d.type == "type_identifier":
            return _text(d, src)
    return ""


_C_TYPES = ("struct_specifier", "union_specifier", "enum_specifier", "class_specifier")


def _typedef_of(node: Node) -> Node | None:
    """The ``type_definition`` that names an anonymous C/C++ struct/union/enum, if any."""
    parent = node.parent
    if (
        node.type in _C_TYPES
        and node.child_by_field_name("name") is None
        and parent is not None
        and parent.type == "type_definition"
        and parent.child_by_field_name("type") == node
    ):
        return parent
    return None


# nodes that wrap a definition and carry its leading comments
_WRAPPERS = ("export_statement", "decorated_definition", "template_declaration", "type_declaration")


def _doc_target(node: Node) -> Node:
    target = node
    typedef = _typedef_of(node)
    if typedef is not None:  # /* doc */ typedef struct { ... } name_t;
        return typedef
    if (
        target.type == "variable_declarator"
        and target.parent is not None
        and target.parent.type in ("lexical_declaration", "variable_declaration")
        and target.parent.named_children[0] == target
    ):
        target = target.parent
    while (
        target.parent is not None
        and target.parent.type in _WRAPPERS
        and target.parent.named_children
        and target.parent.named_children[-1] == target
    ):
        # only the wrapped definition itself (Go grouped ``type ( ... )`` keeps per-spec comments)
        if target.parent.type == "type_declaration" and len(target.parent.named_children) > 1:
            break
        target = target.parent
    return target


def _docstring(node: Node, spec: LangSpec, src: _Source, language: str) -> str:
    if language == "python":
        body = node.child_by_field_name("body")
        return _python_docstring(body, src)
    # preceding contiguous comments (doc comments in most languages)
    lines: list[str] = []
    target = _doc_target(node)
    prev = target.prev_named_sibling
    expect = target.start_point[0]
    if prev is None and language == "ruby" and target.parent is not None and target.parent.type == "body_statement":
        prev = target.parent.prev_named_sibling  # comment before the first method sits outside the body
    while prev is not None and prev.type == "attribute_item" and prev.end_point[0] >= expect - 1:
        expect = prev.start_point[0]  # Rust: /// doc, then #[derive(..)], then the item
        prev = prev.prev_named_sibling
    while prev is not None and prev.type in spec.comments and prev.end_point[0] >= expect - 1:
        before = prev.prev_sibling
        if before is not None and before.end_point[0] == prev.start_point[0] and before.type not in spec.comments:
            break  # trailing comment of the previous statement, not a doc comment
        lines.insert(0, _text(prev, src))
        expect = prev.start_point[0]
        prev = prev.prev_named_sibling
    if not lines and language == "ruby":
        return ""
    text = "\n".join(lines)
    text = re.sub(r"^\s*(/\*\*?|\*/|\*|///?!?|#|--)", "", text, flags=re.M)
    text = re.sub(r"\*/\s*$", "", text, flags=re.M)
    text = re.sub(r"</?summary>", "", text)
    return text.strip()


def _plain_string(raw: str) -> str | None:
    """The value of a Python string literal without prefix or escapes (what ``ast.literal_eval`` returns, at a
    fraction of its cost); None for any other literal."""
    if "\\" in raw or "\r" in raw or "\x00" in raw or len(raw) < 2:
        return None
    q = raw[:3]
    if len(raw) >= 6 and q in ('"""', "'''"):
        return raw[3:-3] if raw.find(q, 3) == len(raw) - 3 else None
    q = raw[0]
    if q in "\"'" and "\n" not in raw and raw.find(q, 1) == len(raw) - 1:
        return raw[1:-1]
    return None


def _python_docstring(body: Node | None, src: _Source) -> str:
    if body is None or not body.named_child_count:
        return ""
    first = body.named_child(0)
    if first is not None and first.type == "expression_statement" and first.named_child_count:
        first = first.named_child(0)
    if first is None or first.type != "string":
        return ""
    raw = _text(first, src)
    plain = _plain_string(raw)
    if plain is not None:
        return plain.strip()
    try:
        value = ast.literal_eval(raw)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return raw.strip("\"' \n")
    return value.strip() if isinstance(value, str) else ""


def _params(node: Node, src: _Source) -> list[str]:
    if node.type == "variable_declarator":  # const f = (a, b) => ...
        value = node.child_by_field_name("value")
        if value is None:
            return []
        single = value.child_by_field_name("parameter")  # x => ...
        if single is not None:
            return [_text(single, src)]
        node = value
    p = node.child_by_field_name("parameters")
    if p is None:
        decl = node.child_by_field_name("declarator")
        while decl is not None and p is None:
            p = decl.child_by_field_name("parameters")
            decl = decl.child_by_field_name("declarator")
    if p is None:
        return []
    return [_collapse(_text(c, src), 120) for c in p.named_children if "comment" not in c.type]


def _returns(node: Node, spec: LangSpec, src: _Source) -> str:
    if node.type == "variable_declarator":
        value = node.child_by_field_name("value")
        if value is None:
            return ""
        node = value
    for f in spec.returns:
        r = node.child_by_field_name(f)
        if r is not None:
            out = _text(r, src).lstrip(":").strip()
            if node.type == "function_definition" and f == "type":  # C/C++: `T *f()` → `T *`
                decl, ptr = node.child_by_field_name("declarator"), ""
                while decl is not None and decl.type in ("pointer_declarator", "reference_declarator"):
                    ptr += "*" if decl.type == "pointer_declarator" else _text(decl.children[0], src)
                    decl = decl.child_by_field_name("declarator") or (
                        decl.named_children[0] if decl.named_children else None
                    )
                out = f"{out} {ptr}" if ptr else out
            return _collapse(out, 120)
    return ""


def _signature(node: Node, src: _Source, spec: LangSpec | None = None) -> str:
    body = node.child_by_field_name("body")
    if node.type == "variable_declarator":
        value = node.child_by_field_name("value")
        body = value.child_by_field_name("body") if value is not None else None
    end = body.start_byte if body is not None and body.start_byte > node.start_byte else None
    if end is not None and spec is not None:
        for c in node.children:
            if c.type in spec.comments and node.start_byte < c.start_byte < end:
                end = c.start_byte
                break
    if end is None:
        line_end = src.data.find(b"\n", node.start_byte)
        end = node.end_byte if line_end == -1 else min(line_end, node.end_byte)
    sig = _collapse(src.span(node.start_byte, end))
    sig = sig.rstrip("{").rstrip().rstrip(":").rstrip() if sig else sig
    if spec is not None:
        typedef = _typedef_of(node)
        if typedef is not None:
            sig = f"typedef {sig} {_text(typedef.child_by_field_name('declarator'), src)}"
        elif node.type == "type_spec" and node.parent is not None and node.parent.type == "type_declaration":
            sig = f"type {sig}"  # Go
    return sig


def _decorators(node: Node, src: _Source) -> list[str]:
    out = []
    parent = node.parent
    if parent is not None and parent.type == "decorated_definition":
        out = [_collapse(_text(c, src), 120) for c in parent.named_children if c.type == "decorator"]
    out += [_collapse(_text(c, src), 120) for c in node.named_children if c.type == "decorator"]
    return out


def _bases(node: Node, spec: LangSpec, src: _Source, language: str = "python") -> list[str]:
    names: list[str] = []
    for f in spec.bases:
        targets = [node.child_by_field_name(f)] + [c for c in node.named_children if c.type == f]
        for t in targets:
            if t is None:
                continue
            raw = _text(t, src)
            if language not in ("python", "ruby"):
                # type arguments are not bases (`Base<Props>`), nor are lifetimes (`'a`) or C# `where` clauses
                raw = re.sub(r"'\w+", "", _strip_generics(raw)).split(" where ")[0]
            for m in re.finditer(r"[A-Za-z_][\w.:\\]*", raw):
                tok = m.group(0).replace("::", ".").replace("\\", ".")
                if tok in ("extends", "implements", "public", "private", "protected", "virtual", "metaclass", "object"):
                    continue
                names.append(tok)
    return list(dict.fromkeys(names))


def _is_function_node(node: Node) -> bool:
    if node.type != "variable_declarator":
        return True
    value = node.child_by_field_name("value")
    return value is not None and value.type in (
        "arrow_function",
        "function_expression",
        "function",
        "generator_function",
    )


def _python_imports(node: Node, src: _Source, module: str, is_package: bool) -> dict[str, str]:
    out: dict[str, str] = {}
    if node.type == "import_statement":
        for c in node.named_children:
            if c.type == "dotted_name":
                name = _text(c, src)
                out[name.split(".")[0]] = name.split(".")[0]
                out[name] = name
            elif c.type == "aliased_import":
                out[_text(c.child_by_field_name("alias"), src)] = _text(c.child_by_field_name("name"), src)
        return out
    mod_node = node.child_by_field_name("module_name")
    base = _text(mod_node, src)
    if base.startswith("."):
        dots = len(base) - len(base.lstrip("."))
        pkg = module.split(".") if is_package else module.split(".")[:-1]
        if dots > 1:
            pkg = pkg[: len(pkg) - (dots - 1)]
        rest = base.lstrip(".")
        base = ".".join(pkg + ([rest] if rest else []))
    for c in node.named_children:
        if c == mod_node:
            continue
        if c.type == "dotted_name":
            name = _text(c, src)
            out[name] = f"{base}.{name}" if base else name
        elif c.type == "aliased_import":
            name = _text(c.child_by_field_name("name"), src)
            out[_text(c.child_by_field_name("alias"), src)] = f"{base}.{name}" if base else name
        elif c.type == "wildcard_import":
            out[f"*{base}"] = base
    return out


def _import_targets(node: Node, src: _Source, language: str) -> list[str]:
    if language in ("javascript", "typescript", "tsx"):
        s = node.child_by_field_name("source")
        return [_text(s, src).strip("'\"`")] if s is not None else []
    if language == "ruby":
        args = node.child_by_field_name("arguments")
        return [_text(args, src).strip("()'\" ")] if args is not None else []
    raw = _text(node, src)
    raw = re.sub(r"^\s*(import|use|using|#include|static)\s+", "", raw).rstrip(";").strip()
    raw = raw.strip('<>"')
    return [raw.replace("::", ".").replace("\\", ".")] if raw else []


def parse_source(path: str, text: str, language: str, calls: bool = True) -> ParsedFile:
    """Extract capsules and references from one file. Syntax errors degrade, never raise. ``calls=False``: the
    capsules without the call and import references (a third of the time; the history miner needs only names
    and spans)."""
    spec = SPECS[language]
    src = _Source(text)
    tree = _parser(language).parse(src.data)
    root = tree.root_node
    module = module_name(path, language)
    is_package = path.endswith("__init__.py")
    captures = QueryCursor(_query(language, calls)).captures(root)

    defs: list[tuple[Node, str]] = []
    for cap in ("function", "class", "scope"):
        for n in captures.get(cap, ()):
            if cap == "function" and not _is_function_node(n):
                continue
            if cap == "class" and n.type in _C_TYPES and n.child_by_field_name("body") is None:
                continue  # C/C++ `struct s *p`: a use of the type, not its definition
            defs.append((n, cap))
    defs.sort(key=lambda d: (d[0].start_byte, -d[0].end_byte))

    lines = text.split("\n")
    n_lines = len(lines)
    # line i is text[line_starts[i] : line_starts[i + 1] - 1]: a capsule's lines are one slice of the text
    line_starts = list(accumulate(map((1).__add__, map(len, lines)), initial=0))
    mod_id = f"{path}#{module}" if language == "python" else f"{path}#<module>"
    capsules: list[Capsule] = []
    refs: list[Ref] = []
    # the module's own id is taken: runtests.py's `def runtests()` must not collide with module runtests
    seen_ids: dict[str, int] = {mod_id: 1}
    # stack of (end_byte, capsule_id or None for scope-only, qual_prefix, is_class)
    stack: list[tuple[int, str | None, str, bool, int]] = []
    spans: list[tuple[int, int, str]] = []  # (start_byte, end_byte, id) for attributing refs
    top_level_ranges: list[tuple[int, int]] = []
    trait_impls: list[tuple[str, str, int]] = []  # Rust `impl Trait for Type`: (type qualname, trait, line)
    is_python = language == "python"

    for node, cap in defs:
        while stack and node.start_byte >= stack[-1][0]:
            stack.pop()
        name = _name_of(node, src, language)
        if not name:
            continue
        name = name.replace("::", ".").replace(spec.separator, ".") if spec.separator != "." else name
        if not is_python:
            name = _strip_generics(name)  # impl<T> Server<T>, template A<T>::f
        prefix = stack[-1][2] if stack else ""
        in_class = bool(stack) and stack[-1][3]
        if language == "go" and node.type == "method_declaration":
            recv = node.child_by_field_name("receiver")
            rtext = re.sub(r"\[.*\]", "", _text(recv, src), flags=re.S)  # (s *Stack[T]) → Stack
            rt = re.findall(r"[A-Za-z_]\w*", rtext)
            prefix = rt[-1] if rt else prefix
            in_class = True
        if "." in name and cap == "function":  # C++ A::f, defined out of class
            in_class = True
        qual = f"{prefix}.{name}" if prefix else name
        if cap == "scope":
            is_ns = "namespace" in node.type  # a namespace qualifies names but does not make methods
            end = node.end_byte
            if is_ns and node.child_by_field_name("body") is None and node.parent is not None:
                # `namespace App;` (PHP, C# file-scoped): runs to the next namespace or the end of the file
                end = node.parent.end_byte
                sib = node.next_named_sibling
                while sib is not None:
                    if sib.type == node.type:
                        end = sib.start_byte
                        break
                    sib = sib.next_named_sibling
            if node.type == "impl_item" and node.child_by_field_name("trait") is not None:
                trait = _strip_generics(_text(node.child_by_field_name("trait"), src)).replace("::", ".")
                trait_impls.append((qual, trait, node.start_point[0] + 1))
            stack.append((end, None, qual, not is_ns, node.start_byte))
            continue
        kind = "class" if cap == "class" else ("method" if in_class else "function")
        start_row, end_row = node.start_point[0], node.end_point[0]
        parent = node.parent
        outer = (
            parent if parent is not None and parent.type in ("decorated_definition", "template_declaration") else node
        )
        if outer is not node:
            start_row = outer.start_point[0]
        start_line, end_line = start_row + 1, end_row + 1
        last = min(end_line, n_lines)
        body_text = text[line_starts[start_row] : line_starts[last] - 1] if start_row < last else ""
        cid = f"{path}#{qual}"
        if cid in seen_ids:
            seen_ids[cid] += 1
            cid = f"{cid}~{seen_ids[cid]}"
        else:
            seen_ids[cid] = 1
        parent_id = next((s[1] for s in reversed(stack) if s[1] is not None), mod_id)
        capsules.append(
            Capsule(
                id=cid,
                path=path,
                language=language,
                kind=kind,
                name=name.split(".")[-1],
                qualname=qual,
                signature=_signature(node, src, None if is_python else spec),
                start_line=start_line,
                end_line=end_line,
                text=body_text,
                content_hash=content_hash(body_text),
                params=_params(node, src) if cap == "function" else [],
                returns=_returns(node, spec, src) if cap == "function" else "",
                docstring=_docstring(node, spec, src, language),
                decorators=_decorators(node, src),
                parent=parent_id,
            )
        )
        spans.append((node.start_byte, node.end_byte, cid))
        if cap == "class":
            for base in _bases(node, spec, src, language):
                refs.append(Ref(cid, "inherits", base, start_line))
        if not stack:
            top_level_ranges.append((start_row, end_row if outer is node else outer.end_point[0]))
        stack.append((node.end_byte, cid, qual, cap == "class", node.start_byte))

    # methods defined outside their type's body (Go receivers, Rust impl blocks, C++ A::f) belong to it
    class_ids = {c.qualname: c.id for c in capsules if c.kind == "class"}
    for c in capsules:
        if c.kind == "method" and c.parent == mod_id:
            owner_q = c.qualname.rsplit(".", 1)[0]
            if owner_q in class_ids:
                c.parent = class_ids[owner_q]
    for type_q, trait, line in trait_impls:
        if type_q in class_ids:
            refs.append(Ref(class_ids[type_q], "inherits", trait, line))

    # module capsule: top-level code outside definitions, spanning the whole file
    mod_lines: list[str] = []
    next_row = 0  # the first line no range seen so far covers
    for a, b in sorted(top_level_ranges):
        if a > next_row:
            mod_lines += lines[next_row : min(a, n_lines)]
        next_row = max(next_row, b + 1)
    mod_lines += lines[next_row:]
    mod_text = "\n".join(mod_lines).strip("\n")
    mod_doc = _python_docstring(root, src) if is_python else ""
    mod_name = module.split(".")[-1] if is_python else path.rsplit("/", 1)[-1]
    capsules.insert(
        0,
        Capsule(
            id=mod_id,
            path=path,
            language=language,
            kind="module",
            name=mod_name,
            qualname=module,
            signature=f"module {module}",
            start_line=1,
            end_line=line_count(text),
            text=mod_text,
            content_hash=content_hash(mod_text),
            docstring=mod_doc,
            parent=None,
        ),
    )
    if not calls:
        return ParsedFile(path, language, module, capsules, refs, {}, _count_errors(root) if root.has_error else 0)

    # attribute calls and imports to the innermost enclosing capsule
    spans.sort()
    span_starts = [s[0] for s in spans]
    import_map: dict[str, str] = {}

    def owner(byte: int) -> str:
        i = bisect_right(span_starts, byte) - 1  # the last span starting at or before byte
        while i >= 0:
            s, e, cid = spans[i]
            if s <= byte < e:
                # innermost: later-starting spans that contain byte are nested deeper
                return cid
            i -= 1
        return mod_id

    receivers = _python_receivers(captures, src, owner, capsules) if is_python else None
    by_span = attrgetter("byte_range")
    if receivers is not None:
        refs += _python_calls(captures.get("callee", []), spec, src, owner, receivers)
    for node in sorted(captures.get("call", ()), key=by_span):  # unordered
        callee = _callee(node, spec, src)
        if callee:
            refs.append(Ref(owner(node.start_byte), "calls", callee, node.start_point[0] + 1))
    for node in sorted(captures.get("import", ()), key=by_span):  # unordered
        if is_python:
            mapping = _python_imports(node, src, module, is_package)
            import_map.update(mapping)
            targets = list(dict.fromkeys(mapping.values()))
        else:
            targets = _import_targets(node, src, language)
        for t in targets:
            refs.append(Ref(owner(node.start_byte), "imports", t, node.start_point[0] + 1))

    errors = _count_errors(root) if root.has_error else 0
    return ParsedFile(path, language, module, capsules, refs, import_map, errors)


def _python_calls(callees: list[Node], spec: LangSpec, src: _Source, owner, receivers: _Receivers) -> list[Ref]:
    """The calls of a Python file from their callee nodes, in the order of their calls: a call starts where its
    callee does, and of two calls starting at one byte the inner one has the shorter callee."""
    refs = []
    text = src.text if src.ascii else None
    for node in sorted(callees, key=attrgetter("byte_range")):  # unordered
        callee: str | None = text[node.start_byte : node.end_byte] if text is not None else _text(node, src)
        if not _PLAIN_CALLEE.fullmatch(callee or ""):
            call = node.parent
            callee = _callee(call, spec, src) if call is not None else None
        if callee:
            src_id = owner(node.start_byte)
            line = node.start_point[0] + 1
            if "." not in callee:  # a bare name: no receiver to type
                refs.append(Ref(src_id, "calls", callee, line))
            else:
                for typed in receivers.rewrite(src_id, callee):
                    refs.append(Ref(src_id, "calls", typed, line))
    return refs


# What names a Python class for ``_Receivers``, one capture a shape, matched in the same pass as the definitions:
# x = Lexer(...); x: Lexer; self.x = Lexer(...); self.x: Lexer; def f(x: Lexer); def f(x: Lexer = ...);
# with Lexer(...) as x. ``_python_receivers`` reads the names out of each captured node.
_CTOR = "[(identifier) (attribute)]"
_SELF_ATTR = "(attribute object: (identifier) attribute: (identifier))"
_RECEIVER_PATTERNS = f"""
(assignment left: (identifier) right: (call function: {_CTOR})) @recv.call
(assignment left: (identifier) type: (type {_CTOR})) @recv.type
(assignment left: {_SELF_ATTR} right: (call function: {_CTOR})) @recv.attr_call
(assignment left: {_SELF_ATTR} type: (type {_CTOR})) @recv.attr_type
(typed_parameter (identifier) type: (type {_CTOR})) @recv.param
(typed_default_parameter name: (identifier) type: (type {_CTOR})) @recv.default
(with_item value: (as_pattern (call function: {_CTOR}) alias: (as_pattern_target (identifier)))) @recv.with
"""
_RECEIVER_SELF = ("self", "cls")
_CTOR_TYPES = ("identifier", "attribute")


@dataclass
class _Receivers:
    """What class a Python name holds, where the source says so: ``x = Lexer(...)``, ``x: Lexer``, a parameter
    annotated ``x: Lexer``, ``with Lexer(...) as x``, and per class ``self.x = Lexer(...)`` (or ``self.x: Lexer``, or
    ``x: Lexer`` in the class body). A call ``x.tokenize()`` (``self.x.tokenize()``) is then recorded as
    ``Lexer.tokenize``, which the resolver can find where ``x.tokenize`` named nothing. Only names whose last part is
    capitalized count as classes (``x = make()`` says nothing about ``x``)."""

    local: dict[str, dict[str, set[str]]]  # capsule id -> variable -> class names
    attrs: dict[str, dict[str, set[str]]]  # class capsule id -> attribute -> class names
    parents: dict[str, tuple[str | None, str]]  # capsule id -> (parent id, kind)
    local_names: set[str] = field(default_factory=set)  # every variable in ``local``: most calls name none of them
    attr_names: set[str] = field(default_factory=set)  # every attribute in ``attrs``

    def rewrite(self, src_id: str, name: str) -> list[str]:
        parts = name.split(".")
        found: set[str] = set()
        if len(parts) == 2:
            if parts[0] not in self.local_names:
                return [name]
            cid: str | None = src_id
            while cid is not None and not found:  # the function, then the functions enclosing it (closures)
                parent, kind = self.parents.get(cid, (None, "module"))
                if kind == "class":
                    break
                found = self.local.get(cid, {}).get(parts[0], set())
                cid = parent
        elif len(parts) == 3 and parts[0] in _RECEIVER_SELF:
            if parts[1] not in self.attr_names:
                return [name]
            cid = src_id
            while cid is not None and self.parents.get(cid, (None, ""))[1] != "class":
                cid = self.parents.get(cid, (None, ""))[0]
            found = self.attrs.get(cid, {}).get(parts[1], set()) if cid else set()
        return [f"{c}.{parts[-1]}" for c in sorted(found)] or [name]


def _receiver_names(shape: str, node: Node) -> list[tuple[Node, Node, Node | None]]:
    """(variable, class expression, object or None) for each way ``node``, captured as ``shape``, names a class."""
    if shape == "param":  # typed_parameter: its identifiers before the type
        t = node.child_by_field_name("type")
        ctors = [c for c in t.named_children if c.type in _CTOR_TYPES] if t is not None else []
        limit = t.start_byte if t is not None else node.end_byte
        names = [c for c in node.named_children if c.type == "identifier" and c.end_byte <= limit]
        return [(v, c, None) for v in names for c in ctors]
    if shape == "default":
        t = node.child_by_field_name("type")
        v = node.child_by_field_name("name")
        ctors = [c for c in t.named_children if c.type in _CTOR_TYPES] if t is not None else []
        return [(v, c, None) for c in ctors] if v is not None else []
    if shape == "with":
        pattern = node.child_by_field_name("value")
        if pattern is None:
            return []
        alias = pattern.child_by_field_name("alias")
        if alias is None:
            return []
        calls = [c for c in pattern.named_children if c.type == "call" and c.end_byte <= alias.start_byte]
        ctors = [
            f for f in (c.child_by_field_name("function") for c in calls) if f is not None and f.type in _CTOR_TYPES
        ]
        names = [c for c in alias.named_children if c.type == "identifier"]
        return [(v, c, None) for v in names for c in ctors]
    left = node.child_by_field_name("left")
    if left is None:
        return []
    obj: Node | None = None
    var: Node | None = left
    if shape in ("attr_call", "attr_type"):
        obj, var = left.child_by_field_name("object"), left.child_by_field_name("attribute")
        if obj is None or var is None:
            return []
    if shape in ("call", "attr_call"):
        right = node.child_by_field_name("right")
        f = right.child_by_field_name("function") if right is not None else None
        ctors = [f] if f is not None else []
    else:
        t = node.child_by_field_name("type")
        ctors = [c for c in t.named_children if c.type in _CTOR_TYPES] if t is not None else []
    return [(var, c, obj) for c in ctors] if var is not None else []


def _python_receivers(captures: dict[str, list[Node]], src: _Source, owner, capsules: list[Capsule]) -> _Receivers:
    parents = {c.id: (c.parent, c.kind) for c in capsules}
    local: dict[str, dict[str, set[str]]] = {}
    attrs: dict[str, dict[str, set[str]]] = {}
    for shape in ("call", "type", "attr_call", "attr_type", "param", "default", "with"):
        for node in captures.get(f"recv.{shape}", ()):
            for var, ctor, obj in _receiver_names(shape, node):
                cls = _WS.sub("", _text(ctor, src))
                if not cls or not cls.rsplit(".", 1)[-1][:1].isupper():
                    continue
                where = owner(var.start_byte)
                name = _text(var, src)
                kind = parents.get(where, (None, "module"))[1]
                if obj is not None:  # self.x = Lexer(...): an attribute of the method's class
                    if _text(obj, src) not in _RECEIVER_SELF:
                        continue
                    cid = parents.get(where, (None, ""))[0]
                    if cid is None or parents.get(cid, (None, ""))[1] != "class":
                        continue
                    attrs.setdefault(cid, {}).setdefault(name, set()).add(cls)
                elif kind == "class":  # x: Lexer in a class body (dataclasses, attrs)
                    attrs.setdefault(where, {}).setdefault(name, set()).add(cls)
                elif kind in ("function", "method"):
                    local.setdefault(where, {}).setdefault(name, set()).add(cls)
    local_names = {v for names in local.values() for v in names}
    attr_names = {a for names in attrs.values() for a in names}
    return _Receivers(local, attrs, parents, local_names, attr_names)


def _count_errors(root: Node) -> int:
    count = 0
    cursor = root.walk()
    stack = [root]
    while stack:
        n = stack.pop()
        if n.is_error or n.is_missing:
            count += 1
            continue
        if n.has_error:
            stack.extend(n.children)
    del cursor
    return count


def own_text(capsule: Capsule, children: list[Capsule]) -> str:
    """A class's own words for the lexical index: its text with member bodies elided (their first
    lines kept), so a class is found for what it says, not for everything its methods say."""
    if not children:
        return capsule.text
    lines = capsule.text.split("\n")
    drop = [False] * len(lines)
    for ch in children:
        for ln in range(ch.start_line + 1, ch.end_line + 1):
            i = ln - capsule.start_line
            if 0 <= i < len(lines):
                drop[i] = True
    return "\n".join(ln for ln, d in zip(lines, drop, strict=True) if not d)


def lexical_bodies(capsules: list[Capsule]) -> dict[str, str]:
    """What BM25 reads as a class's body: its own lines, not its methods' (they are indexed themselves)."""
    children: dict[str, list[Capsule]] = {}
    for c in capsules:
        if c.parent:
            children.setdefault(c.parent, []).append(c)
    return {c.id: own_text(c, children.get(c.id, [])) for c in capsules if c.kind == "class"}
