"""A query that is a name puts that definition first: an identifier, a dotted ``Class.method`` (whatever number of
other classes define a method of that name), a module-qualified name, or a path (its file's module unit).
``bench/exact_names.py`` measures the same on three real trees."""
from __future__ import annotations

import pytest

from repoctx import Index, Settings
from repoctx.render import why_text
from repoctx.retrieve.hybrid import (
    FRAMES,
    SearchOptions,
    exact_hits,
    file_aggregation,
    named_files,
    names_only,
    to_files,
    written_units,
)
from repoctx.store.base import Scope
from repoctx.retrieve.query import mentions
from repoctx.store.base import split_id
from tests.conftest import indexed, write_tree

TAG_CLASSES = ("PassDict", "PassList", "TagTuple", "TagBytes", "TagMarkup", "TagUUID", "TagDateTime", "TagDict",
               "TagList", "TagSet")

FILES = {
    "src/kit/__init__.py": '"""A small web kit."""\n',
    "src/kit/json/__init__.py": "",
    # ten classes with the same method names: the class whose name a dotted query starts with used to come first
    "src/kit/json/tag.py": '"""Tagged JSON."""\n\n\n' + "".join(
        f"class {name}(JSONTag):\n"
        f'    """Tag for the {name[3:] if name.startswith("Tag") else name[4:]} type."""\n\n'
        f"    key = '{name.lower()}'\n\n"
        f"    def check(self, value):\n        return isinstance(value, {name.lower()}_type)\n\n"
        f"    def to_json(self, value):\n        return self.serializer.tag({name.lower()}_encode(value))\n\n"
        f"    def to_python(self, value):\n        return {name.lower()}_decode(value)\n\n\n"
        for name in TAG_CLASSES) + "class JSONTag:\n    def check(self, value):\n        raise NotImplementedError\n",
    "src/kit/app.py": (
        '"""The application object."""\nfrom kit.helpers import make_response as _make\n\n\n'
        "class Kit:\n    \"\"\"The central object.\"\"\"\n\n"
        "    def make_response(self, rv):\n        \"\"\"Convert a view's return value into a response.\"\"\"\n"
        "        return _make(rv)\n\n"
        "    def dispatch_request(self, request):\n        \"\"\"Call the view for a request and make its response.\"\"\"\n"
        "        return self.make_response(self.view_functions[request.endpoint](request))\n"),
    "src/kit/helpers.py": (
        '"""Helpers for views."""\n\n\n'
        "def make_response(*args):\n    \"\"\"Make a response from a view's return value; the common helper.\"\"\"\n"
        "    return Response(*args)\n\n\n"
        "def url_for(endpoint, **values):\n    \"\"\"Build the URL of an endpoint; make_response uses it for redirects.\"\"\"\n"
        "    return '/' + endpoint\n"),
    "tests/test_app.py": ("from kit.app import Kit\n\n\ndef test_make_response():\n"
                          "    assert Kit().make_response('x') is not None\n"),
}


@pytest.fixture(scope="module")
def ix(tmp_path_factory):
    index = indexed(tmp_path_factory.mktemp("exact"), FILES, "kit", "idx")
    yield index
    index.close()


def first(ix: Index, query: str):
    return ix.search(query, k=5)[0].capsule


@pytest.mark.parametrize("name", ["PassDict.to_json", "TagUUID.to_json", "TagDateTime.check", "TagSet.to_python"])
def test_a_dotted_name_puts_that_method_first_among_namesakes(ix, name):
    c = first(ix, name)
    assert (c.qualname, c.path) == (name, "src/kit/json/tag.py")


@pytest.mark.parametrize("query, qualname, path", [
    ("kit.json.tag.TagUUID.to_json", "TagUUID.to_json", "src/kit/json/tag.py"),
    ("json.tag.PassList.check", "PassList.check", "src/kit/json/tag.py"),
    ("kit.helpers.make_response", "make_response", "src/kit/helpers.py"),
    ("kit.app.Kit.make_response", "Kit.make_response", "src/kit/app.py"),
])
def test_a_module_qualified_name_puts_that_definition_first(ix, query, qualname, path):
    c = first(ix, query)
    assert (c.qualname, c.path) == (qualname, path)


