// Chat: one copilot turn streamed from POST /chat (server-sent events read from fetch), the trace beside it.
import { api, ApiError, el, fileHref, getKey, start } from "./app.js";

const $ = (id) => document.getElementById(id);
const CLIENT_TIMEOUT_MS = 180000;  // the server ends a turn at REPOCTX_STREAM_TIMEOUT; this only guards the tab

function newSessionId() {
  return `web-${new Date().toISOString().slice(0, 19).replace(/[-:T]/g, "")}-${Math.random().toString(36).slice(2, 6)}`;
}

function setSession(id) {
  $("session").value = id;
  $("session-label").textContent = `(${id})`;
  sessionStorage.setItem("repoctx.session", id);
}

function message(role, text) {
  const body = el("div", { class: "body" }, text || "");
  const node = el("article", { class: `msg ${role}`, "aria-label": role === "user" ? "You" : "Copilot" },
    el("h3", { class: "who" }, role === "user" ? "You" : "Copilot"), body);
  $("log").append(node);
  return { node, body };
}

function errorMessage(text) {
  const node = el("p", { class: "msg error", role: "alert" }, text);
  $("log").append(node);
  return node;
}

function trace(kind, text, detail) {
  const li = el("li", { class: `ev ${kind}` }, el("span", { class: "kind" }, kind), " ", text,
    detail ? el("code", { class: "detail" }, detail) : null);
  $("trace").append(li);
}

function size(n) { return n < 1024 ? `${n} B` : `${(n / 1024).toFixed(1)} KiB`; }

/** Server-sent events from a fetch body: yields [event, data] as frames arrive. */
async function* sse(res) {
  const reader = res.body.getReader();
  const dec = new TextDecoder();
  let buf = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buf += dec.decode(value, { stream: true });
    let cut;
    while ((cut = buf.search(/\r?\n\r?\n/)) >= 0) {
      const frame = buf.slice(0, cut);
      buf = buf.slice(cut).replace(/^\r?\n\r?\n/, "");
      let event = "message";
      const data = [];
      for (const line of frame.split(/\r?\n/)) {
        if (line.startsWith("event:")) event = line.slice(6).trim();
        else if (line.startsWith("data:")) data.push(line.slice(5).replace(/^ /, ""));
      }
      if (data.length) yield [event, JSON.parse(data.join("\n"))];
    }
  }
}

async function send(ev) {
  ev.preventDefault();
  const text = $("msg").value.trim();
  const session = $("session").value.trim();
  if (!text || !session) return;
  $("msg").value = "";
  $("send").disabled = true;
  message("user", text);
  const answer = message("assistant", "");
  answer.node.classList.add("streaming");
  answer.node.setAttribute("aria-busy", "true");
  const cites = el("ul", { class: "citations", "aria-label": "Citations" });
  answer.node.append(cites);
  $("trace").replaceChildren();
  trace("turn", `session ${session}`);
  const ctl = new AbortController();
  const timer = setTimeout(() => ctl.abort(), CLIENT_TIMEOUT_MS);
  let tokens = 0;
  let failed = false;
  const seen = new Set();
  try {
    const res = await fetch("/chat", {
      method: "POST", signal: ctl.signal,
      headers: { Authorization: `Bearer ${getKey() || ""}`, "Content-Type": "application/json", Accept: "text/event-stream" },
      body: JSON.stringify({ session_id: session, message: text }),
    });
    if (!res.ok) {
      let body = null;
      try { body = await res.json(); } catch { /* not JSON */ }
      throw new ApiError(res.status, body);
    }
    for await (const [event, data] of sse(res)) {
      if (event === "token") {
        tokens += 1;
        answer.body.append(document.createTextNode(data.text));
        answer.node.dataset.tokens = String(tokens);
      } else if (event === "tool") {
        const input = JSON.stringify(data.input || {});
        trace("tool", data.name, `${input.length > 160 ? input.slice(0, 160) + "…" : input} (${size(input.length)})`);
      } else if (event === "trace") {
        const rest = Object.entries(data).filter(([k]) => !["step", "name", "status", "id"].includes(k));
        trace(data.step || "trace", `${data.name || ""} ${data.status || ""}`.trim(),
          rest.length ? rest.map(([k, v]) => `${k}=${typeof v === "object" ? JSON.stringify(v) : v}`).join(" ") : null);
      } else if (event === "citation") {
        if (seen.has(data.citation)) continue;
        seen.add(data.citation);
        cites.append(el("li", {}, el("a", { class: "cite-link", href: fileHref(data) }, data.citation),
          data.verified ? null : el("span", { class: "muted" }, " (not returned by a tool)")));
        trace("citation", data.citation);
      } else if (event === "error") {
        failed = true;
        errorMessage(`Error: ${data.error}${data.detail ? " — " + data.detail : ""}`);
        trace("error", data.error, data.detail);
      } else if (event === "done") {
        const m = data.metrics || {};
        trace("done", data.stop_reason || "", m.model_calls !== undefined
          ? `model calls ${m.model_calls}, tool calls ${m.tool_calls}, ${m.seconds !== undefined ? m.seconds + " s" : ""}` : null);
        if (!failed && data.error && data.error.error) errorMessage(`Error: ${data.error.error} — ${data.error.detail || ""}`);
        if (!tokens && data.text) answer.body.textContent = data.text;
      }
    }
  } catch (e) {
    if (e.name === "AbortError") errorMessage("Error: no answer in time; the turn was abandoned.");
    else errorMessage(`Error: ${e.message}`);
    trace("error", e.name === "AbortError" ? "Timeout" : (e.code || e.name), e.message);
  } finally {
    clearTimeout(timer);
    answer.node.classList.remove("streaming");
    answer.node.removeAttribute("aria-busy");
    answer.node.dataset.done = "true";
    if (!answer.body.textContent && !cites.children.length) answer.node.remove();
    $("send").disabled = false;
    $("msg").focus();
    loadSessions();
  }
}

async function openSession(id) {
  try {
    const data = await api(`/sessions/${encodeURIComponent(id)}`);
    $("log").replaceChildren();
    $("trace").replaceChildren();
    setSession(id);
    for (const m of data.messages) message(m.role === "user" ? "user" : "assistant", m.text);
    $("msg").focus();
  } catch (e) {
    errorMessage(`Error: ${e.message}`);
  }
}

async function loadSessions() {
  try {
    const data = await api("/sessions");
    $("sessions").replaceChildren(...data.sessions.map((s) => el("li", {},
      el("button", { type: "button", class: "link", onclick: () => openSession(s.id) }, s.id),
      el("span", { class: "muted" }, ` ${s.messages} messages · ${String(s.updated).slice(0, 16).replace("T", " ")}`))));
    if (!data.sessions.length) $("sessions").append(el("li", { class: "muted" }, "No sessions yet."));
  } catch (e) {
    $("sessions").replaceChildren(el("li", { class: "muted" }, `Sessions unavailable: ${e.message}`));
  }
}

start(async () => {
  setSession(sessionStorage.getItem("repoctx.session") || newSessionId());
  await loadSessions();
});
$("chat-form").addEventListener("submit", send);
$("msg").addEventListener("keydown", (ev) => {
  if (ev.key === "Enter" && (ev.ctrlKey || ev.metaKey)) $("chat-form").requestSubmit();
});
$("new-session").addEventListener("click", () => {
  setSession(newSessionId());
  $("log").replaceChildren();
  $("trace").replaceChildren();
  $("msg").focus();
});
