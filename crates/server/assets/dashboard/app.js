// Tally's dashboard: one page, no build step, embedded in the binary. Every figure it shows comes
// from the public API (POST /api/v2/query, GET /api/realtime, GET /api/sessions, GET /api/sites), so a script with a
// key can get the same numbers. Signed-in users send the login cookie plus the X-Tally-CSRF token;
// shared links send X-Tally-Share. The page's state lives in the URL, so a view can be bookmarked.
"use strict";

const RANGES = [["realtime", "Realtime"], ["day", "Today"], ["7d", "Last 7 days"], ["30d", "Last 30 days"], ["month", "Month to date"],
  ["6mo", "Last 6 months"], ["12mo", "Last 12 months"], ["custom", "Custom…"]];
const INTERVALS = ["hour", "day", "week", "month"];
const OPS = [["is", "is"], ["is_not", "is not"], ["contains", "contains"], ["contains_not", "does not contain"],
  ["matches", "matches"], ["matches_not", "does not match"]];
// Every dimension a filter can name; `props` asks for a property key.
const FILTER_DIMENSIONS = [["event:page", "Page"], ["visit:entry_page", "Entry page"], ["visit:exit_page", "Exit page"],
  ["event:hostname", "Hostname"], ["visit:source", "Source"], ["visit:referrer", "Referrer"], ["visit:utm_source", "UTM source"],
  ["visit:utm_medium", "UTM medium"], ["visit:utm_campaign", "UTM campaign"], ["visit:utm_content", "UTM content"],
  ["visit:utm_term", "UTM term"], ["visit:country", "Country"], ["visit:device", "Device"], ["visit:browser", "Browser"],
  ["visit:browser_version", "Browser version"], ["visit:os", "Operating system"], ["visit:os_version", "OS version"],
  ["visit:region", "Region"], ["visit:city", "City"], ["visit:screen", "Screen size"], ["visit:language", "Language"],
  ["event:goal", "Goal"], ["event:name", "Event name"], ["props", "Property…"]];
const escapeValue = (v) => v.replace(/%/g, "%25").replace(/\|/g, "%7C");
function unescapeValue(v) { try { return decodeURIComponent(v); } catch (_) { return v; } }
const COMPARISONS = [["previous_period", "vs previous period"], ["year_over_year", "vs year before"], ["off", "no comparison"]];
const TOP = [["visitors", "Unique visitors"], ["visits", "Visits"], ["pageviews", "Pageviews"],
  ["views_per_visit", "Views per visit"], ["bounce_rate", "Bounce rate"], ["visit_duration", "Visit duration"]];
const PANELS = [
  { id: "pages", title: "Pages", tabs: [["event:page", "Top pages"], ["visit:entry_page", "Entry pages"], ["visit:exit_page", "Exit pages"]] },
  { id: "sources", title: "Sources", tabs: [["visit:source", "Sources"], ["visit:referrer", "Referrers"], ["visit:utm_source", "UTM source"],
    ["visit:utm_medium", "UTM medium"], ["visit:utm_campaign", "UTM campaign"]] },
  { id: "locations", title: "Locations", tabs: [["map", "Map"], ["visit:country", "Countries"], ["visit:region", "Regions"], ["visit:city", "Cities"]] },
  { id: "devices", title: "Devices", tabs: [["visit:device", "Devices"], ["visit:browser", "Browser"], ["visit:browser_version", "Browser version"],
    ["visit:os", "OS"], ["visit:os_version", "OS version"], ["visit:screen", "Size"], ["visit:language", "Language"]] },
  { id: "goals", title: "Goals", tabs: [["event:goal", "Goals"]], metrics: ["visitors", "events", "conversion_rate"] },
  { id: "events", title: "Custom events", tabs: [["event:name", "Events"], ["props", "Properties"]], metrics: ["visitors", "events"] },
];
const S = { csrf: null, share: null, user: null, sites: [], site: null, period: "30d", from: "", to: "",
  interval: "day", metric: "visitors", comparison: "previous_period", funnel: null, filters: [], tabs: {}, prop: "", propKeys: null, timer: null, seq: 0, imports: true };

// ---- helpers ----
function h(tag, attrs, ...kids) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k.startsWith("on")) el.addEventListener(k.slice(2), v);
    else if (k === "class") el.className = v;
    else el.setAttribute(k, v === true ? "" : v);
  }
  for (const kid of kids.flat()) if (kid !== null && kid !== undefined && kid !== false) el.append(kid instanceof Node ? kid : String(kid));
  return el;
}
const SVG = "http://www.w3.org/2000/svg";
function s(tag, attrs, ...kids) {
  const el = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs || {})) el.setAttribute(k, v);
  for (const kid of kids) el.append(kid instanceof Node ? kid : String(kid));
  return el;
}
async function api(method, path, body) {
  const headers = {};
  if (S.csrf) headers["X-Tally-CSRF"] = S.csrf;
  if (S.share) headers["X-Tally-Share"] = S.share;
  if (body !== undefined) headers["Content-Type"] = "application/json";
  const r = await fetch(path, { method, headers, credentials: "same-origin", body: body === undefined ? undefined : JSON.stringify(body) });
  let data = null;
  try { data = await r.json(); } catch (_) { /* not JSON */ }
  if (!r.ok) { const e = new Error((data && data.error) || r.statusText); e.status = r.status; e.data = data; throw e; }
  return data;
}
// POST /api/export for the dashboard's range and filters (one panel's CSV, or every panel in a
// zip) and hand the file to the browser as a download.
const EXPORTS = { "event:page": "pages", "visit:entry_page": "entry_pages", "visit:exit_page": "exit_pages", "visit:source": "sources",
  "visit:referrer": "referrers", "visit:utm_source": "utm_sources", "visit:utm_medium": "utm_mediums", "visit:utm_campaign": "utm_campaigns",
  "visit:country": "countries", "map": "countries", "visit:region": "regions", "visit:city": "cities", "visit:device": "devices",
  "visit:browser": "browsers", "visit:browser_version": "browser_versions", "visit:os": "operating_systems",
  "visit:os_version": "operating_system_versions", "visit:screen": "screen_sizes", "visit:language": "languages",
  "event:goal": "conversions", "event:name": "custom_events" };
async function download(panel) {
  const headers = { "Content-Type": "application/json" };
  if (S.csrf) headers["X-Tally-CSRF"] = S.csrf;
  if (S.share) headers["X-Tally-Share"] = S.share;
  const r = await fetch("/api/export", { method: "POST", headers, credentials: "same-origin",
    body: JSON.stringify({ site_id: S.site.site_id, date_range: dateRange(), filters: S.filters, panel: panel || undefined }) });
  if (!r.ok) { let m = r.statusText; try { m = (await r.json()).error; } catch (_) { /* not JSON */ } alert(`Export failed: ${m}`); return; }
  const name = (r.headers.get("content-disposition") || "").match(/filename="([^"]+)"/)?.[1] || "tally-export";
  const url = URL.createObjectURL(await r.blob());
  const a = h("a", { href: url, download: name, hidden: true });
  document.body.append(a); a.click(); a.remove();
  setTimeout(() => URL.revokeObjectURL(url), 10000);
}
function compact(n) {
  if (n === null || n === undefined) return "–";
  const a = Math.abs(n);
  if (a >= 1e9) return (n / 1e9).toFixed(1).replace(/\.0$/, "") + "B";
  if (a >= 1e6) return (n / 1e6).toFixed(1).replace(/\.0$/, "") + "M";
  if (a >= 1e4) return (n / 1e3).toFixed(1).replace(/\.0$/, "") + "k";
  return Number.isInteger(n) ? n.toLocaleString("en") : n.toFixed(2);
}
function duration(sec) {
  if (!sec) return "0s";
  const m = Math.floor(sec / 60), r = Math.round(sec % 60);
  return m >= 60 ? `${Math.floor(m / 60)}h ${m % 60}m` : m ? `${m}m ${r}s` : `${r}s`;
}
function fmt(metric, v) {
  // Revenue: the exact amount the API counted, in its currency.
  if (metric === "total_revenue" || metric === "average_revenue") {
    if (!v) return "–";
    const [int, frac] = v.amount.replace("-", "").split(".");
    const cents = ((frac || "") + "00").slice(0, Math.max(2, (frac || "").length));
    return `${v.amount.startsWith("-") ? "-" : ""}${int.replace(/\B(?=(\d{3})+(?!\d))/g, ",")}.${cents} ${v.currency}`;
  }
  if ((metric === "scroll_depth" || metric === "time_on_page") && (v === null || v === undefined)) return "–";
  if (metric === "scroll_depth") return `${v}%`;
  if (metric === "time_on_page") return duration(v);
  if (metric === "bounce_rate" || metric === "conversion_rate") return `${v}%`;
  if (metric === "visit_duration") return duration(v);
  if (metric === "views_per_visit") return (v || 0).toFixed(2);
  return compact(v);
}
function addDays(iso, n) {
  const d = new Date(iso + "T00:00:00Z");
  d.setUTCDate(d.getUTCDate() + n);
  return d.toISOString().slice(0, 10);
}
function daysBetween(a, b) { return Math.round((new Date(b + "T00:00:00Z") - new Date(a + "T00:00:00Z")) / 864e5); }

