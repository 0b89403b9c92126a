"""Secret detection and redaction for every indexed text, built on detect-secrets' plugins.

``redact(text)`` replaces each secret VALUE (never the key name) with ``[REDACTED]`` and keeps the
number of lines, so line numbers in citations stay true (a multi-line private key keeps its newlines).

How detect-secrets is used
--------------------------
* Its plugin classes decide what is a secret (``_PLUGINS``: AWSKeyDetector, KeywordDetector,
  PrivateKeyDetector, ...). We run their own compiled ``denylist`` regexes line by line, as
  detect-secrets does; where a plugin overrides ``analyze_string`` (JwtTokenDetector's validity check)
  that method confirms each match; KeywordDetector uses the regex table its ``analyze_line`` would pick
  for the file type (``REGEX_BY_FILETYPE``).
* We never call ``analyze_line`` / ``scan_line``: they read the process-global detect-secrets
  settings (so they need ``default_settings()`` / ``transient_settings`` around every call, which is
  neither thread-safe nor cheap), and with the verification filter configured they call ``verify()``,
  a network request. Redaction must stay local and deterministic: we call the pure regex layer and
  apply detect-secrets' default heuristic filters (``detect_secrets.filters.heuristic``) ourselves.
* Left out: the high-entropy string plugins (entropy flags hashes, test vectors and fixtures in
  ordinary code; false positives cost retrieval) and IPPublicDetector (an IP address is no secret).

Beyond detect-secrets: a few extra patterns where it has no plugin (``_extras``: URL credentials it
misses, shell/.env assignments, docker/npm base64 ``auth``, Kubernetes Secret data, base64 PEM keys,
three token shapes), and a few filters against false positives seen on real code (``_placeholder``,
``_meta_key``, ...). Each says why it exists.

Speed: most files hold no secret, so each detector first looks for a gate — a short regex with a
literal start (re skips through text fast) that every match of the detector contains — and runs its
real regexes only on the lines a gate hits (long lines: only around the hits). Case-insensitive
plugin regexes run case-sensitively on the lower-cased line (re's IGNORECASE is ~10x slower).
Measured in bench/redaction_share.py.
"""

from __future__ import annotations

import base64
import binascii
import bisect
import os
import re
import sys
import threading
import types
from collections.abc import Iterable
from dataclasses import dataclass
from re import Pattern
from typing import Any

REDACTED = "[REDACTED]"


@dataclass(frozen=True, slots=True)
class Finding:
    start: int  # character offsets into the text
    end: int
    kind: str  # detect-secrets' secret_type, or "extra: ..." for the patterns of this module


# --------------------------------------------------------------------------- gates

# A gate: (where, regex). where "low": the regex runs on the lower-cased text, so it matches any
# case; "text": case-sensitive. Every match of the detector lies on a line one of its gates hits.
# Each gate starts with a literal (an alternation of different first letters makes re try every
# branch at every position: ~10x slower), and gates are scanned once per text and shared.
Gate = tuple[str, str]


def _words(*words: str) -> tuple[Gate, ...]:
    return tuple(("low", w) for w in words)


_KEYWORD_GATES = _words("key", "pass", "pwd", "secret", "contrase")  # KeywordDetector's DENYLIST stems
_ENV_GATES = _words("pass", "pwd", "secret", "token", "key", "auth", "credential")

# (plugin class name, gates, optional per-line pre-check). Every plugin of detect-secrets 1.5.0 but
# the two high-entropy ones and IPPublicDetector; KeywordDetector and PrivateKeyDetector have their
# own steps below.
_PLUGINS: list[tuple[str, tuple[Gate, ...], str | None]] = [
    ("AWSKeyDetector", (("text", r"A(?:3T|BIA|CCA|KIA|SIA)"), ("low", r"aws")), None),
    ("ArtifactoryDetector", (("text", r"A(?:KC|P[\dA-F])"),), None),
    ("AzureStorageKeyDetector", (("text", r"AccountKey="),), None),
    ("BasicAuthDetector", (("text", r"://"),), None),
    ("CloudantDetector", (("low", r"cl(?:oudant|ou)?(?:[-_]?(?:api)?(?:key|pwd|pw|pass|token)|\.com)"),), None),
    ("DiscordBotTokenDetector", (("text", r"\.[a-zA-Z\d_-]{6}\.[a-zA-Z\d_-]{27}"),), None),
    ("GitHubTokenDetector", (("text", r"gh[pousr]_"),), None),
    ("GitLabTokenDetector", (("text", r"gl(?:pat|dt|ft|soat|rt|cbt|imt|ptt|agent|oas)-"), ("text", "GR1348941")), None),
    # its secret: exactly 44 of [A-Za-z0-9_-], after an assignment to a key/pwd/pass/token name
    (
        "IbmCloudIamDetector",
        _words("key", "pwd", "pass", "token"),
        r"(?<![A-Za-z0-9_\-])[A-Za-z0-9_\-]{44}(?![A-Za-z0-9_\-])",
    ),
    ("IbmCosHmacDetector", _words("secret"), r"[a-fA-F0-9]{48}"),
    ("JwtTokenDetector", (("text", r"eyJ"),), None),
    ("MailchimpDetector", (("text", r"-us\d"),), None),
    ("NpmDetector", (("text", r"/:_authToken="),), None),
    ("OpenAIDetector", (("text", r"T3BlbkFJ"),), None),
    ("PypiTokenDetector", (("text", r"pypi-AgE"),), None),
    ("SendGridDetector", (("text", r"SG\."),), None),
    ("SlackDetector", _words("xox", r"hooks\.slack\.com"), None),
    ("SoftlayerDetector", _words(r"sl[-_]?(?:api)?(?:key|pwd|pass|token)", "softlayer"), None),
    ("SquareOAuthDetector", (("text", r"sq0csp-"),), None),
    ("StripeDetector", (("text", r"k_live_"),), None),
    ("TelegramBotTokenDetector", (("text", r":[0-9A-Za-z_-]{35}"),), None),
    ("TwilioKeyDetector", (("text", r"AC[a-z0-9]{32}"), ("text", r"SK[a-z0-9]{32}")), None),
]
_PRIVATE_KEY_GATES: tuple[Gate, ...] = (("text", "PRIVATE KEY"), ("text", "PuTTY-User-Key-File"))

