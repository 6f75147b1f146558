// report.html (scripts/report_html.py): each section drawn from the embedded data (common.js's DATA), where the
// page has the section.

const subblockColor = colorMap();
const PHASE_NAMES = {fwd: "forward", bwd: "backward", opt: "optimizer", prefill: "prefill", decode: "decode"};

function renderHeader(box, h) {
  const m = h.model || {}, b = h.batch || {}, w = h.window || {}, ce = h.ceilings || {};
  // The device is in the page's title.
  const cards = [card("program", h.program || "-", `on a ${h.device_kind || "device"}`, h.build)];
  cards.push(card("model", `L=${m.num_layers} NH=${m.num_heads} C=${m.channels}`,
                  isNum(m.num_parameters) ? fmt(m.num_parameters / 1e6) + "M parameters" : ""));
  if (h.inference) {
    const i = h.inference;
    cards.push(card("batch", `${i.sequences} sequences`, `${i.prompt_tokens} prompt tokens, ${i.decode_tokens} generated`));
  } else {
    const tokens = b.B * b.T * (b.grad_accum || 1);
    cards.push(card("batch and sequence", `B=${b.B} T=${b.T}`,
                    `grad accum ${b.grad_accum || 1}: ${isNum(tokens) ? tokens.toLocaleString("en-US") : "-"} tokens/step`));
  }
  cards.push(card("step time", isNum(h.step_ms) ? fmt(h.step_ms) + " ms" : "-", "wall time per step, mean"));
  cards.push(card("throughput", isNum(h.tokens_per_s) ? fmt(h.tokens_per_s) + " tok/s" : "-", "over the window"));
  cards.push(card("MFU", fmtPct(h.mfu_pct), "model FLOPs / " + (h.device_kind === "GPU" ? "bf16" : "matmul") + " ceiling"));
  cards.push(card("energy per token", isNum(h.j_per_token) ? fmt(h.j_per_token * 1e3) + " mJ" : "-",
                  isNum(h.j_per_token) ? "" : "no power reading"));
  const range = w.first_step === w.last_step ? `step ${w.first_step}` : `steps ${w.first_step}-${w.last_step}`;
  cards.push(card("profile window", range, `${w.steps} step${w.steps === 1 ? "" : "s"}, ` +
                  (isNum(w.wall_s) ? fmt(w.wall_s * 1e3) + " ms" : "-")));
  cards.push(card("ceilings", `${fmt(ce.bf16_tflops)} TFLOP/s`,
                  `${h.device_kind === "GPU" ? "bf16" : "matmul"}; fp32 ${fmt(ce.fp32_tflops)} TFLOP/s; ` +
                  `memory ${fmt(ce.dram_gbps)} GB/s`, h.ceilings_source));
  if (h.world_size > 1) cards.push(card("data parallel", `rank ${h.rank} of ${h.world_size}`, "this rank's profile"));
  box.append(el("div", {class: "cards"}, ...cards));
  if (h.warnings.length)
    box.append(el("ul", {class: "warnings"}, ...h.warnings.map((t) => el("li", {text: "warning: " + t}))));
}

function renderFindings(box, list) {
  box.append(note("Ranked by the time at stake per step (an estimate that ranks, not a promise); each links to " +
                  "the section that shows it."));
  box.append(el("ol", {class: "findings"}, ...list.map((f) => el("li", {},
    el("a", {href: "#" + f.section, class: "rule", text: f.rule}), " ", el("strong", {text: f.what}), " ",
    el("span", {class: "stake", text: isNum(f.ms_per_step) ? `~${fmt(f.ms_per_step)} ms per step at stake` : ""}),
    el("div", {class: "note", text: "evidence: " + (f.evidence || "-")}),
    el("div", {class: "note", text: "next step: " + (f.next_step || "-")})))));
}

const SUBBLOCK_COLUMNS = [
  {key: "subblock", label: "sub-block", text: true}, {key: "phase", label: "phase", text: true},
  {key: "ms_per_step", label: "ms/step", fmt: (v) => fmt(v, 4)}, {key: "pct", label: "share", fmt: fmtPct},
  {key: "flops", label: "GFLOP", fmt: (v) => fmt(v / 1e9)}, {key: "bytes", label: "MB", fmt: (v) => fmt(v / 1e6)},
  {key: "tflops", label: "TFLOP/s", fmt: (v) => fmt(v)}, {key: "gbps", label: "GB/s", fmt: (v) => fmt(v)},
  {key: "intensity", label: "FLOP/B", fmt: (v) => fmt(v)}, {key: "pct_of_roofline", label: "% of ceiling", fmt: fmtPct},
  {key: "bound", label: "bound", text: true}];

