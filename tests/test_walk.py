import os

from repoctx.config import Settings
from repoctx.ingest.walk import WalkReport, load_text, redact, walk
from tests.conftest import open_index


def paths(root, **kw):
    report = WalkReport()
    return sorted(f.path for f in walk(root, Settings(**kw), report)), report


def test_nested_gitignore_and_excludes(make_repo):
    root = make_repo({
        ".gitignore": "*.log\nbuild_out/\n/top_only.py\n",
        "a.py": "x = 1\n", "debug.log": "no\n", "top_only.py": "no\n",
        "sub/top_only.py": "yes: root-anchored rule applies only at the top\n",
        "sub/.gitignore": "!keep.log\nsecret_dir/\n*.tmp.py\n",
        "sub/keep.log": "kept\n", "sub/other.log": "ignored\n", "sub/b.py": "y = 2\n",
        "sub/x.tmp.py": "ignored\n", "sub/secret_dir/c.py": "ignored\n",
        "sub/deeper/.gitignore": "!*.tmp.py\n", "sub/deeper/z.tmp.py": "re-included by the deeper file\n",
        "build_out/gen.py": "ignored\n",
        "node_modules/lib/index.js": "ignored\n", "vendor/x.go": "package x\n",
        ".git/info/exclude": "excluded.py\n", ".git/config": "[core]\n", "excluded.py": "no\n",
        ".repoctxignore": "docs/private/\n", "docs/private/p.md": "# private\n", "docs/public.md": "# public\n",
        "venv_custom/pyvenv.cfg": "home = /usr\n", "venv_custom/lib/site.py": "no\n",
        "app.min.js": "var a=1;\n",
    })
    found, report = paths(root)
    assert found == ["a.py", "docs/public.md", "sub/b.py", "sub/deeper/z.tmp.py", "sub/top_only.py"]
    assert ("app.min.js", "generated") in report.skipped


def test_an_output_folder_name_that_is_a_package_is_source(make_repo):
    """coverage.py's own code lives in coverage/, pypa/build's in src/build/: a folder holding __init__.py is the
    project's package; the same names without one are generated output (reports, wheels, compiled trees)."""
    root = make_repo({
        "coverage/__init__.py": "", "coverage/parser.py": "def parse(): pass\n",
        "src/build/__init__.py": "", "src/build/env.py": "def make_env(): pass\n",
        "web/coverage/lcov-report/prettify.js": "var a = 1;\n", "build/lib/pkg/mod.py": "x = 1\n",
        "dist/pkg/mod.py": "x = 1\n", "target/debug/build.rs": "fn main() {}\n",
        "vendor/__init__.py": "", "vendor/six.py": "x = 1\n",
    })
    found, _ = paths(root)
    assert found == ["coverage/__init__.py", "coverage/parser.py", "src/build/__init__.py", "src/build/env.py"]


def test_secrets_not_indexed_and_redacted(make_repo):
    key = "-----BEGIN RSA PRIVATE KEY-----\nMIIEabc\ndef\n-----END RSA PRIVATE KEY-----"
    root = make_repo({
        ".env": "TOKEN=abc\n", ".env.production": "X=1\n", "certs/server.pem": "x\n", "id_rsa": "x\n",
        "config.py": f'AWS_KEY = "AKIAABCDEFGHIJKLMNOP"\npassword = "hunter2hunter2"\nKEY = """{key}"""\n\ndef f():\n    return 1\n',
    })
    found, report = paths(root)
    assert found == ["config.py"]
    assert {p for p, r in report.skipped if r.startswith("secret")} == {".env", ".env.production", "certs/server.pem", "id_rsa"}
    ix = open_index(root)
    ix.update()
    text = " ".join(c.text for c in ix.store.all_capsules())
    assert "AKIAABCDEFGHIJKLMNOP" not in text and "hunter2hunter2" not in text and "MIIEabc" not in text
    f = ix.find("f")[0]
    assert f.start_line == 8  # redaction keeps line numbers true
    assert ix.search("AKIAABCDEFGHIJKLMNOP") == [] or all("AKIA" not in h.capsule.text for h in ix.search("AKIAABCDEFGHIJKLMNOP"))


