// The sluice operator console: a page of the admin API, talking only to
// it (same origin, JSON), rendering with DOM calls (no HTML from data).
"use strict";

const $ = (id) => document.getElementById(id);
const views = ["login", "now", "top", "explain", "rules"];
let timer = null;
let rulesRevision = null;

function el(tag, text, cls) {
  const e = document.createElement(tag);
  if (text !== undefined && text !== null) e.textContent = String(text);
  if (cls) e.className = cls;
  return e;
}

function row(cells) {
  const tr = el("tr");
  for (const c of cells) {
    const td = el("td");
    if (c instanceof Node) td.appendChild(c); else td.textContent = String(c);
    tr.appendChild(td);
  }
  return tr;
}

function fill(id, nodes) {
  const t = $(id);
  t.replaceChildren(...nodes);
}

class APIError extends Error {
  constructor(status, body) {
    super((body && body.message) || ("HTTP " + status));
    this.status = status;
  }
}

async function api(method, path, body, headers) {
  const opt = { method, headers: Object.assign({}, headers || {}), credentials: "same-origin" };
  if (body !== undefined) {
    opt.headers["Content-Type"] = "application/json";
    opt.body = typeof body === "string" ? body : JSON.stringify(body);
  }
  const res = await fetch(path, opt);
  if (res.status === 401) {
    show("login");
    throw new APIError(401, { message: "log in first" });
  }
  const text = await res.text();
  let data = null;
  if (text) { try { data = JSON.parse(text); } catch (e) { data = { message: text }; } }
  if (!res.ok) throw new APIError(res.status, data);
  return { data, etag: res.headers.get("ETag") };
}

function show(name) {
  for (const v of views) $("view-" + v).hidden = v !== name;
  $("nav").hidden = name === "login";
  for (const a of document.querySelectorAll("nav a")) a.classList.toggle("active", a.id === "nav-" + name);
  if (timer) { clearInterval(timer); timer = null; }
  if (name === "now") { loadNow(); timer = setInterval(loadNow, 1000); }
  if (name === "top") { loadTop(); timer = setInterval(loadTop, 2000); }
  if (name === "rules") loadRules();
}

function route() {
  const name = (location.hash || "#now").slice(1);
  show(views.includes(name) && name !== "login" ? name : "now");
}

function fmt(x) {
  if (x === undefined || x === null) return "–";
  if (x >= 100) return Math.round(x).toString();
  return (Math.round(x * 10) / 10).toString();
}

function ms(x) { return x < 0 ? "> 1 s" : x === 0 ? "–" : "≤ " + x + " ms"; }

function chart(series) {
  const svg = $("now-chart");
  const ns = "http://www.w3.org/2000/svg";
  const peak = Math.max(1, ...series.map((p) => Math.max(p.allowed, p.denied)));
  const w = 600, h = 120, n = Math.max(series.length - 1, 1);
  const line = (key, cls) => {
    const pts = series.map((p, i) => (i * w / n).toFixed(1) + "," + (h - 4 - (p[key] / peak) * (h - 8)).toFixed(1));
    const pl = document.createElementNS(ns, "polyline");
    pl.setAttribute("points", pts.join(" "));
    pl.setAttribute("class", cls);
    return pl;
  };
  svg.replaceChildren(line("allowed", "line-allowed"), line("denied", "line-denied"));
}

