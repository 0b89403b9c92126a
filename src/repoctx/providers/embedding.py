"""Embedding providers behind LangChain's :class:`~langchain_core.embeddings.Embeddings`.

* :class:`LocalMiniLM` — the offline default: a MiniLM shipped inside repoctx (``SHIPPED_MODELS``: all-MiniLM-L6-v2
  as int8 ONNX, ``data/minilm-l6-v2-pc-int8.onnx``, exported by ``bench/train_embedder.py base``; or the same
  network tuned for code, ``local:code``) or an ONNX file of one's own, all run one way: onnxruntime, the
  all-MiniLM-L6-v2 ``tokenizer.json`` shipped in ``data/``, mean pooling over the attention mask + L2
  normalisation, as sentence-transformers does. Nothing is loaded until the first text is embedded.
* :class:`RemoteEmbeddings` — a thin wrapper over a LangChain embeddings object (Bedrock, any
  OpenAI-compatible endpoint such as vLLM or LiteLLM, Ollama) that adds ``model_id``, ``dim`` and
  ``encode``. Each provider package is optional and imported only when asked for.
* :class:`JointEmbedder` — several of the above side by side in one vector (``local+local:code*0.5``).
* :func:`get_embedder` — builds one of the above from a spec string.
* :func:`embed_text` — the compact text embedded for a code unit.
* :func:`count_tokens` — token count with the MiniLM tokenizer (for context budgets).

Every embedder returned here has ``model_id: str`` (changes when the vectors would change: model,
``max_length``, requested dimensions), ``dim: int`` and ``encode(texts) -> np.ndarray`` (float32,
shape ``(n, dim)``); ``embed_documents`` / ``embed_query`` return plain lists as LangChain expects.
"""

from __future__ import annotations

import hashlib
import importlib
import itertools
import os
import sys
import threading
from collections.abc import Callable, Mapping, Sequence
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from langchain_core.embeddings import Embeddings

__all__ = [
    "LocalMiniLM",
    "RemoteEmbeddings",
    "JointEmbedder",
    "get_embedder",
    "check_spec",
    "embed_text",
    "count_tokens",
    "shipped_model_file",
    "tokenizer_file",
    "SHIPPED_MODELS",
    "DEFAULT_SPEC",
]

DEFAULT_SPEC = "local"
MINILM_DIM = 384
MINILM_MAX_POSITIONS = 512

DEFAULT_MODEL_NAME = "minilm-l6-v2-pc-int8"
CODE_MODEL_NAME = "minilm-code2-int8"
DATA = Path(__file__).resolve().parent.parent / "data"  # the files shipped inside repoctx

# The MiniLM files shipped in ``data/`` (``NAME.onnx``, each with its card), by the name that goes into
# ``model_id``, with what ``REPOCTX_EMBEDDER=local:...`` may call each.
# * minilm-l6-v2-pc-int8: all-MiniLM-L6-v2's own weights, exported to ONNX and quantised dynamically to int8
#   with per-channel weight scales (``bench/train_embedder.py base``, ``data/MINILM_DEFAULT_CARD.md``).
# * minilm-code2-int8: the same network fine-tuned here for code search (``bench/train_embedder.py``,
#   ``data/MINILM_CODE_CARD.md``).
SHIPPED_MODELS: dict[str, tuple[str, ...]] = {
    DEFAULT_MODEL_NAME: ("", "minilm", "minilm-l6-v2", "all-minilm-l6-v2", DEFAULT_MODEL_NAME),
    CODE_MODEL_NAME: ("code", CODE_MODEL_NAME),
}


# --------------------------------------------------------------------------- locating files


def shipped_model_file(name: str = DEFAULT_MODEL_NAME) -> Path:
    """The ONNX file of a MiniLM shipped inside repoctx (a key of ``SHIPPED_MODELS``)."""
    if name not in SHIPPED_MODELS:
        raise ValueError(f"no shipped model named {name!r}: one of {', '.join(SHIPPED_MODELS)}")
    path = DATA / f"{name}.onnx"
    if not path.is_file():
        raise RuntimeError(f"{path} is missing: reinstall repoctx")
    return path


def tokenizer_file() -> Path:
    """The all-MiniLM-L6-v2 ``tokenizer.json``, shipped inside repoctx (see ``data/NOTICE.md``)."""
    path = DATA / "minilm_tokenizer.json"
    if not path.is_file():
        raise RuntimeError(f"{path} is missing: reinstall repoctx")
    return path


def _load_tokenizer(path: Path):
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(path))
    # The shipped tokenizer.json carries truncation=128 and fixed padding=128: drop both.
    tok.no_truncation()
    tok.no_padding()
    return tok


