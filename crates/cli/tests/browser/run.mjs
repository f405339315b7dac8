// Tally's browser test, driven by `tests/it/browser.rs`: headless Chromium (Debian's) through
// playwright-core against a running `tally serve`.
//
// 1. A site page on http://shop.test (mapped to loopback) with Tally's tracker: a page view, a
//    custom event queued before the script loaded, an SPA navigation, an outbound click, and the
//    engagement event sent when the page is hidden. Two more pages use Plausible's official
//    tracker package and Umami's tracker script unchanged. The Stats API must then report every
//    one of them.
// 2. The dashboard: sign in, compare the top stats with the Stats API for the same range, click a
//    page to filter by it, check the chart is drawn (a screenshot that is not blank), a phone-sized
//    screen without sideways scrolling, and a shared link.
//
// Environment: TALLY_URL, TALLY_KEY, TALLY_SITE, TALLY_UMAMI_ID, TALLY_EMAIL, TALLY_PASSWORD, TALLY_SHARE_PATH,
// TALLY_CHROMIUM, TALLY_NODE_MODULES, TALLY_OUT (where screenshots go). Prints one JSON line of
// findings; any failed check throws, and the process exits non-zero.
import { createServer } from "node:http";
import { createRequire } from "node:module";
import { readFileSync, mkdirSync } from "node:fs";
import { join } from "node:path";
import assert from "node:assert/strict";

const env = (name) => { const v = process.env[name]; if (!v) throw new Error(`${name} is not set`); return v; };
const TALLY = env("TALLY_URL"), KEY = env("TALLY_KEY"), SITE = env("TALLY_SITE"), OUT = env("TALLY_OUT");
const METRICS_TOKEN = env("TALLY_METRICS_TOKEN");
const modules = env("TALLY_NODE_MODULES");
const require = createRequire(join(modules, "noop.js"));
const { chromium } = require("playwright-core");
mkdirSync(OUT, { recursive: true });
const found = {};
const log = (...a) => console.error("browser:", ...a);
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
// A desktop Chrome: headless Chromium's own User-Agent says "HeadlessChrome" and is dropped as a bot.
const UA = "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/131.0.0.0 Safari/537.36";

// ---- the site's pages, served on a port of their own ----
const plausibleJs = readFileSync(join(modules, "@plausible-analytics/tracker/plausible.js"));
const umamiJs = readFileSync(join(modules, "..", "umami-tracker.js"));
const umamiPage = `<!doctype html><html><head><meta charset="utf-8"><title>Umami tracker</title>
<script defer src="/vendor/umami.js" data-website-id="${env("TALLY_UMAMI_ID")}" data-host-url="${TALLY}"></script></head>
<body><button id="newsletter" onclick="umami.track('Newsletter', { list: 'weekly' })">Subscribe</button></body></html>`;
const sitePage = (PORT) => `<!doctype html><html><head><meta charset="utf-8"><title>Shop</title>
<script>window.tally=window.tally||function(){(tally.q=tally.q||[]).push(arguments)};tally("Signup",{props:{plan:"pro"},revenue:{currency:"EUR",amount:"49.90"}});</script>
<script defer data-domain="${SITE}" src="${TALLY}/js/script.js"></script></head>
<body style="height:3000px"><h1>Shop</h1>
<a id="spa" href="/pricing" onclick="event.preventDefault();history.pushState({}, '', '/pricing');document.querySelector('h1').textContent='Pricing'">Pricing</a>
<a id="out" href="http://elsewhere.test:${PORT}/landing">Elsewhere</a></body></html>`;
const plausiblePage = `<!doctype html><html><head><meta charset="utf-8"><title>Plausible tracker</title>
<script type="module">import { init, track } from "/vendor/plausible.js";
init({ domain: "${SITE}", endpoint: "${TALLY}/api/event", logging: false });
track("Purchase", { props: { via: "plausible" }, revenue: { amount: 12.34, currency: "USD" } });</script></head><body>Bought</body></html>`;
const pages = createServer((req, res) => {
  const path = new URL(req.url, "http://x").pathname;
  if (path === "/vendor/plausible.js") { res.writeHead(200, { "content-type": "text/javascript" }); return res.end(plausibleJs); }
  if (path === "/vendor/umami.js") { res.writeHead(200, { "content-type": "text/javascript" }); return res.end(umamiJs); }
  if (path === "/umami.html") { res.writeHead(200, { "content-type": "text/html; charset=utf-8" }); return res.end(umamiPage); }
  if (path === "/embed.html") {
    // Another site framing two shared links: one its owner made embeddable, one not.
    const q = new URL(req.url, "http://x").searchParams;
    res.writeHead(200, { "content-type": "text/html; charset=utf-8" });
    return res.end(`<!doctype html><html><body><iframe id="embedded" src="${q.get("a")}" style="width:1000px;height:700px"></iframe>
<iframe id="refused" src="${q.get("b")}" style="width:400px;height:300px"></iframe></body></html>`);
  }
  res.writeHead(200, { "content-type": "text/html; charset=utf-8" });
  res.end(path === "/plausible.html" ? plausiblePage : req.headers.host.startsWith("elsewhere.test") ? "<p>elsewhere</p>" : sitePage(port));
});
await new Promise((r) => pages.listen(0, "127.0.0.1", r));
const port = pages.address().port;

const browser = await chromium.launch({
  executablePath: env("TALLY_CHROMIUM"),
  // The User-Agent is set for the whole browser: a per-page override does not reach beacons sent
  // while a page unloads, which would go out as HeadlessChrome and be dropped as a bot.
  args: ["--no-sandbox", "--disable-dev-shm-usage", "--disable-blink-features=AutomationControlled", `--user-agent=${UA}`,
    "--host-resolver-rules=MAP shop.test 127.0.0.1, MAP elsewhere.test 127.0.0.1"],
});

