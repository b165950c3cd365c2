#!/usr/bin/env bash
# Soak run: is hookwall's memory flat over millions of events? (issue 6: "RSS flat over 10 M
# events"). One hookwall (sync = true, 1 core, 1 shard) forwards unique signed Stripe events to
# a local nginx; `hookwall loadgen` sends them closed-loop in STEPS segments of STEP_EVENTS
# requests; after each segment the script records hookwall's resident set (VmRSS), its peak
# (VmHWM), the inbox backlog, the ledger's size on disk and the segment's rate. Payloads and
# identities expire quickly (payload_retention 60 s, dedupe_retention 120 s), so the run also
# exercises the retention sweep the way a long-running appliance does. Traffic goes to
# 127.0.0.1 only; every segment is bounded by its request count and by SEGMENT_TIMEOUT_S.
#
# Usage: benches/soak.sh [RESULTS_DIR]           (default: bench-results/soak-<UTC time>)
#        installs Debian's nginx when it is missing (its system service is not used).
# Environment: STEPS (default 10), STEP_EVENTS (default 1000000), CONNECTIONS (default 64),
#              SEGMENT_TIMEOUT_S (default 1800), CARGO_TARGET_DIR (default target),
#              WORK_DIR (ledger etc.; must not be tmpfs).
set -euo pipefail
cd "$(dirname "$0")/.."
case "${1:-}" in
  -h|--help) sed -n '2,18p' "$0" | cut -c3-; exit 0 ;;
  -*) echo "usage: benches/soak.sh [RESULTS_DIR]  (see --help)" >&2; exit 2 ;;
esac

STEPS="${STEPS:-10}"
STEP_EVENTS="${STEP_EVENTS:-1000000}"
CONNECTIONS="${CONNECTIONS:-64}"
SEGMENT_TIMEOUT_S="${SEGMENT_TIMEOUT_S:-1800}"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-target}"
results="${1:-bench-results/soak-$(date -u +%Y%m%dT%H%M%SZ)}"
mkdir -p "$results"
results="$(cd "$results" && pwd)"
work="$(mktemp -d "${WORK_DIR:-${TMPDIR:-/tmp}}/hookwall-soak.XXXXXX")"
log() { printf '%s\n' "$*" >&2; }
# shellcheck source=benches/common.sh
. benches/common.sh

pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
  rm -rf "$work"
}
trap cleanup EXIT

warn_if_tmpfs "$work"

ensure_nginx

log "== building hookwall (release)"
cargo build --release --bin hookwall -q
HOOKWALL="$CARGO_TARGET_DIR/release/hookwall"

ncpu="$(nproc)"
if [ "$ncpu" -ge 2 ]; then
  server_pin=(taskset -c 0)
  client_pin=(taskset -c "$((ncpu - 1))")
else
  server_pin=()
  client_pin=()
fi

{ read -r NGINX_PORT; read -r HW_PORT; read -r ADMIN_PORT; } < <(free_ports 3)

write_nginx_conf "$work/nginx" "$NGINX_PORT" 1 4096
"${server_pin[@]}" "$NGINX" -c "$work/nginx/nginx.conf" -p "$work/nginx" &
pids+=($!)

SECRET="whsec_soak_bench_0123456789abcdef"
printf '%s' "soak-bench-admin-token" >"$work/admin-token"
cat >"$work/hookwall.toml" <<EOF
[server]
listen = "127.0.0.1:$HW_PORT"
admin_listen = "127.0.0.1:$ADMIN_PORT"
cores = 1

[ledger]
path = "$work/ledger"
sync = true
shards = 1
payload_retention = "60s"
dedupe_retention = "120s"

[admin]
token_file = "$work/admin-token"

[[source]]
id = "stripe-soak"
tenant = "soak"
provider = "stripe"
secrets = [{ id = "k1", value = "$SECRET" }]
destination = "nginx"

[[destination]]
id = "nginx"
url = "http://127.0.0.1:$NGINX_PORT/hooks"
timeout = "5s"
concurrency_max = 64
EOF
HOOKWALL_LOG=warn "${server_pin[@]}" "$HOOKWALL" serve -c "$work/hookwall.toml" 2>"$results/hookwall.stderr" &
pids+=($!)
hw_pid=$!

ready=0
for _ in $(seq 300); do
  if [ "$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$ADMIN_PORT/readyz" || true)" = "200" ]; then ready=1; break; fi
  sleep 0.1
done
if [ "$ready" != 1 ]; then
  log "error: hookwall did not become ready within 30 s; its log: $results/hookwall.stderr"
  exit 1
fi

metric_sum() { # FAMILY: the sum of its samples on /metrics
  curl -s "http://127.0.0.1:$ADMIN_PORT/metrics" | awk -v k="$1" 'index($1, k) == 1 && ($1 == k || substr($1, length(k) + 1, 1) == "{") { s += $2 } END { print s + 0 }'
}
status_kib() { awk -v k="$1:" '$1 == k { print $2 }' "/proc/$hw_pid/status"; }

{
  echo "# hookwall soak: memory over $((STEPS * STEP_EVENTS)) events, $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo
  echo "machine: $ncpu CPUs, kernel $(uname -r); hookwall on CPU 0 (1 core, 1 shard, sync = true), loadgen on CPU $((ncpu - 1)); payload_retention 60 s, dedupe_retention 120 s"
  echo
  echo "| events sent | accepted/s (segment) | RSS MiB | peak RSS MiB | inbox pending | ledger on disk MiB |"
  echo "|---|---|---|---|---|---|"
  echo "| 0 | | $(( $(status_kib VmRSS) / 1024 )) | $(( $(status_kib VmHWM) / 1024 )) | 0 | $(( $(du -sk "$work/ledger" | cut -f1) / 1024 )) |"
} | tee "$results/summary.md"

for step in $(seq "$STEPS"); do
  "${client_pin[@]}" timeout "$SEGMENT_TIMEOUT_S" "$HOOKWALL" loadgen \
    --target "http://127.0.0.1:$HW_PORT/webhooks/stripe-soak" --provider stripe --secret "$SECRET" \
    --max --connections "$CONNECTIONS" --requests "$STEP_EVENTS" --duration 1h --json \
    >"$results/segment_$step.json" || {
    log "error: segment $step failed or exceeded SEGMENT_TIMEOUT_S=${SEGMENT_TIMEOUT_S}s; the rows above stand"
    exit 1
  }
  rate="$(python3 -c "import json,sys; r=json.load(open(sys.argv[1])); print('%.0f' % (r['status'].get('accepted', 0) / r['elapsed_s']))" "$results/segment_$step.json")"
  echo "| $((step * STEP_EVENTS)) | $rate | $(( $(status_kib VmRSS) / 1024 )) | $(( $(status_kib VmHWM) / 1024 )) | $(metric_sum hookwall_inbox_pending) | $(( $(du -sk "$work/ledger" | cut -f1) / 1024 )) |" \
    | tee -a "$results/summary.md"
done
log "== results in $results"