// ---- URL state ----
function readUrl() {
  const q = new URLSearchParams(location.search);
  S.period = q.get("period") || "30d";
  S.from = q.get("from") || ""; S.to = q.get("to") || "";
  S.interval = q.get("interval") || (S.period === "day" ? "hour" : ["6mo", "12mo"].includes(S.period) ? "month" : "day");
  S.metric = q.get("metric") || "visitors";
  S.prop = q.get("prop") || "";
  S.journey = q.get("journey") || "";
  S.comparison = COMPARISONS.some((c) => c[0] === q.get("comparison")) ? q.get("comparison") : "previous_period";
  S.funnel = q.get("funnel") || null;
  S.imports = q.get("imports") !== "0";
  // A filter is `op|dimension|value|value…`, each value with `%` and `|` escaped; values are OR.
  S.filters = q.getAll("f").map((f) => { const [op, dim, ...v] = f.split("|"); return [op, dim, v.map(unescapeValue)]; })
    .filter((f) => OPS.some((o) => o[0] === f[0]) && f[1] && f[2].length);
  return q.get("site");
}
function writeUrl() {
  const q = new URLSearchParams();
  if (S.site && !S.share) q.set("site", S.site.domain);
  if (S.embed) q.set("embed", "true");
  if (S.theme) q.set("theme", S.theme);
  q.set("period", S.period);
  if (S.period === "custom") { q.set("from", S.from); q.set("to", S.to); }
  q.set("interval", S.interval);
  if (S.metric !== "visitors") q.set("metric", S.metric);
  if (S.prop) q.set("prop", S.prop);
  if (S.journey) q.set("journey", S.journey);
  if (S.comparison !== "previous_period") q.set("comparison", S.comparison);
  if (S.funnel) q.set("funnel", S.funnel);
  if (!S.imports) q.set("imports", "0");
  for (const [op, dim, values] of S.filters) q.append("f", [op, dim, ...values.map(escapeValue)].join("|"));
  history.replaceState(null, "", `${location.pathname}?${q}`);
}
function dateRange() { return S.period === "custom" ? [S.from, S.to] : S.period === "realtime" ? "30m" : S.period; }
// Realtime: every panel over the last 30 minutes, refreshed with the live figures.
const isRealtime = () => S.period === "realtime";
// The filters with saved segments written out, to know what kind of filters apply.
function expandedFilters() {
  return S.filters.flatMap((f) => f[1] !== "segment" ? [f] : ((S.site.segments || []).find((x) => x.segment_id === f[2][0]) || { filters: [] }).filters);
}
function query(extra) {
  // Imported history as the toggle says, with whatever else the caller includes (comparisons).
  const { include, ...rest } = extra || {};
  return api("POST", "/api/v2/query", { site_id: S.site.site_id, date_range: dateRange(), filters: S.filters, include: { imports: S.imports, ...(include || {}) }, ...rest });
}
// The Stats API's `include` asking for the chosen comparison, or nothing when it is off.
function compared() { return S.comparison === "off" || isRealtime() ? {} : { include: { comparisons: { mode: S.comparison } } }; }
// A comparison's change as a short label: percentage points for rates, percent otherwise.
function changeText(metric, change) {
  if (change === null || change === undefined) return "";
  const points = metric === "bounce_rate" || metric === "conversion_rate";
  const arrow = change > 0 ? "↑" : change < 0 ? "↓" : "";
  return `${arrow}${Math.abs(change)}${points ? " pts" : "%"}`;
}
function changeClass(metric, change) {
  if (!change) return "change flat";
  return "change " + ((metric === "bounce_rate" ? change < 0 : change > 0) ? "up" : "down");
}

// ---- pages ----
const app = () => document.getElementById("app");
function show(...kids) { const a = app(); a.replaceChildren(...kids); return a; }

async function boot() {
  const path = location.pathname;
  const share = path.match(/^\/share\/([0-9a-f]{64})\/?$/);
  try {
    if (share) return await bootShare(share[1]);
    const auth = await api("GET", "/api/auth");
    if (path === "/setup") return auth.setup_required ? setupPage() : location.replace("/login");
    if (!auth.signed_in) {
      if (auth.setup_required) return show(h("div", { class: "wrap" }, h("h1", {}, "Welcome to Tally"),
        h("p", {}, "No account exists yet. Open the setup link that ", h("code", {}, "tally serve"), " printed when it started, or run ",
          h("code", {}, "tally user add EMAIL"), ".")));
      return loginPage();
    }
    S.csrf = auth.csrf; S.user = auth.email;
    const { sites } = await api("GET", "/api/sites");
    S.sites = sites;
    const wanted = readUrl();
    S.site = sites.find((x) => x.domain === wanted || x.site_id === wanted) || sites[0] || null;
    if (path === "/settings") return settingsPage();
    if (!S.site) return settingsPage();
    dashboard();
  } catch (e) {
    show(h("div", { class: "wrap" }, h("p", { class: "error" }, `Could not load: ${e.message}`)));
  }
}

async function bootShare(token) {
  S.share = token;
  // An embeddable link framed by another site: without the brand, in the theme the embed code asks for.
  const params = new URLSearchParams(location.search);
  S.embed = params.get("embed") === "true";
  S.theme = ["light", "dark"].includes(params.get("theme")) ? params.get("theme") : "";
  document.documentElement.classList.toggle("embedded", S.embed);
  document.documentElement.classList.toggle("dark", S.theme === "dark");
  const info = await api("GET", `/api/share/${token}`).catch((e) => ({ error: e.message }));
  if (info.error) return show(h("div", { class: "wrap" }, h("h1", {}, "Tally"), h("p", { class: "error" }, info.error)));
  if (info.password_required && !info.unlocked) {
    const pw = h("input", { type: "password", name: "password", placeholder: "Password", required: true, autocomplete: "current-password" });
    const msg = h("p", { class: "error" });
    return show(h("form", { class: "box card", onsubmit: async (ev) => {
      ev.preventDefault();
      try { await api("POST", `/api/share/${token}/unlock`, { password: pw.value }); location.reload(); } catch (e) { msg.textContent = e.message; }
    } }, h("h1", {}, info.domain), h("p", {}, "This dashboard is protected by a password."), pw, h("button", { class: "primary" }, "View dashboard"), msg));
  }
  // The link's site with its saved funnels and segments, which a shared dashboard shows too.
  const { sites } = await api("GET", "/api/sites").catch(() => ({ sites: [] }));
  S.sites = sites.length ? sites : [{ site_id: info.site_id, domain: info.domain, timezone: info.timezone, goals: [], funnels: [], segments: [] }];
  S.site = S.sites[0];
  readUrl();
  dashboard();
}

function loginPage() {
  const email = h("input", { type: "email", name: "email", placeholder: "E-mail", required: true, autocomplete: "username" });
  const pw = h("input", { type: "password", name: "password", placeholder: "Password", required: true, autocomplete: "current-password" });
  const msg = h("p", { class: "error", id: "login-error" });
  // Shown once the server says the account signs in with a second factor.
  const code = h("input", { type: "text", name: "code", id: "login-code", placeholder: "Code from your app, or a recovery code", autocomplete: "one-time-code", hidden: true });
  show(h("form", { class: "box card", id: "login", onsubmit: async (ev) => {
    ev.preventDefault();
    const body = { email: email.value, password: pw.value };
    if (!code.hidden) body.code = code.value;
    try { await api("POST", "/api/login", body); location.href = "/" + location.search; } catch (e) {
      if (e.data && e.data.two_factor && code.hidden) { code.hidden = false; code.focus(); }
      msg.textContent = e.message;
    }
  } }, h("h1", {}, "Sign in to Tally"), email, pw, code, h("button", { class: "primary", type: "submit" }, "Sign in"), msg));
}

function setupPage() {
  const token = new URLSearchParams(location.search).get("token") || "";
  const email = h("input", { type: "email", name: "email", placeholder: "Your e-mail", required: true, autocomplete: "username" });
  const pw = h("input", { type: "password", name: "password", placeholder: "Password (8+ characters)", required: true, minlength: 8, autocomplete: "new-password" });
  const msg = h("p", { class: "error" });
  show(h("form", { class: "box card", onsubmit: async (ev) => {
    ev.preventDefault();
    try { await api("POST", "/api/setup", { token, email: email.value, password: pw.value }); location.href = "/settings"; } catch (e) { msg.textContent = e.message; }
  } }, h("h1", {}, "Create the admin account"), h("p", { class: "note" }, "This account can see and manage every site."), email, pw,
  h("button", { class: "primary" }, "Create account"), msg));
}