function renderSubblocks(box, rows, phases) {
  const names = [...new Set(rows.map((r) => r.subblock))];
  const inference = phases.includes("prefill");
  const traces = phases.map((ph) => ({
    type: "bar", name: PHASE_NAMES[ph] || ph, x: names, marker: {color: PHASE_COLORS[ph]},
    y: names.map((n) => (rows.find((r) => r.subblock === n && r.phase === ph) || {}).ms_per_step || 0),
    hovertemplate: "%{x} " + ph + ": %{y:.4g} ms<extra></extra>"})).filter((t) => t.y.some((v) => v > 0));
  plot(box, traces, {barmode: inference ? "group" : "stack", title: {text: inference
    ? "Time per step of its phase (prefill: one step of every prompt; decode: one token per sequence)"
    : "Time per step, stacked by phase", font: {size: 13}},
    xaxis: axis("sub-block", {tickangle: -40}), yaxis: axis(inference ? "ms per step of its phase" : "ms per step")}, 340);
  box.append(note("Click a heading to sort. ms/step: time per step of the row's phase; share: of all " +
                  "sub-block time in the window; GFLOP and MB: the analytic work of one step; % of ceiling: the " +
                  "roofline floor over the time."));
  box.append(el("div", {class: "scroll"}, table(SUBBLOCK_COLUMNS, rows, {sortable: true, id: "subblock-table"})));
}

// One roofline trace per point kind: hover names the point and gives its numbers.
function rooflineTrace(points, kind, name, marker) {
  const sel = points.filter((p) => p.kind === kind);
  return {type: "scatter", mode: "markers", name: name, x: sel.map((p) => p.intensity), y: sel.map((p) => p.flops_per_s),
          marker: marker, text: sel.map((p) => p.name), meta: kind,
          customdata: sel.map((p) => [fmt(p.flops_per_s / 1e12), fmt(p.seconds * 1e3, 4), fmtPct(p.pct_of_roofline),
                                      p.bound || "-", p.subblock || ""]),
          hovertemplate: "<b>%{text}</b><br>%{x:.3g} FLOP/B, %{customdata[0]} TFLOP/s<br>%{customdata[1]} ms, " +
                         "%{customdata[2]} of ceiling, %{customdata[3]}-bound<br>%{customdata[4]}<extra></extra>"};
}

function roofLines(r, lo, hi) {
  const bw = (r.ceilings.dram_gbps || 0) * 1e9, lines = [];
  const peaks = [[r.ceilings.bf16_tflops, r.matmul]];
  if (r.ceilings.fp32_tflops && r.ceilings.fp32_tflops !== r.ceilings.bf16_tflops) peaks.push([r.ceilings.fp32_tflops, "fp32"]);
  for (const [tf, name] of peaks) {
    if (!(tf > 0 && bw > 0)) continue;
    const ridge = tf * 1e12 / bw;
    lines.push({type: "scatter", mode: "lines", name: `${name} ${fmt(tf)} TFLOP/s (ridge ${fmt(ridge)} FLOP/B)`,
                x: [lo, ridge, hi], y: [bw * lo, tf * 1e12, tf * 1e12], hoverinfo: "skip", line: {width: 2}});
  }
  if (bw > 0) lines.push({type: "scatter", mode: "lines", name: `memory ${fmt(bw / 1e9)} GB/s`, x: [lo, hi],
                          y: [bw * lo, bw * hi], hoverinfo: "skip", line: {dash: "dot", color: "#888", width: 1}});
  return lines;
}

