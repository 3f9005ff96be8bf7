// Strata's search page: plain JavaScript over the HTTP/JSON API (service/http_api.py), which
// speaks the proto's canonical JSON mapping (lowerCamelCase names, enums by name, int64 as
// strings). No build step: this file is served as it is.
"use strict";

const state = { info: null, chips: [], lastQuery: null, lastVersion: null, conceptTimer: null };
const $ = (id) => document.getElementById(id);

function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs)) {
    if (key === "class") node.className = value;
    else if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
    else node.setAttribute(key, value);
  }
  for (const child of children) {
    if (child !== null && child !== undefined) node.append(child);
  }
  return node;
}

function showError(message) {
  const box = $("error");
  box.textContent = message;
  box.hidden = !message;
}

async function api(path, body) {
  const init = body === undefined ? {} : {
    method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(body),
  };
  const response = await fetch(path, init);
  const data = await response.json();
  if (!response.ok) {
    const error = data.error || {};
    throw new Error(`${error.status || response.status}: ${error.message || "request failed"}`);
  }
  return data;
}

const pretty = (name) => String(name).replace(/^[A-Z]+_[A-Z]+_/, "").replace(/^GRANULARITY_/, "").toLowerCase();
const fixed = (value, digits = 3) => Number(value || 0).toFixed(digits);

// --- start-up: what the server serves ---------------------------------------------------------

async function loadInfo() {
  const info = await api("/v1/index-info");
  state.info = info;
  const contract = info.prefixes.map((p) => `${pretty(p.granularity)} ${p.prefixLength}`).join(" · ");
  $("bundle-info").textContent =
    `${info.bundleName} · ${info.rows} rows · ${info.encoder} · ${info.modality} · ${contract}`;
  $("image-label").hidden = !info.imageQueries;
  buildMetadataControls(info.metadataSchema || []);
}

// --- metadata conditions and group-by, from GetIndexInfo.metadata_schema ----------------------

function buildMetadataControls(schema) {
  const controls = $("metadata-controls");
  controls.hidden = schema.length === 0;
  const groupBy = $("group-by");
  for (const field of schema) groupBy.append(el("option", { value: field.name }, field.name));
  $("add-condition").addEventListener("click", () => addCondition(schema));
}

function addCondition(schema, saved = null) {
  const field = el("select", { class: "field" }, ...schema.map((f) => el("option", { value: f.name }, f.name)));
  const op = el("select", { class: "op" },
    el("option", { value: "equals" }, "="), el("option", { value: "anyOf" }, "any of"),
    el("option", { value: "range" }, "in range"));
  const first = el("input", { class: "value", placeholder: "value" });
  const second = el("input", { class: "value-max", placeholder: "max", hidden: "" });
  op.addEventListener("change", () => {
    second.hidden = op.value !== "range";
    first.placeholder = op.value === "range" ? "min" : op.value === "anyOf" ? "a, b, c" : "value";
  });
  const box = el("span", { class: "condition" }, field, op, first, second,
    el("button", { type: "button", class: "remove", onclick: () => box.remove() }, "×"));
  $("conditions").append(box);
  if (saved) {
    field.value = saved.field;
    op.value = saved.op;
    first.value = saved.value || "";
    second.value = saved.max || "";
    op.dispatchEvent(new Event("change"));
  }
}

function conditionBoxes() {
  return [...document.querySelectorAll("#conditions .condition")].map((box) => ({
    field: box.querySelector(".field").value, op: box.querySelector(".op").value,
    value: box.querySelector(".value").value, max: box.querySelector(".value-max").value,
  })).filter((c) => c.value.trim() || c.max.trim());
}

function typedValue(type, text) {
  const value = text.trim();
  if (type === "integer") return { integer: value };
  if (type === "number") return { number: Number(value) };
  if (type === "bool") return { flag: ["true", "1", "yes"].includes(value.toLowerCase()) };
  return { text: value };
}

function conditions() {
  const schema = Object.fromEntries((state.info.metadataSchema || []).map((f) => [f.name, f.type]));
  const where = [];
  for (const box of document.querySelectorAll("#conditions .condition")) {
    const field = box.querySelector(".field").value;
    const type = schema[field];
    const op = box.querySelector(".op").value;
    const first = box.querySelector(".value").value;
    const second = box.querySelector(".value-max").value;
    if (op === "equals" && first.trim()) where.push({ field, equals: typedValue(type, first) });
    if (op === "anyOf" && first.trim()) {
      const values = first.split(",").filter((v) => v.trim()).map((v) => typedValue(type, v));
      where.push({ field, anyOf: { values } });
    }
    if (op === "range" && (first.trim() || second.trim())) {
      const range = {};
      if (first.trim()) range.min = typedValue(type, first);
      if (second.trim()) range.max = typedValue(type, second);
      where.push({ field, range });
    }
  }
  return where;
}

