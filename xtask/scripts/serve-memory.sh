#!/usr/bin/env bash
# Resident memory of `tally serve` under sustained ingestion (BENCHMARKS.md, "Server memory").
# Usage: xtask/scripts/serve-memory.sh [TALLY_BINARY] [SECONDS] [USER_AGENTS_FILE]
# Starts the server on a fresh embedded store in a temporary directory, posts events over 64
# keep-alive connections with `tally bench --against` (a new visitor a request), and prints VmRSS
# every 10 s and VmHWM at the end. With a file of User-Agents (one a line), the load sends random
# ones of them rather than three. LOAD=python posts from four `load.py` processes instead (16
# connections each), the load of the figures before the fourteenth session: Python's clients
# took most of two cores and held the server near 2 k requests/s.
set -euo pipefail
bin=${1:-target/release/tally}
secs=${2:-120}
ua_file=${3:-}
here=$(cd "$(dirname "$0")" && pwd)
dir=$(mktemp -d)
trap 'kill "$pid" 2>/dev/null || true; rm -rf "$dir"' EXIT
"$bin" site add example.com --store "$dir/data" >/dev/null
"$bin" serve --store "$dir/data" --listen 127.0.0.1:18123 --trusted-proxy 127.0.0.1/32 --log-level warn \
  >"$dir/serve.log" 2>&1 &
pid=$!
sleep 1
echo "idle: $(grep VmRSS /proc/$pid/status)"
loads=()
if [ "${LOAD:-}" = python ]; then
  for n in 1 2 3 4; do
    python3 "$here/load.py" 18123 16 "$secs" ${ua_file:+"$ua_file"} >"$dir/load$n" &
    loads+=($!)
  done
else
  "$bin" bench --against 127.0.0.1:18123 --seconds "$secs" --concurrency 64 ${ua_file:+--user-agents "$ua_file"} \
    >"$dir/load1" 2>&1 &
  loads+=($!)
fi
for i in $(seq 1 $((secs / 10))); do
  sleep 10
  echo "$((i * 10)) s: $(grep VmRSS /proc/$pid/status)"
done
status=0
for l in "${loads[@]}"; do wait "$l" || status=$?; done
echo "peak: $(grep VmHWM /proc/$pid/status)"
cat "$dir"/load?
exit "$status"
