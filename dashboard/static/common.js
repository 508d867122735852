// Shared helpers of the dashboard's pages: no build step, no framework.
"use strict";

async function getJSON(url) {
  const resp = await fetch(url, { cache: "no-store" });
  const body = await resp.json().catch(() => ({ error: resp.statusText }));
  if (!resp.ok) throw new Error(body.error || resp.statusText);
  return body;
}

function el(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k === "class") e.className = v;
    else if (k.startsWith("data-")) e.setAttribute(k, v);
    else if (k in e) e[k] = v;
    else e.setAttribute(k, v);
  }
  for (const c of children.flat()) {
    if (c === undefined || c === null) continue;
    e.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return e;
}

function fmtNum(v, digits = 4) {
  if (v === undefined || v === null) return "-";
  if (Number.isInteger(v)) return String(v);
  return Number(v).toPrecision(digits).replace(/\.?0+(e|$)/, "$1");
}

function fmtDuration(s) {
  if (s === undefined || s === null || isNaN(s)) return "-";
  s = Math.max(0, s);
  if (s < 60) return s.toFixed(1) + "s";
  const h = Math.floor(s / 3600), m = Math.floor((s % 3600) / 60), sec = Math.floor(s % 60);
  return (h ? h + "h" : "") + (h || m ? m + "m" : "") + sec + "s";
}

function fmtTime(t) {
  if (!t) return "-";
  const d = new Date(t);
  return d.toLocaleString(undefined, { hour12: false });
}

function fmtBytes(n) {
  if (!n) return "-";
  const u = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  while (n >= 1024 && i < u.length - 1) { n /= 1024; i++; }
  return (i ? n.toFixed(1) : n) + " " + u[i];
}

function statusBadge(s) {
  return el("span", { class: "status " + s }, s);
}
