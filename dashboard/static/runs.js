// The runs list: GET /api/runs with the form's filters, kept in the URL,
// refreshed every 5 s; the Tune searches (GET /api/tunes) below it.
"use strict";

window.tempotrain = { runs: null, tunes: null, loads: 0 };
const form = document.getElementById("filters");
const params = new URLSearchParams(location.search);
for (const [k, v] of params) if (form.elements[k]) form.elements[k].value = v;

form.addEventListener("submit", (ev) => {
  ev.preventDefault();
  const q = new URLSearchParams();
  for (const name of ["func", "status", "query", "limit"]) {
    const v = form.elements[name].value.trim();
    if (v && !(name === "limit" && v === "200")) q.set(name, v);
  }
  history.replaceState(null, "", q.toString() ? "?" + q : location.pathname);
  load();
});

// searchOf is the workflow ID of a trial's search: its own less
// "-<trial>" (a trial's ID is "<search's>-<trial>").
function searchOf(r) {
  const tail = "-" + r.name;
  return r.name !== r.workflow_id && r.workflow_id.endsWith(tail) ? r.workflow_id.slice(0, -tail.length) : "tune-" + r.tune;
}

async function load() {
  const q = new URLSearchParams(location.search);
  const err = document.getElementById("error");
  let page;
  try {
    page = await getJSON("/api/runs?" + q);
    err.textContent = "";
  } catch (e) {
    err.textContent = "runs: " + e.message;
    return;
  }
  const body = document.querySelector("#runs tbody");
  const rows = page.runs.map((r) => el("tr", { "data-workflow-id": r.workflow_id },
    el("td", {}, el("a", { href: "/runs/" + encodeURIComponent(r.workflow_id) }, r.name),
      r.tune ? [" ", el("a", { class: "muted", href: "/tunes/" + encodeURIComponent(searchOf(r)), title: "its search" }, "(search " + r.tune + ")")] : null),
    el("td", {}, r.func || "-"),
    el("td", {}, statusBadge(r.status)),
    el("td", { class: "num" }, fmtNum(r.attempt)),
    el("td", { class: "num" }, fmtNum(r.world_size)),
    el("td", { class: "num" }, fmtNum(r.best_score)),
    el("td", {}, fmtTime(r.start)),
    el("td", { class: "num" }, fmtDuration(r.duration_s)),
    el("td", {}, page.web_ui_workflows
      ? el("a", { href: `${page.web_ui_workflows}/${encodeURIComponent(r.workflow_id)}/${encodeURIComponent(r.run_id)}/history`, title: "in the Temporal Web UI" }, r.workflow_id)
      : r.workflow_id),
  ));
  body.replaceChildren(...rows);
  const funcs = [...new Set(page.runs.map((r) => r.func).filter(Boolean))].sort();
  document.getElementById("funcs").replaceChildren(...funcs.map((f) => el("option", { value: f })));
  document.getElementById("count").textContent = page.runs.length + " runs";
  const ui = document.getElementById("webui");
  if (page.web_ui) { ui.href = page.web_ui; ui.hidden = false; }
  window.tempotrain.runs = page.runs;
  await loadTunes(page.web_ui_workflows);
  window.tempotrain.loads++;
}

async function loadTunes(webUI) {
  let page;
  try {
    page = await getJSON("/api/tunes?limit=50");
  } catch (e) {
    document.getElementById("error").textContent = "searches: " + e.message;
    return;
  }
  document.querySelector("#tunes tbody").replaceChildren(...page.tunes.map((r) => el("tr", { "data-workflow-id": r.workflow_id },
    el("td", {}, el("a", { href: "/tunes/" + encodeURIComponent(r.workflow_id) }, r.tune || r.workflow_id)),
    el("td", {}, statusBadge(r.status)),
    el("td", {}, fmtTime(r.start)),
    el("td", { class: "num" }, fmtDuration(r.duration_s)),
    el("td", {}, webUI
      ? el("a", { href: `${webUI}/${encodeURIComponent(r.workflow_id)}/${encodeURIComponent(r.run_id)}/history`, title: "in the Temporal Web UI" }, r.workflow_id)
      : r.workflow_id),
  )));
  document.getElementById("tune-count").textContent = page.tunes.length + " searches";
  document.getElementById("searches").hidden = page.tunes.length === 0;
  window.tempotrain.tunes = page.tunes;
}

load();
setInterval(() => { if (!document.hidden) load(); }, 5000);