# A token a detector matched part of is redacted whole (StripeDetector matches 24 characters of a
# longer live key; the rest must not stay readable).
_TOKEN_CHAR = re.compile(r"[A-Za-z0-9_\-]")
# Detectors without a word boundary that fire inside longer strings (AWSKeyDetector finds ACCA + 16
# capitals inside DNA test strings): no letter or digit may touch their match on the left
# (AWS key ids are exactly 20 characters: on the right either).
_STANDALONE = {"AWS Access Key": True, "Telegram Bot Token": False}

# Values that are no secret although a detector matched: our additions to detect-secrets' heuristic
# filters, each for false positives seen on Django and a site-packages tree (they cost retrieval):
# * unquoted config values that are YAML/INI literals, or dotted references (``password =
#   user.password`` reads as INI when a snippet is too short to tell code from config);
_CONFIG_LITERALS = frozenset({"null", "none", "nil", "true", "false", "yes", "no", "on", "off", "~"})
_DOTTED_REFERENCE = re.compile(r"[A-Za-z_]\w*(?:[.:][A-Za-z_]\w*)+\(?\)?")  # also entry points: pkg.mod:func
# * an environment variable's NAME (``"openai_api_key": "OPENAI_API_KEY"``);
_ENV_NAME = re.compile(r"[A-Z][A-Z0-9]*(?:_[A-Z0-9]+)+")
# * documentation placeholders (``your-api-key``, ``sk-...``, ``<token>``, ``xxxx``, the ``password``
#   of ``https://user:password@host``);
_PLACEHOLDERS = frozenset(
    {
        "password",
        "passwd",
        "pass",
        "pwd",
        "secret",
        "token",
        "key",
        "apikey",
        "api_key",
        "api-key",
        "auth",
        "changeme",
        "change-me",
        "changeit",
        "placeholder",
        "empty",
        "dummy",
        "example",
        "redacted",
        "masked",
        "hidden",
        "null",
        "none",
        "undefined",
        "foo",
        "bar",
        "baz",
        "foobar",
        "test",
        "user",
        "username",
    }
)
_PLACEHOLDER = re.compile(r"(?i)(?:your|my)[-_ ]|(?:example|dummy|fake|placeholder)[-_]|<.*>|.*(?:\.\.\.|…|x{4}|\*{3})")
# * for KeywordDetector: a sentence (help texts, descriptions), and a key whose last word names
#   something about the secret rather than the secret (``secret_type``, ``SecretId``,
#   ``password_validators``, ``PasswordLastUsed``; detect-secrets' own is_likely_id_string does ``_id``).
_META_WORDS = frozenset(
    {
        "type",
        "types",
        "name",
        "names",
        "id",
        "ids",
        "field",
        "fields",
        "label",
        "path",
        "file",
        "filename",
        "dir",
        "prefix",
        "suffix",
        "header",
        "env",
        "var",
        "policy",
        "length",
        "len",
        "hint",
        "format",
        "method",
        "mode",
        "usage",
        "period",
        "cls",
        "class",
        "title",
        "help",
        "message",
        "msg",
        "error",
        "errors",
        "template",
        "used",
        "changed",
        "date",
        "time",
        "at",
        "expiry",
        "expires",
        "ttl",
        "timeout",
        "count",
        "min",
        "max",
        "regex",
        "pattern",
        "validator",
        "validators",
        "widget",
        "form",
        "view",
        "manager",
        "input",
        "description",
        "text",
        "display",
        "required",
        "enabled",
        "hasher",
        "hashers",
        "algorithm",
        "version",
        "param",
        "arg",
        "store",
        "arn",
        "ref",
        "url",
        "uri",
        "endpoint",
        "provider",
        "backend",
        "attr",
        "column",
        "kind",
        "option",
        "options",
        "flag",
        "size",
        "fallbacks",
    }
)
_KEY_WORDS = re.compile(r"[A-Z]?[a-z]+|[A-Z]+(?![a-z])|\d+")


