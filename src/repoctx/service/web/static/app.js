// What every page shares: the API key (this tab only), calls to the API with it, small DOM helpers.
const KEY = "repoctx.key";

export const getKey = () => sessionStorage.getItem(KEY);

export class ApiError extends Error {
  constructor(status, body) {
    super((body && body.detail) || `HTTP ${status}`);
    this.status = status;
    this.code = (body && body.error) || String(status);
  }
}

/** A JSON call to the API with the tab's key; an error answer throws ApiError with its detail. */
export async function api(path, { method = "GET", body, signal } = {}) {
  const headers = { Authorization: `Bearer ${getKey() || ""}` };
  if (body !== undefined) headers["Content-Type"] = "application/json";
  const res = await fetch(path, { method, headers, body: body === undefined ? undefined : JSON.stringify(body), signal });
  let data = null;
  try { data = await res.json(); } catch { data = null; }
  if (!res.ok) {
    if (res.status === 401) signOut("The key was refused: sign in again.");
    throw new ApiError(res.status, data);
  }
  return data;
}

/** el("a", {href, class}, "text", child...): attributes are set as attributes, text is text (never HTML). */
export function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k === "class") node.className = v;
    else if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
    else node.setAttribute(k, v === true ? "" : String(v));
  }
  for (const c of children.flat()) {
    if (c === undefined || c === null || c === false) continue;
    node.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return node;
}

/** Server-highlighted code (Pygments output: escaped by the server) into a <pre class="code">. */
export function codeBlock(html, label) {
  const pre = el("pre", { class: "code", tabindex: "0", "aria-label": label || "Code" });
  pre.innerHTML = html;
  return pre;
}

export async function highlight(items) {
  if (!items.length) return [];
  return (await api("/highlight", { method: "POST", body: { items } })).html;
}

/** The page that opens a file at lines (the /file endpoint, under the same key). */
export function fileHref({ repo, path, start, end }) {
  const q = new URLSearchParams();
  if (repo) q.set("repo", repo);
  q.set("path", path);
  if (start) q.set("start", String(start));
  if (end) q.set("end", String(end));
  return `/ui/file?${q}`;
}

const CITE = /^(.+?):(\d+)-(\d+) :: (.+)$/;

/** "[repo:]path:start-end :: qualname…" as {repo, path, start, end, qualname, rest}; null if it is not one. */
export function parseCitation(text, repos = []) {
  const line = String(text).split("\n")[0];
  const m = CITE.exec(line);
  if (!m) return null;
  let [, path, start, end, rest] = m;
  let repo = "";
  const colon = path.indexOf(":");
  if (colon > 0 && repos.includes(path.slice(0, colon))) {
    repo = path.slice(0, colon);
    path = path.slice(colon + 1);
  }
  const q = /^[^\s(—]+/.exec(rest);
  return { repo, path, start: +start, end: +end, qualname: q ? q[0] : rest, rest };
}

export function setStatus(text, isError = false) {
  const s = document.getElementById("status");
  if (!s) return;
  s.textContent = text;
  s.classList.toggle("error", isError);
}

function show(id, on) { document.getElementById(id).hidden = !on; }

export function signOut(message) {
  sessionStorage.removeItem(KEY);
  show("signin", true);
  show("who", false);
  show("signed-out", true);
  document.body.classList.add("signed-out");
  const err = document.getElementById("signin-error");
  err.hidden = !message;
  err.textContent = message || "";
}

/** Wires the sign-in form; calls ready(who) once the tab holds a key the API accepts. */
export function start(ready) {
  const form = document.getElementById("signin");
  const err = document.getElementById("signin-error");
  async function check() {
    try {
      const who = await api("/whoami");
      show("signin", false);
      show("who", true);
      show("signed-out", false);
      document.body.classList.remove("signed-out");
      err.hidden = true;
      document.getElementById("who-name").textContent = `${who.principal} (${who.admin ? "admin" : who.role})`;
      await ready(who);
    } catch (e) {
      if (!(e instanceof ApiError && e.status === 401)) {
        err.hidden = false;
        err.textContent = `Could not reach the service: ${e.message}`;
      }
    }
  }
  form.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    const input = document.getElementById("api-key");
    sessionStorage.setItem(KEY, input.value.trim());
    input.value = "";
    await check();
  });
  document.getElementById("signout").addEventListener("click", () => {
    signOut("");
    location.reload();
  });
  if (getKey()) check();
  else signOut("");
}
