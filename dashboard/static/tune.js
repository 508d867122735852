// A search's page: GET /api/tunes/{id} every 2 s while the search runs;
// every trial's curve of the search's metric on one uPlot chart (x: the
// trials' epochs), and the trials' table, best first.
//
// window.tempotrain exposes what the page drew, for tests and for the
// console: chart (the uPlot instance), tune (the API's last answer),
// series (per series of the chart: its trial, status, and whether it is
// the best), polls.
"use strict";

const tuneID = decodeURIComponent(location.pathname.replace(/^\/tunes\//, ""));
const T = window.tempotrain = { chart: null, tune: null, series: [], polls: 0 };
const colors = ["#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b", "#17becf", "#e377c2", "#bcbd22", "#7f7f7f", "#aec7e8"];

// align puts the trials' curves on one x axis (the union of their
// epochs), null where a trial has no report.
function align(curves) {
  const xs = [...new Set(curves.flatMap((c) => c.x))].sort((a, b) => a - b);
  const pos = new Map(xs.map((x, i) => [x, i]));
  return [xs, ...curves.map((c) => {
    const y = new Array(xs.length).fill(null);
    c.x.forEach((x, k) => { y[pos.get(x)] = c.value[k]; });
    return y;
  })];
}

function drawChart(v) {
  const res = v.result;
  const best = res.best && res.best.name;
  const curves = v.curves.filter((c) => c.x.length > 0);
  const series = curves.map((c, i) => ({
    label: c.trial + (c.trial === best ? " ★" : ""),
    stroke: colors[v.curves.indexOf(c) % colors.length],
    width: c.trial === best ? 3.5 : 1.5,
    dash: c.status === "stopped" ? [8, 4] : c.status === "failed" ? [2, 4] : undefined,
    spanGaps: true,
    points: { show: true, size: c.trial === best ? 7 : 4 },
  }));
  const key = JSON.stringify(series.map((s) => [s.label, s.dash, s.width]));
  const data = align(curves);
  T.series = curves.map((c) => ({ trial: c.trial, status: c.status, best: c.trial === best, points: c.x.length }));
  if (T.chart && T.chart.key === key) {
    T.chart.setData(data);
    return;
  }
  if (T.chart) T.chart.destroy();
  const box = document.getElementById("chart");
  box.replaceChildren();
  T.chart = new uPlot({
    width: Math.max(640, box.parentElement.clientWidth - 4), height: 360,
    scales: { x: { time: false } },
    axes: [{ label: "epoch" }, { label: res.metric }],
    series: [{ label: "epoch" }, ...series],
    legend: { live: true },
  }, data, box);
  T.chart.key = key;
}

function drawTable(v) {
  const res = v.result;
  document.getElementById("metric-col").textContent = `${res.metric} (${res.mode})`;
  document.getElementById("count").textContent = `${res.trials.length} trials`;
  const best = res.best && res.best.name;
  document.querySelector("#trials tbody").replaceChildren(...res.trials.map((t) => el("tr", { class: t.name === best ? "best" : "", "data-trial": t.name },
    el("td", {}, el("a", { href: "/runs/" + encodeURIComponent(t.workflow_id), title: "the trial's run page" }, t.name), t.name === best ? " ★ best" : ""),
    el("td", {}, statusBadge(t.status)),
    el("td", { class: "num" }, fmtNum(t.metric)),
    el("td", { class: "num" }, t.metric === undefined ? "-" : fmtNum(t.best_epoch || 0)),
    el("td", { class: "num" }, fmtNum(t.epochs)),
    el("td", { class: "num" }, t.iterations),
    el("td", { class: "muted" }, Object.entries(t.params || {}).sort().map(([k, x]) => `${k}=${JSON.stringify(x)}`).join("  ")),
    el("td", { class: "wrap" + (t.error ? " error" : "") }, t.error || t.stop_reason || ""),
    el("td", {}, v.web_ui_workflows ? el("a", { href: `${v.web_ui_workflows}/${encodeURIComponent(t.workflow_id)}`, title: "in the Temporal Web UI" }, t.workflow_id) : t.workflow_id),
  )));
}

function drawSummary(v) {
  const res = v.result;
  document.title = `${res.name} · tempotrain search`;
  document.getElementById("title").textContent = `search ${res.name}`;
  document.getElementById("curves-title").textContent = `${res.metric} (${res.mode}) of every trial`;
  const status = res.done ? (res.error ? "failed" : "completed") : v.workflow_status;
  document.getElementById("status").replaceChildren(statusBadge(status));
  const ui = document.getElementById("webui");
  if (v.web_ui) { ui.href = v.web_ui; ui.hidden = false; }
  const end = v.close ? Date.parse(v.close) : Date.parse(v.now);
  const count = (s) => res.trials.filter((t) => t.status === s).length;
  const kv = [
    ["metric", `${res.metric} (${res.mode})`],
    ["workflow", `${v.workflow_id} (${v.workflow_status})`],
    ["trials", `${res.trials.length}: ${count("completed")} completed, ${count("stopped")} stopped, ${count("running")} running, ${count("pending")} pending, ${count("failed")} failed`],
    ["best", res.best ? `${res.best.name}: ${res.metric} ${fmtNum(res.best.metric)} at epoch ${fmtNum(res.best.best_epoch || 0)}` : "-"],
    ["best.json", res.best_file || "-"],
    ["seed", res.seed],
    ["started", fmtTime(v.start)],
    ["duration", fmtDuration((end - Date.parse(v.start)) / 1000)],
  ];
  if (res.error) kv.push(["error", res.error]);
  document.getElementById("summary").replaceChildren(...kv.flatMap(([k, x]) => [el("div", {}, k), el("div", {}, x)]));
}

async function poll() {
  const err = document.getElementById("error");
  let running = true;
  try {
    const v = await getJSON(`/api/tunes/${encodeURIComponent(tuneID)}`);
    T.tune = v;
    drawSummary(v);
    drawChart(v);
    drawTable(v);
    running = v.workflow_status === "running";
    err.textContent = "";
    T.polls++;
    document.getElementById("updated").textContent = "updated " + new Date().toLocaleTimeString(undefined, { hour12: false }) + (running ? " · live" : "");
  } catch (e) {
    err.textContent = e.message;
  }
  setTimeout(poll, running ? 2000 : 15000);
}
poll();
