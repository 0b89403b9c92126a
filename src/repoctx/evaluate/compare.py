"""Two runs of ``repoctx eval`` compared row by row: on the whole split and on each half of it.

The rule a ranking change is kept by (issue 44) reads halves: a change is kept when it raises file Acc@1 and
function Acc@10 on both halves of the dev split. Halves are the odd and the even rows counted from 1 in the
dataset's order (``order``: its instance ids), so that the two halves interleave the repositories alike.
Acc@k is counted as ``repoctx eval`` counts it: every gold file (function) of a row within the first k.
"""

from __future__ import annotations

from collections.abc import Sequence

from repoctx.evaluate.metrics import mcnemar

LEVELS = {"file": (1, 3, 5, 10), "function": (1, 5, 10)}
RULE = (("file", 1), ("function", 10))  # what a kept change must raise on both halves
HALVES = ("odd", "even")


def within(row: dict, level: str, k: int) -> bool | None:
    """Whether every gold of ``row`` at ``level`` is within the first k (None: the row has no gold there)."""
    ranks = list((row.get(f"gold_{level}_ranks") or {}).values())
    if not ranks:
        return None
    return all(r is not None and r <= k for r in ranks)


def reciprocal(row: dict, level: str) -> float:
    """1 / the rank of the row's first gold at ``level`` (0 when none is ranked)."""
    first = row.get(f"{level}_rank")
    return 1.0 / first if first else 0.0


def _part(before: Sequence[dict], after: Sequence[dict]) -> dict:
    out: dict = {"rows": len(before)}
    for level, ks in LEVELS.items():
        pairs = [(a, b) for a, b in zip(before, after, strict=True) if within(a, level, 1) is not None]
        out[level] = {"rows": len(pairs)}
        n = max(len(pairs), 1)
        for k in ks:
            was = [{"acc": float(bool(within(a, level, k)))} for a, _ in pairs]
            now = [{"acc": float(bool(within(b, level, k)))} for _, b in pairs]
            gained, lost, p = mcnemar(was, now, "acc")
            out[level][f"acc@{k}"] = {
                "before": round(100 * sum(w["acc"] for w in was) / n, 1),
                "after": round(100 * sum(w["acc"] for w in now) / n, 1),
                "gained": gained,
                "lost": lost,
                "p": round(p, 4),
            }
        out[level]["mrr"] = {
            "before": round(100 * sum(reciprocal(a, level) for a, _ in pairs) / n, 1),
            "after": round(100 * sum(reciprocal(b, level) for _, b in pairs) / n, 1),
        }
    return out


def compare(before: dict, after: dict, order: Sequence[str] | None = None) -> dict:
    """``before`` and ``after``: one config's result of ``repoctx eval --json`` (its ``rows``). The rows scored in
    both are paired by instance id; ``order``: the dataset's instance ids in order, which place each row in a half
    (default: the order of ``before``'s rows, the dataset's when no row was skipped). Returns ``{"rows", "only_before",
    "only_after", "parts": {"all" | "odd" | "even": {level: {"acc@k": {before, after, gained, lost, p}, "mrr"}}},
    "rule": {"held": bool, "lines": [...]}}``: ``rule`` says whether file Acc@1 and function Acc@10 rose on both
    halves."""
    was = {r["instance_id"]: r for r in before.get("rows", [])}
    now = {r["instance_id"]: r for r in after.get("rows", [])}
    order = list(order) if order is not None else list(was)
    place = {iid: i for i, iid in enumerate(order)}
    missing = [i for i in was if i in now and i not in place]
    if missing:
        raise ValueError(f"{len(missing)} rows are not in the dataset's order (first: {missing[0]})")
    both = sorted((i for i in was if i in now), key=place.__getitem__)
    groups = {"all": both, "odd": [i for i in both if place[i] % 2 == 0], "even": [i for i in both if place[i] % 2]}
    parts = {name: _part([was[i] for i in ids], [now[i] for i in ids]) for name, ids in groups.items()}
    lines, held = [], True
    for level, k in RULE:
        for half in HALVES:
            m = parts[half][level][f"acc@{k}"]
            rose = m["after"] > m["before"]
            held = held and rose
            lines.append(
                f"{level} Acc@{k}, {half} half: {m['before']} -> {m['after']} ({'raised' if rose else 'not raised'})"
            )
    return {
        "rows": len(both),
        "only_before": sorted(set(was) - set(now)),
        "only_after": sorted(set(now) - set(was)),
        "parts": parts,
        "rule": {"held": held, "lines": lines},
    }


def markdown(result: dict, before: str = "before", after: str = "after") -> str:
    """The comparison as a table: a line per part (all rows, odd half, even half), then the rule's verdict."""
    cols = [(level, f"acc@{k}") for level, ks in LEVELS.items() for k in ks]
    head = " | ".join(f"{level} Acc@{m[4:]}" for level, m in cols)
    lines = [
        f"{before} → {after}, {result['rows']} rows scored in both (gained / lost, exact McNemar p)",
        "",
        f"| part | rows | {head} | file MRR | function MRR |",
        "|---|---|" + "---|" * (len(cols) + 2),
    ]
    for name, part in result["parts"].items():
        cells = []
        for level, m in cols:
            v = part[level][m]
            cells.append(f"{v['before']} → {v['after']} (+{v['gained']} -{v['lost']}, p {v['p']:.2g})")
        mrr = [f"{part[level]['mrr']['before']} → {part[level]['mrr']['after']}" for level in LEVELS]
        label = "all" if name == "all" else f"{name} half"
        lines.append(f"| {label} | {part['rows']} | " + " | ".join(cells + mrr) + " |")
    rule = result["rule"]
    lines += [
        "",
        "Kept only if file Acc@1 and function Acc@10 rise on both halves: "
        + ("**held**" if rule["held"] else "**not held**")
        + " ("
        + "; ".join(rule["lines"])
        + ").",
    ]
    if result["only_before"] or result["only_after"]:
        lines.append(
            f"Rows scored in one run only (left out): {len(result['only_before'])} before, "
            f"{len(result['only_after'])} after."
        )
    return "\n".join(lines) + "\n"