function topBar() {
  const picker = h("select", { id: "site-picker", "aria-label": "Site", onchange: (e) => {
    S.site = S.sites.find((x) => x.site_id === e.target.value); S.filters = []; writeUrl(); dashboard();
  } }, S.sites.map((x) => h("option", { value: x.site_id, selected: S.site && x.site_id === S.site.site_id }, x.domain)));
  const range = h("select", { id: "range", "aria-label": "Date range", onchange: (e) => {
    S.period = e.target.value;
    if (S.period === "custom" && !S.from) { const t = new Date().toISOString().slice(0, 10); S.to = t; S.from = addDays(t, -13); }
    S.interval = S.period === "day" ? "hour" : ["6mo", "12mo"].includes(S.period) ? "month" : "day";
    writeUrl(); dashboard();
  } }, RANGES.map(([v, l]) => h("option", { value: v, selected: v === S.period }, l)));
  const comparison = isRealtime() ? null : h("select", { id: "comparison", "aria-label": "Compare with", onchange: (e) => { S.comparison = e.target.value; writeUrl(); dashboard(); } },
    COMPARISONS.map(([v, l]) => h("option", { value: v, selected: v === S.comparison }, l)));
  const custom = S.period !== "custom" ? null : h("span", { class: "custom" },
    h("input", { type: "date", id: "from", value: S.from, onchange: (e) => { S.from = e.target.value; writeUrl(); dashboard(); } }), " – ",
    h("input", { type: "date", id: "to", value: S.to, onchange: (e) => { S.to = e.target.value; writeUrl(); dashboard(); } }));
  const right = S.share ? [S.embed ? null : h("span", { class: "note" }, "Shared dashboard")] : [
    h("a", { href: `/settings?site=${encodeURIComponent(S.site ? S.site.domain : "")}`, id: "settings-link" }, "Settings"),
    h("button", { class: "link", id: "logout", onclick: async () => { await api("POST", "/api/logout").catch(() => {}); location.href = "/login"; } }, "Sign out"),
    h("button", { class: "link", id: "logout-everywhere", title: "End this account's sign-ins on every browser", onclick: async () => { await api("POST", "/api/logout/everywhere").catch(() => {}); location.href = "/login"; } }, "Sign out everywhere")];
  // Imported history (Plausible's export, GA in its shape) merged in, or not, as Plausible's toggle.
  const imports = h("label", { class: "note", title: "Include history imported from another tool" },
    h("input", { type: "checkbox", id: "imports", checked: S.imports, onchange: (e) => { S.imports = e.target.checked; writeUrl(); dashboard(); } }), " Imported data");
  const exportAll = isRealtime() ? null : h("button", { class: "link", id: "export-all", title: "Every panel as CSV, in a zip", onclick: () => download(null) }, "Export");
  return h("header", { class: "top" }, h("a", { class: "brand", href: "/" }, "Tally"), picker, range, custom, comparison, exportAll, imports,
    h("span", { class: "live", id: "live" }, "– current visitors"), h("span", { class: "spacer" }), ...right);
}

function filterLabel(f) {
  if (f[1] === "segment") {
    const seg = (S.site.segments || []).find((x) => x.segment_id === f[2][0]);
    return `segment ${seg ? seg.name : f[2][0]}`;
  }
  const dim = (FILTER_DIMENSIONS.find((d) => d[0] === f[1]) || [f[1], f[1].replace(/^(event|visit):/, "").replace("props:", "property ")])[1];
  const op = (OPS.find((o) => o[0] === f[0]) || [f[0], f[0]])[1];
  return `${dim} ${op} ${f[2].join(" or ")}`;
}

function filterBar() {
  const bar = h("div", { class: "filters", id: "filters" }, S.filters.map((f, i) => h("span", { class: "chip", "data-dimension": f[1] },
    filterLabel(f),
    h("button", { "aria-label": "Remove filter", onclick: () => { S.filters.splice(i, 1); writeUrl(); dashboard(); } }, "×"))),
  S.filters.length ? h("button", { class: "link", onclick: () => { S.filters = []; writeUrl(); dashboard(); } }, "Clear all") : null,
  h("button", { class: "link", id: "add-filter", onclick: () => { const f = document.getElementById("filter-form"); f.hidden = !f.hidden; } }, "+ Filter"),
  segmentControls());
  return h("div", {}, bar, filterForm());
}

// Saved segments: pick one to filter by it; signed-in users save the current filters as one and
// delete the one in use.
function segmentControls() {
  const segments = S.site.segments || [];
  const active = S.filters.find((f) => f[1] === "segment");
  const pick = segments.length ? h("select", { id: "segment-pick", "aria-label": "Segment", onchange: (e) => {
    if (!e.target.value) return;
    S.filters = S.filters.filter((f) => f[1] !== "segment");
    S.filters.push(["is", "segment", [e.target.value]]);
    writeUrl(); dashboard();
  } }, h("option", { value: "" }, "Segments…"), segments.map((x) => h("option", { value: x.segment_id, selected: active && active[2][0] === x.segment_id }, x.name))) : null;
  if (S.share) return pick;
  const name = h("input", { id: "segment-name", placeholder: "Segment name", size: 14 });
  const msg = h("span", { id: "segment-msg" });
  const save = S.filters.length && !active ? h("form", { class: "inline", id: "segment-save", onsubmit: async (ev) => {
    ev.preventDefault();
    try {
      const made = await api("POST", `/api/sites/${S.site.site_id}/segments`, { name: name.value, filters: S.filters });
      S.site.segments = [...segments, made];
      S.filters = [["is", "segment", [made.segment_id]]];
      writeUrl(); dashboard();
    } catch (e) { msg.className = "error"; msg.textContent = e.message; }
  } }, name, h("button", {}, "Save as segment"), msg) : null;
  const remove = active ? h("button", { class: "link", id: "segment-delete", onclick: async () => {
    await api("DELETE", `/api/sites/${S.site.site_id}/segments/${active[2][0]}`);
    S.site.segments = segments.filter((x) => x.segment_id !== active[2][0]);
    S.filters = S.filters.filter((f) => f !== active);
    writeUrl(); dashboard();
  } }, "Delete segment") : null;
  return [pick, save, remove];
}

// A filter on any dimension: an operator and one value per line (any of them matches).
function filterForm() {
  const dim = h("select", { id: "filter-dim", "aria-label": "Dimension", onchange: () => { prop.hidden = dim.value !== "props"; } },
    FILTER_DIMENSIONS.map(([v, l]) => h("option", { value: v }, l)));
  const prop = h("input", { id: "filter-prop", placeholder: "property key", size: 10, hidden: true });
  const op = h("select", { id: "filter-op", "aria-label": "Operator" }, OPS.map(([v, l]) => h("option", { value: v }, l)));
  const values = h("textarea", { id: "filter-values", rows: 2, placeholder: "one value per line" });
  const msg = h("span", { class: "error", id: "filter-error" });
  return h("form", { class: "card row", id: "filter-form", hidden: true, onsubmit: async (ev) => {
    ev.preventDefault();
    const d = dim.value === "props" ? `event:props:${prop.value.trim()}` : dim.value;
    const list = values.value.split("\n").map((v) => v.trim()).filter(Boolean);
    if (!list.length) { msg.textContent = "Give at least one value."; return; }
    const next = [...S.filters.filter((f) => !(f[1] === d && f[0] === op.value)), [op.value, d, list]];
    // Asked once first, so a bad pattern is said here and the dashboard stays as it was.
    try { await api("POST", "/api/v2/query", { site_id: S.site.site_id, date_range: dateRange(), metrics: ["visitors"], filters: next }); }
    catch (e) { if (e.status === 400) { msg.textContent = e.message; return; } }
    S.filters = next; writeUrl(); dashboard();
  } }, dim, prop, op, values, h("button", { class: "primary", id: "filter-apply" }, "Apply filter"), msg);
}

function addFilter(dim, value) {
  S.filters = S.filters.filter((f) => f[1] !== dim);
  S.filters.push(["is", dim, [value]]);
  writeUrl(); dashboard();
}