function renderRoofline(box, r) {
  const xs = r.points.map((p) => p.intensity);
  let lo = Math.min(...xs) / 4, hi = Math.max(...xs) * 4;
  for (const tf of [r.ceilings.bf16_tflops, r.ceilings.fp32_tflops]) {
    const ridge = tf * 1e12 / ((r.ceilings.dram_gbps || 0) * 1e9);
    if (isNum(ridge) && ridge > 0) lo = Math.min(lo, ridge / 10), hi = Math.max(hi, ridge * 10);
  }
  const hasKernels = r.points.some((p) => p.kind === "kernel");
  const traces = roofLines(r, lo, hi).concat([
    rooflineTrace(r.points, "subblock", "sub-blocks (analytic FLOPs and bytes)", {size: 9, symbol: "circle"}),
    rooflineTrace(r.points, "counted", "sub-blocks (hardware counters, kernel replay)", {size: 9, symbol: "diamond-open"}),
    Object.assign(rooflineTrace(r.points, "kernel", "kernels (hardware counters, kernel replay)", {size: 8, symbol: "x"}),
                  {visible: false})]).filter((t) => t.meta === undefined || t.x.length);
  const buttons = el("div", {class: "toggle", id: "roofline-toggle"});
  const chart = el("div");
  box.append(buttons, chart);
  const show = (div, view) => {
    Plotly.restyle(div, {visible: traces.map((t) => t.meta === undefined || (view === "kernels") === (t.meta === "kernel"))});
    buttons.querySelectorAll("button").forEach((b) => b.classList.toggle("on", b.dataset.view === view));
  };
  // The toggle works once the chart is drawn.
  plot(chart, traces, {height: 520, hovermode: "closest",
    title: {text: "Achieved FLOP/s against the measured ceilings", font: {size: 13}},
    xaxis: axis("arithmetic intensity (FLOP / byte, analytic)", {type: "log"}),
    yaxis: axis("achieved FLOP/s", {type: "log", exponentformat: "SI"}), legend: {x: 0.01, y: 0.99, bgcolor: "rgba(255,255,255,0.8)"}},
    520, (div) => {
      for (const [view, label] of [["subblocks", "sub-blocks"], ["kernels", "kernels"]])
        buttons.append(el("button", {"data-view": view, text: label, disabled: view === "kernels" && !hasKernels ? "" : null,
                                     onclick: () => show(div, view)}));
      buttons.firstChild.classList.add("on");
    });
  box.append(note(hasKernels ? "Kernels: each kernel's counted FLOPs and DRAM bytes under kernel replay (profile_gpt2cu --counters)."
    : "No per-kernel points: kernels get FLOPs and bytes from hardware counters (profile_gpt2cu --counters)."));
}

function renderTimeline(box, t) {
  const s = t.strings, byGroup = new Map();
  const end = Math.max(...t.events.map((e) => e[1] + e[2]));
  const [scale, unit] = end > 2e4 ? [1e-3, "ms"] : [1, "µs"]; // a CPU step is long
  for (const [track, start, dur, name, group] of t.events) {
    const sub = s[group].split(" ")[0];
    if (!byGroup.has(sub)) byGroup.set(sub, []);
    byGroup.get(sub).push([track, start, dur, name, group]);
  }
  const traces = [...byGroup.entries()].map(([sub, evs]) => ({
    type: "bar", orientation: "h", name: sub, marker: {color: subblockColor(sub)},
    y: evs.map((e) => t.tracks[e[0]]), base: evs.map((e) => e[1] * scale), x: evs.map((e) => e[2] * scale),
    text: evs.map((e) => s[e[3]]), customdata: evs.map((e) => [s[e[4]], fmtUs(e[1]), fmtUs(e[2])]), textposition: "none",
    hovertemplate: "<b>%{text}</b><br>%{customdata[0]}<br>at %{customdata[1]}, lasting %{customdata[2]}<extra></extra>"}));
  plot(box, traces, {barmode: "overlay", bargap: 0.3, height: 230 + 50 * t.tracks.length,
    title: {text: `Step ${t.step} (the median step): kernels per stream, coloured by sub-block; drag to zoom`, font: {size: 13}},
    xaxis: axis(unit + " from the step's start"), yaxis: axis("", {automargin: true}),
    legend: {orientation: "h", y: -0.45, traceorder: "normal"}, margin: {l: 70, r: 20, t: 36, b: 100}});
  if (t.note) box.append(note(t.note));
  box.append(note("The whole trace (CPU ranges, CUDA calls, launch arrows, every step) is trace.json in the " +
                  "profile directory: open it in Perfetto (ui.perfetto.dev, \"Open trace file\") or chrome://tracing."));
}