@lru_cache(maxsize=4)
def _counting_tokenizer(path: str | None = None):
    return _load_tokenizer(Path(path) if path else tokenizer_file())


def count_tokens(text: str) -> int:
    """Number of MiniLM (BERT WordPiece) tokens in ``text``: no special tokens, no truncation.

    The Tokenizer is loaded once and cached. Long texts are split on line boundaries into pieces
    encoded in one parallel ``encode_batch`` call (WordPiece never crosses whitespace, so the
    count is the same).
    """
    if not text:
        return 0
    tok = _counting_tokenizer()
    if len(text) <= 20_000:
        return len(tok.encode(text, add_special_tokens=False).ids)
    pieces = _split_on_newlines(text, 16_000)
    return sum(len(e.ids) for e in tok.encode_batch(pieces, add_special_tokens=False))


def _split_on_newlines(text: str, size: int) -> list[str]:
    out, start, n = [], 0, len(text)
    while start < n:
        end = min(start + size, n)
        if end < n:
            cut = text.rfind("\n", start, end)
            if cut <= start:  # no newline: cut at whitespace, else hard
                cut = max(text.rfind(" ", start, end), text.rfind("\t", start, end))
            if cut > start:
                end = cut + 1
        out.append(text[start:end])
        start = end
    return out


# --------------------------------------------------------------------------- local model


def _as_langchain_embeddings(cls: type) -> None:
    """Make ``cls`` a LangChain ``Embeddings`` (a virtual subclass: it has ``embed_documents`` and
    ``embed_query``) once LangChain is loaded. Importing LangChain costs about half a second, which a
    one-shot `repoctx search` with the local model should not pay."""
    if "langchain_core.embeddings" in sys.modules:
        from langchain_core.embeddings import Embeddings

        if not issubclass(cls, Embeddings):
            Embeddings.register(cls)


class _AsyncForms:
    """LangChain's async forms of an embedder (its base class would give them; registered virtual
    subclasses do not inherit them)."""

    embed_documents: Callable[[list[str]], list[list[float]]]
    embed_query: Callable[[str], list[float]]

    async def aembed_documents(self, texts: list[str]) -> list[list[float]]:
        import asyncio

        return await asyncio.to_thread(self.embed_documents, texts)

    async def aembed_query(self, text: str) -> list[float]:
        import asyncio

        return await asyncio.to_thread(self.embed_query, text)


def _unit(a: np.ndarray) -> np.ndarray:
    """Rows scaled to unit length (inner product == cosine), a zero row left as it is."""
    return a / np.clip(np.linalg.norm(a, axis=-1, keepdims=True), 1e-12, None)


@lru_cache(maxsize=16)
def _digest(path: str, size: int, mtime_ns: int) -> str:
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()[:12]


def _file_digest(path: Path) -> str:
    st = path.stat()
    return _digest(str(path.resolve()), st.st_size, st.st_mtime_ns)


