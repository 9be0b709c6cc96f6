#!/bin/sh
# Times the hedging path's cost per request and prints the table of
# BENCHMARKS.md's section "Hedging: the cost per request". From the root
# of a clean clone:
#
#	sh benchmarks/hedging.sh
#
# ROUNDS (default 5) is how many times the benchmarks run; BENCHTIME
# (default 200ms) is each one's -benchtime. The test binaries are built
# once, so every round times the same code. A time is the median over the
# rounds; a ratio (and an extra time) is the median over the rounds of the
# ratio (the difference) to the baseline measured in the same round:
# Attempts.Run for the attempt loop, the Transport without Hedging for
# the Transport.
set -eu

ROUNDS=${ROUNDS:-5}
BENCHTIME=${BENCHTIME:-200ms}
here=$(cd "$(dirname "$0")" && pwd)
root=$(dirname "$here")
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

cd "$root"
go test -c -o "$work/root.test" .
go test -c -o "$work/http.test" ./balancerhttp

i=1
while [ "$i" -le "$ROUNDS" ]; do
	"$work/root.test" -test.run '^$' -test.bench '^BenchmarkAttempts$' -test.benchtime "$BENCHTIME" -test.benchmem >"$work/round$i.txt"
	(cd balancerhttp && "$work/http.test" -test.run '^$' -test.bench '^BenchmarkTransport_(roundTrip|loopback)$' -test.benchtime "$BENCHTIME" -test.benchmem) >>"$work/round$i.txt"
	i=$((i + 1))
done

awk -v rounds="$ROUNDS" '
function median(a, n,    i, j, t) {
	for (i = 2; i <= n; i++) {
		t = a[i]
		for (j = i - 1; j >= 1 && a[j] > t; j--) a[j + 1] = a[j]
		a[j + 1] = t
	}
	return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
}
function baseline(name,    g) {
	g = name
	sub(/\/[^\/]*$/, "", g)
	return g == "BenchmarkAttempts" ? g "/run" : g "/off"
}
FNR == 1 { round++ }
/^Benchmark/ {
	name = $1
	sub(/-[0-9]+$/, "", name)
	if (!(name in seen)) { seen[name] = 1; order[++names] = name }
	ns[name, round] = $3
	bytes[name] = $5
	allocs[name] = $7
}
END {
	print "| benchmark | ns/op | B/op | allocs/op | × baseline | + ns over baseline |"
	print "|---|---:|---:|---:|---:|---:|"
	for (k = 1; k <= names; k++) {
		name = order[k]
		b = baseline(name)
		n = 0
		for (r = 1; r <= rounds; r++) {
			if ((name, r) in ns) { t[++n] = ns[name, r]; q[n] = ns[name, r] / ns[b, r]; d[n] = ns[name, r] - ns[b, r] }
		}
		tm = median(t, n); qm = median(q, n); dm = median(d, n)
		if (name == b) {
			printf "| %s | %.0f | %s | %s | 1 (baseline) | |\n", name, tm, bytes[name], allocs[name]
		} else {
			printf "| %s | %.0f | %s | %s | %.2f | %.0f |\n", name, tm, bytes[name], allocs[name], qm, dm
		}
	}
}' "$work"/round*.txt
