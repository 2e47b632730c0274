// hybrid-trader watch: draws each state the server pushes (server-sent events on /events).
"use strict";

const ET = new Intl.DateTimeFormat("en-CA", {timeZone: "America/New_York", year: "numeric", month: "2-digit",
  day: "2-digit", hour: "2-digit", minute: "2-digit", second: "2-digit", hour12: false});
const money = new Intl.NumberFormat("en-US", {minimumFractionDigits: 2, maximumFractionDigits: 2});
// What the page did, for a person debugging it and for the browser test.
window.__watch = {updates: 0, lastBarMs: null, barToPageMs: [], errors: []};

function et(ms, seconds) {
  if (ms === null || ms === undefined) return "-";
  const p = Object.fromEntries(ET.formatToParts(new Date(ms)).map((x) => [x.type, x.value]));
  const hour = p.hour === "24" ? "00" : p.hour;
  return `${p.year}-${p.month}-${p.day} ${hour}:${p.minute}` + (seconds ? `:${p.second}` : "");
}
function usd(x) { return x === null || x === undefined ? "-" : "$" + money.format(x); }
function signed(x) { return x === null || x === undefined ? "-" : (x >= 0 ? "+" : "-") + money.format(Math.abs(x)); }
function $(id) { return document.getElementById(id); }
function text(id, value, cls) {
  const el = $(id); el.textContent = value;
  if (cls !== undefined) el.className = "value " + cls;
}
function rows(tableId, data, cells) {
  const body = document.querySelector(`#${tableId} tbody`);
  body.replaceChildren(...data.map((d) => {
    const tr = document.createElement("tr");
    for (const [value, num] of cells(d)) {
      const td = document.createElement("td"); td.textContent = value; if (num) td.className = "num"; tr.append(td);
    }
    return tr;
  }));
}

function showProblem(s) {
  $("problem").hidden = false;
  $("problem-text").textContent = s.problem + (s.journal ? ` (${s.journal})` : "");
  $("problem-fix").textContent = s.fix ? "Fix: " + s.fix : "";
}

function cards(s) {
  const pos = s.position, acc = s.account;
  if (pos.qty) {
    text("position", `${pos.qty > 0 ? "LONG" : "SHORT"} ${Math.abs(pos.qty)} @ ${money.format(pos.avg_price)}`,
         pos.qty > 0 ? "long" : "short");
    $("position-detail").textContent = `open ${signed(pos.open_points)} pts`;
  } else {
    text("position", "FLAT", ""); $("position-detail").textContent = "";
  }
  if (acc) {
    text("equity", usd(acc.equity));
    $("equity-detail").textContent = `balance ${usd(acc.balance)}, day ${signed(acc.day_pnl)}`;
    const room = acc.equity !== null && acc.threshold !== null ? acc.equity - acc.threshold : null;
    text("to-threshold", usd(room), room !== null && room < 500 ? "bad" : "");
    $("threshold-detail").textContent = `threshold ${usd(acc.threshold)}, peak ${usd(acc.peak)}`;
    if (acc.day_limit !== null) {
      const day = acc.equity - acc.day_limit;
      text("to-day-limit", usd(day), day < 250 ? "bad" : "");
      $("day-detail").textContent = `the day locks at ${usd(acc.day_limit)}`;
    } else {
      text("to-day-limit", "none", "");
      $("day-detail").textContent = "no daily loss limit in these rules (or a journal of before the limit was journaled)";
    }
    text("status", acc.status, acc.status === "active" || acc.status === "target_reached" ? "" : "bad");
    $("status-detail").textContent = acc.verdict ? `verdict ${acc.verdict}` : "";
  }
  const nt = s.ninjatrader;
  if (nt) {
    text("ninjatrader", nt.halted ? "HALTED" : `position ${nt.position ?? "?"}`, nt.halted ? "bad" : "");
    $("ninjatrader-detail").textContent = nt.halted ||
      (nt.last_error ? `last error ${nt.last_error.code}: ${nt.last_error.message}` : "no error");
  } else {
    text("ninjatrader", "not mirrored", ""); $("ninjatrader-detail").textContent = "paper broker only";
  }
  const bar = s.last_bar;
  text("last-bar", bar ? `${et(bar.t)}  ${money.format(bar.close)}` : "-");
  const lat = s.latency;
  $("latency").textContent = (window.__watch.barToPageMs.length ?
    `on this page ${window.__watch.barToPageMs.at(-1).toFixed(0)} ms after it was journaled; ` : "") +
    (lat ? `decision latency median ${lat.median_ms.toFixed(2)} ms, p99 ${lat.p99_ms.toFixed(2)} ms` : "");
}

