import asyncio
import json

import pytest

from repoctx.retrieve.agentic import AgenticRetriever, evidence_score, fuse_runs
from repoctx.retrieve.judge import LLMJudge
from repoctx.retrieve.planner import LLMPlanner, OfflinePlanner, SubQuery, colon_list, split_clauses
from repoctx.retrieve.router import route
from repoctx.types import Hit
from tests.conftest import open_index
from tests.scripted_model import ScriptedModel

FILES = {
    "cache/lru.py": "class LRUCache:\n    \"\"\"Least recently used cache.\"\"\"\n\n    def evict_oldest(self):\n        \"\"\"Evict the oldest cache entry when the cache is full.\"\"\"\n        return self.entries.pop(0)\n\n    def get(self, key):\n        return self.entries[key]\n",
    "cache/ttl.py": "class TTLCache:\n    \"\"\"Entries expire after a time to live.\"\"\"\n\n    def expire_entries(self, now):\n        \"\"\"Drop cache entries whose time to live has passed.\"\"\"\n        return [e for e in self.entries if e.deadline > now]\n",
    "auth/session.py": "def verify_session_cookie(cookie):\n    \"\"\"Verify the signature of a session cookie.\"\"\"\n    return check_signature(cookie)\n\n\ndef check_signature(value):\n    return True\n",
    "auth/csrf.py": "def verify_csrf_token(request):\n    \"\"\"Verify the CSRF token of a POST request.\"\"\"\n    return request.token == request.cookie\n",
}


@pytest.fixture
def ix(make_repo, tmp_path):
    index = open_index(make_repo(FILES), tmp_path / "idx")
    index.update()
    return index


def steps(events):
    return [(e.step, e.status) for e in events]