class LocalMiniLM(_AsyncForms):
    """all-MiniLM-L6-v2 (int8 ONNX) on CPU: offline, 384-d, unit-norm float32 vectors. A LangChain
    ``Embeddings`` (registered as one as soon as LangChain is loaded; see ``_as_langchain_embeddings``).

    ``model``: which file shipped inside repoctx (a key of ``SHIPPED_MODELS``; its name goes into
    ``model_id``); ``model_path`` instead runs a MiniLM-shaped ONNX file of one's own (named in ``model_id``
    by its content), with ``tokenizer_path`` if it has its own tokenizer. Every one runs the same way.

    ``max_length``: tokens per text including [CLS]/[SEP] (longer texts are truncated; the model
    was trained at 256; 128 is ~2x faster and scored as well or better on the SWE-bench dev rows, so
    it is the default). ``batch_size``: texts per onnxruntime call.
    ``threads``: onnxruntime intra-op threads. The session is created on first use; one instance
    can be shared between threads.
    """

    def __init__(
        self,
        max_length: int = 128,
        batch_size: int = 32,
        threads: int = 2,
        *,
        model: str = DEFAULT_MODEL_NAME,
        model_path: str | os.PathLike | None = None,
        tokenizer_path: str | os.PathLike | None = None,
    ) -> None:
        if not 8 <= int(max_length) <= MINILM_MAX_POSITIONS:
            raise ValueError(f"max_length must be in 8..{MINILM_MAX_POSITIONS}, got {max_length}")
        if int(batch_size) < 1 or int(threads) < 1:
            raise ValueError("batch_size and threads must be >= 1")
        _as_langchain_embeddings(type(self))
        self.max_length = int(max_length)
        self.batch_size = int(batch_size)
        self.threads = int(threads)
        if model_path is None and model not in SHIPPED_MODELS:
            raise ValueError(f"no shipped model named {model!r}: one of {', '.join(SHIPPED_MODELS)}")
        self._own = Path(model_path) if model_path else None  # a file of one's own, else the shipped ``model``
        self._model = model
        self._tokenizer_path = Path(tokenizer_path) if tokenizer_path else None
        self._lock = threading.Lock()
        self._session: Any = None  # an onnxruntime InferenceSession, once loaded
        self._tokenizer: Any = None
        self._input_names: tuple[str, ...] = ()
        self._output_name = ""
        self._per_text = False  # the graph quantises activations per call: one text per call (see encode)

    # -- identity
    @property
    def model_id(self) -> str:
        """``local:NAME:MAX_LENGTH``: another model (or length) never shares cached vectors with this one."""
        if self._own is None:
            name = self._model
        else:  # a model file of one's own: named by its content (two int8 exports often have one size)
            name = f"onnx-{self._own.stem}-{_file_digest(self._own)}"
        return f"local:{name}:{self.max_length}"

    @property
    def dim(self) -> int:
        return MINILM_DIM

    @property
    def loaded(self) -> bool:
        return self._session is not None

    def __repr__(self) -> str:
        return (
            f"LocalMiniLM(max_length={self.max_length}, batch_size={self.batch_size}, "
            f"threads={self.threads}, loaded={self.loaded})"
        )

    # -- loading
    def load_in_background(self) -> None:
        """Start loading the model (onnxruntime, the tokenizer, the session) in a thread, so that the caller's own
        work runs beside it: a session is made mostly outside the GIL. A later ``encode`` waits for it; a failure
        here is met again, and raised, by that call. The thread is not a daemon: a process that ends without
        embedding waits for it rather than end under onnxruntime's native code."""
        if self._session is None:
            threading.Thread(target=self._load_quietly, name="repoctx-model-load").start()

    def _load_quietly(self) -> None:
        try:
            self._ensure_loaded()
        except Exception:  # noqa: BLE001 - the first encode loads again and reports what failed
            pass

    def _ensure_loaded(self) -> None:
        """One optimised session, whatever the call: graph optimisations change the arithmetic of a model that
        quantises its activations at run time (the shipped ones: cosine down to 0.997 between an unoptimised
        and an optimised session's vector of one query), so a process's first query must meet the same
        session as its documents did; the optimised one starts in ~0.06 s."""
        if self._session is not None:
            return
        with self._lock:
            if self._session is not None:
                return
            import onnxruntime as ort

            tok = _load_tokenizer(self._tokenizer_path or tokenizer_file())
            tok.enable_truncation(max_length=self.max_length)
            path = self._own or shipped_model_file(self._model)
            per_text = _quantises_activations(path)
            sess = _optimised_session(ort, path, 1 if per_text else self.threads)
            names = tuple(i.name for i in sess.get_inputs())
            if "input_ids" not in names:
                raise RuntimeError(f"unexpected ONNX inputs {names}: no input_ids")
            outs = [o.name for o in sess.get_outputs()]
            # Prefer token embeddings (we pool them); accept a pooled sentence embedding too.
            for want in ("last_hidden_state", "token_embeddings", "sentence_embedding"):
                if want in outs:
                    out = want
                    break
            else:
                out = outs[0]
            self._tokenizer, self._input_names, self._output_name = tok, names, out
            self._per_text = per_text
            self._session = sess

    # -- embedding
    def encode(self, texts: Sequence[str]) -> np.ndarray:
        """Embed ``texts`` into a float32 array of shape ``(len(texts), 384)``, rows unit-norm."""
        texts = [t if isinstance(t, str) else str(t) for t in texts]
        if not texts:
            return np.zeros((0, MINILM_DIM), dtype=np.float32)
        self._ensure_loaded()
        encs = self._tokenizer.encode_batch(texts)
        lengths = np.fromiter((len(e.ids) for e in encs), dtype=np.int64, count=len(encs))
        order = np.argsort(lengths, kind="stable")  # by token count: little padding per batch
        out = np.empty((len(texts), MINILM_DIM), dtype=np.float32)
        if self._per_text:
            # A dynamically quantised graph scales each call's activations by that call's range, so a text's
            # vector would depend on the texts batched with it (cosine ~0.99 between two batchings): such a
            # model embeds one text per call (no padding either), ``threads`` calls at a time on one thread
            # each (onnxruntime runs one session from several threads; Django units: 259 texts/s against
            # 174 for one call at a time on two threads, vectors identical)
            def run_share(share: np.ndarray) -> None:
                for i in share:
                    out[i] = self._run([encs[i]], int(lengths[i]))[0]

            workers = min(self.threads, len(order))
            if workers < 2:
                run_share(order)
            else:
                from concurrent.futures import ThreadPoolExecutor

                with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="repoctx-embed") as pool:
                    for f in [pool.submit(run_share, order[w::workers]) for w in range(workers)]:
                        f.result()
            return out
        for start in range(0, len(order), self.batch_size):
            idx = order[start : start + self.batch_size]
            out[idx] = self._run([encs[i] for i in idx], int(lengths[idx].max()))
        return out

    def _run(self, encs: list, width: int) -> np.ndarray:
        n = len(encs)
        ids = np.zeros((n, width), dtype=np.int64)
        mask = np.zeros((n, width), dtype=np.int64)
        for row, e in enumerate(encs):
            k = len(e.ids)
            ids[row, :k] = e.ids
            mask[row, :k] = 1
        feed = {"input_ids": ids}
        if "attention_mask" in self._input_names:
            feed["attention_mask"] = mask
        if "token_type_ids" in self._input_names:
            feed["token_type_ids"] = np.zeros_like(ids)
        (hidden,) = self._session.run([self._output_name], feed)
        hidden = np.asarray(hidden, dtype=np.float32)
        if hidden.ndim == 3:  # token embeddings: mean over real tokens
            m = mask[:, :, None].astype(np.float32)
            pooled = (hidden * m).sum(axis=1) / np.clip(m.sum(axis=1), 1e-9, None)
        else:
            pooled = hidden
        return _unit(pooled).astype(np.float32, copy=False)

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return self.encode(texts).tolist()

    def embed_query(self, text: str) -> list[float]:
        return self.encode([text])[0].tolist()