function dashboard() {
  clearInterval(S.timer);
  const seq = ++S.seq;
  const stats = h("div", { class: "card stats", id: "top-stats" }, TOP.map(([m, label]) => h("button", {
    class: "stat" + (m === S.metric ? " selected" : ""), id: `stat-${m}`, "data-metric": m,
    onclick: () => { S.metric = m; writeUrl(); dashboard(); } }, h("div", { class: "label" }, label), h("div", { class: "value" }, "…"), h("div", { class: "change flat" }, ""))));
  const interval = h("select", { id: "interval", "aria-label": "Interval", onchange: (e) => { S.interval = e.target.value; writeUrl(); loadChart(seq); } },
    INTERVALS.map((i) => h("option", { value: i, selected: i === S.interval }, i)));
  const chart = h("div", { class: "card chart-card" }, h("div", { class: "chart-head" },
    h("strong", {}, isRealtime() ? "Pageviews" : (TOP.find((t) => t[0] === S.metric) || TOP[0])[1]), h("span", { class: "spacer" }),
    isRealtime() ? null : h("button", { class: "link export", id: "export-chart", title: "The series as CSV", onclick: () => download("visitors") }, "CSV"),
    isRealtime() ? h("span", { class: "note" }, "pageviews per minute, last 30 minutes") : interval), h("div", { id: "chart-box" }, h("p", { class: "empty" }, "Loading…")));
  // Sessions name visitors' paths through the site: signed-in users see them, shared links do not.
  const funnels = S.site.funnels || [];
  const panels = h("div", { class: "panels" }, PANELS.map(panelShell), funnels.length && !isRealtime() ? funnelShell(funnels, seq) : null,
    isRealtime() ? null : journeysShell(),
    realtimeShell(), S.share ? null : sessionsShell());
  show(h("div", { class: "wrap" }, topBar(), filterBar(), stats, chart, panels));
  loadTop(seq); loadChart(seq);
  for (const p of PANELS) loadPanel(p, seq);
  if (funnels.length && !isRealtime()) loadFunnel(seq);
  if (!isRealtime()) loadJourneys(seq);
  const live = () => {
    loadRealtime(seq); if (!S.share) loadSessions(seq);
    // In realtime every figure is of the last 30 minutes, so all of them move.
    if (isRealtime() && live.again) { loadTop(seq); loadChart(seq); for (const p of PANELS) loadPanel(p, seq); }
    live.again = true;
  };
  live();
  S.timer = setInterval(live, 10000);
}

// Each part of the page shows its loads' answers in the order the loads began: an answer to a
// load older than one already shown (another tab's, another property's, funnel's, page's or
// interval's, or an earlier refresh's) is dropped, not shown over the newer one. An older answer
// that comes first is shown, so a part whose loads each outlast the realtime refresh still shows
// something. `current()` says whether to go on showing this load, and marks it shown.
const LOADS = { started: {}, shown: {} };
function latestLoad(part, seq) {
  const load = (LOADS.started[part] = (LOADS.started[part] || 0) + 1);
  return () => {
    if (seq !== S.seq || load < (LOADS.shown[part] || 0)) return false;
    LOADS.shown[part] = load;
    return true;
  };
}

// Under a filter on a page or an event, visits and the per-visit metrics are those of the visits
// with a matching event, which the Stats API reads from raw events: a range older than the site
// keeps them (or too large) is refused, and then the dashboard shows the other metrics.
const SESSION_METRICS = new Set(["visits", "views_per_visit", "bounce_rate", "visit_duration"]);
const eventFiltered = () => expandedFilters().some((f) => f[1].startsWith("event:"));

async function loadTop(seq) {
  const current = latestLoad("top", seq);
  let metrics = TOP.map((t) => t[0]);
  let without = "";
  try {
    let cur;
    try { cur = await query({ metrics, ...compared() }); } catch (e) {
      if (!eventFiltered()) throw e;
      metrics = metrics.filter((m) => !SESSION_METRICS.has(m));
      without = e.message;
      cur = await query({ metrics, ...compared() });
    }
    if (!current()) return;
    const [first, last] = Array.isArray(cur.query.date_range) ? cur.query.date_range : [cur.query.date_range, ""];
    const row = cur.results[0] || { metrics: [] };
    const now = row.metrics;
    const other = row.comparison;
    const versus = S.comparison === "year_over_year" ? "vs year before" : "vs previous period";
    TOP.forEach(([m]) => {
      const card = document.getElementById(`stat-${m}`);
      const i = metrics.indexOf(m);
      if (!card) return;
      if (i < 0) {
        card.querySelector(".value").textContent = "–";
        card.querySelector(".change").textContent = "not for this range with a page or event filter";
        card.title = without;
        return;
      }
      card.querySelector(".value").textContent = fmt(m, now[i] || 0);
      const ch = card.querySelector(".change");
      if (!other) { ch.textContent = ""; ch.className = "change flat"; delete ch.dataset.change; return; }
      const change = other.change[i];
      ch.dataset.change = change;
      ch.className = changeClass(m, change);
      ch.textContent = `${changeText(m, change) || "0%"} ${versus}`;
      ch.title = `${cur.query.comparison_date_range.join(" – ")}: ${fmt(m, other.metrics[i])}`;
    });
    const box = document.getElementById("top-stats");
    if (cur.query.comparison_date_range) box.dataset.comparisonRange = cur.query.comparison_date_range.join("..");
    box.dataset.range = isRealtime() ? "30m" : `${first}..${last}`;
  } catch (e) {
    if (current()) document.getElementById("top-stats").replaceChildren(h("p", { class: "error" }, e.message));
  }
}

async function loadChart(seq) {
  const current = latestLoad("chart", seq);
  const box = document.getElementById("chart-box");
  try {
    if (isRealtime()) {
      const rt = await api("GET", realtimePath());
      if (!current()) return;
      drawChart(box, rt.pageviews_per_minute.map((m) => [new Date(m.minute).toISOString().slice(11, 16), m.pageviews]), null, "pageviews");
      return;
    }
    let metric = S.metric;
    const series = (interval) => query({ metrics: [metric], dimensions: [`time:${interval}`], order_by: [[`time:${interval}`, "asc"]], ...compared() });
    let res;
    try { res = await series(S.interval); } catch (e) {
      if (eventFiltered() && SESSION_METRICS.has(metric)) {
        // Visit metrics under an event filter need raw events the range may no longer have.
        metric = "visitors";
        res = await series(S.interval);
      } else {
        // Hours of most dimensions come from raw events; past the site's raw retention, days.
        if (S.interval !== "hour") throw e;
        S.interval = "day";
        const select = document.getElementById("interval");
        if (select) select.value = "day";
        res = await series("day");
      }
    }
    if (!current()) return;
    const got = new Map(res.results.map((r) => [r.dimensions[0], r.metrics[0] || 0]));
    const labels = bucketLabels(S.interval, ...res.query.date_range);
    for (const k of got.keys()) if (!labels.includes(k)) labels.push(k);
    labels.sort();
    // With a comparison every bucket has a row, paired with the comparison's bucket.
    const before = new Map(res.results.filter((r) => r.comparison).map((r) => [r.dimensions[0], [r.comparison.dimensions[0], r.comparison.metrics[0] || 0]]));
    drawChart(box, labels.map((l) => [l, got.get(l) || 0]), before.size ? labels.map((l) => before.get(l) || ["", 0]) : null);
  } catch (e) {
    if (current()) box.replaceChildren(h("p", { class: "error" }, e.message));
  }
}

// Every bucket label of a range, as the Stats API writes them (hours "YYYY-MM-DD HH:00:00",
// days, and weeks and months by their first day), so empty buckets draw as zero.
function bucketLabels(interval, first, last) {
  const out = [];
  if (!first || !last || daysBetween(first, last) > 3700) return out;
  for (let d = first; d <= last; d = addDays(d, 1)) {
    if (interval === "hour") { for (let hr = 0; hr < 24; hr++) out.push(`${d} ${String(hr).padStart(2, "0")}:00:00`); continue; }
    const label = interval === "day" ? d
      : interval === "week" ? addDays(d, -((new Date(d + "T00:00:00Z").getUTCDay() + 6) % 7))
      : d.slice(0, 7) + "-01";
    if (out[out.length - 1] !== label) out.push(label);
  }
  return out;
}
// A bucket label as the chart's axis shows it.
function axisLabel(label) {
  if (isRealtime()) return label;
  if (S.interval === "hour") return label.slice(11, 16);
  if (S.interval === "month") return label.slice(0, 7);
  return label.slice(5);
}