// --- concept chips ------------------------------------------------------------------------------

function renderChips() {
  const box = $("chips");
  box.replaceChildren(...state.chips.map((chip, i) => el("span", {
    class: "chip", "data-mode": chip.mode, "data-ref": chip.label || chip.name,
    title: "click: require ⇄ exclude",
    onclick: () => { chip.mode = chip.mode === "require" ? "exclude" : "require"; renderChips(); },
  }, `${chip.mode === "exclude" ? "−" : "+"} ${chip.text}`,
  el("button", { type: "button", class: "remove", "aria-label": "remove",
    onclick: (event) => { event.stopPropagation(); state.chips.splice(i, 1); renderChips(); } }, "×"))));
}

async function suggestConcepts() {
  const text = $("concept-input").value.trim();
  if (!text) return;
  const page = await api(`/v1/concepts?nameContains=${encodeURIComponent(text)}&pageSize=20`);
  $("concept-options").replaceChildren(...page.concepts.map((c) =>
    el("option", { value: `${c.name} (${c.label})` })));
}

function addChip() {
  const input = $("concept-input");
  const text = input.value.trim();
  if (!text) return;
  const labelled = text.match(/^(.*) \(([+-]\d+)\)$/);
  state.chips.push(labelled
    ? { text: labelled[1], label: labelled[2], mode: "require" }
    : { text, name: text, mode: "require" });
  input.value = "";
  renderChips();
}

function conceptFilter() {
  const ref = (chip) => (chip.label ? { label: chip.label } : { name: chip.name });
  return {
    require: state.chips.filter((c) => c.mode === "require").map(ref),
    exclude: state.chips.filter((c) => c.mode === "exclude").map(ref),
    scope: `CONCEPT_SCOPE_${$("scope").value}`,
  };
}

// --- search ---------------------------------------------------------------------------------------

function fileAsBase64(file) {
  return new Promise((resolve, reject) => {
    const reader = new FileReader();
    reader.onload = () => resolve(String(reader.result).split(",", 2)[1]);
    reader.onerror = () => reject(reader.error);
    reader.readAsDataURL(file);
  });
}

async function currentQuery() {
  const file = $("image").files[0];
  if (file && state.info.imageQueries) return { image: await fileAsBase64(file) };
  return { text: $("query").value };
}

// --- the search in the URL: reload, back and a shared link give the same search --------------------

function searchParams() {
  const params = new URLSearchParams();
  const text = $("query").value;
  if (text) params.set("q", text);
  params.set("g", $("granularity").value);
  params.set("k", String(Number($("top-k").value) || 10));
  const chipText = (c) => (c.label ? `${c.text} (${c.label})` : c.text);
  for (const chip of state.chips) params.append(chip.mode, chipText(chip));
  if ($("scope").value !== "ANY") params.set("scope", $("scope").value);
  const where = conditionBoxes();
  if (where.length) params.set("where", JSON.stringify(where));
  if ($("group-by").value) {
    params.set("group", $("group-by").value);
    params.set("per", String(Number($("group-size").value) || 1));
  }
  return params;
}

function remember(params) {
  const url = `${location.pathname}?${params}`;
  if (`${location.pathname}${location.search}` === url) return;
  if (location.search) history.pushState(null, "", url);
  else history.replaceState(null, "", url);
}

function restoreSearch() {
  const params = new URLSearchParams(location.search);
  if (!params.has("q")) return false;
  $("query").value = params.get("q");
  const pick = (id, value) => {
    if (value !== null && [...$(id).options].some((o) => o.value === value)) $(id).value = value;
  };
  pick("granularity", params.get("g"));
  if (params.get("k")) $("top-k").value = params.get("k");
  pick("scope", params.get("scope") || "ANY");
  state.chips = [];
  for (const mode of ["require", "exclude"]) {
    for (const text of params.getAll(mode)) {
      const labelled = text.match(/^(.*) \(([+-]\d+)\)$/);
      state.chips.push(labelled ? { text: labelled[1], label: labelled[2], mode } : { text, name: text, mode });
    }
  }
  renderChips();
  $("conditions").replaceChildren();
  let saved = [];
  try { saved = JSON.parse(params.get("where") || "[]"); } catch (error) { saved = []; }
  const schema = state.info.metadataSchema || [];
  for (const condition of saved) {
    if (schema.some((f) => f.name === condition.field)) addCondition(schema, condition);
  }
  pick("group-by", params.get("group") || "");
  if (params.get("per")) $("group-size").value = params.get("per");
  return true;
}

