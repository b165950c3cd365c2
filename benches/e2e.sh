#!/usr/bin/env bash
# End-to-end benchmark of hookwall on this machine, with `hookwall loadgen` as the generator:
#   (a) nginx answering a static 200            closed loop, 64 connections
#   (b) hookwall, sync = true, unique signed Stripe events, closed loop, 64 connections,
#       forwarding every event to a second local nginx, the destination (delivered counted
#       after a bounded drain; where it runs: DEST below)
#   (s) sustained: hookwall open loop at the rate (b) delivered during its run, forwarding on;
#       accepted/s, delivered/s and how much the inbox grew during it (~0 = sustainable)
#   (c) raw RocksDB WriteBatch sync throughput at the batch size hookwall formed in (b)
#       (criterion: benches/ledger.rs, group rocksdb_writebatch_sync)
#   (d) hookwall open loop at 50 % of (b)'s peak: p50 / p99 / p99.9 ack latency
#   (d0) the disk's floor under (d): an ideal group committer that spends no CPU but the disk's,
#       at (d)'s rate, fdatasync before each answer (benches/disk_floor.py), just after (d)
#   (e) hookwall open loop at 150 % of (b)'s peak: share answered 503 overloaded, p99 of the rest
#       (after an uncounted warm-up of its 2048 connections against nginx)
#   (f) the same closed loop against 1 node, then (g) 2 nodes, on one throwaway local PostgreSQL
#       (`ledger.backend = "postgres"`, same source and destination as (b)), printed as ratios
#       to (b), the RocksDB figure of this run (issue 8). On by default when the PostgreSQL
#       server binaries are installed (Debian `postgresql`); PG=0 skips it, PG=1 requires it.
# (a) and (b) alternate for ROUNDS rounds to cancel drift. Prints one table with the ratios
# (b)/(a) and (b)/(c); writes it, every loadgen report (JSON) and the .hgrm files to the
# results directory. Traffic goes to 127.0.0.1 only; every run is bounded by --duration.
#
# Usage: benches/e2e.sh [RESULTS_DIR]          (default: bench-results/<UTC time>)
# Environment: PHASE_S (seconds per measurement, default 10), ROUNDS (default 2), PERF=1 (also
#              record a perf profile of hookwall in one extra, uncounted run: perf-hookwall*.txt),
#              CARGO_TARGET_DIR (default target), WORK_DIR (ledger etc.; must not be tmpfs),
#              PG (auto | 0 | 1, see (f)/(g)), PIPELINE (the destination's `pipeline`: requests
#              in flight per connection to nginx, default 8; 1 = no HTTP/1.1 pipelining),
#              DEST (where the destination nginx runs: client = on the load generator's CPUs,
#              the default, so the server CPUs hold only the system under test, as in (a);
#              server = on the server CPUs with hookwall, as in runs 1-10 of docs/benchmarks.md).
set -euo pipefail
cd "$(dirname "$0")/.."

PHASE_S="${PHASE_S:-10}"
ROUNDS="${ROUNDS:-2}"
CONNECTIONS=64
PIPELINE="${PIPELINE:-8}"
DEST="${DEST:-client}"   # checked here, before anything is built or started (see the core split)
case "$DEST" in
  client | server) ;;
  *) printf 'error: DEST must be client or server, not %s\n' "'$DEST'" >&2; exit 2 ;;
esac
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-target}"
results="${1:-bench-results/$(date -u +%Y%m%dT%H%M%SZ)}"
mkdir -p "$results"
results="$(cd "$results" && pwd)"
work="$(mktemp -d "${WORK_DIR:-${TMPDIR:-/tmp}}/hookwall-e2e.XXXXXX")"
log() { printf '%s\n' "$*" >&2; }
# shellcheck source=benches/common.sh
. benches/common.sh

pids=()
pg_stop=()
cleanup() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
  if [ "${#pg_stop[@]}" -gt 0 ]; then "${pg_stop[@]}" >/dev/null 2>&1 || true; fi
  cp "$work/ledger/LOG" "$results/rocksdb.LOG" 2>/dev/null || true   # why RocksDB stopped writes
  rm -rf "$work"
}
trap cleanup EXIT

warn_if_tmpfs "$work"

# ---- tools
ensure_nginx

log "== building hookwall and the ledger bench (release)"
cargo build --release --bin hookwall -q
cargo bench --bench ledger --no-run -q 2>/dev/null
HOOKWALL="$CARGO_TARGET_DIR/release/hookwall"

