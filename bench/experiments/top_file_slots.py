"""Simulate, on rankings captured by capture_dev_rankings.py, reserving the last ``slots`` of the first ten
functions for the best further functions of the first ``top_files`` files (session 14; not built: at most
+3 rows of function Acc@10 on the dev split, and a setting chosen on one half does not hold on the other).

    python bench/experiments/top_file_slots.py OUT.json
"""
import json, sys
rows = json.load(open(sys.argv[1]))
def path(k): return k.split(":")[0]
def acc(ranked, gold, k): return all(g in ranked[:k] for g in gold)
def mrr(ranked, gold):
    for i, x in enumerate(ranked, 1):
        if x in gold: return 1 / i
    return 0
def policy(r, top_files=1, slots=3, head=10):
    f = r["funcs"]; files = r["files"]
    if not files: return f
    keep = f[:head - slots]
    tf = set(files[:top_files])
    extra = [x for x in f[head - slots:] if path(x) in tf][:slots]
    rest = [x for x in f if x not in keep and x not in extra]
    return keep + extra + rest
def report(name, fn, sel=lambda r: True):
    R = [r for r in rows if r["gold_funcs"] and sel(r)]
    res = {k: 100 * sum(acc(fn(r), r["gold_funcs"], k) for r in R) / len(R) for k in (1, 5, 10)}
    m = 100 * sum(mrr(fn(r), r["gold_funcs"]) for r in R) / len(R)
    return f"{name:28s} n={len(R)} @1 {res[1]:.1f} @5 {res[5]:.1f} @10 {res[10]:.1f} mrr {m:.1f}"
ev = {r["id"] for i, r in enumerate(rows) if i % 2 == 0}
for name, fn in [("base", lambda r: r["funcs"])] + [
        (f"tf{t} slots{s}", (lambda t, s: lambda r: policy(r, t, s))(t, s)) for t in (1, 2) for s in (1, 2, 3, 4, 5)]:
    print(report(name, fn), "|", report("even", fn, lambda r: r["id"] in ev)[29:], "|", report("odd", fn, lambda r: r["id"] not in ev)[29:])
