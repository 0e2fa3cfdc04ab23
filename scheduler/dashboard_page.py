"""The dashboard's HTML: one page of plain HTML and vanilla JavaScript, no build step.

It polls ``/api/overview`` (or the open view's endpoint) every two seconds and renders four views
by URL hash: submissions (progress, ETA, a success chart and a table per task x setting; every rate
with its 95% Wilson interval as the server computed it; a robustness table per perturbation axis
where the submission has one), tasks (filterable), one
task (every attempt and its episodes: success, steps, wall time, failure reason, the attempt that
scored it and an inline player for its video artifact), workers (with the simulator stacks each
runs). Above the submissions and the workers, a table names each stack pending tasks need and the
connected workers on it, so tasks no worker can run are seen waiting. A poll that changes nothing
leaves the page alone, so a playing video keeps playing. The success chart is HTML and CSS (no
chart library): per task, its full name (wrapping after underscores, so fifty tasks and
100-character names stay whole) and a bar per setting with the interval as a whisker,
under a first group with the overall rate per setting. ETA is the remaining episodes over the rate seen
between polls, so it needs no server-side history. Operations POST JSON to ``/api/cancel``,
``/api/requeue`` and ``/api/priority`` and show the server's error text (which names the field).
"""

LOGIN_PAGE = """<!doctype html>
<html><head><meta charset="utf-8"><title>evalfleet login</title>
<style>body{font:15px system-ui,sans-serif;margin:4em auto;max-width:24em}.error{color:#b00}
input{font:inherit;padding:.3em;width:100%;box-sizing:border-box;margin:.4em 0}</style></head>
<body><h1>evalfleet scheduler</h1>{message}
<form method="post" action="/login"><label>Token <input type="password" name="token" autofocus></label>
<button type="submit">Sign in</button></form></body></html>
"""

