"""Context that slices: long units cut to what the question needs with their real line numbers, the budget spread
over the target, its callers, callees and tests, and more budget never covering less."""
from __future__ import annotations

import re
import textwrap

import pytest

from repoctx import Index, Settings
from repoctx.retrieve import slices
from repoctx.retrieve.context import TASKS, build_context
from repoctx.types import Capsule
from tests.conftest import indexed, write_tree

CHECKS = "\n".join(f"        if record.get('field_{i}') is None:\n            missing.append('field_{i}')"
                   for i in range(40))

FILES = {
    "pay/__init__.py": "",
    "pay/validate.py": textwrap.dedent('''\
        """Validation of payment records."""
        import functools


        class ValidationError(Exception):
            """A record that cannot be paid."""


        @functools.lru_cache(maxsize=None)
        def validate_payment(
            record: dict,
            currency: str = "EUR",
            strict: bool = False,
        ) -> dict:
            """Check a payment record before it is charged.

            Every field is checked; a strict check also refuses unknown currencies.
            """
            missing = []
            for attempt in range(3):
        ''') + CHECKS + "\n" + textwrap.dedent('''\
                if strict:
                    if currency not in ("EUR", "USD"):
                        raise ValidationError(f"unknown currency {currency}")
                    try:
                        amount = float(record["amount"])
                    except (KeyError, ValueError):
                        raise ValidationError("the amount is not a number")
                    if amount <= 0:
                        raise ValidationError("a refund is not a payment")
                break
            if missing:
                raise ValidationError("missing: " + ", ".join(missing))
            return {"record": record, "currency": currency, "checked": True}


        def charge(record: dict) -> dict:
            """Charge a payment after checking it."""
            checked = validate_payment(record, strict=True)
            return {"charged": checked["record"]["amount"]}


        def refund(record: dict) -> dict:
            """Give a payment back."""
            checked = validate_payment(record)
            return {"refunded": checked["record"]["amount"]}
        '''),
    "pay/ledger.py": textwrap.dedent('''\
        """Where charges are written down."""
        from pay.validate import charge


        class Ledger:
            """The book of charges."""

            def __init__(self):
                self.rows = []

            def book(self, record: dict) -> None:
                """Charge a record and write it down."""
                self.rows.append(charge(record))

            def total(self) -> float:
                """The sum of every charge."""
                return sum(r["charged"] for r in self.rows)
        '''),
    "tests/test_validate.py": textwrap.dedent('''\
        from pay.validate import validate_payment


        def test_strict_refuses_unknown_currency():
            try:
                validate_payment({"amount": 1}, currency="XYZ", strict=True)
            except Exception:
                return
            raise AssertionError("accepted")
        '''),
}

QUESTIONS = [
    ("how does validate_payment check the currency in strict mode?", "code_query"),
    ("what does charge do with a payment record", "code_query"),
    ("rename validate_payment to check_payment", "refactor"),
    ("add a new check for the payment amount", "code_gen"),
    ("find all functions that charge or refund payments", "search"),
]
BUDGETS = (60, 150, 300, 500, 1000, 2000, 4000, 8000)


@pytest.fixture(scope="module")
def ix(tmp_path_factory):
    index = indexed(tmp_path_factory.mktemp("slice"), FILES, "pay", "idx")
    yield index
    index.close()


def one(ix: Index, qualname: str) -> Capsule:
    [c] = [c for c in ix.find(qualname) if c.qualname == qualname]
    return c


# ---------------------------------------------------------------- reading a context back

PIECE = re.compile(r"^### (?P<head>[^\n]+)\n(?P<fence>`{3,})(?P<lang>\w*)\n(?P<body>.*?)\n(?P=fence)\n", re.M | re.S)
WHOLE = re.compile(r"(?P<path>.+):(?P<a>\d+)-(?P<b>\d+) :: (?P<q>\S+)")
SLICED = re.compile(r"(?P<path>.+) :: (?P<q>\S+) \(lines (?P<a>\d+)-(?P<b>\d+), sliced\)")
MARKER = re.compile(r"\s*… lines? (\d+)(?:-(\d+))?")


def shown_lines(text: str) -> dict[tuple[str, str], dict[int, str]]:
    """(path, qualname) -> {file line number: the line as shown}, read from the context's fenced pieces the
    way a reader would: a whole piece starts at its citation's first line, a sliced one at its span's first
    line, and a marker ``… lines a-b`` stands for lines a..b."""
    out: dict[tuple[str, str], dict[int, str]] = {}
    for m in PIECE.finditer(text):
        head = m["head"]
        s = SLICED.fullmatch(head) or WHOLE.fullmatch(head)
        assert s, head
        key = (s["path"], s["q"])
        assert key not in out, f"{key} shown twice"
        n = int(s["a"])
        lines = out.setdefault(key, {})
        for line in m["body"].split("\n"):
            mk = MARKER.fullmatch(line)
            if mk and SLICED.fullmatch(head):
                assert int(mk[1]) == n, (head, line, n)  # a marker names the very lines it stands for
                n = int(mk[2] or mk[1]) + 1
                continue
            lines[n] = line
            n += 1
        assert n - 1 == int(s["b"]), (head, n)  # the piece accounts for the unit's every line
    return out