async function search(event) {
  if (event) event.preventDefault();
  showError("");
  if (event) remember(searchParams());
  const fields = ["caption", "image_path"].filter((f) => state.info.metadataFields.includes(f));
  const request = {
    query: await currentQuery(),
    granularity: `GRANULARITY_${$("granularity").value}`,
    topK: Number($("top-k").value) || 10,
    filter: conceptFilter(),
    metadataFields: fields,
  };
  const where = conditions();
  if (where.length) request.where = where;
  if ($("group-by").value) {
    request.groupBy = $("group-by").value;
    request.groupSize = Number($("group-size").value) || 1;
  }
  state.lastQuery = request.query;
  try {
    renderResults(await api("/v1/search", request));
  } catch (error) {
    showError(error.message);
    $("results").replaceChildren();
    $("routing").replaceChildren();
  }
}

function renderResults(response) {
  state.lastVersion = response.bundleVersion;
  const plan = response.plan || {};
  const routing = [
    el("span", { class: "granularity", "data-testid": "routed" },
      `${pretty(response.granularity)} (prefix ${response.prefixLength})`),
    " — ",
    el("span", { class: "reason", "data-testid": "routing-reason" }, response.routingReason),
    ` · plan ${pretty(plan.kind || "PLAN_KIND_DIRECT")}`,
  ];
  if (response.filteredRows !== undefined) {
    const made = (response.filterConcepts || [])
      .map((f) => `${f.role === "exclude" ? "not " : ""}${f.reference}: ${f.made}`).join(", ");
    routing.push(el("span", { "data-testid": "filtered-rows" }, ` · filter allows ${response.filteredRows} rows`));
    if (made) routing.push(el("span", { "data-testid": "filter-made" }, ` (${made})`));
  }
  routing.push(` · ${response.hits.length} hits`);
  for (const warning of response.warnings || []) {
    routing.push(el("div", { class: "warning", "data-testid": "warning" }, `⚠ ${warning}`));
  }
  $("routing").replaceChildren(...routing);
  $("results").replaceChildren(...response.hits.map((hit, rank) => card(hit, rank)));
}

function card(hit, rank) {
  const metadata = hit.metadata || {};
  const image = metadata.image_path
    ? el("img", { class: "thumb", alt: hit.id, loading: "lazy",
      src: `/thumbnails/${hit.row}?version=${state.lastVersion}` })
    : null;
  return el("div", { class: "card", "data-row": hit.row, "data-id": hit.id },
    image,
    hit.group ? el("div", { class: "group" }, `group ${hit.group}`) : null,
    el("div", { class: "caption" }, metadata.caption || hit.id),
    el("div", { class: "meta" },
      el("span", { class: "score" }, fixed(hit.score)),
      el("span", { class: "rank" }, `#${rank + 1} · ${hit.id}`)),
    el("button", { type: "button", class: "explain", onclick: () => explain(hit) }, "why?"));
}

// --- explanation --------------------------------------------------------------------------------

function bar(label, value, scale, testid) {
  const width = Math.min(100, (Math.abs(value) / (scale || 1)) * 100);
  return el("div", { class: "bar-row", "data-testid": testid },
    el("span", { class: "bar-label" }, label),
    el("span", { class: "track" }, el("span", {
      class: value < 0 ? "fill negative" : "fill", style: `width:${width.toFixed(1)}%; display:block`,
    })),
    el("span", { class: "value" }, fixed(value)));
}

