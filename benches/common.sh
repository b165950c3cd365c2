# Shared by benches/e2e.sh and benches/soak.sh (sourced, not run): the loopback nginx they
# measure against or forward to, a free port, and the tmpfs warning. Expects `log` to be defined.

# Warns when DIR is on tmpfs, where fsync costs nothing.
warn_if_tmpfs() { # DIR
  if [ "$(stat -f -c %T "$1")" = "tmpfs" ]; then
    log "warning: $1 is on tmpfs: fsync costs nothing there; set WORK_DIR to a disk directory"
  fi
}

# Installs Debian's nginx when missing (its system service is not used) and sets NGINX.
ensure_nginx() {
  if ! command -v nginx >/dev/null 2>&1 && [ ! -x /usr/sbin/nginx ]; then
    log "== installing nginx (Debian package; its system service is not used)"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nginx >/dev/null
  fi
  NGINX="$(command -v nginx || echo /usr/sbin/nginx)"
}

# A TCP port on 127.0.0.1 that was free a moment ago.
# N distinct free loopback ports, one per line: all N are bound at once before any is released,
# so two servers of one run never get the same port (each call alone could repeat one).
free_ports() { python3 -c 'import socket, sys
socks = [socket.socket() for _ in range(int(sys.argv[1]))]
for s in socks: s.bind(("127.0.0.1", 0))
print("\n".join(str(s.getsockname()[1]) for s in socks))' "$1"; }

# Writes DIR/nginx.conf: its own instance (no daemon, no access log, temp paths under DIR)
# answering a static 200 `{"status":"ok"}` on 127.0.0.1:PORT with WORKERS worker processes.
write_nginx_conf() { # DIR PORT WORKERS CONNECTIONS_PER_WORKER
  mkdir -p "$1"
  cat >"$1/nginx.conf" <<CONF
worker_processes $3;
daemon off;
pid $1/nginx.pid;
error_log $1/error.log warn;
events { worker_connections $4; }
http {
  access_log off;
  client_body_temp_path $1/body;
  proxy_temp_path $1/proxy;
  fastcgi_temp_path $1/fastcgi;
  uwsgi_temp_path $1/uwsgi;
  scgi_temp_path $1/scgi;
  keepalive_requests 10000000;
  server {
    listen 127.0.0.1:$2;
    location / { return 200 '{"status":"ok"}'; }
  }
}
CONF
}