def _session_options(ort, threads: int, level):
    opts = ort.SessionOptions()
    # one text per call is too small a product to share between threads: such a model runs ``threads`` calls
    # side by side instead, each on one thread (see encode)
    opts.intra_op_num_threads = threads
    opts.inter_op_num_threads = 1
    opts.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    opts.graph_optimization_level = level
    return opts


def _optimised_session(ort, path: Path, threads: int):
    """An onnxruntime session of the model at ``path`` with every graph optimisation. Optimising costs each new
    session ~35 ms of CPU (a third of it), which a one-shot search pays: the optimised graph is kept in the
    cache (``$REPOCTX_CACHE/onnx``) the first time and loaded as it is after, the same arithmetic (vectors
    bit-identical on 403 Django texts). It can hold instructions of this CPU, so its name carries the CPU's
    flags with the model file's size and time and onnxruntime's version; anything amiss with it and the model
    is optimised again."""
    providers = ["CPUExecutionProvider"]
    kept = _optimised_file(path, ort.__version__)
    if kept is not None and kept.is_file():
        try:
            plain = _session_options(ort, threads, ort.GraphOptimizationLevel.ORT_DISABLE_ALL)
            return ort.InferenceSession(str(kept), sess_options=plain, providers=providers)
        except Exception:  # noqa: BLE001 - damaged or foreign: made again below
            pass
    opts = _session_options(ort, threads, ort.GraphOptimizationLevel.ORT_ENABLE_ALL)
    tmp = None
    if kept is not None:
        try:
            kept.parent.mkdir(parents=True, exist_ok=True)
            tmp = kept.with_name(f"{kept.stem}.{os.getpid()}.{threading.get_ident()}.tmp")
            opts.optimized_model_filepath = str(tmp)
            opts.log_severity_level = 3  # its warning that the file suits this machine only: it is named so
        except OSError:
            tmp = None
    try:
        sess = ort.InferenceSession(str(path), sess_options=opts, providers=providers)
    except Exception:  # e.g. the optimised copy could not be written: a session without it
        if tmp is None:
            raise
        tmp = None
        sess = ort.InferenceSession(
            str(path), sess_options=_session_options(ort, threads, opts.graph_optimization_level), providers=providers
        )
    if tmp is not None and kept is not None:
        try:
            os.replace(tmp, kept)
        except OSError:
            tmp.unlink(missing_ok=True)
    return sess