function drawChart(box, points, comparison, shown) {
  const metric = shown || S.metric;
  const W = Math.max(box.clientWidth || 700, 280), H = 240, L = 44, R = 24, T = 10, B = 26;
  const svg = s("svg", { id: "chart", viewBox: `0 0 ${W} ${H}`, role: "img", "aria-label": `${metric} by ${shown ? "minute" : S.interval}`, "data-points": points.length });
  const max = Math.max(1, ...points.map((p) => p[1]), ...(comparison || []).map((p) => p[1]));
  const nice = (() => { const e = Math.pow(10, Math.floor(Math.log10(max))); const f = max / e; return (f <= 1 ? 1 : f <= 2 ? 2 : f <= 5 ? 5 : 10) * e; })();
  const x = (i) => L + (points.length <= 1 ? (W - L - R) / 2 : (i * (W - L - R)) / (points.length - 1));
  const y = (v) => T + (H - T - B) * (1 - v / nice);
  for (let k = 0; k <= 4; k++) {
    const v = (nice * k) / 4;
    svg.append(s("line", { class: "grid", x1: L, x2: W - R, y1: y(v), y2: y(v) }));
    svg.append(s("text", { class: "axis", x: L - 6, y: y(v) + 4, "text-anchor": "end" }, fmt(metric, Number.isInteger(v) ? v : +v.toFixed(1))));
  }
  if (!points.length) { svg.append(s("text", { class: "axis", x: W / 2, y: H / 2, "text-anchor": "middle" }, "No data for this range")); box.replaceChildren(svg); return; }
  const step = Math.max(1, Math.ceil(points.length / Math.max(2, Math.floor((W - L) / 90))));
  points.forEach(([label], i) => {
    if (i % step === 0) svg.append(s("text", { class: "axis", x: x(i), y: H - 8, "text-anchor": "middle" }, axisLabel(String(label))));
  });
  const line = points.map(([, v], i) => `${i ? "L" : "M"}${x(i).toFixed(1)},${y(v).toFixed(1)}`).join("");
  svg.append(s("path", { class: "area", d: `${line}L${x(points.length - 1).toFixed(1)},${y(0)}L${x(0).toFixed(1)},${y(0)}Z` }));
  if (comparison) {
    // The comparison series, dashed, under the range's own line.
    const dashed = comparison.map(([, v], i) => `${i ? "L" : "M"}${x(i).toFixed(1)},${y(v).toFixed(1)}`).join("");
    svg.append(s("path", { class: "comparison", d: dashed, "data-values": comparison.map((p) => p[1]).join(",") }, s("title", {}, "Comparison")));
  }
  svg.append(s("path", { class: "line", d: line }));
  if (points.length <= 400) points.forEach(([label, v], i) => {
    const was = comparison && comparison[i] && comparison[i][0] ? ` (${comparison[i][0]}: ${fmt(metric, comparison[i][1])})` : "";
    svg.append(s("circle", { class: "dot", cx: x(i), cy: y(v), r: points.length > 60 ? 1.5 : 3 }, s("title", {}, `${label}: ${fmt(metric, v)}${was}`)));
  });
  box.replaceChildren(svg);
}

function panelShell(p) {
  const tab = S.tabs[p.id] || p.tabs[0][0];
  const tabs = h("div", { class: "tabs" }, p.tabs.map(([dim, label]) => h("button", { class: dim === tab ? "on" : "", "data-tab": dim,
    onclick: () => { S.tabs[p.id] = dim; const el = document.querySelector(`[data-panel="${p.id}"]`); el.replaceWith(panelShell(p)); loadPanel(p, S.seq); } }, label)));
  // The property keys the site's events carry in the range, filled in by loadPanel.
  const extra = tab === "props" ? h("select", { id: "prop-key", "aria-label": "Property",
    onchange: (e) => { S.prop = e.target.value; writeUrl(); loadPanel(p, S.seq); } }) : null;
  const csv = EXPORTS[tab] && !isRealtime() ? h("button", { class: "link export", title: "This tab as CSV", onclick: () => download(EXPORTS[tab]) }, "CSV") : null;
  return h("section", { class: "card panel", "data-panel": p.id }, h("div", { class: "head" }, h("h2", {}, p.title), tabs, extra, csv),
    h("div", { class: "body" }, h("p", { class: "empty" }, "Loading…")));
}

async function loadPanel(p, seq) {
  const el = document.querySelector(`[data-panel="${p.id}"] .body`);
  if (!el) return;
  const current = latestLoad(`panel:${p.id}`, seq);
  let dim = S.tabs[p.id] || p.tabs[0][0];
  if (dim === "props") {
    let keys;
    try { keys = await propertyKeys(seq); } catch (e) { if (current()) el.replaceChildren(h("p", { class: "error" }, e.message)); return; }
    if (!current()) return;
    if (!keys.length) { el.replaceChildren(h("p", { class: "empty" }, "No custom properties in this range")); return; }
    if (!keys.includes(S.prop)) S.prop = keys[0];
    document.getElementById("prop-key")?.replaceChildren(...keys.map((k) => h("option", { value: k, selected: k === S.prop }, k)));
    dim = `event:props:${S.prop}`;
  }
  // The map reads the country breakdown, every country of it to shade the map.
  const asked = dim === "map" ? "visit:country" : dim;
  // Top pages also show engagement (scroll depth, time on page), except over the last 30 minutes;
  // goals show revenue when the site has a revenue goal (not in realtime, which keeps no revenue).
  const revenue = p.id === "goals" && !isRealtime() && (S.site.goals || []).some((g) => g.currency);
  const metrics = revenue ? [...p.metrics, "total_revenue", "average_revenue"] : p.metrics || (dim === "event:page" && !isRealtime() ? ["visitors", "pageviews", "scroll_depth", "time_on_page"]
    : ["visitors", dim.startsWith("event:") ? "pageviews" : "visits"]);
  try {
    const res = await query({ metrics, dimensions: [asked], order_by: [[metrics[0], "desc"]], pagination: { limit: dim === "map" ? 300 : 10 }, ...compared() });
    if (!current()) return;
    // Page views are not custom events, and engagement is part of a visit, not an event.
    const results = dim === "event:name" ? res.results.filter((r) => !["pageview", "engagement"].includes(r.dimensions[0])) : res.results;
    // Regions and cities come from a city database, which Tally does not ship: say so.
    const noPlaces = !results.length && (dim === "visit:region" || dim === "visit:city");
    el.replaceChildren(noPlaces ? h("p", { class: "empty" }, "None in this range. Regions and cities need a city database (mmdb in tally.toml).")
      : dim === "map" ? worldMap(results) : rowsTable(dim, metrics, results));
  } catch (e) {
    if (current()) el.replaceChildren(h("p", { class: "error" }, e.message));
  }
}

// The site's property keys in the dashboard's range (today's in realtime), once per load.
function propertyKeys(seq) {
  if (S.propKeys && S.propKeys.seq === seq) return S.propKeys.keys;
  const keys = api("POST", "/api/properties", { site_id: S.site.site_id, date_range: isRealtime() ? "day" : dateRange() })
    .then((r) => r.keys.map((k) => k.key));
  S.propKeys = { seq, keys };
  return keys;
}

// The Locations panel's map: every country of WORLD (world.js) shaded by its share of the top
// country's visitors, the country list beside it; a click on either filters by the country.
function worldMap(results) {
  const visitors = Object.fromEntries(results.map((r) => [r.dimensions[0], r.metrics[0] || 0]));
  const max = Math.max(1, ...Object.values(visitors));
  const svg = s("svg", { class: "world", viewBox: `0 0 ${WORLD.width} ${WORLD.height}`, role: "img", "aria-label": "Visitors by country" });
  for (const d of WORLD.unnamed) svg.append(s("path", { d, class: "land" }));
  for (const [code, d] of Object.entries(WORLD.countries)) {
    const n = visitors[code] || 0;
    const path = s("path", { d, class: n ? "land seen" : "land", "data-country": code,
      style: n ? `fill-opacity:${(0.2 + 0.8 * n / max).toFixed(2)}` : "" }, s("title", {}, `${countryName(code)}: ${compact(n)} visitors`));
    if (n) path.addEventListener("click", () => addFilter("visit:country", code));
    svg.append(path);
  }
  // The list beside the map keeps the visitors (and their change) only, so country names fit.
  const first = (r) => ({ ...r, metrics: r.metrics.slice(0, 1),
    comparison: r.comparison && { ...r.comparison, metrics: r.comparison.metrics.slice(0, 1), change: r.comparison.change.slice(0, 1) } });
  return h("div", { class: "map-wrap" }, svg, rowsTable("visit:country", ["visitors"], results.slice(0, 10).map(first)));
}

function countryName(code) {
  try { return `${new Intl.DisplayNames(["en"], { type: "region" }).of(code)} (${code})`; } catch (_) { return code; }
}

function rowsTable(dim, metrics, rows) {
  if (!rows.length) return h("p", { class: "empty" }, "No data yet");
  const max = Math.max(1, ...rows.map((r) => r.metrics[0] || 0));
  const heads = { visitors: "Visitors", visits: "Visits", pageviews: "Pageviews", events: "Events", conversion_rate: "CR",
    scroll_depth: "Scroll", time_on_page: "Time", total_revenue: "Revenue", average_revenue: "Average" };
  return h("table", { class: "rows", "data-dimension": dim },
    h("tr", {}, h("th", {}, dim.replace(/^(event|visit):/, "").replace("props:", "")), metrics.map((m) => h("th", { class: "num" }, heads[m] || m)),
      rows.some((r) => r.comparison) ? h("th", { class: "num" }, "Change") : null),
    rows.map((r) => {
      const value = String(r.dimensions[0] ?? "");
      const label = dim === "visit:country" || dim === "map" ? countryName(value) : value;
      return h("tr", { class: "row", "data-value": value, title: `Filter by ${label}`, onclick: () => addFilter(dim, value) },
        h("td", { class: "name" }, h("div", { class: "bar", style: `width:${(100 * (r.metrics[0] || 0)) / max}%` }), h("span", {}, label || "(none)")),
        r.metrics.map((v, i) => h("td", { class: "num" }, fmt(metrics[i], v))),
        // The first metric's change, the previous value in its tooltip.
        r.comparison ? h("td", { class: `num ${changeClass(metrics[0], r.comparison.change[0])}`, "data-change": r.comparison.change[0],
          title: `${r.comparison.dimensions.join(" ") || "before"}: ${fmt(metrics[0], r.comparison.metrics[0])}` }, changeText(metrics[0], r.comparison.change[0]) || "0%") : null);
    }));
}

