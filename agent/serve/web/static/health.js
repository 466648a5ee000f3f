// The Health view's charts: /health.json (agent/ops/stats.py, as `agent stats --json`)
// drawn with uPlot (static/uplot/, shipped in the package: nothing comes from the net).
"use strict";

const COLORS = ["#2f6fed", "#17663a", "#a1261f", "#9a6700", "#6a4fc4"];

function dayTime(day) { return Date.parse(day + "T00:00:00Z") / 1000; }

function series(names) {
  return [{}].concat(names.map((n, i) => ({label: n, stroke: COLORS[i % COLORS.length],
                                            width: 2, points: {show: true}})));
}

function draw(box, names, columns, xs) {
  const width = Math.max(280, box.clientWidth || 600);
  const opts = {width: width, height: 220, series: series(names),
                scales: {x: {time: true}}, legend: {live: false}};
  box.textContent = "";
  const plot = new uPlot(opts, [xs].concat(columns), box);
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
  const xs = days.map((d) => dayTime(d.day));
  const parts = ["chat", "compaction", "dream"];
  const tok = (t) => t.input + t.output + t.cache_read + t.cache_write;
  const charts = {
    facts: [["facts"], [days.map((d) => d.facts)]],
    proposals: [["made", "accepted", "rejected", "stale", "duplicates"],
                ["made", "accepted", "rejected", "stale", "dropped_duplicates"]
                  .map((k) => days.map((d) => d.proposals[k]))],
    tokens: [parts, parts.map((p) => days.map((d) => tok(d.tokens[p])))],
    cost: [parts, parts.map((p) => days.map((d) => d.tokens[p].cost_known))],
  };
  for (const box of root.querySelectorAll("[data-chart]")) {
    const [names, columns] = charts[box.dataset.chart];
    draw(box, names, columns, xs);
  }
  root.dataset.ready = "yes";
}

document.addEventListener("DOMContentLoaded", healthCharts);