def test_a_class_and_method_does_not_name_a_function_of_another_module(ix):
    """``Kit.make_response`` is the method: the helper ``make_response`` only shares its last part."""
    hits = ix.search("Kit.make_response", k=5)
    assert hits[0].capsule.qualname == "Kit.make_response"
    assert hits[0].why["exact"]["rank"] == 1


@pytest.mark.parametrize("query, qualname", [("url_for", "url_for"), ("Kit", "Kit"), ("dispatch_request", "Kit.dispatch_request")])
def test_an_identifier_puts_its_definition_first(ix, query, qualname):
    assert first(ix, query).qualname == qualname


@pytest.mark.parametrize("query, path", [("src/kit/helpers.py", "src/kit/helpers.py"), ("kit/app.py", "src/kit/app.py"),
                                         ("json/tag.py", "src/kit/json/tag.py")])
def test_a_path_puts_its_module_unit_first(ix, query, path):
    c = first(ix, query)
    assert (c.path, c.kind) == (path, "module")


def test_a_package_prefix_names_a_definition_it_re_exports(tmp_path):
    """``models.Field.formfield``: Django code names a field by the package that re-exports it
    (``django/db/models/fields/__init__.py``); the package is in the module's path, in order."""
    root = write_tree(tmp_path / "dj", {
        "django/db/models/__init__.py": "from django.db.models.fields import Field\n",
        "django/db/models/fields/__init__.py": ("class Field:\n    def formfield(self, **kwargs):\n"
                                                "        return self.form_class(**kwargs)\n"),
        "django/forms/fields.py": "class Field:\n    def formfield(self):\n        return None\n",
    })
    index = Index(root, Settings(index_dir=tmp_path / "idx", embedder="none"))
    index.update()
    c = first(index, "models.Field.formfield")
    assert (c.qualname, c.path) == ("Field.formfield", "django/db/models/fields/__init__.py")
    assert first(index, "forms.fields.Field.formfield").path == "django/forms/fields.py"
    index.close()


def test_a_path_suffix_puts_the_file_with_fewest_folders_before_it_first(tmp_path):
    root = write_tree(tmp_path / "dj", {
        "django/db/backends/oracle/features.py": '"""Oracle features."""\nX = 1\n',
        # the longer path's words are what the question says, several times: only its path is worse
        "django/contrib/gis/db/backends/oracle/features.py": (
            '"""The features of the Oracle db backends: oracle features, backends features, db features."""\n'
            "DB_BACKENDS_ORACLE_FEATURES = 2\n"),
    })
    index = Index(root, Settings(index_dir=tmp_path / "idx", embedder="none"))
    index.update()
    assert first(index, "db/backends/oracle/features.py").path == "django/db/backends/oracle/features.py"
    assert first(index, "gis/db/backends/oracle/features.py").path == \
        "django/contrib/gis/db/backends/oracle/features.py"
    index.close()


@pytest.mark.parametrize("written, clean", [
    ('File "C:\\Python310\\lib\\site-packages\\sympy\\core\\mul.py", line 3', "sympy/core/mul.py"),
    ("/usr/lib/python3.10/site-packages/matplotlib/colors.py:730: DeprecationWarning", "matplotlib/colors.py"),
    ("File ~/.local/venvs/x/lib/python3.10/dist-packages/sklearn/utils/_set_output.py:150, in wrapped",
     "sklearn/utils/_set_output.py"),
    ("see https://github.com/o/r/blob/main/src/kit/app.py#L10", "github.com/o/r/blob/main/src/kit/app.py"),
    ("run ./manage.py migrate", "manage.py"),
    ("in django/db/models/query.py, line 9", "django/db/models/query.py"),
])
def test_a_path_is_read_as_an_issue_writes_it(written, clean):
    """Tracebacks name installed files under site-packages, Windows paths use backslashes, reports link to the code
    on GitHub: each is read as the path (or a path ending with the repository's path) the store can resolve."""
    assert mentions(written).paths == [clean]


