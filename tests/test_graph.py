from tests.conftest import open_index

FILES = {
    "shop/__init__.py": "",
    "shop/models.py": (
        "class Base:\n    def save(self):\n        return self.validate()\n\n    def validate(self):\n        return True\n\n"
        "class Order(Base):\n    def total(self):\n        return sum_lines(self)\n\n"
        "def sum_lines(order):\n    return 0\n"
    ),
    "shop/checkout.py": (
        "from shop.models import Order\nfrom shop import payments\n\n"
        "def checkout(cart):\n    order = Order()\n    order.save()\n    payments.charge(order.total())\n    return order\n"
    ),
    "shop/payments.py": "def charge(amount):\n    return refund_if_failed(amount)\n\ndef refund_if_failed(amount):\n    return amount\n",
    "api/views.py": "from shop.checkout import checkout\n\ndef post_checkout(request):\n    return checkout(request.cart)\n",
}


def ids(edges, end):
    return sorted(getattr(e, end) for e in edges)


def test_callers_and_callees_across_files(make_repo, tmp_path):
    root = make_repo(FILES)
    ix = open_index(root, tmp_path / "idx")
    ix.update()
    checkout = ix.find("checkout")[0]
    callees = {e.dst_name: e.dst for e in ix.callees(checkout.id)}
    assert callees["Order"] == "repo:shop/models.py#Order"
    assert callees["payments.charge"] == "repo:shop/payments.py#charge"
    # `order = Order()` says what order is: its calls are Order's (save is inherited, so no definition is named)
    assert callees["Order.total"] == "repo:shop/models.py#Order.total"
    assert callees["Order.save"] == "repo:shop/models.py#Base.save"  # inherited: found through Order's base
    callers = ids(ix.callers(checkout.id), "src")
    assert callers == ["repo:api/views.py#post_checkout"]
    # self-calls resolve within the class; inheritance edge resolves across the file
    assert [e.dst for e in ix.callees("repo:shop/models.py#Base.save")] == ["repo:shop/models.py#Base.validate"]
    inherits = ix.store.edges_from(["repo:shop/models.py#Order"], ("inherits",))
    assert [e.dst for e in inherits] == ["repo:shop/models.py#Base"]
    # containment and imports are edges too
    contains = ix.store.edges_from(["repo:shop/models.py#Base"], ("contains",))
    assert sorted(e.dst for e in contains) == ["repo:shop/models.py#Base.save", "repo:shop/models.py#Base.validate"]
    imports = ix.store.edges_from(["repo:shop/checkout.py#shop.checkout"], ("imports",))
    assert {e.dst for e in imports} == {"repo:shop/models.py#Order", "repo:shop/payments.py#shop.payments"}


def test_unresolved_names_are_kept(make_repo, tmp_path):
    root = make_repo({"a.py": "def f():\n    return mystery(1) + len([])\n"})
    ix = open_index(root, tmp_path / "idx")
    ix.update()
    names = {e.dst_name: e.dst for e in ix.callees("repo:a.py#f")}
    assert names == {"mystery": None, "len": None}


def test_graph_expansion_brings_callees(make_repo, tmp_path):
    root = make_repo(FILES)
    ix = open_index(root, tmp_path / "idx")
    ix.update()
    from repoctx.retrieve.hybrid import SearchOptions

    hits = ix.search("post_checkout", k=10, options=SearchOptions(k=10, graph_seeds=1))
    assert hits[0].capsule.qualname == "post_checkout" and "exact" in hits[0].why
    graph_hits = {h.capsule.qualname: h.why["graph"] for h in hits if "graph" in h.why}
    assert graph_hits["checkout"]["relation"] == "callee"


