"""Second-stage ranking of one sub-query's candidates (a lane) inside agentic retrieval, and of a
standard search's first units (the whole question as its one lane: ``rerank_question``).

The first stage fuses ranks (BM25, dense, exact, graph) and knows nothing of what a unit *is*. Here a
linear model over cheap features re-orders a lane's candidates: how the first stage ranked them,
how much of the sub-query their name, path, docstring and body carry, how big and how connected
they are (an implementation, not a one-line wrapper), whether the whole question's own search agrees,
and how many sibling sub-queries also found them (a unit every lane finds answers none of them).

The weights ship in ``rerank_weights.json``, fitted by ``bench/train_rerank.py`` on 172 hand-written
training questions over seven projects that are *not* in the evaluation set (matplotlib,
scikit-learn, Sphinx, Werkzeug, Jinja2, click, xarray); the file records what it was trained on and
its held-out figures (each project held out in turn). A missing file leaves lanes in first-stage order.
One of its features is an embedding similarity, so the weights hold for the embedding model they were
fitted with: another shipped model has its own file (``rerank_weights.<model name>.json``, see
``weights_file``), and an index under a model with no file of its own gets the default one (a joint
embedder with none: its first model's, name similarity under that model).
"""

from __future__ import annotations

import json
import math
import re
from bisect import bisect_left
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from repoctx.ingest.languages import is_test_path
from repoctx.store.base import EVERYTHING, Scope
from repoctx.tokens import name_token_set, split_identifier, term_forms
from repoctx.types import Hit

WEIGHTS_FILE = Path(__file__).with_name("rerank_weights.json")
KINDS = ("function", "method", "class", "module", "window")
# features a class gets its own weight for: a class answers by its whole body, so size, degree and
# overlap mean something else than for a function
CLASS_INTERACTIONS = (
    "rank",
    "question",
    "callees",
    "callers",
    "lines",
    "name",
    "doc",
    "body",
    "dense",
    "lex",
    "samefile",
)
DEPTH = 30  # candidates a lane offers to the reranker
ABSENT = 60  # rank given to a unit a search did not return


def _log_rank(r) -> float:
    return math.log(min(int(r), 300)) if r else math.log(300)


def _overlap(terms: list[str], text: str) -> float:
    """The share of the terms that ``text``'s name tokens carry (``term_in``)."""
    return _share([term_forms(t) for t in terms], text)


def _share(forms: list[frozenset[str]], text: str) -> float:
    """``_overlap`` with each term's forms computed once (``term_forms``): a term is in the text when one of
    its forms is among the text's tokens."""
    if not forms:
        return 0.0
    toks = name_token_set(text)
    return sum(1 for f in forms if not f.isdisjoint(toks)) / len(forms)


def lane_features(
    terms: list[str],
    hits: list[Hit],
    question_ranks: dict[str, int],
    lane_counts: dict[str, int],
    degree: dict[str, tuple[int, int]],
    namesakes: dict[str, int] | None = None,
    name_sims: list[float] | None = None,
) -> list[dict[str, float]]:
    """One feature dict per hit of a lane (in lane order).

    terms: the sub-query's content terms; question_ranks: capsule id → rank in the whole question's
    search; lane_counts: capsule id → how many sub-query lanes have it in their top 10; degree:
    capsule id → (callers, callees); namesakes: name → definitions carrying it; name_sims: per hit, the
    embedding similarity of the sub-query with the unit's ``name_phrase`` (0 without a dense model)."""
    namesakes = namesakes or {}
    forms = [term_forms(t) for t in terms]  # the query side, once for every candidate and field
    top = hits[:10]
    max_dense = max((_signal(h, "dense", "score") for h in hits), default=0.0) or 1.0
    max_lex = max((abs(_signal(h, "lexical", "score")) for h in hits), default=0.0) or 1.0
    out = []
    for rank, h in enumerate(hits, 1):
        c = h.capsule
        callers, callees = degree.get(c.id, (0, 0))
        f = {
            "rank": math.log(rank),
            "lex": _log_rank(_signal(h, "lexical", "rank")),
            "dense": _log_rank(_signal(h, "dense", "rank")),
            "dscore": _signal(h, "dense", "score"),
            "reld": _signal(h, "dense", "score") / max_dense,
            "rell": abs(_signal(h, "lexical", "score")) / max_lex,
            "name": _share(forms, c.qualname),
            "path": _share(forms, c.path),
            "doc": _share(forms, c.docstring),
            "body": _share(forms, c.text),
            "sig": _share(forms, c.signature),
            "lines": math.log1p(c.end_line - c.start_line + 1),
            "callers": math.log1p(callers),
            "callees": math.log1p(callees),
            "doclen": math.log1p(len(c.docstring)),
            "private": float(c.name.startswith("_") and not c.name.startswith("__")),
            "dunder": float(c.name.startswith("__")),
            "graph": float("graph" in h.why),
            # no "exact" feature: the training questions avoid naming definitions, so an exact match
            # never marked a gold there and the model learnt to push named units down
            "question": math.log(question_ranks.get(c.id, ABSENT)),
            "lanes": float(lane_counts.get(c.id, 0)),
            "samefile": float(sum(1 for o in top if o.capsule.path == c.path and o.capsule.id != c.id)),
            "namesakes": math.log1p(max(namesakes.get(c.name, 1) - 1, 0)),
            "test": float(is_test_path(c.path)),
            "nsim": name_sims[rank - 1] if name_sims else 0.0,
        }
        for k in KINDS:
            f[k] = float(c.kind == k)
        for n in CLASS_INTERACTIONS:
            f["class_" + n] = f[n] * f["class"]
        out.append(f)
    _within_lane(out)
    return out