def test_redact_keeps_lines():
    text, n = redact("a\n-----BEGIN PRIVATE KEY-----\nx\ny\n-----END PRIVATE KEY-----\nb")
    assert n == 1 and text.count("\n") == 5 and "x" not in text.split("\n")[2]


def test_binary_huge_invalid_utf8_syntax_errors_reported_never_fatal(make_repo):
    root = make_repo({
        "bin.py": b"\x00\x01\x02binary",
        "big.py": "x = 1\n" * 50_000,
        "latin.py": "def cafe():\n    return 'na\xefve'\n".encode("latin-1") + b"\ndef ok():\n    pass\n",
        "broken.py": "def good():\n    return 1\n\ndef bad(:\n    pass\n\nclass Fine:\n    def m(self):\n        return 2\n",
        "fine.py": "def f():\n    return 1\n",
    })
    ix = open_index(root, max_file_bytes=100_000)
    report = ix.update()
    reasons = dict(report.skipped)
    assert reasons["bin.py"] == "binary"
    assert reasons["big.py"].startswith("too large")
    assert report.invalid_utf8 == ["latin.py"]
    assert report.syntax_errors == ["broken.py"]
    quals = {c.qualname for c in ix.store.all_capsules()}
    assert {"good", "Fine", "Fine.m", "f", "ok"} <= quals
    assert ix.search("good")[0].capsule.qualname == "good"


def test_symlinks_stay_inside_root(make_repo, tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "leak.py").write_text("SECRET = 1\n")
    root = make_repo({"a.py": "x = 1\n", "pkg/b.py": "y = 2\n"})
    os.symlink(outside, root / "out_link")
    os.symlink(outside / "leak.py", root / "leak_link.py")
    os.symlink(root / "pkg", root / "pkg" / "loop")
    os.symlink(root / "pkg" / "b.py", root / "inside_link.py")
    found, report = paths(root)
    assert "out_link/leak.py" not in found and "leak_link.py" not in found
    assert "inside_link.py" in found and "pkg/b.py" in found
    assert not any(p.startswith("pkg/loop/") for p in found)
    reasons = dict(report.skipped)
    assert reasons["out_link"] == "symlink: outside root" and reasons["leak_link.py"] == "symlink: outside root"


def test_a_folder_link_does_not_hide_the_real_folder(make_repo):
    """A link that sorts before its target must not make the real folder look like a loop."""
    root = make_repo({"real/mod.py": "def f():\n    return 1\n"})
    os.symlink(root / "real", root / "alias")
    found, report = paths(root)
    assert "real/mod.py" in found and "alias/mod.py" not in found
    reasons = dict(report.skipped)
    assert "real" not in reasons and reasons["alias"].startswith("symlink to a folder inside")


def test_load_text_detects_binary_and_bad_utf8():
    assert load_text(b"abc\x00def") is None
    lt = load_text(b"ok \xff\xfe here")
    assert lt.invalid_utf8 and "\ufffd" in lt.text


def test_an_ignore_file_line_git_passes_over_does_not_stop_the_walk(tmp_path):
    """black's test data has a .gitignore with a lone '!': pathspec refuses it, git ignores the line; the walk
    must keep the file's other rules and go on (it raised GitIgnorePatternError and the index failed)."""
    from repoctx.ingest.walk import walk

    root = tmp_path / "r"
    (root / "data").mkdir(parents=True)
    (root / "data" / ".gitignore").write_text("!\n*.log\n")
    (root / "data" / "keep.py").write_text("x = 1\n")
    (root / "data" / "drop.log").write_text("noise\n")
    (root / "main.py").write_text("y = 2\n")
    found = walk(root)
    paths = {getattr(f, "rel", None) or getattr(f, "path", None) for f in getattr(found, "files", found)}
    assert {"data/keep.py", "main.py"} <= {str(p) for p in paths} and "data/drop.log" not in {str(p) for p in paths}
