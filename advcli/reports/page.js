"use strict";
// The report page: DATA (gathered by advcli) drawn into the sections of page.html.
const PAGE_ROWS = 100;
const fmtInt = (x) => (x === null || x === undefined ? "n/a" : Math.round(x).toLocaleString("en-US"));
const fmtNum = (x) => (x === null || x === undefined ? "n/a" : Number(x).toPrecision(4).replace(/\.?0+(e|$)/, "$1"));
const fmtShare = (x) => (x === null || x === undefined ? "n/a" : (100 * x).toFixed(1) + "%");
const el = (tag, attrs = {}, text) => {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, v);
  if (text !== undefined) node.textContent = text;
  return node;
};

function decode(b64, Type) {
  const bin = atob(b64);
  const bytes = new Uint8Array(bin.length);
  for (let i = 0; i < bin.length; i++) bytes[i] = bin.charCodeAt(i);
  return new Type(bytes.buffer);
}

// Overview: the numbers of `advcli audit --json`, each card carrying its raw value.
const OVERVIEW = [
  ["rollouts", "rollouts", fmtInt], ["groups", "groups", fmtInt],
  ["action_tokens", "action tokens", fmtInt],
  ["zero_variance_groups", "zero-variance groups", fmtInt, true],
  ["zero_variance_all_correct", "  all-correct", fmtInt], ["zero_variance_all_wrong", "  all-wrong", fmtInt],
  ["zero_variance_other", "  other", fmtInt],
  ["near_tie_groups", "near-tie groups", fmtInt, true], ["near_tie_rollouts", "near-tie rollouts", fmtInt],
  ["near_tie_std_below", "near-tie: std below", fmtNum],
  ["singleton_groups", "singleton groups", fmtInt],
  ["zero_variance_rollouts", "zero-variance rollouts", fmtInt],
  ["zero_variance_rollout_share", "zero-variance share of rollouts", fmtShare, true],
  ["no_signal_rollout_share", "rollouts without signal", fmtShare, true],
  ["no_signal_action_token_share", "action tokens without signal", fmtShare, true],
  ["steps", "agent steps", fmtInt], ["state_groups", "state groups", fmtInt],
  ["singleton_state_groups", "  singletons", fmtInt], ["tied_state_groups", "  tied returns", fmtInt],
  ["no_signal_step_share", "steps with no signal", fmtShare, true],
];

function drawOverview() {
  const o = DATA.overview;
  const cards = el("div", { class: "cards" });
  for (const [key, label, fmt, warn] of OVERVIEW) {
    if (!(key in o)) continue;
    const card = el("div", { class: "card" + (warn && o[key] > 0 ? " warn" : "") });
    card.append(el("div", { class: "label" }, label));
    card.append(el("div", { class: "value", "data-key": key, "data-value": JSON.stringify(o[key]) }, fmt(o[key])));
    cards.append(card);
  }
  document.getElementById("overview-body").append(cards);
  for (const warning of DATA.warnings) {
    document.getElementById("overview-body").append(el("p", { class: "note warning" }, "warning: " + warning));
  }
  const adv = DATA.advantages_from ? "advantages: " + DATA.advantages_from : "no advantages (give --method)";
  const subtitle = document.getElementById("subtitle");
  if (DATA.files.length <= 3) {
    subtitle.textContent = DATA.files.join(", ") + " · " + adv;
  } else {  // a folder of step files: its name and count, the list on a click
    const parts = DATA.files.map((f) => f.split("/"));
    let common = 0;
    while (parts.every((p) => p.length > common + 1 && p[common] === parts[0][common])) common++;
    const folder = parts[0].slice(0, common).join("/");
    const box = el("details", { class: "files" });
    box.append(el("summary", {}, `${folder ? folder + "/" : ""} (${DATA.files.length.toLocaleString("en-US")} files)`),
      el("pre", {}, DATA.files.join("\n")));
    subtitle.replaceChildren(box, document.createTextNode(adv));
  }
}