@pytest.mark.parametrize("query, path", [
    ('File "/usr/lib/python3.10/site-packages/kit/app.py", line 9, in dispatch_request', "src/kit/app.py"),
    ("C:\\Users\\me\\venv\\Lib\\site-packages\\kit\\json\\tag.py", "src/kit/json/tag.py"),
    ("/home/me/checkouts/kit/src/kit/helpers.py", "src/kit/helpers.py"),
    ("https://github.com/me/kit/blob/main/src/kit/helpers.py#L3", "src/kit/helpers.py"),
])
def test_an_installed_absolute_or_linked_path_names_its_file(ix, query, path):
    """The exact lane resolves a path the report wrote from outside the tree: the part after ``site-packages``, or
    the longest repository path the written one ends with."""
    hits = exact_hits(ix.store, query, ix.scope())
    assert [split_id(cid)[1].rsplit("#", 1)[0] for cid, _, why in hits if why == "path"] == [path]


@pytest.mark.parametrize("query", ["./src/kit/app.py", "C:\\venv\\Lib\\site-packages\\kit\\app.py", "kit/app.py Kit.make_response"])
def test_a_path_written_any_way_is_a_query_of_names(query):
    """A query that is only a path, as a shell or a traceback writes it, ranks what it names first (exact_mode auto)."""
    assert names_only(query)


REPORT = (
    "Uploading a large file times out\n"
    "The upload form shows a timeout for big uploads: UploadForm.clean_upload, the upload size check and the upload "
    "form validation take too long for a large upload.\n"
    "Traceback (most recent call last):\n"
    '  File "/srv/app/venv/lib/python3.11/site-packages/shop/transfer.py", line 12, in send\n'
    "    raise TimeoutError\n"
)
SHOP = {
    "shop/__init__.py": "",
    "shop/upload_form.py": (
        "class UploadForm:\n    \"\"\"The upload form: validation of an upload, its size check.\"\"\"\n\n"
        "    def clean_upload(self, upload):\n        \"\"\"Validate the upload form's upload: a large upload fails "
        "the size check.\"\"\"\n        return check_upload_size(upload)\n\n\n"
        "def check_upload_size(upload):\n    \"\"\"The upload size check of the upload form.\"\"\"\n    return upload\n"),
    "shop/transfer.py": ("def send(chunk, timeout=5):\n    \"\"\"Send one chunk.\"\"\"\n    return chunk\n\n\n"
                         "def receive(chunk):\n    return chunk\n"),
}


def test_a_file_the_report_writes_a_path_for_moves_up_in_a_file_level_search(tmp_path):
    """A traceback's frame names the file the fix is in more often than the words around it do: the paths a report
    writes vote for their files (``hybrid.named_files``), and a file says which path named it. A question that names
    no path, and a path the scope hides, change nothing."""
    ix = indexed(tmp_path, SHOP, "shop", "idx")
    first_stage = to_files(ix.retrieve(REPORT, k=50, mode="standard").hits, file_aggregation("auto", REPORT))
    assert [f.path for f in first_stage][:2] == ["shop/upload_form.py", "shop/transfer.py"]
    got = ix.retrieve(REPORT, k=3, level="file", mode="standard")
    assert [f.path for f in got.files][0] == "shop/transfer.py"
    assert got.files[0].named == "shop/transfer.py" and got.files[0].to_dict()["named"] == "shop/transfer.py"
    assert any(e.step == "Paths" for e in got.events) and not any(e.step == "History" for e in got.events)
    assert ix.search(REPORT, k=3, level="file")[0].path == "shop/transfer.py"
    hidden = ix.search(REPORT, k=3, level="file", scope=Scope(exclude=("shop/transfer.py",)))
    assert [f.path for f in hidden][0] == "shop/upload_form.py" and all(not f.named for f in hidden)
    ix.close()