def _lowered(rx: Pattern) -> Pattern | None:
    """rx without IGNORECASE, for lower-cased input, when that matches the same strings: every
    upper-case letter of the pattern is an escape (\\W) or sits in an ``a-zA-Z`` class."""
    if not rx.flags & re.IGNORECASE:
        return None
    if re.search(r"(?<!\\)[A-Z]", rx.pattern.replace("a-zA-Z", "")):
        return None
    return re.compile(rx.pattern, rx.flags & ~re.IGNORECASE)


class _Plugin:
    __slots__ = ("custom", "gates", "kind", "plugin", "precheck", "regexes")

    def __init__(self, plugin, gates: tuple[Gate, ...], precheck: str | None, custom: bool) -> None:
        self.plugin = plugin
        self.kind: str = plugin.secret_type
        self.gates = gates
        self.precheck = re.compile(precheck) if precheck else None
        self.regexes = [(rx, _lowered(rx)) for rx in plugin.denylist]
        self.custom = custom


class _DeferredRequests(types.ModuleType):
    """What detect-secrets' modules get for ``import requests`` while the engine imports them, when nothing has
    imported it yet: the module itself, imported on first use of any of its names. They use it only to verify a
    secret online (``verify``), which redaction never calls; importing it (and urllib3, http.client, ssl...) was
    half of the engine's cost, ~0.1 s of a one-file ``repoctx index``. Two IBM plugins name ``requests.Response``
    in a function's annotations, read as the module is imported: that one name is a stand-in class then.
    Another thread that imports ``requests`` meanwhile (a long-lived process) gets this module too: any name it
    reads waits for the import to end and comes from the real module."""

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self._importer = threading.get_ident()
        self._done = threading.Event()

    def __getattr__(self, name: str) -> Any:
        if sys.modules.get("requests") is self:
            if threading.get_ident() == self._importer:  # detect-secrets importing: nothing else is asked then
                if name == "Response":
                    return type("Response", (), {"__module__": "requests"})
                raise AttributeError(name)
            self._done.wait()
        import requests

        return getattr(requests, name)


def _import_plugins() -> dict[str, type[Any]]:
    """detect-secrets' plugin classes by secret type (its default set: every plugin it ships), imported with
    ``requests`` deferred (``_DeferredRequests``). The stand-in leaves ``sys.modules`` once they are imported,
    so any later ``import requests`` anywhere gets the real module."""
    from importlib import import_module

    stand_in = None
    if "requests" not in sys.modules and "detect_secrets.plugins.base" not in sys.modules:
        stand_in = sys.modules["requests"] = _DeferredRequests("requests")
    try:
        # (annotated: the library's return type is a TypeVar it binds to nothing, which type checkers read as Never)
        classes: dict[str, type[Any]] = import_module(
            "detect_secrets.core.plugins.util"
        ).get_mapping_from_secret_type_to_class()
        return classes
    finally:
        if stand_in is not None:
            if sys.modules.get("requests") is stand_in:
                del sys.modules["requests"]
            stand_in._done.set()


class _Engine:
    """Plugin instances and regexes, built once on first use (importing detect-secrets costs ~0.1 s)."""

    def __init__(self) -> None:
        classes = _import_plugins()  # first: it imports detect-secrets with ``requests`` deferred

        from detect_secrets.filters import heuristic
        from detect_secrets.plugins import keyword
        from detect_secrets.plugins.base import RegexBasedDetector
        from detect_secrets.util.filetype import FileType, determine_file_type

        by_name = {plugin.__name__: plugin for plugin in classes.values()}
        self.plugins: list[_Plugin] = []
        for name, gates, precheck in _PLUGINS:
            cls = by_name.get(name)
            if cls is None:  # a later detect-secrets dropped or renamed it: skip, never fail the indexer
                continue
            custom = cls.analyze_string is not RegexBasedDetector.analyze_string
            self.plugins.append(_Plugin(cls(), gates, precheck, custom))
        self.private_key = by_name["PrivateKeyDetector"]()
        self.keyword = by_name["KeywordDetector"]()
        self.keyword_gate = re.compile(keyword.DENYLIST_REGEX)  # on lower-cased lines
        # the keyword detector's regex tables by file type (the same table object serves several), each with its
        # lower-cased forms made on first use: the 63 compiles cost every process that scans a file ~15 ms, and
        # most files never reach the keyword step or meet one table only
        self.keyword_tables = keyword.REGEX_BY_FILETYPE
        self.keyword_quoted = keyword.QUOTES_REQUIRED_DENYLIST_REGEX_TO_GROUP
        self.keyword_config = keyword.CONFIG_DENYLIST_REGEX_TO_GROUP
        self._lowered_tables: dict[int, list[tuple[Pattern, Pattern | None, int]]] = {}
        self.config_types = {FileType.YAML, FileType.CONFIG, FileType.INI, FileType.PROPERTIES, FileType.TOML}
        self.other_type = FileType.OTHER
        self.file_type = determine_file_type
        self.h = heuristic
        every = [g for p in self.plugins for g in p.gates] + [
            *_PRIVATE_KEY_GATES,
            *_KEYWORD_GATES,
            *_ENV_GATES,
            _URL_GATE,
            _B64_PEM_GATE,
            *_TOKEN_GATES,
        ]
        self.gates = [(g, _compiled(g[1], 0), g[0] == "low") for g in dict.fromkeys(every)]

    def table(self, table: dict) -> list[tuple[Pattern, Pattern | None, int]]:
        """One of the keyword tables as (its regex, the same without IGNORECASE when that can read lower-cased
        text, its group), made once (threads that race make equal lists; either is kept)."""
        got = self._lowered_tables.get(id(table))
        if got is None:
            got = self._lowered_tables[id(table)] = [(rx, _lowered(rx), group) for rx, group in table.items()]
        return got