function drawCharts() {
  const homes = { "chart-trend": "trend-charts" };
  const pending = [];
  for (const [id, item] of Object.entries(DATA.charts)) {
    const home = id.startsWith("chart-trend") ? homes["chart-trend"]
      : id.startsWith("chart-compare") ? "compare-charts" : "dist-charts";
    document.getElementById(home).append(el("div", { id, class: "chart" }));
    pending.push(Bokeh.embed.embed_item(item, id));
  }
  if (!DATA.trends) {
    document.getElementById("trend-charts").replaceWith(
      el("p", { class: "note" }, "The log has no step column (the --from presets read the step of each dump file)."));
  }
  return Promise.all(pending);
}

// Groups: sortable, filterable, paged; a row opens the group.
const G = DATA.groups.columns;
const state = { sort: "code", dir: 1, filter: "", kind: "all", step: "all", lo: null, hi: null, page: 0, rows: [] };
// The groups table's columns: [key, heading, cell]; those the log has no values for are left out.
const GROUP_COLUMNS = [
  ["code", "#", (i) => el("td", G.detail[i] ? {} : { class: "no-detail", title: "not in the detail sample: its rollouts are not in the page" }, G.code[i])],
  ["prompt", "prompt id", (i) => el("td", { class: "prompt", title: G.prompt[i] }, G.prompt[i])],
  ["text", "prompt (first words)", (i) => el("td", { class: "prompt text", title: G.text[i] }, G.text[i])],
  ["step", "step", (i) => el("td", {}, G.step[i] === null ? "" : fmtNum(G.step[i]))],
  ["size", "size", (i) => el("td", {}, fmtInt(G.size[i]))],
  ["mean", "mean reward", (i) => el("td", {}, fmtNum(G.mean[i]))],
  ["std", "std", (i) => el("td", {}, fmtNum(G.std[i]))],
  ["spread", "advantage spread", (i) => el("td", { title: "max − min of its rollouts' mean advantages" }, fmtNum(G.spread[i]))],
  ["action_tokens", "action tokens", (i) => el("td", {}, fmtInt(G.action_tokens[i]))],
  ["kind", "kind", (i) => { const td = el("td"); td.append(el("span", { class: "kind kind-" + G.kind[i] }, DATA.kinds[G.kind[i]])); return td; }],
].filter(([key]) => G[key] !== null && G[key] !== undefined);

function groupRows() {
  const text = state.filter.toLowerCase();
  let rows = [];
  for (let i = 0; i < G.code.length; i++) {
    if (state.kind !== "all" && String(G.kind[i]) !== state.kind) continue;
    if (state.step !== "all" && String(G.step[i]) !== state.step) continue;
    if (state.lo !== null && !(G.mean[i] >= state.lo)) continue;
    if (state.hi !== null && !(G.mean[i] <= state.hi)) continue;
    if (text && !G.prompt[i].toLowerCase().includes(text) && !(G.text && G.text[i].toLowerCase().includes(text))) continue;
    rows.push(i);
  }
  const col = G[state.sort] || G.code;
  const dir = state.dir;
  rows.sort((a, b) => (col[a] < col[b] ? -dir : col[a] > col[b] ? dir : G.code[a] - G.code[b]));
  return rows;
}

function drawGroups() {
  state.rows = groupRows();
  const pages = Math.max(1, Math.ceil(state.rows.length / PAGE_ROWS));
  state.page = Math.min(state.page, pages - 1);
  const body = document.querySelector("#group-table tbody");
  body.replaceChildren();
  for (const i of state.rows.slice(state.page * PAGE_ROWS, (state.page + 1) * PAGE_ROWS)) {
    const tr = el("tr", { "data-code": G.code[i] });
    for (const [, , cell] of GROUP_COLUMNS) tr.append(cell(i));
    tr.addEventListener("click", () => openGroup(i));
    body.append(tr);
  }
  for (const th of document.querySelectorAll("#group-table th")) {
    th.classList.toggle("asc", th.dataset.sort === state.sort && state.dir > 0);
    th.classList.toggle("desc", th.dataset.sort === state.sort && state.dir < 0);
  }
  document.getElementById("group-count").textContent =
    `${state.rows.length.toLocaleString("en-US")} of ${G.code.length.toLocaleString("en-US")} listed groups`;
  document.getElementById("page-label").textContent = ` page ${state.page + 1} of ${pages} `;
}