function realtimePath() {
  const filters = S.filters.length ? `&filters=${encodeURIComponent(JSON.stringify(S.filters))}` : "";
  return `/api/realtime?site_id=${encodeURIComponent(S.site.site_id)}${filters}`;
}

function realtimeShell() {
  return h("section", { class: "card panel realtime", id: "realtime" }, h("div", { class: "head" }, h("h2", {}, "Realtime")),
    h("div", { class: "body" }, h("p", { class: "empty" }, "Loading…")));
}

async function loadRealtime(seq) {
  const current = latestLoad("realtime", seq);
  try {
    const rt = await api("GET", realtimePath());
    if (!current()) return;
    const live = document.getElementById("live");
    if (live) live.textContent = `${rt.current_visitors} current visitor${rt.current_visitors === 1 ? "" : "s"}`;
    const max = Math.max(1, ...rt.pageviews_per_minute.map((m) => m.pageviews));
    const body = document.querySelector("#realtime .body");
    body.replaceChildren(
      h("div", {}, h("span", { class: "big", id: "rt-current" }, rt.current_visitors), " visitors in the last 5 minutes"),
      h("div", { class: "minutes", title: "Pageviews per minute, last 30 minutes" },
        rt.pageviews_per_minute.map((m) => h("div", { style: `height:${(100 * m.pageviews) / max}%`, title: `${m.minute}: ${m.pageviews}` }))),
      rt.top_pages.length ? h("table", { class: "rows" }, h("tr", {}, h("th", {}, "Page"), h("th", { class: "num" }, "Visitors")),
        rt.top_pages.slice(0, 5).map((p) => h("tr", {}, h("td", { class: "name" }, h("span", {}, p.page)), h("td", { class: "num" }, p.visitors))))
        : h("p", { class: "empty" }, "No pageviews in the last 30 minutes"));
  } catch (e) {
    const body = document.querySelector("#realtime .body");
    if (body && current()) body.replaceChildren(h("p", { class: "error" }, e.message));
  }
}

// Saved funnels (settings page), counted over the dashboard's range from raw events, over the
// visits the dashboard's filters select.
function funnelShell(funnels, seq) {
  if (!funnels.some((f) => f.funnel_id === S.funnel)) S.funnel = funnels[0].funnel_id;
  const pick = h("select", { id: "funnel-pick", "aria-label": "Funnel", onchange: (e) => { S.funnel = e.target.value; writeUrl(); loadFunnel(seq); } },
    funnels.map((f) => h("option", { value: f.funnel_id, selected: f.funnel_id === S.funnel }, f.name)));
  return h("section", { class: "card panel funnel", id: "funnel" }, h("div", { class: "head" }, h("h2", {}, "Funnel"), pick),
    h("div", { class: "body" }, h("p", { class: "empty" }, "Loading…")));
}

async function loadFunnel(seq) {
  const current = latestLoad("funnel", seq);
  const body = () => document.querySelector("#funnel .body");
  const funnel = (S.site.funnels || []).find((f) => f.funnel_id === S.funnel);
  if (!funnel) return;
  try {
    const res = await api("POST", "/api/funnel", { site_id: S.site.site_id, date_range: dateRange(), steps: funnel.steps, filters: S.filters });
    if (!current() || !body()) return;
    const first = Math.max(1, res.steps[0]?.visitors || 0);
    body().replaceChildren(h("table", { class: "rows" },
      h("tr", {}, h("th", {}, "Step"), h("th", { class: "num" }, "Visitors"), h("th", { class: "num" }, "Conversion"), h("th", { class: "num" }, "Drop-off")),
      res.steps.map((st, i) => h("tr", { class: "step" },
        h("td", { class: "name" }, h("div", { class: "bar", style: `width:${(100 * st.visitors) / first}%` }), h("span", {}, st.step)),
        h("td", { class: "num" }, compact(st.visitors)), h("td", { class: "num", title: `${st.conversion_rate_step}% of the step before` }, `${st.conversion_rate}%`),
        h("td", { class: "num dropoff", "data-dropoff": st.dropoff }, i === 0 ? "–" : `${compact(st.dropoff)} (${st.dropoff_percentage}%)`)))),
      S.filters.length ? h("p", { class: "note" }, "Only the visits the filters above select.") : null);
  } catch (e) {
    if (body() && current()) body().replaceChildren(h("p", { class: "error" }, e.message));
  }
}

// Journeys through a page (one of the range's top pages): where its visitors came from, where
// they went next, and the most common paths from it.
function journeysShell() {
  return h("section", { class: "card panel journeys", id: "journeys" }, h("div", { class: "head" }, h("h2", {}, "Journeys"),
    h("select", { id: "journey-page", "aria-label": "Page", onchange: (e) => { S.journey = e.target.value; writeUrl(); loadJourneys(S.seq); } })),
  h("div", { class: "body" }, h("p", { class: "empty" }, "Loading…")));
}

async function loadJourneys(seq) {
  const current = latestLoad("journeys", seq);
  const body = () => document.querySelector("#journeys .body");
  try {
    const top = await query({ metrics: ["visitors"], dimensions: ["event:page"], pagination: { limit: 20 } });
    if (!current() || !body()) return;
    const pages = top.results.map((r) => r.dimensions[0]);
    if (!pages.length) { body().replaceChildren(h("p", { class: "empty" }, "No data yet")); return; }
    if (!pages.includes(S.journey)) S.journey = pages[0];
    document.getElementById("journey-page").replaceChildren(...pages.map((p) => h("option", { value: p, selected: p === S.journey }, p)));
    const j = await api("POST", "/api/journeys", { site_id: S.site.site_id, date_range: dateRange(), page: S.journey, filters: S.filters });
    if (!current() || !body()) return;
    const list = (id, title, rows) => h("table", { class: "rows", id }, h("tr", {}, h("th", {}, title), h("th", { class: "num" }, "Visitors")),
      rows.map((r) => h("tr", { "data-value": r.page ?? r.pages.join(" → ") }, h("td", { class: "name" }, h("span", {}, r.page ?? r.pages.join(" → "))),
        h("td", { class: "num" }, compact(r.visitors)))));
    body().replaceChildren(h("div", { class: "journey-lists" }, list("journey-before", "Came from", j.before), list("journey-after", "Went to", j.after)),
      j.paths.length ? list("journey-paths", "Paths from here", j.paths) : null);
  } catch (e) {
    if (body() && current()) body().replaceChildren(h("p", { class: "error" }, e.message));
  }
}

function sessionsShell() {
  return h("section", { class: "card panel sessions", id: "sessions" }, h("div", { class: "head" }, h("h2", {}, "Recent sessions"),
    h("span", { class: "note" }, "today (UTC), latest first; click one for its events")), h("div", { class: "body" }, h("p", { class: "empty" }, "Loading…")));
}

const clock = (ms, seconds) => new Date(ms).toLocaleTimeString([], { hour: "2-digit", minute: "2-digit", second: seconds ? "2-digit" : undefined });

async function loadSessions(seq) {
  const current = latestLoad("sessions", seq);
  const body = () => document.querySelector("#sessions .body");
  try {
    const site = encodeURIComponent(S.site.site_id);
    const list = (await api("GET", `/api/sessions?site_id=${site}&limit=10`)).sessions;
    if (!current() || !body()) return;
    // A refresh that changes nothing leaves the panel (and an open session) as it is; one that
    // does keeps a session that is open open.
    const signature = JSON.stringify(list);
    if (body().dataset.signature === signature) return;
    body().dataset.signature = signature;
    const open = body().querySelector("tr.session.open")?.dataset.session;
    if (!list.length) { body().replaceChildren(h("p", { class: "empty" }, "No sessions today yet")); return; }
    const rows = [];
    for (const x of list) {
      const detail = h("tr", { class: "events", hidden: true }, h("td", { colspan: 4 }));
      const toggle = async (row) => {
        row.classList.toggle("open");
        detail.hidden = !row.classList.contains("open");
        if (detail.hidden) return;
        try {
          const events = (await api("GET", `/api/sessions/${encodeURIComponent(x.session)}?site_id=${site}`)).events;
          detail.firstChild.replaceChildren(h("ol", {}, events.map((e) =>
            h("li", {}, `${clock(e.timestamp, true)} `, h("strong", {}, e.name), ` ${e.path}`))));
        } catch (e) { detail.firstChild.replaceChildren(h("p", { class: "error" }, e.message)); }
      };
      const row = h("tr", { class: "row session", "data-session": x.session, onclick: (ev) => toggle(ev.currentTarget) },
        h("td", { class: "num" }, clock(x.last_seen_at)),
        h("td", { class: "name" }, h("span", {}, x.entry_page === x.exit_page ? x.entry_page : `${x.entry_page} → ${x.exit_page}`)),
        h("td", {}, [x.source || "Direct", x.country, x.browser].filter(Boolean).join(" · ")),
        h("td", { class: "num" }, `${x.pageviews} pv · ${duration(Math.round((x.last_seen_at - x.started_at) / 1000))}`));
      rows.push(row, detail);
      if (x.session === open) toggle(row);
    }
    body().replaceChildren(h("table", { class: "rows" }, h("tr", {}, h("th", { class: "num" }, "Last seen"), h("th", {}, "Pages"),
      h("th", {}, "From"), h("th", { class: "num" }, "Visit")), rows));
  } catch (e) {
    if (body() && current()) body().replaceChildren(h("p", { class: "error" }, e.message));
  }
}

