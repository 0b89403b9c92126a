"""Per-language capsule extraction: one realistic fixture per language under tests/fixtures/langs/."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pytest

from repoctx.capsules.parse import ParsedFile, parse_source

FIXTURES = Path(__file__).parent / "fixtures" / "langs"
MOD = "<module>"


@dataclass
class Expect:
    file: str
    language: str
    capsules: set[tuple[str, str]]  # exact set of (kind, qualname), module capsule excluded
    docs: dict[str, str]  # qualname -> first docstring line
    nodocs: set[str] = field(default_factory=set)  # qualnames that must have no docstring
    func: tuple[str, list[str], str] = ("", [], "")  # qualname, params, returns
    lines: tuple[str, int, int] = ("", 0, 0)  # qualname, start_line, end_line
    calls: set[tuple[str, str]] = field(default_factory=set)  # (source qualname, callee as written)
    imports: set[str] = field(default_factory=set)
    inherits: set[tuple[str, str]] = field(default_factory=set)  # (class qualname, base)


CASES = [
    Expect(
        "sample.py", "python",
        {("class", "Base"), ("class", "Server"), ("method", "Server.__init__"), ("method", "Server.start"),
         ("function", "helper")},
        docs={"Base": "Base server.", "Server": "A tiny server.", "Server.__init__": "Create a server.",
              "Server.start": "Start serving.", "helper": "Check a port."},
        func=("helper", ["port: int", "verbose: bool = False"], "bool"),
        lines=("Server.start", 20, 22),
        calls={("Server.start", "helper"), ("helper", "os.path.exists")},
        imports={"os", "collections.OrderedDict"},
        inherits={("Server", "Base")},
    ),
    Expect(
        "sample.js", "javascript",
        {("class", "Base"), ("class", "Server"), ("method", "Server.constructor"), ("method", "Server.start"),
         ("function", "helper"), ("function", "format")},
        docs={"Base": "Base server.", "Server": "A tiny server.", "Server.constructor": "Create a server.",
              "Server.start": "Start serving.", "helper": "Check a port.", "format": "Format a port as text."},
        func=("format", ["port"], ""),
        lines=("Server", 11, 22),
        calls={("Server.start", "helper"), ("helper", "readFile"), ("helper", "String")},
        imports={"fs"},
        inherits={("Server", "Base")},
    ),
    Expect(
        "sample.ts", "typescript",
        {("class", "Startable"), ("method", "Startable.start"), ("class", "Base"), ("class", "Server"),
         ("method", "Server.constructor"), ("method", "Server.start"), ("function", "helper")},
        docs={"Startable": "Something that can start.", "Base": "Base server.", "Server": "A tiny server.",
              "Server.constructor": "Create a server.", "Server.start": "Start serving.",
              "helper": "Check a port."},
        func=("helper", ["port: number", "verbose: boolean = false"], "boolean"),
        lines=("helper", 29, 31),
        calls={("Server.start", "helper"), ("helper", "readFileSync")},
        imports={"fs"},
        inherits={("Server", "Base"), ("Server", "Startable")},
    ),
    Expect(
        "sample.tsx", "tsx",
        {("class", "Props"), ("class", "Base"), ("class", "Server"), ("method", "Server.start"),
         ("method", "Server.render"), ("function", "helper"), ("function", "Panel")},
        docs={"Base": "Base component.", "Server": "A server panel.", "Server.start": "Start serving.",
              "Server.render": "Render the panel.", "helper": "Check a port.", "Panel": "Panel for a port."},
        nodocs={"Props"},
        func=("helper", ["port: number", "verbose?: boolean"], "boolean"),
        lines=("Server.render", 20, 22),
        calls={("Server.start", "helper")},
        imports={"react"},
        inherits={("Base", "React.Component"), ("Server", "Base")},
    ),
    Expect(
        "sample.go", "go",
        {("class", "Server"), ("method", "Server.Start"), ("method", "Server.Stop"), ("function", "Helper")},
        docs={"Server": "Server serves things.", "Server.Start": "Start starts serving.",
              "Server.Stop": "Stop stops serving.", "Helper": "Helper checks a port."},
        func=("Helper", ["port int", "verbose bool"], "error"),
        lines=("Server.Start", 15, 17),
        calls={("Server.Start", "Helper"), ("Server.Stop", "fmt.Println"), ("Helper", "strings.TrimSpace")},
        imports={"fmt", "strings"},
    ),
    Expect(
        "Server.java", "java",
        {("class", "Base"), ("class", "Server"), ("method", "Server.Server"), ("method", "Server.start"),
         ("method", "Server.run"), ("method", "Server.helper")},
        docs={"Base": "Base server.", "Server": "A tiny server.", "Server.Server": "Create a server.",
              "Server.start": "Start serving.", "Server.helper": "Check a port."},
        nodocs={"Server.run"},
        func=("Server.helper", ["int port", "boolean verbose"], "boolean"),
        lines=("Server.helper", 31, 34),
        calls={("Server.start", "helper"), ("Server.run", "start"), ("Server.helper", "List.of")},
        imports={"java.util.List"},
        inherits={("Server", "Base"), ("Server", "Runnable")},
    ),
    Expect(
        "sample.rs", "rust",
        {("class", "Startable"), ("method", "Startable.start"), ("class", "Server"), ("method", "Server.new"),
         ("method", "Server.start"), ("class", "Pool"), ("method", "Pool.len"), ("function", "helper")},
        docs={"Startable": "Something that can start.", "Server": "A tiny server.",
              "Server.new": "Create a server.", "Server.start": "Start serving.", "Pool": "A pool of servers.",
              "Pool.len": "Number of pooled items.", "helper": "Check a port."},
        func=("helper", ["port: u16", "verbose: bool"], "bool"),
        lines=("Server.new", 16, 18),
        calls={("Server.start", "helper"), ("helper", "HashMap.new"), ("helper", "seen.insert")},
        imports={"std.collections.HashMap"},
        inherits={("Startable", "std.fmt.Debug"), ("Server", "Startable")},
    ),
    Expect(
        "sample.c", "c",
        {("class", "server"), ("class", "options_t"), ("function", "helper"), ("function", "server_start"),
         ("function", "server_find")},
        docs={"server": "A tiny server.", "options_t": "Server options.", "helper": "Check a port.",
              "server_start": "Start serving.", "server_find": "Find a server by port."},
        func=("helper", ["int port", "const char *name"], "int"),
        lines=("server_start", 23, 26),
        calls={("server_start", "helper"), ("helper", "printf")},
        imports={"stdio.h", "server.h"},
    ),
    Expect(
        "sample.cpp", "cpp",
        {("class", "net.Base"), ("method", "net.Base.~Base"), ("class", "net.Server"),
         ("method", "net.Server.start"), ("method", "net.Server.stop"), ("function", "net.helper"),
         ("function", "net.largest"), ("function", "main")},
        docs={"net.Base": "Base server.", "net.Server": "A tiny server.", "net.Server.start": "Start serving.",
              "net.Server.stop": "Stop serving.", "net.helper": "Check a port.",
              "net.largest": "Largest of two values.", "main": "Entry point."},
        func=("net.helper", ["int port", "const std::string &name"], "bool"),
        lines=("net.Server.stop", 27, 29),
        calls={("net.Server.start", "helper"), ("net.helper", "name.empty"), ("main", "s.start")},
        imports={"string", "base.h"},
        inherits={("net.Server", "Base")},
    ),
    Expect(
        "Sample.cs", "csharp",
        {("class", "Sample.Base"), ("class", "Sample.Server"), ("method", "Sample.Server.Server"),
         ("method", "Sample.Server.Start"), ("method", "Sample.Server.Dispose"),
         ("method", "Sample.Server.Helper")},
        docs={"Sample.Base": "Base server.", "Sample.Server": "A tiny server.",
              "Sample.Server.Server": "Create a server.", "Sample.Server.Start": "Start serving.",
              "Sample.Server.Helper": "Check a port."},
        nodocs={"Sample.Server.Dispose"},
        func=("Sample.Server.Helper", ["int port", "bool verbose"], "bool"),
        lines=("Sample.Server.Start", 23, 26),
        calls={("Sample.Server.Start", "Helper"), ("Sample.Server.Helper", "Console.WriteLine")},
        imports={"System", "System.Collections.Generic"},
        inherits={("Sample.Server", "Base"), ("Sample.Server", "IDisposable")},
    ),
    Expect(
        "sample.rb", "ruby",
        {("class", "Base"), ("class", "Server"), ("method", "Server.initialize"), ("method", "Server.start"),
         ("function", "helper")},
        docs={"Base": "Base server.", "Server": "A tiny server.", "Server.initialize": "Create a server.",
              "Server.start": "Start serving.", "helper": "Check a port."},
        func=("helper", ["port", "verbose = false"], ""),
        lines=("Server", 9, 19),
        calls={("Server.start", "helper"), ("helper", "JSON.generate")},
        imports={"json", "base"},
        inherits={("Server", "Base")},
    ),
    Expect(
        "sample.php", "php",
        {("class", "App.Base"), ("class", "App.Server"), ("method", "App.Server.__construct"),
         ("method", "App.Server.start"), ("method", "App.Server.jsonSerialize"), ("function", "App.helper")},
        docs={"App.Base": "Base server.", "App.Server": "A tiny server.",
              "App.Server.__construct": "Create a server.", "App.Server.start": "Start serving.",
              "App.helper": "Check a port."},
        nodocs={"App.Server.jsonSerialize"},
        func=("App.helper", ["int $port", "bool $verbose = false"], "bool"),
        lines=("App.Server.start", 21, 24),
        calls={("App.Server.start", "helper"), ("App.helper", "Logger.info")},
        imports={"App.Support.Logger"},
        inherits={("App.Server", "Base"), ("App.Server", "JsonSerializable")},
    ),
]


def _parse(case: Expect) -> ParsedFile:
    return parse_source(case.file, (FIXTURES / case.file).read_text(), case.language)


def _qual(pf: ParsedFile) -> dict[str, str]:
    """capsule id -> qualname (MOD for the module capsule)."""
    return {c.id: (MOD if c.kind == "module" else c.qualname) for c in pf.capsules}


@pytest.mark.parametrize("case", CASES, ids=[c.language for c in CASES])
def test_language_fixture(case: Expect):
    pf = _parse(case)
    assert pf.syntax_errors == 0
    assert pf.method == "tree-sitter"
    mods = [c for c in pf.capsules if c.kind == "module"]
    assert len(mods) == 1 and mods[0].start_line == 1
    assert len({c.id for c in pf.capsules}) == len(pf.capsules)

    got = {(c.kind, c.qualname) for c in pf.capsules if c.kind != "module"}
    assert got == case.capsules

    by_q: dict = {}
    for c in pf.capsules:  # first definition wins (Rust: inherent `Server.start` before the trait impl's)
        if c.kind != "module":
            by_q.setdefault(c.qualname, c)
    for q, first in case.docs.items():
        assert by_q[q].docstring.splitlines()[0].strip() == first, q
    for q in case.nodocs:
        assert by_q[q].docstring == "", q

    q, params, returns = case.func
    assert by_q[q].params == params
    assert by_q[q].returns == returns

    q, start, end = case.lines
    assert (by_q[q].start_line, by_q[q].end_line) == (start, end)
    assert by_q[q].text.splitlines()[0].strip() and by_q[q].text.count("\n") == end - start

    # methods hang off their type even when defined outside its body (Go receivers, Rust impl, C++ A::f)
    ids = {c.qualname: c.id for c in pf.capsules if c.kind == "class"}
    for c in pf.capsules:
        if c.kind == "method":
            assert c.parent == ids[c.qualname.rsplit(".", 1)[0]], c.qualname

    names = _qual(pf)
    refs = {(r.kind, names[r.src], r.name) for r in pf.refs}
    for src, callee in case.calls:
        assert ("calls", src, callee) in refs
    assert {r.name for r in pf.refs if r.kind == "imports"} >= case.imports
    inherits = {(s, n) for k, s, n in refs if k == "inherits"}
    assert inherits == case.inherits


def test_every_language_has_a_fixture():
    from repoctx.capsules.langs import SPECS
    assert {c.language for c in CASES} == set(SPECS)


def test_ref_lines_point_at_the_reference():
    case = next(c for c in CASES if c.language == "go")
    pf = _parse(case)
    lines = (FIXTURES / case.file).read_text().splitlines()
    for r in pf.refs:
        if r.kind == "calls":
            assert r.name.split(".")[-1] in lines[r.line - 1]


BROKEN = {
    "python": ("def good(a):\n    return a\n\ndef broken(:\n    pass\n\nclass Intact:\n    def m(self):\n"
               "        return good(1)\n",
               {("function", "good"), ("class", "Intact"), ("method", "Intact.m")}),
    "java": ("class Intact {\n    int good() { return 1; }\n    void broken( { int x = ; }\n}\n"
             "class Later {\n    void ok() { }\n}\n",
             {("class", "Intact"), ("method", "Intact.good"), ("class", "Later"), ("method", "Later.ok")}),
    "go": ("package p\n\nfunc Good() int { return 1 }\n\nfunc Broken( { x := }\n\n"
           "type T struct{}\n\nfunc (t *T) Ok() {}\n",
           {("function", "Good"), ("class", "T"), ("method", "T.Ok")}),
}


@pytest.mark.parametrize("language", sorted(BROKEN))
def test_syntax_errors_keep_intact_definitions(language: str):
    text, intact = BROKEN[language]
    pf = parse_source(f"broken.{language}", text, language)
    assert pf.syntax_errors > 0
    got = {(c.kind, c.qualname) for c in pf.capsules if c.kind != "module"}
    assert intact <= got


EDGE = [
    # Go generic receiver: Stack[T] → Stack, not T
    ("go", "package p\n// Stack is a stack.\ntype Stack[T any] struct{ items []T }\n\n// Push pushes.\n"
           "func (s *Stack[T]) Push(v T) { s.items = append(s.items, v) }\n",
     {("class", "Stack"), ("method", "Stack.Push")}, {"Stack.Push": "Push pushes.", "Stack": "Stack is a stack."}, set()),
    # C# file-scoped namespace qualifies like a block namespace; type arguments are not bases
    ("csharp", "namespace A.B;\n\n/// <summary>S.</summary>\npublic class S : List<int>, IComparable<S>\n{\n"
               "    public void F() { }\n}\n",
     {("class", "A.B.S"), ("method", "A.B.S.F")}, {"A.B.S": "S."}, {"List", "IComparable"}),
    # Java generics in extends/implements; a trailing comment is not the next member's doc
    ("java", "class A<T> extends B<T> implements Comparable<A<T>> {\n    int x = 1; // counter\n"
             "    void f() {}\n}\n",
     {("class", "A"), ("method", "A.f")}, {"A.f": ""}, {"B", "Comparable"}),
    # PHP braced namespace with backslash separators
    ("php", "<?php\nnamespace A\\B {\n    class C extends \\X\\D {\n        function f() {}\n    }\n}\n",
     {("class", "A.B.C"), ("method", "A.B.C.f")}, {}, {"X.D"}),
    # C++ out-of-class template member, and operator< is not mangled by generic stripping
    ("cpp", "template <typename T> struct Box { T get(); };\n\n/// Get it.\ntemplate <typename T>\n"
            "T Box<T>::get() { return T(); }\n\nbool operator<(const Box<int> &a, const Box<int> &b) "
            "{ return false; }\n",
     {("class", "Box"), ("method", "Box.get"), ("function", "operator<")}, {"Box.get": "Get it."}, set()),
    # C: a struct named in a return type or parameter is not a definition
    ("c", "struct s;\nstruct s *make(struct s *p) { return p; }\n",
     {("function", "make")}, {}, set()),
]


@pytest.mark.parametrize("language,text,capsules,docs,bases", EDGE, ids=[e[0] for e in EDGE])
def test_language_edge_cases(language, text, capsules, docs, bases):
    pf = parse_source(f"edge.{language}", text, language)
    assert pf.syntax_errors == 0
    assert {(c.kind, c.qualname) for c in pf.capsules if c.kind != "module"} == capsules
    by_q = {c.qualname: c for c in pf.capsules}
    for q, first in docs.items():
        assert (by_q[q].docstring.splitlines() or [""])[0].strip() == first, q
    assert {r.name for r in pf.refs if r.kind == "inherits"} == bases
    for c in pf.capsules:
        if c.kind == "method":
            assert c.parent == by_q[c.qualname.rsplit(".", 1)[0]].id
