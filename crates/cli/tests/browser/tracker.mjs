// The tracker's extensions in headless Chromium, driven by `tests/it/browser.rs`: tagged events
// (classes and data attributes), form submissions, 404 pages, excluded paths and the manual
// page-view mode, each checked against the events a running `tally serve` stored (its sessions
// API), not against what the browser says it sent: the stored events must be exactly the
// expected ones, nothing more.
//
// Environment: TALLY_URL, TALLY_KEY, TALLY_SITE, TALLY_METRICS_TOKEN, TALLY_CHROMIUM,
// TALLY_NODE_MODULES. Prints one JSON line of findings; a failed check throws.
import { createServer } from "node:http";
import { createRequire } from "node:module";
import { join } from "node:path";
import assert from "node:assert/strict";

const env = (name) => { const v = process.env[name]; if (!v) throw new Error(`${name} is not set`); return v; };
const TALLY = env("TALLY_URL"), KEY = env("TALLY_KEY"), SITE = env("TALLY_SITE"), METRICS_TOKEN = env("TALLY_METRICS_TOKEN");
const require = createRequire(join(env("TALLY_NODE_MODULES"), "noop.js"));
const { chromium } = require("playwright-core");
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
// A desktop Chrome: headless Chromium's own User-Agent is dropped as a bot.
const UA = "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/131.0.0.0 Safari/537.36";

const tracker = (extra) => `<script>window.tally=window.tally||function(){(tally.q=tally.q||[]).push(arguments)}</script>
<script defer data-domain="${SITE}" data-exclude="/admin/*, /private/**" ${extra} src="${TALLY}/js/script.js"></script>`;
const page = (head, body) => `<!doctype html><html><head><meta charset="utf-8">${head}</head>${body}</html>`;
const pages = {
  // Tagged elements and forms, with form submissions on.
  "/tagged": page(tracker("data-forms"), `<body>
<button id="class-tag" class="big tally-event-name=Signup tally-event-plan=pro+yearly">Sign up</button>
<a id="attr-tag" href="#pricing" data-tally-event="CTA" data-tally-event-place="header"><span id="inner">Pricing</span></a>
<button id="untagged">Nothing</button>
<form id="news" class="tally-event-name=Newsletter" onsubmit="event.preventDefault()"><input name="email"><button id="news-send">Send</button></form>
<form id="contact" onsubmit="event.preventDefault()"><button id="contact-send">Send</button></form></body>`),
  // Without data-forms an untagged form sends nothing.
  "/plain-form": page(tracker(""), `<body><form id="quiet" onsubmit="event.preventDefault()"><button id="quiet-send">Send</button></form></body>`),
  // A page not found, said by an attribute, and one said by a call.
  "/missing": page(tracker(""), `<body data-tally-404><h1>Not found</h1></body>`),
  "/gone": page(tracker("") + `<script>tally("404")</script>`, `<body><h1>Gone</h1></body>`),
  // Excluded by `/admin/*` and `/private/**`: nothing at all, not even a custom event; `/admin`
  // itself and `/admin/users/edit` (two segments) are not matched by `/admin/*`.
  "/admin/users": page(tracker("") + `<script>tally("Secret")</script>`, `<body><button id="t" class="tally-event-name=Hidden">x</button></body>`),
  "/private/a/b": page(tracker(""), `<body>private</body>`),
  "/admin": page(tracker(""), `<body>admin home</body>`),
  "/admin/users/edit": page(tracker(""), `<body>edit</body>`),
  // Manual mode: no page view on load nor on pushState; the page sends its own, with a redacted URL.
  "/app/42": page(tracker("data-manual"), `<body>
<button id="nav" onclick="history.pushState({}, '', '/app/43')">Next</button>
<button id="view" onclick="tally('pageview', {u: location.origin + '/app/:id'})">View</button></body>`),
};
const server = createServer((req, res) => {
  const body = pages[new URL(req.url, "http://x").pathname];
  res.writeHead(body ? 200 : 404, { "content-type": "text/html; charset=utf-8" });
  res.end(body || "no such page");
});
await new Promise((r) => server.listen(0, "127.0.0.1", r));
const port = server.address().port;
const origin = `http://ext.test:${port}`;