def span(cite: str) -> tuple[str, str, int, int]:
    where, qual = cite.split(" :: ")
    path, rng = where.rsplit(":", 1)
    a, b = rng.split("-")
    return path, qual, int(a), int(b)


def assert_exact(ix: Index, ctx) -> None:
    """Every line shown is the file's line at that number (its common indentation removed), and the citations of
    each code piece name exactly the lines it shows."""
    root = ix.root
    shown = shown_lines(ctx.text)
    for (path, qual), lines in shown.items():
        file_lines = (root / path).read_text().split("\n")
        for n, line in lines.items():
            real = file_lines[n - 1]
            assert real.endswith(line) and not real[: len(real) - len(line)].strip(), (path, n, line, real)
        cited = set()
        for c in ctx.citations:
            p, q, a, b = span(c)
            if (p, q) == (path, qual):
                cited |= set(range(a, b + 1))
        assert cited == set(lines), (path, qual, sorted(cited ^ set(lines)))
        for c in ctx.left_out:  # what is left out of a shown unit is not shown
            p, q, a, b = span(c)
            if (p, q) == (path, qual):
                assert not set(range(a, b + 1)) & set(lines)


def covered(ctx) -> set[tuple[str, str]]:
    return {span(c)[:2] for c in ctx.citations}


# ---------------------------------------------------------------- exact line numbers

@pytest.mark.parametrize("query, task", [q for q in QUESTIONS if q[1] in ("code_query", "refactor")])
@pytest.mark.parametrize("budget", [150, 300, 600, 1200, 4000])
def test_every_shown_line_is_the_file_line_its_citation_names(ix, query, task, budget):
    ctx = build_context(ix, query, task=task, budget=budget)
    assert ctx.tokens <= budget
    assert_exact(ix, ctx)


def test_a_long_function_is_cut_to_the_lines_the_question_names_with_their_blocks(ix):
    fn = one(ix, "validate_payment")
    ctx = build_context(ix, "how does validate_payment check the currency in strict mode?", task="code_query",
                        budget=400)
    assert_exact(ix, ctx)
    lines = shown_lines(ctx.text)[(fn.path, fn.qualname)]
    text = "\n".join(lines.values())
    assert len(lines) < fn.end_line - fn.start_line + 1  # cut
    # the signature over several lines and its decorator, the first docstring line
    assert "@functools.lru_cache(maxsize=None)" in text and "    strict: bool = False," in text
    assert "Check a payment record before it is charged." in text
    assert "Every field is checked" not in text
    # the line naming the terms, inside the blocks that hold it
    assert 'raise ValidationError(f"unknown currency {currency}")' in text
    assert 'if currency not in ("EUR", "USD"):' in text and "if strict:" in text and "for attempt in range(3):" in text
    assert "field_17" not in text  # the forty checks the question does not ask about
    assert re.search(r"^\s*… lines \d+-\d+$", ctx.text, re.M)


def test_slice_renders_real_numbers_and_cites_each_run():
    text = "def f(a,\n      b):\n    x = 1\n    y = 2\n    if a:\n        return b\n    z = 3\n    return a\n"
    c = Capsule(id="r:m.py#f", path="m.py", language="python", kind="function", name="f", qualname="f",
                signature="def f(a, b)", start_line=10, end_line=17, text=text.rstrip("\n"), content_hash="")
    sl = slices.prepare(c, {"b": 1.0})
    assert sl.head == frozenset({0, 1})  # the signature's two lines
    piece = slices.render(sl, slices.grow(sl, sl.head, 10_000, whole_ok=False))
    assert piece.text.splitlines()[0] == "### m.py :: f (lines 10-17, sliced)"
    body = piece.text.split("```python\n")[1].split("\n```")[0].split("\n")
    assert body[:2] == ["def f(a,", "      b):"]
    assert "    if a:" in body and "        return b" in body and "    return a" in body
    assert piece.citations[0] == "m.py:10-11 :: f"
    for cite in piece.citations + piece.left_out:
        path, qual, a, b = span(cite)
        assert 10 <= a <= b <= 17
    assert slices.cost(sl, sl.head) == slices.render(sl, sl.head).tokens  # the cost is the rendering's


# ---------------------------------------------------------------- more budget never covers less

@pytest.mark.parametrize("query, task", QUESTIONS)
def test_more_budget_never_covers_less(ix, query, task):
    prev: set = set()
    for budget in BUDGETS:
        ctx = build_context(ix, query, task=task, budget=budget)
        assert ctx.tokens <= budget
        now = covered(ctx)
        assert prev <= now, (budget, prev - now)
        prev = now


