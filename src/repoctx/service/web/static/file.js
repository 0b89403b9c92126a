// A file at lines: /file under the tab's key, the cited lines marked and scrolled into view.
import { api, el, fileHref, setStatus, start } from "./app.js";

const $ = (id) => document.getElementById(id);
const CONTEXT = 15;

start(async () => {
  const q = new URLSearchParams(location.search);
  const path = q.get("path");
  if (!path) { setStatus("No file named.", true); return; }
  const repo = q.get("repo") || "";
  const s = Math.max(1, parseInt(q.get("start") || "1", 10) || 1);
  const e = Math.max(s, parseInt(q.get("end") || String(s), 10) || s);
  const from = Math.max(1, s - CONTEXT);
  const params = new URLSearchParams({ path, start: String(from), end: String(e + CONTEXT), mark: `${s}-${e}` });
  if (repo) params.set("repo", repo);
  try {
    const data = await api(`/file?${params}`);
    $("where").replaceChildren(el("code", {}, `${data.repo}:${data.path}:${s}-${e}`),
      ` — lines ${data.start}-${data.end} of ${data.total_lines}`);
    const code = $("code");
    code.innerHTML = data.html;  // Pygments output from the server (escaped there)
    code.setAttribute("aria-label", `${data.path}, lines ${data.start} to ${data.end}`);
    document.title = `${data.path}:${s}-${e} · repoctx`;
    const nav = (id, show, a, b) => {
      const btn = $(id);
      btn.hidden = !show;
      btn.onclick = () => { location.href = fileHref({ repo: data.repo, path: data.path, start: a, end: b }); };
    };
    nav("more-before", data.start > 1, Math.max(1, s - 60), Math.max(1, s - 60) + (e - s));
    nav("more-after", data.end < data.total_lines, e + 1, Math.min(data.total_lines, e + 1 + (e - s)));
    $("symbols").replaceChildren(...(data.symbols || []).map((c) => el("li", {}, el("code", {}, c))));
    setStatus(data.note || "");
    const first = code.querySelector(".line.hit");
    if (first) first.scrollIntoView({ block: "center" });
  } catch (err) {
    setStatus(`Error: ${err.message}`, true);
  }
});
