"""Git remotes for the service's tests: local bare repositories a test pushes commits to, and a smart-HTTP git
server over TLS (``git http-backend`` behind Basic authentication, a self-signed certificate from ``openssl``)."""
from __future__ import annotations

import base64
import os
import ssl
import subprocess
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

GIT_ENV = {"GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": os.devnull, "GIT_TERMINAL_PROMPT": "0",
           "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.com", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@example.com", "LC_ALL": "C"}


def git(*args: str, cwd: Path | None = None) -> str:
    out = subprocess.run(["git", *args], cwd=str(cwd) if cwd else None, env={**os.environ, **GIT_ENV},
                         capture_output=True, text=True, timeout=60)
    if out.returncode != 0:
        raise RuntimeError(f"git {' '.join(args)}: {out.stderr.strip()}")
    return out.stdout.strip()


class Remote:
    """A bare repository (the remote) and a working clone the test commits in and pushes from."""

    def __init__(self, base: Path, name: str, files: dict[str, str], branches: tuple[str, ...] = ("main",)):
        self.bare = base / f"{name}.git"
        self.work = base / f"{name}-work"
        git("init", "--quiet", "--bare", "-b", branches[0], str(self.bare))
        git("config", "uploadpack.allowFilter", "true", cwd=self.bare)
        git("init", "--quiet", "-b", branches[0], str(self.work))
        git("remote", "add", "origin", str(self.bare), cwd=self.work)
        self.commit(files, "initial", branch=branches[0])
        for b in branches[1:]:
            git("push", "--quiet", "origin", f"{branches[0]}:refs/heads/{b}", cwd=self.work)

    def commit(self, files: dict[str, str], message: str, branch: str = "main") -> str:
        """Commit ``files`` on ``branch`` and push it; the new commit's id."""
        git("fetch", "--quiet", "origin", cwd=self.work)
        try:
            git("rev-parse", "--verify", "--quiet", f"refs/remotes/origin/{branch}", cwd=self.work)
            git("checkout", "--quiet", "-B", branch, f"refs/remotes/origin/{branch}", cwd=self.work)
        except RuntimeError:  # the first commit of the repository
            pass
        for rel, text in files.items():
            p = self.work / rel
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_text(text)
        git("add", "-A", cwd=self.work)
        git("commit", "--quiet", "-m", message, cwd=self.work)
        git("push", "--quiet", "origin", f"HEAD:refs/heads/{branch}", cwd=self.work)
        return git("rev-parse", "HEAD", cwd=self.work)

    def head(self, branch: str = "main") -> str:
        return git("rev-parse", f"refs/heads/{branch}", cwd=self.bare)


def self_signed(folder: Path) -> tuple[Path, Path]:
    cert, key = folder / "cert.pem", folder / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj",
                    "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1", "-keyout", str(key), "-out",
                    str(cert)], check=True, capture_output=True, timeout=60)
    return cert, key


class HttpsGitServer:
    """``https://127.0.0.1:PORT/<name>.git`` for every bare repository under ``root``, behind Basic auth."""

    def __init__(self, root: Path, user: str, password: str, certs: Path):
        self.root, self.user, self.password = root, user, password
        self.cert, key = self_signed(certs)
        self.auth_headers: list[str] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def _serve(self):
                auth = self.headers.get("Authorization", "")
                server.auth_headers.append(auth)
                want = "Basic " + base64.b64encode(f"{server.user}:{server.password}".encode()).decode()
                n = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(n) if n else b""
                if auth != want:
                    self.send_response(401)
                    self.send_header("WWW-Authenticate", 'Basic realm="git"')
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                path, _, query = self.path.partition("?")
                env = {"PATH": os.environ["PATH"], "GIT_PROJECT_ROOT": str(server.root), "GIT_HTTP_EXPORT_ALL": "1",
                       "PATH_INFO": path, "QUERY_STRING": query, "REQUEST_METHOD": self.command,
                       "CONTENT_TYPE": self.headers.get("Content-Type", ""), "CONTENT_LENGTH": str(len(body)),
                       "REMOTE_USER": server.user, "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": os.devnull,
                       "HTTP_GIT_PROTOCOL": self.headers.get("Git-Protocol", "")}
                if self.headers.get("Content-Encoding"):
                    env["HTTP_CONTENT_ENCODING"] = self.headers["Content-Encoding"]
                out = subprocess.run(["git", "http-backend"], input=body, env=env, capture_output=True,
                                     timeout=60).stdout
                head, _, payload = out.partition(b"\r\n\r\n")
                status, headers = 200, []
                for line in head.split(b"\r\n"):
                    k, _, v = line.decode("latin-1").partition(":")
                    if k.lower() == "status":
                        status = int(v.strip().split()[0])
                    elif k:
                        headers.append((k, v.strip()))
                self.send_response(status)
                for k, v in headers:
                    self.send_header(k, v)
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            do_GET = do_POST = _serve

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(str(self.cert), str(key))
        self.httpd.socket = ctx.wrap_socket(self.httpd.socket, server_side=True)
        self.port = self.httpd.server_address[1]
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def url(self, name: str) -> str:
        return f"https://127.0.0.1:{self.port}/{name}.git"

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