def _optimised_file(path: Path, ort_version: str) -> Path | None:
    """Where the optimised graph of the model at ``path`` is kept for this machine and onnxruntime."""
    from repoctx.config import default_cache_dir

    try:
        st = path.stat()
    except OSError:
        return None
    key = f"{path.resolve()}|{st.st_size}|{st.st_mtime_ns}|{ort_version}|{_cpu_signature()}"
    return default_cache_dir() / "onnx" / f"{path.stem}-{hashlib.blake2b(key.encode(), digest_size=8).hexdigest()}.onnx"


@lru_cache(maxsize=1)
def _cpu_signature() -> str:
    """The CPU's instruction sets (Linux: the first ``flags`` line of /proc/cpuinfo), else its platform names."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as fh:
            for line in fh:
                if line.startswith(("flags", "Features")):
                    return line.partition(":")[2].strip()
    except OSError:
        pass
    import platform

    return f"{platform.machine()}|{platform.processor()}"


@lru_cache(maxsize=16)
def _quantises_activations(path: Path) -> bool:
    """Whether the ONNX graph at ``path`` quantises activations at run time (``DynamicQuantizeLinear``, what
    ``onnxruntime.quantization.quantize_dynamic`` inserts before each int8 matrix product). Node op types are
    plain strings in the protobuf; the file is memory-mapped, not parsed (onnx is not a dependency)."""
    import mmap

    with open(path, "rb") as fh, mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as mm:
        return mm.find(b"DynamicQuantizeLinear") >= 0


# --------------------------------------------------------------------------- remote providers


class RemoteEmbeddings(_AsyncForms):
    """A LangChain embeddings object with ``model_id``, ``dim`` and ``encode`` added.

    ``dim``: when not known up front (no ``dimensions`` option and no known default for the model),
    the first read of ``dim`` embeds one probe text — one network call — and caches the length.
    Any ``embed_documents``/``embed_query`` call also fills it in for free.
    """

    def __init__(self, inner: Embeddings, model_id: str, dim: int | None = None) -> None:
        _as_langchain_embeddings(type(self))  # the provider package has loaded LangChain already
        self.inner = inner
        self._model_id = model_id
        self._dim = dim
        self._lock = threading.Lock()

    @property
    def model_id(self) -> str:
        return self._model_id

    @property
    def dim(self) -> int:
        if self._dim is None:
            with self._lock:
                if self._dim is None:
                    self._dim = len(self.inner.embed_query("dimension probe"))
        return self._dim

    def __repr__(self) -> str:
        return f"RemoteEmbeddings({self._model_id!r}, dim={self._dim})"

    def _note(self, vecs: list[list[float]]) -> list[list[float]]:
        if vecs and self._dim is None:
            self._dim = len(vecs[0])
        return vecs

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return self._note(self.inner.embed_documents(list(texts))) if texts else []

    def embed_query(self, text: str) -> list[float]:
        return self._note([self.inner.embed_query(text)])[0]

    async def aembed_documents(self, texts: list[str]) -> list[list[float]]:
        return self._note(await self.inner.aembed_documents(list(texts))) if texts else []

    async def aembed_query(self, text: str) -> list[float]:
        return self._note([await self.inner.aembed_query(text)])[0]

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        """float32 ``(n, dim)``; rows L2-normalised (so inner product == cosine across providers)."""
        if not texts:
            return np.zeros((0, self._dim or 0), dtype=np.float32)
        return _unit(np.asarray(self.embed_documents(list(texts)), dtype=np.float32))


class JointEmbedder(_AsyncForms):
    """Several embedders as one (``REPOCTX_EMBEDDER=local+local:code*0.5``): a text's vector is its members'
    vectors side by side, each unit-norm and scaled by the square root of its share of the weights, so the
    cosine of two joint vectors is the weighted mean of the members' cosines. One vector search then fuses the
    members' dense rankings by score, with nothing new in any store (a set is one model's, ``dim`` the sum of
    theirs). ``primary`` is the first member: the re-ranker's weights and its name similarity are that model's.
    The vector cache keeps each member's vectors, never the joint one (``vectors.cached_vectors``), so a member
    indexed alone, or in another pair, embeds nothing again."""

    def __init__(self, members: Sequence[tuple[Any, float]]) -> None:
        _as_langchain_embeddings(type(self))
        if len(members) < 2:
            raise ValueError("a joint embedder needs two models or more")
        for _, w in members:
            _check_weight(w)
        self.members = tuple(m for m, _ in members)
        self.weights = tuple(float(w) for _, w in members)
        total = sum(self.weights)
        self._scales = tuple(float(np.sqrt(w / total)) for w in self.weights)

    @property
    def model_id(self) -> str:
        pairs = zip(self.members, self.weights, strict=True)
        return "+".join(m.model_id if w == 1 else f"{m.model_id}*{w:g}" for m, w in pairs)

    @property
    def primary(self) -> Any:
        return self.members[0]

    @property
    def dim(self) -> int:
        return sum(m.dim for m in self.members)

    @property
    def max_length(self) -> int:
        return min(getattr(m, "max_length", 256) for m in self.members)

    def __repr__(self) -> str:
        return f"JointEmbedder({self.model_id!r})"

    def load_in_background(self) -> None:
        for m in self.members:
            start = getattr(m, "load_in_background", None)
            if start is not None:
                start()

    def join(self, parts: Sequence[np.ndarray]) -> np.ndarray:
        """The joint vectors of the members' vectors (one matrix a member, rows in the same order)."""
        return np.concatenate(
            [_unit(np.asarray(p, dtype=np.float32)) * s for p, s in zip(parts, self._scales, strict=True)], axis=-1
        ).astype(np.float32, copy=False)

    def split(self, matrix: np.ndarray) -> list[np.ndarray]:
        """The members' unit vectors inside joint vectors: what ``join`` was given."""
        bounds = np.cumsum([0] + [m.dim for m in self.members])
        return [_unit(np.asarray(matrix, dtype=np.float32)[..., a:b]) for a, b in itertools.pairwise(bounds)]

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        """float32 ``(n, dim)``: each member embeds every text, one member after the other."""
        return self.join([m.encode(texts) for m in self.members])

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return self.encode(texts).tolist()

    def embed_query(self, text: str) -> list[float]:
        return self.encode([text])[0].tolist()


