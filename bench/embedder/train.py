"""Stage `train`: contrastive fine-tuning (MultipleNegativesRankingLoss in plain torch) on CPU.

Each step: a batch of (query, code) pairs; every query is scored against all codes of the batch plus
the pairs' hard negatives (cosine x scale); cross-entropy towards its own code. AdamW, linear warmup
then linear decay, gradient norm clipped at 1. Resumable: ``WORK/train/ckpt.pt`` holds the model, the
optimiser, the step and the RNG states, written every ``--ckpt-every`` steps by an atomic rename; a
run with the same settings continues from it. The data order is a function of (seed, epoch), so a
resumed run sees the batches an uninterrupted one would have.
"""
from __future__ import annotations

import hashlib
import json
import math
import shutil
import time
from pathlib import Path

import numpy as np

from .mine import read_jsonl, stable_unit
from .model import Tokens, base_model_dir, embed, evaluate, format_metrics, load_model, pad, \
    release_validation_set, torch_encoder, validation_set

CODE_MAX_LENGTH = 128  # the product embeds code at 128 tokens


def load_pairs(work: Path, max_pairs: int | None) -> list[dict]:
    path = work / "pairs" / "train.jsonl"
    if not path.exists():
        raise SystemExit(f"{path} is missing: run the mine stage first")
    rows = read_jsonl(path)
    if max_pairs and len(rows) > max_pairs:  # a fixed subset, spread over packages
        rows = sorted(rows, key=lambda r: stable_unit("subset", r["package"], r["path"], r["qualname"], r["query"]))
        rows = sorted(rows[:max_pairs], key=lambda r: (r["package"], r["path"], r["qualname"]))
    return rows


def load_release_pairs(work: Path, share: float) -> list[dict]:
    path = work / "pairs" / "train_release.jsonl"
    if share <= 0:
        return []
    if not path.exists():
        raise SystemExit(f"--release-share {share}: {path} is missing: run the mine stage with --releases N")
    return read_jsonl(path)


def load_validation(work: Path, args) -> dict:
    pairs = read_jsonl(work / "pairs" / "val.jsonl")
    pool = read_jsonl(work / "pairs" / "val_pool.jsonl")
    vset = validation_set(pairs, pool, args.val_queries, args.val_pool)
    rel = work / "pairs" / "val_release.jsonl"
    if rel.exists():
        rset = release_validation_set(read_jsonl(rel))
        if rset["queries"]:
            vset["release notes"] = rset
    return vset


def run_config(args, n_pairs: int, steps: int, data_hash: str, n_release: int = 0) -> dict:
    return {"steps": steps, "batch_size": args.batch_size, "lr": args.lr, "warmup": args.warmup,
            "weight_decay": args.weight_decay, "scale": args.scale, "seed": args.seed,
            "query_max_length": args.query_max_length, "code_max_length": CODE_MAX_LENGTH,
            "hard_negatives": args.hard_negatives, "freeze_layers": args.freeze_layers, "pairs": n_pairs,
            "data": data_hash} | ({"release_share": args.release_share, "release_pairs": n_release}
                                 if n_release else {})


def lr_factor(step: int, total: int, warmup: int) -> float:
    if step < warmup:
        return (step + 1) / max(1, warmup)
    return max(0.0, (total - step) / max(1, total - warmup))


def save_atomic(obj, path: Path) -> None:
    import torch

    tmp = path.with_suffix(".tmp")
    torch.save(obj, tmp)
    tmp.replace(path)


