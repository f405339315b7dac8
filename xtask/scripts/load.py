# Load for `serve-memory.sh`: CONNECTIONS keep-alive connections post Plausible page views to
# 127.0.0.1:PORT for SECONDS, each from a random client address (X-Forwarded-For), so every event
# is a new visitor. Usage: python3 load.py PORT CONNECTIONS SECONDS [USER_AGENTS_FILE]
# With a file of User-Agents (one a line), each request takes a random one of them instead of the
# three below, as a site's varied traffic does.
import http.client, json, random, sys, threading, time
port = int(sys.argv[1]); conns = int(sys.argv[2]); secs = float(sys.argv[3])
paths = ["/", "/pricing", "/blog/a", "/blog/b", "/docs", "/about", "/signup"]
refs = ["", "https://www.google.com/", "https://news.ycombinator.com/", "https://twitter.com/x"]
uas = ["Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/120.0.0.0 Safari/537.36",
       "Mozilla/5.0 (Macintosh; Intel Mac OS X 14_1) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/17.1 Safari/605.1.15",
       "Mozilla/5.0 (iPhone; CPU iPhone OS 17_1 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/17.1 Mobile/15E148 Safari/604.1"]
if len(sys.argv) > 4:
    uas = [l.strip() for l in open(sys.argv[4], encoding="utf-8", errors="replace") if l.strip().isascii() and l.strip()]
count = [0]; stop = time.time() + secs
def run():
    c = http.client.HTTPConnection("127.0.0.1", port)
    n = 0
    while time.time() < stop:
        body = json.dumps({"n": "pageview", "u": "https://example.com" + random.choice(paths), "d": "example.com", "r": random.choice(refs)})
        ip = "%d.%d.%d.%d" % (random.randint(1, 223), random.randint(0, 255), random.randint(0, 255), random.randint(1, 254))
        c.request("POST", "/api/event", body, {"Content-Type": "text/plain", "User-Agent": random.choice(uas), "X-Forwarded-For": ip})
        r = c.getresponse(); r.read()
        n += 1
    count[0] += n
ts = [threading.Thread(target=run) for _ in range(conns)]
[t.start() for t in ts]; [t.join() for t in ts]
print("requests", count[0], "per s", count[0] / secs)