def test_a_unit_search_resolves_each_written_path_once(tmp_path, monkeypatch):
    """A report's written paths are resolved once a search: its exact and lines lanes and the file ranking that
    orders its first units (``Index._file_prior``) read one resolution, and that ranking hears the paths' vote."""
    ix = indexed(tmp_path, SHOP, "shop", "idx")
    calls: list[tuple[str, ...]] = []
    real = ix.store.by_path_suffix

    def counted(paths, scope):
        calls.append(tuple(paths))
        return real(paths, scope)

    monkeypatch.setattr(ix.store, "by_path_suffix", counted)
    voted: list[list[str]] = []
    real_named = Index.with_named

    def watched(self, query, files, scope, resolved=None):
        out, n = real_named(self, query, files, scope, resolved)
        voted.append([f.path for f in out if f.named])
        return out, n

    monkeypatch.setattr(Index, "with_named", watched)
    hits = ix.search(REPORT, k=5)
    assert hits and calls == [("shop/transfer.py",)]
    assert voted == [["shop/transfer.py"]]
    ix.close()


def test_a_traceback_s_many_frames_share_one_vote(tmp_path):
    """Ten frames vote a tenth as much for each file as one written path does for its file; a test file does not
    vote (a report names a test where the failure shows)."""
    files = {f"pkg/m{i}.py": f"def f{i}():\n    return {i}\n" for i in range(10)}
    ix = indexed(tmp_path, {**files, "tests/test_m3.py": "def test_f3():\n    assert True\n"}, "pkg", "idx")
    one, _ = named_files(ix.store, "see /usr/lib/site-packages/pkg/m3.py", ix.scope())
    ten, written = named_files(ix.store, "\n".join(f'  File "/x/site-packages/pkg/m{i}.py", line 1' for i in range(10)),
                               ix.scope())
    assert one == {("pkg", "pkg/m3.py"): pytest.approx(1 / 61)}
    assert ten[("pkg", "pkg/m0.py")] == pytest.approx(1 / 61 / 10) and ten[("pkg", "pkg/m9.py")] == pytest.approx(1 / 70 / 10)
    assert written[("pkg", "pkg/m9.py")] == "pkg/m9.py"
    assert named_files(ix.store, "tests/test_m3.py fails", ix.scope()) == ({}, {})
    assert named_files(ix.store, "tests/test_m3.py fails in pkg/m3.py", ix.scope())[0] == {
        ("pkg", "pkg/m3.py"): pytest.approx(1 / 61)}
    ix.close()


@pytest.mark.parametrize("report, paths", [
    ("autodoc ignores aliases\n```\n# conf.py\nautodoc_type_aliases = {}\n```\n", []),
    ("autodoc ignores aliases\r\n```\r\n# in conf.py\r\nx = 1\r\n# in example.py\r\n```\r\n", []),
    ("a form breaks\n// app.js:\nconst f = 1\n", []),
    ("a form breaks\n# models.py\nclass Thing(models.Model): ...\nsee django/forms/boundfield.py\n", ["django/forms/boundfield.py"]),
    ("# django/db/models/query.py\n", ["django/db/models/query.py"]),
    ("# see the docs in conf.py for more details\n", ["conf.py"]),
    ("sphinx reads conf.py twice", ["conf.py"]),
])
def test_a_bare_file_name_heading_a_snippet_is_the_reporter_s_own_file(report, paths):
    """A reproduction's files are headed by a comment that names them (``# conf.py``, ``// in app.js``): the
    reporter's own files, which a repository's ``doc/conf.py`` only shares a name with. A path with folders, or a
    name written in prose, is read as before."""
    assert mentions(report).paths == paths