# ---- core split: the system under test (hookwall or nginx) on the first CPU, the load
# generator (and by default the destination, see DEST) on the last; with one CPU, nothing is
# pinned.
ncpu="$(nproc)"
if [ "$ncpu" -ge 2 ]; then
  server_cpus="0"
  client_cpus="$((ncpu - 1))"
  if [ "$ncpu" -ge 4 ]; then server_cpus="0-$((ncpu / 2 - 1))"; client_cpus="$((ncpu / 2))-$((ncpu - 1))"; fi
  server_pin=(taskset -c "$server_cpus")
  client_pin=(taskset -c "$client_cpus")
  split="server (hookwall / nginx, RocksDB bench) on CPU $server_cpus; loadgen on CPU $client_cpus (taskset)"
else
  server_pin=()
  client_pin=()
  split="one CPU: server and loadgen share it (not pinned)"
fi
# Background servers are started through these (no function in between), so that $! is the
# server's own pid (taskset execs it) and the exit trap stops the server itself.
on_server() { "${server_pin[@]}" "$@"; }
on_client() { "${client_pin[@]}" "$@"; }
server_ncpu="$(on_server nproc)"
client_ncpu="$(on_client nproc)"
# The destination nginx (what hookwall forwards to) is outside the system under test, like the
# generator: by default it runs on the client CPUs, so in (b), (s), (d), (e) hookwall has the
# server CPUs to itself as nginx has in (a). DEST=server puts it on the server CPUs instead.
case "$DEST" in
  client) dest_pin=("${client_pin[@]}"); dest_ncpu="$client_ncpu"; dest_where="the loadgen's CPU(s)" ;;
  server) dest_pin=("${server_pin[@]}"); dest_ncpu="$server_ncpu"; dest_where="the server's CPU(s)" ;;
esac
if [ "$ncpu" -lt 2 ]; then dest_where="the one CPU (not pinned)"; fi
split="$split; destination nginx on $dest_where (DEST=$DEST)"

{ read -r NGINX_PORT; read -r DEST_PORT; read -r HW_PORT; read -r ADMIN_PORT; } < <(free_ports 4)

# ---- nginx: its own instance on a loopback port, temp config; static 200 everywhere.
write_nginx_conf "$work/nginx" "$NGINX_PORT" "$server_ncpu" 8192
"${server_pin[@]}" "$NGINX" -c "$work/nginx/nginx.conf" -p "$work/nginx" &
pids+=($!)
# The destination: a second instance of the same static 200 (see DEST above).
write_nginx_conf "$work/nginx-dest" "$DEST_PORT" "$dest_ncpu" 8192
"${dest_pin[@]}" "$NGINX" -c "$work/nginx-dest/nginx.conf" -p "$work/nginx-dest" &
pids+=($!)

# ---- hookwall: sync = true, one Stripe source forwarding to nginx.
SECRET="whsec_e2e_bench_0123456789abcdef"
TOKEN="e2e-bench-admin-token"
printf '%s' "$TOKEN" >"$work/admin-token"
cat >"$work/hookwall.toml" <<EOF
[server]
listen = "127.0.0.1:$HW_PORT"
admin_listen = "127.0.0.1:$ADMIN_PORT"
cores = $server_ncpu
io = "auto"

[ledger]
path = "$work/ledger"
sync = true
shards = 1

[admin]
token_file = "$work/admin-token"

[[source]]
id = "stripe-bench"
tenant = "bench"
provider = "stripe"
secrets = [{ id = "k1", value = "$SECRET" }]
destination = "nginx"

[[destination]]
id = "nginx"
url = "http://127.0.0.1:$DEST_PORT/hooks"
timeout = "5s"
attempts_max = 5
backoff_min = "100ms"
backoff_max = "2s"
concurrency_max = 64
pipeline = $PIPELINE
EOF
HOOKWALL_LOG=warn "${server_pin[@]}" "$HOOKWALL" serve -c "$work/hookwall.toml" --log-format json 2>"$results/hookwall.stderr" &
pids+=($!)
hw_pid=$!

wait_http() { # URL: poll (bounded, 30 s) until it answers 200
  for _ in $(seq 300); do
    if [ "$(curl -s -o /dev/null -w '%{http_code}' "$1" || true)" = "200" ]; then return 0; fi
    sleep 0.1
  done
  log "error: $1 did not answer 200 within 30 s"; exit 1
}
wait_http "http://127.0.0.1:$NGINX_PORT/"
wait_http "http://127.0.0.1:$DEST_PORT/"
wait_http "http://127.0.0.1:$ADMIN_PORT/readyz"

