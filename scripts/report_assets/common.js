// What the report pages share (scripts/report_html.py's report.html, compare_profiles.py's comparison page):
// the embedded data, number formats, sortable tables and Plotly charts. Nothing here fetches anything.
"use strict";

const DATA = JSON.parse(document.getElementById("report-data").textContent);
const PLOT_CONFIG = {displaylogo: false, responsive: true, modeBarButtonsToRemove: ["select2d", "lasso2d"]};
const PALETTE = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
                 "#bcbd22", "#17becf", "#393b79", "#ad494a", "#637939", "#8c6d31", "#843c39", "#7b4173",
                 "#3182bd", "#e6550d", "#31a354", "#756bb1"];
const PHASE_COLORS = {fwd: "#1f77b4", bwd: "#ff7f0e", opt: "#2ca02c", prefill: "#9467bd", decode: "#d62728",
                      "(none)": "#7f7f7f", comm: "#8c564b"};

// An element with attributes (class, text, title, data-*, on*: handlers) and children (nodes or strings).
function el(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined) continue;
    if (k === "text") e.textContent = v;
    else if (k.startsWith("on")) e.addEventListener(k.slice(2), v);
    else e.setAttribute(k, v);
  }
  for (const c of children) if (c !== null && c !== undefined) e.append(c);
  return e;
}

function isNum(v) { return typeof v === "number" && isFinite(v); }

// v to `digits` significant digits (thousands grouped); "-" where unknown.
function fmt(v, digits = 3) {
  if (!isNum(v)) return "-";
  if (v === 0) return "0";
  const a = Math.abs(v);
  if (a >= Math.pow(10, digits)) return Math.round(v).toLocaleString("en-US");
  return Number(v.toPrecision(digits)).toString();
}

function fmtPct(v) { return isNum(v) ? v.toFixed(1) + "%" : "-"; }

// Bytes in KiB, MiB, GiB.
function fmtBytes(b) {
  if (!isNum(b)) return "-";
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  while (Math.abs(b) >= 1024 && i < units.length - 1) b /= 1024, i++;
  return (i ? b.toFixed(b >= 100 ? 0 : b >= 10 ? 1 : 2) : b.toString()) + " " + units[i];
}

// Microseconds as µs, ms or s.
function fmtUs(us) {
  if (!isNum(us)) return "-";
  if (Math.abs(us) >= 1e6) return fmt(us / 1e6) + " s";
  if (Math.abs(us) >= 1e3) return fmt(us / 1e3) + " ms";
  return fmt(us) + " µs";
}

// The content box of a section, or null where the page has no such section.
function content(id) { return document.getElementById(id + "-content"); }

// A headline figure: its name, its value and a line under it.
function card(key, value, sub, title = null) {
  return el("div", {class: "card", title: title}, el("div", {class: "k", text: key}), el("div", {class: "v", text: value}),
            sub ? el("div", {class: "s", text: sub}) : null);
}

function note(text) { return el("p", {class: "note", text: text}); }

// A table of rows (objects). columns: [{key, label, fmt (value -> text), text (left-aligned), title, cls}].
// sortable: clicking a heading sorts by that column (descending first for numbers), again reverses it.
function table(columns, rows, {sortable = false, id = null, extra = null} = {}) {
  const t = el("table", {class: sortable ? "sortable" : null, id: id});
  const head = el("tr");
  const body = el("tbody");
  const render = (list) => {
    body.replaceChildren(...list.map((r) => el("tr", {}, ...columns.map((c) => {
      const v = r[c.key];
      const text = c.fmt ? c.fmt(v, r) : (v === null || v === undefined ? "-" : String(v));
      return el("td", {class: c.cls || (c.text ? "text" : null), title: c.title ? String(v) : null,
                       "data-value": isNum(v) ? String(v) : null, text: text});
    }))));
    if (extra) body.append(extra);
  };
  columns.forEach((c, i) => {
    const th = el("th", {class: c.text ? "text" : null, text: c.label, "data-key": c.key});
    if (sortable) th.addEventListener("click", () => {
      const asc = th.getAttribute("aria-sort") === "descending" || (c.text && !th.hasAttribute("aria-sort"));
      head.querySelectorAll("th").forEach((h) => h.removeAttribute("aria-sort"));
      th.setAttribute("aria-sort", asc ? "ascending" : "descending");
      const key = (r) => r[columns[i].key];
      const cmp = (a, b) => {
        const x = key(a), y = key(b);
        if (isNum(x) && isNum(y)) return x - y;
        if (!isNum(x) && isNum(y)) return asc ? 1 : -1; // unknowns last either way
        if (isNum(x) && !isNum(y)) return asc ? -1 : 1;
        return String(x ?? "").localeCompare(String(y ?? ""));
      };
      render(rows.slice().sort((a, b) => (asc ? cmp(a, b) : -cmp(a, b))));
    });
    head.append(th);
  });
  t.append(el("thead", {}, head), body);
  render(rows);
  return t;
}