function setUpGroups() {
  const g = DATA.groups;
  const head = document.querySelector("#group-table thead tr");
  for (const [key, label] of GROUP_COLUMNS) head.append(el("th", { "data-sort": key }, label));
  const withoutDetail = g.columns.detail.filter((d) => !d).length;
  const steps = G.step ? [...new Set(G.step.filter((x) => x !== null))].sort((a, b) => a - b) : [];
  if (steps.length > 1) {
    const pick = document.getElementById("group-step");
    pick.hidden = false;
    pick.append(el("option", { value: "all" }, "every step"));
    for (const x of steps) pick.append(el("option", { value: String(x) }, "step " + fmtNum(x)));
    pick.addEventListener("change", () => { state.step = pick.value; state.page = 0; drawGroups(); });
  }
  for (const [id, key] of [["reward-min", "lo"], ["reward-max", "hi"]]) {
    const box = document.getElementById(id);
    box.addEventListener("input", () => { state[key] = box.value === "" ? null : Number(box.value); state.page = 0; drawGroups(); });
  }
  document.getElementById("groups-note").textContent = g.listed < g.total
    ? `The log has ${g.total.toLocaleString("en-US")} groups: the table lists a seeded sample of ${g.listed.toLocaleString("en-US")} (--sample-groups).`
    : `Every group of the log. Click a column to sort, a row to open the group.`;
  document.getElementById("groups-note").textContent += (G.text
    ? " The search box searches the prompt ids and each prompt's first words (its first 80 characters, which the page holds)."
    : " The search box searches the prompt ids.") + (withoutDetail
    ? ` The ${withoutDetail.toLocaleString("en-US")} groups whose # is grey are not in the detail sample (--detail-groups): they open without rollouts.`
    : "");
  const select = document.getElementById("group-kind");
  select.append(el("option", { value: "all" }, "every kind"));
  DATA.kinds.forEach((name, k) => select.append(el("option", { value: String(k) }, name)));
  select.addEventListener("change", () => { state.kind = select.value; state.page = 0; drawGroups(); });
  const filter = document.getElementById("group-filter");
  filter.addEventListener("input", () => { state.filter = filter.value; state.page = 0; drawGroups(); });
  for (const th of document.querySelectorAll("#group-table th")) {
    th.addEventListener("click", () => {
      state.dir = state.sort === th.dataset.sort ? -state.dir : 1;
      state.sort = th.dataset.sort;
      drawGroups();
    });
  }
  document.getElementById("page-prev").addEventListener("click", () => { state.page = Math.max(0, state.page - 1); drawGroups(); });
  document.getElementById("page-next").addEventListener("click", () => { state.page += 1; drawGroups(); });
  drawGroups();
}

// A click on a point of a chart by step (page.py's _line) lists that step's groups.
window.advcliPickStep = (step) => {
  state.step = String(step);
  state.page = 0;
  const pick = document.getElementById("group-step");
  if ([...pick.options].some((o) => o.value === state.step)) pick.value = state.step;
  drawGroups();
  document.getElementById("groups").scrollIntoView({ block: "start" });
};

function openGroup(i) {
  const code = G.code[i];
  for (const tr of document.querySelectorAll("#group-table tbody tr")) tr.classList.toggle("open", tr.dataset.code === String(code));
  const panel = document.getElementById("group-detail");
  panel.hidden = false;
  document.getElementById("group-title").textContent = "Group " + code + ": " + G.prompt[i];
  const rollouts = DATA.details[String(code)];
  document.getElementById("group-summary").textContent =
    `${G.size[i]} rollouts · mean reward ${fmtNum(G.mean[i])} · std ${fmtNum(G.std[i])} · ${DATA.kinds[G.kind[i]]}` +
    (rollouts ? " · click a rollout to see its tokens" : " · not in the detail sample (a seeded sample of groups, --detail-groups, that always holds the worst ones)");
  const body = document.querySelector("#rollout-table tbody");
  body.replaceChildren();
  document.getElementById("length-head").hidden = (rollouts || []).every((r) => r.length === null);
  for (const r of rollouts || []) {
    const tr = el("tr", { "data-rollout": r.id });
    tr.append(el("td", {}, r.id), el("td", {}, fmtNum(r.reward)), el("td", {}, fmtNum(r.advantage)),
      ...(r.length === null ? [] : [el("td", {}, fmtInt(r.length))]), el("td", {}, r.segments));
    tr.addEventListener("click", () => showTokens(r));
    body.append(tr);
  }
  document.getElementById("token-view").hidden = true;
  panel.scrollIntoView({ block: "nearest" });
}