# a lane's units compete for its one intent: how far each is from the lane's best on a signal, and how many of the
# lane rank above it there, beside the signal's own value (session 24: each training project held out 74.2 -> 74.7,
# multi-part k=5/10/20 52.1/71.1/81.8 -> 53.7/71.9/84.3, unseen 74.7 -> 76.2 on one capture)
LANE_GAPS = ("nsim", "name", "doc", "body", "path", "sig")
LANE_RANKS = ("dscore", "nsim", "name", "doc", "body")


def _within_lane(feats: list[dict[str, float]]) -> None:
    for n in LANE_GAPS:
        top = max((f[n] for f in feats), default=0.0)
        for f in feats:
            f[n + "_gap"] = top - f[n]
    for n in LANE_RANKS:
        below = sorted(-f[n] for f in feats)  # negated, ascending: the units above a value come before it
        for f in feats:
            f[n + "_lrank"] = math.log1p(bisect_left(below, -f[n]))


def _signal(h: Hit, signal: str, key: str) -> float:
    v = h.why.get(signal)
    return float(v.get(key, 0.0)) if isinstance(v, dict) else 0.0


@dataclass
class LinearReranker:
    features: list[str]
    mean: list[float]
    std: list[float]
    weights: list[float]
    bias: float = 0.0
    meta: dict | None = None

    def score(self, f: dict[str, float]) -> float:
        return self.bias + sum(
            w * (f.get(n, 0.0) - m) / s
            for n, m, s, w in zip(self.features, self.mean, self.std, self.weights, strict=True)
        )

    def to_json(self) -> str:
        return json.dumps(
            {
                "features": self.features,
                "mean": self.mean,
                "std": self.std,
                "weights": self.weights,
                "bias": self.bias,
                "meta": self.meta or {},
            },
            indent=1,
        )

    @classmethod
    def from_json(cls, text: str) -> LinearReranker:
        d = json.loads(text)
        if not (len(d["features"]) == len(d["mean"]) == len(d["std"]) == len(d["weights"])):
            raise ValueError("reranker weights: features, mean, std and weights differ in length")
        return cls(d["features"], d["mean"], d["std"], d["weights"], d.get("bias", 0.0), d.get("meta"))


ROLES = ("lanes", "standard")  # the agentic path's sub-query lanes; the standard search's whole question


def weights_file(embedder: str | None = None, role: str = "lanes") -> Path:
    """Where the weights fitted under embedding model ``embedder`` (a ``model_id`` such as
    ``local:minilm-code2-int8:128``) live: ``rerank_weights.minilm-code2-int8.json`` beside the default
    file; a joint embedder's, its members' names joined (``minilm-l6-v2-pc-int8+minilm-code2-int8x0.5``).
    ``None`` is the default file (fitted under the offline default model). ``role="standard"``:
    the weights fitted on whole questions for the standard search's second stage
    (``rerank_weights.standard.json``, ``rerank_weights.standard.<model>.json``)."""
    if role not in ROLES:
        raise ValueError(f"role must be one of {', '.join(ROLES)}, not {role!r}")
    stem = "rerank_weights" if role == "lanes" else f"rerank_weights.{role}"
    if not embedder:
        return WEIGHTS_FILE.with_name(f"{stem}.json")
    if "+" in embedder:  # a joint embedder's id is its spec's form: its members read as the spec's are
        from repoctx.providers.embedding import joint_members

        members = joint_members(embedder)
    else:
        members = [(embedder, 1.0)]
    return WEIGHTS_FILE.with_name(f"{stem}.{'+'.join(_file_name(m, w) for m, w in members)}.json")


