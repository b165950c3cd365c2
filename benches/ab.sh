#!/usr/bin/env bash
# A/B comparison of two hookwall builds on this machine, the method behind the "pairs" tables of
# docs/benchmarks.md (runs 23-35): alternated rounds, so that the machine's drift (the same
# binary has varied by a third within 15 minutes here) falls on both sides alike.
#
# Each round starts a fresh hookwall (sync = true, cores = 1, shards = 1) on the server CPU with
# a fresh ledger, one Stripe source forwarding to a loopback nginx on the client CPU, and
# `hookwall loadgen` on the client CPU: a closed-loop prefill (uncounted; it ages the ledger so
# that its WAL files are recycled, as in operation), then a measured closed loop. A round
# reports accepted/s and each thread's CPU per accepted event in microseconds (from
# /proc/PID/task/*/stat, in clock ticks), and how busy that leaves the server CPU. MODE ingest
# pauses the destination (events accumulate in the inbox); forward delivers every event.
# Traffic goes to 127.0.0.1 only; every run is bounded by its duration.
#
# Usage: benches/ab.sh BIN_A BIN_B [RESULTS_DIR]   (default: bench-results/ab-<UTC time>)
#        BIN_A and BIN_B may be the same binary, told apart by ENV_A / ENV_B; BIN_A's loadgen
#        drives both sides.
# Environment: PAIRS (rounds per side and mode, default 3), MODE (ingest | forward | both,
#              default both), PREFILL_S (default 20), PHASE_S (measured seconds, default 8),
#              CONNECTIONS (default 64), PIPELINE (the destination's `pipeline`, default 8),
#              ENV_A, ENV_B (space-separated NAME=VALUE pairs set for that side's server),
#              WORK_DIR (ledgers; must not be tmpfs).
set -euo pipefail
cd "$(dirname "$0")/.."
usage() { echo "usage: benches/ab.sh BIN_A BIN_B [RESULTS_DIR]  (see --help)" >&2; exit 2; }
case "${1:-}" in
  -h|--help) sed -n '2,22p' "$0" | cut -c3-; exit 0 ;;
  -*|"") usage ;;
esac
[ $# -ge 2 ] && [ $# -le 3 ] || usage
for bin in "$1" "$2"; do
  if [ ! -x "$bin" ] || [ -d "$bin" ]; then
    printf 'error: %s is not an executable file (build one with cargo build --release)\n' "'$bin'" >&2
    exit 2
  fi
done
BIN_A="$(cd "$(dirname "$1")" && pwd)/$(basename "$1")"
BIN_B="$(cd "$(dirname "$2")" && pwd)/$(basename "$2")"

PAIRS="${PAIRS:-3}"
MODE="${MODE:-both}"
PREFILL_S="${PREFILL_S:-20}"
PHASE_S="${PHASE_S:-8}"
CONNECTIONS="${CONNECTIONS:-64}"
PIPELINE="${PIPELINE:-8}"
positive() { # NAME VALUE: VALUE must be a whole number >= 1
  case "$2" in
    '' | *[!0-9]* | 0*) printf 'error: %s must be a whole number of at least 1, not %s\n' "$1" "'$2'" >&2; exit 2 ;;
  esac
}
positive PAIRS "$PAIRS"; positive PREFILL_S "$PREFILL_S"; positive PHASE_S "$PHASE_S"
positive CONNECTIONS "$CONNECTIONS"; positive PIPELINE "$PIPELINE"
case "$MODE" in
  ingest) modes=(ingest) ;;
  forward) modes=(forward) ;;
  both) modes=(ingest forward) ;;
  *) printf 'error: MODE must be ingest, forward or both, not %s\n' "'$MODE'" >&2; exit 2 ;;
esac
for side in "${ENV_A:-}" "${ENV_B:-}"; do
  for pair in $side; do
    case "$pair" in
      [A-Za-z_]*=*) ;;
      *) printf 'error: ENV_A / ENV_B hold NAME=VALUE pairs, not %s\n' "'$pair'" >&2; exit 2 ;;
    esac
  done
done

