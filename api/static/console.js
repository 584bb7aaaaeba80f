// The synth console: renders /dashboard/data.json and asks for it again every REFRESH_MS.
// No build step: plain script over the vendored uPlot (window.uPlot).
"use strict";
(function () {
  const REFRESH_MS = 5000;
  const COLORS = ["#1565c0", "#e65100", "#2e7d32", "#6a1b9a", "#c62828", "#00838f", "#9e9d24", "#4e342e"];
  const plots = {};

  function el(tag, attrs, ...children) {
    const node = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      // style through the CSSOM: the page's Content-Security-Policy refuses style attributes
      if (k === "class") node.className = v; else if (k === "style") node.style.cssText = v; else node.setAttribute(k, v);
    }
    for (const child of children) node.append(child instanceof Node ? child : String(child ?? ""));
    return node;
  }

  function duration(s) {
    if (s === null || s === undefined) return "–";
    if (s < 60) return Math.round(s) + " s";
    if (s < 3600) return Math.floor(s / 60) + " min " + Math.round(s % 60) + " s";
    return Math.floor(s / 3600) + " h " + Math.round((s % 3600) / 60) + " min";
  }

  function setRows(table, rows, columns, empty) {
    const body = table.tBodies[0] || table;
    body.replaceChildren(...(rows.length ? rows : [el("tr", {}, el("td", { colspan: columns }, empty))]));
  }

  function renderBatches(batches) {
    setRows(document.querySelector("#batches"), batches.map((b) => {
      const pct = (100 * b.progress).toFixed(1);
      const failedPct = b.total ? (100 * b.failed / b.total) : 0;
      const bar = el("div", { class: "bar", "data-progress": b.progress.toFixed(4), "data-batch": b.id },
        el("div", { class: "fill", style: "width:" + pct + "%" }),
        el("div", { class: "failed", style: "left:" + (pct - failedPct) + "%;width:" + failedPct + "%" }),
        el("span", { class: "label" }, pct + " % (" + (b.done + b.failed).toLocaleString() + " / " + b.total.toLocaleString() + ")"));
      return el("tr", {}, el("td", { title: b.id }, b.name || b.id.slice(0, 12)), el("td", {}, b.owner), el("td", {}, bar),
        el("td", {}, b.done), el("td", {}, b.failed), el("td", {}, b.running), el("td", {}, b.waiting),
        el("td", {}, b.x_realtime === null ? "–" : b.x_realtime + "×"), el("td", {}, duration(b.eta_s)));
    }), 9, "No batch in progress.");
  }

  function renderFailures(failures) {
    setRows(document.querySelector("#failures"), failures.map((f) => el("tr", { class: "failure" },
      el("td", {}, f.finished_at.slice(0, 19).replace("T", " ")), el("td", {}, f.reason),
      el("td", {}, f.link ? el("a", { href: f.link }, f.job_id.slice(0, 12)) : f.job_id.slice(0, 12)),
      el("td", { title: f.batch_id }, f.batch_id.slice(0, 12)), el("td", {}, f.owner), el("td", { class: "error" }, f.error))),
    6, "No failure.");
  }

  function renderWorkers(workers) {
    const table = document.querySelector("#workers");
    const head = table.rows[0];
    const rows = workers.map((w) => el("tr", { class: w.stale ? "stale" : "" }, el("td", {}, w.name),
      el("td", {}, w.device || ""), el("td", {}, w.engine || ""), el("td", {}, w.model || ""), el("td", {}, w.quantization || ""),
      el("td", {}, w.rows_in_use || "?"), el("td", { class: "inflight" }, w.jobs_in_flight ?? "?"),
      el("td", { class: "storage" }, w.storage || "?"), el("td", {}, Math.round(w.age_s) + " s ago" + (w.stale ? " (stale)" : ""))));
    table.replaceChildren(head, ...(rows.length ? rows : [el("tr", {}, el("td", { colspan: 9 }, "No live workers."))]));
  }

  function renderQueues(queues, deadletter) {
    const table = document.querySelector("#queues");
    const rows = Object.entries(queues).map(([q, n]) => el("tr", {}, el("td", {}, q), el("td", { class: "depth" }, n)));
    rows.push(el("tr", {}, el("td", {}, "deadletter (could not be worked; docs/operations.md)"),
      el("td", { class: "depth", id: "deadletter" }, deadletter)));
    table.replaceChildren(table.rows[0], ...rows);
  }

  // Sparse [[bucket, value], ...] -> a dense array over n buckets (fill: what an empty bucket holds).
  function dense(pairs, n, fill) {
    const out = new Array(n).fill(fill);
    for (const [i, v] of pairs) if (i >= 0 && i < n) out[i] = v;
    return out;
  }

  function plot(id, xs, named, opts) {
    const host = document.getElementById(id);
    const names = Object.keys(named);
    const hasData = names.some((k) => named[k].some((v) => v !== null && v !== 0));
    const key = names.join("\u0000");
    if (!hasData) {
      if (plots[id]) { plots[id].destroy(); delete plots[id]; }
      host.replaceChildren(el("div", { class: "empty" }, "Nothing in the last 24 hours."));
      return;
    }
    const data = [xs, ...names.map((k) => named[k])];
    if (plots[id] && plots[id].synthKey === key) { plots[id].setData(data); return; }
    if (plots[id]) plots[id].destroy();
    host.replaceChildren();
    const series = [{}].concat(names.map((k, i) => ({
      label: k, stroke: COLORS[i % COLORS.length], width: 2, spanGaps: !!opts.spanGaps,
      fill: opts.bars ? COLORS[i % COLORS.length] + "99" : undefined,
      paths: opts.bars ? uPlot.paths.bars({ size: [0.8, 40] }) : undefined, points: { show: !!opts.points },
    })));
    const p = new uPlot({ width: Math.max(300, host.clientWidth), height: 200, series,
      scales: { x: { time: true } }, axes: [{}, { label: opts.unit, size: 60 }], legend: { live: false } }, data, host);
    p.synthKey = key;
    plots[id] = p;
  }

  function renderPlots(day) {
    const n = day.minute_buckets;
    const minutes = Array.from({ length: n }, (_, i) => day.start + 60 * i);
    const audio = {};
    for (const [device, pairs] of Object.entries(day.audio_s_by_device)) audio[device] = dense(pairs, n, 0);
    plot("plot-audio", minutes, audio, { unit: "audio s / min" });

    const ttfb = {};
    for (const priority of Object.keys(day.ttfb_s).sort()) {
      for (const q of ["p50", "p95"]) ttfb[priority + " " + q] = dense(day.ttfb_s[priority][q], n, null);
    }
    plot("plot-ttfb", minutes, ttfb, { unit: "seconds", spanGaps: true, points: true });

    const samples = day.queue_depths;
    const queueNames = [...new Set(samples.flatMap((s) => Object.keys(s.depths)))].sort();
    const depths = {};
    for (const q of queueNames) depths[q] = samples.map((s) => s.depths[q] ?? null);
    plot("plot-queues", samples.map((s) => s.t), depths, { unit: "messages" });

    const hours = Array.from({ length: day.hour_buckets }, (_, i) => Math.floor(day.start / 3600) * 3600 + 3600 * i);
    const failures = {};
    for (const [why, pairs] of Object.entries(day.failures_by_reason)) failures[why] = dense(pairs, day.hour_buckets, 0);
    plot("plot-failures", hours, failures, { unit: "jobs", bars: true });
  }

  function render(data) {
    document.getElementById("now").textContent = data.now;
    renderBatches(data.batches);
    renderFailures(data.failures);
    renderWorkers(data.workers);
    renderQueues(data.queues, data.deadletter);
    renderPlots(data.last_24h);
  }

  async function refresh() {
    try {
      const answer = await fetch("/dashboard/data.json", { credentials: "same-origin", cache: "no-store" });
      if (answer.status === 401) { location.reload(); return; }   // the session ended: the login form
      if (answer.ok) render(await answer.json());
    } finally {
      setTimeout(refresh, REFRESH_MS);
    }
  }

  render(JSON.parse(document.getElementById("initial").textContent));
  setTimeout(refresh, REFRESH_MS);
})();