def test_event_order_and_statuses(ix):
    events = list(AgenticRetriever(ix).stream("How is the CSRF token verified, and how is the session cookie verified?"))
    seq = steps(events)
    assert seq[:4] == [("SpeculativeRetrieval", "IN_PROGRESS"), ("SpeculativeRetrieval", "SUCCEEDED"),
                       ("Planning", "IN_PROGRESS"), ("Planning", "SUCCEEDED")]
    retrieval = [e for e in events if e.step == "Retrieval"]
    assert [e.status for e in retrieval] == ["IN_PROGRESS", "SUCCEEDED"] * (len(retrieval) // 2)
    assert {e.sub_query for e in retrieval if e.sub_query} == {"How is the CSRF token verified",
                                                               "how is the session cookie verified"}
    assert "ranking each sub-query's candidates" in retrieval[-2].message  # the second stage, last
    assert seq[-3:] == [("FullDocumentExpansion", "IN_PROGRESS"), ("FullDocumentExpansion", "SUCCEEDED"),
                        ("Result", "SUCCEEDED")]
    result = events[-1].data["result"]
    quals = [h.capsule.qualname for h in result.hits[:4]]
    assert "verify_csrf_token" in quals and "verify_session_cookie" in quals


def test_stops_early_when_sufficient(ix):
    result = AgenticRetriever(ix, max_iterations=5).run(
        "How is the CSRF token verified, and how is the session cookie verified?")
    assert result.sufficient and result.iterations == 1


class EndlessPlanner(OfflinePlanner):
    def replan(self, question, uncovered, attempt):
        return [SubQuery(f"{s.intent} variant {attempt}", s.intent) for s in uncovered]


def test_iteration_cap(ix):
    r = AgenticRetriever(ix, planner=EndlessPlanner(), max_iterations=3, threshold=1.01).run(
        "How are cache entries evicted, and how do entries expire?")
    assert r.iterations == 3 and not r.sufficient
    with pytest.raises(ValueError):
        AgenticRetriever(ix, max_iterations=11)


def test_results_deduplicated_across_sub_queries(ix):
    r = AgenticRetriever(ix).run("How does the cache evict the oldest entry, and how does the LRU cache evict entries?")
    ids = [h.capsule.id for h in r.hits]
    assert len(ids) == len(set(ids))
    evict = next(h for h in r.hits if h.capsule.qualname == "LRUCache.evict_oldest")
    assert len(evict.why["sub_queries"]) >= 2 and evict.score > 0


def test_fuse_runs_lifts_what_several_wordings_find():
    c = {n: type("C", (), {"id": n})() for n in "abcde"}
    best, other = [Hit(c[n], 1.0, {"run": 1}) for n in "abc"], [Hit(c[n], 1.0, {"run": 2}) for n in "dbe"]
    fused = fuse_runs([best, other], depth=4)
    # b is found by both; a and d tie at rank 1 and the best-evidence search (first) wins the tie
    assert [h.capsule.id for h in fused] == ["b", "a", "d", "c"]
    assert fused[0].why == {"run": 1}  # a unit keeps the hit of the first search that found it


def test_a_replanned_intent_gets_the_fusion_of_its_searches(ix):
    by_name = {n: ix.find(n)[0] for n in ("evict_oldest", "expire_entries", "get", "verify_csrf_token")}
    wordings = {}

    def search(text, k):
        first = text not in wordings and "variant" not in text
        wordings[text] = True
        names = ("get", "evict_oldest") if first else ("verify_csrf_token", "evict_oldest")
        return [Hit(by_name[n], 1.0, {}) for n in names]

    r = AgenticRetriever(ix, planner=EndlessPlanner(), max_iterations=2, threshold=1.01, search_fn=search,
                         reranker=False).run("How are cache entries evicted, and how do entries expire?")
    assert r.iterations == 2
    for _, lane in r.lanes["sub_queries"]:  # both wordings found evict_oldest: it leads the intent's lane
        names = [h.capsule.name for h in lane]
        assert names[0] == "evict_oldest" and sorted(names[1:]) == ["get", "verify_csrf_token"]


def test_a_framed_part_is_also_searched_in_its_own_words(ix):
    """'When I save to disk: how are stale entries dropped': the framing's words are shared by every part, so the
    part's own words are searched too and fused into its lane (a unit only they find still reaches the lane)."""
    plan = OfflinePlanner().plan("When the cache is full, how are old entries evicted, and how do entries expire?")
    assert [(s.text, s.unframed) for s in plan] == [
        ("When the cache is full: how are old entries evicted", "how are old entries evicted"),
        ("When the cache is full: how do entries expire", "how do entries expire")]
    assert [s.unframed for s in OfflinePlanner().plan("How are entries evicted, and how do entries expire?")] == ["", ""]
    by_name = {n: ix.find(n)[0] for n in ("evict_oldest", "expire_entries", "get")}
    asked = []

    def search(text, k):
        asked.append(text)
        if text.startswith("When the cache"):  # the framed wording finds only what the framing's words match
            return [Hit(by_name["get"], 1.0, {})]
        return [Hit(by_name["evict_oldest" if "evicted" in text else "expire_entries"], 1.0, {})]

    events = list(AgenticRetriever(ix, plan=plan, threshold=0.0, search_fn=search, reranker=False).stream(
        "When the cache is full, how are old entries evicted, and how do entries expire?"))
    r = events[-1].data["result"]
    assert asked.count("how are old entries evicted") == 1 and asked.count("how do entries expire") == 1
    lanes = {s.text: [h.capsule.name for h in lane] for s, lane in r.lanes["sub_queries"]}
    assert lanes["When the cache is full: how are old entries evicted"] == ["get", "evict_oldest"]
    assert lanes["When the cache is full: how do entries expire"] == ["get", "expire_entries"]
    assert ("Retrieval", "SUCCEEDED") in steps(events) and any(
        "without the question's framing" in e.message for e in events if e.step == "Retrieval")


def test_expansion_adds_class_of_a_method(ix):
    method = ix.find("evict_oldest")[0]

    def only_method(text, k):
        return [Hit(method, 1.0, {"lexical": {"rank": 1}})]

    r = AgenticRetriever(ix, search_fn=only_method).run("How are entries evicted, and how is the cache read?")
    assert [h.capsule.qualname for h in r.hits] == ["LRUCache.evict_oldest", "LRUCache"]
    assert r.hits[1].why["expansion"]["of"] == method.id
    assert r.expanded == [r.hits[1].capsule.citation]


def test_failing_sub_query_is_a_failed_event_and_result_is_partial(ix):
    good = ix.find("verify_csrf_token")[0]

    question = "How is the CSRF token verified, and how is the session cookie verified?"

    def flaky(text, k):
        if "session" in text and text != question:
            raise RuntimeError("backend went away")
        return [Hit(good, 1.0, {})]

    events = list(AgenticRetriever(ix, search_fn=flaky, max_iterations=2).stream(
        "How is the CSRF token verified, and how is the session cookie verified?"))
    failed = [e for e in events if e.status == "FAILED"]
    assert failed and failed[0].step == "Retrieval" and "backend went away" in failed[0].message
    assert events[-1].step == "Result" and events[-1].status == "SUCCEEDED"
    result = events[-1].data["result"]
    assert [h.capsule.qualname for h in result.hits] == ["verify_csrf_token"] and not result.sufficient


def test_async_stream_yields_the_same_events(ix):
    async def collect():
        return [e async for e in AgenticRetriever(ix).astream("How do entries expire, and how is the CSRF token verified?")]

    events = asyncio.run(collect())
    assert events[0].step == "SpeculativeRetrieval" and events[-1].step == "Result"


def test_llm_planner_uses_a_valid_plan():
    plan = {"sub_queries": [{"query": "csrf token check", "intent": "csrf"}, {"query": "session cookie", "intent": "session"}]}
    model = ScriptedModel([json.dumps(plan)])
    planner = LLMPlanner(model)
    subs, note = planner.plan_with_note("How are CSRF and sessions verified?")
    assert [s.text for s in subs] == ["csrf token check", "session cookie"] and note is None
    assert model.calls, "the real Strands agent loop called the model"


def test_malformed_llm_plan_falls_back_to_offline(ix):
    planner = LLMPlanner(ScriptedModel(['{"sub_queries": "not a list"}']))
    q = "How is the CSRF token verified, and how is the session cookie verified?"
    subs, note = planner.plan_with_note(q)
    assert [s.text for s in subs] == [s.text for s in OfflinePlanner().plan(q)]
    assert note.startswith("malformed plan") and not hasattr(planner, "last_error")  # nothing shared between calls
    events = list(AgenticRetriever(ix, planner=LLMPlanner(ScriptedModel(["sorry, no JSON today"]))).stream(q))
    planning = [e for e in events if e.step == "Planning" and e.status == "SUCCEEDED"][0]
    assert "offline plan" in planning.message


def test_llm_judge_puts_what_it_names_first_in_each_lane(ix):
    q = "How is the CSRF token verified, and how is the session cookie verified?"
    plan = {"sub_queries": [{"query": "verify csrf token", "intent": "csrf"},
                            {"query": "verify session cookie", "intent": "session"}]}
    lanes = {}
    for intent, text in (("csrf", "verify csrf token"), ("session", "verify session cookie")):
        lanes[intent] = [h.capsule.qualname for h in AgenticRetriever(ix, reranker=None)._search(text, 8)]
    # the judge names, for each lane, a unit that sits second or lower there
    want = {i: names[1] for i, names in lanes.items()}
    replies = [json.dumps(plan)] + [json.dumps({"relevant": [lanes[i].index(want[i]) + 1]}) for i in ("csrf", "session")]
    model = ScriptedModel(replies)
    events = list(AgenticRetriever(ix, planner=LLMPlanner(model), judge=LLMJudge(model), reranker=None).stream(q))
    judged = [e for e in events if e.step == "Retrieval" and "judged relevant" in e.message]
    assert judged and judged[0].status == "SUCCEEDED" and len(model.calls) == 3  # plan + one verdict per intent
    citations = {i: [h.capsule.citation for h in AgenticRetriever(ix, reranker=None)._search(t, 8)
                     if h.capsule.qualname == want[i]] for i, t in (("csrf", "verify csrf token"),
                                                                   ("session", "verify session cookie"))}
    assert judged[0].data["judged"] == {"verify csrf token": citations["csrf"],
                                        "verify session cookie": citations["session"]}
    result = events[-1].data["result"]
    named = {h.capsule.qualname for h in result.hits}
    assert set(want.values()) <= named


def test_llm_judge_out_of_schema_keeps_the_order(ix):
    q = "How is the CSRF token verified, and how is the session cookie verified?"
    plain = AgenticRetriever(ix, reranker=None).run(q)
    events = list(AgenticRetriever(ix, judge=LLMJudge(ScriptedModel(["the second one, I think"])), reranker=None).stream(q))
    verdict = [e for e in events if e.step == "Retrieval" and "judged relevant" in e.message][0]
    assert verdict.status == "FAILED" and "out of schema" in verdict.message
    assert [h.capsule.id for h in events[-1].data["result"].hits] == [h.capsule.id for h in plain.hits]


def test_llm_judge_ignores_candidates_it_was_not_shown(ix):
    hits = AgenticRetriever(ix, reranker=None)._search("verify csrf token", 8)
    judge = LLMJudge(ScriptedModel(['{"relevant": [1, 99]}']), top=3)
    out, note = judge.judge("q", "csrf", hits)
    assert note and "not shown" in note and [h.capsule.id for h in out] == [h.capsule.id for h in hits]


def test_offline_planner_shapes():
    p = OfflinePlanner()
    assert [s.text for s in p.plan("Compare how the SQLite and PostgreSQL backends handle JSON fields and transactions")] == [
        "SQLite backends handle JSON fields", "SQLite backends handle transactions",
        "PostgreSQL backends handle JSON fields", "PostgreSQL backends handle transactions"]
    assert [s.text for s in p.plan("Where does pytest collect test modules, and how does it rewrite assert statements?")] == [
        "Where does pytest collect test modules", "how does it rewrite assert statements"]
    assert [s.text for s in p.plan("How are passwords hashed with PBKDF2 compared to Argon2?")] == [
        "How are passwords hashed with PBKDF2", "How are passwords hashed with Argon2"]
    assert [s.anchors for s in p.plan("How does parse_http_date work, and where is cache_key built?")] == [
        ["parse_http_date"], ["cache_key"]]
    # "how do A and B differ in X, and in Y": entity x aspect (the aspects used to be dropped, leaving "A", "B")
    assert [s.text for s in p.plan("How do the Python domain and the C++ domain differ in parsing a signature, and in "
                                   "resolving a cross-reference?")] == [
        "Python domain parsing a signature", "Python domain resolving a cross-reference",
        "C++ domain parsing a signature", "C++ domain resolving a cross-reference"]
    # a plain plural before the last item names a thing of its own: "options" is not a kind of argument
    assert [s.text for s in p.plan("How do options and positional arguments differ in parsing a value, and in "
                                   "reporting an error?")] == [
        "options parsing a value", "options reporting an error",
        "positional arguments parsing a value", "positional arguments reporting an error"]
    assert [s.text for s in p.plan("How do the SQLite and PostgreSQL backends differ in parsing a value?")] == [
        "SQLite backends parsing a value", "PostgreSQL backends parsing a value"]
    assert [s.text for s in p.plan("How do the class and function definitions differ in parsing a signature?")] == [
        "class definitions parsing a signature", "function definitions parsing a signature"]  # "class" is no plural
    # "differ" with no aspect after it: the entities frame the parts that follow, as before
    assert [s.text for s in p.plan("How do select_related and prefetch_related differ under the hood: how are the "
                                   "joined columns turned into instances?")] == [
        "select_related: how are the joined columns turned into instances",
        "prefetch_related: how are the joined columns turned into instances"]
    # a list of bare values after a clause's own words is that clause's object, not its subjects
    assert [s.text for s in p.plan("How is the report built, and how is each line marked run, missed or partial?")] == [
        "How is the report built", "how is each line marked run, missed or partial"]
    assert [s.text for s in p.plan("How are the usage line, the description text and the options table rendered?")] == [
        "How are the usage line rendered", "How are the description text rendered", "How are the options table rendered"]
    # "and in what order" asks nothing on its own: it stays with its clause (a framing like "In particular" does not)
    assert [s.text for s in p.plan("Which sources feed a host's variables and in what order, and how are two "
                                   "dictionaries merged?")] == [
        "Which sources feed a host's variables, in what order", "how are two dictionaries merged"]
    # "versus" with a shared head noun keeps what follows for both; a clause compared with a phrase gives the two
    assert [s.text for s in p.plan("How are grid tables versus simple tables in reStructuredText parsed?")] == [
        "How are grid tables in reStructuredText parsed", "How are simple tables in reStructuredText parsed"]
    assert [s.text for s in p.plan("How does the old system deduce facts, compared with the newer query-based system?")] \
        == ["How does the old system deduce facts", "the newer query-based system"]
    # a listed item keeps its leading dot (".dt" names an attribute)
    assert [s.text for s in p.plan("How do the .str, .dt and .plot accessors differ in being rebuilt on every access?")] \
        == [".str accessors being rebuilt on every access", ".dt accessors being rebuilt on every access",
            ".plot accessors being rebuilt on every access"]


def test_offline_planner_does_not_hang_on_a_pasted_code_block():
    """A report pasting indented code with many commas once took the list rule minutes per clause
    (catastrophic backtracking); the old pattern needs more than 30 s on this one, the rule now ~1 ms.
    The other planner and router patterns had such inputs too (each checked against the old pattern)."""
    import signal

    from repoctx.retrieve.planner import LIST_CLAUSE_MAX, expand_comparison, expand_list

    report = ("Here is an example:\r\n```python\r\nimport numpy as np\r\n\r\n"
              "pipe = Chain([('scale', scaler),\r\n                 ('fit', model)])\r\n                \r\n"
              "grid = {'scale__eps': [0.1, 0.5, 1],\r\n          'fit__n_parts': np.arange(1, 10),\r\n"
              "          'fit__mode': ['a', 'b']}\r\n          \r\n"
              "search = Search(chain=pipe, grid=grid, on_error='raise')\r\nsearch.run(X, y)\r\nsearch.best(X, y)\r\n"
              "```\r\n\r\nThe problem is that for `eps`: 1 is not a float, and for  `n_parts`: np.int64 is not int"
              "\r\n\r\nBefore proposing a fix for this case, I would like your opinion about checking the parameters")
    assert len(report) < LIST_CLAUSE_MAX  # the pattern itself is tested, not the length guard

    def hung(*_):
        raise TimeoutError("a planner or router pattern backtracks")

    old = signal.signal(signal.SIGALRM, hung)
    signal.alarm(5)
    try:
        assert expand_list(report) is None
        assert OfflinePlanner().plan(report * 4)  # a long report plans too
        # the "A, B and C ... each" rule: 2^n ways to fail on n items whose commas are followed by spaces
        assert expand_comparison("the a" + ", b  c" * 30 + " and d e f g") is None
        # long blank stretches: every split of a run tried at every position
        for blank in ("\n" * 20000, " " * 20000):
            assert route("why " + blank + "x").mode == "standard"
            assert OfflinePlanner().plan("how " + blank + "and where is it")
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
    assert expand_list("how are tokens, spans and parse trees stored") == [
        "how are tokens stored", "how are spans stored", "how are parse trees stored"]


def test_offline_planner_framing_and_lists():
    p = OfflinePlanner()
    # a "When I ..." clause frames the parts that follow instead of being a part
    assert [s.text for s in p.plan("When I save a figure to a file, how is the output format chosen, and how is the "
                                   "tight bounding box computed?")] == [
        "When I save a figure to a file: how is the output format chosen",
        "When I save a figure to a file: how is the tight bounding box computed"]
    # "Walk me through X:" keeps X as the subject of each part
    assert [s.text for s in p.plan("Walk me through how constrained layout works: where it is triggered, and how the "
                                   "axes are finally moved.")] == [
        "how constrained layout works: where it is triggered",
        "how constrained layout works: how the axes are finally moved"]
    # a list after a colon: one part per item (commas inside an item's words stay)
    assert [s.text for s in p.plan("How does the legend handle these things: collecting handles and labels, picking "
                                   "the handler, and finding the best location?")] == [
        "How does the legend handle these things: collecting handles and labels",
        "How does the legend handle these things: picking the handler",
        "How does the legend handle these things: finding the best location"]
    # with the serial comma ("…, and …") long items still make a list; commas inside (...) are not separators
    assert [s.text for s in p.plan("How are these filters implemented: sorting a dict into (key, value) pairs by key "
                                   "or by value, formatting a byte count as a human-readable size with decimal or "
                                   "binary prefixes, and dumping a value as JSON that is safe to embed in a script tag?")] == [
        "How are these filters implemented: sorting a dict into (key, value) pairs by key or by value",
        "How are these filters implemented: formatting a byte count as a human-readable size with decimal or binary "
        "prefixes",
        "How are these filters implemented: dumping a value as JSON that is safe to embed in a script tag"]
    # after "Walk me through X:" a plain list of things is one part per thing, X framing each
    assert [s.text for s in p.plan("Walk me through how a help page gets built: the usage line, the description text "
                                   "(and how paragraphs survive), and the options table.")] == [
        "how a help page gets built: the usage line",
        "how a help page gets built: the description text (and how paragraphs survive)",
        "how a help page gets built: the options table"]
    # without the serial comma, long items after a colon are prose, not a list
    assert colon_list("Note this: the loader reads every template from the search path in the order given by its "
                      "directories, then caches the compiled code and returns it") is None
    # a relative "which ..." clause stays with the clause it qualifies
    assert [s.text for s in p.plan("What SQL is emitted on PostgreSQL, and what happens on SQLite, which can't alter a "
                                   "column in place?")] == [
        "What SQL is emitted on PostgreSQL", "what happens on SQLite, which can't alter a column in place"]
    # entities listed in a framing clause, with "each": entity × part
    assert [s.text for s in p.plan("For the log and logit scales, how does each one transform values?")] == [
        "log scales: how does each one transform values", "logit scales: how does each one transform values"]
    # "I'd like to understand how A, how B, and what C": the phrase goes, A stays the first part
    assert [s.text for s in p.plan("What happens when a form is saved? I'd like to understand how the fields get "
                                   "cleaned, how values are copied onto the instance, and what saving without "
                                   "committing does.")] == [
        "What happens when a form is saved", "how the fields get cleaned", "how values are copied onto the instance",
        "what saving without committing does"]
    # "compare A with B": two parts; with "each" in the question, A and B frame the parts that follow
    assert [s.text for s in p.plan("Compare capturing at the file-descriptor level with capturing at the sys level, "
                                   "and explain how log records reach the fixture.")] == [
        "capturing at the file-descriptor level", "capturing at the sys level", "how log records reach the fixture"]
    assert [s.text for s in p.plan("Compare the normal Environment with the native environment: how does each "
                                   "render the result?")] == [
        "normal Environment: how does each render the result", "native environment: how does each render the result"]
    # "each" after a preposition qualifies the noun after it ("around each test"), not the listed items
    assert [s.text for s in p.plan("How are -W options, the ini setting and the marker applied around each test?")] == [
        "How are -W options applied around each test", "How are the ini setting applied around each test",
        "How are the marker applied around each test"]
    # "Explain X, ..." without a question word still drops the phrase and its subject
    assert [s.text for s in p.plan("Explain the cache backends, how is an entry culled and how is a key made?")] == [
        "how is an entry culled", "how is a key made"]


def test_offline_planner_leaves_parenthesized_asides_whole():
    p = OfflinePlanner()
    # a ';' or '. ' inside (...) is part of the aside, not a clause boundary
    assert split_clauses("How does each lay the data out (padding for rolling; trim or pad for coarsen), and how does "
                         "each apply a reduction?") == [
        "How does each lay the data out (padding for rolling; trim or pad for coarsen)",
        "how does each apply a reduction"]
    assert [s.text for s in p.plan("Which exception does the map raise when it wants the client redirected (e.g. to add "
                                   "a trailing slash), and how does that become a 308 response?")] == [
        "Which exception does the map raise when it wants the client redirected (e.g. to add a trailing slash)",
        "how does that become a 308 response"]
    # a list inside an aside qualifies the clause: not one part per item
    assert [s.text for s in p.plan("How does the compiler turn the macro body into a function (including the special "
                                   "caller, varargs and kwargs names), and how does a call block hand its body over?")] == [
        "How does the compiler turn the macro body into a function (including the special caller, varargs and kwargs "
        "names)", "how does a call block hand its body over"]
    # an entity named inside an aside does not stop the compared entities from framing the part
    assert [s.text for s in p.plan("Compare rolling windows with coarsening: how does each pad the edges (zeros for "
                                   "rolling; trim for coarsen)?")] == [
        "rolling windows: how does each pad the edges (zeros for rolling; trim for coarsen)",
        "coarsening: how does each pad the edges (zeros for rolling; trim for coarsen)"]


def test_router():
    assert route("compare how checkout and inventory roll back deployments").mode == "agentic"
    assert route("Where are tests collected, and how are asserts rewritten?").mode == "agentic"
    assert route("where is authentication handled?").mode == "standard"
    assert route("How are cookies handled: parsing the header, serializing a Set-Cookie header, and deleting one?"
                 ).mode == "agentic"
    assert route("parse_http_date").mode == "standard"
    # a statement that sets the scene, then the question as an imperative
    assert route("The middleware can export a file or a directory. Compare how each kind of export resolves a "
                 "sub-path, and how the middleware answers with a 304.").mode == "agentic"
    assert route("The middleware exports a file or a directory. It answers with a 304.").mode == "standard"
    report = "Crash in QuerySet.only()\nTraceback (most recent call last):\n  File \"x.py\", line 1\nand how is it fixed?"
    assert route(report).mode == "standard" and route(report).shape == "report"


def test_evidence_score_counts_terms():
    from repoctx.types import Capsule

    c = Capsule(id="a#f", path="a.py", language="python", kind="function", name="verify_csrf_token",
                qualname="verify_csrf_token", signature="def verify_csrf_token(request)", start_line=1, end_line=2,
                text="", content_hash="x")
    assert evidence_score(SubQuery("how is the csrf token verified", "how is the csrf token verified"), [Hit(c, 1.0, {})]) >= 0.6
    assert evidence_score(SubQuery("cache eviction", "cache eviction"), [Hit(c, 1.0, {})]) == 0.0