async function loadNow() {
  let r;
  try { r = await api("GET", "/console/api/now"); } catch (e) { return; }
  const d = r.data;
  $("now-scope").textContent = "Numbers of " + d.scope + ".";
  $("now-allowed").textContent = fmt(d.allowed_per_s);
  $("now-denied").textContent = fmt(d.denied_per_s);
  $("now-local").textContent = fmt(100 * d.local_share) + " %";
  $("now-revision").textContent = d.rules.revision;
  $("now-rules-from").textContent = "from the " + d.rules.kind + " " + d.rules.location +
    (d.rules.loaded ? ", loaded " + d.rules.loaded : "") + (d.rules.error ? " — ERROR: " + d.rules.error : "");
  chart(d.series);
  const rules = d.per_rule || [];
  fill("now-rules", rules.map((x) => row([x.rule || "(no rule matched)", fmt(x.allowed), fmt(x.denied)])));
  const store = Object.entries(d.store || {}).map(([k, v]) => row([k, typeof v === "object" ? JSON.stringify(v) : v]));
  if (d.breaker) store.push(row(["breaker", d.breaker]));
  fill("now-store", store);
  fill("now-latency", (d.latency || []).map((l) => row([l.store, fmt(l.calls), ms(l.p50_ms), ms(l.p90_ms), ms(l.p99_ms)])));
}

async function loadTop() {
  let r;
  try { r = await api("GET", "/console/api/top?n=10"); } catch (e) { return; }
  const d = r.data;
  $("top-note").textContent = "Callers denied most per rule on " + d.scope + ", " + d.window +
    ". Counts come from a summary of " + d.counters_per_rule + " counters per rule: each is at most the shown overcount above the true count." +
    (d.untracked_denials ? " Denials of rules beyond the tracked ones: " + d.untracked_denials + "." : "");
  const blocks = d.rules.map((t) => {
    const div = el("div");
    div.appendChild(el("h3", t.rule + " — " + t.denials + " denials (counts at most " + t.max_overcount + " over)"));
    const table = el("table");
    const head = el("tr");
    for (const h of ["caller", "denials", "bucket remaining / limit", "whole in", ""]) head.appendChild(el("th", h));
    table.appendChild(head);
    for (const c of t.callers) {
      const btn = el("button", "Explain");
      btn.type = "button";
      btn.className = "explain-caller";
      btn.dataset.caller = c.caller;
      btn.addEventListener("click", () => explainCaller(c.caller));
      const tr = row([c.caller, c.denials + (c.max_overcount ? " (≤ +" + c.max_overcount + ")" : ""),
        c.state ? c.state : c.remaining + " / " + c.limit, c.state ? "" : fmt(c.reset_after_s) + " s", btn]);
      tr.className = "top-caller";
      table.appendChild(tr);
    }
    div.appendChild(table);
    return div;
  });
  if (blocks.length === 0) blocks.push(el("p", "No caller was denied in the last minutes."));
  fill("top-rules", blocks);
}

function explainCaller(caller) {
  location.hash = "#explain";
  for (const id of ["ex-user", "ex-api-key", "ex-ip"]) $(id).value = "";
  if (caller.startsWith("user:")) $("ex-user").value = caller.slice(5);
  else if (caller.startsWith("ip:")) $("ex-ip").value = caller.slice(3).replace(/\/\d+$/, "1");
  else { $("ex-error").textContent = caller + ": give this caller's key to explain its calls"; return; }
  runExplain();
}

function lines(text, sep) {
  return text.split("\n").map((l) => l.trim()).filter((l) => l).map((l) => {
    const i = l.indexOf(sep);
    return i < 0 ? [l, ""] : [l.slice(0, i).trim(), l.slice(i + 1).trim()];
  });
}