metric() { # NAME_WITH_LABELS: its value on /metrics (0 if absent)
  curl -s "http://127.0.0.1:$ADMIN_PORT/metrics" | awk -v k="$1" '$1 == k { v = $2 } END { print (v == "" ? 0 : v) }'
}
delivered() { metric 'hookwall_dispatch_attempts_total{destination="nginx",outcome="delivered"}'; }
accepted() { metric 'hookwall_ingress_requests_total{source="stripe-bench",provider="stripe",status="accepted"}'; }
field() { # FILE PYTHON_EXPR_OVER_r
  python3 -c "import json,sys; r=json.load(open(sys.argv[1])); print($2)" "$1"
}

loadgen() { # NAME TARGET PROVIDER SECRET ARGS...: one bounded run, report in NAME.json, NAME.hgrm
  local name="$1" target="$2" provider="$3" secret="$4"; shift 4
  on_client "$HOOKWALL" loadgen --target "$target" --provider "$provider" --secret "$secret" \
    --threads "$client_ncpu" --json --out "$results/$name.hgrm" "$@" >"$results/$name.json"
}

admin_post() { # PATH: an audited admin action (pause/resume the destination)
  curl -s -o /dev/null -X POST -H "Authorization: Bearer $TOKEN" -H 'Content-Type: application/json' \
    -d '{"reason":"e2e benchmark: ingest only"}' "http://127.0.0.1:$ADMIN_PORT$1"
}

NGINX_URL="http://127.0.0.1:$NGINX_PORT/static"
HW_URL="http://127.0.0.1:$HW_PORT/webhooks/stripe-bench"

# Waits (bounded, 60 s) until hookwall has delivered everything it accepted; prints the seconds.
drain() {
  local start end
  start="$(date +%s.%N)"
  for _ in $(seq 600); do
    if [ "$(delivered)" = "$(accepted)" ]; then break; fi
    sleep 0.1
  done
  end="$(date +%s.%N)"
  python3 -c "print(round($end - $start, 2))"
}

# CPU time the hypervisor gave to others while this VM's CPUs wanted it ("steal", /proc/stat):
# the host's share of a slow spell. cpu_ticks prints "all steal" (ticks, every CPU).
cpu_ticks() { awk '/^cpu / { t = 0; for (i = 2; i <= 9; i++) t += $i; print t, $9 }' /proc/stat; }
steal_since() { # "ALL STEAL" from cpu_ticks: steal since then, as % of all CPU time
  local all0 steal0 all1 steal1
  read -r all0 steal0 <<<"$1"
  read -r all1 steal1 < <(cpu_ticks)
  python3 -c "print(f'{100 * ($steal1 - $steal0) / max(1, $all1 - $all0):.1f} %')"
}
written_bytes() { awk '/^write_bytes:/ { print $2 }' "/proc/$hw_pid/io"; }

load_start="$(cut -d' ' -f1 /proc/loadavg)"
log "== core split: $split"
log "== warm-up (2 s each)"
loadgen warmup_nginx "$NGINX_URL" stripe "$SECRET" --max --connections "$CONNECTIONS" --duration 2s
loadgen warmup_hookwall "$HW_URL" stripe "$SECRET" --max --connections "$CONNECTIONS" --duration 2s
drain >/dev/null

a_rates=(); b_rates=(); b_delivered=(); b_run_delivered=(); i_rates=()
rounds_cpu0="$(cpu_ticks)"
for r in $(seq "$ROUNDS"); do
  log "== round $r/$ROUNDS: (a) nginx, closed loop, $CONNECTIONS connections, ${PHASE_S}s"
  loadgen "a_nginx_r$r" "$NGINX_URL" stripe "$SECRET" --max --connections "$CONNECTIONS" --duration "${PHASE_S}s"
  a_rates+=("$(field "$results/a_nginx_r$r.json" 'r["http"].get("200", 0) / r["elapsed_s"]')")
  log "== round $r/$ROUNDS: (b) hookwall, closed loop, $CONNECTIONS connections, ${PHASE_S}s"
  d0="$(delivered)"
  loadgen "b_hookwall_r$r" "$HW_URL" stripe "$SECRET" --max --connections "$CONNECTIONS" --duration "${PHASE_S}s"
  d_end="$(delivered)"
  took="$(drain)"
  d1="$(delivered)"
  b_rates+=("$(field "$results/b_hookwall_r$r.json" 'r["status"].get("accepted", 0) / r["elapsed_s"]')")
  b_delivered+=("$(python3 -c "print(($d1 - $d0) / ($(field "$results/b_hookwall_r$r.json" 'r["elapsed_s"]') + $took))")")
  b_run_delivered+=("$(python3 -c "print(($d_end - $d0) / $(field "$results/b_hookwall_r$r.json" 'r["elapsed_s"]'))")")
  log "   drained in ${took}s"
  log "== round $r/$ROUNDS: ingest only (destination paused), closed loop, $CONNECTIONS connections, ${PHASE_S}s"
  admin_post /admin/destinations/nginx/pause
  loadgen "i_ingest_r$r" "$HW_URL" stripe "$SECRET" --max --connections "$CONNECTIONS" --duration "${PHASE_S}s"
  i_rates+=("$(field "$results/i_ingest_r$r.json" 'r["status"].get("accepted", 0) / r["elapsed_s"]')")
  admin_post /admin/destinations/nginx/resume
  log "   resumed; drained in $(drain)s"
