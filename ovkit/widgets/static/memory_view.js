// ovkit live memory view: draws what the kernel sends (numbers only) as HTML + SVG.
// Axis ranges, units and rules are computed in Python (ovkit/widgets/axes.py, data.py);
// this module only lays them out.  Colours come from JupyterLab's --jp-* CSS variables.
const NS = "http://www.w3.org/2000/svg";

function el(tag, attrs = {}, parent = null, text = null) {
  const node = tag.startsWith("svg:")
    ? document.createElementNS(NS, tag.slice(4))
    : document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, v);
  if (text !== null) node.textContent = text;
  if (parent) parent.appendChild(node);
  return node;
}

function unitName(units, scale) {
  const u = units.find((x) => x[1] === scale);
  return u ? u[0] : "B";
}

function unitFor(units, bytes) {
  let chosen = units[0];
  for (const u of units) if (bytes >= 2 * u[1]) chosen = u;
  return chosen;
}

function num(v, digits) {
  return v.toLocaleString("en-US", { maximumFractionDigits: digits, minimumFractionDigits: digits });
}

function fmtBytes(units, bytes, unit = null) {
  if (bytes === null || bytes === undefined || Number.isNaN(bytes)) return "unknown";
  const [name, scale] = unit || unitFor(units, bytes);
  const v = bytes / scale;
  return `${num(v, v >= 100 || scale === 1 ? 0 : 1)} ${name}`;
}

function mib(bytes) {
  return bytes === null || bytes === undefined ? "unknown" : num(Math.floor(bytes / 1048576), 0);
}

function setTitle(node, text) {
  let t = node.querySelector(":scope > title");
  if (!t) t = el("svg:title", {}, node);
  t.textContent = text;
}

// -- panels -----------------------------------------------------------------------------------
const BAR_W = 70; // the table's usage bars
function buildTable(root, meta) {
  const table = el("table", { class: "ovkit-devtable" }, root);
  el("caption", {}, table, meta.simulated ? "SIMULATED device set" : "OpenVINO devices");
  const head = el("tr", {}, el("thead", {}, table));
  for (const h of ["Device", "Class", "Description", "Total MiB", "Used MiB", "Free MiB", "Usage", "Rule"])
    el("th", { class: h.endsWith("MiB") ? "num" : "" }, head, h);
  const body = el("tbody", {}, table);
  const rows = meta.devices.map((d) => {
    const tr = el("tr", { class: "ovkit-row", "data-device": d.name }, body);
    const name = el("td", { class: "ovkit-name" }, tr, d.name);
    const sel = el("span", { class: "ovkit-tag ovkit-tag-sel" }, name, "selected");
    if (d.simulated) el("span", { class: "ovkit-tag ovkit-tag-sim" }, name, "simulated");
    el("td", {}, tr, d.cls);
    el("td", { class: "ovkit-desc", title: d.description }, tr, d.description);
    const cells = [0, 1, 2].map(() => el("td", { class: "num" }, tr));
    const usage = el("td", { class: "ovkit-usage" }, tr);
    const svg = el("svg:svg", { width: BAR_W, height: 10, class: "ovkit-usagebar" }, usage);
    el("svg:rect", { width: BAR_W, height: 10, class: "ovkit-free" }, svg);
    const fill = el("svg:rect", { width: 0, height: 10, class: "ovkit-used" }, svg);
    const pct = el("span", { class: "ovkit-pct" }, usage);
    el("td", { class: "ovkit-rule", title: d.explain }, tr, d.rule);
    for (const e of d.errors) {
      const er = el("tr", { class: "ovkit-errrow", "data-device": d.name }, body);
      el("td", {}, er);
      el("td", { colspan: 7 }, er, `\u26a0 ${e}`);
    }
    return { tr, sel, cells, svg, fill, pct, d };
  });
  if (!meta.devices.length) el("td", { colspan: 8 }, el("tr", {}, body), "(no devices)");
  return (tick) => {
    rows.forEach((r, i) => {
      const [total, used, free] = tick.devices[i] || [null, null, null];
      const selected = i === tick.selected;
      r.tr.classList.toggle("ovkit-selected", selected);
      r.sel.style.display = selected ? "" : "none";
      r.cells[0].textContent = mib(total);
      r.cells[1].textContent = mib(used);
      r.cells[2].textContent = mib(free);
      const frac = total ? Math.min(1, used / total) : null;
      r.fill.setAttribute("width", frac === null ? 0 : (BAR_W * frac).toFixed(1));
      r.fill.classList.toggle("ovkit-high", frac !== null && frac >= 0.8);
      r.pct.textContent = frac === null ? " unknown" : ` ${Math.round(frac * 100)} %`;
      setTitle(r.svg, frac === null ? r.d.explain : `${mib(used)} of ${mib(total)} MiB used (${r.d.rule})`);
    });
  };
}