// ---- settings ----
// Two-factor sign-in: a secret for the authenticator app, confirmed by a code, then recovery codes shown once.
function twoFactorBox() {
  const box = h("div", { id: "two-factor" });
  const note = h("span");
  const code = h("input", { id: "totp-code", placeholder: "Code from the app", autocomplete: "one-time-code" });
  box.append(h("p", {}, h("button", { id: "totp-setup", onclick: async () => {
    const x = await api("POST", "/api/2fa/setup", {});
    box.append(h("p", {}, "Add this secret to your authenticator app: ", h("code", { id: "totp-secret" }, x.secret), " or ", h("a", { href: x.otpauth_url }, "open it in the app")),
      h("form", { class: "row", id: "totp-enable", onsubmit: async (ev) => {
        ev.preventDefault();
        try {
          const r = await api("POST", "/api/2fa/enable", { code: code.value.trim() });
          box.append(h("p", {}, "Two-factor sign-in is on. Keep these recovery codes; each works once and they are not shown again:"),
            h("pre", { class: "secret", id: "recovery-codes" }, r.recovery_codes.join("\n")));
        } catch (e) { note.textContent = e.message; note.className = "error"; }
      } }, code, h("button", {}, "Turn on"), note));
  } }, "Set up two-factor sign-in"), h("span", { class: "note" }, " asks for a code from an authenticator app at every sign-in.")));
  return box;
}

// The site's people: owners and admins see them; owners invite, change and remove.
function peopleCard(site, msg) {
  const list = h("table", { class: "rows", id: "members" });
  const email = h("input", { id: "invite-email", type: "email", placeholder: "their@e-mail" });
  const role = h("select", { id: "invite-role" }, ["viewer", "admin", "owner"].map((r) => h("option", { value: r }, r)));
  const visitors = h("input", { type: "checkbox", id: "invite-visitors" });
  const out = h("div");
  const load = async () => {
    try {
      const { members } = await api("GET", `/api/sites/${site.site_id}/members`);
      list.replaceChildren(...members.map((m) => h("tr", {}, h("td", {}, m.email), h("td", { class: "note" }, m.role + (m.role === "viewer" && m.visitors ? " + sessions" : "")),
        h("td", { class: "num" }, h("button", { class: "link", onclick: async () => { await api("DELETE", `/api/sites/${site.site_id}/members/${encodeURIComponent(m.email)}`).catch((e) => msg(out, e.message, "error")); load(); } }, "Remove")))));
    } catch (e) { list.replaceChildren(h("tr", {}, h("td", { class: "note" }, "Only the site's owners and admins see its people."))); }
  };
  load();
  return h("section", { class: "card" }, h("h2", {}, "People"), list,
    h("form", { class: "row", id: "invite", onsubmit: async (ev) => {
      ev.preventDefault();
      try {
        const x = await api("POST", `/api/sites/${site.site_id}/invitations`, { email: email.value.trim(), role: role.value, visitors: visitors.checked });
        out.replaceChildren(h("p", {}, "Send this link (valid 7 days, once): ", h("a", { id: "new-invite", href: x.link }, location.origin + x.link)));
      } catch (e) { msg(out, e.message, "error"); }
    } }, email, role, h("label", { class: "note" }, visitors, " may read visitors' sessions"), h("button", {}, "Invite")),
    h("p", { class: "note" }, "Viewers read the dashboard; admins also change settings, keys and imports; owners also manage people."), out);
}

