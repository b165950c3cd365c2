#!/usr/bin/env bash
# Admission throughput of the PostgreSQL ledger against the RocksDB default, in one run on this
# machine: `hookwall loadgen --max` (closed loop, 32 connections per node, Stripe-signed unique
# events) against (a) one node on RocksDB, (b) one node on PostgreSQL, (c) two nodes on the
# same PostgreSQL (one loadgen per node, rates summed). A throwaway PostgreSQL (initdb in a
# temp dir, unix socket only, run as the `postgres` user when root) and tools/dev_sink.py as the
# destination; everything on loopback, removed at exit. Needs a release build and the Debian
# `postgresql` package. Usage: benches/postgres.sh [SECONDS=8]. Results: docs/postgres.md.
set -euo pipefail
cd "$(dirname "$0")/.."
SECONDS_PER_RUN="${1:-8}"
B="${CARGO_TARGET_DIR:-target}/release/hookwall"
PGBIN=$(ls -d /usr/lib/postgresql/*/bin | sort | tail -n 1)
SECRET=whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw
D=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$D"
}
trap cleanup EXIT
as_pg=()
if [ "$(id -u)" = 0 ]; then chown postgres "$D"; as_pg=(runuser -u postgres --); fi
"${as_pg[@]}" "$PGBIN/initdb" -D "$D/data" -U postgres -A trust --no-sync >/dev/null
"${as_pg[@]}" "$PGBIN/postgres" -D "$D/data" -k "$D" -c listen_addresses= \
  -c max_connections=40 -c shared_buffers=64MB >"$D/pg.log" 2>&1 &
pids+=($!)
URL="host=$D user=postgres dbname=postgres"
for _ in $(seq 300); do psql "$URL" -c 'select 1' >/dev/null 2>&1 && break; sleep 0.1; done
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
SINK_PORT=$(free_port)
python3 tools/dev_sink.py "$SINK_PORT" >/dev/null 2>&1 &
pids+=($!)

config() { # NAME LEDGER_LINES: writes $D/NAME.toml, prints its ingress port
  local port admin
  port=$(free_port); admin=$(free_port)
  cat >"$D/$1.toml" <<T
[server]
listen = "127.0.0.1:$port"
admin_listen = "127.0.0.1:$admin"
cores = 1
io = "epoll"
[ledger]
path = "$D/$1-rocksdb"
$2
[[source]]
id = "stripe-bench"
tenant = "bench"
provider = "stripe"
secrets = [{ id = "k", value = "$SECRET" }]
destination = "d"
[[destination]]
id = "d"
url = "http://127.0.0.1:$SINK_PORT/"
T
  echo "$port $admin"
}

run() { # LABEL CONFIG...: starts the nodes, one loadgen per node, prints accepted/s summed
  local label=$1; shift
  local nodes=() gens=() ports=()
  for c in "$@"; do
    "$B" serve -c "$D/$c.toml" >"$D/$c.log" 2>&1 & nodes+=($!)
    read -r port admin < "$D/$c.ports"
    ports+=("$port")
    for _ in $(seq 300); do
      python3 -c "import urllib.request,sys; sys.exit(urllib.request.urlopen('http://127.0.0.1:$admin/readyz').status != 200)" 2>/dev/null && break
      sleep 0.1
    done
  done
  local n=0
  for port in "${ports[@]}"; do
    n=$((n + 1))
    "$B" loadgen --target "http://127.0.0.1:$port/webhooks/stripe-bench" --provider stripe \
      --secret "$SECRET" --max --connections 32 --duration "${SECONDS_PER_RUN}s" --json \
      >"$D/$label-$n.json" &
    gens+=($!)
  done
  wait "${gens[@]}"
  for p in "${nodes[@]}"; do kill "$p"; done
  wait "${nodes[@]}" 2>/dev/null || true
  python3 - "$label" "$D" <<'P'
import glob, json, sys
label, d = sys.argv[1], sys.argv[2]
accepted, elapsed, status = 0, 0.0, {}
for f in glob.glob(f"{d}/{label}-*.json"):
    r = json.load(open(f))
    accepted += r["status"].get("accepted", 0)
    elapsed = max(elapsed, r["elapsed_s"])
    for k, v in r["status"].items():
        status[k] = status.get(k, 0) + v
print(f"{label:<14} {accepted / elapsed:>8.0f} accepted/s   answers {status}")
P
}

config rocksdb "" >"$D/rocksdb.ports"
PG="backend = \"postgres\"
url = \"$URL\"
pool_size = 4"
config pg_a "$PG" >"$D/pg_a.ports"
config pg_b "$PG" >"$D/pg_b.ports"
"$B" migrate -c "$D/pg_a.toml" >/dev/null
echo "ledger         admission    (closed loop, 32 connections per node, ${SECONDS_PER_RUN}s)"
run rocksdb rocksdb
run postgres_1 pg_a
run postgres_2 pg_a pg_b