function tokenColour(a, scale) {
  if (!Number.isFinite(a) || scale === 0) return "";
  const t = Math.min(1, Math.abs(a) / scale) * 0.75;
  return a >= 0 ? `rgba(59,111,182,${t.toFixed(3)})` : `rgba(200,60,50,${t.toFixed(3)})`;
}

const KIND_NAMES = ["prompt", "action", "observation"];
// What the token view colours the action tokens by: [key, label, the value shown per token];
// the weight is coloured by its distance from 1 (no correction).
const COLOUR_BY = [
  ["adv", "advantage", (x) => x],
  ["delta", "δ = trainer − sampler log-prob", (x) => x],
  ["weight", "correction weight (− 1)", (x) => x - 1],
];
let colourBy = "adv";
let shownRollout = null;

function overlayNote() {
  const O = DATA.overlay;
  if (!O.streams) return "The log has no trainer log-probs (role trainer_logprobs) beside the sampler's: no δ or weight to show.";
  const c = O.correction;
  return c ? `Correction ${c.mode} [${fmtNum(c.lo)}, ${fmtNum(c.hi)}] (${c.flavour}): struck-through tokens are masked.`
    : "δ from the two log-prob streams; give --correction to see a mode's weights and masked tokens.";
}

function setUpOverlay() {
  const pick = document.getElementById("token-colour");
  for (const [key, label] of COLOUR_BY) {
    if (key !== "adv" && !DATA.overlay.streams) continue;
    if (key === "weight" && !DATA.overlay.correction) continue;
    pick.append(el("option", { value: key }, label));
  }
  pick.hidden = pick.options.length < 2;
  document.getElementById("masked-legend").hidden = !DATA.overlay.correction;
  pick.addEventListener("change", () => { colourBy = pick.value; if (shownRollout) showTokens(shownRollout); });
  document.getElementById("overlay-note").textContent = overlayNote();
}

function showTokens(r) {
  const view = document.getElementById("token-view");
  view.hidden = false;
  shownRollout = r;
  document.getElementById("token-title").textContent = "Rollout " + r.id;
  const steps = document.getElementById("token-steps");
  steps.hidden = !r.steps;
  steps.textContent = r.steps ? "advantage of each step: " + r.steps.map(fmtNum).join(" · ") : "";
  const text = document.getElementById("token-text");
  text.replaceChildren();
  for (const [name, value] of Object.entries(r.text || {})) {
    const box = el("details", { open: "" });
    box.append(el("summary", {}, name), el("pre", {}, value));
    text.append(box);
  }
  const home = document.getElementById("tokens");
  home.replaceChildren();
  const t = r.tokens;
  if (!t) {
    document.getElementById("token-note").textContent = "the log has no token ids: no token view";
    return;
  }
  const ids = decode(t.ids, t.ids_type === "u4" ? Uint32Array : Float64Array);
  const kind = decode(t.kind, Uint8Array);
  const per = {};
  for (const key of ["adv", "delta", "weight"]) per[key] = t[key] ? decode(t[key], Float32Array) : null;
  const masked = t.masked ? decode(t.masked, Uint8Array) : null;
  const [, , colourValue] = COLOUR_BY.find(([key]) => key === colourBy);
  const coloured = per[colourBy] || per.adv;
  const value = per[colourBy] ? colourValue : (x) => x;
  let scale = 0;
  if (coloured) for (let i = 0; i < coloured.length; i++) if (kind[i] === 1 && Number.isFinite(value(coloured[i]))) scale = Math.max(scale, Math.abs(value(coloured[i])));
  const frag = document.createDocumentFragment();
  if (t.folded) frag.append(el("span", { class: "folded" }, `… ${t.folded.toLocaleString("en-US")} prompt tokens`));
  for (let i = 0; i < ids.length; i++) {
    const text = DATA.vocab ? DATA.vocab[String(ids[i])] : undefined;
    const span = el("span", { class: "tok k" + kind[i] + (text === undefined ? "" : " text") }, text === undefined ? String(ids[i]) : text);
    let title = `token ${ids[i]} · ${KIND_NAMES[kind[i]]}`;
    if (kind[i] === 1) {
      if (coloured) span.style.background = tokenColour(value(coloured[i]), scale);
      if (per.adv) title += ` · advantage ${fmtNum(per.adv[i])}`;
      if (per.delta) title += ` · δ ${fmtNum(per.delta[i])} · ρ ${fmtNum(Math.exp(per.delta[i]))}`;
      if (per.weight) title += ` · weight ${fmtNum(per.weight[i])}`;
      if (masked) title += masked[i] ? " · masked" : " · kept";
      if (masked && masked[i]) span.classList.add("masked");
    }
    span.title = title;
    frag.append(span);
  }
  home.append(frag);
  const hidden = t.total - t.shown - (t.folded || 0);
  document.getElementById("token-note").textContent = hidden > 0
    ? ` · ${t.shown.toLocaleString("en-US")} of ${t.total.toLocaleString("en-US")} tokens shown (the response first)`
    : ` · ${t.total.toLocaleString("en-US")} tokens`;
  view.scrollIntoView({ block: "nearest" });
}