def _check_weight(w: float, spec: str = "") -> None:
    if not (w > 0 and np.isfinite(w)):
        where = f"spec {spec!r}: " if spec else ""
        raise ValueError(f"{where}a model's weight in a joint embedder must be a number above 0, not {w!r}")


def joint_members(spec: str) -> list[tuple[str, float]]:
    """``A+B*0.5`` → [("A", 1.0), ("B", 0.5)]: a joint spec's members, each with its weight (1 unless given)."""
    out = []
    for part in spec.split("+"):
        member, star, weight = part.strip().rpartition("*")
        if not star:
            member, weight = weight, "1"
        try:
            w = float(weight)
        except ValueError:
            raise ValueError(f"spec {spec!r}: {weight!r} is not a weight (write MODEL*0.5)") from None
        if not member.strip():
            raise ValueError(f"spec {spec!r}: a model is missing around '+'")
        _check_weight(w, spec)
        out.append((member.strip(), w))
    return out


# extra name, pip package, module, class
_PROVIDERS: dict[str, tuple[str, str, str, str]] = {
    "bedrock": ("bedrock", "langchain-aws", "langchain_aws", "BedrockEmbeddings"),
    "openai": ("openai", "langchain-openai", "langchain_openai", "OpenAIEmbeddings"),
    "ollama": ("ollama", "langchain-ollama", "langchain_ollama", "OllamaEmbeddings"),
}
_SHIPPED_ALIASES = {alias: name for name, aliases in SHIPPED_MODELS.items() for alias in aliases}
_KNOWN_DIMS = {
    "amazon.titan-embed-text-v2:0": 1024,
    "amazon.titan-embed-text-v1": 1536,
}


def _provider_class(provider: str):
    extra, pip_name, module, cls = _PROVIDERS[provider]
    try:
        mod = importlib.import_module(module)
    except ImportError as exc:
        raise ImportError(
            f"embedding provider {provider!r} needs the {module} package: "
            f"pip install 'repoctx[{extra}]' (or pip install {pip_name})"
        ) from exc
    return getattr(mod, cls)


def _split_at(rest: str) -> tuple[str, str | None]:
    model, sep, url = rest.partition("@")
    return model.strip(), (url.strip() or None) if sep else None


