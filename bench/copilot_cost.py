"""What a copilot turn costs: model calls, tool calls and tokens, through the real Strands loop.

    python bench/copilot_cost.py            # markdown table
    python bench/copilot_cost.py --json     # the numbers as JSON

The model is scripted (``repoctx.copilot.scripted.ScriptedToolModel``): it asks for the tools a real
model would and then answers citing what they returned, so the loop, the hooks, the limits and the
prompt sizes are the real ones. Tokens are the scripted model's estimate (four characters a token of
everything sent: system prompt, tool specs, conversation) -- the shape of the cost, not any provider's
bill. The repository is repoctx's own source, indexed lexically (no embeddings) into a temp folder.
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

from repoctx import Index, Settings
from repoctx.copilot.agent import Limits, ask, build_agent, parse_citations
from repoctx.copilot.scripted import ScriptedToolModel, last_tool_results

ROOT = Path(__file__).resolve().parent.parent / "src" / "repoctx"
QUESTION = "How does the index decide that a file changed and must be re-parsed?"


def tools_for(ix: Index) -> list:
    from repoctx.copilot.tools import make_tools

    return make_tools(ix, None)


def answer_citing(messages) -> str:
    found = parse_citations(json.dumps(last_tool_results(messages)))
    cites = ", ".join(c["citation"] for c in found[:3])
    return f"Files are compared by content hash before re-parsing; see {cites}." if cites else "I found nothing relevant."


def scenarios(names: set[str]) -> list[tuple[str, list, Limits]]:
    search = {"tool": "search_code", "input": {"query": "file changed content hash re-parse"}}
    out = [
        ("answer without tools", ["The index compares content hashes."], Limits()),
        ("1 search, answer", [search, answer_citing], Limits()),
        ("3 searches, answer", [search, {"tool": "search_code", "input": {"query": "stale files"}},
                                {"tool": "search_code", "input": {"query": "update_index writer"}}, answer_citing],
         Limits()),
        ("2 searches in one call, answer", [{"tools": [search, {"tool": "search_code",
                                                                 "input": {"query": "stale files"}}]}, answer_citing],
         Limits()),
    ]
    if "read_file" in names:
        out.append(("search, read_file, answer", [search, {"tool": "read_file", "input": {"path": "indexer.py"}},
                                                   answer_citing], Limits()))
    out += [
        ("runaway: cut at tool-call limit 6", [search], Limits()),
        ("runaway: cut at model-call limit 8", [search], Limits(tool_calls=100, model_calls=8)),
    ]
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        ix = Index(ROOT, Settings(index_dir=Path(tmp) / "ix", embedder="none"))
        ix.update()
        tools = tools_for(ix)
        names = {getattr(t, "tool_name", "") for t in tools}
        rows = []
        for title, steps, limits in scenarios(names):
            copilot = build_agent(ix, model=ScriptedToolModel(steps), tools=tools, limits=limits)
            r = ask(copilot, QUESTION)
            m = r.metrics
            rows.append({"scenario": title, "model_calls": m.model_calls, "tool_calls": m.tool_calls,
                         "tokens_in": m.tokens_in, "tokens_out": m.tokens_out, "limit_cut": m.limit_cut,
                         "citations": len(r.citations), "verified": sum(c["verified"] for c in r.citations),
                         "latency_ms": round(m.latency_s * 1000, 1)})
    if args.json:
        json.dump(rows, sys.stdout, indent=2)
        print()
        return
    print(f"Copilot turn cost (scripted model, {len(tools)} tool(s): {', '.join(sorted(names))}; "
          "tokens estimated at 4 chars/token)\n")
    print("| scenario | model calls | tool calls | tokens in | tokens out | cut | cited (verified) | loop ms |")
    print("|---|---:|---:|---:|---:|---|---:|---:|")
    for r in rows:
        print(f"| {r['scenario']} | {r['model_calls']} | {r['tool_calls']} | {r['tokens_in']:,} | "
              f"{r['tokens_out']:,} | {r['limit_cut'] or ''} | {r['citations']} ({r['verified']}) | "
              f"{r['latency_ms']} |")


if __name__ == "__main__":
    main()