def _file_name(model_id: str, weight: float = 1.0) -> str:
    """One model's part of a weights file's name: a local model's name, a remote one's whole id, made safe;
    a joint member's weight other than 1 as ``x0.5``."""
    parts = model_id.split(":")
    name = parts[1] if len(parts) > 1 and parts[0] == "local" else model_id
    safe = re.sub(r"[^A-Za-z0-9_.-]+", "_", name).strip("._") or "model"
    return safe if weight == 1 else f"{safe}x{weight:g}"


@lru_cache(maxsize=8)
def load_reranker(
    path: str | None = None, embedder: str | tuple[str, ...] | None = None, role: str = "lanes"
) -> LinearReranker | None:
    """The shipped model, or None when the file is missing (lanes then keep the first stage's order).
    ``embedder``: the index's embedding model id (or ids, ``embedder_ids``: a joint embedder's, then its first
    model's); the first one's own weights when they ship and were fitted under it, else the default file.
    ``role="standard"``: the whole-question weights where they ship, else the lane weights (a model's own
    before the default model's)."""
    if path:
        p = Path(path)
        return LinearReranker.from_json(p.read_text()) if p.exists() else None
    ids = (embedder,) if isinstance(embedder, str) else tuple(embedder or ())
    # each model's own weights before the default model's; for a role, its own file before the lanes'
    candidates = {p: e for e in ids for p in (weights_file(e, role), weights_file(e))}
    default_files = (weights_file(None, role), WEIGHTS_FILE)
    for p in dict.fromkeys([*candidates, *default_files]):
        if not p.exists():
            continue
        model = LinearReranker.from_json(p.read_text())
        if p not in default_files and (model.meta or {}).get("embedder") != candidates[p]:
            continue  # a file named for this model but fitted under another one: not its weights
        return model
    return None


def embedder_ids(index) -> tuple[str, ...]:
    """The index's embedding model id, which picks the re-ranker's weights (empty: no model here), and a joint
    embedder's first model's after it (its weights serve the pair when the pair has none of its own)."""
    try:
        emb = getattr(index, "embedder", None)
        if emb is None:
            return ()
        first = getattr(emb, "primary", None)
        return (emb.model_id,) + ((first.model_id,) if first is not None else ())
    except Exception:  # noqa: BLE001 - a model that cannot be built here: the default weights, name similarity off
        return ()


def trained_dense(model: LinearReranker | None, dense):
    """The dense retriever for the name-similarity feature, only under the embedding model the weights
    were fitted with: another model's similarities mean something else (and a remote one would be paid
    for every candidate). Under a joint embedder with no weights of its own, its first model, whose weights
    serve it (``embedder_ids``)."""
    trained = (model.meta or {}).get("embedder") if model is not None else None
    if dense is None or trained is None:
        return None
    if trained == dense.embedder.model_id:
        return dense
    first = dense.primary() if hasattr(dense, "primary") else dense
    return first if trained == first.embedder.model_id else None


def rerank_question(
    store,
    model: LinearReranker,
    terms: list[str],
    hits: list[Hit],
    question: str,
    dense=None,
    scope: Scope = EVERYTHING,
    depth: int = DEPTH,
    keep: frozenset[str] | set[str] = frozenset(),
) -> list[Hit]:
    """A standard search's second stage: its first ``depth`` units re-ordered by the lane model, the whole
    question being the one lane (its own search is the question's ranking); the rest keep their order.
    ``terms``: the question's content terms; ``dense``: as ``trained_dense`` gives it; ``keep``: ids of
    units that stay where the first stage put them (the model has no feature for "the question names
    this unit", so it would push a named definition down), the others re-ordered around them."""
    head = hits[:depth]
    if len(head) < 2:
        return hits
    feats = features_for_lanes(store, [(terms, head)], hits, dense, [question] if dense is not None else None, scope)
    free = [i for i, h in enumerate(head) if h.capsule.id not in keep]
    moved = iter(rerank(model, [feats[0][i] for i in free], [head[i] for i in free]))
    out = []
    for h in head:
        if h.capsule.id in keep:
            out.append(h)
            continue
        m = next(moved)
        m.why["rerank"]["was"] = free[m.why["rerank"]["was"] - 1] + 1  # its place in the whole first stage
        out.append(m)
    return out + hits[depth:]