function tables(s) {
  rows("orders", s.open_orders, (o) => [[o.order_id], [o.intent], [o.side], [o.qty, 1], [o.type],
    [o.stop ?? "-", 1], [o.limit ?? "-", 1], [o.state]]);
  $("decisions-title").textContent = `The last ${s.decisions.length} decisions`;
  rows("decisions", [...s.decisions].reverse(), (d) => [[et(d.t)], [d.action],
    [d.probabilities.slice(0, 3).map(([k, p]) => `${k} ${p.toFixed(2)}`).join(", ")],
    [d.rule_codes.join(", ") || "-"], [d.veto || "-"], [d.advice ? JSON.stringify(d.advice) : "-"],
    [d.latency_ms === null ? "-" : d.latency_ms.toFixed(2), 1]]);
  rows("errors", [...s.errors].reverse(), (e) => [[et(e.t, true)], [e.where], [e.code || "-"], [e.message]]);
  const c = s.counts;
  $("counts").textContent = `${c.bars.toLocaleString()} bars accepted, ${c.refused.toLocaleString()} refused, ` +
    `${c.decisions.toLocaleString()} decisions, ${c.orders.toLocaleString()} orders, ` +
    `${c.fills.toLocaleString()} fills, ${c.errors.toLocaleString()} errors; schema version ${s.schema_version}`;
}

function charts(s) {
  if (!window.Plotly) {
    for (const id of ["price-chart", "equity-chart"]) {
      $(id).innerHTML = '<p class="note">Charts need the plotly Python package (pip install plotly): ' +
        "the figures above and the tables below are complete without them.</p>";
    }
    return;
  }
  const layout = {margin: {l: 60, r: 20, t: 10, b: 30}, showlegend: true, legend: {orientation: "h"},
                  xaxis: {rangeslider: {visible: false}}, uirevision: "keep"};
  const x = s.bars.map((b) => et(b[0]));
  const traces = [{type: "candlestick", name: "price", x, open: s.bars.map((b) => b[1]),
    high: s.bars.map((b) => b[2]), low: s.bars.map((b) => b[3]), close: s.bars.map((b) => b[4])}];
  for (const [name, pick, symbol, color] of [
    ["long entry", (f) => f.intent === "entry" && f.side === "BUY", "triangle-up", "#1b9e77"],
    ["short entry", (f) => f.intent === "entry" && f.side === "SELL", "triangle-down", "#d95f02"],
    ["exit", (f) => f.intent !== "entry", "x", "#444"]]) {
    const f = s.fills.filter((v) => v.source === "paper" && pick(v));
    traces.push({type: "scatter", mode: "markers", name, x: f.map((v) => et(v.t)), y: f.map((v) => v.price),
      marker: {symbol, size: 11, color},
      text: f.map((v) => `${v.intent} ${v.side} ${v.qty} @ ${v.price}${v.note ? " (" + v.note + ")" : ""}`),
      hoverinfo: "text+x"});
  }
  Plotly.react("price-chart", traces, layout, {responsive: true, displaylogo: false});
  const a = s.account_series, ax = a.t.map((t) => et(t));
  const lines = [["equity", "#1f77b4", "linear"], ["balance", "#7f7f7f", "hv"], ["threshold", "#d62728", "hv"],
                 ["day_limit", "#ff7f0e", "hv"]]
    .filter(([k]) => a[k].some((v) => v !== null))
    .map(([k, color, shape]) => ({type: "scatter", mode: "lines", name: k === "day_limit" ? "daily loss limit" :
      k === "threshold" ? "trailing threshold" : k, x: ax, y: a[k], line: {color, shape, width: 1.5}}));
  Plotly.react("equity-chart", lines, layout, {responsive: true, displaylogo: false});
}

function draw(s) {
  window.__watch.updates += 1;
  $("journal").textContent = s.journal || "";
  if (!s.ok) { showProblem(s); return; }
  $("problem").hidden = true;
  $("waiting").hidden = s.bars.length > 0;
  const bar = s.last_bar;
  if (bar && bar.t !== window.__watch.lastBarMs) {  // a new bar: how long since the executor journaled it
    if (window.__watch.lastBarMs !== null) window.__watch.barToPageMs.push(Date.now() - bar.recorded_ms);
    window.__watch.lastBarMs = bar.t;
  }
  cards(s); tables(s);
  try { charts(s); } catch (err) { window.__watch.errors.push(String(err)); }
}

// States can come faster than a page draws them (a replay commits many bars a second, and a busy machine draws
// slowly): each message only keeps its text, and the latest is drawn at most every MIN_DRAW_MS, so that the page
// never falls behind a queue of states it no longer needs.
const MIN_DRAW_MS = 100;
let pending = null, timer = null, lastDraw = -Infinity;
function flush() {
  timer = null;
  const data = pending; pending = null;
  if (data === null) return;
  lastDraw = performance.now();
  draw(JSON.parse(data));
}
function receive(data) {
  pending = data;
  if (timer === null) timer = setTimeout(flush, Math.max(0, lastDraw + MIN_DRAW_MS - performance.now()));
}

function connect() {
  const source = new EventSource("events");
  source.onopen = () => { $("link").textContent = "live"; $("link").className = "badge live"; };
  source.onmessage = (ev) => receive(ev.data);
  source.onerror = () => {
    $("link").textContent = "disconnected: retrying"; $("link").className = "badge down";
  };
}
connect();
