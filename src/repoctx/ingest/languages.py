"""File name → language. Grammar languages get tree-sitter capsules; the rest are text for windows."""

from __future__ import annotations

import re
from functools import lru_cache

# a test's path (what a search demotes and the vector fill embeds after code)
_TEST_PATH = re.compile(
    r"(^|/)(tests?|testing)/|(^|/)test_[^/]*$|_tests?\.py$|(^|/)conftest\.py$"
    # other languages' conventions: Go/Rust/C _test files, JS/TS *.test.* / *.spec.* and
    # __tests__, Ruby specs, Java/Kotlin/C#/Swift *Test(s) classes
    r"|(^|/)(__tests__|__mocks__)/|_test\.(go|rs|c|cc|cpp|exs?)$|\.(test|spec)\.[cm]?[jt]sx?$"
    r"|(^|/)spec/.*_spec\.rb$|Tests?\.(java|kt|cs|swift)$"
)


@lru_cache(maxsize=1 << 16)
def is_test_path(path: str) -> bool:
    return bool(_TEST_PATH.search(path))


GRAMMAR_EXT: dict[str, str] = {
    ".py": "python",
    ".pyi": "python",
    ".js": "javascript",
    ".mjs": "javascript",
    ".cjs": "javascript",
    ".jsx": "javascript",
    ".ts": "typescript",
    ".mts": "typescript",
    ".cts": "typescript",
    ".tsx": "tsx",
    ".go": "go",
    ".java": "java",
    ".rs": "rust",
    ".c": "c",
    ".h": "c",
    ".cc": "cpp",
    ".cpp": "cpp",
    ".cxx": "cpp",
    ".hpp": "cpp",
    ".hh": "cpp",
    ".hxx": "cpp",
    ".cs": "csharp",
    ".rb": "ruby",
    ".php": "php",
    ".kt": "kotlin",
    ".kts": "kotlin",
    ".swift": "swift",
    ".scala": "scala",
    ".sh": "bash",
    ".bash": "bash",
}
# Searchable as text windows (LangChain splitter language where it has one).
TEXT_EXT: dict[str, str] = {
    ".md": "markdown",
    ".markdown": "markdown",
    ".rst": "rst",
    ".txt": "text",
    ".yaml": "yaml",
    ".yml": "yaml",
    ".toml": "toml",
    ".json": "json",
    ".ini": "ini",
    ".cfg": "ini",
    ".sql": "sql",
    ".html": "html",
    ".htm": "html",
    ".css": "css",
    ".scss": "css",
    ".xml": "xml",
    ".proto": "proto",
    ".lua": "lua",
    ".pl": "perl",
    ".r": "r",
    ".ex": "elixir",
    ".exs": "elixir",
    ".hs": "haskell",
    ".sol": "sol",
    ".cob": "cobol",
    ".ps1": "powershell",
    ".vue": "html",
    ".tex": "latex",
    ".graphql": "text",
    ".tf": "text",
    ".gradle": "text",
}
NAMED: dict[str, str] = {
    "Dockerfile": "dockerfile",
    "Makefile": "make",
    "makefile": "make",
    "CMakeLists.txt": "cmake",
    "Gemfile": "ruby",
    "Rakefile": "ruby",
    "BUILD": "text",
    "WORKSPACE": "text",
}


def language_of(path: str) -> str | None:
    """The language of a repository path, or None when repoctx does not index that kind of file."""
    # string operations, not PurePosixPath: this runs for every file of every walk (a third of the walk of
    # Django, which every update makes)
    name = path.rsplit("/", 1)[-1]
    if name in NAMED:
        return NAMED[name]
    dot = name.rfind(".")
    if dot <= 0:  # no suffix, or a dot-file such as ".bashrc" (what PurePosixPath.suffix says too)
        return None
    ext = name[dot:].lower()
    return GRAMMAR_EXT.get(ext) or TEXT_EXT.get(ext)


def has_grammar(language: str) -> bool:
    return language in set(GRAMMAR_EXT.values())
