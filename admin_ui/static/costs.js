// The cost chart: fetch the report (per day and tier or model) as JSON and draw it as SVG:
// stacked bars of what was charged, a dashed line of the all-cloud counterfactual.
// Each bar segment carries its amount (data-cost-nusd), so what is drawn can be checked.
"use strict";
(function () {
  const figure = document.getElementById("cost-chart");
  if (!figure) return;
  const plot = figure.querySelector(".plot");
  const legend = figure.querySelector(".legend");
  const drawnTotal = figure.querySelector(".drawn-total");
  const NS = "http://www.w3.org/2000/svg";
  const NANO = 1e9;

  function el(name, attrs, parent) {
    const node = document.createElementNS(NS, name);
    for (const [k, v] of Object.entries(attrs || {})) node.setAttribute(k, String(v));
    if (parent) parent.appendChild(node);
    return node;
  }

  function usd(nusd) {
    const v = nusd / NANO;
    if (v === 0) return "$0";
    if (Math.abs(v) >= 1) return "$" + v.toFixed(2);
    return "$" + String(parseFloat(v.toPrecision(3)));
  }

  function days(since, until) {
    // Every day from since to until (inclusive), so empty days show as gaps.
    const out = [];
    const start = new Date(since.slice(0, 10) + "T00:00:00Z");
    const end = new Date(until.slice(0, 10) + "T00:00:00Z");
    if (isNaN(start) || isNaN(end) || end < start || (end - start) / 864e5 > 400) return null;
    for (let d = start; d <= end; d = new Date(d.getTime() + 864e5)) out.push(d.toISOString().slice(0, 10));
    return out;
  }

  function niceMax(v) {
    if (v <= 0) return 1;
    const p = Math.pow(10, Math.floor(Math.log10(v)));
    for (const m of [1, 2, 2.5, 5, 10]) if (m * p >= v) return m * p;
    return 10 * p;
  }

  function draw(report) {
    const by = report.by;
    const name = by.replace(/^tag:/, "");  // tag:team: the team tag's values
    const rows = report.rows;
    const seen = rows.map((r) => r.day);
    let axis = report.since && report.until ? days(report.since, new Date(Date.parse(report.until) - 1).toISOString()) : null;
    if (!axis) axis = Array.from(new Set(seen)).sort();
    const series = Array.from(new Set(rows.map((r) => r[by] || "(none)"))).sort();
    const cost = new Map(), cf = new Map();
    for (const r of rows) {
      const key = r.day + "\u0000" + (r[by] || "(none)");
      cost.set(key, (cost.get(key) || 0) + r.cost_nusd);
      cf.set(r.day, (cf.get(r.day) || 0) + r.counterfactual_nusd);
    }
    const dayTotal = (d) => series.reduce((s, k) => s + (cost.get(d + "\u0000" + k) || 0), 0);
    const top = niceMax(Math.max(0, ...axis.map(dayTotal), ...axis.map((d) => cf.get(d) || 0)));

    const W = 760, H = 300, L = 84, R = 12, T = 12, B = 40;
    const w = W - L - R, h = H - T - B;
    const slot = w / Math.max(1, axis.length);
    const bar = Math.max(2, Math.min(40, slot * 0.7));
    const y = (v) => T + h - (v / top) * h;
    const svg = el("svg", { viewBox: `0 0 ${W} ${H}`, role: "img",
      "aria-label": `Cost per day by ${name}; total ${usd(report.total.cost_nusd)}, all-cloud ${usd(report.total.counterfactual_nusd)}` });
    for (let i = 0; i <= 4; i++) {
      const v = (top * i) / 4;
      el("line", { class: "grid-line", x1: L, x2: W - R, y1: y(v), y2: y(v) }, svg);
      el("text", { x: L - 6, y: y(v) + 4, "text-anchor": "end" }, svg).textContent = usd(v * 1);
    }
    el("line", { class: "axis", x1: L, x2: W - R, y1: T + h, y2: T + h }, svg);
    const labelEvery = Math.ceil(axis.length / 10);
    let drawn = 0;
    axis.forEach((d, i) => {
      const x = L + i * slot + (slot - bar) / 2;
      let base = 0;
      series.forEach((k, j) => {
        const v = cost.get(d + "\u0000" + k) || 0;
        if (!v) return;
        const rect = el("rect", { class: "s-" + (j % 6), x: x, y: y(base + v), width: bar,
          height: Math.max(0.5, y(base) - y(base + v)), "data-day": d, "data-series": k, "data-cost-nusd": v }, svg);
        el("title", {}, rect).textContent = `${d} · ${k}: ${usd(v)}`;
        base += v;
        drawn += v;
      });
      if (i % labelEvery === 0) el("text", { x: L + i * slot + slot / 2, y: H - B + 16, "text-anchor": "middle" }, svg).textContent = d.slice(5);
    });
    const pts = axis.map((d, i) => [L + i * slot + slot / 2, y(cf.get(d) || 0), cf.get(d) || 0]);
    if (pts.length) {
      el("polyline", { class: "counterfactual", points: pts.map((p) => p[0] + "," + p[1]).join(" ") }, svg);
      pts.forEach((p, i) => { if (p[2]) {
        const dot = el("circle", { class: "cf-dot", cx: p[0], cy: p[1], r: 3, "data-counterfactual-nusd": p[2] }, svg);
        el("title", {}, dot).textContent = `${axis[i]} all-cloud: ${usd(p[2])}`;
      } });
    }
    plot.replaceChildren(svg);
    legend.replaceChildren();
    series.forEach((k, j) => {
      const span = document.createElement("span");
      const swatch = document.createElement("i");
      swatch.className = "s-" + (j % 6);
      span.append(swatch, k);
      legend.append(span);
    });
    const cfSpan = document.createElement("span");
    const cfSwatch = document.createElement("i");
    cfSwatch.className = "cf";
    cfSpan.append(cfSwatch, "all-cloud counterfactual");
    legend.append(cfSpan);
    figure.dataset.drawnNusd = String(drawn);
    drawnTotal.textContent = `Drawn: ${usd(drawn)} over ${axis.length} day(s), ${series.length} ${name}(s).`;
  }

  fetch(figure.dataset.src, { credentials: "same-origin", headers: { Accept: "application/json" } })
    .then((res) => { if (!res.ok) throw new Error("HTTP " + res.status); return res.json(); })
    .then(draw)
    .catch((err) => { plot.textContent = "The chart could not be drawn: " + err.message; });
})();