_engine: _Engine | None = None
_engine_lock = threading.Lock()


def _get_engine() -> _Engine:
    global _engine
    if _engine is None:
        with _engine_lock:
            if _engine is None:
                _engine = _Engine()
    return _engine


# --------------------------------------------------------------------------- extras (no plugin exists)

# URL credentials BasicAuthDetector misses: it needs a non-empty user and refuses RFC 3986
# sub-delimiters (!$&'()*+,;=) in the password, so ``redis://:pw@host`` (Redis has no user) and
# ``amqp://u:pa$$w0rd!@host`` would stay readable. The password runs from the first ':' of the
# authority to its last '@'.
_URL_GATE: Gate = ("text", "://")
_URL_CREDENTIALS = re.compile(r"(?<=[A-Za-z0-9])://[^\s/?#@:'\"<>`]*:([^\s/?#'\"<>`]+)@[^\s/?#@'\"<>`]+")

# Shell / .env / Dockerfile assignments: ``export AWS_SECRET_ACCESS_KEY=wJalr...``. KeywordDetector
# accepts unquoted values only in YAML/INI/TOML/properties files, and its keyword list has no TOKEN,
# AUTH or CREDENTIAL (``GITHUB_TOKEN=...`` holding a token of no known shape). Upper-case name at the
# start of a line and no space around '=': the env-file convention, which Python/JS code does not use.
_ENV_ASSIGN = re.compile(
    r"[ \t]*(?:export[ \t]+|ENV[ \t]+|ARG[ \t]+|set[ \t]+|setenv[ \t]+)?"
    r"[A-Z0-9_]*(?:PASSWORD|PASSWD|PASSPHRASE|PASS|PWD|SECRET|TOKEN|API_?KEY|ACCESS_?KEY|PRIVATE_?KEY"
    r"|AUTH|CREDENTIALS?)[A-Z0-9_]*=(?:\"([^\"\n]*)\"|'([^'\n]*)'|([^\s'\"`#;|&]+))"
)

# Docker ``config.json`` {"auths": {...: {"auth": "<base64 user:pass>"}}} and .npmrc ``_auth=``: the
# key is ``auth``, which no plugin knows. Redacted only when the value decodes to ``user:password``,
# so this cannot fire on ordinary code.
_BASE64_AUTH = re.compile(r"""auth["']?\s*[:=]\s*["']?([A-Za-z0-9+/]{6,}={0,2})(?![A-Za-z0-9+/=])""")

# Kubernetes ``kind: Secret``: every value under ``data:`` / ``stringData:`` is secret by definition,
# whatever its key is called (``tls.key``, ``DB_URL``), and base64 hides its shape from every plugin.
_K8S_SECRET = re.compile(r"^kind:\s*[\"']?Secret[\"']?\s*$", re.M)
_K8S_DATA = re.compile(r"^([ \t]*)(?:data|stringData):[ \t]*$", re.M)
_K8S_ENTRY = re.compile(r"([ \t]+)[\"']?[\w.\-]+[\"']?:[ \t]*(?:[|>][-+]?[ \t]*$)?[ \t]*(\S.*?)?[ \t]*$")

# A PEM private key inside base64 (kubeconfig ``client-key-data:``, Helm values): PrivateKeyDetector
# looks for the plain ``BEGIN ... PRIVATE KEY`` header only. ``LS0tLS1CRUdJT`` is base64 of
# ``-----BEGIN``; the head is decoded to confirm a private key (certificates stay).
_B64_PEM = re.compile(r"LS0tLS1CRUdJT[A-Za-z0-9+/]{20,}={0,2}")
_B64_PEM_GATE: Gate = ("text", "LS0tLS1CRUdJT")

# Token shapes detect-secrets 1.5.0 has no plugin for: GitHub fine-grained PATs (GitHubTokenDetector
# knows ghp_/gho_/ghu_/ghs_/ghr_ only), Google API keys, npm tokens outside an .npmrc line.
_TOKEN_SHAPES = [
    ("extra: GitHub fine-grained token", re.compile(r"github_pat_[A-Za-z0-9_]{22,}")),
    ("extra: Google API key", re.compile(r"AIza[0-9A-Za-z_\-]{35}")),
    ("extra: npm token", re.compile(r"\bnpm_[A-Za-z0-9]{36}\b")),
]
_TOKEN_GATES: tuple[Gate, ...] = (("text", "github_pat_"), ("text", "AIza"), ("text", "npm_"))