results="${3:-bench-results/ab-$(date -u +%Y%m%dT%H%M%SZ)}"
mkdir -p "$results"
results="$(cd "$results" && pwd)"
work="$(mktemp -d "${WORK_DIR:-${TMPDIR:-/tmp}}/hookwall-ab.XXXXXX")"
log() { printf '%s\n' "$*" >&2; }
# shellcheck source=benches/common.sh
. benches/common.sh

pids=()
hw_live=""   # the round's hookwall, while it runs
cleanup() {
  for pid in $hw_live "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
  rm -rf "$work"
}
trap cleanup EXIT
warn_if_tmpfs "$work"
ensure_nginx

ncpu="$(nproc)"
if [ "$ncpu" -ge 2 ]; then
  server_pin=(taskset -c 0)
  client_pin=(taskset -c "$((ncpu - 1))")
  split="hookwall on CPU 0; loadgen and the destination nginx on CPU $((ncpu - 1))"
else
  server_pin=()
  client_pin=()
  split="one CPU: everything shares it (not pinned)"
fi
hz="$(getconf CLK_TCK)"

{ read -r DEST_PORT; read -r HW_PORT; read -r ADMIN_PORT; } < <(free_ports 3)
write_nginx_conf "$work/nginx" "$DEST_PORT" 1 8192
"${client_pin[@]}" "$NGINX" -c "$work/nginx/nginx.conf" -p "$work/nginx" &
pids+=($!)

SECRET="whsec_ab_bench_0123456789abcdef"
TOKEN="ab-bench-admin-token"
printf '%s' "$TOKEN" >"$work/admin-token"

wait_http() { # URL: poll (bounded, 30 s) until it answers 200
  for _ in $(seq 300); do
    if [ "$(curl -s -o /dev/null -w '%{http_code}' "$1" || true)" = "200" ]; then return 0; fi
    sleep 0.1
  done
  log "error: $1 did not answer 200 within 30 s"; exit 1
}
wait_http "http://127.0.0.1:$DEST_PORT/"