done
rounds_steal="$(steal_since "$rounds_cpu0")"
mean() { python3 -c 'import sys; v=[float(x) for x in sys.argv[1:]]; print(sum(v)/len(v))' "$@"; }
peak_a="$(mean "${a_rates[@]}")"
peak_b="$(mean "${b_rates[@]}")"
deliv_b="$(mean "${b_delivered[@]}")"
run_deliv_b="$(mean "${b_run_delivered[@]}")"
peak_i="$(mean "${i_rates[@]}")"
batch_p50="$(metric 'hookwall_ledger_commit_batch_events{quantile="0.5"}')"
batch_sum="$(metric 'hookwall_ledger_commit_batch_events_sum')"
batch_count="$(metric 'hookwall_ledger_commit_batch_events_count')"
batch_mean="$(python3 -c "print(max(1, round($batch_sum / max(1, $batch_count))))")"

log "== (c) raw RocksDB WriteBatch sync (criterion), batch sizes 1,16,64,256 and hookwall's mean $batch_mean"
HOOKWALL_BENCH_BATCHES="$batch_mean" on_server cargo bench -q --bench ledger -- rocksdb_writebatch_sync \
  --warm-up-time 1 --measurement-time 3 >"$results/c_rocksdb.txt" 2>&1
raw_rate() { # BATCH: events/s from criterion's mean time per batch
  python3 -c "import json,sys; e=json.load(open(sys.argv[1])); print($1 / (e['mean']['point_estimate'] / 1e9))" \
    "$CARGO_TARGET_DIR/criterion/rocksdb_writebatch_sync/$1/new/estimates.json"
}
raw_c="$(raw_rate "$batch_mean")"
raw_all=""
for n in 1 16 64 256; do raw_all="$raw_all $n: $(printf '%.0f' "$(raw_rate "$n")")/s;"; done

# (s): can hookwall keep up with what it delivered in (b)? Open loop at that rate, forwarding on;
# the inbox backlog at the end (accepted - delivered) says whether forwarding kept pace.
# Twice (b)'s connections: in an open loop they are only the generator's capacity, and 64
# connections at (b)'s rate leave each about 2 ms per request, no more than its answer takes
# at that load, so 8 % of the intended requests (25 148) went unsent in run 13 (limited by the
# generator, not by hookwall).
S_CONNECTIONS=$((2 * CONNECTIONS))
rate_s="$(python3 -c "print(max(1, round($run_deliv_b)))")"
log "== (s) sustained: open loop at (b)'s delivered rate ${rate_s}/s, $S_CONNECTIONS connections, ${PHASE_S}s"
s_a0="$(accepted)"; s_d0="$(delivered)"
loadgen s_sustained "$HW_URL" stripe "$SECRET" --rate "$rate_s" --connections "$S_CONNECTIONS" --duration "${PHASE_S}s"
s_a1="$(accepted)"; s_d1="$(delivered)"
s_elapsed="$(field "$results/s_sustained.json" 'r["elapsed_s"]')"
s_acc="$(python3 -c "print(($s_a1 - $s_a0) / $s_elapsed)")"
s_del="$(python3 -c "print(($s_d1 - $s_d0) / $s_elapsed)")"
s_backlog="$(python3 -c "print(round(($s_a1 - $s_a0) - ($s_d1 - $s_d0)))")"
s_unsent="$(field "$results/s_sustained.json" 'r.get("unsent", 0)')"
drain >/dev/null