# Private key blocks: PrivateKeyDetector flags the BEGIN line; the secret is the body up to END.
_PEM_BEGIN = re.compile(r"-{4,5} ?BEGIN ([A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?) ?-{4,5}")
_PEM_END = re.compile(r"-{4,5} ?END [A-Z0-9 ]*PRIVATE KEY(?: BLOCK)? ?-{4,5}")
_PUTTY_PRIVATE = re.compile(r"^Private-Lines:\s*(\d+)\s*$", re.M)
# Every line between BEGIN and END must look like key material (base64, PEM headers, quotes of a
# string literal); ``_START = b"-----BEGIN ... KEY-----"`` with ``_END = b"..."`` on the next line is code.
_BODY_LINE = re.compile(
    r"""[\s"'`]*(?:[bru]?["'`])?(?:[A-Za-z0-9+/=]*|(?:Proc-Type|DEK-Info|Comment|Version|Hash"""
    r"""|Charset):.*)[\s"'`,+;\\]*"""
)
_PEM_MAX_LINES = 400  # an unterminated BEGIN redacts the base64-looking lines after it, at most this many
_B64_LINE = re.compile(
    r"[\s\"'`]*(?:[A-Za-z0-9+/=]{16,}|Proc-Type:.*|DEK-Info:.*|Comment:.*|Version:.*)"
    r"(?:\\n)?[\s\"'`,+;]*"
)

# --------------------------------------------------------------------------- code or config?

# KeywordDetector reads unquoted values (``password: hunter2``) only in YAML/INI/TOML/properties
# files; in code that would flag ``password = user.password``. The caller may not know the path
# (load_text gets bytes), so config-ness is also sniffed from the text.
_CODE_LINE = re.compile(
    r"\s*(?:def |class |import |from \S+ import|function\b|return\b|if\b.*[:{)]\s*$|for\b.*[:{)]\s*$"
    r"|while\b|const |let |var |package |func |public |private |protected |#include|module\.exports"
    r"|async |@\w+|\}|\)|elif\b|else\b|try\b|except\b|catch\b|switch\b)"
)
_CONFIG_LINE = re.compile(
    r"""\s*(?:[#;!].*|\[[^\]]+\]\s*|-(?:\s.*)?|---.*|\.\.\.\s*|(?:export\s+)?["']?[\w.\-/@$:]+["']?\s*[:=].*)"""
)
_CONFIG_EXTS = {
    ".env",
    ".npmrc",
    ".pypirc",
    ".netrc",
    ".properties",
    ".conf",
    ".cnf",
    ".cfg",
    ".ini",
    ".toml",
    ".yaml",
    ".yml",
    ".eyaml",
}


def _looks_like_config(text: str, path: str | None, eng: _Engine) -> bool:
    if path:
        name = os.path.basename(path).lower()
        if os.path.splitext(name)[1] in _CONFIG_EXTS or name in _CONFIG_EXTS:
            return True
        if eng.file_type(path) != eng.other_type:  # a code type detect-secrets knows
            return False
    content = config = 0
    for line in text.split("\n", 300)[:300]:
        line = line[:1000]
        if not line.strip():
            continue
        if _CODE_LINE.match(line):
            return False
        content += 1
        config += bool(_CONFIG_LINE.fullmatch(line)) or line[:1] in " \t"  # indented: a continuation
    return content > 0 and config >= 0.8 * content


def _keyword_table(text: str, path: str | None, eng: _Engine) -> tuple[list, bool]:
    if path:
        ftype = eng.file_type(path)
        if ftype in eng.keyword_tables and ftype not in eng.config_types:
            return eng.table(eng.keyword_tables[ftype]), False
    if _looks_like_config(text, path, eng):
        return eng.table(eng.keyword_config), True
    return eng.table(eng.keyword_quoted), False


# --------------------------------------------------------------------------- helpers


class _Text:
    """One text, its lower-cased copy, and the lines each gate hits. Every gate is searched once up
    front (most find nothing, and then their detectors cost nothing more)."""

    def __init__(self, text: str, eng: _Engine) -> None:
        self.text = text
        low = text.lower()
        self.low = low if len(low) == len(text) else None  # str.lower() may change the length ("İ")
        first: dict[Gate, int] = {}
        for gate, rx, on_low in eng.gates:
            if on_low and self.low is None:
                m = _compiled(gate[1], re.IGNORECASE).search(text)
            else:
                m = rx.search(self.low if on_low else text)
            if m is not None:
                first[gate] = m.start()
        self.first = first
        self.memo: dict[Gate, list[tuple[int, int]]] = {}

    def lower_line(self, ls: int, le: int) -> str | None:
        """The lower-cased line if offsets carry over, else None (use the case-insensitive regex)."""
        if self.low is not None:
            return self.low[ls:le]
        low = self.text[ls:le].lower()
        return low if len(low) == le - ls else None

    def lines(self, gates: Iterable[Gate]) -> list[tuple[int, int]]:
        """(start, end) of every line one of the gates hits, in order."""
        found = []
        for gate in gates:
            pos = self.first.get(gate)
            if pos is None:
                continue
            got = self.memo.get(gate)
            if got is None:
                got = self.memo[gate] = self._scan(gate, pos)
            found.append(got)
        if len(found) <= 1:
            return found[0] if found else []
        return sorted({span for got in found for span in got})

    def windows(self, gates: tuple[Gate, ...]) -> Iterable[tuple[int, int, int]]:
        """(start, end, fresh) of the gated lines; a long one as windows around each gate hit in it.
        Matches starting before fresh were already seen, whole, in the previous window."""
        for ls, le in self.lines(gates):
            if le - ls <= _LONG_LINE:
                yield ls, le, ls
                continue
            hits: list[int] = []
            for where, pattern in gates:
                on_low = where == "low" and self.low is not None
                rx = _compiled(pattern, 0 if on_low or where != "low" else re.IGNORECASE)
                hits += (m.start() for m in rx.finditer(self.low if on_low else self.text, ls, le))
            end = -1
            for h in sorted(hits):
                if h + _APART <= end:
                    continue
                start = max(ls, h - _BEFORE)
                fresh = max(start, end - _APART)
                end = min(le, h + _AFTER)
                yield start, end, fresh

    def _scan(self, gate: Gate, pos: int) -> list[tuple[int, int]]:
        where, pattern = gate
        text = self.text
        if where == "low" and self.low is not None:
            hay, rx = self.low, _compiled(pattern, 0)
        else:
            hay, rx = text, _compiled(pattern, re.IGNORECASE if where == "low" else 0)
        out: list[tuple[int, int]] = []
        while True:
            m = rx.search(hay, pos)
            if m is None:
                return out
            ls = text.rfind("\n", 0, m.start()) + 1
            le = _line_end(text, m.start())
            out.append((ls, le))
            pos = le + 1  # one hit per line is enough