// Charts waiting for Plotly: the page shows its text and tables first, then runs Plotly's code (embedded as the
// text of <script id="plotly-js">, a second of CPU) once that first screen is painted, then draws the charts.
const pendingCharts = [];

// A Plotly chart in a new box appended to parent (its height reserved at once); layout merged over the pages'
// defaults; then(box) runs once it is drawn.
function plot(parent, traces, layout, height = 380, then = null) {
  const box = el("div", {class: "plot", style: `min-height: ${height}px`});
  parent.append(box);
  const base = {height: height, margin: {l: 70, r: 20, t: 36, b: 60}, font: {size: 12},
                legend: {font: {size: 11}}, hoverlabel: {namelength: -1}, paper_bgcolor: "#fff", plot_bgcolor: "#fff"};
  const draw = () => Plotly.newPlot(box, traces, Object.assign(base, layout), PLOT_CONFIG).then(() => then && then(box));
  if (window.Plotly) draw();
  else pendingCharts.push(draw);
  return box;
}

// Runs Plotly's code after the next paint and draws the charts that wait for it; then marks the page
// (<body data-charts="drawn">).
function loadPlotlyAfterPaint() {
  requestAnimationFrame(() => setTimeout(() => {
    const code = document.createElement("script");
    code.text = document.getElementById("plotly-js").textContent;
    document.head.append(code); // runs it: Plotly's code, from the page itself
    Promise.all(pendingCharts.splice(0).map((draw) => draw())).then(() => {
      performance.mark("charts-drawn");
      document.body.dataset.charts = "drawn";
    });
  }, 0));
}

// An axis title with its unit.
function axis(title, extra) { return Object.assign({title: {text: title}, automargin: true, gridcolor: "#e6e9ee"}, extra || {}); }

// A colour per name, in the order first asked.
function colorMap() {
  const m = new Map();
  return (name) => {
    if (!m.has(name)) m.set(name, PALETTE[m.size % PALETTE.length]);
    return m.get(name);
  };
}

// Draws each section of the page that `render` names ({id: (box, data) => ...}) with data[id]: those on the first
// screens at once, the others as they come near the screen (a chart costs a tenth of a second or more to draw, so
// the page opens with what is in view), and all of them before printing. A drawn section has data-drawn="1".
function drawSections(render, data) {
  const draw = (section) => {
    if (section.dataset.drawn) return;
    section.dataset.drawn = "1";
    render[section.id](content(section.id), data[section.id]);
  };
  const sections = Object.keys(render).map((id) => document.getElementById(id)).filter((s) => s);
  const observer = new IntersectionObserver((entries) => entries.forEach((e) => {
    if (e.isIntersecting) observer.unobserve(e.target), draw(e.target);
  }), {rootMargin: "300px 0px"});
  for (const s of sections) {
    if (s.getBoundingClientRect().top < 1.5 * window.innerHeight) draw(s);
    else observer.observe(s);
  }
  window.addEventListener("beforeprint", () => sections.forEach(draw));
  loadPlotlyAfterPaint();
}