function panel(root, title, cls) {
  const box = el("div", { class: `ovkit-panel ${cls}` }, root);
  el("div", { class: "ovkit-panel-title" }, box, title);
  return box;
}

function buildBars(root, meta) {
  const box = panel(root, "Memory per device (used / free)", "ovkit-bars");
  const W = 440, rowH = 26, left = 70, barW = 220;
  const svg = el("svg:svg", { width: W, height: rowH * Math.max(1, meta.devices.length) + 4 }, box);
  const rows = meta.devices.map((d, i) => {
    const y = 4 + i * rowH;
    el("svg:text", { x: left - 6, y: y + 12, class: "ovkit-label", "text-anchor": "end" }, svg, d.name);
    const g = el("svg:g", { "data-device": d.name }, svg);
    el("svg:rect", { x: left, y, width: barW, height: 14, class: "ovkit-free" }, g);
    const used = el("svg:rect", { x: left, y, width: 0, height: 14, class: "ovkit-used" }, g);
    const label = el("svg:text", { x: left + barW + 6, y: y + 12, class: "ovkit-value" }, svg);
    return { g, used, label, d };
  });
  return (tick) => {
    rows.forEach((r, i) => {
      const [total, used, free, scale] = tick.devices[i] || [null, null, null, 1];
      if (total === null) {
        r.used.setAttribute("width", 0);
        r.label.textContent = "unknown";
        setTitle(r.g, r.d.explain);
        return;
      }
      const unit = [unitName(meta.units, scale), scale];
      const frac = total ? Math.min(1, used / total) : 0;
      r.used.setAttribute("width", (barW * frac).toFixed(1));
      r.label.textContent = `${fmtBytes(meta.units, used, unit)} of ${fmtBytes(meta.units, total, unit)}`;
      setTitle(r.g, `${r.d.name}: used ${fmtBytes(meta.units, used, unit)}, free ${fmtBytes(meta.units, free, unit)}\n${r.d.explain}`);
    });
  };
}

// decimals that label every multiple of step exactly (axes.tick_digits)
function tickDigits(step) {
  for (let d = 0; d < 4; d++) if (Math.abs(step * 10 ** d - Math.round(step * 10 ** d)) < 1e-9) return d;
  return 3;
}

function xTicks(svg, axis, units, x0, width, y0, height, horizontal) {
  const [top, step, scale] = axis;
  const g = el("svg:g", { class: "ovkit-axis" }, svg);
  const n = Math.round(top / step);
  const digits = tickDigits(step / scale);
  for (let k = 0; k <= n; k++) {
    const label = num((k * step) / scale, digits);
    if (horizontal) {
      const x = x0 + (width * k) / n;
      el("svg:line", { x1: x, x2: x, y1: y0, y2: y0 + height, class: "ovkit-grid" }, g);
      el("svg:text", { x, y: y0 + height + 11, "text-anchor": "middle", class: "ovkit-tick" }, g, label);
    } else {
      const y = y0 + height - (height * k) / n;
      el("svg:line", { x1: x0, x2: x0 + width, y1: y, y2: y, class: "ovkit-grid" }, g);
      el("svg:text", { x: x0 - 4, y: y + 3, "text-anchor": "end", class: "ovkit-tick" }, g, label);
    }
  }
  return unitName(units, scale);
}

const KIND_CLASSES = 6;

