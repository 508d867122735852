// A run's page: GET /api/runs/{id} and /api/runs/{id}/metrics every 2 s
// while the run runs; every metric's curve with uPlot (train and valid
// variants of a metric on one chart), restarts marked with their reason.
//
// window.tempotrain exposes what the page drew, for tests and for the
// console: charts (uPlot instances by chart name), metrics and run (the
// last answers of the API), marks (the restart marks each chart drew).
"use strict";

const runID = decodeURIComponent(location.pathname.replace(/^\/runs\//, ""));
const T = window.tempotrain = { charts: {}, metrics: null, run: null, polls: 0, marks: {}, throughput: { t: [], ranks: {} }, zoom: null };
const colors = ["#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b", "#17becf", "#e377c2", "#bcbd22"];
const restartColor = "#d62728";

// groupOf names a metric's chart: its name without a train/valid/test
// prefix or suffix, so that train_loss and valid_loss share "loss".
function groupOf(name) {
  return name.replace(/^(train|training|valid|validation|val|eval|test)[_/.-]/i, "")
    .replace(/[_/.-](train|training|valid|validation|val|eval|test)$/i, "") || name;
}

// align puts series of (index, value) on one x axis: the union of their
// indexes, null where a series has no report.
function align(series) {
  const xs = [...new Set(series.flatMap((s) => s.index))].sort((a, b) => a - b);
  const pos = new Map(xs.map((x, i) => [x, i]));
  const ys = series.map((s) => {
    const y = new Array(xs.length).fill(null);
    s.index.forEach((x, k) => { y[pos.get(x)] = s.value[k]; });
    return y;
  });
  return [xs, ...ys];
}

// restartMarks draws every restart of the run as a dashed red line just
// before the attempt's first report, labelled with the attempt; the
// reasons are listed above the charts.
function restartMarks(name) {
  return {
    hooks: {
      draw: [(u) => {
        const marks = [];
        const restarts = (T.metrics && T.metrics.restarts) || [];
        const { ctx, bbox } = u;
        ctx.save();
        ctx.strokeStyle = restartColor;
        ctx.fillStyle = restartColor;
        ctx.lineWidth = 1.5 * devicePixelRatio;
        ctx.setLineDash([5 * devicePixelRatio, 3 * devicePixelRatio]);
        ctx.font = `${11 * devicePixelRatio}px system-ui, sans-serif`;
        for (const r of restarts) {
          const x = u.valToPos(r.index - 0.5, "x", true);
          if (!(x >= bbox.left && x <= bbox.left + bbox.width)) continue;
          ctx.beginPath();
          ctx.moveTo(x, bbox.top);
          ctx.lineTo(x, bbox.top + bbox.height);
          ctx.stroke();
          ctx.fillText(`↻ attempt ${r.attempt} (${r.kind})`, x + 4 * devicePixelRatio, bbox.top + 12 * devicePixelRatio);
          marks.push({ attempt: r.attempt, index: r.index, kind: r.kind, x: x / devicePixelRatio });
        }
        ctx.restore();
        T.marks[name] = marks;
      }],
    },
  };
}

// chart draws (or redraws with new data) the chart name of series.
function chart(name, series, opts = {}) {
  const box = document.querySelector(`.chart[data-chart="${CSS.escape(name)}"]`) || (() => {
    const c = el("div", { class: "chart", "data-chart": name }, el("h3", {}, opts.title || name));
    document.getElementById(opts.container || "charts").append(c);
    return c;
  })();
  const labels = series.map((s) => s.name);
  const data = opts.data || align(series);
  let u = T.charts[name];
  if (u && JSON.stringify(u.series.slice(1).map((s) => s.label)) !== JSON.stringify(labels)) {
    u.destroy();
    u = null;
  }
  if (u) {
    u.setData(data, !(opts.time && u.zoomed));
    return;
  }
  const width = Math.max(480, box.clientWidth - 4);
  u = new uPlot({
    width, height: 260,
    scales: { x: { time: !!opts.time } },
    axes: [{ label: opts.xLabel || "report" }, {}],
    cursor: { drag: { x: true, y: false } },
    series: [{ label: opts.xLabel || "report" }, ...labels.map((l, i) => ({
      label: l, stroke: colors[i % colors.length], width: 1.5, spanGaps: true,
      points: { show: data[0].length <= 200 },
      paths: opts.stepped ? uPlot.paths.stepped({ align: 1 }) : undefined,
    }))],
    hooks: { setSelect: [(u) => {
      if (u.select.width <= 0) return;
      if (opts.time) { u.zoomed = true; return; }
      // A zoom on a report chart asks the server for that range of every
      // curve, in full unless it is still too long.
      const from = Math.max(0, Math.ceil(u.posToVal(u.select.left, "x")));
      const to = Math.floor(u.posToVal(u.select.left + u.select.width, "x"));
      if (to >= from) { T.zoom = { from, to }; refresh(); }
    }] },
    plugins: opts.noMarks ? [] : [restartMarks(name)],
  }, data, box);
  u.root.addEventListener("dblclick", () => {
    if (opts.time) { u.zoomed = false; return; }
    if (T.zoom) { T.zoom = null; refresh(); }
  });
  T.charts[name] = u;
}

function drawMetrics(m) {
  const groups = new Map();
  for (const s of m.series) {
    const g = groupOf(s.name);
    if (!groups.has(g)) groups.set(g, []);
    groups.get(g).push(s);
  }
  for (const [g, series] of groups) chart(g, series);
  const ws = m.world_size;
  const sizes = new Set(ws.value);
  if (ws.index.length > 0 && (m.elastic || sizes.size > 1)) {
    // The last world size holds until the latest report.
    const last = Math.max(m.reports - 1, ws.index[ws.index.length - 1]);
    const xs = [...ws.index, last], ys = [...ws.value, ws.value[ws.value.length - 1]];
    chart("world size", [{ name: "world_size", index: xs, value: ys }], { stepped: true });
  }
  const note = `${m.reports} reports` + (T.zoom ? `, reports ${T.zoom.from} to ${T.zoom.to} (double-click a chart for all)` : "") +
    (m.downsampled ? `, curves downsampled to at most ${m.max_points} points each (the extremes kept; drag over a chart to zoom in)` : "");
  document.getElementById("reports").textContent = note;
  document.getElementById("restarts").replaceChildren(...m.restarts.map((r) =>
    el("li", { class: "restart", "data-attempt": r.attempt, "data-index": r.index, "data-kind": r.kind },
      `before report ${r.index}: attempt ${r.attempt} (${r.kind}): ${r.reason}`)));
}

function drawThroughput(v) {
  const tp = T.throughput;
  const cur = v.ranks.filter((r) => r.rank >= 0 && r.attempt === (v.status && v.status.attempt));
  if (cur.length === 0) return;
  const n = tp.t.length;
  tp.t.push(Date.parse(v.now) / 1000);
  for (const r of cur) {
    const k = `rank ${r.rank}`;
    if (!tp.ranks[k]) tp.ranks[k] = new Array(n).fill(null);
  }
  for (const [k, ys] of Object.entries(tp.ranks)) {
    const r = cur.find((r) => `rank ${r.rank}` === k);
    ys.push(r ? (r.samples_per_s || 0) : null);
  }
  const keys = Object.keys(tp.ranks).sort();
  chart("samples/s", keys.map((k) => ({ name: k })), {
    container: "throughput", title: "samples/s of each rank (since this page opened)", xLabel: "time", time: true, noMarks: true,
    data: [tp.t.slice(), ...keys.map((k) => tp.ranks[k].slice())],
  });
}

function drawRun(v) {
  document.title = `${v.name} · tempotrain`;
  document.getElementById("title").textContent = v.name;
  // The status Query's answer while the run runs, else run.json's.
  const st = v.status || (v.state && {
    attempt: v.state.attempts, failures: v.state.failures, reports: v.state.reports, latest_metrics: v.state.latest_metrics,
    world_size: v.history.length ? v.history[v.history.length - 1].world_size : "-",
  });
  const status = (v.state && v.state.status) || v.workflow_status;
  document.getElementById("status").replaceChildren(statusBadge(status));
  const ui = document.getElementById("webui");
  if (v.web_ui) { ui.href = v.web_ui; ui.hidden = false; }
  const end = v.close ? Date.parse(v.close) : Date.parse(v.now);
  const kv = [
    ["function", v.input.train_func],
    ["workflow", `${v.workflow_id} (${v.workflow_status})`],
    ["attempt", st ? `${st.attempt} (${st.failures} failures)` : "-"],
    ["world size", st ? st.world_size : "-"],
    ["reports", st ? st.reports : "-"],
    ["latest", st && st.latest_metrics ? Object.entries(st.latest_metrics).map(([k, x]) => `${k}=${fmtNum(x)}`).join("  ") : "-"],
    ["started", fmtTime(v.start)],
    ["duration", fmtDuration((end - Date.parse(v.start)) / 1000)],
    ["storage", v.storage || "-"],
  ];
  if (v.tune_workflow_id) kv.push(["search", el("a", { href: "/tunes/" + encodeURIComponent(v.tune_workflow_id), id: "search" }, `a trial of the search ${v.tune_workflow_id}`)]);
  if (v.status_error) kv.push(["status query", v.status_error]);
  if (v.state && v.state.error) kv.push(["error", v.state.error]);
  document.getElementById("summary").replaceChildren(...kv.flatMap(([k, x]) => [el("div", {}, k), el("div", {}, x)]));

  const rankRows = v.ranks.length ? [] : [el("tr", { class: "none" }, el("td", { colSpan: 11, class: "muted" },
    v.workflow_status === "running" ? "no rank is running: the group is forming or restarting" : "no rank is running: the run ended"))];
  document.querySelector("#ranks tbody").replaceChildren(...rankRows, ...v.ranks.map((r) => el("tr", { "data-rank": r.rank },
    el("td", { class: "num" }, r.attempt), el("td", { class: "num" }, r.rank < 0 ? "standby" : r.rank),
    el("td", {}, r.phase || "-"), el("td", { class: "num" }, r.epoch), el("td", { class: "num" }, r.step),
    el("td", { class: "num" }, r.samples || 0), el("td", { class: "num" }, fmtNum(r.samples_per_s || 0, 5)),
    el("td", { class: "num" }, r.checkpoint || "-"),
    el("td", { class: "num" }, r.heartbeat_age_s == null ? "-" : fmtDuration(r.heartbeat_age_s)),
    el("td", {}, r.state), el("td", { class: "muted" }, r.worker))));
  drawThroughput(v);

  const t0 = v.history.length ? Date.parse(v.history[0].start) : Date.parse(v.start);
  const span = Math.max(1, end - t0);
  document.querySelector("#attempts tbody").replaceChildren(...v.history.map((h) => {
    const s = Date.parse(h.start), e = h.end ? Date.parse(h.end) : end;
    const cls = !h.end ? "running" : h.error ? "failed" : (h.preempted || h.grown) ? "other" : "";
    const ended = !h.end ? "running" : h.error ? h.error : h.preempted ? "preempted" : h.grown ? "grown" : "ok";
    return el("tr", { "data-attempt": h.attempt },
      el("td", { class: "num" }, h.attempt), el("td", { class: "num" }, h.world_size || "-"),
      el("td", {}, fmtTime(h.start)), el("td", { class: "num" }, fmtDuration((e - s) / 1000)),
      el("td", {}, el("div", { class: "timeline" }, el("div", {
        class: cls, title: ended,
        style: `left:${(100 * (s - t0) / span).toFixed(2)}%;width:${Math.max(0.5, 100 * (e - s) / span).toFixed(2)}%`,
      }))),
      el("td", { class: "num" }, h.restored_from || h.resumed_from || "-"),
      el("td", { class: "wrap" + (h.error ? " error" : "") }, ended));
  }));

  const attr = v.input.run && v.input.run.checkpoint && v.input.run.checkpoint.score_attribute;
  document.querySelector("#checkpoints thead th:nth-child(5)").textContent = attr ? `score (${attr}, ${v.input.run.checkpoint.score_order || "max"})` : "score";
  document.querySelector("#checkpoints tbody").replaceChildren(...v.checkpoints.map((c) => el("tr", { class: c.best ? "best" : "", "data-seq": c.seq },
    el("td", { class: "num" }, c.seq), el("td", { class: "num" }, c.attempt || "-"), el("td", {}, fmtTime(c.time)),
    el("td", { class: "num" }, fmtBytes(c.bytes)), el("td", { class: "num" }, fmtNum(c.score)),
    el("td", {}, c.best ? "★ best" : ""),
    el("td", { class: "muted" }, Object.entries(c.metrics || {}).map(([k, x]) => `${k}=${fmtNum(x)}`).join("  ")),
    el("td", { class: "muted uri" }, c.uri))));
  document.getElementById("input").textContent = JSON.stringify(v.input, null, 2);
}

let logKey = "";
async function drawLogs(running) {
  const logs = await getJSON(`/api/runs/${encodeURIComponent(runID)}/logs`);
  const sel = document.getElementById("logsel");
  const keys = logs.map((l) => `${l.attempt}/${l.rank}`);
  if (JSON.stringify([...sel.options].map((o) => o.value)) !== JSON.stringify(keys)) {
    const prev = sel.value;
    sel.replaceChildren(...logs.map((l) => el("option", { value: `${l.attempt}/${l.rank}` }, `attempt ${l.attempt}, rank ${l.rank} (${fmtBytes(l.size)})`)));
    const latest = logs.length ? Math.max(...logs.map((l) => l.attempt)) : 0;
    sel.value = keys.includes(prev) ? prev : `${latest}/0`;
    if (!sel.value && keys.length) sel.value = keys[keys.length - 1];
  }
  if (!sel.value || (!running && logKey === sel.value)) return;
  logKey = sel.value;
  const resp = await fetch(`/api/runs/${encodeURIComponent(runID)}/logs/${sel.value}`, { cache: "no-store" });
  const pre = document.getElementById("log");
  const stick = pre.scrollTop + pre.clientHeight >= pre.scrollHeight - 4;
  pre.textContent = resp.ok ? await resp.text() : `log: ${resp.status} ${await resp.text()}`;
  if (stick) pre.scrollTop = pre.scrollHeight;
}
document.getElementById("logsel").addEventListener("change", () => { logKey = ""; drawLogs(true); });

// poll runs one at a time: a refresh asked while one runs comes after it.
let timer = null, busy = false, again = false;
async function poll() {
  if (busy) { again = true; return; }
  busy = true;
  const err = document.getElementById("error");
  let running = true;
  try {
    const [v, m] = await Promise.all([
      getJSON(`/api/runs/${encodeURIComponent(runID)}`),
      getJSON(`/api/runs/${encodeURIComponent(runID)}/metrics` + (T.zoom ? `?from=${T.zoom.from}&to=${T.zoom.to}` : "")),
    ]);
    T.run = v;
    T.metrics = m;
    drawRun(v);
    drawMetrics(m);
    running = v.workflow_status === "running";
    await drawLogs(running);
    err.textContent = "";
    T.polls++;
    document.getElementById("updated").textContent = "updated " + new Date().toLocaleTimeString(undefined, { hour12: false }) + (running ? " · live" : "");
  } catch (e) {
    err.textContent = e.message;
  }
  busy = false;
  if (again) {
    again = false;
    poll();
    return;
  }
  timer = setTimeout(poll, running ? 2000 : 15000);
}

function refresh() {
  clearTimeout(timer);
  poll();
}
poll();
