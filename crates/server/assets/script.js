/* Tally's tracker; its options are documented in docs/tracker.md. */
(function (w, d) {
  var l = w.location, s = d.currentScript, a = function (n) { return s && s.getAttribute(n) }, has = function (n) { return a(n) !== null };
  var api = a("data-api") || (s ? new URL(s.src).origin + "/api/event" : "/api/event");
  var dom = a("data-domain") || l.hostname, hash = has("data-hash"), manual = has("data-manual"), forms = has("data-forms");
  var types = "pdf,zip,gz,tgz,dmg,exe,msi,pkg,deb,rpm,apk,csv,xlsx,docx,pptx,txt,mp3,mp4,mov,avi,7z,rar,iso".split(",")
    .concat((a("data-file-types") || "").split(",")).filter(Boolean);
  // Excluded paths: comma-separated globs, `*` within one path segment, `**` across segments.
  var ex = (a("data-exclude") || "").split(",").map(function (g) {
    g = g.trim();
    return g && new RegExp("^" + g.replace(/[.+?^${}()|[\]\\]/g, "\\$&").replace(/\*\*?/g, function (m) { return m[1] ? ".*" : "[^/]*" }) + "$");
  }).filter(Boolean);
  var last, href, start = Date.now(), shown = 0, depth = 0, sent = 0;
  function skip(u) {
    try { if (w.localStorage.tally_ignore === "true") return 1 } catch (e) {}
    var p = new URL(u, l.href).pathname;
    return ex.some(function (r) { return r.test(p) }) ||
      !has("data-allow-localhost") && (/^(localhost|127\.|\[::1\])/.test(l.hostname) || l.protocol === "file:");
  }
  function send(n, o) {
    o = o || {};
    var b = { n: n, u: o.u || l.href, d: dom, r: d.referrer || null, w: w.innerWidth };
    if (skip(b.u)) return;
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
    if (manual || p === last) return;
    engaged();
    last = p; href = l.href; sent = 0; depth = 0; start = Date.now(); shown = d.visibilityState !== "hidden";
    scroll();
    send("pageview");
  }
  function scroll() {
    var h = d.documentElement, b = d.body, t = Math.max(h.scrollHeight, b ? b.scrollHeight : 0) || 1;
    depth = Math.max(depth, Math.min(100, Math.round(((w.scrollY || 0) + w.innerHeight) / t * 100)));
  }
  // A tagged element, its own or an ancestor: [name, props, element] from the classes
  // tally-event-name=N and tally-event-KEY=VALUE (`+` for a space) or the attributes
  // data-tally-event="N" and data-tally-event-KEY="VALUE".
  function tag(e) {
    for (; e && e.getAttribute; e = e.parentNode) {
      var n = e.getAttribute("data-tally-event"), p = {}, k = 0;
      (e.getAttribute("class") || "").split(/\s+/).forEach(function (c) {
        c = c.match(/^tally-event-(.+?)=(.+)$/);
        if (c) { c[2] = c[2].replace(/\+/g, " "); if (c[1] == "name") n = c[2]; else p[c[1]] = c[2], k = 1 }
      });
      [].forEach.call(e.attributes, function (t) {
        t = t.name.match(/^data-tally-event-(.+)$/);
        if (t) p[t[1]] = e.getAttribute(t[0]), k = 1;
      });
      if (n) return [n, k ? p : null, e];
    }
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
    var g = tag(e.target), t = e.target && e.target.closest && e.target.closest("a[href]");
    if (g && g[2].tagName != "FORM") send(g[0], { props: g[1] });
    if (!t) return;
    var u = new URL(t.href, l.href), ext = u.pathname.split(".").pop().toLowerCase();
    if (u.pathname.indexOf(".") > 0 && types.indexOf(ext) >= 0) send("File Download", { props: { url: u.href } });
    else if (u.host !== l.host && /^https?:$/.test(u.protocol)) send("Outbound Link: Click", { props: { url: u.href } });
  }, true);
  // A tagged form sends its event when submitted; with data-forms, any other form sends "Form: Submission".
  d.addEventListener("submit", function (e) {
    var f = e.target, g = tag(f), i = f.getAttribute("id") || f.getAttribute("name");
    if (g && g[2] == f) send(g[0], { props: g[1] });
    else if (forms) send("Form: Submission", { props: i ? { form: i } : null });
  }, true);
  var q = (w.tally && w.tally.q) || [];
  // tally("404") marks a page not found, with its path; tally("pageview", {u}) is a manual page view.
  w.tally = function (n, o) {
    o = o || {};
    if (n == "404" && !o.props) o.props = { path: l.pathname };
    send(n, o);
  };
  q.forEach(function (c) { w.tally(c[0], c[1]) });
  page();
  if (d.querySelector("[data-tally-404]")) w.tally("404");
})(window, document);