// Compare: logs (--compare) or steps (--steps) side by side; each change from the first side to the last.
const signed = (fmt) => (x) => (x === null || x === undefined ? "" : (x > 0 ? "+" : "") + fmt(x));
const fmtPoints = (x) => (100 * x).toFixed(1) + " pt";
const COMPARED = [
  ["rollouts", "rollouts", fmtInt, signed(fmtInt)], ["groups", "groups", fmtInt, signed(fmtInt)],
  ["mean_reward", "mean reward", fmtNum, signed(fmtNum)],
  ["zero_variance_groups", "zero-variance groups", fmtInt, signed(fmtInt)],
  ["zero_variance_rollout_share", "zero-variance share of rollouts", fmtShare, signed(fmtPoints)],
  ["no_signal_rollout_share", "rollouts without signal", fmtShare, signed(fmtPoints)],
  ["near_tie_groups", "near-tie groups", fmtInt, signed(fmtInt)],
  ["mean_advantage_spread", "mean advantage spread of a group", fmtNum, signed(fmtNum)],
];

// "a and b", "a, b and c"
const listed = (names) => (names.length < 3 ? names.join(" and ") : names.slice(0, -1).join(", ") + " and " + names[names.length - 1]);

function drawCompare() {
  const C = DATA.compare;
  if (!C) return;
  document.getElementById("compare").hidden = false;
  const names = C.labels;
  const two = names.length === 2;
  const all = two ? "both sides hold" : `all ${names.length} sides hold`;
  document.getElementById("compare-title").textContent = `Compare: ${listed(names)}`;
  document.getElementById("compare-prompts-title").textContent = two ? "Prompts both hold" : "Prompts all hold";
  document.getElementById("compare-note").textContent =
    `The overview of each side, its distributions overlaid on the same bins (as shares of its rollouts), and the prompts ${all}, matched by ${C.matched_by}` +
    (two ? "." : `; each change is from the first side (${names[0]}) to the last (${names[names.length - 1]}).`);
  const head = document.querySelector("#compare-overview thead tr");
  for (const name of ["", ...names, "change"]) head.append(el("th", {}, name));
  const body = document.querySelector("#compare-overview tbody");
  const rows = COMPARED.map(([key, label, fmt, delta]) => [key, label, C.overview.map((o) => o[key]), fmt, delta]);
  C.kinds.forEach((name, k) => rows.push(["kind-" + k, "groups: " + name, C.overview.map((o) => o.kinds[k]), fmtInt, signed(fmtInt)]));
  for (const [key, label, values, fmt, delta] of rows) {
    if (values.every((v) => v === null || v === undefined)) continue;
    const ends = [values[0], values[values.length - 1]];
    const change = ends.some((v) => v === null || v === undefined) ? null : ends[1] - ends[0];
    const tr = el("tr", { "data-key": key });
    tr.append(el("td", {}, label), ...values.map((v) => el("td", { "data-value": JSON.stringify(v) }, fmt(v))),
      el("td", {}, delta(change)));
    body.append(tr);
  }
  const P = C.prompts;
  const side = (s, i) => [fmtInt(s.rollouts[i]), fmtNum(s.mean_reward[i]),
    `${fmtInt(s.zero_variance[i])} of ${fmtInt(s.groups[i])}`, fmtNum(s.spread[i])];
  const thead = document.querySelector("#compare-table thead tr");
  thead.append(el("th", { rowspan: "2" }, "prompt"));
  for (const name of names) thead.append(el("th", { colspan: "4", class: "side" }, name));
  thead.append(el("th", { rowspan: "2" }, "change in mean reward"));
  const under = el("tr");
  for (const _ of names) {
    for (const name of ["rollouts", "mean reward", "zero-variance groups", "advantage spread"]) under.append(el("th", {}, name));
  }
  thead.after(under);
  const tbody = document.querySelector("#compare-table tbody");
  const filter = document.getElementById("compare-filter");
  const draw = () => {
    const text = filter.value.toLowerCase();
    tbody.replaceChildren();
    let shown = 0;
    for (let i = 0; i < P.prompt.length; i++) {
      if (text && !P.prompt[i].toLowerCase().includes(text)) continue;
      const tr = el("tr", { "data-change": String(P.change[i]) });
      tr.append(el("td", { class: "prompt", title: P.prompt[i] }, P.prompt[i]),
        ...P.sides.flatMap((s) => side(s, i).map((v) => el("td", {}, v))),
        el("td", {}, signed(fmtNum)(P.change[i])));
      tbody.append(tr);
      shown++;
    }
    document.getElementById("compare-count").textContent =
      `${shown.toLocaleString("en-US")} of ${P.listed.toLocaleString("en-US")} listed prompts`;
  };
  filter.addEventListener("input", draw);
  const inAll = two ? "in both" : `in all ${names.length}`;
  document.getElementById("compare-prompts-note").textContent = P.total === 0
    ? `No prompt is ${inAll} (matched by ${C.matched_by}).`
    : `${P.total.toLocaleString("en-US")} prompts are ${inAll}` + (P.listed < P.total
      ? `; the page lists the ${P.listed.toLocaleString("en-US")} whose mean reward changed most.`
      : ", the largest changes in mean reward first.");
  draw();
}