def get_embedder(spec: str | None = None, **options: Any) -> LocalMiniLM | RemoteEmbeddings | JointEmbedder:
    """Build an embedder from ``spec``; every result has ``model_id``, ``dim`` and ``encode``.

    Specs (``options`` go to the underlying constructor):

    * ``local`` / ``local:minilm`` (default) — :class:`LocalMiniLM`; options ``max_length``,
      ``batch_size``, ``threads``.
    * ``local:code`` — the same network fine-tuned for code search, shipped in repoctx (``SHIPPED_MODELS``).
    * ``local:PATH.onnx`` (``local:PATH.onnx:256`` sets max_length) — a MiniLM-shaped ONNX model of one's
      own, e.g. an export of ``bench/train_embedder.py``; a ``tokenizer.json`` beside it is used. Its
      ``model_id`` carries a digest of the file, so two models never share cached vectors.
    * ``bedrock:MODEL_ID`` (default ``amazon.titan-embed-text-v2:0``) — ``BedrockEmbeddings``;
      options e.g. ``region_name`` (else ``AWS_REGION``/``AWS_DEFAULT_REGION``/the AWS profile, else
      us-east-1), ``credentials_profile_name``, ``dimensions`` (256/512/1024 for Titan v2),
      ``normalize`` (default True), ``endpoint_url``. Credentials come from the usual AWS chain.
    * ``openai:MODEL@BASE_URL`` — ``OpenAIEmbeddings`` against an OpenAI-compatible server (vLLM,
      LiteLLM, OpenAI); ``BASE_URL`` may instead come from ``base_url=`` or ``OPENAI_BASE_URL``;
      ``api_key`` defaults to ``OPENAI_API_KEY`` or ``"EMPTY"`` (what vLLM accepts).
      Token-length checking is off (``check_embedding_ctx_length=False``): texts go as strings.
    * ``ollama:MODEL@BASE_URL`` — ``OllamaEmbeddings``; ``BASE_URL`` defaults to ``OLLAMA_HOST``
      or ``http://127.0.0.1:11434``.
    * ``SPEC+SPEC*W`` — :class:`JointEmbedder`: the models side by side in one vector, each cosine weighted
      (1 unless ``*W`` says), e.g. ``local+local:code*0.5``; ``options`` go to every member.

    Remote ``dim`` is taken from a ``dimensions``/``dim`` option or a table of known models, else
    discovered by embedding one probe text on first read (see :class:`RemoteEmbeddings`).
    Constructing a remote embedder makes no network call.
    """
    spec = (spec or DEFAULT_SPEC).strip()
    if "+" in spec:
        return JointEmbedder([(get_embedder(member, **dict(options)), w) for member, w in joint_members(spec)])
    provider, _, rest = spec.partition(":")
    provider = provider.strip().lower()
    rest = rest.strip()

    if provider == "local":
        name, _, length = rest.partition(":")  # local:minilm:128 sets max_length
        if length:
            if not length.isdigit():
                raise ValueError(f"spec {spec!r}: max length must be a number of tokens")
            options.setdefault("max_length", int(length))
            rest = name
        if rest.lower() in _SHIPPED_ALIASES:
            return LocalMiniLM(model=_SHIPPED_ALIASES[rest.lower()], **options)
        if rest.lower().endswith(".onnx"):  # local:/path/to/model.onnx — a MiniLM-shaped model of one's own
            path = Path(rest).expanduser()
            if not path.is_file():
                raise ValueError(f"spec {spec!r}: no model file at {path}")
            tok = path.with_name("tokenizer.json")
            return LocalMiniLM(model_path=path, tokenizer_path=tok if tok.is_file() else None, **options)
        raise ValueError(
            f"unknown local model {rest!r} in spec {spec!r}; "
            "use 'local' (or 'local:minilm'), 'local:code' or 'local:PATH.onnx'"
        )

    if provider not in _PROVIDERS:
        raise ValueError(
            f"unknown embedding provider {provider!r} in spec {spec!r}; expected one of: "
            "local, local:code, bedrock:MODEL_ID, openai:MODEL@BASE_URL, ollama:MODEL@BASE_URL, "
            "or two of them side by side (local+local:code*0.5)"
        )
    dim = options.pop("dim", None)
    dims_opt = options.get("dimensions")
    cls = _provider_class(provider)

    if provider == "bedrock":
        model = rest or "amazon.titan-embed-text-v2:0"
        if not options.get("region_name"):
            region = os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION")
            if not region:
                import boto3

                region = boto3.session.Session(profile_name=options.get("credentials_profile_name")).region_name
            options["region_name"] = region or "us-east-1"
        options.setdefault("normalize", True)
        inner = cls(model_id=model, **options)
        known = _KNOWN_DIMS.get(model)
    elif provider == "openai":
        model, url = _split_at(rest)
        if not model:
            raise ValueError(f"spec {spec!r}: expected openai:MODEL@BASE_URL")
        url = url or options.pop("base_url", None) or os.environ.get("OPENAI_BASE_URL")
        options.pop("base_url", None)
        if not options.get("api_key"):
            options["api_key"] = os.environ.get("OPENAI_API_KEY") or "EMPTY"
        options.setdefault("check_embedding_ctx_length", False)
        inner = cls(model=model, base_url=url, **options)
        known = None
    else:  # ollama
        model, url = _split_at(rest)
        if not model:
            raise ValueError(f"spec {spec!r}: expected ollama:MODEL@BASE_URL")
        url = url or options.pop("base_url", None) or os.environ.get("OLLAMA_HOST") or "http://127.0.0.1:11434"
        options.pop("base_url", None)
        if "://" not in url:
            url = "http://" + url
        inner = cls(model=model, base_url=url, **options)
        known = None

    model_id = f"{provider}:{model}" + (f"#dim={dims_opt}" if dims_opt else "")
    return RemoteEmbeddings(inner, model_id, dim=dim or dims_opt or known)


