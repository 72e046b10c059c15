// ctu view: the page's script. Reads the data embedded in #ctu-data (ctu/view/data.py's page_data) and renders the
// curves, the task table, the episode browser and the flipped tasks of two evaluations. Every text of the data is
// set as text (never as HTML). The view and its filters live in the URL's fragment (#view=episodes&outcome=fail),
// so a link shows the same episodes.
"use strict";

const DATA = JSON.parse(document.getElementById("ctu-data").textContent);
const FILTERS = ["column", "test_set", "domain", "task", "outcome", "failure", "termination", "fault", "tool", "q"];  // and `sort` of the task table
const PAGE = 200;

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (key === "onclick") node.addEventListener("click", value);
    else if (value !== null && value !== undefined && value !== false) node.setAttribute(key, value === true ? "" : value);
  }
  for (const child of children.flat(Infinity)) {
    if (child === null || child === undefined || child === false) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

function readState() {
  const state = {};
  new URLSearchParams(location.hash.slice(1)).forEach((value, key) => { state[key] = value; });
  state.view = state.view || (DATA.episodes.length ? "episodes" : "tasks");
  return state;
}

function link(change) {
  const state = Object.assign(readState(), change);
  const params = new URLSearchParams();
  for (const [key, value] of Object.entries(state)) if (value !== "" && value !== null && value !== undefined) params.set(key, value);
  return "#" + params.toString();
}

function go(change) { location.hash = link(change); }

function outcome(episode) {
  if (episode.infra_error) return "infra";
  return episode.success ? "success" : "fail";
}

let searchIndex = null;
function searchable(episode) {
  searchIndex = searchIndex || new Map();
  if (!searchIndex.has(episode.id)) searchIndex.set(episode.id, JSON.stringify(episode.messages).toLowerCase());
  return searchIndex.get(episode.id);
}

function matches(episode, state) {
  if (state.column && episode.column !== state.column) return false;
  if (state.test_set && String(episode.test_set) !== state.test_set) return false;
  if (state.domain && episode.domain !== state.domain) return false;
  if (state.task && episode.task !== state.task && String(episode.task_id) !== state.task) return false;
  if (state.outcome && outcome(episode) !== state.outcome) return false;
  if (state.failure && episode.failure !== state.failure) return false;
  if (state.termination && String(episode.termination) !== state.termination) return false;
  if (state.fault === "any" && !episode.user_fault) return false;
  if (state.fault === "none" && episode.user_fault) return false;
  if (state.tool && !episode.tools.includes(state.tool)) return false;
  if (state.q && !searchable(episode).includes(state.q.toLowerCase())) return false;
  return true;
}

function values(key) {
  const found = new Set();
  for (const episode of DATA.episodes) {
    const value = key === "tool" ? episode.tools : [key === "outcome" ? outcome(episode) : episode[key]];
    for (const item of value) if (item !== null && item !== undefined) found.add(String(item));
  }
  return [...found].sort();
}

function header(state) {
  const tabs = [["episodes", "Episodes"], ["tasks", "Tasks"], ["curves", "Curves"]];
  if (DATA.comparison) tabs.push(["flipped", "Flipped tasks"]);
  const shown = DATA.episodes.length, total = DATA.episodes_total;
  return el("header", {},
    el("h1", {}, "ctu view: ", DATA.sources.map((s) => `${s.label} (${s.kind})`).join(", ")),
    el("p", {class: "note"}, shown < total
      ? `${shown} of ${total} episodes embedded (every evaluation's first, then training episodes spread over the steps; ctu view --max-episodes sets how many)`
      : `${total} episodes`),
    el("nav", {}, tabs.map(([view, title]) => el("a", {href: link({view}), class: state.view === view ? "active" : null}, title))));
}

function select(key, state, options) {
  const input = el("select", {name: key}, el("option", {value: ""}, `${key}: all`),
    options.map((value) => el("option", {value, selected: state[key] === value}, value)));
  input.addEventListener("change", () => go({[key]: input.value, page: ""}));
  return input;
}

function filterBar(state) {
  const text = (key, placeholder) => {
    const input = el("input", {name: key, placeholder, value: state[key] || ""});
    input.addEventListener("change", () => go({[key]: input.value, page: ""}));
    return input;
  };
  return el("div", {class: "filters"},
    select("column", state, DATA.columns.map((c) => c.id).concat(DATA.sources.filter((s) => s.kind === "run").map((s) => s.label + ":train"))),
    select("test_set", state, values("test_set")), select("domain", state, values("domain")),
    select("outcome", state, ["success", "fail", "infra"]), select("failure", state, values("failure")),
    select("termination", state, values("termination")),
    select("fault", state, ["any", "none"]), select("tool", state, values("tool")),
    text("task", "task (domain/id or id)"), text("q", "search the messages"),
    el("a", {href: link(Object.fromEntries(FILTERS.map((key) => [key, ""])))}, "clear"));
}

function episodeList(state) {
  const found = DATA.episodes.filter((episode) => matches(episode, state));
  const page = Number(state.page || 0);
  const rows = found.slice(page * PAGE, (page + 1) * PAGE).map((episode) =>
    el("tr", {class: `row ${outcome(episode)}${String(episode.id) === state.episode ? " chosen" : ""}`, "data-episode": episode.id,
      onclick: () => go({episode: episode.id})},
      el("td", {}, episode.id), el("td", {}, episode.column), el("td", {}, episode.task), el("td", {}, episode.test_set ?? ""),
      el("td", {}, outcome(episode)), el("td", {}, episode.failure ?? ""), el("td", {}, episode.reward ?? ""),
      el("td", {}, episode.termination ?? ""),
      el("td", {}, episode.user_fault_kind ?? ""), el("td", {}, episode.tools.join(", "))));
  const pages = Math.max(1, Math.ceil(found.length / PAGE));
  return el("section", {},
    el("p", {class: "count", "data-count": found.length}, `${found.length} episode(s) match`,
      pages > 1 ? ` (page ${page + 1} of ${pages}: ` : "",
      pages > 1 ? [page > 0 ? el("a", {href: link({page: page - 1})}, "previous") : "", " ",
                   page + 1 < pages ? el("a", {href: link({page: page + 1})}, "next") : "", ")"] : ""),
    el("table", {id: "episodes"}, el("thead", {}, el("tr", {}, ["#", "evaluation", "task", "test set", "outcome", "failure", "reward",
      "termination", "user fault", "tools called"].map((h) => el("th", {}, h)))), el("tbody", {}, rows)));
}

function callText(call) {
  const fn = call.function || {};
  return `${fn.name}(${typeof fn.arguments === "string" ? fn.arguments : JSON.stringify(fn.arguments)})`;
}

function messageView(message) {
  const role = message.role;
  if (role === "system") {
    return el("details", {class: "message system"}, el("summary", {}, "system prompt"), el("pre", {}, DATA.prompts[message.prompt] ?? message.content ?? ""));
  }
  const parsed = message.parsed || {};
  const calls = message.tool_calls || parsed.tool_calls || [];
  return el("div", {class: `message ${role}`},
    el("div", {class: "role"}, role + (message.tool_call_id ? ` (${message.tool_call_id})` : "")),
    message.reasoning ? el("details", {class: "reasoning"}, el("summary", {}, "reasoning (not sent)"), el("pre", {}, message.reasoning)) : null,
    message.content ? el("pre", {}, message.content) : null,
    calls.map((call) => el("div", {class: "call"}, "tool call: ", el("code", {}, callText(call)))),
    (parsed.parse_errors || []).map((reason) => el("div", {class: "parse-error"}, "parse failure: ", reason)));
}

function pairs(mapping, names) {
  if (!mapping || typeof mapping !== "object") return null;
  const shown = Object.entries(mapping).map(([key, value]) =>
    `${(names || {})[key] || key} ${typeof value === "number" ? value.toFixed(2) : JSON.stringify(value)}`);
  return shown.length ? shown.join(", ") : null;
}

function missed(names) {
  // a line's failed_actions (tool names, in the task's order; absent from older lines), each repeat counted
  if (!Array.isArray(names) || !names.length) return null;
  return [...new Set(names)].map((name) => {
    const count = names.filter((n) => n === name).length;
    return count > 1 ? `${name} x${count}` : name;
  }).join(", ");
}

function verdict(judge) {
  if (!judge || typeof judge !== "object") return judge;
  const parts = [];
  if (judge.score !== null && judge.score !== undefined) parts.push(`score ${judge.score}`);
  if (judge.categories && judge.categories.length) parts.push(`categories: ${judge.categories.join(", ")}`);
  if (judge.error) parts.push(`no verdict: ${judge.error}`);
  return parts.length ? parts.join("; ") : JSON.stringify(judge);
}

function offTemplate(turns) {
  // a line's off_template_turns (policy turns, from 1; absent from older lines): sampled after ids a fresh rendering
  // of the conversation by the chat template would not give (TrajectoryRecord.off_template_turns)
  if (!Array.isArray(turns) || !turns.length) return null;
  return `policy turn${turns.length > 1 ? "s" : ""} ${turns.join(", ")}: sampled after ids the template would render otherwise`;
}

function facts(episode) {
  const items = [["task", episode.task], ["evaluation", episode.column], ["outcome", outcome(episode)],
    ["failure", episode.failure], ["reward", episode.reward], ["reward components", pairs(episode.reward_components)],
    ["tau2 reward", episode.raw_reward], ["termination", episode.termination],
    ["tau2 reward breakdown", pairs(episode.reward_breakdown)], ["tau2 checks passed", pairs(episode.checks, DATA.check_names)], ["gold actions missed", missed(episode.failed_actions)],
    ["user fault", episode.user_fault], ["infrastructure error", episode.infra_error], ["judge", verdict(episode.judge)],
    ["error", episode.error], ["sampled off the chat template", offTemplate(episode.off_template_turns)]];
  return el("dl", {}, items.filter(([, v]) => v !== null && v !== undefined && v !== "").map(([k, v]) => [el("dt", {}, k), el("dd", {}, String(v))]));
}

function episodeView(episode) {
  return el("article", {class: "episode", "data-episode": episode.id}, el("h2", {}, `episode ${episode.id}`), facts(episode),
    episode.messages.map(messageView));
}

function taskOrder(tasks, sort) {
  // sort: "" (by task), "<column id>" (its pass rate, lowest first) or "-<column id>" (highest first); a task an
  // evaluation did not run comes last either way
  const descending = sort.startsWith("-"), id = descending ? sort.slice(1) : sort;
  const column = DATA.columns.find((c) => c.id === id);
  if (!column) return tasks;
  const rate = (task) => column.tasks[task] ? column.tasks[task][0] / column.tasks[task][1] : null;
  return [...tasks].sort((a, b) => {
    const [x, y] = [rate(a), rate(b)];
    if (x === null || y === null) return (x === null) - (y === null) || a.localeCompare(b);
    return (descending ? y - x : x - y) || a.localeCompare(b);
  });
}

function tasksView(state) {
  const sort = state.sort || "";
  const tasks = taskOrder([...new Set(DATA.columns.flatMap((c) => Object.keys(c.tasks)))].sort(), sort);
  const flipped = new Set(DATA.comparison ? DATA.comparison.flipped : []);
  const cell = (counts) => counts ? `${counts[0]}/${counts[1]}` : "";
  const heading = (c) => el("th", {}, el("a", {href: link({sort: sort === c.id ? `-${c.id}` : c.id}), "data-sort": c.id,
    title: "sort by pass rate"}, c.label, sort === c.id ? " \u25b2" : sort === `-${c.id}` ? " \u25bc" : ""));
  return el("section", {}, comparisonLine(),
    el("table", {id: "tasks"}, el("thead", {}, el("tr", {}, el("th", {}, el("a", {href: link({sort: ""})}, "task")), DATA.columns.map(heading))),
      el("tbody", {}, tasks.map((task) => el("tr", {class: flipped.has(task) ? "flipped" : null, "data-task": task},
        el("td", {}, el("a", {href: link({view: "episodes", task, episode: ""})}, task)),
        DATA.columns.map((c) => el("td", {}, cell(c.tasks[task]))))))));
}

function comparisonLine() {
  const c = DATA.comparison;
  if (!c) return null;
  const sign = (x) => (x >= 0 ? "+" : "") + x.toFixed(3);
  const left = c.left_out ? ` Not compared: ${c.left_out}.` : "";
  if (!c.tasks) return el("p", {class: "comparison"}, `${c.other} - ${c.baseline}: not comparable, no task evaluated by both with the same content.${left}`);
  return el("p", {class: "comparison"}, `${c.other} - ${c.baseline}: ${sign(c.difference)} success over the ${c.tasks} tasks both evaluated with the same content, `,
    `paired bootstrap 95% interval [${sign(c.low)}, ${sign(c.high)}] (as ctu compare); ${c.flipped.length} task(s) changed, marked.${left}`);
}

function curvesView() {
  return el("section", {}, DATA.sources.filter((s) => Object.keys(s.curves).length).map((source) =>
    el("div", {}, el("h2", {}, source.label), Object.entries(source.curves).map(([key, points]) => chart(key, points)))),
    DATA.sources.some((s) => Object.keys(s.curves).length) ? null : el("p", {}, "No metrics.jsonl among these folders."));
}

function chart(key, points) {
  const ns = "http://www.w3.org/2000/svg";
  const [w, h, pad] = [320, 120, 24];
  const xs = points.map((p) => p[0]), ys = points.map((p) => p[1]);
  const [x0, x1, y0, y1] = [Math.min(...xs), Math.max(...xs), Math.min(...ys), Math.max(...ys)];
  const sx = (x) => pad + (x1 === x0 ? 0.5 : (x - x0) / (x1 - x0)) * (w - 2 * pad);
  const sy = (y) => h - pad - (y1 === y0 ? 0.5 : (y - y0) / (y1 - y0)) * (h - 2 * pad);
  const svg = document.createElementNS(ns, "svg");
  svg.setAttribute("viewBox", `0 0 ${w} ${h}`);
  svg.setAttribute("class", "chart");
  const line = document.createElementNS(ns, "polyline");
  line.setAttribute("points", points.map(([x, y]) => `${sx(x)},${sy(y)}`).join(" "));
  svg.append(line);
  return el("figure", {}, svg, el("figcaption", {}, `${key}: ${y0.toFixed(3)} to ${y1.toFixed(3)} over steps ${x0}-${x1}`));
}

function flippedView() {
  const c = DATA.comparison;
  const side = (column, task) => DATA.episodes.filter((e) => e.column === column && e.task === task);
  return el("section", {}, comparisonLine(), c.flipped.map((task) => el("div", {class: "flip", "data-task": task},
    el("h2", {}, task), el("div", {class: "sides"}, [c.baseline, c.other].map((column) =>
      el("div", {class: "side"}, el("h3", {}, column), side(column, task).map(episodeView)))))));
}

function render() {
  const state = readState();
  const main = document.getElementById("app");
  main.replaceChildren(header(state));
  if (state.view === "tasks") main.append(tasksView(state));
  else if (state.view === "curves") main.append(curvesView());
  else if (state.view === "flipped" && DATA.comparison) main.append(flippedView());
  else {
    main.append(filterBar(state));
    const chosen = DATA.episodes.find((e) => String(e.id) === state.episode);
    // an open episode beside the list, each scrolled on its own
    if (chosen) main.append(el("div", {class: "split"}, el("div", {class: "pane"}, episodeList(state)), el("div", {class: "pane"}, episodeView(chosen))));
    else main.append(episodeList(state));
  }
  window.ctuRendered = performance.now();  // ms since the page began loading: when the view last rendered
}

window.addEventListener("hashchange", render);
render();