const KERNEL_COLUMNS = [
  {key: "kernel", label: "kernel", text: true, cls: "name text", title: true},
  {key: "subblock", label: "sub-block", text: true}, {key: "phase", label: "phase", text: true},
  {key: "category", label: "category", text: true}, {key: "calls", label: "calls", fmt: (v) => fmt(v, 6)},
  {key: "total_us", label: "total", fmt: fmtUs}, {key: "avg_us", label: "average", fmt: fmtUs},
  {key: "pct", label: "% of device time", fmt: fmtPct}];

function renderKernels(box, k) {
  const cats = k.by_category;
  plot(box, [{type: "bar", orientation: "h", y: cats.map((c) => c[0]).reverse(), x: cats.map((c) => c[1] / 1e3 / k.steps).reverse(),
              marker: {color: "#6a51a3"}, hovertemplate: "%{y}: %{x:.4g} ms per step<extra></extra>"}],
       {height: 120 + 26 * cats.length, title: {text: "Time by kernel category", font: {size: 13}},
        xaxis: axis("ms per step"), yaxis: axis("category"), margin: {l: 110, r: 20, t: 36, b: 50}});
  let extra = null;
  if (k.other) {
    extra = el("tr", {class: "aggregated"}, el("td", {class: "text", text: `${k.other.rows} more kernel rows, aggregated`}),
               el("td"), el("td"), el("td"), el("td", {text: fmt(k.other.calls, 6)}), el("td", {text: fmtUs(k.other.total_us)}),
               el("td"), el("td", {text: fmtPct(k.other.pct)}));
  }
  box.append(table(KERNEL_COLUMNS, k.top, {sortable: true, id: "kernel-table", extra: extra}));
  box.append(note(k.other ? `The ${k.top.length} rows with the most time of ${k.rows}; the other ${k.other.rows} are ` +
                            "aggregated in the last row (kernels.csv has every row)."
                          : `All ${k.rows} rows of kernels.csv (one per kernel, sub-block and phase).`));
}

const API_COLUMNS = [{key: "api", label: "call", text: true, cls: "name text"}, {key: "calls", label: "calls", fmt: (v) => fmt(v, 6)},
  {key: "total_us", label: "total", fmt: fmtUs}, {key: "avg_us", label: "average", fmt: fmtUs},
  {key: "pct_of_cpu_time", label: "% of window", fmt: fmtPct}];
const GAP_COLUMNS = [{key: "name", label: "", text: true}, {key: "gaps", label: "gaps", fmt: (v) => fmt(v, 6)},
  {key: "total_us", label: "total", fmt: fmtUs}, {key: "avg_us", label: "average", fmt: fmtUs}, {key: "pct", label: "% of idle", fmt: fmtPct}];
const LARGEST_COLUMNS = [{key: "step", label: "step"}, {key: "offset_us", label: "at", fmt: fmtUs},
  {key: "dur_us", label: "gap", fmt: fmtUs}, {key: "api", label: "CUDA call", text: true},
  {key: "outside_api_us", label: "outside calls", fmt: fmtUs}, {key: "range", label: "CPU range", text: true}];

function renderApi(box, a) {
  if (a.api.length) {
    box.append(el("h3", {text: `CUDA calls (${fmtPct(a.api_pct_of_cpu_time)} of the window inside one)`}));
    box.append(table(API_COLUMNS, a.api, {sortable: true}));
  }
  if (a.syncs.length) {
    box.append(el("h3", {text: `Synchronisation (${fmtPct(a.sync_pct_of_cpu_time)} of the window blocked)`}));
    box.append(table(API_COLUMNS, a.syncs, {sortable: true}));
  }
  const idle = a.idle;
  if (idle && idle.gaps) {
    box.append(el("h3", {text: `GPU idle: ${fmtUs(idle.idle_us)} in ${idle.gaps} gaps over the window`}));
    const row = el("div", {class: "row"});
    row.append(el("div", {}, note("by size"), table(GAP_COLUMNS, idle.by_size)),
               el("div", {}, note("by what the CPU was doing"), table(GAP_COLUMNS, idle.by_cpu_activity)));
    box.append(row, note("The largest gaps (offset from the step's start):"), table(LARGEST_COLUMNS, idle.largest, {sortable: true}));
  }
}