_regex_cache: dict[tuple[str, int], Pattern] = {}


def _compiled(pattern: str, flags: int) -> Pattern:
    rx = _regex_cache.get((pattern, flags))
    if rx is None:
        rx = _regex_cache[(pattern, flags)] = re.compile(pattern, flags)
    return rx


# Long lines (minified JSON/JS, embedded data) are scanned in windows around the gate hits: several
# detect-secrets regexes (KeywordDetector's ``[^\v'"]*``, NpmDetector's ``.+``) rescan the rest of
# the line from every candidate position, which is quadratic on a 1 MB line. A secret sits next to
# its gate (key, assignment, value; a token starts at its prefix), so a window from 1 KB before a hit
# to 4 KB after sees it whole; windows start at least 2 KB apart; duplicates merge in find_secrets.
_LONG_LINE = 8192
_BEFORE, _AFTER, _APART = 1024, 4096, 2048


def _line_end(text: str, pos: int) -> int:
    end = text.find("\n", pos)
    return len(text) if end < 0 else end


def _widen(text: str, s: int, e: int) -> tuple[int, int]:
    while s > 0 and _TOKEN_CHAR.match(text, s - 1):
        s -= 1
    n = len(text)
    while e < n and _TOKEN_CHAR.match(text, e):
        e += 1
    return s, e


def _value_filtered(eng: _Engine, value: str) -> bool:
    """detect-secrets' default heuristic filters that look at the value alone."""
    h = eng.h
    return (
        not value
        or REDACTED in value
        or h.is_templated_secret(value)
        or h.is_prefixed_with_dollar_sign(value)
        or h.is_not_alphanumeric_string(value)
        or h.is_sequential_string(value)
    )


def _placeholder(value: str) -> bool:
    """printf / str.format / Jinja templates, env-var names and documentation placeholders."""
    return (
        value.startswith(("%", "{", "<", "$"))
        or "{{" in value
        or "%(" in value
        or "%s" in value
        or value.lower() in _PLACEHOLDERS
        or _PLACEHOLDER.match(value) is not None
        or _ENV_NAME.fullmatch(value) is not None
    )


def _meta_key(line: str, pos: int) -> bool:
    """Is the identifier at pos (the key a KeywordDetector match starts with) about a secret, not one?"""
    s = pos
    while s > 0 and (line[s - 1].isalnum() or line[s - 1] == "_"):
        s -= 1
    e = pos
    while e < len(line) and (line[e].isalnum() or line[e] == "_"):
        e += 1
    words = [w.lower() for w in _KEY_WORDS.findall(line[s:e]) if not w.isdigit()]
    return bool(words) and words[-1] in _META_WORDS


def _finditer(rx: Pattern, low_rx: Pattern | None, t: _Text, ls: int, le: int):
    """Matches of a plugin regex on one line; case-insensitive ones run on the lower-cased line.
    Offsets are line-relative; group texts must be read from the original line."""
    if low_rx is not None:
        low = t.lower_line(ls, le)
        if low is not None:
            return low_rx.finditer(low)
    return rx.finditer(t.text[ls:le])


# --------------------------------------------------------------------------- detectors


def _private_keys(t: _Text, out: list[Finding], eng: _Engine) -> None:
    text = t.text
    kind = eng.private_key.secret_type
    begins: list[re.Match] = []
    for ls, le in t.lines(_PRIVATE_KEY_GATES):
        line = text[ls:le]
        if not any(rx.search(line) for rx in eng.private_key.denylist):  # PrivateKeyDetector decides
            continue
        begins += _PEM_BEGIN.finditer(text, ls, le)
        if "PuTTY-User-Key-File" in line:
            m = _PUTTY_PRIVATE.search(text, le)
            if m:
                s = e = m.end()
                for _ in range(int(m.group(1))):
                    e = _line_end(text, e + 1)
                if e > s + 1:
                    out.append(Finding(s + 1, e, kind))
    if not begins:
        return
    ends = [m.start() for m in _PEM_END.finditer(text)]
    for i, b in enumerate(begins):
        body_start = b.end()
        le = _line_end(text, body_start)
        next_begin = begins[i + 1].start() if i + 1 < len(begins) else len(text)
        j = bisect.bisect_left(ends, body_start)
        # its END: before the next BEGIN (blocks do not nest), so the newline counts add up to one pass
        if j < len(ends) and ends[j] < next_begin and text.count("\n", body_start, ends[j]) <= _PEM_MAX_LINES:
            body_end = ends[j]
        else:  # no END: the base64-looking lines that follow
            body_end, pos, n = le, le, 0
            while pos < len(text) and n < _PEM_MAX_LINES:
                nxt = _line_end(text, pos + 1)
                if not _B64_LINE.fullmatch(text, pos + 1, nxt):
                    break
                body_end, pos, n = nxt, nxt, n + 1
        if body_end > body_start and _key_body(text[body_start:body_end]):
            out.append(Finding(body_start, body_end, kind))


