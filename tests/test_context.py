"""KC-RAG context building: task classification and per-task compression inside a token budget."""
from __future__ import annotations

import re
import textwrap

import pytest

from repoctx import Index, Scope, Settings
from repoctx.providers.embedding import count_tokens
from repoctx.retrieve.context import DEFAULT_BUDGETS, TASKS, build_context, classify_task
from repoctx.types import Hit

CITATION = re.compile(r"^[\w./-]+:\d+-\d+ :: \S+$")

LEDGER_STEPS = "\n".join(
    f"    entry_{i} = ledger.get('account_{i}', 0) * weights[{i % 7}] + adjustments.get('fee_{i}', 0.0)\n"
    f"    total_{i} = round(entry_{i} - discounts[{i % 5}], 2)"
    for i in range(120))

FILES = {
    "shop/__init__.py": '"""The shop package."""\n',
    "shop/billing/__init__.py": "",
    "shop/billing/tax.py": textwrap.dedent('''\
        """Tax rules per region."""

        RATES = {"EU": 0.2, "US": 0.07}


        def _rate_for(region: str) -> float:
            """Look up the tax rate of a region."""
            return RATES.get(region, 0.1)


        def compute_tax(amount: float, region: str = "EU") -> float:
            """Return the tax owed on an amount for a region.

            Unknown regions pay the fallback rate.
            """
            rate = _rate_for(region)
            return amount * rate


        def round_money(value: float) -> float:
            """Round a money value to cents."""
            return round(value, 2)
        '''),
    "shop/billing/ledger.py": (
        '"""The general ledger."""\n\n\n'
        "def reconcile_ledger(ledger: dict, weights: list, adjustments: dict, discounts: list) -> float:\n"
        '    """Reconcile every ledger account against weights, adjustments and discounts."""\n'
        f"{LEDGER_STEPS}\n"
        "    return sum(v for k, v in locals().items() if k.startswith('total_'))\n"),
    "shop/discounts.py": textwrap.dedent('''\
        """Discount codes."""

        CODES = {"SPRING": 0.1}


        def lookup_code(code: str) -> float:
            """Find the fraction a discount code takes off."""
            return CODES.get(code, 0.0)


        def apply_discount(amount: float, code: str) -> float:
            """Apply a discount code to an amount."""
            return amount * (1 - lookup_code(code))
        '''),
    "shop/cart.py": textwrap.dedent('''\
        """Shopping cart."""
        from shop.billing.tax import compute_tax, round_money
        from shop.discounts import apply_discount


        class Cart:
            """A cart of items waiting for checkout."""

            def __init__(self, region: str = "EU"):
                self.items = []
                self.region = region

            def add_item(self, name: str, price: float) -> None:
                """Add an item to the cart."""
                self.items.append((name, price))

            def total(self, code: str = "") -> float:
                """Total price of the cart including tax and discounts."""
                subtotal = sum(price for _, price in self.items)
                discounted = apply_discount(subtotal, code)
                return round_money(discounted + compute_tax(discounted, self.region))

            def receipt(self) -> str:
                """A printable receipt of every item."""
                lines = ["RECEIPT", "=" * 40]
                for number, (name, price) in enumerate(self.items, start=1):
                    label = f"{number:>3}. {name}"
                    lines.append(f"{label:<30}{price:>10.2f}")
                lines.append("-" * 40)
                lines.append(f"{'Subtotal':<30}{sum(p for _, p in self.items):>10.2f}")
                lines.append(f"{'Region':<30}{self.region:>10}")
                lines.append("=" * 40)
                return "\n".join(lines)


        def checkout(cart: Cart, code: str = "") -> float:
            """Charge the customer for the cart."""
            return cart.total(code)
        '''),
    "shop/reports.py": textwrap.dedent('''\
        """Monthly reports."""
        from shop.billing.ledger import reconcile_ledger
        from shop.billing.tax import compute_tax


        def monthly_report(ledger: dict) -> dict:
            """Summarise the month: reconciled balance and the tax on it."""
            balance = reconcile_ledger(ledger, [1.0] * 7, {}, [0.0] * 5)
            return {"balance": balance, "tax": compute_tax(balance)}
        '''),
    "docs/notes.md": "# Notes\n\nThe shop computes tax per region.\n",
}