# Per-thread CPU ticks of PID, one "group ticks" line per thread group (a thread's name without
# its trailing -N; RocksDB's and tokio's pools and the main thread under their own names).
ticks() { # PID
  for stat in /proc/"$1"/task/*/stat; do
    # comm is field 2 in parentheses and may hold spaces: cut the line at the last ')'.
    line="$(cat "$stat" 2>/dev/null)" || continue
    comm="${line#*(}"; comm="${comm%)*}"
    rest="${line##*) }"
    # shellcheck disable=SC2086
    set -- $rest
    printf '%s %s\n' "${comm%-[0-9]*}" "$(( ${12} + ${13} ))"
  done | awk '{ t[$1] += $2 } END { for (k in t) print k, t[k] }' | sort
}

round() { # SIDE(A|B) MODE ROUND: one measured round; prints one JSON line
  local side="$1" mode="$2" r="$3" bin env_pairs dir hw
  if [ "$side" = A ]; then bin="$BIN_A"; env_pairs="${ENV_A:-}"; else bin="$BIN_B"; env_pairs="${ENV_B:-}"; fi
  dir="$work/$side-$mode-$r"
  mkdir -p "$dir"
  cat >"$dir/hookwall.toml" <<EOF
[server]
listen = "127.0.0.1:$HW_PORT"
admin_listen = "127.0.0.1:$ADMIN_PORT"
cores = 1

[ledger]
path = "$dir/ledger"
sync = true
shards = 1

[admin]
token_file = "$work/admin-token"

[[source]]
id = "stripe-ab"
tenant = "bench"
provider = "stripe"
secrets = [{ id = "k1", value = "$SECRET" }]
destination = "nginx"

[[destination]]
id = "nginx"
url = "http://127.0.0.1:$DEST_PORT/hooks"
timeout = "5s"
concurrency_max = 64
pipeline = $PIPELINE
EOF
  # shellcheck disable=SC2086
  env HOOKWALL_LOG=warn $env_pairs "${server_pin[@]}" "$bin" serve -c "$dir/hookwall.toml" 2>"$dir/stderr" &
  hw=$!
  hw_live="$hw"
  wait_http "http://127.0.0.1:$ADMIN_PORT/readyz"
  if [ "$mode" = ingest ]; then
    curl -s -o /dev/null -X POST -H "Authorization: Bearer $TOKEN" -H 'Content-Type: application/json' \
      -d '{"reason":"benches/ab.sh: ingest only"}' "http://127.0.0.1:$ADMIN_PORT/admin/destinations/nginx/pause"
  fi
  local gen=("${client_pin[@]}" "$BIN_A" loadgen --target "http://127.0.0.1:$HW_PORT/webhooks/stripe-ab"
    --provider stripe --secret "$SECRET" --threads 1 --json --max --connections "$CONNECTIONS")
  "${gen[@]}" --duration "${PREFILL_S}s" >"$dir/prefill.json"
  ticks "$hw" >"$dir/ticks0"
  "${gen[@]}" --duration "${PHASE_S}s" --out "$dir/measured.hgrm" >"$dir/measured.json"
  ticks "$hw" >"$dir/ticks1"
  kill "$hw"
  wait "$hw" 2>/dev/null || true
  hw_live=""
  python3 - "$dir" "$side" "$mode" "$r" "$hz" <<'P'
import json, sys
d, side, mode, r, hz = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
def read(p):
    return {k: int(v) for k, v in (l.split() for l in open(p))}
t0, t1 = read(f"{d}/ticks0"), read(f"{d}/ticks1")
rep = json.load(open(f"{d}/measured.json"))
acc, el = rep["status"].get("accepted", 0), rep["elapsed_s"]
us = {k: (t1[k] - t0.get(k, 0)) * 1e6 / hz / max(1, acc) for k in t1}
us = {k: round(v, 2) for k, v in us.items() if v >= 0.05}
total = sum(us.values())
print(json.dumps({"side": side, "mode": mode, "round": r, "accepted_per_s": round(acc / el),
                  "us_per_event": us, "all_us": round(total, 2),
                  "busy": round(total * acc / el / 1e6, 3)}))
P
}

log "== core split: $split; $PAIRS pairs per mode, ${PREFILL_S} s prefill, ${PHASE_S} s measured"
log "== A: $BIN_A ${ENV_A:-}"
log "== B: $BIN_B ${ENV_B:-}"
: >"$results/rounds.jsonl"
for mode in "${modes[@]}"; do
  for r in $(seq "$PAIRS"); do
    # A first in odd pairs, B first in even ones: neither side always runs on the warmer machine.
    if [ $((r % 2)) = 1 ]; then order=(A B); else order=(B A); fi
    for side in "${order[@]}"; do
      line="$(round "$side" "$mode" "$r")"
      printf '%s\n' "$line" >>"$results/rounds.jsonl"
      log "   $line"
    done
  done
done

python3 - "$results/rounds.jsonl" "$split" <<'P' | tee "$results/summary.md"
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
print(f"# benches/ab.sh: {sys.argv[2]}\n")
print("| mode | pair | A accepted/s | B accepted/s | A µs/event (all threads) | B µs/event | B/A µs/event |")
print("|---|---|---|---|---|---|---|")
for mode in dict.fromkeys(r["mode"] for r in rows):
    pairs = {}
    for r in rows:
        if r["mode"] == mode:
            pairs.setdefault(r["round"], {})[r["side"]] = r
    for n, p in sorted(pairs.items()):
        a, b = p["A"], p["B"]
        print(f"| {mode} | {n} | {a['accepted_per_s']} | {b['accepted_per_s']} | {a['all_us']} | {b['all_us']} | {b['all_us'] / a['all_us']:.3f} |")
    mean = lambda side, k: sum(p[side][k] for p in pairs.values()) / len(pairs)
    print(f"| {mode} | mean | {mean('A', 'accepted_per_s'):.0f} | {mean('B', 'accepted_per_s'):.0f} | "
          f"{mean('A', 'all_us'):.2f} | {mean('B', 'all_us'):.2f} | {mean('B', 'all_us') / mean('A', 'all_us'):.3f} |")
print()
print("Per thread (µs per accepted event, mean over the pairs):")
for mode in dict.fromkeys(r["mode"] for r in rows):
    for side in "AB":
        mine = [r for r in rows if r["mode"] == mode and r["side"] == side]
        keys = sorted({k for r in mine for k in r["us_per_event"]})
        cells = ", ".join(f"{k} {sum(r['us_per_event'].get(k, 0) for r in mine) / len(mine):.2f}" for k in keys)
        print(f"- {mode} {side}: {cells}")
P
log "== results in $results"