def test_the_budget_spreads_over_target_callers_callees_and_tests(ix):
    """At 1,000 tokens the 60-line target does not take the whole budget: its callers and the test that names
    it are cited too, each with the line that calls it."""
    fn = one(ix, "validate_payment")
    ctx = build_context(ix, "how does validate_payment check the currency in strict mode?", task="code_query",
                        budget=1000)
    assert_exact(ix, ctx)
    cov = covered(ctx)
    assert (fn.path, "validate_payment") in cov
    assert (fn.path, "charge") in cov and (fn.path, "refund") in cov
    assert ("tests/test_validate.py", "test_strict_refuses_unknown_currency") in cov
    assert "## Tests that name it" in ctx.text
    assert 'validate_payment({"amount": 1}, currency="XYZ", strict=True)' in ctx.text
    assert "    checked = validate_payment(record, strict=True)" in ctx.text


# ---------------------------------------------------------------- each task keeps its meaning

def test_code_query_shows_callees_as_signatures(ix):
    ctx = build_context(ix, "charge", task="code_query", budget=2000)
    fn = one(ix, "validate_payment")
    assert ctx.citations[0] == one(ix, "charge").citation  # the target whole
    assert "## Callees (signatures)" in ctx.text
    lines = shown_lines(ctx.text)[(fn.path, fn.qualname)]
    assert max(lines) <= fn.start_line + 6  # decorator, signature, docstring line: no body
    assert "missing = []" not in ctx.text


def test_refactor_shows_the_target_whole_and_every_call_site(ix):
    fn = one(ix, "validate_payment")
    ctx = build_context(ix, "rename validate_payment to check_payment", task="refactor", budget=3000)
    assert ctx.task == "refactor"
    assert ctx.citations[0] == fn.citation and textwrap.dedent(fn.text) in ctx.text  # whole: it is being edited
    for caller in ("charge", "refund", "test_strict_refuses_unknown_currency"):
        assert caller in {q for _, q in covered(ctx)}
    assert "## Callers (call sites)" in ctx.text
    assert "    checked = validate_payment(record)" in ctx.text
    assert_exact(ix, ctx)


def test_refactor_slices_a_target_only_when_it_alone_does_not_fit(ix):
    fn = one(ix, "validate_payment")
    ctx = build_context(ix, "rename validate_payment to check_payment", task="refactor", budget=500)
    assert ctx.citations[0].startswith(f"{fn.path}:{fn.start_line}-")
    assert f"### {fn.path} :: validate_payment (lines {fn.start_line}-{fn.end_line}, sliced)" in ctx.text
    assert_exact(ix, ctx)


def test_code_gen_and_search_show_no_bodies(ix):
    gen = build_context(ix, "add a new check for the payment amount", task="code_gen", budget=600)
    assert "## Layout" in gen.text and "```" not in gen.text and "missing = []" not in gen.text
    found = build_context(ix, "find all functions that charge or refund payments", task="search", budget=800)
    assert "def " not in found.text and "  charge (lines" in found.text


@pytest.mark.parametrize("task", TASKS)
def test_nothing_shown_twice(ix, task):
    ctx = build_context(ix, "how does validate_payment check the currency in strict mode?", task=task, budget=4000)
    assert len(ctx.citations) == len(set(ctx.citations))
    heads = re.findall(r"^### (.+)$", ctx.text, re.M)
    assert len(heads) == len(set(heads))


def test_tests_that_name_a_method_name_its_class_too(tmp_path):
    """A method's name alone is often common: a test is one that names it when it names its class as well."""
    files = {
        "app/books.py": ("class Ledger:\n    def total(self):\n        \"\"\"The sum of the rows.\"\"\"\n"
                         "        return sum(self.rows)\n\n\nclass Basket:\n    def total(self):\n"
                         "        return len(self.items)\n"),
        "tests/test_books.py": ("from app.books import Ledger\n\n\ndef test_ledger_total():\n"
                                "    assert Ledger().total() == 0\n"),
        "tests/test_basket.py": "def test_basket_total(basket):\n    assert basket.total() == 3\n",
    }
    root = write_tree(tmp_path / "books", files)
    index = Index(root, Settings(index_dir=tmp_path / "idx", embedder="none"))
    index.update()
    from repoctx.retrieve.context import StoreReader

    names = {c.qualname for c in StoreReader(index.store, index.scope()).tests_naming(one(index, "Ledger.total"), 5)}
    assert names == {"test_ledger_total"}
    index.close()


def test_a_class_outline_lists_its_own_methods_not_the_functions_nested_in_them():
    text = ("class Cart:\n    \"\"\"Items to pay.\"\"\"\n\n    def add(self, item):\n        def check(x):\n"
            "            return x\n        self.items.append(check(item))\n\n    def pay(self):\n        return 0")
    c = Capsule(id="r:c.py#Cart", path="c.py", language="python", kind="class", name="Cart", qualname="Cart",
                signature="class Cart", start_line=1, end_line=10, text=text, content_hash="")
    sl = slices.prepare(c, {})
    assert [sorted(g) for g in sl.outline] == [[3], [8]]  # def add, def pay; not def check