// The run view's prompts moving most: each one's largest change between two consecutive steps it was seen at.
function drawMovers() {
  const M = DATA.health_by_step && DATA.health_by_step.movers;
  if (!M || M.total === 0) return;
  document.getElementById("movers").hidden = false;
  document.getElementById("movers-before").textContent = M.figure + " before";
  document.getElementById("movers-after").textContent = M.figure + " after";
  document.getElementById("movers-note").textContent =
    `Each prompt seen at two steps or more (${M.total.toLocaleString("en-US")}, matched by ${M.matched_by}) by its largest change in ${M.figure} between two consecutive steps it was seen at` +
    (M.prompt.length < M.total ? `; the ${M.prompt.length.toLocaleString("en-US")} moving most.` : ", the largest first.") +
    " Click a row to list the groups of its later step.";
  const body = document.querySelector("#movers-table tbody");
  const fmt = M.figure === "pass rate" ? fmtShare : fmtNum;
  const change = M.figure === "pass rate" ? signed(fmtPoints) : signed(fmtNum);
  for (let i = 0; i < M.prompt.length; i++) {
    const tr = el("tr", { "data-change": String(M.change[i]) });
    tr.append(el("td", { class: "prompt", title: M.prompt[i] }, M.prompt[i]), el("td", {}, fmtNum(M.from_step[i])),
      el("td", {}, fmtNum(M.to_step[i])), el("td", {}, fmt(M.before[i])), el("td", {}, fmt(M.after[i])),
      el("td", {}, change(M.change[i])));
    tr.addEventListener("click", () => window.advcliPickStep(M.to_step[i]));
    body.append(tr);
  }
}

drawOverview();
drawCompare();
drawMovers();
setUpGroups();
setUpOverlay();
drawCharts().then(() => {
  window.advcliChartsDrawn = performance.now();
  document.body.dataset.ready = "yes";
});
