"""Secrets never reach the index, search results, CLI output or embed texts (issue: "secrets served verbatim").

The fixture under tests/fixtures/secrets/ holds FORMS below: fake but real-looking credentials in the
shapes they take in repositories. Each value carries a unique marker, so a leak anywhere is a substring.
"""

from __future__ import annotations

import base64
import json
import re
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

import repoctx
from repoctx.ingest.secrets import find_secrets, redact
from repoctx.ingest.walk import load_text

FIXTURE = Path(__file__).parent / "fixtures" / "secrets"


def _b64(s: str) -> str:
    return base64.b64encode(s.encode()).decode()


def _value_after(rel: str, key: str, n: int = 60) -> str:
    """The first n characters of the value of `key:` in a fixture file (for values too long to repeat)."""
    m = re.search(rf"^\s*{re.escape(key)}:\s*(\S+)", (FIXTURE / rel).read_text(), re.M)
    assert m, (rel, key)
    return m.group(1)[:n]


# (file, form, a substring of the secret value that must appear nowhere after indexing)
FORMS = [
    ("deploy/aws.ini", "AWS access key id, INI", "AKIAQX4TLEAKINIKEY01"),
    ("deploy/aws.ini", "AWS secret access key, INI unquoted", "IniAwsSecretLeak"),
    ("scripts/deploy.sh", "AWS access key id, shell export", "AKIAJ7SHELLEXPORT002"),
    ("scripts/deploy.sh", "AWS secret access key, unquoted shell export", "ShellAwsSecretLeak"),
    ("scripts/deploy.sh", "GitHub token, shell export", "ShellGhTokenLeak"),
    ("scripts/deploy.sh", "postgres URL with password, shell export", "ShellPgPassLeak42"),
    ("scripts/deploy.sh", "Slack bot token, quoted export", "ShellSlackTokenLeak"),
    ("scripts/deploy.sh", "shell single-quoted DB_PASSWORD", "ShellQuotedPwLeak7"),
    ("scripts/deploy.sh", "unquoted shell API key of no known shape", "ShellHerokuKeyLeak"),
    ("config/app.yaml", "YAML plain password", "YamlPlainPasswordLeak"),
    ("config/app.yaml", "mysql URL credentials, YAML", "YamlMysqlPassLeak9"),
    ("config/app.yaml", "redis URL with empty user", "YamlRedisPassLeak3"),
    ("config/app.yaml", "amqp URL credentials", "YamlAmqpPassLeak5"),
    ("config/app.yaml", "YAML double-quoted api_key", "YamlQuotedApiKeyLeak88"),
    ("config/app.yaml", "YAML single-quoted client_secret", "YamlSingleQuotedSecretLeak"),
    ("config/app.yaml", "Stripe live key, YAML unquoted", "YamlStripeLeak"),
    ("config/app.yaml", "GitLab token, YAML", "YamlGitlabTokenLeak"),
    ("config/ssh.yaml", "OPENSSH private key in a YAML block scalar", "OpensshBodyLeak"),
    ("config/app.json", "JSON password", "JsonPasswordLeak11"),
    ("config/app.json", "OpenAI key, JSON", "JsonOpenAiKeyLeak"),
    ("config/app.json", "JWT, JSON", "JwtSigLeak77"),
    ("config/app.json", "SendGrid key, JSON", "SendGridSecretLeak"),
    ("config/app.json", "Telegram bot token, JSON", "TelegramBotLeak"),
    ("config/app.json", "Mailchimp key, JSON", "mailchimpleak"),
    ("gcp/service-account.json", "GCP service-account private key (JSON, escaped newlines)", "GcpKeyBodyLeak"),
    ("config/appsettings.json", "Azure storage account key in a connection string", "AzureStorKeyLeak"),
    ("config/appsettings.json", "Square OAuth secret", "SquareOAuthLeak"),
    ("config/settings.toml", "TOML password", "TomlPasswordLeak21"),
    ("config/settings.toml", "PyPI token, TOML", "TomlPypiTokenLeak"),
    ("deploy/settings.ini", "INI plain password", "IniPlainPwLeak33"),
    ("deploy/settings.ini", "INI plain secret", "IniSecretLeak34"),
    ("config/npmrc.cfg", ".npmrc _authToken (npm_ token)", "NpmrcTokenLeak"),
    ("config/npmrc.cfg", ".npmrc _authToken (legacy UUID token)", "b5e4c3d2-a1f0-4e9d-8c7b-6a5f4e3d2c1b"),
    ("config/npmrc.cfg", ".npmrc _auth (base64 user:password)", _b64("npmuser:NpmrcAuthLeak55")),
    ("deploy/pypirc.cfg", ".pypirc PyPI token", "PypircTokenLeak"),
    ("deploy/pypirc.cfg", ".pypirc plain password", "PypircPlainPwLeak66"),
    ("docker/config.json", "docker config.json auth (Docker Hub)", _b64("dockeruser:DockerAuthLeak77")),
    (
        "docker/config.json",
        "docker config.json auth (ghcr, token inside)",
        _b64("ghuser:ghp_DockerGhcrTokenLeak0123456789abcdef"),
    ),
    ("k8s/db-secret.yaml", "Kubernetes Secret data (base64 password)", _b64("K8sDataPassLeak88")),
    ("k8s/db-secret.yaml", "Kubernetes Secret data (base64 PEM key)", _value_after("k8s/db-secret.yaml", "tls.key")),
    ("k8s/db-secret.yaml", "Kubernetes Secret stringData", "K8sStringDataTokenLeak99"),
    ("keys/embedded_keys.py", "RSA private key in a Python string", "RsaKeyBodyLeak"),
    ("keys/embedded_keys.py", "EC private key in a Python string", "EcKeyBodyLeak"),
    ("docs/ssh.md", "OPENSSH private key in Markdown", "MdOpensshLeak"),
    ("docs/ssh.md", "https basic-auth URL in Markdown", "HttpsBasicLeak55"),
    ("app/settings_prod.py", "Django SECRET_KEY", "PySecretKeyLeak"),
    ("app/settings_prod.py", "Python dict PASSWORD", "PyDictPasswordLeak12"),
    ("app/settings_prod.py", "Stripe key, Python", "PyStripeLeak"),
    ("app/settings_prod.py", "SendGrid key, Python", "PySendGridSecretLeak"),
    ("app/settings_prod.py", "AWS access key id, Python", "AKIAPY3TESTLEAK00003"),
    ("app/settings_prod.py", "AWS secret access key, Python", "PyAwsSecretLeak"),
    ("app/settings_prod.py", "Python single-quoted db_password", "PySingleQuotedLeak"),
    ("app/settings_prod.py", "amqp URL, Python", "PyAmqpPassLeak14"),
    ("app/settings_prod.py", "Google API key", "PyGoogleApiKeyLeak"),
    ("app/settings_prod.py", "GitHub fine-grained PAT", "PyFineGrainedLeak"),
    ("app/settings_prod.py", "Twilio API key", "twiliokeyleak"),
    ("app/settings_prod.py", "Discord bot token", "DiscordBotLeak"),
    ("app/settings_prod.py", "Artifactory token", "ArtifactoryLeak"),
    ("app/settings_prod.py", "password default argument", "PyDefaultArgLeak13"),
    ("web/config.js", "JS const apiKey", "JsApiKeyLeak"),
    ("web/config.js", "GitLab token, JS", "JsGitlabTokenLeak"),
    ("web/config.js", "JS object password", "JsObjectPasswordLeak"),
    ("web/config.js", "Slack webhook URL", "JsSlackHookLeak"),
    ("web/config.js", "https basic-auth URL, JS", "JsBasicAuthLeak44"),
    ("web/config.js", "JS template-literal secret", "JsTemplateSecretLeak"),
    ("deploy/env.production.txt", ".env-style postgres URL", "EnvPgPassLeak61"),
    ("deploy/env.production.txt", ".env-style SECRET_KEY", "EnvSecretKeyLeak62"),
    ("deploy/env.production.txt", ".env-style auth token", "EnvSentryTokenLeak63"),
    ("deploy/env.production.txt", ".env-style redis URL with user", "EnvRedisPassLeak64"),
    ("docker/Dockerfile", "Dockerfile ENV token", "DockerfileEnvTokenLeak71"),
    ("docker/Dockerfile", "Dockerfile ARG index URL password", "DockerfileIndexPassLeak72"),
]
MARKERS = [m for _, _, m in FORMS]
SKIPPED_BY_NAME = {".env", ".npmrc", ".pypirc"}  # same content as config/npmrc.cfg, deploy/pypirc.cfg
QUERIES = ["password", "token", "secret key", "private key", "aws access key", "api key", "database url credentials"]