def check_spec(spec: str | None) -> None:
    """Raise ValueError, one sentence naming what to use instead, for a spec ``get_embedder`` would refuse;
    ``none`` (no vectors) passes. Loads no model and builds no remote client: a command checks its settings
    with it before doing any work."""
    if spec in ("none", "", None):
        return
    if "+" in spec:
        for member, _ in joint_members(spec):
            check_spec(member)
        return
    provider = spec.partition(":")[0].strip().lower()
    if provider == "local" or provider not in _PROVIDERS:
        get_embedder(spec)  # a LocalMiniLM loads nothing until it embeds; an unknown provider is refused first


# --------------------------------------------------------------------------- text to embed


def _field(obj: Any, name: str) -> str:
    val = obj.get(name) if isinstance(obj, Mapping) else getattr(obj, name, None)
    return val if isinstance(val, str) else ("" if val is None else str(val))


def squeeze(text: str) -> str:
    """Strip each line and drop blank ones (indentation costs characters, not tokens)."""
    return "\n".join(s for s in (ln.strip() for ln in text.splitlines()) if s)


def _body_after_header(text: str, signature: str, docstring: str) -> str:
    """``text`` without what precedes and includes the signature and the docstring, if found."""
    pos = 0
    sig_line = next((s.strip() for s in signature.splitlines() if s.strip()), "")
    if sig_line:
        i = text.find(sig_line)
        if i >= 0:
            pos = i + len(sig_line)
            # the signature may span lines in the source: skip to the end of the header line
            j = text.find("\n", pos)
            pos = len(text) if j < 0 else j + 1
    doc_last = next((s.strip() for s in reversed(docstring.splitlines()) if s.strip()), "")
    if doc_last:
        i = text.find(doc_last, pos)
        if 0 <= i - pos < len(docstring) * 2 + 400:  # only when it sits right after the header
            j = text.find("\n", i + len(doc_last))
            pos = len(text) if j < 0 else j + 1
            # a closing delimiter alone on the next line (triple quotes, */)
            k = text.find("\n", pos)
            nxt = text[pos : len(text) if k < 0 else k].strip()
            if nxt and set(nxt) <= set("\"'*/#-=`"):
                pos = len(text) if k < 0 else k + 1
    return text[pos:]


# Bump when embed_text's output changes for the same unit: an index keeps the vector of a unit whose
# content is unchanged only when its vectors were made from texts of this version (store/sqlite.py).
EMBED_TEXT_VERSION = 1


def unit_head(capsule: Any) -> str:
    """How every text embedded for a unit begins: ``path :: qualname`` and, on the next line, its signature on one
    line (``embed_text``; a function's further body windows, ``hybrid.body_windows``)."""
    path, qual, sig = (
        _field(capsule, "path"),
        _field(capsule, "qualname"),
        " ".join(_field(capsule, "signature").split()),
    )
    head = f"{path} :: {qual}" if qual else path
    return f"{head}\n{sig}" if sig else head


def embed_text(capsule: Any, max_length: int = 256, chars_per_token: float = 4.0) -> str:
    """Compact text to embed for a code unit (dict or object with ``path, qualname, signature,
    docstring, text``)::

        path :: qualname
        signature
        docstring
        leading body

    Lines are stripped, blank lines dropped, and the result cut to ``max_length * chars_per_token``
    characters (no tokenizer call; the model truncates exactly anyway).
    """
    sig, doc, text = _field(capsule, "signature"), _field(capsule, "docstring"), _field(capsule, "text")
    budget = max(16, int(max_length * chars_per_token))
    out = unit_head(capsule)
    if doc.strip():
        out = f"{out}\n{squeeze(doc)}"
    if len(out) < budget and text:
        body = _body_after_header(text, sig, doc) if (sig or doc) else text
        # squeeze only what can fit (bodies may be huge)
        body = squeeze(body[: budget * 3])
        if body:
            out = f"{out}\n{body}"
    if len(out) > budget:
        cut = out.rfind(" ", 0, budget)
        out = out[: cut if cut > budget * 0.8 else budget]
    return out