async function explain(hit) {
  showError("");
  try {
    const why = await api("/v1/explain", { query: state.lastQuery, row: hit.row, nearCaptions: 3 });
    $("explanation-title").textContent = `why ${why.itemId}`;
    const described = why.itemDescription || { phrase: "", captions: [] };
    const near = (described.captions || []).map((c) => c.text).filter(Boolean);
    $("explanation-description").replaceChildren(
      el("span", { class: "phrase" }, described.phrase ? `reads as: ${described.phrase}` : ""),
      ...(near.length ? [el("span", { class: "near" }, ` · near: ${near.join(" / ")}`)] : []));
    $("explanation-description").hidden = !described.phrase && !near.length;
    $("similarities").replaceChildren(...why.similarities.map((s) =>
      bar(`${pretty(s.granularity)} ${s.prefixLength}`, s.cosine, 1, "similarity")));
    const shared = why.sharedConcepts;
    const top = Math.max(1e-9, ...shared.map((c) => Math.abs(c.contribution)));
    $("shared").replaceChildren(...(shared.length
      ? shared.slice(0, 16).map((c) => bar(`${c.zeroShot ? `${c.name} (zero-shot)` : c.name === c.label ? c.label : `${c.name} (${c.label})`}${c.scope ? ` ·${c.scope[0].toUpperCase()}` : ""}`,
        c.contribution, top, "shared-concept"))
      : [el("p", {}, "no concept active in both")]));
    $("explanation").hidden = false;
  } catch (error) {
    showError(error.message);
  }
}

// --- the concept browser ----------------------------------------------------------------------

async function browseConcepts() {
  const text = $("concept-search").value.trim();
  const query = `pageSize=100${text ? `&nameContains=${encodeURIComponent(text)}` : ""}`;
  try {
    const page = await api(`/v1/concepts?${query}`);
    $("concept-list").replaceChildren(...page.concepts.map((c) => el("li", {
      class: "concept-item", "data-label": c.label, onclick: (event) => showConcept(c.label, event.currentTarget),
    }, el("span", {}, c.name), el("span", { class: "label" }, `${c.label}${c.scope ? ` · ${c.scope}` : ""}`))));
  } catch (error) {
    showError(error.message);
  }
}

async function showConcept(label, item) {
  for (const node of document.querySelectorAll(".concept-item.selected")) node.classList.remove("selected");
  if (item) item.classList.add("selected");
  const found = await api("/v1/concepts:get", { concept: { label } });
  const c = found.concepts[0];
  const facts = [
    ["label", c.label], ["scope", c.scope || "not measured"], ["name score", fixed(c.score)],
    ["frequency", fixed(c.frequency, 4)], ["active rows", c.activeRows],
    ...(c.galleryAgreement === undefined ? [] : [["gallery agreement", fixed(c.galleryAgreement)]]),
    ...(c.hiddenOnGallery ? [["hidden here", c.hiddenOnGallery]] : []),
    ["runner-ups", c.runnerUps.map((r) => `${r.name} (${fixed(r.score, 2)})`).join(", ") || "—"],
  ];
  $("concept-detail").replaceChildren(
    el("h2", { "data-testid": "concept-name" }, c.name),
    el("dl", {}, ...facts.flatMap(([k, v]) => [el("dt", {}, k),
      el("dd", { class: k === "scope" && c.scope ? `scope-${c.scope}` : "", "data-testid": `concept-${k.replace(" ", "-")}` }, String(v))])),
    el("h3", {}, "top examples"),
    el("div", {}, ...c.examples.map((e) => el("div", { class: "example", "data-testid": "example" },
      e.text || e.id, el("span", { class: "activation" }, fixed(e.activation))))));
}

// --- wiring ----------------------------------------------------------------------------------------

function showView(id) {
  for (const tab of document.querySelectorAll(".tab")) tab.classList.toggle("active", tab.dataset.view === id);
  for (const view of document.querySelectorAll(".view")) view.hidden = view.id !== id;
  if (id === "view-concepts" && !$("concept-list").children.length) browseConcepts();
}

function wire() {
  $("search-form").addEventListener("submit", search);
  for (const tab of document.querySelectorAll(".tab")) tab.addEventListener("click", () => showView(tab.dataset.view));
  $("close-explanation").addEventListener("click", () => { $("explanation").hidden = true; });
  $("concept-input").addEventListener("input", () => {
    clearTimeout(state.conceptTimer);
    state.conceptTimer = setTimeout(() => suggestConcepts().catch((e) => showError(e.message)), 120);
  });
  $("concept-input").addEventListener("keydown", (event) => {
    if (event.key === "Enter") { event.preventDefault(); addChip(); }
  });
  $("concept-input").addEventListener("change", () => {
    if (/\([+-]\d+\)$/.test($("concept-input").value)) addChip();
  });
  $("concept-search").addEventListener("input", () => {
    clearTimeout(state.conceptTimer);
    state.conceptTimer = setTimeout(browseConcepts, 150);
  });
}

wire();
window.addEventListener("popstate", () => { if (restoreSearch()) search(); });
loadInfo().then(() => (restoreSearch() ? search() : null))
  .then(() => document.body.setAttribute("data-ready", "true"))
  .catch((error) => showError(`cannot read the index: ${error.message}`));