def train(work: Path, args) -> dict:
    import torch

    torch.set_num_threads(args.threads)
    torch.set_num_interop_threads(1)
    out = work / "train"
    out.mkdir(parents=True, exist_ok=True)
    tokens = Tokens()
    rows = load_pairs(work, args.max_pairs)
    n = len(rows)
    rel_rows = load_release_pairs(work, args.release_share)
    n_rel_batch = int(round(args.release_share * args.batch_size)) if rel_rows else 0
    n_doc_batch = args.batch_size - n_rel_batch
    if n < n_doc_batch or len(rel_rows) < n_rel_batch:
        raise SystemExit(f"{n} training pairs ({len(rel_rows)} release-note pairs): fewer than one batch")
    per_epoch = n // n_doc_batch
    steps = args.steps or max(1, math.ceil(args.epochs * per_epoch))
    digest = hashlib.sha1((work / "pairs" / "train.jsonl").read_bytes())
    if rel_rows:
        digest.update((work / "pairs" / "train_release.jsonl").read_bytes())
    data_hash = digest.hexdigest()[:12]
    config = run_config(args, n, steps, data_hash, len(rel_rows))
    model_dir = out / "model"
    if not args.fresh and (out / "metrics.json").exists() and (model_dir / "model.safetensors").exists():
        done = json.loads((out / "metrics.json").read_text())
        if done.get("config") == config and done.get("val") == _val_key(work, args):
            print("[train] already trained with these settings (--fresh to train again)", flush=True)
            print(format_metrics("base model ", done["base"]))
            print(format_metrics("fine-tuned ", done["tuned"]))
            return done
    print(f"[train] {n} pairs, batch {args.batch_size}, {steps} steps ({steps / per_epoch:.2f} epochs), "
          f"lr {args.lr}, {args.threads} threads", flush=True)

    vset = load_validation(work, args)
    base_file = out / "base_metrics.json"
    model = load_model(base_model_dir())
    if base_file.exists() and json.loads(base_file.read_text()).get("val") == _val_key(work, args):
        base = json.loads(base_file.read_text())["metrics"]
    else:
        t0 = time.perf_counter()
        n_texts = sum(len(v["queries"]) + len(v["docs"]) for v in vset.values())
        print(f"[train] validating the base model on {n_texts} texts ({', '.join(vset)})", flush=True)
        base = evaluate(torch_encoder(model, tokens), vset)
        base_file.write_text(json.dumps({"val": _val_key(work, args), "metrics": base}, indent=1))
        print(f"[train] validation of the base model took {time.perf_counter() - t0:.0f} s", flush=True)
    print(format_metrics("base model ", base), flush=True)

    # tokenise once: queries, positives, and each pair's hard negatives (BM25 first, then the file neighbour);
    # release-note pairs follow the docstring pairs (indexes n.. n + len(rel_rows) - 1)
    rows = rows + rel_rows
    q_ids = tokens.ids([r["query"] for r in rows], args.query_max_length)
    p_ids = tokens.ids([r["positive"] for r in rows], CODE_MAX_LENGTH)
    neg_texts = [[x["text"] for x in (r.get("neg_bm25"), r.get("neg_file")) if x] for r in rows]
    flat = [t for ts in neg_texts for t in ts]
    flat_ids = iter(tokens.ids(flat, CODE_MAX_LENGTH))
    n_ids = [[next(flat_ids) for _ in ts] for ts in neg_texts]
    pos_text = [r["positive"] for r in rows]

    torch.manual_seed(args.seed)
    model.train()
    if args.freeze_layers:  # no gradient below layer N: a cheaper backward pass
        for p in [*model.embeddings.parameters(), *(q for layer in model.encoder.layer[: args.freeze_layers]
                                                     for q in layer.parameters())]:
            p.requires_grad_(False)
    no_decay = ("bias", "LayerNorm.weight", "LayerNorm.bias")
    groups = [
        {"params": [p for k, p in model.named_parameters() if p.requires_grad and not any(s in k for s in no_decay)],
         "weight_decay": args.weight_decay},
        {"params": [p for k, p in model.named_parameters() if p.requires_grad and any(s in k for s in no_decay)],
         "weight_decay": 0.0},
    ]
    optim = torch.optim.AdamW(groups, lr=args.lr)
    warmup = int(args.warmup * steps)
    sched = torch.optim.lr_scheduler.LambdaLR(optim, lambda s: lr_factor(s, steps, warmup))
    start = 0
    ckpt_path = out / "ckpt.pt"
    if ckpt_path.exists() and not args.fresh:
        ck = torch.load(ckpt_path, weights_only=False)
        if ck["config"] == config:
            model.load_state_dict(ck["model"])
            optim.load_state_dict(ck["optim"])
            sched.load_state_dict(ck["sched"])
            torch.set_rng_state(ck["torch_rng"])
            start = ck["step"]
            print(f"[train] resumed at step {start}/{steps}", flush=True)
        else:
            print("[train] the checkpoint was made with other settings: starting afresh (use the same "
                  "options to resume)", flush=True)
    log = (out / "log.jsonl").open("a")
    t_run, cpu_run = time.perf_counter(), time.process_time()
    done_here, losses = 0, []
    step = start
    for step in range(start, steps):
        t0 = time.perf_counter()
        epoch, b = divmod(step, per_epoch)
        perm = np.random.default_rng([args.seed, epoch]).permutation(n)
        idx = perm[b * n_doc_batch:(b + 1) * n_doc_batch]
        if n_rel_batch:  # each batch: this share of release-note pairs, drawn in their own passes
            r_epoch, r_b = divmod(step, len(rel_rows) // n_rel_batch)
            r_perm = np.random.default_rng([args.seed, 2_000_000 + r_epoch]).permutation(len(rel_rows))
            idx = np.concatenate([idx, n + r_perm[r_b * n_rel_batch:(r_b + 1) * n_rel_batch]])
        rng = np.random.default_rng([args.seed, 1_000_000 + step])
        codes = [p_ids[i] for i in idx]
        in_batch = {pos_text[i] for i in idx}
        for i in idx:  # hard negatives, never a text that is also a positive of this batch
            cands = [k for k in range(len(n_ids[i])) if neg_texts[i][k] not in in_batch]
            if args.hard_negatives == 1 and cands:
                codes.append(n_ids[i][cands[int(rng.integers(len(cands)))]])
            elif args.hard_negatives >= 2:
                codes += [n_ids[i][k] for k in cands]
        qi, qm = pad([q_ids[i] for i in idx])
        ci, cm = pad(codes)
        q = embed(model, qi, qm)
        c = embed(model, ci, cm)
        scores = args.scale * q @ c.T
        loss = torch.nn.functional.cross_entropy(scores, torch.arange(len(idx)))
        optim.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_([p for p in model.parameters() if p.requires_grad], 1.0)
        optim.step()
        sched.step()
        dt = time.perf_counter() - t0
        done_here += 1
        losses.append(loss.item())
        log.write(json.dumps({"step": step + 1, "loss": round(losses[-1], 5), "lr": sched.get_last_lr()[0],
                              "sec": round(dt, 3), "codes": len(codes)}) + "\n")
        if done_here == 5 or (step + 1) % args.log_every == 0 or step + 1 == steps:
            rate = (time.perf_counter() - t_run) / done_here
            cpu = (time.process_time() - cpu_run) / done_here
            print(f"[train] step {step + 1}/{steps}  loss {np.mean(losses[-args.log_every:]):.4f}  "
                  f"{rate:.2f} s/step ({cpu:.1f} CPU-s/step)  ~{(steps - step - 1) * rate / 60:.1f} min left",
                  flush=True)
            log.flush()
        if (step + 1) % args.ckpt_every == 0 and step + 1 < steps:
            save_atomic({"config": config, "step": step + 1, "model": model.state_dict(),
                         "optim": optim.state_dict(), "sched": sched.state_dict(),
                         "torch_rng": torch.get_rng_state()}, ckpt_path)
    log.close()
    sec_per_step = (time.perf_counter() - t_run) / max(1, done_here)
    cpu_per_step = (time.process_time() - cpu_run) / max(1, done_here)

    tmp = out / "model.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    model.save_pretrained(tmp, safe_serialization=True)
    shutil.copy(tokens.path, tmp / "tokenizer.json")
    shutil.rmtree(model_dir, ignore_errors=True)
    tmp.replace(model_dir)
    tuned = evaluate(torch_encoder(model, tokens), vset)
    print(format_metrics("base model ", base), flush=True)
    print(format_metrics("fine-tuned ", tuned), flush=True)
    result = {"config": config, "steps_run_here": done_here, "sec_per_step": round(sec_per_step, 3),
              "cpu_sec_per_step": round(cpu_per_step, 3),
              "threads": args.threads, "final_loss": round(float(np.mean(losses[-50:])), 4) if losses else None,
              "base": base, "tuned": tuned, "val": _val_key(work, args)}
    (out / "metrics.json").write_text(json.dumps(result, indent=1))
    if ckpt_path.exists():
        ckpt_path.unlink()  # the model is saved; a later run with other settings starts from the base
    return result


def _val_key(work: Path, args) -> list:
    """What the validation figures depend on: the sample sizes and the validation data."""
    digest = hashlib.sha1()
    for name in ("val.jsonl", "val_pool.jsonl", "val_release.jsonl"):
        if (work / "pairs" / name).exists():
            digest.update((work / "pairs" / name).read_bytes())
    return [args.val_queries, args.val_pool, digest.hexdigest()[:12]]