rate_d="$(python3 -c "print(max(1, round(0.5 * $peak_b)))")"
log "== (d) hookwall open loop at 50 % of peak: ${rate_d}/s, $CONNECTIONS connections, ${PHASE_S}s"
d_log0="$(wc -l <"$results/hookwall.stderr")"
d_io0="$(written_bytes)"; d_a0="$(accepted)"; d_cpu0="$(cpu_ticks)"
loadgen d_open50 "$HW_URL" stripe "$SECRET" --rate "$rate_d" --connections "$CONNECTIONS" --duration "${PHASE_S}s"
d_steal="$(steal_since "$d_cpu0")"
d_io1="$(written_bytes)"; d_a1="$(accepted)"
d_log1="$(wc -l <"$results/hookwall.stderr")"
drain >/dev/null
# (d0): the disk's floor under (d), right after it, hookwall idle: an ideal group committer
# (no CPU but the disk's) at (d)'s rate, writing what hookwall wrote to disk per event in (d)
# (WAL, flushes and compactions: /proc/PID/io write_bytes), fdatasync before each answer.
# Bytes per event within disk_floor.py's bounds (64 B .. 1 MiB; the table says when clamped).
d_bytes_raw="$(python3 -c "print(round(($d_io1 - $d_io0) / max(1, $d_a1 - $d_a0)))")"
d_bytes="$(python3 -c "print(max(64, min(1048576, $d_bytes_raw)))")"
d_bytes_note="$d_bytes bytes per event (what hookwall wrote to disk per event in (d))"
[ "$d_bytes" = "$d_bytes_raw" ] || d_bytes_note="$d_bytes bytes per event (hookwall wrote $d_bytes_raw per event in (d); clamped)"
d0_json="$results/d0_disk_floor.json"
d0_steal="n/a"
if [ "$d_a1" = "$d_a0" ]; then
  log "== (d0) skipped: hookwall accepted nothing in (d), so there are no bytes per event to write"
else
  log "== (d0) the disk's floor: an ideal group committer at ${rate_d}/s, $d_bytes bytes per event, fdatasync per commit, ${PHASE_S}s"
  d0_cpu0="$(cpu_ticks)"
  on_server python3 benches/disk_floor.py "$work" "$rate_d" "$PHASE_S" "$d_bytes" >"$d0_json" \
    || log "   warning: the disk floor did not complete (see above); (d0) is reported from what it measured"
  d0_steal="$(steal_since "$d0_cpu0")"
fi

# Enough connections to offer 150 % at all: past saturation every answer, a 503 too, waits
# tens of ms for the core, and 1024 connections at ~35 ms each carry under 30k requests/s, so
# with fewer the excess would queue in the generator whatever the server does.
E_CONNECTIONS=2048
rate_e="$(python3 -c "print(max(1, round(1.5 * $peak_b)))")"
# On this VM the first burst of thousands of new connections after a spell with fewer stalls
# some requests about 2.5 s whatever the target — nginx too — with no TCP retransmits, drops or
# listen overflows; the next burst does not (docs/benchmarks.md, run 11). Warm that path
# against nginx, not hookwall, so (e) measures hookwall and a stall of its own still shows.
log "== warm-up: $E_CONNECTIONS connections to nginx, 2s (not counted)"
loadgen warmup_e_nginx "$NGINX_URL" stripe "$SECRET" --rate 2000 --connections "$E_CONNECTIONS" --duration 2s
log "== (e) hookwall open loop at 150 % of peak: ${rate_e}/s, $E_CONNECTIONS connections, ${PHASE_S}s"
e_cpu0="$(cpu_ticks)"
loadgen e_open150 "$HW_URL" stripe "$SECRET" --rate "$rate_e" --connections "$E_CONNECTIONS" --duration "${PHASE_S}s"
e_steal="$(steal_since "$e_cpu0")"
drain >/dev/null

if [ "${PERF:-0}" = "1" ] && command -v perf >/dev/null 2>&1; then
  log "== profile (not counted): perf record on hookwall during one more closed-loop run"
  perf record -q -F 499 -g -p "$hw_pid" -o "$work/perf.data" -- sleep "$PHASE_S" 2>/dev/null &
  perf_pid=$!
  loadgen p_profiled "$HW_URL" stripe "$SECRET" --max --connections "$CONNECTIONS" --duration "${PHASE_S}s"
  wait "$perf_pid" || true
  perf report -i "$work/perf.data" --stdio --no-children -g none --percent-limit 0.5 --sort comm,dso,symbol 2>/dev/null \
    | grep -v '^#' | grep -v '^$' | grep '%' | head -60 >"$results/perf-hookwall.txt" || true
  perf report -i "$work/perf.data" --stdio --no-children -g none --sort comm 2>/dev/null \
    | grep -v '^#' | grep '%' | head -20 >"$results/perf-hookwall-threads.txt" || true
  drain >/dev/null
fi

