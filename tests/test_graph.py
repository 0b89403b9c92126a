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
    assert callees["order.save"] is None or callees["order.save"] == "repo:shop/models.py#Base.save"
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