function renderMemory(box, m) {
  box.append(el("div", {class: "cards"}, card("planned", fmtBytes(m.planned_bytes), "allocated up front"),
    card("live at the step's peak", fmtBytes(m.live_peak.bytes), m.live_peak.op ? "at " + m.live_peak.op : ""),
    card("caching allocator (model)", fmtBytes(m.caching_reserved_bytes), "reserved; allocated peak " + fmtBytes(m.caching_allocated_peak_bytes))));
  const kinds = m.kinds.filter((k) => k.bytes > 0);
  const row = el("div", {class: "row"});
  box.append(row);
  const left = el("div"), right = el("div");
  row.append(left, right);
  plot(left, [{type: "bar", x: kinds.map((k) => k.kind), y: kinds.map((k) => k.bytes / 2 ** 20), marker: {color: "#3182bd"},
               customdata: kinds.map((k) => [fmtBytes(k.bytes), k.tensors]),
               hovertemplate: "%{x}: %{customdata[0]} in %{customdata[1]} tensors<extra></extra>"}],
       {title: {text: "The plan by category", font: {size: 13}}, xaxis: axis("category"), yaxis: axis("MiB")}, 340);
  right.append(table([{key: "name", label: "allocation", text: true}, {key: "bytes", label: "size", fmt: fmtBytes},
                      {key: "transient", label: "", text: true, fmt: (v) => (v ? "transient (first step)" : "")}], m.allocations));
  if (m.live) {
    const l = m.live;
    const traces = l.categories.map((c, i) => ({type: "scatter", mode: "lines", stackgroup: "live", name: c,
      x: l.index, y: l.bytes.map((b) => b[i] / 2 ** 20), text: l.ops,
      hovertemplate: c + ": %{y:.4g} MiB<br>%{text}<extra></extra>"}));
    plot(box, traces, {title: {text: "Live bytes through one step, from memory_snapshot.pickle (eager allocation order)",
      font: {size: 13}}, xaxis: axis("allocation or free event"), yaxis: axis("live MiB"), hovermode: "x unified"});
    if (l.every > 1) box.append(note(`${l.events} events: every ${l.every}th is drawn (and the peak).`));
  }
  for (const n of m.notes) box.append(note(n));
}

function renderPower(box, p) {
  const s = p.summary;
  box.append(el("div", {class: "cards"}, card("average power", isNum(s.avg_w) ? fmt(s.avg_w) + " W" : "-", `peak ${fmt(s.peak_w)} W`),
    card("energy", isNum(s.energy_j) ? fmt(s.energy_j) + " J" : "-", s.window_energy_source || ""),
    card("per token", isNum(s.joules_per_token) ? fmt(s.joules_per_token * 1e3) + " mJ" : "-", `${fmt(s.tokens_per_j)} tokens/J`),
    card("FLOP/s per W", isNum(s.flops_per_w) ? fmt(s.flops_per_w / 1e9) + " GFLOP/J" : "-", s.status || "")));
  // Both boxes in the row before either chart is drawn: a chart takes its box's width when drawn.
  const steps = p.steps.filter((q) => isNum(q.energy_j));
  const left = p.samples.length ? el("div") : null, right = steps.length ? el("div") : null;
  box.append(el("div", {class: "row"}, left, right));
  if (left) {
    plot(left, [{type: "scatter", mode: "lines", x: p.samples.map((q) => q[0]), y: p.samples.map((q) => q[1]),
                 line: {color: "#d62728"}, name: "power", hovertemplate: "%{x:.3f} s: %{y:.0f} W<extra></extra>"}],
         {title: {text: "Power over the window", font: {size: 13}}, xaxis: axis("time (s)"), yaxis: axis("power (W)")}, 320);
  }
  if (right) {
    plot(right, [{type: "bar", x: steps.map((q) => String(q.step)), y: steps.map((q) => q.energy_j), marker: {color: "#e6550d"},
                  customdata: steps.map((q) => [fmt(q.avg_power_w), q.energy_source]),
                  hovertemplate: "step %{x}: %{y:.4g} J, %{customdata[0]} W (%{customdata[1]})<extra></extra>"}],
         {title: {text: "Energy per step", font: {size: 13}}, xaxis: axis("step", {type: "category"}), yaxis: axis("energy (J)")}, 320);
  }
  if (p.subblock_energy) renderSubblockEnergy(box, p.subblock_energy);
}

