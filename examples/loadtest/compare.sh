#!/usr/bin/env bash
# Puts the reverse proxy of examples/reverseproxy next to nginx, both in
# front of the same loopback backends with the same upstream block, and
# measures each with `loadtest run`, alternately, ROUNDS times. nginx runs
# in the foreground with its own prefix under a temporary directory,
# listens on 127.0.0.1 only, and is stopped at the end, as is everything
# else this script starts.
#
#   examples/loadtest/compare.sh                 # defaults below
#   ROUNDS=5 DUR=10s CONC=64 ALGO=roundrobin examples/loadtest/compare.sh
#
# Run from anywhere in a clone; needs go and nginx (nginx-core).
set -euo pipefail
cd "$(dirname "$0")/../.."

ROUNDS=${ROUNDS:-5}
DUR=${DUR:-10s}
WARMUP=${WARMUP:-2s}
CONC=${CONC:-32}
ALGO=${ALGO:-SmoothWRR}
SIZE=${SIZE:-128}
DELAY=${DELAY:-0s}
WORKERS=${WORKERS:-auto}  # nginx worker_processes; the Go proxy uses every core
BASE=${BASE:-18000}       # ports BASE+1..BASE+3 backends, BASE+80 proxy, BASE+81 nginx

nginx_bin=$(command -v nginx || echo /usr/sbin/nginx)
backends="127.0.0.1:$((BASE + 1)),127.0.0.1:$((BASE + 2)),127.0.0.1:$((BASE + 3))"
proxy_addr="127.0.0.1:$((BASE + 80))"
nginx_addr="127.0.0.1:$((BASE + 81))"

work=$(mktemp -d)
chmod 755 "$work"
pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

go build -o "$work/reverseproxy" ./examples/reverseproxy
go build -o "$work/loadtest" ./examples/loadtest

# The same upstream block for both: three servers, weight 1, max_fails 1,
# fail_timeout 10s, idle connections kept to the backends, and the same
# retry conditions as the Go proxy (package balancerhttp).
servers=""
for b in ${backends//,/ }; do
  servers+="    server $b max_fails=1 fail_timeout=10s;"$'\n'
done
mkdir -p "$work/nginx/conf" "$work/nginx/logs" "$work/nginx/temp"
cat >"$work/nginx/conf/nginx.conf" <<EOF
worker_processes $WORKERS;
pid $work/nginx/logs/nginx.pid;
error_log $work/nginx/logs/error.log warn;
events { worker_connections 4096; }
http {
  access_log off;
  client_body_temp_path $work/nginx/temp/body;
  proxy_temp_path $work/nginx/temp/proxy;
  fastcgi_temp_path $work/nginx/temp/fastcgi;
  uwsgi_temp_path $work/nginx/temp/uwsgi;
  scgi_temp_path $work/nginx/temp/scgi;
  upstream app {
$servers    keepalive 256;
  }
  server {
    listen $nginx_addr;
    location / {
      proxy_pass http://app;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_set_header Host \$host;
      proxy_set_header X-Forwarded-For \$proxy_add_x_forwarded_for;
      proxy_next_upstream error timeout http_500 http_502 http_503 http_504;
    }
  }
}
EOF

"$work/loadtest" backends -addrs "$backends" -size "$SIZE" -delay "$DELAY" &
pids+=($!)
"$work/reverseproxy" -listen "$proxy_addr" -backends "$backends" -algo "$ALGO" \
  -max-fails 1 -fail-timeout 10s -quiet &
pids+=($!)
"$nginx_bin" -p "$work/nginx" -c conf/nginx.conf -g 'daemon off;' &
pids+=($!)

# Wait until all three listen.
for addr in ${backends//,/ } "$proxy_addr" "$nginx_addr"; do
  for _ in $(seq 100); do
    if (exec 3<>"/dev/tcp/${addr%:*}/${addr#*:}") 2>/dev/null; then break; fi
    sleep 0.1
  done
done

results="$work/results"
echo "# $(date -u +%FT%TZ) $(nproc) cores; $ROUNDS rounds of ${DUR} (+${WARMUP} warm-up), $CONC in flight, -algo $ALGO, ${SIZE}-byte answers, backend delay $DELAY"
echo "# $("$nginx_bin" -v 2>&1); $(go version)"
for i in $(seq "$ROUNDS"); do
  for target in proxy nginx; do
    addr=$proxy_addr
    [ "$target" = nginx ] && addr=$nginx_addr
    load=$(cut -d' ' -f1-3 /proc/loadavg)
    "$work/loadtest" run -url "http://$addr/" -c "$CONC" -d "$DUR" -warmup "$WARMUP" \
      -label "round=$i target=$target load=[$load] " | tee -a "$results"
  done
done

# The median of the rounds, per target: requests per second and p99 (ms).
awk '
  function ms(v) {
    if (v ~ /µs$/) return substr(v, 1, length(v) - 2) / 1000
    if (v ~ /ms$/) return substr(v, 1, length(v) - 2) + 0
    if (v ~ /s$/) return substr(v, 1, length(v) - 1) * 1000
    return v + 0
  }
  function median(a, n,    i, j, t) {
    for (i = 2; i <= n; i++) for (j = i; j > 1 && a[j-1] > a[j]; j--) { t = a[j]; a[j] = a[j-1]; a[j-1] = t }
    return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
  }
  {
    for (i = 1; i <= NF; i++) { split($i, kv, "="); f[kv[1]] = kv[2] }
    t = f["target"]; n[t]++
    rps[t, n[t]] = f["rps"]; p99[t, n[t]] = ms(f["p99"])
  }
  END {
    for (t in n) {
      for (i = 1; i <= n[t]; i++) { r[i] = rps[t, i]; q[i] = p99[t, i] }
      printf "median of %d: target=%s rps=%.0f p99=%.2fms\n", n[t], t, median(r, n[t]), median(q, n[t])
    }
  }' "$results"