@pytest.mark.parametrize("written, where", [
    ('  File "/srv/venv/lib/python3.11/site-packages/pkg/core.py", line 84, in _execute', ("pkg/core.py", 84, "_execute")),
    ("pkg/core.py:84: in _execute", ("pkg/core.py", 84, "_execute")),
    ("File ~/v/lib/python3.10/site-packages/pkg/core.py:150, in Box.open(self)", ("pkg/core.py", 150, "Box.open")),
    ("/usr/lib/python3.10/site-packages/pkg/colors.py:730: DeprecationWarning: ...", ("pkg/colors.py", 730, "")),
    ("pkg/core.py:12:5: E501 line too long", ("pkg/core.py", 12, "")),
    ("https://github.com/o/r/blob/main/pkg/core.py#L10", ("github.com/o/r/blob/main/pkg/core.py", 10, "")),
    ('File "run.py", line 3, in <module>', ("run.py", 3, "<module>")),
])
def test_a_line_written_after_a_path_is_read_with_its_function(written, where):
    """Tracebacks (Python's, pytest's, IPython's), warnings, linters and GitHub links write a line after a path, and a
    frame the function it is in: each is read as (path, line, function)."""
    assert mentions(written).locations == [where]


@pytest.mark.parametrize("written", ["see pkg/core.py, then line 12", "pkg/core.py is 84 lines long", "pkg/core.py"])
def test_a_path_without_a_line_writes_no_location(written):
    assert mentions(written).locations == []


LINES = {
    "pkg/__init__.py": "",
    "pkg/core.py": (
        "def outer(x):\n    return inner(x)\n\n\n"                      # 1-2
        "def inner(x):\n    y = x + 1\n    return y / 0\n\n\n"          # 5-7
        "class Box:\n    def open(self):\n        return inner(1)\n"),  # 10-12
    "pkg/util/base.py": "def util_base():\n    return 1\n",
    "pkg/other/base.py": "def other_base():\n    return 2\n",
    "pkg/steps.py": "".join(f"def step{i}():\n    return {i}\n\n\n" for i in range(5)),  # step i at 4i+1 - 4i+2
}


def _frames(*frames: tuple[str, int, str]) -> str:
    return "Traceback (most recent call last):\n" + "".join(
        f'  File "/venv/lib/site-packages/{p}", line {n}, in {f}\n    code()\n' for p, n, f in frames)


def test_the_lines_a_traceback_writes_name_their_functions_innermost_first(tmp_path):
    """A frame names the function its line falls in, the innermost frame first and at most ``FRAMES`` of them; a frame
    whose line moved in this release finds its function by name, nearest the line; a warning's bare line takes the
    innermost function spanning it. A ``<module>`` frame, a line outside any function, a path that resolves to two
    files and a file the scope hides name nothing."""
    ix = indexed(tmp_path, LINES, "pkg", "idx")

    def names(query: str, scope: Scope | None = None) -> list[tuple[str, str]]:
        got = written_units(ix.store, mentions(query).locations, scope or ix.scope())
        return [(split_id(cid)[1].rsplit("#", 1)[1], at) for cid, at in got]

    tb = _frames(("run.py", 3, "<module>"), ("pkg/core.py", 2, "outer"), ("pkg/core.py", 7, "inner"))
    assert names(tb) == [("inner", "pkg/core.py:7"), ("outer", "pkg/core.py:2")]
    assert names(_frames(("pkg/core.py", 40, "inner"))) == [("inner", "pkg/core.py:40")]  # moved: found by name
    assert names(_frames(("pkg/core.py", 12, "Box.open"))) == [("Box.open", "pkg/core.py:12")]
    assert names("/usr/lib/site-packages/pkg/core.py:6: RuntimeWarning: divide by zero") == [("inner", "pkg/core.py:6")]
    assert names("pkg/core.py:9: W391 blank line") == []
    assert names(_frames(("pkg/core.py", 2, "<module>"))) == []
    assert names("base.py:1: in util_base") == [] and names("pkg/util/base.py:1: in util_base") == [
        ("util_base", "pkg/util/base.py:1")]
    many = _frames(*((f"pkg/steps.py", 4 * i + 2, f"step{i}") for i in range(5)))
    assert [n for n, _ in names(many)] == ["step4", "step3", "step2"][:FRAMES]
    assert names(tb, Scope(exclude=("pkg/core.py",))) == []
    ix.close()