@pytest.fixture(scope="module")
def index(tmp_path_factory):
    root = tmp_path_factory.mktemp("ctx") / "repo"
    for rel, text in FILES.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    ix = Index(root, Settings(index_dir=root.parent / "idx", embedder="none"))
    ix.update()
    yield ix
    ix.close()


def one(index: Index, qualname: str):
    [c] = [c for c in index.find(qualname) if c.qualname == qualname]
    return c


def assert_well_formed(ctx, budget: int) -> None:
    assert ctx.budget == budget
    assert ctx.tokens == count_tokens(ctx.text)
    assert ctx.tokens <= budget
    for cite in ctx.citations + ctx.left_out:
        assert CITATION.match(cite), cite
    assert not set(ctx.citations) & set(ctx.left_out)


def headed(text: str, cite: str) -> bool:
    return f"### {cite}\n" in text


def sliced(text: str, c) -> bool:
    """``c`` is shown cut: headed by its name and span, not by a citation."""
    return f"### {c.path} :: {c.qualname} (lines {c.start_line}-{c.end_line}, sliced)\n" in text


def covers(ctx, c) -> bool:
    """Some lines of ``c`` are cited."""
    return any(x.startswith(f"{c.path}:") and x.endswith(f" :: {c.qualname}") for x in ctx.citations)


def head_only(ctx, c, lines: int = 2) -> bool:
    """``c`` shows its signature and docstring line only: those lines cited, the rest left out."""
    a = c.start_line
    return (f"{c.path}:{a}-{a + lines - 1} :: {c.qualname}" in ctx.citations
            and f"{c.path}:{a + lines}-{c.end_line} :: {c.qualname}" in ctx.left_out)


# ---------------------------------------------------------------- classification

@pytest.mark.parametrize("query, task", [
    ("how does the cart compute tax?", "code_query"),
    ("What does checkout do", "code_query"),
    ("where is the tax rate looked up", "code_query"),
    ("why does compute_tax return a float", "code_query"),
    ("explain Cart.total", "code_query"),
    ("how does checkout create a new session?", "code_query"),
    ("rename compute_tax to calculate_tax", "refactor"),
    ("Refactor Cart.total to use a helper", "refactor"),
    ("extract the rounding logic into its own function", "refactor"),
    ("change the signature of compute_tax to take a currency", "refactor"),
    ("move round_money to a utils module", "refactor"),
    ("please clean up the checkout function", "refactor"),
    ("show me all callers of compute_tax", "refactor"),
    ("add a parameter to apply_discount and update its callers", "refactor"),
    ("add a new method to Cart that removes an item", "code_gen"),
    ("implement a loyalty discount", "code_gen"),
    ("Write a function that parses invoices", "code_gen"),
    ("can you create a new endpoint for refunds", "code_gen"),
    ("how do I add a new report type?", "code_gen"),
    ("scaffold a plugin module for payments", "code_gen"),
    ("find all functions that compute tax", "search"),
    ("list the classes in billing", "search"),
    ("where are all the discount codes defined?", "search"),
    ("which files import compute_tax", "search"),
    ("where is round_money used", "search"),
])
def test_classify_task(query, task):
    assert classify_task(query) == task


def test_classify_task_is_overridden_by_argument(index):
    ctx = build_context(index, "find all functions that compute tax", task="code_query")
    assert ctx.task == "code_query" and ctx.budget == DEFAULT_BUDGETS["code_query"]


# ---------------------------------------------------------------- code_query

def test_code_query_gives_target_whole_and_callee_signatures(index):
    ctx = build_context(index, "how does Cart.total compute the total price?")
    assert ctx.task == "code_query"
    assert_well_formed(ctx, 2000)
    total, tax, discount = one(index, "Cart.total"), one(index, "compute_tax"), one(index, "apply_discount")
    assert ctx.citations[0] == total.citation and headed(ctx.text, total.citation)
    assert textwrap.dedent(total.text) in ctx.text  # the target whole
    # callees: their signature and docstring line, as the file has them; their bodies stay out
    assert sliced(ctx.text, tax) and head_only(ctx, tax)
    assert tax.signature in ctx.text and "Return the tax owed on an amount for a region." in ctx.text
    assert "rate = _rate_for(region)" not in ctx.text
    assert "Unknown regions pay the fallback rate." not in ctx.text  # only the docstring's first line
    assert sliced(ctx.text, discount) and head_only(ctx, discount) and discount.signature in ctx.text
    assert "lookup_code(code)" not in ctx.text
    assert covers(ctx, one(index, "checkout"))  # a caller, where it calls the target
    assert "return cart.total(code)" in ctx.text