def degrees(
    store, ids: list[str], classes: AbstractSet[str] = frozenset(), scope: Scope = EVERYTHING
) -> dict[str, tuple[int, int]]:
    """(callers, callees) per capsule id, by edge queries. A class's calls are made by its methods, so a
    class's callees are the distinct units its methods call (without this every class reads as a leaf)."""
    callers: dict[str, int] = {}
    callees: dict[str, int] = {}
    for e in store.edges_to(ids, ("calls",), scope):
        callers[e.dst] = callers.get(e.dst, 0) + 1
    for e in store.edges_from(ids, ("calls",), scope):
        callees[e.src] = callees.get(e.src, 0) + 1
    if classes:
        owner = {e.dst: e.src for e in store.edges_from(sorted(classes), ("contains",), scope)}
        called: dict[str, set[str]] = {}
        for e in store.edges_from(sorted(owner), ("calls",), scope):
            if e.dst not in owner:  # calls between a class's own methods stay inside it
                called.setdefault(owner[e.src], set()).add(e.dst or e.dst_name)
        for cls, dsts in called.items():
            callees[cls] = callees.get(cls, 0) + len(dsts)
    return {i: (callers.get(i, 0), callees.get(i, 0)) for i in ids}


def lane_counts(lanes: list[list[Hit]], top: int = 10) -> dict[str, int]:
    counts: dict[str, int] = {}
    for hits in lanes:
        for h in hits[:top]:
            counts[h.capsule.id] = counts.get(h.capsule.id, 0) + 1
    return counts


def _words(text: str) -> list[str]:
    return [p.lower() for w in re.findall(r"[A-Za-z0-9]+", text) for p in split_identifier(w)]


def name_phrase(c) -> str:
    """A unit's name read as words, with where it lives: ``RelatedPopulator`` in django/db/models/query.py
    → "related populator (django db models query)"."""
    path = [t for t in _words(c.path.rsplit(".", 1)[0]) if t not in ("src", "lib")]
    return f"{' '.join(_words(c.qualname))} ({' '.join(path)})"


def features_for_lanes(
    store,
    lanes: list[tuple[list[str], list[Hit]]],
    question_hits: list[Hit],
    dense=None,
    texts: list[str] | None = None,
    scope: Scope = EVERYTHING,
) -> list[list[dict]]:
    """Features of every lane's hits; lanes are (sub-query content terms, hits), question_hits the whole
    question's own search; with a dense retriever and the sub-queries' texts, how close each unit's
    name, read as words, is to its sub-query. The same code serves inference and training."""
    qranks = {h.capsule.id: r for r, h in enumerate(question_hits, 1)}
    counts = lane_counts([hits for _, hits in lanes])
    ids = list(dict.fromkeys(h.capsule.id for _, hits in lanes for h in hits))
    deg = degrees(store, ids, {h.capsule.id for _, hits in lanes for h in hits if h.capsule.kind == "class"}, scope)
    names = store.name_counts(sorted({h.capsule.name for _, hits in lanes for h in hits}), scope)
    sims = [None] * len(lanes)
    if dense and texts:
        sims = dense.similarities(
            [(text, [name_phrase(h.capsule) for h in hits]) for text, (_, hits) in zip(texts, lanes, strict=True)]
        )
    return [
        lane_features(terms, hits, qranks, counts, deg, names, s) for (terms, hits), s in zip(lanes, sims, strict=True)
    ]


def rerank(model: LinearReranker, feats: list[dict[str, float]], hits: list[Hit]) -> list[Hit]:
    """The lane re-ordered by the model; each hit records its rerank score and first-stage rank."""
    scored = [(model.score(f), r, h) for r, (f, h) in enumerate(zip(feats, hits, strict=True), 1)]
    scored.sort(key=lambda x: (-x[0], x[1]))
    return [Hit(h.capsule, h.score, {**h.why, "rerank": {"score": round(s, 3), "was": r}}) for s, r, h in scored]