async function runExplain() {
  $("ex-error").textContent = "";
  let body;
  const envoy = $("ex-envoy").value.trim();
  if (envoy) {
    try { body = JSON.parse(envoy); } catch (e) {
      $("ex-error").textContent = "Envoy request: not JSON: " + e.message; $("ex-result").hidden = true; return;
    }
  } else {
    body = {
      user: $("ex-user").value, api_key: $("ex-api-key").value, ip: $("ex-ip").value,
      method: $("ex-method").value, path: $("ex-path").value, plan: $("ex-plan").value,
      cost: Number($("ex-cost").value || 0),
    };
    const hs = lines($("ex-headers").value, ":");
    if (hs.length) body.headers = Object.fromEntries(hs);
    const es = lines($("ex-entries").value, "=");
    if (es.length) body.entries = es.map(([key, value]) => ({ key, value }));
  }
  let r;
  try { r = await api("POST", "/explain", body); } catch (e) {
    $("ex-error").textContent = e.message; $("ex-result").hidden = true; return;
  }
  const d = r.data;
  const h = $("ex-decision");
  if (d.checks) { // a whole Envoy request
    h.textContent = "Envoy request to " + d.domain + ": " + d.overall_code;
    h.className = d.overall_code === "OK" ? "allow" : "deny";
    $("ex-matched").textContent = "Rules revision " + d.revision + "; one check per descriptor, or per descriptors the Envoy API unites.";
    $("ex-table").hidden = true;
    fill("ex-checks", d.checks.map((c) => {
      const div = el("div");
      const what = "Descriptor " + c.descriptors.join(" + ") + (c.descriptors.length > 1 ? " (united into one check)" : "");
      // quota mode: a descriptor reported over while the request passes on another
      const quota = c.code === "OVER_LIMIT" && c.decision && c.decision.allowed ?
        " (a quota descriptor over its limit: reported, and the request passes on its other descriptors)" : "";
      div.appendChild(el("h4", what + ": " + c.code + quota, c.code === "OK" ? "allow" : "deny"));
      if (c.empty) { div.appendChild(el("p", "No entries: it counts nothing.", "small")); return div; }
      div.appendChild(el("p", decisionText(c.decision) + ". Plan " + (c.plan || "(none)") + "; rules matched: " +
        (c.matched.length ? c.matched.join(", ") : "none"), "small"));
      div.appendChild(bucketTable(c.buckets));
      return div;
    }));
  } else {
    h.textContent = decisionText(d.decision);
    h.className = d.decision.allowed ? "allow" : "deny";
    $("ex-matched").textContent = "Plan " + (d.plan || "(none)") + "; rules matched at revision " + d.revision + ": " +
      (d.matched.length ? d.matched.join(", ") : "none");
    $("ex-table").hidden = false;
    fill("ex-buckets", bucketRows(d.buckets));
    fill("ex-checks", []);
  }
  $("ex-note").textContent = d.note;
  $("ex-result").hidden = false;
}

function decisionText(dec) {
  return dec.allowed ? "Allowed" : "Denied by " + (dec.rule || "(too many rules)") + " — " + dec.reason +
    (dec.retry_after_s ? ", retry in " + fmt(dec.retry_after_s) + " s" : "");
}

function bucketRows(buckets) {
  return buckets.map((b) => row([b.rule + (b.shadow ? " (shadow)" : ""), b.bucket,
    b.remaining + " / " + b.limit, fmt(b.reset_after_s) + " s",
    el("span", b.allows ? "passes" : "denied: " + b.reason, b.allows ? "allow" : "deny")]));
}

function bucketTable(buckets) {
  const table = el("table");
  const head = el("thead");
  head.appendChild(row(["rule", "bucket", "remaining / limit", "whole in", "this call"]));
  const body = el("tbody");
  body.replaceChildren(...bucketRows(buckets));
  table.append(head, body);
  return table;
}

function doc(rulesData, clientsData) {
  return JSON.stringify({ rules: rulesData.rules, clients: clientsData.clients, default_plan: rulesData.default_plan }, null, 2);
}

async function loadRules() {
  $("rules-error").textContent = "";
  try {
    const [r, c, n] = await Promise.all([api("GET", "/rules"), api("GET", "/clients"), api("GET", "/console/api/now")]);
    $("rules-from").textContent = "Rules from the " + n.data.rules.kind + " " + n.data.rules.location + "; numbers of " + n.data.scope + ".";
    rulesRevision = r.data.revision;
    $("rules-revision").textContent = rulesRevision;
    $("rules-doc").value = doc(r.data, c.data);
  } catch (e) { $("rules-error").textContent = e.message; return; }
  loadRevisions();
}