async function stats(body) {
  const r = await fetch(`${TALLY}/api/v2/query`, { method: "POST", headers: { authorization: `Bearer ${KEY}` }, body: JSON.stringify({ site_id: SITE, ...body }) });
  const json = await r.json();
  if (!r.ok) throw new Error(`stats query failed: ${JSON.stringify(json)}`);
  return json;
}
// A YYYY-MM-DD date `n` years away (29 February becomes the 28th, as the Stats API has it).
function addYears(iso, n) {
  const [y, m, d] = iso.split("-").map(Number);
  const last = new Date(Date.UTC(y + n, m, 0)).getUTCDate();
  return `${y + n}-${String(m).padStart(2, "0")}-${String(Math.min(d, last)).padStart(2, "0")}`;
}

async function until(what, check, ms = 20000) {
  const start = Date.now();
  let last;
  while (Date.now() - start < ms) {
    last = await check();
    if (last.ok) return last;
    await sleep(250);
  }
  throw new Error(`${what} never happened; last seen: ${JSON.stringify(last)}`);
}
// A flush writes its items concurrently, so one breakdown can show an event before another does:
// wait until no acknowledged event is left unflushed before comparing several.
async function settled() {
  return until("every acknowledged event is flushed", async () => {
    const text = await (await fetch(`${TALLY}/metrics`, { headers: { authorization: `Bearer ${METRICS_TOKEN}` } })).text();
    const m = text.match(/^tally_pending_events (\S+)$/m);
    return { ok: !!m && Number(m[1]) === 0, pending: m?.[1] };
  });
}
const rows = (res) => Object.fromEntries(res.results.map((r) => [r.dimensions[0], r.metrics]));

// The script reads "today" (UTC, the site's zone) in many places, and the server dates each event
// when it takes it: started this close to midnight, it waits for the next day, so all of its
// events and reads fall on one day.
{
  const now = Date.now();
  const midnight = new Date(now).setUTCHours(24, 0, 0, 0);
  if (midnight - now < 8 * 60_000) await sleep(midnight - now + 5000);
}