# Code that names secrets without holding one: redacting it would cost retrieval.
NOT_SECRETS = [
    "password_validator = PasswordValidator()",
    "token = next_token()",
    "secret_key = get_secret_key()",
    "password = user.password",
    "def set_password(self, raw_password: str, password: Optional[str] = None):",
    'api_key = request.headers["X-Api-Key"]',
    "if password == user.confirm_password:",
    'return "postgres://%s:%s@%s/app" % (user, password, host)',
    'return f"postgres://{user}:{password}@{host}/app"',
    "PASSWORD_MIN_LENGTH = 12",
    "kwargs = dict(password=password, token=token)",
    'help_text = _("Your password can’t be too similar to your other personal information.")',
    "password: ${DB_PASSWORD}",
    'password: "{{ .Values.db.password }}"',
    "url = settings.DATABASE_URL",
    "export DB_PASSWORD=$DB_PASSWORD_FROM_VAULT",
    "sessionid = hashlib.sha256(secret.encode()).hexdigest()",
    # seen on Django / site-packages before the extra filters of repoctx.ingest.secrets
    'PASSWORD_FIELD = "password"',
    'SECRET_KEY_INSECURE_PREFIX = "django-insecure-"',
    "secret_type = 'AWS Access Key'",
    '"openai_api_key": "OPENAI_API_KEY",',
    'client = OpenAI(api_key="your-api-key")',
    ":param proxy_url: The proxy url, i.e. https://username:password@proxy.com",
    "dna = 'AAACCATCTCTACCGGTTCGCTTTCACTGGATATCGCGCTTGGGG'",
    '_SK_START = b"-----BEGIN OPENSSH PRIVATE KEY-----"\n_SK_END = b"-----END OPENSSH PRIVATE KEY-----"',
]


