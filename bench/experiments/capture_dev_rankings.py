"""Capture, per dev row, the default search's ranked functions (with file) and its file ranking (session 14).

    python bench/experiments/capture_dev_rankings.py ../shared/eval/swebench_lite_dev.jsonl OUT.json

OUT.json feeds bench/experiments/top_file_slots.py (a re-ordering simulated on the captured rankings)."""
import json, sys
from repoctx.config import Settings
from repoctx.evaluate.runner import open_corpus_index, function_ranking, load_rows
from repoctx.retrieve.hybrid import SearchOptions, file_aggregation, to_files
s = Settings.from_env()
out = []
for row in load_rows(sys.argv[1]):
    ix = open_corpus_index(row, False, s); ix.update()
    opts = SearchOptions(pool=300)
    hits = ix.retrieve(row["query"], k=300, mode="standard", options=opts).hits
    files = [f.path for f in to_files(hits, file_aggregation(opts.file_agg, row["query"]))]
    funcs = function_ranking(hits, ix)
    out.append({"id": row["instance_id"], "repo": row["repo"], "files": files[:50], "funcs": funcs[:200],
                "gold_files": row["gold_files"], "gold_funcs": row.get("gold_functions") or [],
                "agg": file_aggregation(opts.file_agg, row["query"])})
    ix.close()
json.dump(out, open(sys.argv[2], "w"))