def _key_body(body: str) -> bool:
    return any(c.isalnum() for c in body) and all(
        _BODY_LINE.fullmatch(seg) for seg in body.replace("\\n", "\n").split("\n")
    )


def _plugin_span(m: re.Match, line: str) -> tuple[int, int, bool]:
    """Where in the line the secret value of one plugin match is; True when it is the whole match."""
    # The value is the first capture group that starts after the match does (the password of
    # ``user:pw@``, the value of ``key = "..."``); a group at the start is a prefix
    # (GitHubTokenDetector captures only "ghp"), and then the whole match is the token.
    if m.lastindex:
        for g in range(1, m.lastindex + 1):
            if m.start(g) > m.start() and m.end(g) > m.start(g):
                return m.start(g), m.end(g), False
    s, e = m.span()
    while s < e and line[s] in " \t\r=:\"'":  # ArtifactoryDetector's delimiters
        s += 1
    while e > s and line[e - 1] in " \t\r\"'":
        e -= 1
    if line.startswith("AccountKey=", s):  # AzureStorageKeyDetector: keep the key name, hide the value
        return s + len("AccountKey="), e, False
    return s, e, True


def _regex_plugins(t: _Text, out: list[Finding], eng: _Engine) -> None:
    text = t.text
    h = eng.h
    for p in eng.plugins:
        for ls, le, fresh in t.windows(p.gates):
            line = text[ls:le]
            if p.precheck is not None and not p.precheck.search(line):
                continue
            for rx, low_rx in p.regexes:
                for m in _finditer(rx, low_rx, t, ls, le):
                    if ls + m.start() < fresh:
                        continue
                    s, e, whole = _plugin_span(m, line)
                    if whole:
                        right = _STANDALONE.get(p.kind)
                        if right is not None and (line[s - 1 : s].isalnum() or (right and line[e : e + 1].isalnum())):
                            continue
                        s, e = _widen(line, s, e)
                    value = line[s:e]
                    if p.custom and not any(True for _ in p.plugin.analyze_string(line[m.start() : m.end()])):
                        continue  # e.g. JwtTokenDetector: not a well-formed JWT
                    # detect-secrets' default filters; not the UUID one for npm (legacy npm tokens are UUIDs)
                    if (
                        _value_filtered(eng, value)
                        or (p.kind != "NPM tokens" and h.is_potential_uuid(value))
                        or _PLACEHOLDER.match(value)
                    ):  # ACxxxxxxxx..., sk-...
                        continue
                    if p.kind == "Basic Auth Credentials" and _placeholder(value):
                        continue
                    out.append(Finding(ls + s, ls + e, p.kind))


def _keywords(t: _Text, path: str | None, out: list[Finding], eng: _Engine) -> None:
    text = t.text
    h = eng.h
    kind = eng.keyword.secret_type
    table = None
    config = False
    for ls, le, fresh in t.windows(_KEYWORD_GATES):
        low = t.lower_line(ls, le)
        if low is not None and not eng.keyword_gate.search(low):  # none of its keywords on this line
            continue
        if table is None:
            table, config = _keyword_table(text, path, eng)
        line = text[ls:le]
        indirect = None
        for rx, low_rx, group in table:
            # every match, not detect-secrets' first per regex: a one-line JSON holds many secrets
            for m in low_rx.finditer(low) if low_rx is not None and low is not None else rx.finditer(line):
                if m.end(group) <= m.start(group) or ls + m.start() < fresh:
                    continue
                s, e = m.span(group)
                value = line[s:e]
                if (
                    _value_filtered(eng, value)
                    or h.is_potential_uuid(value)
                    or _placeholder(value)
                    or " " in value.strip()
                    or _meta_key(line, m.start())
                    or h.is_likely_id_string(
                        value, line if len(line) <= 1000 else line[max(0, m.start() - 100) :], eng.keyword
                    )
                    or (config and (value.strip().lower() in _CONFIG_LITERALS or _DOTTED_REFERENCE.fullmatch(value)))
                ):
                    continue
                if indirect is None:  # secret = get_secret_key() / request.headers['apikey']
                    indirect = h.is_indirect_reference(line)
                if indirect:
                    break
                if config:  # the unquoted forms take the rest of the line: keep a trailing comment or ';'
                    cut = re.search(r"\s+#|;\s*$", value)
                    if cut:
                        e = s + cut.start()
                out.append(Finding(ls + s, ls + e, kind))