const browser = await chromium.launch({
  executablePath: env("TALLY_CHROMIUM"),
  args: ["--no-sandbox", "--disable-dev-shm-usage", `--user-agent=${UA}`, "--host-resolver-rules=MAP ext.test 127.0.0.1"],
});
const get = async (path) => {
  const r = await fetch(`${TALLY}${path}`, { headers: { authorization: `Bearer ${KEY}` } });
  if (!r.ok) throw new Error(`${path}: ${r.status} ${await r.text()}`);
  return r.json();
};
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
async function settled() {
  return until("every acknowledged event is flushed", async () => {
    const text = await (await fetch(`${TALLY}/metrics`, { headers: { authorization: `Bearer ${METRICS_TOKEN}` } })).text();
    const m = text.match(/^tally_pending_events (\S+)$/m);
    return { ok: !!m && Number(m[1]) === 0, pending: m?.[1] };
  });
}
// Every event the server stored for the site, as "name path {props}" lines, sorted; engagement
// events (sent whenever a page is left) are kept apart.
async function stored() {
  const lines = [], engagement = [];
  for (const s of (await get(`/api/sessions?site_id=${SITE}&limit=100`)).sessions) {
    for (const e of (await get(`/api/sessions/${s.session}?site_id=${SITE}`)).events || []) {
      const props = Object.fromEntries(Array.isArray(e.props) ? e.props : Object.entries(e.props || {}));
      const line = `${e.name} ${e.path}${Object.keys(props).length ? " " + JSON.stringify(props) : ""}`;
      (e.name === "engagement" ? engagement : lines).push(line);
    }
  }
  return { lines: lines.sort(), engagement };
}

const found = {};
let sent = 0, answered = 0;
// The script reads "today" (UTC, the site's zone) in many places, and the server dates each event
// when it takes it: started this close to midnight, it waits for the next day, so all of its
// events and reads fall on one day.
{
  const now = Date.now();
  const midnight = new Date(now).setUTCHours(24, 0, 0, 0);
  if (midnight - now < 8 * 60_000) await sleep(midnight - now + 5000);
}

try {
  const context = await browser.newContext();
  context.on("request", (r) => { if (r.url().startsWith(`${TALLY}/api/event`)) sent++; });
  // Answered or failed: closing the context aborts a beacon still in flight.
  const settle = (r) => { if (r.url().startsWith(`${TALLY}/api/event`)) answered++; };
  context.on("requestfinished", settle);
  context.on("requestfailed", settle);
  const tab = await context.newPage();
  const visit = async (path) => { await tab.goto(origin + path); await tab.waitForFunction(() => typeof window.tally === "function" && !window.tally.q); };

  await visit("/tagged");
  await tab.click("#class-tag");
  await tab.click("#inner");
  await tab.click("#untagged");
  await tab.click("#news-send");
  await tab.click("#contact-send");
  await visit("/plain-form");
  await tab.click("#quiet-send");
  await visit("/missing");
  await visit("/gone");
  await visit("/admin/users");
  await tab.click("#t");
  await visit("/private/a/b");
  await visit("/admin");
  await visit("/admin/users/edit");
  await visit("/app/42");
  await tab.click("#nav");
  await tab.click("#view");
  // The server answers once an event is durable, which a loaded machine may take a while to do.
  await until("every tracker request is answered", async () => ({ ok: answered >= sent, sent, answered }));
  await tab.goto("about:blank");
  await context.close();

  const expected = [
    "pageview /tagged",
    'Signup /tagged {"plan":"pro yearly"}',
    'CTA /tagged {"place":"header"}',
    "Newsletter /tagged",
    'Form: Submission /tagged {"form":"contact"}',
    "pageview /plain-form",
    "pageview /missing",
    '404 /missing {"path":"/missing"}',
    "pageview /gone",
    '404 /gone {"path":"/gone"}',
    "pageview /admin",
    "pageview /admin/users/edit",
    "pageview /app/:id",
  ].sort();
  const seen = await until("the server stores every expected event", async () => {
    const s = await stored();
    return { ok: expected.every((x) => s.lines.includes(x)), ...s };
  });
  // Anything more would have been sent by now: wait for the flush, then compare exactly.
  await sleep(1500);
  await settled();
  const last = await stored();
  assert.deepEqual(last.lines, expected, "the events stored are exactly the expected ones");
  for (const e of last.engagement) {
    assert.ok(!/ \/(admin\/users|private\/a\/b|app\/42|app\/43)( |$)/.test(e), `no engagement from an excluded or manual page: ${e}`);
  }
  found.stored = last.lines;
  found.engagement = last.engagement;
  found.tracker_requests = sent;
  void seen;
} finally {
  await browser.close();
  server.close();
}
console.log(JSON.stringify(found));