function buildBreakdown(root, meta) {
  const box = panel(root, "This process: OpenVINO allocations by type, and RSS", "ovkit-breakdown");
  const names = meta.devices.map((d) => d.name);
  const W = 440, left = 120, plotW = 230, rowH = 20;
  const legend = el("div", { class: "ovkit-legend" }, box);
  [...meta.kinds, "rss"].forEach((k, j) => {
    const item = el("span", { class: "ovkit-legend-item" }, legend);
    el("span", { class: `ovkit-swatch ovkit-kind-${j % KIND_CLASSES}` }, item);
    item.appendChild(document.createTextNode(k === "rss" ? "process RSS" : k));
  });
  const svg = el("svg:svg", { width: W, height: 0, class: "ovkit-breakdown-svg" }, box);
  let shape = "";
  let draw = null;
  return (tick) => {
    const rows = [];
    tick.breakdown.forEach((vals, i) => {
      if (vals.some((v) => v > 0) || meta.devices[i].cls !== "CPU") rows.push([names[i], vals.map((v, j) => [j, v])]);
    });
    rows.push([meta.rss_label, [[meta.kinds.length, tick.rss]]]);
    const key = JSON.stringify([rows.map((r) => r[0]), tick.breakdown_axis]);
    if (key !== shape) {
      shape = key;
      while (svg.firstChild) svg.removeChild(svg.firstChild);
      const H = rows.length * rowH;
      svg.setAttribute("height", H + 30);
      svg.setAttribute("data-top", tick.breakdown_axis[0]);
      const unit = xTicks(svg, tick.breakdown_axis, meta.units, left, plotW, 2, H, true);
      el("svg:text", { x: left + plotW / 2, y: H + 27, "text-anchor": "middle", class: "ovkit-tick" }, svg, unit);
      draw = rows.map((r, i) => {
        el("svg:text", { x: left - 6, y: 2 + i * rowH + 13, "text-anchor": "end", class: "ovkit-label" }, svg, r[0]);
        const segs = r[1].map(([j]) => el("svg:rect", { y: 4 + i * rowH, height: 12, class: `ovkit-kind-${j % KIND_CLASSES}` }, svg));
        const total = el("svg:text", { y: 2 + i * rowH + 13, class: "ovkit-value" }, svg);
        return { segs, total };
      });
    }
    const [top] = tick.breakdown_axis;
    rows.forEach((r, i) => {
      let x = 0;
      r[1].forEach(([j, v], s) => {
        const w = (plotW * v) / top;
        const seg = draw[i].segs[s];
        seg.setAttribute("x", (left + x).toFixed(1));
        seg.setAttribute("width", Math.max(0, w).toFixed(1));
        const kind = j < meta.kinds.length ? meta.kinds[j] : "process RSS";
        setTitle(seg, `${r[0]} ${kind}: ${fmtBytes(meta.units, v)}`);
        x += w;
      });
      const sum = r[1].reduce((a, [, v]) => a + v, 0);
      draw[i].total.setAttribute("x", (left + Math.min(x, plotW) + 4).toFixed(1));
      draw[i].total.textContent = sum > 0 ? fmtBytes(meta.units, sum) : "none";
    });
  };
}