# ---- (f), (g): the PostgreSQL ledger, 1 and 2 nodes on one local server, same source,
# destination and closed loop as (b). The server runs on the server CPUs with the nodes; unix
# socket only (no TCP listener); stopped and removed at exit.
PG="${PG:-auto}"
PGBIN="$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1 || true)"
pg_rate_1=""; pg_rate_2=""; pg_note=""
if [ "$PG" != "0" ] && { [ -z "$PGBIN" ] || [ ! -x "$PGBIN/postgres" ]; }; then
  if [ "$PG" = "1" ]; then log "error: PG=1 but no /usr/lib/postgresql/*/bin/postgres (apt-get install postgresql)"; exit 1; fi
  pg_note="skipped: PostgreSQL server binaries not installed"
  PG=0
fi
if [ "$PG" = "0" ] && [ -z "$pg_note" ]; then pg_note="skipped (PG=0)"; fi
if [ "$PG" != "0" ]; then
  pg_dir="$work/pg"
  mkdir -p "$pg_dir"
  as_pg=()
  if [ "$(id -u)" = 0 ]; then
    chmod 711 "$work"   # the postgres user must reach its directory (traverse only)
    chown postgres "$pg_dir"
    as_pg=(runuser -u postgres --)
  fi
  "${as_pg[@]}" "$PGBIN/initdb" -D "$pg_dir/data" -U postgres -A trust --no-sync >/dev/null
  pg_stop=("${as_pg[@]}" "$PGBIN/pg_ctl" -D "$pg_dir/data" stop -m immediate)
  on_server "${as_pg[@]}" "$PGBIN/pg_ctl" -D "$pg_dir/data" -l "$pg_dir/postgres.log" -w -t 60 \
    -o "-k $pg_dir -c listen_addresses= -c max_connections=40 -c shared_buffers=64MB" start >/dev/null
  pg_version="$("$PGBIN/postgres" --version | awk '{print $3}')"
  PG_URL="host=$pg_dir user=postgres dbname=postgres"
  pg_node() { # NAME: writes $work/NAME.toml (as hookwall.toml, ledger on PostgreSQL); prints "port admin"
    local port admin
    { read -r port; read -r admin; } < <(free_ports 2)
    sed -e "s|^listen = .*|listen = \"127.0.0.1:$port\"|" \
        -e "s|^admin_listen = .*|admin_listen = \"127.0.0.1:$admin\"|" \
        -e "s|^shards = 1|backend = \"postgres\"\nurl = \"$PG_URL\"\npool_size = 4|" \
        -e "s|^path = .*|path = \"$work/$1-unused\"|" \
        "$work/hookwall.toml" >"$work/$1.toml"
    echo "$port $admin"
  }
  read -r pg_a_port pg_a_admin < <(pg_node pg_a)
  read -r pg_b_port pg_b_admin < <(pg_node pg_b)
  "$HOOKWALL" migrate -c "$work/pg_a.toml" >/dev/null
  pg_pending() { "$PGBIN/psql" -qtA "$PG_URL" -c 'SELECT count(*) FROM hookwall_events WHERE due_ms IS NOT NULL'; }
  pg_drain() { # bounded (60 s): until every admitted event was delivered
    for _ in $(seq 600); do [ "$(pg_pending)" = "0" ] && return 0; sleep 0.1; done
    log "   warning: $(pg_pending) PostgreSQL events still undelivered after 60 s"
  }
  pg_run() { # LABEL CONNECTIONS_PER_NODE PORT...: closed loop on every node at once; prints accepted/s summed
    local label="$1" per="$2"; shift 2
    local gens=() n=0
    for port in "$@"; do
      n=$((n + 1))
      loadgen "${label}_$n" "http://127.0.0.1:$port/webhooks/stripe-bench" stripe "$SECRET" \
        --max --connections "$per" --duration "${PHASE_S}s" &
      gens+=($!)
    done
    wait "${gens[@]}"
    python3 - "$results" "$label" "$n" <<'P'
import json, sys
d, label, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
reports = [json.load(open(f"{d}/{label}_{i}.json")) for i in range(1, n + 1)]
print(sum(r["status"].get("accepted", 0) for r in reports) / max(r["elapsed_s"] for r in reports))
P
  }
  HOOKWALL_LOG=warn "${server_pin[@]}" "$HOOKWALL" serve -c "$work/pg_a.toml" 2>"$results/hookwall-pg-a.stderr" &
  pids+=($!)
  pg_nodes=($!)
  wait_http "http://127.0.0.1:$pg_a_admin/readyz"
  log "== (f) PostgreSQL $pg_version ledger, 1 node, closed loop, $CONNECTIONS connections, ${PHASE_S}s"
  loadgen warmup_pg "http://127.0.0.1:$pg_a_port/webhooks/stripe-bench" stripe "$SECRET" --max --connections "$CONNECTIONS" --duration 2s
  pg_drain
  pg_rate_1="$(pg_run f_pg1 "$CONNECTIONS" "$pg_a_port")"
  pg_drain
  HOOKWALL_LOG=warn "${server_pin[@]}" "$HOOKWALL" serve -c "$work/pg_b.toml" 2>"$results/hookwall-pg-b.stderr" &
  pids+=($!)
  pg_nodes+=($!)
  wait_http "http://127.0.0.1:$pg_b_admin/readyz"
  log "== (g) PostgreSQL ledger, 2 nodes, closed loop, $((CONNECTIONS / 2)) connections per node, ${PHASE_S}s"
  pg_rate_2="$(pg_run g_pg2 "$((CONNECTIONS / 2))" "$pg_a_port" "$pg_b_port")"
  pg_drain
  # The nodes stop before their database does.
  kill "${pg_nodes[@]}" 2>/dev/null || true
  wait "${pg_nodes[@]}" 2>/dev/null || true
  "${pg_stop[@]}" >/dev/null 2>&1 || true
  pg_stop=()