async function loadRevisions() {
  let r;
  try { r = await api("GET", "/console/api/revisions"); } catch (e) { $("rules-error").textContent = e.message; return; }
  const d = r.data;
  $("revisions-from").textContent = "From " + d.from + ".";
  fill("revisions", d.revisions.map((v) => {
    const cell = el("span");
    if (v.revision !== d.current) {
      const diff = el("button", "Diff to current");
      diff.type = "button";
      diff.className = "diff-rev";
      diff.dataset.revision = v.revision;
      diff.addEventListener("click", () => showDiff(v.revision, d.current));
      const back = el("button", "Roll back to this");
      back.type = "button";
      back.className = "rollback-rev";
      back.dataset.revision = v.revision;
      back.addEventListener("click", () => rollback(v.revision));
      cell.append(diff, " ", back);
    } else cell.textContent = "in force";
    const tr = row([v.revision, v.time || "", (v.actors || []).join(", "), v.changes, cell]);
    tr.id = "rev-" + v.revision;
    return tr;
  }));
}

function changeNodes(changes) {
  if (!changes.length) return [el("p", "No change.")];
  return changes.map((c) => {
    const div = el("div", null, "change " + c.op);
    div.appendChild(el("strong", c.op + " " + c.kind + (c.id ? " " + c.id : "")));
    if (c.before !== undefined) div.appendChild(el("pre", "- " + JSON.stringify(c.before), "del"));
    if (c.after !== undefined) div.appendChild(el("pre", "+ " + JSON.stringify(c.after), "add"));
    return div;
  });
}

async function showDiff(from, to) {
  let r;
  try { r = await api("GET", "/console/api/diff?from=" + from + "&to=" + to); } catch (e) { $("rules-error").textContent = e.message; return; }
  $("diff-title").hidden = false;
  $("diff-title").textContent = "Changes from revision " + from + " to " + to;
  fill("diff", changeNodes(r.data.changes));
}

async function apply(dryRun) {
  $("rules-error").textContent = "";
  let r;
  try {
    r = await api("POST", "/apply" + (dryRun ? "?dry_run=true" : ""), $("rules-doc").value, { "If-Match": '"' + rulesRevision + '"' });
  } catch (e) { $("rules-error").textContent = e.message; fill("rules-result", []); return; }
  const d = r.data;
  const head = el("p", (dryRun ? "Dry run: applying would make " : "Applied: ") + d.changes.length + " change(s)" +
    (dryRun ? " on revision " + d.revision + "; nothing was stored." : ", now revision " + d.revision + "."), "ok");
  head.id = "rules-outcome";
  fill("rules-result", [head, ...changeNodes(d.changes)]);
  if (!dryRun) { await loadRules(); fill("rules-result", [head, ...changeNodes(d.changes)]); }
}

async function rollback(rev) {
  $("rules-error").textContent = "";
  let r;
  try {
    r = await api("POST", "/console/api/rollback", { revision: rev }, { "If-Match": '"' + rulesRevision + '"' });
  } catch (e) { $("rules-error").textContent = e.message; return; }
  const head = el("p", "Rolled back to the rules of revision " + rev + ": now revision " + r.data.revision + ".", "ok");
  head.id = "rules-outcome";
  await loadRules();
  fill("rules-result", [head, ...changeNodes(r.data.changes)]);
}

document.addEventListener("DOMContentLoaded", () => {
  $("login-form").addEventListener("submit", async (ev) => {
    ev.preventDefault();
    $("login-error").textContent = "";
    try {
      await api("POST", "/console/login", { token: $("login-token").value });
      $("login-token").value = "";
      route();
    } catch (e) { $("login-error").textContent = e.status === 401 ? "That is not an admin token of this sluice." : e.message; }
  });
  $("logout").addEventListener("click", async () => { try { await api("POST", "/console/logout"); } catch (e) { } show("login"); });
  $("explain-form").addEventListener("submit", (ev) => { ev.preventDefault(); runExplain(); });
  $("rules-dry-run").addEventListener("click", () => apply(true));
  $("rules-apply").addEventListener("click", () => apply(false));
  $("rules-reload").addEventListener("click", loadRules);
  window.addEventListener("hashchange", route);
  route();
});