try {
  // ---- 1. the trackers ----
  // Beacons' bodies are not visible to the browser's request events, so each step waits for the
  // number of requests, and the contents are checked in what Tally stored.
  // The visitor's address as a proxy forwards it: a public resolver's, which the country
  // database compiled into tally places in the US with no setup.
  const site = await browser.newContext({ extraHTTPHeaders: { "x-forwarded-for": "8.8.8.8" } });
  let sent = 0, answered = 0;
  site.on("request", (r) => { if (r.url().startsWith(`${TALLY}/api/event`)) sent++; });
  // Answered or failed: closing the context below aborts a beacon still in flight.
  const settle = (r) => { if (r.url().startsWith(`${TALLY}/api/event`)) answered++; };
  site.on("requestfinished", settle);
  site.on("requestfailed", settle);
  const page = await site.newPage();
  await page.goto(`http://shop.test:${port}/`);
  await until("the page view and the queued event are sent", async () => ({ ok: sent >= 2, sent }));
  await page.click("#spa");
  // Answered, not only sent: the server times an event when it takes it, and the funnel below
  // needs /pricing's page view before the Purchase that follows.
  await until("the SPA navigation is answered", async () => ({ ok: sent >= 3 && answered >= 3, sent, answered }));
  await page.mouse.wheel(0, 1500);
  await sleep(1500); // engaged time, so the visit has a duration
  await page.click("#out");
  await page.waitForURL(`http://elsewhere.test:${port}/landing`);
  const official = await site.newPage();
  await official.goto(`http://shop.test:${port}/plausible.html`);
  await until("every tracker request is sent", async () => ({ ok: sent >= 7, sent }));
  // Umami's tracker posts JSON to /api/send (with a CORS preflight) from its own script. Its
  // posts are counted once answered: closing the context below cancels a request still in
  // flight, and the event would then never reach Tally.
  // Another visitor (another address: Google's other resolver, also in the US), so that Umami's
  // page view starts a visit of its own, whose language is the one Umami's tracker sends.
  let umamiSent = 0;
  const umamiSite = await browser.newContext({ extraHTTPHeaders: { "x-forwarded-for": "8.8.4.4" } });
  umamiSite.on("requestfinished", (r) => { if (r.url().startsWith(`${TALLY}/api/send`) && r.method() === "POST") umamiSent++; });
  const umami = await umamiSite.newPage();
  await umami.goto(`http://shop.test:${port}/umami.html`);
  await until("Umami's tracker sends its page view", async () => ({ ok: umamiSent >= 1, umamiSent }));
  await umami.click("#newsletter");
  await until("Umami's tracker sends its event", async () => ({ ok: umamiSent >= 2, umamiSent }));
  found.tracker_requests = sent;
  await until("every tracker request is answered", async () => ({ ok: answered >= sent, sent, answered }));
  await site.close();
  await umamiSite.close();

  const range = { date_range: "day" };
  const pagesSeen = await until("the Stats API reports every page", async () => {
    const r = rows(await stats({ ...range, metrics: ["pageviews"], dimensions: ["event:page"] }));
    return { ok: ["/", "/pricing", "/plausible.html", "/umami.html"].every((p) => r[p]?.[0] === 1), r };
  });
  found.pages = pagesSeen.r;
  const events = await until("the Stats API reports every custom event", async () => {
    const r = rows(await stats({ ...range, metrics: ["events"], dimensions: ["event:name"] }));
    return { ok: ["Signup", "Outbound Link: Click", "Purchase", "Newsletter"].every((n) => r[n]?.[0] === 1), r };
  });
  found.events = events.r;
  await settled();
  assert.equal(events.r.engagement, undefined, "engagement is not a custom event");
  const goal = rows(await stats({ ...range, metrics: ["visitors", "conversion_rate"], dimensions: ["event:goal"] }));
  assert.equal(goal.Signup?.[0], 1, `goal Signup: ${JSON.stringify(goal)}`);
  const props = rows(await stats({ ...range, metrics: ["events"], dimensions: ["event:props:plan"] }));
  assert.equal(props.pro?.[0], 1, `property plan: ${JSON.stringify(props)}`);
  const outbound = rows(await stats({ ...range, metrics: ["events"], dimensions: ["event:props:url"] }));
  assert.equal(outbound[`http://elsewhere.test:${port}/landing`]?.[0], 1, `outbound url: ${JSON.stringify(outbound)}`);
  // The engagement event leaves with the page, so it may come a flush after the rest.
  const { top } = await until("four page views and a visit the engagement extends", async () => {
    const top = (await stats({ ...range, metrics: ["visitors", "visits", "pageviews", "visit_duration"] })).results[0].metrics;
    return { ok: top[2] === 4 && top[3] >= 1, top };
  });
  await settled();
  found.top_today = top;
  const list = rows(await stats({ ...range, metrics: ["events"], dimensions: ["event:props:list"] }));
  assert.equal(list.weekly?.[0], 1, `Umami event data: ${JSON.stringify(list)}`);
  const get = async (path) => (await fetch(`${TALLY}${path}`, { headers: { authorization: `Bearer ${KEY}` } })).json();
  const engagement = await until("the engagement event is stored in its session", async () => {
    let replay = [];
    for (const s of (await get(`/api/sessions?site_id=${SITE}`)).sessions) {
      replay = replay.concat((await get(`/api/sessions/${s.session}?site_id=${SITE}`)).events || []);
    }
    const e = replay.find((x) => x.name === "engagement" && x.path === "/pricing");
    return { ok: !!e, e, names: replay.map((x) => `${x.name} ${x.path}`) };
  });
  found.session_events = engagement.names;
  const ep = Object.fromEntries(Array.isArray(engagement.e.props) ? engagement.e.props : Object.entries(engagement.e.props || {}));
  assert.ok(Number(ep.engaged_ms) > 1000, `engaged time: ${JSON.stringify(ep)}`);
  assert.ok(Number(ep.scroll_depth) > 0, `scroll depth: ${JSON.stringify(ep)}`);

  // Geography and devices with no setup: the bundled country database, the window width the
  // trackers send (every page ran in a 1280-pixel-wide window: a Laptop, by Plausible's
  // classes), Umami's language.
  // (Requests the browser makes under CORS may leave the extra header out: a visit without it
  // has no country, since loopback is nowhere.)
  const countries = rows(await stats({ ...range, metrics: ["visitors", "visits"], dimensions: ["visit:country"] }));
  assert.deepEqual(Object.keys(countries), ["US"], `countries from the bundled database: ${JSON.stringify(countries)}`);
  const visits = (await stats({ ...range, metrics: ["visits"] })).results[0].metrics[0];
  const screens = rows(await stats({ ...range, metrics: ["visitors", "visits"], dimensions: ["visit:screen"] }));
  assert.deepEqual(Object.keys(screens), ["Laptop"], `screen sizes: ${JSON.stringify(screens)}`);
  assert.equal(screens.Laptop[1], visits, "every visit has its screen size");
  const languages = rows(await stats({ ...range, metrics: ["visitors"], dimensions: ["visit:language"] }));
  assert.ok(languages["en-US"]?.[0] >= 1, `Umami's language: ${JSON.stringify(languages)}`);
  found.devices = { countries, screens, languages, visits };
  // Revenue: Tally's tracker sent the Signup's (a revenue goal in EUR); Plausible's tracker the
  // Purchase's, kept on its event.
  const revenue = await stats({ ...range, metrics: ["visitors", "total_revenue", "average_revenue"], dimensions: ["event:goal"] });
  const signupRevenue = revenue.results.find((r) => r.dimensions[0] === "Signup")?.metrics;
  assert.deepEqual(signupRevenue?.[1], { value: 49.9, amount: "49.9", currency: "EUR" }, `Signup revenue: ${JSON.stringify(revenue)}`);
  assert.deepEqual(signupRevenue?.[2], { value: 49.9, amount: "49.9", currency: "EUR" }, "average revenue");
  const purchase = engagement.e && (await (async () => {
    for (const s of (await get(`/api/sessions?site_id=${SITE}`)).sessions) {
      const e = ((await get(`/api/sessions/${s.session}?site_id=${SITE}`)).events || []).find((x) => x.name === "Purchase");
      if (e) return e;
    }
  })());
  assert.deepEqual(purchase?.revenue, { amount: "12.34", currency: "USD" }, `Plausible's revenue: ${JSON.stringify(purchase)}`);
  found.revenue = signupRevenue;

  // ---- 2. the dashboard ----
  const desk = await browser.newContext({ viewport: { width: 1280, height: 1000 } });
  const dash = await desk.newPage();
  const pageErrors = [];
  dash.on("pageerror", (e) => pageErrors.push(String(e)));
  await dash.goto(`${TALLY}/`);
  await dash.waitForSelector("form#login");
  await dash.fill("input[name=email]", env("TALLY_EMAIL"));
  await dash.fill("input[name=password]", env("TALLY_PASSWORD"));
  await dash.click("form#login button[type=submit]");
  await dash.waitForSelector("#top-stats[data-range]");
  const [from, to] = (await dash.getAttribute("#top-stats", "data-range")).split("..");
  const api = (await stats({ date_range: [from, to], metrics: ["visitors", "visits", "pageviews", "views_per_visit", "bounce_rate"] })).results[0].metrics;
  const shown = async (m) => (await dash.textContent(`#stat-${m} .value`)).trim();
  assert.equal(await shown("visitors"), String(api[0]), "visitors on the dashboard");
  assert.equal(await shown("visits"), String(api[1]), "visits on the dashboard");
  assert.equal(await shown("pageviews"), String(api[2]), "pageviews on the dashboard");
  assert.equal(await shown("views_per_visit"), api[3].toFixed(2), "views per visit on the dashboard");
  assert.equal(await shown("bounce_rate"), `${api[4]}%`, "bounce rate on the dashboard");
  found.dashboard_range = [from, to];
  found.dashboard_top = { visitors: await shown("visitors"), pageviews: await shown("pageviews") };

  await dash.waitForSelector("#chart path.line");
  await dash.waitForSelector('[data-panel="pages"] tr.row[data-value="/pricing"]');
  // Engagement in the pages panel: the Stats API's scroll depth and time on page of /pricing,
  // which the tracker measured when the page was left.
  const engaged = (await stats({ date_range: [from, to], metrics: ["scroll_depth", "time_on_page"], dimensions: ["event:page"],
    filters: [["is", "event:page", ["/pricing"]]] })).results[0].metrics;
  assert.ok(engaged[0] > 0 && engaged[1] >= 1, `engagement of /pricing: ${engaged}`);
  assert.equal((await dash.textContent('[data-panel="pages"] tr.row[data-value="/pricing"] td:nth-child(4)')).trim(), `${engaged[0]}%`, "scroll depth");
  found.engagement = engaged;
  // Comparisons: each top stat's change, the dashed series and each row's change are the Stats
  // API's for the previous period (which holds the visit browser.rs imported 35 days ago).
  const cmp = await stats({ date_range: [from, to], metrics: ["visitors", "visits", "pageviews", "views_per_visit", "bounce_rate"],
    include: { comparisons: { mode: "previous_period" } } });
  assert.equal(cmp.results[0].comparison.metrics[0], 1, `one visitor in the previous period: ${JSON.stringify(cmp)}`);
  assert.equal(await dash.getAttribute("#top-stats", "data-comparison-range"), cmp.query.comparison_date_range.join(".."));
  for (const [i, m] of ["visitors", "visits", "pageviews"].entries()) {
    assert.equal(await dash.getAttribute(`#stat-${m} .change`, "data-change"), String(cmp.results[0].comparison.change[i]), `${m}'s change`);
  }
  const cmpSeries = await stats({ date_range: [from, to], metrics: ["visitors"], dimensions: ["time:day"], order_by: [["time:day", "asc"]],
    include: { comparisons: { mode: "previous_period" } } });
  await dash.waitForSelector("#chart path.comparison");
  assert.equal(await dash.getAttribute("#chart path.comparison", "data-values"),
    cmpSeries.results.map((r) => r.comparison.metrics[0]).join(","), "the dashed series is the comparison's");
  const cmpPages = await stats({ date_range: [from, to], metrics: ["visitors", "pageviews"], dimensions: ["event:page"],
    filters: [["is", "event:page", ["/pricing"]]], include: { comparisons: { mode: "previous_period" } } });
  assert.equal(await dash.getAttribute('[data-panel="pages"] tr.row[data-value="/pricing"] td[data-change]', "data-change"),
    String(cmpPages.results[0].comparison.change[0]), "the /pricing row's change");
  found.comparison = { range: cmp.query.comparison_date_range, change: cmp.results[0].comparison.change };
  await dash.selectOption("#comparison", "year_over_year");
  await dash.waitForFunction((r) => document.querySelector("#top-stats")?.dataset.comparisonRange === r,
    [addYears(from, -1), addYears(to, -1)].join(".."));
  assert.match(dash.url(), /comparison=year_over_year/);
  await dash.selectOption("#comparison", "previous_period");
  await dash.waitForSelector("#chart path.comparison");
  // Recent sessions: the API's list, latest first; a click shows a session's events in order.
  const apiSessions = (await get(`/api/sessions?site_id=${SITE}&limit=10`)).sessions;
  assert.ok(apiSessions.length >= 1, "today's sessions are listed");
  await dash.waitForFunction((n) => document.querySelectorAll("#sessions tr.session").length === n, apiSessions.length);
  const latest = dash.locator("#sessions tr.session").first();
  assert.equal(await latest.getAttribute("data-session"), apiSessions[0].session, "the latest session first");
  const replayed = (await get(`/api/sessions/${apiSessions[0].session}?site_id=${SITE}`)).events;
  await latest.click();
  await dash.waitForFunction((n) => document.querySelectorAll("#sessions tr.events:not([hidden]) li").length === n, replayed.length);
  const steps = await dash.locator("#sessions tr.events:not([hidden]) li").allTextContents();
  assert.equal(steps.length, replayed.length, `the session's events: ${JSON.stringify(steps)}`);
  replayed.forEach((e, i) => assert.ok(steps[i].includes(`${e.name} ${e.path}`), `step ${i}: ${steps[i]} is not ${e.name} ${e.path}`));
  found.dashboard_session = steps;
  // Locations: the world map shades the countries the Stats API counts, the country list beside
  // it; devices in full, each tab the Stats API's breakdown; goals with their revenue.
  const mapCountries = rows(await stats({ date_range: [from, to], metrics: ["visitors"], dimensions: ["visit:country"] }));
  await dash.waitForSelector('[data-panel="locations"] svg.world path.seen');
  assert.deepEqual(await dash.locator('[data-panel="locations"] svg.world path.seen').evaluateAll((ps) => ps.map((p) => p.dataset.country)),
    Object.keys(mapCountries), "the shaded countries");
  assert.ok(await dash.locator('[data-panel="locations"] svg.world path[data-country]').count() > 150, "the map draws the world");
  assert.equal((await dash.textContent('[data-panel="locations"] tr.row[data-value="US"] td:nth-child(2)')).trim(), String(mapCountries.US[0]), "the list beside the map");
  for (const [tab, dimension] of [["visit:screen", "visit:screen"], ["visit:language", "visit:language"], ["visit:browser_version", "visit:browser_version"], ["visit:os_version", "visit:os_version"]]) {
    await dash.click(`[data-panel="devices"] [data-tab="${tab}"]`);
    // Loaded: the tab's table, or its empty note (Linux gives no OS version).
    await dash.waitForFunction((d) => document.querySelector(`[data-panel="devices"] table[data-dimension="${d}"]`)
      || document.querySelector('[data-panel="devices"] .body')?.textContent === "No data yet", dimension);
    const want = rows(await stats({ date_range: [from, to], metrics: ["visitors", "visits"], dimensions: [dimension] }));
    const shownRows = await dash.locator('[data-panel="devices"] tr.row').evaluateAll((trs) => trs.map((tr) => [tr.dataset.value, tr.children[1].textContent]));
    assert.deepEqual(shownRows, Object.entries(want).map(([v, [n]]) => [v, String(n)]), `the ${tab} tab`);
  }
  await dash.waitForSelector('[data-panel="goals"] tr.row[data-value="Signup"]');
  const goalsApi = await stats({ date_range: [from, to], metrics: ["visitors", "events", "conversion_rate", "total_revenue", "average_revenue"], dimensions: ["event:goal"] });
  const signupApi = goalsApi.results.find((r) => r.dimensions[0] === "Signup").metrics;
  assert.deepEqual([signupApi[3].amount, signupApi[3].currency], ["49.9", "EUR"], `the Signup goal's revenue: ${JSON.stringify(signupApi)}`);
  assert.equal((await dash.textContent('[data-panel="goals"] tr.row[data-value="Signup"] td:nth-child(5)')).trim(), "49.90 EUR", "the Signup goal's revenue");
  assert.equal((await dash.textContent('[data-panel="goals"] tr.row[data-value="Signup"] td:nth-child(6)')).trim(), "49.90 EUR", "the Signup goal's average revenue");
  await dash.screenshot({ path: join(OUT, "dashboard-map.png"), fullPage: true });
  // A click on a country filters by it.
  await dash.click('[data-panel="locations"] svg.world path[data-country="US"]');
  await dash.waitForSelector('#filters .chip[data-dimension="visit:country"]');
  assert.match(dash.url(), /f=is%7Cvisit%3Acountry%7CUS/);
  await dash.goto(`${TALLY}/?site=${SITE}&period=30d`);
  await dash.waitForSelector("#top-stats[data-range]");
  await dash.waitForSelector("#chart path.comparison");
  await dash.waitForSelector('[data-panel="pages"] tr.row[data-value="/pricing"]');
  const shot = join(OUT, "dashboard.png");
  await dash.screenshot({ path: shot, fullPage: true });
  const chartPng = await dash.locator("#chart").screenshot();
  // Count the chart's pixels that are not the card's white: a drawn line and area are thousands.
  const inked = await dash.evaluate(async (b64) => {
    const img = new Image();
    img.src = `data:image/png;base64,${b64}`;
    await img.decode();
    const c = document.createElement("canvas");
    c.width = img.width; c.height = img.height;
    const ctx = c.getContext("2d");
    ctx.drawImage(img, 0, 0);
    const d = ctx.getImageData(0, 0, c.width, c.height).data;
    let n = 0;
    for (let i = 0; i < d.length; i += 4) if (d[i] < 235 || d[i + 1] < 235 || d[i + 2] < 235) n++;
    return n;
  }, chartPng.toString("base64"));
  found.chart_inked_pixels = inked;
  assert.ok(inked > 500, `the chart is blank (${inked} inked pixels)`);

  await dash.click('[data-panel="pages"] tr.row[data-value="/pricing"]');
  await dash.waitForSelector("#filters .chip");
  const filtered = (await stats({ date_range: [from, to], metrics: ["visitors", "pageviews"], filters: [["is", "event:page", ["/pricing"]]] })).results[0].metrics;
  await dash.waitForFunction((v) => document.querySelector("#stat-pageviews .value")?.textContent.trim() === v, String(filtered[1]));
  assert.match(dash.url(), /f=is%7Cevent%3Apage%7C%2Fpricing/);
  found.filtered_pageviews = filtered[1];
  await dash.screenshot({ path: join(OUT, "dashboard-filtered.png"), fullPage: true });

  // Filters from the form, on any dimension: two patterns (OR), then another dimension (AND);
  // the state is in the URL, and the top stats are the Stats API's under the same filters.
  await dash.goto(`${TALLY}/?site=${SITE}&period=30d`);
  await dash.waitForSelector("#top-stats[data-range]");
  const applyFilter = async (dim, op, values) => {
    if (await dash.locator("#filter-form").isHidden()) await dash.click("#add-filter");
    await dash.selectOption("#filter-dim", dim);
    await dash.selectOption("#filter-op", op);
    await dash.fill("#filter-values", values.join("\n"));
    await dash.click("#filter-apply");
  };
  const topShows = async (filters) => {
    const want = (await stats({ date_range: [from, to], metrics: ["visitors", "pageviews"], filters })).results[0].metrics;
    await dash.waitForFunction((v) => document.querySelector("#stat-pageviews .value")?.textContent.trim() === v, String(want[1]));
    assert.equal((await dash.textContent("#stat-visitors .value")).trim(), String(want[0]), `visitors under ${JSON.stringify(filters)}`);
    return want;
  };
  const byPattern = ["matches", "event:page", ["^/pricing$", "^/$"]];
  await applyFilter("event:page", "matches", byPattern[2]);
  await dash.waitForSelector('#filters .chip[data-dimension="event:page"]');
  assert.match(dash.url(), /f=matches%7Cevent%3Apage%7C%5E%2Fpricing%24%7C%5E%2F%24/);
  const patterned = await topShows([byPattern]);
  const notMobile = ["is_not", "visit:device", ["Mobile"]];
  await applyFilter("visit:device", "is_not", ["Mobile"]);
  await dash.waitForSelector('#filters .chip[data-dimension="visit:device"]');
  await topShows([byPattern, notMobile]);
  // A pattern that does not compile is refused in the form; the filters stay as they were.
  const before = dash.url();
  await applyFilter("event:page", "matches", ["("]);
  await dash.waitForFunction(() => document.querySelector("#filter-error")?.textContent.includes("regular expression"));
  assert.equal(dash.url(), before, "a refused filter changes nothing");
  // The filters saved as a segment, which the dashboard then filters by.
  await dash.fill("#segment-name", "Home or pricing");
  await dash.click("#segment-save button");
  await dash.waitForSelector('#filters .chip[data-dimension="segment"]');
  const segs = (await get(`/api/sites/${SITE}/segments`)).segments;
  assert.equal(segs.length, 1, JSON.stringify(segs));
  assert.deepEqual(segs[0].filters, [byPattern, notMobile]);
  assert.ok(dash.url().includes(`f=is%7Csegment%7C${segs[0].segment_id}`), dash.url());
  await topShows([["is", "segment", [segs[0].segment_id]]]);
  found.filters = { patterned, segment: segs[0].name };

  // The settings page: a goal, a key shown once, a shared link, another domain.
  await dash.goto(`${TALLY}/settings?site=${SITE}`);
  await dash.waitForSelector("#add-goal");
  await dash.fill("#goal-input", "Purchase");
  await dash.click("#add-goal button");
  await dash.waitForFunction(() => document.querySelector("#goals")?.textContent.includes("Purchase"));
  await dash.fill("#key-name", "reporting");
  await dash.click("#create-key button");
  const newKey = (await (await dash.waitForSelector("#new-key")).textContent()).trim();
  assert.match(newKey, /^tly_[0-9a-f]{64}$/);
  const byNewKey = await fetch(`${TALLY}/api/v2/query`, { method: "POST", headers: { authorization: `Bearer ${newKey}` },
    body: JSON.stringify({ site_id: SITE, metrics: ["visitors"], date_range: "day" }) });
  assert.equal(byNewKey.status, 200, "the key made on the settings page works");
  await dash.fill("#share-name", "board");
  await dash.check("#share-embed");
  await dash.click("#create-share button");
  const embedLink = await (await dash.waitForSelector("#new-share")).getAttribute("href");
  assert.match(embedLink, /\/share\/[0-9a-f]{64}$/);
  assert.ok((await dash.textContent("#share-embed-code")).includes(`${embedLink}?embed=true&theme=light`), "the embed code");
  // People: an invitation link for a viewer, which opens the page that accepts it.
  await dash.fill("#invite-email", "viewer@shop.test");
  await dash.selectOption("#invite-role", "viewer");
  await dash.click("#invite button");
  const invite = await (await dash.waitForSelector("#new-invite")).getAttribute("href");
  assert.match(invite, /^\/invite\/[0-9a-f]{64}$/);
  const invitePage = await fetch(`${TALLY}${invite}`);
  assert.equal(invitePage.status, 200, "the invitation link opens");
  assert.match(await invitePage.text(), /viewer@shop\.test/);
  await dash.click("#totp-setup");
  assert.match((await (await dash.waitForSelector("#totp-secret")).textContent()).trim(), /^[A-Z2-7]{32}$/);
  await dash.fill("#domain-input", "shop-two.test");
  await dash.click("#add-domain button");
  await dash.waitForFunction(() => document.querySelector("#domains")?.textContent.includes("shop-two.test"));
  // A saved funnel: pricing, then a Purchase (seconds apart in the script above: the home page's
  // beacons may still be in flight when pricing's leaves, so their order is not the test's).
  await dash.fill("#funnel-name", "To purchase");
  await dash.fill("#funnel-steps", "/pricing*\nPurchase");
  await dash.click("#add-funnel button");
  await dash.waitForFunction(() => document.querySelector("#funnels")?.textContent.includes("/pricing* → Purchase"));
  await dash.fill("#funnel-name", "Too short");
  await dash.fill("#funnel-steps", "/only-one-step");
  await dash.click("#add-funnel button");
  await dash.waitForFunction(() => document.querySelector("#add-funnel .error")?.textContent.includes("2 to 8 steps"));
  const purchaseGoal = rows(await stats({ date_range: "day", metrics: ["visitors"], dimensions: ["event:goal"] }));
  found.settings = { key: "created", goals: Object.keys(purchaseGoal) };
  await dash.screenshot({ path: join(OUT, "settings.png"), fullPage: true });
  await dash.goto(`${TALLY}/?site=${SITE}&period=30d`);
  await dash.waitForSelector("#top-stats[data-range]");
  // The funnel panel counts what the funnel API counts: one visitor through both steps.
  await dash.waitForFunction(() => document.querySelectorAll("#funnel tr.step").length === 2);
  const funnelApi = await (await fetch(`${TALLY}/api/funnel`, { method: "POST", headers: { authorization: `Bearer ${KEY}` },
    body: JSON.stringify({ site_id: SITE, date_range: "30d", steps: [{ page: "/pricing*" }, { event: "Purchase" }] }) })).json();
  const funnelShown = await dash.locator("#funnel tr.step td:nth-child(2)").allTextContents();
  assert.deepEqual(funnelShown, funnelApi.steps.map((st) => String(st.visitors)), "the funnel panel shows the API's numbers");
  assert.deepEqual(funnelShown, ["1", "1"], `one visitor through the funnel: ${JSON.stringify(funnelApi)}`);
  assert.deepEqual(await dash.locator("#funnel td.dropoff").evaluateAll((tds) => tds.map((td) => td.dataset.dropoff)),
    funnelApi.steps.map((st) => String(st.dropoff)), "the drop-off per step");
  found.funnel = funnelApi.steps;
  // Journeys through /pricing: the journeys API's pages before and after it.
  await dash.waitForSelector("#journey-page option", { state: "attached" });
  await dash.selectOption("#journey-page", "/pricing");
  const jApi = await (await fetch(`${TALLY}/api/journeys`, { method: "POST", headers: { authorization: `Bearer ${KEY}` },
    body: JSON.stringify({ site_id: SITE, date_range: "30d", page: "/pricing" }) })).json();
  assert.ok(jApi.before.length >= 1 && jApi.after.length >= 1, JSON.stringify(jApi));
  const shownRows = (id) => dash.locator(`#${id} tr[data-value]`).evaluateAll((trs) => trs.map((tr) => [tr.dataset.value, tr.lastChild.textContent]));
  await dash.waitForFunction((want) => JSON.stringify([...document.querySelectorAll("#journey-after tr[data-value]")].map((tr) => [tr.dataset.value, tr.lastChild.textContent])) === want,
    JSON.stringify(jApi.after.map((r) => [r.page, String(r.visitors)])));
  assert.deepEqual(await shownRows("journey-before"), jApi.before.map((r) => [r.page, String(r.visitors)]), "came from");
  assert.match(dash.url(), /journey=%2Fpricing/);
  found.journeys = jApi;
  // Under a segment, the funnel, the realtime panel and every panel count the visits it selects.
  const segment = [["is", "segment", [segs[0].segment_id]]];
  await dash.selectOption("#segment-pick", segs[0].segment_id);
  await dash.waitForSelector('#filters .chip[data-dimension="segment"]');
  const funnelSeg = await (await fetch(`${TALLY}/api/funnel`, { method: "POST", headers: { authorization: `Bearer ${KEY}` },
    body: JSON.stringify({ site_id: SITE, date_range: "30d", steps: [{ page: "/pricing*" }, { event: "Purchase" }], filters: segment }) })).json();
  await dash.waitForFunction((want) => JSON.stringify([...document.querySelectorAll("#funnel tr.step td:nth-child(2)")].map((td) => td.textContent)) === want,
    JSON.stringify(funnelSeg.steps.map((st) => String(st.visitors))));
  // The current visitors are those of the last five minutes, so a minute's end can change them
  // between the API's answer and the panel's: compared again until both read the same minute
  // (the panel refreshes every 10 s).
  await until("the realtime panel counts the segment's current visitors", async () => {
    const want = (await get(`/api/realtime?site_id=${SITE}&filters=${encodeURIComponent(JSON.stringify(segment))}`)).current_visitors;
    const shown = await dash.evaluate(() => document.querySelector("#rt-current")?.textContent ?? null);
    return { ok: shown === String(want), want, shown };
  }, 40000);
  const sourcesSeg = rows(await stats({ date_range: [from, to], metrics: ["visitors"], dimensions: ["visit:source"], filters: segment }));
  await dash.waitForSelector('[data-panel="sources"] tr.row');
  for (const [value, [n]] of Object.entries(sourcesSeg)) {
    assert.equal((await dash.textContent(`[data-panel="sources"] tr.row[data-value="${value}"] td:nth-child(2)`)).trim(), String(n), `source ${value}`);
  }
  // Exports: a panel's CSV and the whole dashboard's zip are the export API's for the same range
  // and filters (the segment's).
  const exported = async (panel) => {
    const r = await fetch(`${TALLY}/api/export`, { method: "POST", headers: { authorization: `Bearer ${KEY}` },
      body: JSON.stringify({ site_id: SITE, date_range: "30d", filters: segment, panel }) });
    assert.equal(r.status, 200);
    return Buffer.from(await r.arrayBuffer());
  };
  const [pagesCsv] = await Promise.all([dash.waitForEvent("download"), dash.click('[data-panel="pages"] button.export')]);
  assert.match(pagesCsv.suggestedFilename(), /^tally-shop\.test-.*-pages\.csv$/);
  assert.equal(readFileSync(await pagesCsv.path(), "utf8"), (await exported("pages")).toString("utf8"), "the pages CSV");
  const [zipped] = await Promise.all([dash.waitForEvent("download"), dash.click("#export-all")]);
  assert.match(zipped.suggestedFilename(), /\.zip$/);
  const zipBytes = readFileSync(await zipped.path());
  assert.equal(zipBytes.subarray(0, 2).toString("latin1"), "PK", "a zip");
  assert.ok(zipBytes.includes(Buffer.from("visitors.csv")) && zipBytes.includes(await exported("sources")), "the zip holds the sources CSV");
  found.export = { pages: readFileSync(await pagesCsv.path(), "utf8"), zip_bytes: zipBytes.length };
  await dash.click("#segment-delete");
  await dash.waitForFunction(() => !document.querySelector('#filters .chip[data-dimension="segment"]'));
  assert.deepEqual((await get(`/api/sites/${SITE}/segments`)).segments, [], "the segment is deleted");

  // Custom properties: the key picker lists the keys the site's events carry; a key's values are
  // the Stats API's breakdown.
  const keysApi = (await (await fetch(`${TALLY}/api/properties`, { method: "POST", headers: { authorization: `Bearer ${KEY}` },
    body: JSON.stringify({ site_id: SITE, date_range: "30d" }) })).json()).keys.map((k) => k.key);
  assert.ok(keysApi.includes("via") && keysApi.includes("plan"), `the trackers' properties: ${keysApi}`);
  assert.notEqual(keysApi[0], "via", `the panel opens on another key than via: ${keysApi}`);
  // The breakdown of the key the panel opens on is held back until via's is shown: a late answer
  // for a key no longer picked must not replace the picked key's rows.
  let releaseFirst;
  const firstHeld = new Promise((resolve) => { releaseFirst = resolve; });
  const firstKey = `"event:props:${keysApi[0]}"`;
  await dash.route("**/api/v2/query", async (route) => {
    if ((route.request().postData() || "").includes(firstKey)) await firstHeld;
    await route.continue();
  });
  await dash.click('[data-panel="events"] [data-tab="props"]');
  await dash.waitForFunction((n) => document.querySelectorAll("#prop-key option").length === n, keysApi.length);
  assert.deepEqual(await dash.locator("#prop-key option").allTextContents(), keysApi);
  // Counts the query answers the page has read, so the test knows when the held one was handled.
  await dash.evaluate(() => {
    const json = Response.prototype.json;
    window.tallyQueriesRead = 0;
    Response.prototype.json = async function () {
      const value = await json.call(this);
      if (this.url.endsWith("/api/v2/query")) window.tallyQueriesRead += 1;
      return value;
    };
  });
  await dash.selectOption("#prop-key", "via");
  await dash.waitForSelector('[data-panel="events"] table[data-dimension="event:props:via"]');
  const readBefore = await dash.evaluate(() => window.tallyQueriesRead);
  releaseFirst();
  await dash.waitForFunction((n) => window.tallyQueriesRead > n, readBefore);
  await dash.evaluate(() => new Promise((resolve) => setTimeout(resolve, 0)));
  await dash.unroute("**/api/v2/query");
  const via = rows(await stats({ date_range: "30d", metrics: ["visitors", "events"], dimensions: ["event:props:via"] }));
  assert.equal(await dash.locator('[data-panel="events"] table[data-dimension="event:props:via"]').count(), 1, "the picked key's rows stay");
  assert.deepEqual(await dash.locator('[data-panel="events"] tr.row').evaluateAll((trs) => trs.map((tr) => tr.dataset.value)), Object.keys(via));
  found.properties = { keys: keysApi, via };

  // Realtime: every panel over the last 30 minutes (the script's visits), as the Stats API's `30m`.
  await dash.selectOption("#range", "realtime");
  await dash.waitForSelector('#top-stats[data-range="30m"]');
  assert.match(dash.url(), /period=realtime/);
  const rtTop = (await stats({ date_range: "30m", metrics: ["visitors", "visits", "pageviews"] })).results[0].metrics;
  assert.ok(rtTop[2] >= 4, `the script's page views are in the last 30 minutes: ${rtTop}`);
  await dash.waitForFunction((v) => document.querySelector("#stat-pageviews .value")?.textContent.trim() === v, String(rtTop[2]));
  assert.equal((await dash.textContent("#stat-visitors .value")).trim(), String(rtTop[0]), "visitors in the last 30 minutes");
  await dash.waitForSelector('#chart[aria-label="pageviews by minute"][data-points="30"]');
  const rtPages = rows(await stats({ date_range: "30m", metrics: ["visitors", "pageviews"], dimensions: ["event:page"] }));
  await dash.waitForFunction((n) => document.querySelectorAll('[data-panel="pages"] tr.row').length === n, Math.min(10, Object.keys(rtPages).length));
  for (const [page, [, pv]] of Object.entries(rtPages).slice(0, 10)) {
    assert.equal((await dash.textContent(`[data-panel="pages"] tr.row[data-value="${page}"] td:nth-child(3)`)).trim(), String(pv), `page views of ${page}`);
  }
  const rtDevices = rows(await stats({ date_range: "30m", metrics: ["visitors"], dimensions: ["visit:device"] }));
  for (const [device, [n]] of Object.entries(rtDevices)) {
    await dash.waitForSelector(`[data-panel="devices"] tr.row[data-value="${device}"]`);
    assert.equal((await dash.textContent(`[data-panel="devices"] tr.row[data-value="${device}"] td:nth-child(2)`)).trim(), String(n), device);
  }
  assert.equal(await dash.locator("#funnel").count(), 0, "no funnel in realtime");
  found.realtime = { top: rtTop, pages: rtPages };
  await dash.setViewportSize({ width: 390, height: 844 });
  await dash.waitForTimeout(300);
  const overflow = await dash.evaluate(() => document.documentElement.scrollWidth - window.innerWidth);
  assert.ok(overflow <= 1, `the phone-sized page scrolls sideways by ${overflow}px`);
  await dash.screenshot({ path: join(OUT, "dashboard-phone.png"), fullPage: true });
  assert.deepEqual(pageErrors, [], "the dashboard threw");
  await desk.close();

  // ---- 3. a shared link, and a stranger ----
  const guest = await browser.newContext();
  const shared = await guest.newPage();
  await shared.goto(`${TALLY}${env("TALLY_SHARE_PATH")}?period=day`);
  await shared.waitForSelector("#top-stats[data-range]");
  const today = (await stats({ date_range: "day", metrics: ["visitors"] })).results[0].metrics;
  assert.equal((await shared.textContent("#stat-visitors .value")).trim(), String(today[0]), "visitors on the shared link");
  assert.equal(await shared.locator("#settings-link").count(), 0, "a shared link has no settings");
  assert.equal(await shared.locator("#sessions").count(), 0, "a shared link shows no visitor's sessions");
  // The site's saved funnel, over the link's range: the funnel API's numbers.
  await shared.waitForFunction(() => document.querySelectorAll("#funnel tr.step").length === 2);
  const funnelToday = await (await fetch(`${TALLY}/api/funnel`, { method: "POST", headers: { authorization: `Bearer ${KEY}` },
    body: JSON.stringify({ site_id: SITE, date_range: "day", steps: [{ page: "/pricing*" }, { event: "Purchase" }] }) })).json();
  assert.deepEqual(await shared.locator("#funnel tr.step td:nth-child(2)").allTextContents(), funnelToday.steps.map((st) => String(st.visitors)));
  // Today by hour, filtered by a dimension without stored hour items: read from the raw events.
  await shared.goto(`${TALLY}${env("TALLY_SHARE_PATH")}?period=day&interval=hour&f=is%7Cvisit%3Adevice%7CDesktop`);
  await shared.waitForSelector("#chart path.line");
  assert.equal(await shared.inputValue("#interval"), "hour", "hourly under any filter");
  const hourly = (await stats({ date_range: "day", metrics: ["visitors"], dimensions: ["time:hour"], filters: [["is", "visit:device", ["Desktop"]]] })).results;
  // The site page's visitor and Umami's page's (another address) are both on a desktop.
  assert.ok(hourly.length >= 1 && hourly.every((r) => r.metrics[0] >= 1 && r.metrics[0] <= 2) && hourly.reduce((n, r) => n + r.metrics[0], 0) >= 2,
    `the two Desktop visitors in the hours they came: ${JSON.stringify(hourly)}`);
  // Embedding: another site frames the embeddable link (dark) and cannot frame the other one.
  const host = await guest.newPage();
  const embedUrl = `${embedLink}?embed=true&theme=dark&period=day`;
  const refusedUrl = TALLY + env("TALLY_SHARE_PATH");
  const refusedAnswer = host.waitForResponse((r) => r.url() === refusedUrl);
  await host.goto(`http://127.0.0.1:${port}/embed.html?a=${encodeURIComponent(embedUrl)}&b=${encodeURIComponent(refusedUrl)}`);
  const framed = host.frameLocator("#embedded");
  await framed.locator("#top-stats[data-range]").waitFor();
  assert.equal((await framed.locator("#stat-visitors .value").textContent()).trim(), String(today[0]), "visitors in the embedded dashboard");
  const dark = await framed.locator("html").evaluate((el) => [el.className, getComputedStyle(el).backgroundColor]);
  assert.ok(dark[0].includes("dark") && dark[1] === "rgb(15, 17, 21)", `the dark theme: ${dark}`);
  assert.equal(await framed.locator(".brand").isVisible(), false, "no brand in an embed");
  // The other link's page forbids framing, and the browser shows its error page in its place.
  const refusedHeaders = await (await refusedAnswer).allHeaders();
  assert.ok(/frame-ancestors 'none'/.test(refusedHeaders["content-security-policy"] || "") || /^deny$/i.test(refusedHeaders["x-frame-options"] || ""),
    `the page not made embeddable forbids framing: ${JSON.stringify(refusedHeaders)}`);
  const refusedFrame = await (await host.$("#refused")).contentFrame();
  await until("the refused frame shows the browser's error page", async () => ({ ok: refusedFrame.url().startsWith("chrome-error:"), url: refusedFrame.url() }));
  assert.equal(await host.frameLocator("#refused").locator("#top-stats").count(), 0, "a link not made embeddable is not framed");
  await host.screenshot({ path: join(OUT, "embedded.png") });
  const stranger = await guest.newPage();
  await stranger.goto(`${TALLY}/settings`);
  await stranger.waitForSelector("form#login");
  await guest.close();
  found.screenshot = shot;
  console.log(JSON.stringify(found));
} finally {
  await browser.close();
  pages.close();
}
