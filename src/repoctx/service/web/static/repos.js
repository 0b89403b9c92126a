// Repositories: what the key sees of each (source, indexed commit, lag, job), a reindex button for admins.
import { api, el, setStatus, start } from "./app.js";

const $ = (id) => document.getElementById(id);
let me = null;
let timer = null;
let note = ""; // the last action's outcome, kept beside the summary until Refresh

function ago(seconds) {
  if (seconds === null || seconds === undefined) return "";
  const s = Math.round(seconds);
  if (s < 90) return `${s} s`;
  if (s < 5400) return `${Math.round(s / 60)} min`;
  if (s < 172800) return `${Math.round(s / 3600)} h`;
  return `${Math.round(s / 86400)} days`;
}

function source(st) {
  const s = st.source || {};
  if (s.kind === "git") return [s.url || "git", s.branch ? ` @ ${s.branch}` : ""].join("");
  return s.path ? `path ${s.path}` : (s.kind || "path");
}

function commit(st) {
  const c = (st.commits && st.commits.indexed) || (st.freshness && st.freshness.git_head) || "";
  return c ? el("code", { title: c }, c.slice(0, 10)) : "—";
}

function lag(st) {
  const l = st.commits && st.commits.lag;
  if (l && (l.commits || l.behind)) return `${l.commits ?? "?"} commits behind${l.seconds ? ", " + ago(l.seconds) : ""}`;
  if (l) return "up to date";
  const age = st.freshness && st.freshness.age_seconds;
  return age !== null && age !== undefined ? `indexed ${ago(age)} ago` : "not indexed";
}

function progress(job) {
  if (!job || !job.progress) return me && me.admin ? "—" : "";
  const p = job.progress;
  if (typeof p !== "object") return String(p);
  const stage = p.stage || p.phase || "";
  const done = p.done ?? p.files_done ?? p.current;
  const total = p.total ?? p.files_total;
  if (done !== undefined && total) {
    return el("span", {}, `${stage} ${done}/${total} `,
      el("progress", { max: String(total), value: String(done), "aria-label": `${stage || "progress"} ${done} of ${total}` }));
  }
  const show = (v) => typeof v === "number" && !Number.isInteger(v) ? v.toFixed(2) : typeof v === "object" ? JSON.stringify(v) : v;
  return Object.entries(p).slice(0, 4).map(([k, v]) => `${k} ${show(v)}`).join(", ");
}

async function reindex(st, button) {
  const s = st.source || {};
  const body = s.kind === "git" ? { name: st.name, url: s.url, branch: s.branch, ...(s.credential ? { credential: s.credential } : {}) }
    : { name: st.name, path: s.path || st.root };
  button.disabled = true;
  try {
    const r = await api("/repos", { method: "POST", body });
    note = `${st.name}: reindex ${r.status} (job ${r.job && r.job.id})`;
    setStatus(note);
  } catch (e) {
    note = "";
    setStatus(`${st.name}: ${e.message}`, true);
  }
  await load();
}

async function load() {
  clearTimeout(timer);
  try {
    const { repos } = await api("/repos");
    const states = await Promise.all(repos.map((r) => api(`/repos/${encodeURIComponent(r.name)}`)));
    const rows = states.map((st) => {
      const job = st.job;
      const canReindex = me && me.admin && ((st.source && (st.source.path || st.source.url)) || st.root);
      const action = canReindex ? el("button", { type: "button", class: "reindex", "aria-label": `Reindex ${st.name}`,
        onclick: (ev) => reindex(st, ev.currentTarget) }, "Reindex") : "";
      return el("tr", { "data-repo": st.name },
        el("th", { scope: "row" }, st.name),
        el("td", { class: "source" }, source(st)),
        el("td", {}, commit(st)),
        el("td", {}, lag(st)),
        el("td", {}, job ? el("span", { class: `job ${job.status}` }, job.status, job.error ? ` (${job.error})` : "") : "—"),
        el("td", {}, progress(job)),
        el("td", {}, action));
    });
    $("repos").tBodies[0].replaceChildren(...rows);
    if (!rows.length) $("repos").tBodies[0].append(el("tr", {}, el("td", { colspan: "7" }, "No repository is visible to this key.")));
    const busy = states.some((st) => st.job && ["queued", "running", "cancelling"].includes(st.job.status));
    if (busy) timer = setTimeout(load, 1500);
    const summary = `${rows.length} repositor${rows.length === 1 ? "y" : "ies"}${busy ? ", indexing…" : ""}`;
    if (!$("status").classList.contains("error")) setStatus(note ? `${summary} · ${note}` : summary);
  } catch (e) {
    setStatus(`Error: ${e.message}`, true);
  }
}

start(async (who) => { me = who; await load(); });
$("refresh").addEventListener("click", () => { note = ""; setStatus(""); load(); });
