// The Health view's charts: /health.json (agent/ops/stats.py, as `agent stats --json`)
// drawn with uPlot (static/uplot/, shipped in the package: nothing comes from the net).
"use strict";

const COLORS = ["#2f6fed", "#17663a", "#a1261f", "#9a6700", "#6a4fc4"];
const DAY_MS = 86400000;

// The x axis counts whole days (days since 1970, UTC): its ticks fall on days, never on
// hours or on years a one-day vault does not have.
function dayNumber(day) { return Date.parse(day + "T00:00:00Z") / DAY_MS; }

const MONTHS = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov",
                "Dec"];

function dayLabel(n, withYear) {
  const d = new Date(n * DAY_MS);
  return MONTHS[d.getUTCMonth()] + " " + d.getUTCDate() + (withYear ? " " + d.getUTCFullYear() : "");
}

// Steps a tick may take: whole numbers for counts (no "1.5 facts"), whole days on x.
const WHOLE = [];
for (let e = 1; e <= 1e12; e *= 10) WHOLE.push(e, 2 * e, 5 * e);
const DAYS = [1, 2, 7, 14, 28, 56, 91, 182, 364, 728, 1456, 2912, 5824];

// The room a y axis needs for its widest label (uPlot's default is a fixed 50 px, which
// cut "25,000" to "5,000").
function axisSize(u, values, axisIdx, cycleNum) {
  const axis = u.axes[axisIdx];
  if (cycleNum > 1) return axis._size;
  let size = axis.ticks.size + axis.gap;
  const longest = (values || []).reduce((a, v) => (String(v).length > a.length ? String(v) : a), "");
  if (longest) {
    u.ctx.font = axis.font[0];
    size += u.ctx.measureText(longest).width / devicePixelRatio;
  }
  return Math.ceil(size) + 2;
}

function series(names) {
  return [{value: (u, v) => (v == null ? "-" : dayLabel(v, true))}].concat(
    names.map((n, i) => ({label: n, stroke: COLORS[i % COLORS.length], width: 2,
                          points: {show: true}})));
}

function draw(box, names, columns, xs, whole) {
  const width = Math.max(280, box.clientWidth || 600);
  const today = Math.floor(Date.now() / DAY_MS);
  const years = new Set(xs.map((n) => new Date(n * DAY_MS).getUTCFullYear())).size > 1;
  const opts = {
    width: width, height: 220, series: series(names), legend: {live: false},
    scales: {
      // From the days themselves: with one day, uPlot's own range runs from 0 to twice
      // it (1970 to the 2080s, labelled 2027 2028 2029 on a vault's first day).
      x: {time: false, range: () => xs.length ? [xs[0] - 0.5, xs[xs.length - 1] + 0.5]
                                              : [today - 0.5, today + 0.5]},
      y: {range: (u, min, max) => [Math.min(0, min), max > 0 ? max * 1.1 : 1]},
    },
    axes: [
      {incrs: DAYS, space: years ? 110 : 60,      // room for "Oct 21 2027", "Mar 1"
       values: (u, splits) => splits.map((n) => dayLabel(n, years))},
      Object.assign({size: axisSize}, whole ? {incrs: WHOLE} : {}),
    ],
  };
  box.textContent = "";
  const plot = new uPlot(opts, [xs].concat(columns), box);
  box.plot = plot;                 // its axes' labels, for a test to read
  box.dataset.drawn = String(xs.length);
  return plot;
}

async function healthCharts() {
  const root = document.getElementById("health-charts");
  if (!root || typeof uPlot === "undefined") return;
  const since = root.dataset.since;
  const r = await fetch("/health.json" + (since ? "?since=" + encodeURIComponent(since) : ""),
                        {credentials: "same-origin", headers: {"Accept": "application/json"}});
  if (!r.ok) { root.textContent = await r.text(); return; }
  const data = await r.json();
  const days = data.days;
  const xs = days.map((d) => dayNumber(d.day));
  const parts = ["chat", "compaction", "dream"];
  const tok = (t) => t.input + t.output + t.cache_read + t.cache_write;
  const charts = {
    facts: [["facts"], [days.map((d) => d.facts)], true],
    proposals: [["made", "accepted", "rejected", "stale", "duplicates"],
                ["made", "accepted", "rejected", "stale", "dropped_duplicates"]
                  .map((k) => days.map((d) => d.proposals[k])), true],
    tokens: [parts, parts.map((p) => days.map((d) => tok(d.tokens[p]))), true],
    cost: [parts, parts.map((p) => days.map((d) => d.tokens[p].cost_known)), false],
  };
  for (const box of root.querySelectorAll("[data-chart]")) {
    const [names, columns, whole] = charts[box.dataset.chart];
    draw(box, names, columns, xs, whole);
  }
  root.dataset.ready = "yes";
}

document.addEventListener("DOMContentLoaded", healthCharts);