PAGE = r"""<!doctype html>
<html><head><meta charset="utf-8"><title>evalfleet scheduler</title>
<style>
body{font:14px system-ui,sans-serif;margin:0;color:#222;background:#fafafa}
header{background:#243447;color:#fff;padding:.6em 1.2em;display:flex;gap:1.5em;align-items:center}
header a{color:#cde;text-decoration:none}header a.on{color:#fff;font-weight:600}
main{padding:1em 1.2em}h2{margin:.2em 0 .6em}
table{border-collapse:collapse;margin:.4em 0 1.2em;background:#fff}
th,td{border:1px solid #ddd;padding:.25em .6em;text-align:left;vertical-align:top}th{background:#eef2f6}
.bar{width:16em;height:1em;background:#e5e5e5;border-radius:3px;overflow:hidden;display:inline-block;vertical-align:middle}
.bar span{display:block;height:100%;background:#3a7bd5}
.card{background:#fff;border:1px solid #ddd;border-radius:4px;padding:.6em 1em;margin-bottom:1em}
.state-succeeded{color:#1a7f37}.state-failed,.state-lost{color:#b00}.state-cancelled{color:#888}
.state-leased,.state-active,.state-running{color:#3a7bd5}
#message{min-height:1.4em;color:#b00}#message.ok{color:#1a7f37}
table.chart{width:100%;max-width:78em}
table.chart th,table.chart td{border:0;padding:.12em .5em;vertical-align:middle;background:none}
table.chart thead th{font-weight:normal;color:#555;border-bottom:1px solid #ddd}
table.chart tbody{border-top:1px solid #e4e4e4}table.chart tbody.chart-overall{border-bottom:2px solid #999}
table.chart caption{text-align:left;font-weight:600;padding:.3em .5em}
.chart-name{max-width:30em;min-width:8em;overflow-wrap:break-word;font-weight:normal}
.chart-overall .chart-name{font-weight:600}
.chart-setting{color:#444;white-space:nowrap}.chart-value{white-space:nowrap}
.chart-track,.chart-scale{position:relative;width:24em;height:.95em}
.chart-track{background:#ececec repeating-linear-gradient(90deg,transparent 0 calc(25% - 1px),#fff calc(25% - 1px) 25%)}
.chart-fill{position:absolute;left:0;top:0;bottom:0}
.chart-ci{position:absolute;top:10%;height:80%;box-sizing:border-box;border-left:1.5px solid #222;border-right:1.5px solid #222;
background:linear-gradient(#222,#222) center/100% 1.5px no-repeat}
.chart-scale span{position:absolute;transform:translateX(-50%);font-size:85%}
.s0{background:#3a7bd5}.s1{background:#e07b39}.s2{background:#4daf4a}.s3{background:#984ea3}.s4{background:#a65628}.s5{background:#f781bf}
.ci{color:#555}.marks{color:#8a4b00}.unsealed{background:#fff1d6;color:#8a4b00;border-radius:3px;padding:0 .3em}
.canary.broken,.paused{color:#a40000;font-weight:bold}.canary.healthy{color:#1a6e1a}.sequential.decided{font-weight:bold}
button{margin-right:.3em}input,select{font:inherit}
</style></head>
<body>
<header><strong>evalfleet</strong>
<a href="#/" data-view="submissions">Submissions</a><a href="#/tasks" data-view="tasks">Tasks</a>
<a href="#/workers" data-view="workers">Workers</a><span id="updated"></span></header>
<main><div id="message" role="status"></div><div id="view">loading...</div></main>
<script>
"use strict";
const POLL_MS = 2000;
const seen = {};  // submission id -> [{t, completed}] for the rate behind the ETA
let filters = {submission_id: "", route: "", state: "", priority: ""};

const esc = v => String(v ?? "").replace(/[&<>"']/g, c => ({"&":"&amp;","<":"&lt;",">":"&gt;",'"':"&quot;","'":"&#39;"}[c]));
const pct = (a, b) => b ? (100 * a / b).toFixed(1) + "%" : "-";
// The 95% Wilson interval the server sends with a rate (success_rate_low/high), in percent.
const ci = x => x.success_rate_low === null || x.success_rate_low === undefined ? "" :
  ` <small class="ci" title="95% Wilson interval">[${(100 * x.success_rate_low).toFixed(1)}, ${(100 * x.success_rate_high).toFixed(1)}]</small>`;
const when = s => s ? new Date(s * 1000).toLocaleTimeString() : "-";
const duration = s => !isFinite(s) ? "-" : s < 90 ? Math.round(s) + " s" : s < 5400 ? Math.round(s / 60) + " min" : (s / 3600).toFixed(1) + " h";

async function api(path, body) {
  const init = body === undefined ? {} : {method: "POST", headers: {"Content-Type": "application/json"}, body: JSON.stringify(body)};
  const response = await fetch(path, init);
  if (response.status === 401) { location.href = "/login"; throw new Error("sign in first"); }
  const data = await response.json();
  if (!response.ok) throw new Error(data.error || response.statusText);
  return data;
}

function say(text, ok) { const m = document.getElementById("message"); m.textContent = text; m.className = ok ? "ok" : ""; }

async function operate(name, body) {
  try {
    const data = await api("/api/" + name, body);
    say(name + ": changed " + data.changed + " task" + (data.changed === 1 ? "" : "s"), true);
  } catch (error) { say(name + " refused: " + error.message, false); }
  refresh();
}

function eta(sub, now) {
  const history = (seen[sub.submission_id] = seen[sub.submission_id] || []);
  history.push({t: now, completed: sub.episodes_completed});
  while (history.length > 30) history.shift();
  const remaining = sub.episodes_planned - sub.episodes_completed;
  if (remaining === 0) return {rate: 0, text: "done"};
  const first = history[0], last = history[history.length - 1];
  const rate = last.t > first.t ? (last.completed - first.completed) / (last.t - first.t) : 0;
  return {rate, text: rate > 0 ? duration(remaining / rate) : "-"};
}

// Failed or lost attempts of one task x setting, by reason: infrastructure, never in the rate.
function failures(byReason) {
  const entries = Object.entries(byReason || {});
  if (!entries.length) return "";
  const total = entries.reduce((sum, [, n]) => sum + n, 0);
  const reasons = entries.map(([reason, n]) => `${reason} ${n}`).join(", ");
  return ` <small class="failed" title="${esc(reasons)}">${total} failed attempt${total === 1 ? "" : "s"}: ${esc(reasons)}</small>`;
}

function successTable(sub) {
  const settings = [...new Set(sub.manifests.map(m => m.setting))];
  const tasks = [...new Set(sub.manifests.map(m => m.task))];
  const cell = (task, setting) => {
    const m = sub.manifests.find(x => x.task === task && x.setting === setting);
    return m ? `<td>${m.succeeded}/${m.completed} <b>${pct(m.succeeded, m.completed)}</b>${ci(m)}${m.completed < m.planned ? ` <small>(of ${m.planned})</small>` : ""}${failures(m.failed_attempts)}</td>` : "<td>-</td>";
  };
  return `<table class="success"><tr><th>task</th>${settings.map(s => `<th>${esc(s)}</th>`).join("")}</tr>` +
    tasks.map(t => `<tr><td>${esc(t)}</td>${settings.map(s => cell(t, s)).join("")}</tr>`).join("") + "</table>";
}

// The success chart (the server's sub.chart: scheduler/report.py's success_grid with each rate's
// 95% Wilson interval): the overall per setting, then per task a bar per setting. Names break
// after their underscores, so a long one wraps whole instead of being cut.
const wrapName = name => esc(name).replace(/_/g, "_<wbr>");
const percent = x => (100 * x).toFixed(2) + "%";
function chartRows(name, cells, settings, kind) {
  return cells.map((c, j) => {
    const head = j === 0 ? `<th class="chart-task" rowspan="${cells.length}" scope="rowgroup"><div class="chart-name">${wrapName(name)}</div></th>` : "";
    const setting = `<td class="chart-setting">${esc(settings[j])}</td>`;
    if (!c) return `<tr class="chart-none">${head}${setting}<td></td><td class="chart-value"><small>not evaluated</small></td></tr>`;
    const rate = c.success_rate === null ? "-" : (100 * c.success_rate).toFixed(1) + "%";
    const bar = c.success_rate === null ? "" : `<span class="chart-fill s${j % 6}" style="width:${percent(c.success_rate)}"></span>` +
      `<span class="chart-ci" style="left:${percent(c.success_rate_low)};width:${percent(c.success_rate_high - c.success_rate_low)}"></span>`;
    const title = `${name}, ${settings[j]}: ${rate}${c.success_rate === null ? "" : ` [${(100 * c.success_rate_low).toFixed(1)}, ${(100 * c.success_rate_high).toFixed(1)}]`}, ${c.succeeded}/${c.completed}`;
    return `<tr class="${kind}" data-task="${esc(name)}" data-setting="${esc(settings[j])}" title="${esc(title)}">${head}${setting}` +
      `<td><div class="chart-track">${bar}</div></td><td class="chart-value"><b>${rate}</b>${ci(c)} <small class="chart-count">${c.succeeded}/${c.completed}` +
      `${c.completed < c.planned ? ` of ${c.planned}` : ""}</small></td></tr>`;
  }).join("");
}

function successChart(sub) {
  const chart = sub.chart;
  if (!chart || !chart.tasks.length) return "";
  const scale = [0, 25, 50, 75, 100].map(x => `<span style="left:${x}%">${x}${x === 100 ? "%" : ""}</span>`).join("");
  return `<table class="chart"><caption>Success rate per task and setting, with 95% Wilson intervals</caption>` +
    `<thead><tr><th>task</th><th>setting</th><th><div class="chart-scale">${scale}</div></th><th>rate [95% CI] succeeded/completed</th></tr></thead>` +
    `<tbody class="chart-overall">${chartRows("all tasks (overall)", chart.overall, chart.settings, "chart-overall-bar")}</tbody>` +
    chart.tasks.map(t => `<tbody class="chart-group">${chartRows(t.name, t.cells, chart.settings, "chart-bar")}</tbody>`).join("") + "</table>";
}

// How the episodes ran (scheduler/provenance.py): actions per chunk, and "remote, unsealed".
function provenanceView(p) {
  if (!p) return "";
  const steps = p.execute_steps.values.map(v => v.execute_steps).join(", ") || "not recorded";
  const source = p.execute_steps.override === null ? "checkpoint" : "submission override";
  return `<div class="execution">execute_steps ${esc(steps)} <small>(${source})</small></div>` +
    (p.marks.length ? `<ul class="marks">${p.marks.map(m => `<li>${esc(m)}</li>`).join("")}</ul>` : "");
}

// The broken-setup canary's verdict with its evidence (scheduler/canary.py), and a pause.
function canaryView(sub) {
  const c = sub.canary || {};
  let html = "";
  if (c.verdict === "broken") {
    html += `<div class="canary broken">canary: broken setup over ${c.episodes} episodes<ul>` +
      (c.findings || []).map(f => `<li>${esc(f.signature)}: ${esc(f.evidence)}</li>`).join("") + "</ul></div>";
  } else if (c.verdict === "healthy") {
    html += `<div class="canary healthy">canary: healthy over ${c.episodes} episodes</div>`;
  } else if (c.verdict === "running") {
    html += `<div class="canary running">canary: running</div>`;
  }
  if (sub.paused) html += `<div class="paused">PAUSED: pending tasks wait for <code>scheduler resume ${esc(sub.submission_id)}</code></div>`;
  return html;
}

// A sequential evaluation (scheduler/sequential_report.py): its running statistic or verdict and
// stop in words, and why the fixed-N intervals are left out until every episode has a result.
function sequentialView(sub) {
  const s = sub.sequential;
  if (!s) return "";
  const decided = s.verdict && s.verdict !== "complete" && s.verdict !== "final";
  return `<div class="sequential${decided ? " decided" : ""}">${esc(s.line)}` +
    ((sub.sequential_marks || []).slice(1).map(m => `<div class="marks">${esc(m)}</div>`).join("")) + "</div>";
}

// Per perturbation axis (scheduler/robustness.py): the success under it, the drop from the base
// with its 95% interval and test, how the episodes were paired, and the tasks that broke.
function robustnessView(sub) {
  const rows = sub.robustness || [];
  if (!rows.length) return "";
  const rate = c => c.success_rate === null ? "-" : `${(100 * c.success_rate).toFixed(1)}% <small>${c.succeeded}/${c.completed}</small>`;
  const points = v => `${v >= 0 ? "+" : ""}${(100 * v).toFixed(1)}`;
  const drop = r => r.drop === null ? "-" : `${points(r.drop)} pts [${points(r.drop_low)}, ${points(r.drop_high)}] <small>${esc(r.test)} p = ${r.p_value.toPrecision(3)}</small>`;
  return `<table class="robustness"><caption>Robustness per perturbation axis (drop = base minus perturbed, 95% interval)</caption>` +
    "<thead><tr><th>base</th><th>axis</th><th>base success</th><th>perturbed success</th><th>drop</th><th>pairing</th><th>broke</th></tr></thead><tbody>" +
    rows.map(r => `<tr><td>${esc(r.base)}</td><td>${esc(r.axis)}</td><td>${rate(r.base_counts)}</td><td>${rate(r.perturbed_counts)}</td>` +
      `<td>${drop(r)}</td><td>${esc(r.pairing)}${r.paired ? ` <small>(${r.pairs} pairs)</small>` : ""}</td><td>${r.broken_tasks.map(esc).join(", ") || "-"}</td></tr>`).join("") +
    "</tbody></table>";
}

// The evaluation spec a submission came from (scheduler run, submit --spec), canonical form.
function specView(sub) {
  if (!sub.spec_json) return "";
  return `<details class="spec"><summary>spec</summary><pre>${esc(JSON.stringify(JSON.parse(sub.spec_json), null, 2))}</pre></details>`;
}

function submissionsView(data) {
  if (!data.submissions.length) return "<h2>Submissions</h2><p>No submissions yet.</p>";
  return stacksView(data) + "<h2>Submissions</h2>" + data.submissions.map(sub => {
    const e = eta(sub, data.now), t = sub.tasks, id = esc(sub.submission_id);
    return `<div class="card submission" data-submission="${id}">
      <h3>${id} <small>route ${esc(sub.route)}, priority ${sub.priority}${sub.complete ? ", complete" : ""}</small>${sub.provenance && sub.provenance.remote.unsealed ? ' <span class="unsealed">remote, unsealed</span>' : ""}</h3>
      <div><span class="bar"><span style="width:${pct(sub.episodes_completed, sub.episodes_planned).replace("-", "0%")}"></span></span>
      <span class="progress">${sub.episodes_completed}/${sub.episodes_planned} episodes</span>,
      success <span class="success-rate">${pct(sub.episodes_succeeded, sub.episodes_completed)}${ci(sub)}</span>,
      ${e.rate > 0 ? e.rate.toFixed(2) + " episodes/s, " : ""}ETA <span class="eta">${e.text}</span></div>
      <div class="counts">tasks: ${["pending","leased","succeeded","failed","cancelled"].map(s => `<span class="state-${s}">${t[s]} ${s}</span>`).join(", ")}</div>
      ${provenanceView(sub.provenance)}
      ${canaryView(sub)}
      ${sequentialView(sub)}
      ${specView(sub)}
      ${successChart(sub)}
      ${robustnessView(sub)}
      ${successTable(sub)}
      <button data-op="cancel">Cancel</button><button data-op="requeue">Requeue failed/cancelled</button>
      <label>priority <input class="priority" type="number" value="${sub.priority}" style="width:6em"></label><button data-op="priority">Set</button>
      <a href="#/tasks" data-filter="${id}">tasks</a></div>`;
  }).join("");
}

function tasksView(data) {
  const options = (name, values) => `<select name="${name}"><option value="">any ${name.replace("_id", "")}</option>` +
    values.map(v => `<option${String(filters[name]) === String(v) ? " selected" : ""}>${esc(v)}</option>`).join("") + "</select>";
  const rows = data.tasks.map(t => `<tr class="task" data-task="${esc(t.task_id)}"><td><a href="#/task/${encodeURIComponent(t.task_id)}">${esc(t.task_id)}</a></td>
    <td class="state-${t.state}">${t.state}</td><td>${esc(t.route)}</td><td>${t.priority}</td><td>${t.episode_start}-${t.episode_end - 1}</td>
    <td>${t.episodes_done}</td><td>${t.attempts}/${t.max_attempts}</td><td>${esc(t.worker_id)}</td><td>${esc(t.last_error)}</td></tr>`).join("");
  return `<h2>Tasks${data.truncated ? " (truncated)" : ""}</h2><form id="filters">
    ${options("submission_id", data.submissionIds)} ${options("route", data.routes)}
    ${options("state", ["pending","leased","succeeded","failed","cancelled"])}
    <input name="priority" type="number" placeholder="priority" value="${esc(filters.priority)}" style="width:7em"></form>
    <table><tr><th>task</th><th>state</th><th>route</th><th>prio</th><th>episodes</th><th>done</th><th>attempt</th><th>worker</th><th>last error</th></tr>${rows}</table>`;
}

function taskView(data) {
  const t = data.task;
  const attempts = data.attempts.map(a => `<tr class="attempt"><td>${a.attempt}</td><td>${a.fencing_token}</td><td>${esc(a.worker_id)}</td>
    <td>${when(a.started_at)}</td><td>${when(a.ended_at)}</td><td class="state-${a.outcome}">${a.outcome}</td><td class="reason">${esc(a.failure_reason)}</td><td>${esc(a.error)}</td></tr>`).join("");
  // Each stored episode with the attempt that scored it, why it failed and its video (the
  // worker's --video), played from the artifact route with byte ranges.
  const attemptOf = Object.fromEntries(data.attempts.map(a => [a.fencing_token, a]));
  const reason = e => {
    if (e.result.success) return "";
    let info = {};
    try { info = JSON.parse(e.result.info_json || "{}"); } catch (error) { info = {}; }
    return info.failure_reason || "task not solved in " + e.result.steps + " steps";
  };
  const video = e => (e.artifacts || []).filter(a => a.kind === "video").map(a =>
    `<video controls muted preload="metadata" width="320" src="/api/artifacts/${esc(a.sha256)}"></video>`).join("");
  const episodes = data.episodes.map(e => `<tr class="episode" data-episode="${e.result.episode_index}"><td>${e.result.episode_index}</td>
    <td class="${e.result.success ? "state-succeeded" : "state-failed"}">${e.result.success ? "yes" : "no"}</td>
    <td>${e.result.steps}</td><td>${e.result.wall_seconds.toFixed(2)}</td><td class="reason">${esc(reason(e))}</td>
    <td>${(attemptOf[e.fencing_token] || {}).attempt ?? "-"}</td><td>${esc(e.worker_id)}</td><td class="video">${video(e)}</td></tr>`).join("");
  return `<h2>Task ${esc(t.task_id)} <span class="state-${t.state}">${t.state}</span></h2>
    <p>submission ${esc(t.submission_id)}, route ${esc(t.route)}, priority ${t.priority}, episodes ${t.episode_start}-${t.episode_end - 1}
    (${t.episodes_done} stored), attempts ${t.attempts}/${t.max_attempts}</p>
    <button data-op="cancel" data-task="${esc(t.task_id)}">Cancel</button><button data-op="requeue" data-task="${esc(t.task_id)}">Requeue</button>
    <h3>Attempts</h3><table id="attempts"><tr><th>attempt</th><th>token</th><th>worker</th><th>started</th><th>ended</th><th>outcome</th><th>reason</th><th>error</th></tr>${attempts}</table>
    <h3>Episodes</h3><table id="episodes"><tr><th>episode</th><th>success</th><th>steps</th><th>wall s</th><th>failure reason</th><th>attempt</th><th>worker</th><th>video</th></tr>${episodes}</table>`;
}

// The simulator stacks pending tasks need, and the connected workers on each (none: those tasks wait).
function stacksView(data) {
  if (!data.stacks.length) return "";
  const rows = data.stacks.map(d => `<tr class="stack"><td>${esc(d.stack)}</td><td>${d.pending_tasks}</td>
    <td class="${d.workers.length ? "" : "state-failed"}">${d.workers.length ? esc(d.workers.join(", ")) : "no connected worker: these tasks wait"}</td></tr>`).join("");
  return `<h2>Simulator stacks pending tasks need</h2><table id="stacks"><tr><th>stack</th><th>pending tasks</th><th>connected workers on it</th></tr>${rows}</table>`;
}

function workersView(data) {
  const rows = data.workers.map(w => `<tr class="worker"><td>${esc(w.worker_id)}</td><td class="state-${w.state}">${w.state}</td>
    <td>${esc(w.current_task)}</td><td>${esc(w.gpu_uuid)}</td><td>${esc(w.host)}</td><td>${esc(w.routes.join(", "))}</td><td>${esc(w.stacks.join(", "))}</td><td>${when(w.last_seen)}</td></tr>`).join("");
  return `<h2>Workers</h2><table><tr><th>worker</th><th>state</th><th>current task</th><th>GPU</th><th>host</th><th>routes</th><th>stacks</th><th>last seen</th></tr>${rows}</table>` + stacksView(data);
}

async function refresh() {
  const hash = location.hash || "#/";
  const view = hash.startsWith("#/task/") ? "task" : hash === "#/tasks" ? "tasks" : hash === "#/workers" ? "workers" : "submissions";
  document.querySelectorAll("header a").forEach(a => a.classList.toggle("on", a.dataset.view === view || (view === "task" && a.dataset.view === "tasks")));
  const active = document.activeElement;
  if (active && active.matches("#view input, #view select")) return;  // do not redraw under the user's typing
  try {
    let html;
    if (view === "task") {
      html = taskView(await api("/api/task?task_id=" + encodeURIComponent(decodeURIComponent(hash.slice(7)))));
    } else if (view === "tasks") {
      const overview = await api("/api/overview");
      const query = new URLSearchParams(Object.entries(filters).filter(([, v]) => v !== ""));
      const data = await api("/api/tasks?" + query);
      data.submissionIds = overview.submissions.map(s => s.submission_id);
      data.routes = [...new Set(overview.submissions.map(s => s.route))];
      html = tasksView(data);
    } else {
      const data = await api("/api/overview");
      html = view === "workers" ? workersView(data) : submissionsView(data);
    }
    const target = document.getElementById("view");
    if (html !== target.dataset.html) {  // unchanged: keep the page (a playing video) as it is
      target.innerHTML = html;
      target.dataset.html = html;
    }
    document.getElementById("updated").textContent = "updated " + new Date().toLocaleTimeString();
  } catch (error) { say(error.message, false); }
}

document.addEventListener("click", event => {
  const button = event.target.closest("button[data-op]");
  const link = event.target.closest("a[data-filter]");
  if (link) filters = {...filters, submission_id: link.dataset.filter};
  if (!button) return;
  const card = button.closest(".submission");
  const selector = button.dataset.task ? {task_ids: [button.dataset.task]} : {submission_id: card.dataset.submission};
  if (button.dataset.op === "requeue" && !button.dataset.task) selector.states = ["failed", "cancelled"];
  if (button.dataset.op === "priority") {
    const value = card.querySelector("input.priority").value;
    operate("priority", {...selector, priority: value === "" ? null : Number(value)});
  } else operate(button.dataset.op, selector);
});
document.addEventListener("change", event => {
  if (!event.target.closest("#filters")) return;
  filters = {...filters, [event.target.name]: event.target.value};
  event.target.blur();
  refresh();
});
window.addEventListener("hashchange", refresh);
refresh();
setInterval(refresh, POLL_MS);
</script></body></html>
"""