def test_a_traceback_s_innermost_function_ranks_higher_and_says_which_line_named_it(tmp_path):
    """The lines a report writes are one more ranked signal (``lines``) of a standard search: the function a frame
    names moves up, and its explanation says where the report wrote it."""
    ix = indexed(tmp_path, LINES, "pkg", "idx")
    report = ("The steps fail after the box opens\nEvery step (step0, step1, step2) returns the wrong value once a box "
              "is opened.\n" + _frames(("pkg/core.py", 7, "inner")))
    unweighted = SearchOptions(weights={"lexical": 1.0, "dense": 1.0, "lines": 0.0})
    without = [h.capsule.qualname for h in ix.search(report, k=10, options=unweighted)]
    hits = ix.search(report, k=10)
    assert [h.capsule.qualname for h in hits].index("inner") < without.index("inner") - 2  # above the three steps
    inner = next(h for h in hits if h.capsule.qualname == "inner")
    assert inner.why["lines"]["rank"] == 1 and inner.why["written"]["at"] == "pkg/core.py:7"
    assert "written at pkg/core.py:7" in why_text(inner.why)
    ix.close()


def test_a_file_s_score_leaves_out_what_the_lines_gave_its_units(tmp_path):
    """The lines rank functions; the paths written vote for files on their own (``named_files``). A file's score
    sums its units' scores without the lines lane's share: the file ranking of a report with a traceback is the one
    it has without the lane (the graph off, whose decayed shares of a boosted seed would differ)."""
    ix = indexed(tmp_path, LINES, "pkg", "idx")
    report = ("The steps fail after the box opens\nEvery step (step0, step1, step2) returns the wrong value once a box "
              "is opened.\n" + _frames(("pkg/core.py", 7, "inner")))
    with_lines = SearchOptions(level="file", graph=False)
    without = SearchOptions(level="file", graph=False, weights={"lexical": 1.0, "dense": 1.0, "lines": 0.0})
    got = {f.path: f.score for f in ix.search(report, k=10, level="file", options=with_lines)}
    base = {f.path: f.score for f in ix.search(report, k=10, level="file", options=without)}
    assert got == pytest.approx(base) and "pkg/core.py" in got
    units = ix.search(report, k=10, options=SearchOptions(graph=False))
    inner = next(h for h in units if h.capsule.qualname == "inner")
    assert inner.why["written"]["score"] == pytest.approx(1 / 61)
    ix.close()


def test_a_javascript_stack_s_innermost_frame_is_its_first(tmp_path):
    """JavaScript (like Java, Go and Rust) writes a stack innermost frame first, where Python writes it last: the
    lines lane takes the frames in the order each language means."""
    app = ("function load(x) {\n  return parse(x);\n}\n\n"      # 1-3
           "function parse(x) {\n  return x.a.b;\n}\n\n"       # 5-7
           "function main() {\n  load(1);\n}\n\n"               # 9-11
           "function other() {\n  return 0;\n}\n")               # 13-15
    ix = indexed(tmp_path, {"web/app.js": app}, "web", "idx")
    stack = ("TypeError: Cannot read properties of undefined (reading 'b')\n"
             "    at parse (/srv/app/web/app.js:6:12)\n    at load (/srv/app/web/app.js:2:10)\n"
             "    at main (/srv/app/web/app.js:10:3)\n    at other (/srv/app/web/app.js:14:3)\n")
    got = written_units(ix.store, mentions(stack).locations, ix.scope())
    assert [split_id(cid)[1].rsplit("#", 1)[1] for cid, _ in got] == ["parse", "load", "main"]
    assert got[0][1] == "srv/app/web/app.js:6"
    ix.close()
