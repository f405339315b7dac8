/* Tally's tracker: page views, SPA navigation, custom events, outbound links, file downloads and
   engagement, posted as text/plain beacons to /api/event in the Plausible Events API shape.
   No cookies, no stored identifiers. Install:
   <script defer data-domain="example.com" src="https://tally.example/js/script.js"></script>
   <script>window.tally=window.tally||function(){(tally.q=tally.q||[]).push(arguments)}</script>
   Options on the script tag: data-api, data-hash (hash routing), data-file-types (extra
   download extensions, comma separated), data-allow-localhost. Opt out on a browser with
   localStorage.tally_ignore = "true". */
(function (w, d) {
  var l = w.location, s = d.currentScript, a = function (n) { return s && s.getAttribute(n) };
  var api = a("data-api") || (s ? new URL(s.src).origin + "/api/event" : "/api/event");
  var dom = a("data-domain") || l.hostname, hash = a("data-hash") !== null;
  var types = "pdf,zip,gz,tgz,dmg,exe,msi,pkg,deb,rpm,apk,csv,xlsx,docx,pptx,txt,mp3,mp4,mov,avi,7z,rar,iso".split(",")
    .concat((a("data-file-types") || "").split(",")).filter(Boolean);
  var last, href, start = Date.now(), shown = 0, depth = 0, sent = 0;
  function skip() {
    try { if (w.localStorage.tally_ignore === "true") return 1 } catch (e) {}
    return a("data-allow-localhost") === null && (/^(localhost|127\.|\[::1\])/.test(l.hostname) || l.protocol === "file:");
  }
  function send(n, o) {
    if (skip()) return;
    o = o || {};
    var b = { n: n, u: o.u || l.href, d: dom, r: d.referrer || null, w: w.innerWidth };
    if (hash) b.h = 1;
    if (o.props) b.p = o.props;
    if (o.revenue) b.$ = o.revenue;
    if (o.i === false) b.i = false;
    b = JSON.stringify(b);
    if (!(navigator.sendBeacon && navigator.sendBeacon(api, new Blob([b], { type: "text/plain" }))))
      fetch(api, { method: "POST", body: b, keepalive: true, headers: { "Content-Type": "text/plain" } });
  }
  function engaged() {
    var t = shown ? Date.now() - start : 0;
    if (last && !sent && (t > 0 || depth > 0)) {
      sent = 1;
      send("engagement", { i: false, u: href, props: { scroll_depth: String(depth), engaged_ms: String(t) } });
    }
  }
  function page() {
    var p = l.pathname + (hash ? l.hash : "");
    if (p === last) return;
    engaged();
    last = p; href = l.href; sent = 0; depth = 0; start = Date.now(); shown = d.visibilityState !== "hidden";
    scroll();
    send("pageview");
  }
  function scroll() {
    var h = d.documentElement, b = d.body, t = Math.max(h.scrollHeight, b ? b.scrollHeight : 0) || 1;
    depth = Math.max(depth, Math.min(100, Math.round(((w.scrollY || 0) + w.innerHeight) / t * 100)));
  }
  var hs = w.history;
  ["pushState", "replaceState"].forEach(function (m) {
    var o = hs[m];
    if (o) hs[m] = function () { var r = o.apply(this, arguments); page(); return r };
  });
  w.addEventListener("popstate", page);
  if (hash) w.addEventListener("hashchange", page);
  w.addEventListener("scroll", scroll, { passive: true });
  d.addEventListener("visibilitychange", function () {
    if (d.visibilityState === "hidden") engaged(); else { shown = 1; start = Date.now(); sent = 0 }
  });
  w.addEventListener("pagehide", engaged);
  d.addEventListener("click", function (e) {
    var t = e.target && e.target.closest && e.target.closest("a[href]");
    if (!t) return;
    var u = new URL(t.href, l.href), ext = u.pathname.split(".").pop().toLowerCase();
    if (u.pathname.indexOf(".") > 0 && types.indexOf(ext) >= 0) send("File Download", { props: { url: u.href } });
    else if (u.host !== l.host && /^https?:$/.test(u.protocol)) send("Outbound Link: Click", { props: { url: u.href } });
  }, true);
  var q = (w.tally && w.tally.q) || [];
  w.tally = function (n, o) { send(n, o) };
  q.forEach(function (c) { send(c[0], c[1]) });
  page();
})(window, document);