fi

ms() { python3 -c "print(f'{$1 / 1000:.2f} ms')"; }
log_lines() { # TEXT: how many lines of the ledger's RocksDB LOG contain it ("?" without a LOG)
  if [ -f "$work/ledger/LOG" ]; then grep -c "$1" "$work/ledger/LOG" || true; else echo "?"; fi
}
# The group commits hookwall logged as slow (`ledger_commit_slow`, >= 20 ms, at most one line per
# second) between lines FROM and TO of its log: how many, and where the worst one's time went.
slow_commits() { # FROM TO
  python3 - "$results/hookwall.stderr" "$1" "$2" <<'P'
import json, sys
path, start, end = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
lines = open(path, errors="replace").read().splitlines()[start:end]
slow = []
for line in lines:
    try:
        e = json.loads(line)
    except ValueError:
        continue
    f = e.get("fields", e)
    if f.get("code") == "ledger_commit_slow":
        slow.append(f)
if not slow:
    print("none")
else:
    w = max(slow, key=lambda f: f["took_ms"])
    more = sum(f.get("unlogged", 0) for f in slow)
    print(f"{len(slow)} logged (+{more} not logged); worst {w['took_ms']} ms: wal {w['wal_ms']}, "
          f"stall {w['stall_ms']}, memtable {w['memtable_ms']}, other {w['other_ms']} ms")
P
}
d="$results/d_open50.json"; e="$results/e_open150.json"
share_503="$(field "$e" '"%.1f %%" % (100 * r["http"].get("503", 0) / max(1, r["answered"]))')"
overloaded="$(field "$e" 'r["status"].get("overloaded", 0)')"
e_answered="$(field "$e" 'r["answered"]')"
e_rate="$(field "$e" '"%.0f" % r["answered_per_s"]')"
fmt0() { printf '%.0f' "$1"; }
# (d0)'s cells; "not measured" when it was skipped or failed before printing its report.
floor_row() {
  python3 - "$d0_json" <<'P'
import json, sys
try:
    r = json.load(open(sys.argv[1]))
except (OSError, ValueError):
    print("not measured"); sys.exit()
L = r["latency_us"]
ms = lambda k: "n/a" if L[k] is None else f"{L[k] / 1000:.2f} ms"
more = f"; {r['unanswered']} events unanswered when it stopped (the disk did not keep up)" if r.get("unanswered") else ""
print(f"latency p50 {ms('p50')}, p99 {ms('p99')}, p99.9 {ms('p99_9')}, max {ms('max')} ({r['events_per_sync']} events per fdatasync){more}")
P
}
floor_ratio() {
  python3 - "$d" "$d0_json" <<'P'
import json, sys
try:
    d, f = (json.load(open(p))["latency_us"]["p99"] for p in sys.argv[1:3])
except (OSError, ValueError, KeyError):
    d = f = None
print("n/a" if not d or not f else f"{d / f:.3f}")
P
}
ratio() { python3 -c "print(f'{$1 / $2:.3f}')"; }

