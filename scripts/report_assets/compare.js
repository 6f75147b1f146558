// The comparison page (scripts/compare_profiles.py): two profiles' sub-block times side by side, from the embedded
// data (common.js's DATA).

const COMPARE_COLUMNS = (unit) => [{key: "subblock", label: "sub-block", text: true}, {key: "phase", label: "phase", text: true},
  {key: "a", label: "A " + unit, fmt: (v) => fmt(v, 4)}, {key: "b", label: "B " + unit, fmt: (v) => fmt(v, 4)},
  {key: "ratio", label: "A/B", fmt: (v) => (isNum(v) ? v.toFixed(3) : "-")}];

function renderComparison(box, d) {
  const ctx = (c) => `${c.program || "?"} on ${c.device || "?"}`;
  box.append(el("div", {class: "cards"}, card("A", d.a.name, ctx(d.a.context)), card("B", d.b.name, ctx(d.b.context))));
  if (d.warning) box.append(el("ul", {class: "warnings"}, el("li", {text: "warning: " + d.warning})));
  box.append(note("Totals (" + d.unit + "):"), table(COMPARE_COLUMNS(d.unit), d.totals));
}

function renderRows(box, d) {
  const labels = d.rows.map((r) => `${r.subblock} ${r.phase}`);
  const trace = (key, name, color) => ({type: "bar", orientation: "h", name: name, y: labels,
    x: d.rows.map((r) => r[key] || 0), marker: {color: color},
    hovertemplate: "%{y}: %{x:.4g} " + d.unit + "<extra>" + key.toUpperCase() + "</extra>"});
  const any = d.rows.some((r) => r.a > 0 || r.b > 0);
  plot(box, [trace("a", "A: " + d.a.label, "#1f77b4"), trace("b", "B: " + d.b.label, "#ff7f0e")],
       {barmode: "group", height: Math.max(360, 22 * d.rows.length + 140),
        title: {text: "Sub-block time, A against B", font: {size: 13}},
        xaxis: axis(d.unit, any ? {type: "log"} : {}), yaxis: axis("", {autorange: "reversed", automargin: true}),
        legend: {orientation: "h", y: 1.02, x: 0, yanchor: "bottom"}, margin: {l: 130, r: 20, t: 70, b: 50}});
  box.append(note("Click a heading to sort."), table(COMPARE_COLUMNS(d.unit), d.rows, {sortable: true, id: "compare-table"}));
}

drawSections({comparison: renderComparison, rows: renderRows}, {comparison: DATA, rows: DATA});