// Joules as mJ below 1 J, else J: [factor, unit] for the values given.
function jouleScale(values) {
  return Math.max(0, ...values.filter(isNum).map(Math.abs)) >= 1 ? [1, "J"] : [1e3, "mJ"];
}

// energy.csv's table: the sub-blocks, then the whole step and idle, in units of `unit` (mJ or J).
function energyColumns(scale, unit) {
  const j = (v) => (isNum(v) ? fmt(v * scale, 4) : "-");
  return [{key: "sub_block", label: "sub-block", text: true}, {key: "phase", label: "phase", text: true},
    {key: "layers", label: "layers", text: true}, {key: "j_per_step", label: unit + "/step", fmt: j},
    {key: "ci95_low", label: "95% interval", fmt: (v, r) => (isNum(r.ci95_low) && isNum(r.ci95_high) ? `${j(r.ci95_low)} to ${j(r.ci95_high)}` : "-")},
    {key: "j_above_idle", label: unit + " above idle", fmt: j}, {key: "watts", label: "W", fmt: (v) => fmt(v)},
    {key: "flop_per_j", label: "GFLOP/J", fmt: (v) => (isNum(v) ? fmt(v / 1e9) : "-")}, {key: "repeats", label: "repeats", fmt: (v) => fmt(v)},
    {key: "seconds", label: "s measured", fmt: (v) => fmt(v)}, {key: "sm_clock_mhz", label: "SM MHz", fmt: (v) => fmt(v, 4)},
    {key: "temp_c", label: "°C", fmt: (v) => fmt(v)}];
}

// Energy per sub-block (--energy): each (sub-block, phase)'s joules per step with its 95% interval, the part above
// idle power as a narrower bar inside, W and FLOP/J on hover and in the table; the idle power and the closure.
function renderSubblockEnergy(box, e) {
  const q = e.rows;
  const [scale, unit] = jouleScale(q.flatMap((r) => [r.j_per_step, r.ci95_high]));
  const x = q.map((r) => `${r.sub_block} ${r.phase}`);
  const y = q.map((r) => (isNum(r.j_per_step) ? r.j_per_step * scale : null));
  const bound = (r, k, sign) => (isNum(r[k]) && isNum(r.j_per_step) ? sign * (r[k] - r.j_per_step) * scale : 0);
  const colors = q.map((r) => PHASE_COLORS[r.phase] || "#7f7f7f");
  const j = (v) => (isNum(v) ? fmt(v * scale, 4) + " " + unit : "-");
  const synthetic = e.synthetic ? " (synthetic: a scripted counter, not measured)" : "";
  box.append(el("h3", {text: "Energy per sub-block" + synthetic}));
  const chart = plot(box, [
    {type: "bar", name: unit + " per step, 95% interval", x: x, y: y, marker: {color: colors, opacity: 0.45},
     error_y: {type: "data", symmetric: false, array: q.map((r) => bound(r, "ci95_high", 1)),
               arrayminus: q.map((r) => bound(r, "ci95_low", -1)), color: "#333", thickness: 1},
     customdata: q.map((r) => [j(r.ci95_low), j(r.ci95_high), fmt(r.watts), j(r.j_above_idle),
                               isNum(r.flop_per_j) ? fmt(r.flop_per_j / 1e9) + " GFLOP/J" : "FLOP/J unknown", r.layers]),
     hovertemplate: "<b>%{x}</b> (layers %{customdata[5]})<br>%{y:.4~g} " + unit + " per step, 95%: %{customdata[0]} to " +
                    "%{customdata[1]}<br>%{customdata[2]} W, %{customdata[3]} above idle, %{customdata[4]}<extra></extra>"},
    {type: "bar", name: unit + " above idle power", x: x, y: q.map((r) => (isNum(r.j_above_idle) ? r.j_above_idle * scale : null)),
     width: q.map(() => 0.4), marker: {color: colors, line: {color: "#000", width: 1}}, hoverinfo: "skip"}],
    {barmode: "overlay", title: {text: `Joules per training step by sub-block and phase${synthetic}`, font: {size: 13}},
     xaxis: axis("sub-block and phase (all its layers)", {tickangle: -40}), yaxis: axis(unit + " per training step"),
     legend: {x: 0.01, y: 0.99, bgcolor: "rgba(255,255,255,0.8)"}});
  chart.id = "energy-chart";
  const c = e.closure;
  box.append(note(`Idle power ${isNum(e.idle_w) ? fmt(e.idle_w) + " W" : "unknown"}. Closure: ` + (c
    ? `the sub-blocks add up to ${fmt(c.sum_j, 4)} J per step against ${fmt(c.step_j, 4)} J for the whole step replayed ` +
      `(${c.diff_pct >= 0 ? "+" : ""}${c.diff_pct.toFixed(1)}%).`
    : "unknown (the whole step's or a sub-block's energy is not known).")));
  box.append(note(`Source: ${e.source || "unknown"}. Each (sub-block, phase) replayed for ` +
    `${isNum(e.window_s) ? fmt(e.window_s) + " s" : "a window"} at a time, ${isNum(e.repeats) ? fmt(e.repeats) : "several"} ` +
    "repetitions interleaved, the interval the 95% one of their mean; the inner bar is what it used above idle power " +
    "over its time (doc/profiling.md, \"Energy per sub-block\")."));
  const rows = q.concat([e.step, e.idle].filter((r) => r));
  box.append(el("div", {class: "scroll"}, table(energyColumns(scale, unit), rows, {sortable: true, id: "energy-table"})));
}