{
  echo "# hookwall end-to-end benchmark, $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo
  echo "machine: $(nproc) CPUs ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//')), kernel $(uname -r)"
  echo "cores:   $split"
  echo "load:    1-min load average $load_start at the start, $(cut -d' ' -f1 /proc/loadavg) at the end (all processes on the machine; 2 = both CPUs busy)"
  echo "steal:   CPU time the hypervisor gave to other guests while ours wanted it, % of all CPU time: $rounds_steal over the (a)/(b)/ingest rounds, $d_steal in (d), $d0_steal in (d0), $e_steal in (e)"
  echo "runs:    ${PHASE_S} s per measurement, (a)/(b) alternated over $ROUNDS rounds (means), $CONNECTIONS connections; hookwall ledger sync = true, 1 shard, io = auto; destination pipeline = $PIPELINE"
  echo
  echo "| | measurement | result |"
  echo "|---|---|---|"
  echo "| (a) | nginx static 200, closed loop | $(fmt0 "$peak_a") req/s (rounds: $(for x in "${a_rates[@]}"; do printf '%.0f ' "$x"; done)) |"
  echo "| (b) | hookwall e2e, unique signed Stripe events, closed loop | $(fmt0 "$peak_b") accepted/s (rounds: $(for x in "${b_rates[@]}"; do printf '%.0f ' "$x"; done)); delivered to nginx $(fmt0 "$run_deliv_b")/s during the run, $(fmt0 "$deliv_b")/s incl. drain |"
  echo "| (s) | sustained: open loop at (b)'s delivered rate = ${rate_s}/s, $S_CONNECTIONS connections, forwarding on | $(fmt0 "$s_acc") accepted/s, $(fmt0 "$s_del") delivered/s; inbox grew by $s_backlog events during it; $s_unsent intended requests not sent (generator waited for a connection) |"
  echo "| (s)/(a) | sustained end to end (delivered) | $(ratio "$s_del" "$peak_a") |"
  echo "| (c) | raw RocksDB WriteBatch sync at hookwall's mean batch ($batch_mean events per commit; p50 $batch_p50; admissions and settlements) | $(fmt0 "$raw_c") events/s (all sizes:$raw_all) |"
  echo "| (b)/(a) | | $(ratio "$peak_b" "$peak_a") |"
  echo "| (b)/(c) | | $(ratio "$peak_b" "$raw_c") |"
  echo "| (d) | open loop at 50 % of (b) = ${rate_d}/s | ack latency p50 $(ms "$(field "$d" 'r["latency_us"]["p50"]')"), p99 $(ms "$(field "$d" 'r["latency_us"]["p99"]')"), p99.9 $(ms "$(field "$d" 'r["latency_us"]["p99_9"]')") (service p50 $(ms "$(field "$d" 'r["service_latency_us"]["p50"]')"), p99 $(ms "$(field "$d" 'r["service_latency_us"]["p99"]')"), max $(ms "$(field "$d" 'r["service_latency_us"]["max"]')")); group commits of 20 ms or more: $(slow_commits "$d_log0" "$d_log1") |"
  echo "| (d0) | the disk's floor under (d): an ideal group committer (no CPU but the disk's) at ${rate_d}/s, $d_bytes_note, fdatasync before answering | $(floor_row) |"
  echo "| (d)/(d0) | p99 over the disk's p99 | $(floor_ratio) |"
  echo "| (e) | open loop at 150 % of (b) = ${rate_e}/s, $E_CONNECTIONS connections | 503: $share_503 of $e_answered answers ($overloaded overloaded); p99 of the 2xx $(ms "$(field "$e" 'r["latency_2xx_us"]["p99"]')"); answered $e_rate/s |"
  echo "| ingest only | hookwall, destination paused (events accumulate), closed loop | $(fmt0 "$peak_i") accepted/s (rounds: $(for x in "${i_rates[@]}"; do printf '%.0f ' "$x"; done)) |"
  echo "| ingest/(a) | | $(ratio "$peak_i" "$peak_a") |"
  if [ -n "$pg_rate_1" ]; then
    echo "| (f)/(b) | PostgreSQL $pg_version ledger (local, unix socket, pool_size 4), 1 node, same closed loop as (b) | $(ratio "$pg_rate_1" "$peak_b") ($(fmt0 "$pg_rate_1") accepted/s) |"
    echo "| (g)/(b) | 2 nodes on the same PostgreSQL, $((CONNECTIONS / 2)) connections each | $(ratio "$pg_rate_2" "$peak_b") ($(fmt0 "$pg_rate_2") accepted/s, both nodes) |"
  else
    echo "| (f), (g) | PostgreSQL ledger, 1 and 2 nodes | $pg_note |"
  fi
  echo
  echo "RocksDB over the whole run (its LOG): $(log_lines 'Stopping writes') \"Stopping writes\" and $(log_lines 'Stalling writes') \"Stalling writes\" lines (flushes or compactions behind; one line per column family each time RocksDB checks, so a count of lines, not of episodes; each one held every admission)."
  echo
  echo "Latencies are from the intended send time (coordinated-omission corrected). Files: *.json (loadgen reports), *.hgrm (percentile distributions, ms), c_rocksdb.txt (criterion), hookwall.stderr (its JSON log), rocksdb.LOG (the ledger's RocksDB log, copied at exit)."
} | tee "$results/summary.md"
log "== results in $results"