function buildHistory(root, meta, model) {
  const box = panel(root, "Used memory over time (each device on its own axis)", "ovkit-history");
  const grid = el("div", { class: "ovkit-history-grid" }, box);
  const W = 300, H = 128, left = 44, right = 8, top = 16, bottom = 18;
  const pw = W - left - right, ph = H - top - bottom;
  const charts = meta.devices.map((d, j) => {
    const cell = el("div", { class: "ovkit-history-cell" }, grid);
    el("div", { class: "ovkit-history-title", title: d.explain }, cell, `${d.name} · ${d.rule}`);
    const svg = el("svg:svg", { width: W, height: H, class: "ovkit-history-svg", "data-device": d.name }, cell);
    const axisG = el("svg:g", {}, svg);
    const line = el("svg:polyline", { class: "ovkit-line", fill: "none" }, svg);
    const cursor = el("svg:line", { class: "ovkit-cursor", y1: top, y2: top + ph, visibility: "hidden" }, svg);
    const readout = el("svg:text", { class: "ovkit-readout", x: left + pw, y: 9, "text-anchor": "end" }, svg);
    const hit = el("svg:rect", { x: left, y: top, width: pw, height: ph, fill: "transparent" }, svg);
    const state = { svg, axisG, line, cursor, readout, axisKey: "", hover: null, pts: [] };
    hit.addEventListener("mousemove", (ev) => {
      state.hover = ev.clientX - svg.getBoundingClientRect().left;
      showHover(state);
    });
    hit.addEventListener("mouseleave", () => {
      state.hover = null;
      showHover(state);
    });
    return state;
  });
  function showHover(s) {
    if (s.hover === null || !s.pts.length) {
      s.cursor.setAttribute("visibility", "hidden");
      s.readout.textContent = "";
      return;
    }
    let best = s.pts[0];
    for (const p of s.pts) if (Math.abs(p[0] - s.hover) < Math.abs(best[0] - s.hover)) best = p;
    s.cursor.setAttribute("x1", best[0]);
    s.cursor.setAttribute("x2", best[0]);
    s.cursor.setAttribute("visibility", "visible");
    s.readout.textContent = `${num(best[2], 1)} s: ${fmtBytes(meta.units, best[3])}`;
  }
  return (tick) => {
    const view = model.get("history");
    const buf = view ? new Float64Array(view.buffer.slice(view.byteOffset, view.byteOffset + view.byteLength)) : new Float64Array();
    const cols = 1 + meta.devices.length;
    const n = Math.floor(buf.length / cols);
    const tEnd = n ? buf[(n - 1) * cols] : 0;
    const win = tick.window_s;
    charts.forEach((s, j) => {
      const axis = tick.history_axes[j];
      const key = JSON.stringify(axis) + win;
      if (key !== s.axisKey) {
        s.axisKey = key;
        while (s.axisG.firstChild) s.axisG.removeChild(s.axisG.firstChild);
        const unit = xTicks(s.axisG, axis, meta.units, left, pw, top, ph, false);
        el("svg:text", { x: left - 4, y: 9, "text-anchor": "end", class: "ovkit-tick" }, s.axisG, unit);
        el("svg:text", { x: left, y: H - 4, class: "ovkit-tick" }, s.axisG, `−${win} s`);
        el("svg:text", { x: left + pw, y: H - 4, "text-anchor": "end", class: "ovkit-tick" }, s.axisG, "now");
        s.svg.setAttribute("data-top", axis[0]);
        s.svg.setAttribute("data-unit", unitName(meta.units, axis[2]));
      }
      const pts = [];
      for (let i = 0; i < n; i++) {
        const t = buf[i * cols], v = buf[i * cols + 1 + j];
        if (Number.isNaN(v) || tEnd - t > win) continue;
        const x = left + pw * (1 - (tEnd - t) / win);
        const y = top + ph * (1 - Math.min(1, v / axis[0]));
        pts.push([x, y, t - tEnd, v]);
      }
      s.pts = pts;
      s.line.setAttribute("points", pts.map((p) => `${p[0].toFixed(1)},${p[1].toFixed(1)}`).join(" "));
      showHover(s);
    });
  };
}

// What the view drew goes back to the kernel, at most every SAVE_EVERY_MS and once after the
// last change, as the notebook's saved picture of this view (ovkit/widgets/saved.py).
const SAVE_EVERY_MS = 2000;

const BUILDERS = { table: buildTable, bars: buildBars, breakdown: buildBreakdown, history: buildHistory };

function render({ model, el: host }) {
  host.classList.add("ovkit-live");
  let updaters = [];
  let pending = false;
  let lastSaved = 0;
  let saveTimer = null;
  const save = () => {
    saveTimer = null;
    lastSaved = Date.now();
    model.send({ kind: "drawn", html: host.outerHTML });
  };
  const scheduleSave = () => {
    if (saveTimer === null) saveTimer = setTimeout(save, Math.max(0, lastSaved + SAVE_EVERY_MS - Date.now()));
  };
  const build = () => {
    host.replaceChildren();
    const meta = model.get("meta");
    if (!meta || !meta.devices) return;
    if (meta.simulated)
      el("div", { class: "ovkit-sim-banner" }, host,
        "SIMULATED device set (ovkit.simulate): not this machine's devices; everything runs on this host's CPU");
    el("div", { class: "ovkit-live-error" }, host);
    const charts = el("div", { class: "ovkit-charts-grid" }, null);
    updaters = model.get("panels").map((p) => BUILDERS[p](p === "table" ? host : charts, meta, model));
    if (charts.childNodes.length) host.appendChild(charts);
    update();
  };
  const update = () => {
    pending = false;
    const tick = model.get("tick") || {};
    const err = host.querySelector(".ovkit-live-error");
    if (err) err.textContent = tick.error || "";
    if (!tick.devices) return;
    for (const u of updaters) u(tick);
    host.setAttribute("data-seq", String(tick.seq));
    scheduleSave();
  };
  const schedule = () => {
    if (!pending) {
      pending = true;
      requestAnimationFrame(update);
    }
  };
  model.on("change:meta", build);
  model.on("change:panels", build);
  model.on("change:tick", schedule);
  build();
  return () => {
    model.off("change:meta", build);
    model.off("change:panels", build);
    model.off("change:tick", schedule);
    if (saveTimer !== null) clearTimeout(saveTimer);
  };
}

export default { render };