def test_code_query_class_target_whole_when_it_fits(index):
    cart = one(index, "Cart")
    ctx = build_context(index, "what is a Cart", task="code_query", hits=[Hit(cart, 1.0)])
    assert_well_formed(ctx, 2000)
    assert ctx.citations[0] == cart.citation
    assert textwrap.dedent(cart.text) in ctx.text
    assert one(index, "compute_tax").signature in ctx.text  # callees of its methods
    assert "return amount * rate" not in ctx.text


def test_code_query_class_and_its_method_gives_the_method_and_the_class_outline(index):
    """A top class whose method is also a hit: the method is the target, the class an outline (its signature,
    docstring line and the headers of its methods), whatever the budget."""
    cart, total = one(index, "Cart"), one(index, "Cart.total")
    for budget in (count_tokens(cart.text) * 3 // 4, 2000):
        ctx = build_context(index, "what is a Cart", task="code_query", budget=budget,
                            hits=[Hit(cart, 1.0), Hit(total, 0.5)])
        assert_well_formed(ctx, budget)
        assert ctx.citations[0] == total.citation
        assert textwrap.dedent(total.text) in ctx.text
        assert "## Target class (outline)" in ctx.text and sliced(ctx.text, cart)
        assert any(x.startswith(f"{cart.path}:{cart.start_line}-") and x.endswith(":: Cart") for x in ctx.citations)
        assert "def add_item(self, name: str, price: float) -> None:" in ctx.text  # outline
        assert f"{cart.path}:13-13 :: Cart" in ctx.citations  # ... cited by its own line
        assert "self.items.append" not in ctx.text


def test_code_query_slices_a_target_too_long_for_the_budget(index):
    """reconcile_ledger is 243 lines: at 400 tokens it is cut to its signature and the lines that mention the
    question's terms, with markers for what is left out and every run of shown lines cited by its real lines."""
    ledger = one(index, "reconcile_ledger")
    assert count_tokens(ledger.text) > 2000  # the fixture's long function really is long
    ctx = build_context(index, "how does reconcile_ledger reconcile accounts", task="code_query", budget=400)
    assert_well_formed(ctx, 400)
    assert sliced(ctx.text, ledger) and ctx.citations[0].startswith(f"{ledger.path}:{ledger.start_line}-")
    assert "def reconcile_ledger(ledger: dict, weights: list, adjustments: dict, discounts: list) -> float:" \
        in ctx.text
    assert "ledger.get('account_0', 0)" in ctx.text  # a line that names the question's terms
    assert "… lines " in ctx.text
    # what is shown and what is left out are the unit's lines, each once
    spans = sorted(tuple(map(int, x.split(" :: ")[0].rsplit(":", 1)[1].split("-")))
                   for x in ctx.citations + ctx.left_out if x.startswith(f"{ledger.path}:"))
    assert spans[0][0] == ledger.start_line and spans[-1][1] == ledger.end_line
    assert all(b[0] == a[1] + 1 for a, b in zip(spans, spans[1:]))
    assert len([x for x in ctx.left_out if x.startswith(f"{ledger.path}:")]) >= 1
    assert ctx.tokens > 200  # the cut keeps what the question needs, it does not throw the target away


def test_code_query_with_room_shows_the_returns_of_a_long_target(index):
    ledger = one(index, "reconcile_ledger")
    ctx = build_context(index, "how does reconcile_ledger reconcile accounts", task="code_query", budget=1000)
    assert "return sum(v for k, v in locals().items() if k.startswith('total_'))" in ctx.text
    assert f"{ledger.path}:{ledger.end_line}-{ledger.end_line} :: reconcile_ledger" in ctx.citations


# ---------------------------------------------------------------- refactor

def test_refactor_gives_callee_bodies_and_caller_call_sites(index):
    ctx = build_context(index, "rename compute_tax to calculate_tax")
    assert ctx.task == "refactor"
    assert_well_formed(ctx, 1500)
    tax, rate = one(index, "compute_tax"), one(index, "_rate_for")
    total, report = one(index, "Cart.total"), one(index, "monthly_report")
    assert ctx.citations[0] == tax.citation
    assert textwrap.dedent(tax.text) in ctx.text
    assert headed(ctx.text, rate.citation) and textwrap.dedent(rate.text) in ctx.text  # callee body
    for caller in (total, report):  # caller signature and the line that calls the target
        assert sliced(ctx.text, caller) and caller.signature in ctx.text
    assert "    return round_money(discounted + compute_tax(discounted, self.region))" in ctx.text
    assert f"{total.path}:21-21 :: Cart.total" in ctx.citations
    assert '    return {"balance": balance, "tax": compute_tax(balance)}' in ctx.text
    assert "discounted = apply_discount(subtotal, code)" not in ctx.text  # ... not the rest of its body
    assert "reconcile_ledger(ledger, [1.0] * 7" not in ctx.text


def test_refactor_respects_scope(index):
    ctx = build_context(index, "rename compute_tax to calculate_tax",
                        scope=Scope(exclude=("shop/reports.py",)))
    assert_well_formed(ctx, 1500)
    assert covers(ctx, one(index, "Cart.total"))
    assert not any("reports.py" in c for c in ctx.citations + ctx.left_out)
    assert "monthly_report" not in ctx.text


# ---------------------------------------------------------------- code_gen

def test_code_gen_gives_layout_and_names_without_bodies(index):
    ctx = build_context(index, "add a new discount rule for loyalty customers to the cart")
    assert ctx.task == "code_gen"
    assert_well_formed(ctx, 600)
    assert "## Layout" in ctx.text and "shop/" in ctx.text
    assert re.search(r"^  discounts\.py \*$", ctx.text, re.M)  # a hit file, marked
    assert re.search(r"^  reports\.py$", ctx.text, re.M)  # its neighbour
    assert re.search(r"^  billing/$", ctx.text, re.M)  # a subdirectory, collapsed
    assert one(index, "apply_discount").signature in ctx.text
    assert one(index, "Cart.add_item").signature in ctx.text
    assert one(index, "monthly_report").signature in ctx.text  # names of a neighbouring file
    for body_line in ("return ", "self.items.append", "CODES.get", "subtotal = "):
        assert body_line not in ctx.text
    assert "```" not in ctx.text


def test_code_gen_layout_respects_scope(index):
    ctx = build_context(index, "add a new discount rule for loyalty customers to the cart",
                        scope=Scope(exclude=("shop/reports.py", "shop/billing/*")))
    assert_well_formed(ctx, 600)
    assert "discounts.py" in ctx.text
    assert "reports.py" not in ctx.text and "monthly_report" not in ctx.text
    assert "billing/" not in ctx.text  # a directory with nothing visible is not drawn


# ---------------------------------------------------------------- search

def test_search_is_a_mini_index_grouped_by_file(index):
    ctx = build_context(index, "find all functions that compute tax or discounts")
    assert ctx.task == "search"
    assert_well_formed(ctx, 800)
    assert len(ctx.citations) >= 4
    headings = [line for line in ctx.text.splitlines() if line and not line.startswith(" ")]
    assert len(headings) == len(set(headings)) >= 2  # each file once
    current = None
    shown: list[str] = []
    for line in ctx.text.splitlines():
        if line and not line.startswith(" "):
            current = line
            continue
        m = re.match(r"^  ([\w./-]+) \(lines (\d+)-(\d+)\)(?: — (.+))?$", line)
        assert m, line
        shown.append(f"{current}:{m[2]}-{m[3]} :: {m[1]}")
    assert shown == ctx.citations  # every symbol sits under its own file's heading
    tax = one(index, "compute_tax")
    assert f"  compute_tax (lines {tax.start_line}-{tax.end_line}) — Return the tax owed on an amount for a region." \
        in ctx.text.splitlines()
    assert "def " not in ctx.text


# ---------------------------------------------------------------- budgets

@pytest.mark.parametrize("task", TASKS)
@pytest.mark.parametrize("budget", [0, 25, 120, 400, None])
def test_never_over_budget(index, task, budget):
    ctx = build_context(index, "how does Cart.total use compute_tax and reconcile_ledger", task=task, budget=budget)
    assert ctx.task == task
    assert_well_formed(ctx, DEFAULT_BUDGETS[task] if budget is None else budget)


@pytest.mark.parametrize("task", TASKS)
def test_tiny_budget_lists_what_was_left_out(index, task):
    ctx = build_context(index, "how does Cart.total use compute_tax", task=task, budget=30)
    assert_well_formed(ctx, 30)
    assert ctx.left_out


def test_nothing_found_is_an_explanation_not_an_error(index):
    ctx = build_context(index, "qqqzzz xxyyww")
    assert ctx.citations == [] and ctx.left_out == []
    assert "No indexed code matched" in ctx.text and ctx.tokens == count_tokens(ctx.text)


def test_unknown_task_is_rejected(index):
    with pytest.raises(ValueError):
        build_context(index, "how does checkout work", task="poetry")


def test_context_serialises(index):
    import json

    ctx = build_context(index, "how does checkout work")
    assert json.loads(json.dumps(ctx.to_dict()))["citations"] == ctx.citations


def test_refactor_rename_targets_the_real_definition_and_its_callers(tmp_path):
    """An example's override must not stand in for the project's method (issue: click's resolve_command)."""
    from repoctx import Index, Settings
    from tests.conftest import write_tree

    core = ("class Group:\n"
            "    def resolve_command(self, ctx, args):\n"
            "        \"\"\"Find the subcommand named by the first argument.\"\"\"\n"
            "        cmd_name = args[0]\n        cmd = self.get_command(ctx, cmd_name)\n"
            "        if cmd is None:\n            ctx.fail(f'No such command {cmd_name!r}.')\n"
            "        return cmd_name, cmd, args[1:]\n\n"
            "    def get_command(self, ctx, name):\n        return self.commands.get(name)\n\n"
            "    def invoke(self, ctx):\n        cmd_name, cmd, args = self.resolve_command(ctx, ctx.args)\n"
            "        return cmd.invoke(ctx)\n\n"
            "    def shell_complete(self, ctx, incomplete):\n        name, cmd, rest = self.resolve_command(ctx, [incomplete])\n"
            "        return [name]\n")
    example = ("import click\n\nclass AliasedGroup(click.Group):\n"
               "    def resolve_command(self, ctx, args):\n        _, cmd, args = super().resolve_command(ctx, args)\n"
               "        return cmd.name, cmd, args\n")
    root = write_tree(tmp_path / "click", {"src/click/core.py": core, "examples/aliases/aliases.py": example})
    ix = Index(root, Settings(index_dir=tmp_path / "ix", embedder="none"))
    ix.update()
    ctx = ix.context("rename resolve_command", task="refactor", budget=1500)
    assert ctx.citations[0] == "src/click/core.py:2-8 :: Group.resolve_command"
    assert "cmd = self.get_command(ctx, cmd_name)" in ctx.text  # whole
    assert "src/click/core.py:13-15 :: Group.invoke" in ctx.citations  # callers (short: whole)
    assert "src/click/core.py:17-19 :: Group.shell_complete" in ctx.citations
    assert "examples/aliases/aliases.py:4-4 :: AliasedGroup.resolve_command" in ctx.citations  # the override's signature
    assert "examples/aliases/aliases.py:5-6 :: AliasedGroup.resolve_command" in ctx.left_out
    assert ctx.tokens <= 1500


def test_a_large_budget_covers_more_units_not_more_of_each(tmp_path):
    """A budget is a ceiling, not a target: more budget brings more units, each cut to what the question needs
    (a function's twelve lines that all say the same thing are not all shown)."""
    from repoctx import Index, Settings
    from tests.conftest import write_tree

    files = {f"dates/fmt{i}.py": "".join(
        f"def parse_date_format_{i}_{j}(text):\n    \"\"\"Parse a date written in format {i}.{j}.\"\"\"\n"
        + "".join(f"    part_{k} = text.split('-')[{k % 3}]  # date field {k}\n" for k in range(12))
        + "    return part_0\n\n" for j in range(5)) for i in range(8)}
    root = write_tree(tmp_path / "r", files)
    ix = Index(root, Settings(index_dir=tmp_path / "ix", embedder="none"))
    ix.update()
    small = ix.context("how are dates parsed from text?", task="code_query", budget=1500)
    ctx = ix.context("how are dates parsed from text?", task="code_query", budget=6000)
    units = {c.split(" :: ")[1] for c in ctx.citations}
    assert ctx.tokens <= 6000 and len(units) >= 12
    assert {c.split(" :: ")[1] for c in small.citations} < units
    assert ctx.text.count("    return part_0") >= 12  # each shows its return ...
    assert "part_11 = " not in ctx.text.split("## Related")[1]  # ... not every repeated line
    assert ctx.tokens < 0.6 * 6000
    refactor = ix.context("how are dates parsed from text?", task="refactor", budget=6000)
    assert refactor.tokens <= 6000 and len(refactor.citations) >= 8