def _leaks(text: str) -> list[str]:
    return [m for m in MARKERS if m in text]


@pytest.fixture(scope="module")
def indexed(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("secrets")
    root = tmp / "repo"
    shutil.copytree(FIXTURE, root)
    ix = repoctx.Index(root, repoctx.Settings(index_dir=tmp / "ix", embedder="none"))
    report = ix.update()
    return root, tmp / "ix", ix, report


def test_fixture_is_big_enough():
    assert len(FORMS) >= 40
    assert len(set(MARKERS)) == len(MARKERS)
    for rel, form, marker in FORMS:
        assert marker in (FIXTURE / rel).read_text(), (rel, form)


@pytest.mark.parametrize("rel,form,marker", FORMS, ids=[f for _, f, _ in FORMS])
def test_each_form_redacted_lines_kept(rel, form, marker):
    raw = (FIXTURE / rel).read_bytes()
    loaded = load_text(raw)  # the choke point every indexed text passes
    assert marker not in loaded.text, form
    assert loaded.redactions > 0
    assert loaded.text.count("\n") == raw.decode().count("\n")  # line numbers in citations stay true
    assert "[REDACTED]" in loaded.text


def test_capsules_search_and_embed_texts_clean(indexed):
    root, _, ix, report = indexed
    capsules = ix.store.all_capsules()
    paths = {c.path for c in capsules}
    assert {rel for rel, _, _ in FORMS} <= paths  # every form was indexed, so "no leak" means redacted
    assert not paths & SKIPPED_BY_NAME
    assert {p for p, r in report.skipped if r.startswith("secret")} == SKIPPED_BY_NAME
    # The vector cache stores vectors keyed by a hash of repoctx.providers.embedding.embed_text(capsule), which is built
    # from the capsule's text and names only: clean capsule texts mean clean embed texts.
    for c in capsules:
        assert not _leaks(c.text), (c.path, _leaks(c.text))
        assert not _leaks(json.dumps(c.to_dict() if hasattr(c, "to_dict") else c.__dict__, default=str))
    for q in QUERIES:
        hits = ix.search(q, k=50)
        assert hits, q
        blob = json.dumps([h.to_dict() for h in hits], default=str)
        assert not _leaks(blob), (q, _leaks(blob))
    # what the redaction hid is still findable by its key name
    assert any(
        "YamlPlainPassword" not in h.capsule.text and h.capsule.path == "config/app.yaml"
        for h in ix.search("database password", k=50)
    )


def test_embed_text_clean(indexed):
    _, _, ix, _ = indexed
    from repoctx.providers.embedding import embed_text

    for c in ix.store.all_capsules():
        assert not _leaks(embed_text(c))


def test_cli_search_and_context_json_clean(indexed, monkeypatch):
    root, ix_dir, _, _ = indexed
    from repoctx.cli import app

    monkeypatch.setenv("REPOCTX_INDEX_DIR", str(ix_dir))
    monkeypatch.setenv("REPOCTX_EMBEDDER", "none")
    runner = CliRunner()
    for q in QUERIES:
        for cmd in ("search", "context"):
            res = runner.invoke(app, [cmd, q, "--repo", str(root), "--json"])
            assert res.exit_code == 0, (cmd, q, res.output)
            json.loads(res.stdout)
            assert not _leaks(res.output), (cmd, q, _leaks(res.output))


def test_line_numbers_survive_multiline_private_keys(indexed):
    root, _, ix, _ = indexed
    src = (root / "keys/embedded_keys.py").read_text().split("\n")
    want = next(i for i, line in enumerate(src, 1) if line.startswith("def after_the_keys"))
    (cap,) = [c for c in ix.find("after_the_keys")]
    assert cap.start_line == want
    keys = [c for c in ix.store.all_capsules() if c.path == "keys/embedded_keys.py" and "RSA_KEY" in c.text]
    assert keys and all("BEGIN RSA PRIVATE KEY" in c.text and "RsaKeyBodyLeak" not in c.text for c in keys)


def test_normal_code_not_redacted(indexed):
    _, _, ix, report = indexed
    assert "app/normal_code.py" not in report.redacted
    text = " ".join(c.text for c in ix.store.all_capsules() if c.path == "app/normal_code.py")
    for s in (
        "password_validator = password_validator or PasswordValidator()",
        "token = next_token()",
        "secret_key = get_secret_key()",
        'f"postgres://{user}:{password}@{host}/app"',
    ):
        assert s in text
    assert "[REDACTED]" not in text


@pytest.mark.parametrize("line", NOT_SECRETS)
def test_not_secrets(line):
    for text in (line + "\n", f"def f():\n    {line}\n"):
        new, n = redact(text)
        assert (new, n) == (text, 0), find_secrets(text)


def test_key_names_stay_values_go():
    new, n = redact('password: "Password123"\nDB_PASSWORD=DB_PASSWORD_VALUE_9x\n')
    assert new.startswith('password: "[REDACTED]"') and "DB_PASSWORD=[REDACTED]" in new and n == 2


def test_redact_leaves_a_large_clean_text_as_it_is():
    """~150 KB with secret-ish words and no secret: nothing redacted, the text unchanged. (Its speed is measured
    by bench/redaction_share.py, not asserted here: a timed test fails on a busy machine.)"""
    text = (FIXTURE / "app/normal_code.py").read_text() * 200
    out, n = redact(text)
    assert n == 0 and out == text


def test_the_engine_runs_detect_secrets_default_plugins_without_importing_requests():
    """The engine imports detect-secrets with ``requests`` deferred (it is only for verifying a secret online):
    the plugin classes are still every one detect-secrets loads by default, and a later ``import requests``
    anywhere gets the real module, which detect-secrets' own verification then uses."""
    import subprocess
    import sys

    probe = """
import json, sys
from repoctx.ingest import secrets
found = secrets.find_secrets('password = "hunter2xyzQ"', "a.py")
ours = sorted(p.plugin.__class__.__name__ for p in secrets._get_engine().plugins)
deferred = "requests" in sys.modules
from detect_secrets.core.plugins.util import get_mapping_from_secret_type_to_class
from detect_secrets.settings import default_settings
with default_settings() as settings:
    default = sorted(settings.plugins)
loaded = sorted(c.__name__ for c in get_mapping_from_secret_type_to_class().values())
import requests
import detect_secrets.plugins.base as base
print(json.dumps({"found": len(found), "deferred": deferred, "ours": ours, "default": default, "loaded": loaded,
                  "real_after": base.requests.RequestException is requests.RequestException,
                  "module": requests.__name__ == "requests" and hasattr(requests, "Session")}))
"""
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    got = json.loads(out.stdout)
    assert got["found"] == 1 and got["deferred"] is False
    assert got["loaded"] == got["default"]  # the classes the engine picks from: detect-secrets' default set
    left_out = {
        "Base64HighEntropyString",
        "HexHighEntropyString",
        "IPPublicDetector",
        "KeywordDetector",
        "PrivateKeyDetector",
    }  # entropy and IP by design (module docstring); the last two have own steps
    assert sorted(set(got["default"]) - left_out) == got["ours"]
    assert got["real_after"] and got["module"]


def test_another_thread_importing_requests_meanwhile_gets_the_real_module():
    """While detect-secrets imports, ``requests`` in sys.modules is the stand-in: another thread of a long-lived
    process that imports it then waits for the real module instead of failing."""
    import subprocess
    import sys

    probe = """
import json, sys, threading, time
from repoctx.ingest.secrets import _DeferredRequests
stand_in = sys.modules["requests"] = _DeferredRequests("requests")
got = {}
def other():
    import requests  # the stand-in, as sys.modules holds it
    got["is_stand_in"] = requests is stand_in
    got["session"] = requests.Session.__module__  # waits for the import to end
    got["after"] = time.monotonic()
t = threading.Thread(target=other)
t.start()
time.sleep(0.3)
try:
    stand_in.Session
except AttributeError:
    got["own_thread"] = "stand-in"
ended = time.monotonic()
del sys.modules["requests"]
stand_in._done.set()
t.join(10)
print(json.dumps(dict(got, waited=got.get("after", 0) >= ended)))
"""
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    got = json.loads(out.stdout)
    assert got == {"is_stand_in": True, "session": "requests.sessions", "after": got["after"], "own_thread": "stand-in",
                   "waited": True}