async function settingsPage() {
  const site = S.site;
  const out = h("div", { class: "wrap settings" }, h("header", { class: "top" }, h("a", { class: "brand", href: "/" }, "Tally"),
    h("span", {}, "Settings"), h("span", { class: "spacer" }), S.user ? h("span", { class: "note" }, S.user) : null));
  const msg = (el, text, cls) => { el.textContent = text; el.className = cls || "note"; };

  const newDomain = h("input", { id: "new-domain", placeholder: "example.com" });
  const newTz = h("input", { id: "new-timezone", placeholder: "Europe/Berlin", value: Intl.DateTimeFormat().resolvedOptions().timeZone || "UTC" });
  const addMsg = h("span");
  out.append(h("section", { class: "card" }, h("h2", {}, "Sites"),
    S.sites.length ? h("div", { class: "row" }, h("select", { id: "settings-site", onchange: (e) => {
      location.href = `/settings?site=${encodeURIComponent(e.target.value)}`; } },
      S.sites.map((x) => h("option", { value: x.domain, selected: site && x.site_id === site.site_id }, x.domain))),
      site ? h("a", { href: `/?site=${encodeURIComponent(site.domain)}` }, "Open dashboard") : null) : h("p", {}, "No sites yet: add your first one."),
    h("form", { class: "row", id: "add-site", onsubmit: async (ev) => {
      ev.preventDefault();
      try { const x = await api("POST", "/api/sites", { domain: newDomain.value, timezone: newTz.value }); location.href = `/settings?site=${encodeURIComponent(x.domain)}`; } catch (e) { msg(addMsg, e.message, "error"); }
    } }, newDomain, newTz, h("button", { class: "primary" }, "Add site"), addMsg)));
  const curPw = h("input", { id: "current-password", type: "password", placeholder: "Current password", autocomplete: "current-password", required: true });
  const newPw = h("input", { id: "new-password", type: "password", placeholder: "New password (8+ characters)", autocomplete: "new-password", minlength: 8, required: true });
  const pwMsg = h("span");
  out.append(h("section", { class: "card" }, h("h2", {}, "Your account"),
    h("form", { class: "row", id: "change-password", onsubmit: async (ev) => {
      ev.preventDefault();
      try { const x = await api("POST", "/api/password", { current_password: curPw.value, new_password: newPw.value }); S.csrf = x.csrf; curPw.value = newPw.value = ""; msg(pwMsg, "Password changed; other browsers are signed out."); } catch (e) { msg(pwMsg, e.message, "error"); }
    } }, curPw, newPw, h("button", {}, "Change password"), pwMsg),
    h("p", {}, h("button", { class: "link", onclick: async () => { await api("POST", "/api/logout/everywhere").catch(() => {}); location.href = "/login"; } }, "Sign out everywhere"),
      h("span", { class: "note" }, " ends this account's sign-ins on every browser.")),
    twoFactorBox()));
  show(out);
  if (!site) return;
  out.append(peopleCard(site, msg));

  const origin = location.origin;
  out.append(h("section", { class: "card" }, h("h2", {}, `Tracking ${site.domain}`),
    h("p", {}, "Tally's script:"), h("pre", {}, `<script defer data-domain="${site.domain}" src="${origin}/js/script.js"></script>`),
    h("p", {}, "Or Umami's tracker, unchanged:"), h("pre", {}, `<script defer src="…/script.js" data-website-id="${site.umami_id}" data-host-url="${origin}"></script>`)));

  const tz = h("input", { id: "timezone", value: site.timezone });
  const ret = ["retention_event_days", "retention_hourly_days", "retention_daily_days"].map((k) => h("input", { id: k, type: "number", min: 1, value: site[k], style: "width:7em" }));
  const genMsg = h("span");
  out.append(h("section", { class: "card" }, h("h2", {}, "General"),
    h("form", { onsubmit: async (ev) => {
      ev.preventDefault();
      try {
        await api("PATCH", `/api/sites/${site.site_id}`, { timezone: tz.value, retention_event_days: +ret[0].value, retention_hourly_days: +ret[1].value, retention_daily_days: +ret[2].value });
        msg(genMsg, "Saved.");
      } catch (e) { msg(genMsg, e.message, "error"); }
    } }, h("div", { class: "row" }, h("label", { for: "timezone" }, "Time zone"), tz),
    h("div", { class: "row" }, "Keep raw events", ret[0], "days, hourly figures", ret[1], "days, daily figures", ret[2], "days (monthly: forever)"),
    h("div", { class: "row" }, h("button", { class: "primary" }, "Save"), genMsg)),
    h("div", { class: "row" }, h("button", { class: "link", id: "remove-site", onclick: async () => {
      if (!confirm(`Remove ${site.domain}? Its settings, goals and keys go; its data expires.`)) return;
      await api("DELETE", `/api/sites/${site.site_id}`); location.href = "/settings";
    } }, "Remove this site"))));

  const domainInput = h("input", { id: "domain-input", placeholder: "www.example.org" });
  const domainMsg = h("span");
  out.append(h("section", { class: "card" }, h("h2", {}, "Domains"),
    h("p", { class: "note" }, "Events for any of these domains count for this site, and links between them are not referrals."),
    h("table", { class: "rows", id: "domains" }, (site.domains || [site.domain]).map((d) => h("tr", {}, h("td", {}, d),
      h("td", { class: "num" }, d === site.domain ? h("span", { class: "note" }, "main") : h("button", { class: "link", onclick: async () => {
        await api("DELETE", `/api/sites/${site.site_id}/domains/${encodeURIComponent(d)}`); location.reload(); } }, "Remove"))))),
    h("form", { class: "row", id: "add-domain", onsubmit: async (ev) => {
      ev.preventDefault();
      try { await api("POST", `/api/sites/${site.site_id}/domains`, { domain: domainInput.value.trim() }); location.reload(); } catch (e) { msg(domainMsg, e.message, "error"); }
    } }, domainInput, h("button", {}, "Add domain"), domainMsg)));

  const goalInput = h("input", { id: "goal-input", placeholder: "Signup  or  /pricing*" });
  // A currency makes a revenue goal: the revenue its events carry in that currency is summed.
  const goalCurrency = h("input", { id: "goal-currency", placeholder: "Currency (revenue goals)", maxlength: "3", size: "8" });
  const goalMsg = h("span");
  out.append(h("section", { class: "card" }, h("h2", {}, "Goals"),
    h("table", { class: "rows", id: "goals" }, site.goals.map((g) => h("tr", {}, h("td", {}, g.display_name),
      h("td", { class: "note" }, g.currency ? `${g.kind}, revenue in ${g.currency}` : g.kind),
      h("td", { class: "num" }, h("button", { class: "link", onclick: async () => { await api("DELETE", `/api/sites/${site.site_id}/goals/${g.goal_id}`); location.reload(); } }, "Remove"))))),
    h("form", { class: "row", id: "add-goal", onsubmit: async (ev) => {
      ev.preventDefault();
      const v = goalInput.value.trim(), currency = goalCurrency.value.trim() || undefined;
      const goal = v.startsWith("/") ? { page_path: v, currency } : { event_name: v, currency };
      try { await api("POST", `/api/sites/${site.site_id}/goals`, goal); location.reload(); } catch (e) { msg(goalMsg, e.message, "error"); }
    } }, goalInput, goalCurrency, h("button", {}, "Add goal"), h("span", { class: "note" }, "A custom event name, or a page path (with * wildcards)."), goalMsg)));

  // Funnel steps, one per line: a page path (with * wildcards) or a custom event name.
  const funnelName = h("input", { id: "funnel-name", placeholder: "Funnel name" });
  const funnelSteps = h("textarea", { id: "funnel-steps", rows: 4, placeholder: "/\n/pricing*\nSignup" });
  const funnelMsg = h("span");
  const stepText = (st) => st.page !== undefined ? st.page : st.event;
  out.append(h("section", { class: "card" }, h("h2", {}, "Funnels"),
    h("table", { class: "rows", id: "funnels" }, (site.funnels || []).map((f) => h("tr", {}, h("td", {}, f.name),
      h("td", { class: "note" }, f.steps.map(stepText).join(" → ")),
      h("td", { class: "num" }, h("button", { class: "link", onclick: async () => { await api("DELETE", `/api/sites/${site.site_id}/funnels/${f.funnel_id}`); location.reload(); } }, "Remove"))))),
    h("form", { class: "row", id: "add-funnel", onsubmit: async (ev) => {
      ev.preventDefault();
      const steps = funnelSteps.value.split("\n").map((l) => l.trim()).filter(Boolean).map((l) => l.startsWith("/") ? { page: l } : { event: l });
      try { await api("POST", `/api/sites/${site.site_id}/funnels`, { name: funnelName.value, steps }); location.reload(); } catch (e) { msg(funnelMsg, e.message, "error"); }
    } }, funnelName, funnelSteps, h("button", {}, "Add funnel"), h("span", { class: "note" }, "2 to 8 steps, one per line: a page path (with * wildcards) or a custom event name, done in order within a visit."), funnelMsg)));

  const keysBox = h("div");
  const keyName = h("input", { id: "key-name", placeholder: "Key name" });
  const scopeBoxes = ["stats", "visitors", "import", "admin"].map((x) => h("label", { class: "note" },
    h("input", { type: "checkbox", name: "scope", value: x, checked: x === "stats" }), ` ${x}`));
  out.append(h("section", { class: "card" }, h("h2", {}, "API keys"), keysBox,
    h("form", { class: "row", id: "create-key", onsubmit: async (ev) => {
      ev.preventDefault();
      const scopes = scopeBoxes.map((l) => l.querySelector("input")).filter((i) => i.checked).map((i) => i.value);
      const k = await api("POST", `/api/sites/${site.site_id}/keys`, { name: keyName.value || "dashboard", scopes });
      keysBox.prepend(h("p", {}, "Copy this key now; it is not shown again:", h("div", { class: "secret", id: "new-key" }, k.key)));
      loadKeys();
    } }, keyName, ...scopeBoxes, h("button", {}, "Create key"),
    h("span", { class: "note" }, "stats reads statistics; visitors reads and erases visitors' sessions; import backfills events; admin does everything on this site."))));
  async function loadKeys() {
    const { keys } = await api("GET", `/api/sites/${site.site_id}/keys`);
    keysBox.querySelector("table")?.remove();
    keysBox.append(h("table", { class: "rows" }, keys.map((k) => h("tr", {}, h("td", {}, k.name), h("td", { class: "note" }, (k.scopes || []).join(", ") + (k.legacy ? " (legacy)" : "")), h("td", { class: "note" }, k.revoked ? "revoked" : "active"),
      h("td", { class: "num" }, k.revoked ? "" : h("button", { class: "link", onclick: async () => { await api("DELETE", `/api/sites/${site.site_id}/keys/${k.key_id}`); loadKeys(); } }, "Revoke"))))));
  }
  loadKeys();

  const sharesBox = h("div");
  const shareName = h("input", { id: "share-name", placeholder: "Link name" });
  const sharePw = h("input", { id: "share-password", type: "password", placeholder: "Password (optional)", autocomplete: "new-password" });
  const shareEmbed = h("input", { id: "share-embed", type: "checkbox" });
  const shareMsg = h("span");
  out.append(h("section", { class: "card" }, h("h2", {}, "Shared links"), h("p", { class: "note" }, "Read-only dashboards for people without an account."), sharesBox,
    h("form", { class: "row", id: "create-share", onsubmit: async (ev) => {
      ev.preventDefault();
      try {
        const x = await api("POST", `/api/sites/${site.site_id}/shares`, { name: shareName.value || "shared link", password: sharePw.value, embed: shareEmbed.checked });
        const url = origin + x.path;
        sharesBox.prepend(h("p", {}, "The link (copy it now; it is not shown again): ", h("a", { class: "secret", id: "new-share", href: url }, url)),
          x.embed ? h("p", {}, "To embed it (theme light or dark):", h("pre", { id: "share-embed-code" },
            `<iframe src="${url}?embed=true&theme=light" style="width:100%;height:1600px;border:0" loading="lazy"></iframe>`)) : null);
        loadShares();
      } catch (e) { msg(shareMsg, e.message, "error"); }
    } }, shareName, sharePw, h("label", { class: "note" }, shareEmbed, " let other sites embed it"), h("button", {}, "Create link"), shareMsg)));
  async function loadShares() {
    const { shares } = await api("GET", `/api/sites/${site.site_id}/shares`);
    sharesBox.querySelector("table")?.remove();
    sharesBox.append(h("table", { class: "rows" }, shares.map((x) => h("tr", { "data-share": x.share_id }, h("td", {}, x.name), h("td", { class: "note" }, x.revoked ? "revoked" : x.has_password ? "password" : "open"),
      h("td", { class: "note" }, x.revoked || x.has_password ? "" : h("button", { class: "link embed-toggle", onclick: async () => {
        try { await api("PATCH", `/api/sites/${site.site_id}/shares/${x.share_id}`, { embed: !x.embed }); loadShares(); } catch (e) { msg(shareMsg, e.message, "error"); }
      } }, x.embed ? "embeddable: stop" : "allow embedding")),
      h("td", { class: "num" }, x.revoked ? "" : h("button", { class: "link", onclick: async () => { await api("DELETE", `/api/sites/${site.site_id}/shares/${x.share_id}`); loadShares(); } }, "Revoke"))))));
  }
  loadShares();
}

boot();