const PHASE_COLUMNS = [{key: "phase", label: "phase", text: true}, {key: "steps", label: "steps"}, {key: "tokens", label: "tokens"},
  {key: "wall_ms", label: "wall ms", fmt: (v) => fmt(v, 4)}, {key: "tok_s", label: "tok/s", fmt: (v) => fmt(v)},
  {key: "intensity", label: "FLOP/B", fmt: (v) => fmt(v)}, {key: "pct_of_roofline", label: "% of ceiling", fmt: fmtPct},
  {key: "bound", label: "bound", text: true}];

function renderInference(box, inf) {
  box.append(el("div", {class: "cards"}, card("time to first token", isNum(inf.ttft_ms) ? fmt(inf.ttft_ms, 4) + " ms" : "-", "the prefill step's wall time"),
    card("sequences", String(inf.sequences), ""), card("KV cache", fmtBytes(inf.kv_cache_bytes), "as allocated")));
  box.append(table(PHASE_COLUMNS, inf.phases));
  const b = inf.decode_buckets;
  if (b.length) {
    plot(box, [{type: "scatter", mode: "lines+markers", x: b.map((r) => (r.first_pos + r.last_pos) / 2), y: b.map((r) => r.ms_per_step),
                customdata: b.map((r) => [r.first_pos, r.last_pos, r.steps, fmt(r.tok_s)]), name: "decode",
                hovertemplate: "context %{customdata[0]}-%{customdata[1]} (%{customdata[2]} steps): %{y:.4g} ms/step, %{customdata[3]} tok/s<extra></extra>"}],
         {title: {text: "Decode step time by context length (the KV cache's cost)", font: {size: 13}},
          xaxis: axis("context (tokens attended)"), yaxis: axis("ms per decode step", {rangemode: "tozero"})}, 340);
  }
}

function renderDistributed(box, d) {
  const hidden = d.comm_us > 0 ? 100 * d.overlapped_us / d.comm_us : null;
  box.append(el("div", {class: "cards"}, card("rank", `${d.rank} of ${d.world_size}`, "this directory's rank"),
    card("communication", fmtUs(d.comm.reduce((a, r) => a + (r.time_us || 0), 0)), fmtPct(d.comm_pct_of_total) + " of sub-block time"),
    card("overlapped with compute", fmtPct(hidden), `${fmtUs(d.overlapped_us)} of ${fmtUs(d.comm_us)} in the trace`)));
  if (d.comm.length) box.append(table(SUBBLOCK_COLUMNS.slice(0, 4), d.comm));
  box.append(note("Collectives per rank, bus bandwidth and the straggler are in distributed.txt beside the rank directories."));
}

const RENDER = {header: renderHeader, findings: renderFindings, subblocks: (b, rows) => renderSubblocks(b, rows, DATA.phases),
                roofline: renderRoofline, timeline: renderTimeline, kernels: renderKernels, api: renderApi,
                memory: renderMemory, power: renderPower, inference: renderInference, distributed: renderDistributed};
drawSections(RENDER, DATA);
