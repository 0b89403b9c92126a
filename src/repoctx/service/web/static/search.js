// Search: hybrid search (/search), exact names (/symbol) or grep (/grep), each hit a cited link to its lines.
import { api, codeBlock, el, fileHref, highlight, parseCitation, setStatus, start } from "./app.js";

const $ = (id) => document.getElementById(id);
let repoNames = [];

/** The path grammar of grants, for the page's own filter of search hits: '*' and '**' cross '/', '?' one char. */
function globRe(glob) {
  let re = "";
  for (let i = 0; i < glob.length; i++) {
    const c = glob[i];
    if (c === "\\" && i + 1 < glob.length) re += glob[++i].replace(/[.*+?^${}()|[\]\\/]/g, "\\$&");
    else if (c === "*") { while (glob[i + 1] === "*") i++; re += ".*"; }
    else if (c === "?") re += ".";
    else re += c.replace(/[.*+?^${}()|[\]\\/]/g, "\\$&");
  }
  return new RegExp(`^${re}$`, "u");
}

function pathFilter() {
  const globs = $("paths").value.split(",").map((s) => s.trim()).filter(Boolean);
  if (!globs.length) return null;
  const res = globs.map(globRe);
  return { globs, test: (p) => res.some((r) => r.test(p)) };
}

function hitItem({ repo, path, start, end, qualname, why, sig, html, extra }) {
  const href = fileHref({ repo, path, start, end });
  const li = el("li", { class: "hit" },
    el("p", { class: "cite" },
      el("a", { href, class: "cite-link" }, `${repo && repoNames.length > 1 ? repo + ":" : ""}${path}:${start}${end && end !== start ? "-" + end : ""}`),
      qualname ? el("code", { class: "qualname" }, qualname) : null),
    sig ? el("p", { class: "sig" }, el("code", {}, sig)) : null,
    why ? el("p", { class: "why" }, el("span", { class: "label" }, "why: "), why) : null,
    extra || null);
  if (html) li.append(codeBlock(html, `Preview of ${path}:${start}`));
  return li;
}

async function runSearch(q, repos, filter, detail) {
  const body = { query: q, repos, k: 10, detail };
  if (filter) body.paths = filter.globs;  // the API narrows the key's scope to these files
  const data = await api("/search", { method: "POST", body });
  let items = (data.results || []).map((r) => {
    if (typeof r === "string") {  // brief: the one-line form "path:lines :: qualname(sig) — why"
      const c = parseCitation(r, repoNames);
      if (!c) return { path: r, start: 0, end: 0, line: r };
      const [head, why] = c.rest.split(" — ");
      return { ...c, sig: head, why, text: head };
    }
    if (r.start_line === undefined) {  // a file-level result
      return { repo: r.repo, path: r.path, start: 1, end: 0, why: (r.citations || []).join(", ") };
    }
    return { repo: r.repo, path: r.path, start: r.start_line, end: r.end_line, qualname: r.symbol, why: r.why,
             sig: detail === "full" ? null : r.signature, text: detail === "full" ? (r.snippet || r.signature) : r.signature,
             extra: r.docstring ? el("p", { class: "doc" }, r.docstring) : null };
  });
  const html = await highlight(items.filter((it) => it.text).map((it) => ({ text: it.text, path: it.path, start: it.start || 1 })));
  let i = 0;
  for (const it of items) if (it.text) it.html = html[i++];
  return { items, note: (data.notes || []).join("; ") };
}

async function runSymbol(name, repos, filter) {
  const data = await api("/symbol", { method: "POST", body: { name, repos, limit: 20, body: true } });
  let items = (data.matches || []).map((m) => ({ repo: m.repo, path: m.path, start: m.start_line, end: m.end_line,
    qualname: m.qualname, why: `exact name (${m.kind})`, text: (m.text || m.signature || "").split("\n").slice(0, 12).join("\n") }));
  if (filter) items = items.filter((it) => filter.test(it.path));
  const html = await highlight(items.map((it) => ({ text: it.text, path: it.path, start: it.start })));
  items.forEach((it, i) => { it.html = html[i]; });
  const note = data.hint || (data.did_you_mean && data.did_you_mean.length ? `did you mean: ${data.did_you_mean.join(", ")}` : "");
  return { items, note };
}

async function runGrep(pattern, repos, filter) {
  const body = { pattern, repos, limit: 100, context: 1 };
  if (filter) body.paths = filter.globs;
  const data = await api("/grep", { method: "POST", body });
  const items = (data.matches || []).map((m) => {
    const before = m.before || [];
    const lines = [...before, m.text, ...(m.after || [])];
    return { repo: m.repo, path: m.path, start: m.line, end: m.line, why: "matches the pattern",
             text: lines.join("\n"), first: m.line - before.length };
  });
  const html = await highlight(items.map((it) => ({ text: it.text, path: it.path, start: Math.max(1, it.first) })));
  items.forEach((it, i) => { it.html = html[i]; });
  const more = data.truncated ? ` (first ${items.length} of ${data.total}${data.total_exact === false ? "+" : ""})` : "";
  return { items, note: more };
}

async function submit(ev) {
  ev.preventDefault();
  const q = $("q").value.trim();
  if (!q) return;
  const kind = $("kind").value;
  const repos = $("repo").value ? [$("repo").value] : undefined;
  const filter = pathFilter();
  const list = $("results");
  list.replaceChildren();
  setStatus("Searching…");
  try {
    const { items, note } = kind === "grep" ? await runGrep(q, repos, filter)
      : kind === "symbol" ? await runSymbol(q, repos, filter)
      : await runSearch(q, repos, filter, $("detail").value);
    for (const it of items) list.append(hitItem(it));
    setStatus(`${items.length} result${items.length === 1 ? "" : "s"}${note ? " — " + note : ""}`);
    const params = new URLSearchParams({ q, kind });
    history.replaceState(null, "", `/?${params}`);
  } catch (e) {
    setStatus(`Error: ${e.message}`, true);
  }
}

start(async () => {
  try {
    repoNames = (await api("/repos")).repos.map((r) => r.name);
    const sel = $("repo");
    sel.replaceChildren(el("option", { value: "" }, "All I may see"), ...repoNames.map((n) => el("option", { value: n }, n)));
  } catch (e) {
    setStatus(`Error: ${e.message}`, true);
  }
  const params = new URLSearchParams(location.search);
  if (params.get("kind")) $("kind").value = params.get("kind");
  if (params.get("q")) { $("q").value = params.get("q"); $("search-form").requestSubmit(); }
});
$("search-form").addEventListener("submit", submit);