def _extras(t: _Text, out: list[Finding], eng: _Engine) -> None:
    text = t.text
    for ls, le in t.lines((_URL_GATE,)):
        for m in _URL_CREDENTIALS.finditer(text, ls, le):
            v = m.group(1)
            if not (_value_filtered(eng, v) or _placeholder(v)):
                out.append(Finding(m.start(1), m.end(1), "extra: URL credentials"))
    for ls, le, fresh in t.windows(_ENV_GATES):  # also _BASE64_AUTH's ("auth")
        env = _ENV_ASSIGN.match(text, ls, le) if ls == 0 or text[ls - 1] == "\n" else None
        if env:
            g = 1 if env.group(1) is not None else 2 if env.group(2) is not None else 3
            v = env.group(g)
            if not (_value_filtered(eng, v) or _placeholder(v) or v.lower() in _CONFIG_LITERALS):
                out.append(Finding(env.start(g), env.end(g), "extra: env assignment"))
        for m in _BASE64_AUTH.finditer(text, max(ls, fresh), le):
            before = text[max(ls, m.start() - 2) : m.start()]
            if before[-1:].isalnum() or (before[-1:] == "_" and before[:1].isalnum()):
                continue  # oauth, my_auth: the key must be exactly auth or _auth
            try:
                plain = base64.b64decode(m.group(1) + "=" * (-len(m.group(1)) % 4), validate=True).decode("utf-8")
            except (binascii.Error, ValueError):
                continue
            if re.fullmatch(r"[^\s:]+:\S+", plain):
                out.append(Finding(m.start(1), m.end(1), "extra: base64 user:password"))
    if "kind:" in text and _K8S_SECRET.search(text):
        _k8s_secret_data(text, out)
    for ls, le in t.lines((_B64_PEM_GATE,)):
        for m in _B64_PEM.finditer(text, ls, le):
            raw = m.group(0)
            try:
                head = base64.b64decode(raw[: len(raw) // 4 * 4][:96]).decode("ascii", "replace")
            except (binascii.Error, ValueError):
                continue
            if "PRIVATE KEY" in head:
                out.append(Finding(m.start(), m.end(), "extra: base64 private key"))
    for ls, le in t.lines(_TOKEN_GATES):
        for kind, rx in _TOKEN_SHAPES:
            for m in rx.finditer(text, ls, le):
                out.append(Finding(m.start(), m.end(), kind))


def _k8s_secret_data(text: str, out: list[Finding]) -> None:
    for d in _K8S_DATA.finditer(text):
        indent = len(d.group(1))
        pos = d.end()
        while pos < len(text):
            ls = pos + 1
            le = _line_end(text, ls)
            line = text[ls:le]
            if line.strip():
                lead = len(line) - len(line.lstrip())
                if lead <= indent:
                    break
                m = _K8S_ENTRY.fullmatch(line)
                if m and m.group(2):
                    out.append(Finding(ls + m.start(2), ls + m.end(2), "extra: Kubernetes Secret data"))
                elif not m:  # a continuation line of a block scalar
                    out.append(Finding(ls + lead, le, "extra: Kubernetes Secret data"))
            pos = le


# --------------------------------------------------------------------------- API


def find_secrets(text: str, path: str | None = None) -> list[Finding]:
    """Secret values in text, sorted and non-overlapping (overlaps merged; the first detector names it).
    path, when known, picks detect-secrets' file-type rules (e.g. unquoted values in YAML)."""
    if not text:
        return []
    eng = _get_engine()
    t = _Text(text, eng)
    found: list[Finding] = []
    _private_keys(t, found, eng)
    _regex_plugins(t, found, eng)
    _keywords(t, path, found, eng)
    _extras(t, found, eng)
    if not found:
        return []
    found.sort(key=lambda f: (f.start, -f.end))
    merged: list[Finding] = []
    for f in found:
        if f.end <= f.start:
            continue
        if merged and f.start < merged[-1].end:
            last = merged[-1]
            if f.end > last.end:
                merged[-1] = Finding(last.start, f.end, last.kind)
            continue
        merged.append(f)
    return merged


def _replacement(segment: str) -> str:
    """[REDACTED] plus the segment's newlines; a last line that is only indentation/quotes stays."""
    if "\n" not in segment:
        return REDACTED
    parts = segment.split("\n")
    tail = parts[-1] if re.fullmatch(r"[\s\"'`+]*", parts[-1]) else ""
    return REDACTED + "\n" * (len(parts) - 1) + tail


def apply_redactions(text: str, findings: Iterable[Finding]) -> str:
    out: list[str] = []
    pos = 0
    for f in findings:
        out.append(text[pos : f.start])
        out.append(_replacement(text[f.start : f.end]))
        pos = f.end
    out.append(text[pos:])
    return "".join(out)


def redact_report(text: str, path: str | None = None) -> tuple[str, list[Finding]]:
    findings = find_secrets(text, path)
    return (apply_redactions(text, findings) if findings else text), findings


def redact(text: str, path: str | None = None) -> tuple[str, int]:
    """Replace secret values with [REDACTED]; returns (text, number of redactions). Lines are kept."""
    new, findings = redact_report(text, path)
    return new, len(findings)


__all__ = ["Finding", "REDACTED", "apply_redactions", "find_secrets", "redact", "redact_report"]