RECEIVERS = {
    "tpl/__init__.py": "",
    "tpl/base.py": (
        "class Lexer:\n    def tokenize(self):\n        return []\n\n"
        "class DebugLexer(Lexer):\n    def tokenize(self):\n        return []\n\n"
        "class Parser:\n    def parse(self):\n        return None\n\n"
        "class DebugParser(Parser):\n    def parse(self):\n        return None\n"
    ),
    "tpl/engine.py": (
        "from tpl.base import Lexer, DebugLexer\nfrom tpl import base\n\n"
        "class Template:\n"
        "    lexer_class: Lexer\n"
        "    def __init__(self, debug):\n        self.parser = base.Parser()\n\n"
        "    def compile(self, debug):\n"
        "        if debug:\n            lexer = DebugLexer()\n        else:\n            lexer = Lexer()\n"
        "        tokens = lexer.tokenize()\n"
        "        def again():\n            return lexer.tokenize()\n"
        "        return self.parser.parse()\n\n"
        "    def relex(self):\n        return self.lexer_class.tokenize()\n\n"
        "def render(parser: base.Parser, made=None):\n"
        "    other = make_parser()\n    other.parse()\n"
        "    with base.Parser() as p:\n        p.parse()\n"
        "    return parser.parse()\n"
    ),
}


def test_calls_on_a_name_whose_class_the_source_states(make_repo, tmp_path):
    root = make_repo(RECEIVERS)
    ix = open_index(root, tmp_path / "idx")
    ix.update()
    lexers = {"repo:tpl/base.py#Lexer.tokenize", "repo:tpl/base.py#DebugLexer.tokenize"}
    compile_ = {e.dst_name: e.dst for e in ix.callees("repo:tpl/engine.py#Template.compile")}
    # assigned in either branch: a call that may reach either class's method
    assert {compile_["Lexer.tokenize"], compile_["DebugLexer.tokenize"]} == lexers
    assert compile_["base.Parser.parse"] == "repo:tpl/base.py#Parser.parse"  # self.parser, set in __init__
    # a closure sees the enclosing function's names
    assert {e.dst for e in ix.callees("repo:tpl/engine.py#Template.compile.again")} == lexers
    # a class-body annotation types the attribute
    assert [e.dst for e in ix.callees("repo:tpl/engine.py#Template.relex")] == ["repo:tpl/base.py#Lexer.tokenize"]
    render = [(e.dst_name, e.dst) for e in ix.callees("repo:tpl/engine.py#render")]
    # an annotated parameter and a with-target are typed; a name a plain function returns is not
    assert render.count(("base.Parser.parse", "repo:tpl/base.py#Parser.parse")) == 2
    assert ("other.parse", None) in render
    # Parser.parse is not DebugParser.parse: owners match on a dot boundary
    callers = {e.src for e in ix.callers("repo:tpl/base.py#Parser.parse")}
    assert "repo:tpl/engine.py#render" in callers
    assert not any(e.src.startswith("repo:tpl/engine.py") for e in ix.callers("repo:tpl/base.py#DebugParser.parse"))


HIERARCHY = {
    "app/__init__.py": "",
    "app/base.py": "class Base:\n    def validate(self):\n        return True\n\n    def clean(self):\n        return 1\n",
    "app/mixins.py": "from app.base import Base\n\nclass Middle(Base):\n    def clean(self):\n        return 2\n",
    "app/models.py": (
        "from app.mixins import Middle\n\n"
        "class Order(Middle):\n    def save(self):\n        self.validate()\n        return self.clean()\n\n"
        "def make():\n    o = Order()\n    return o.validate()\n"
    ),
}


def test_inherited_methods_resolve_through_bases_in_other_files(make_repo, tmp_path):
    root = make_repo(HIERARCHY)
    ix = open_index(root, tmp_path / "idx")
    ix.update()
    save = {e.dst_name: e.dst for e in ix.callees("repo:app/models.py#Order.save")}
    # two levels up for validate; the nearest definition for clean (Middle overrides Base)
    assert save == {"self.validate": "repo:app/base.py#Base.validate", "self.clean": "repo:app/mixins.py#Middle.clean"}
    make = {e.dst_name: e.dst for e in ix.callees("repo:app/models.py#make")}
    assert make["Order.validate"] == "repo:app/base.py#Base.validate"
