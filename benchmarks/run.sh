#!/bin/sh
# Runs the side-by-side benchmarks and writes BENCHMARKS.md at the root of
# the repository. From the root of a clean clone:
#
#	sh benchmarks/run.sh
#
# ROUNDS (default 7) is how many times the whole suite runs; BENCHTIME
# (default 100ms) is each benchmark's -benchtime. The benchmark binary is
# built once, so every round times the same code; report/ takes the medians.
#
# ONLY=fastest runs only the benchmarks of the section "FastestFirst under
# real latencies" and rewrites that section alone, saying so in it;
# ONLY=load likewise for the section "Server-reported load"; ONLY=probe
# for the section on probes (with the root module's BenchmarkPrequal*,
# if there are any); ONLY=guards for the section on the guards, the root
# module's BenchmarkGuard* (panic mode, the ejection cap and the others).
# A full run (ONLY unset) rewrites every section it measures and keeps the
# ones it does not (the guards, hedging) where they were in BENCHMARKS.md.
set -eu

ROUNDS=${ROUNDS:-7}
BENCHTIME=${BENCHTIME:-100ms}
ONLY=${ONLY:-}
here=$(cd "$(dirname "$0")" && pwd)
root=$(dirname "$here")
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

cd "$here"
go test -c -o "$work/compare.test" .
go build -o "$work/report" ./report

cpu=$(lscpu 2>/dev/null | sed -n 's/^Model name: *//p' | head -n 1)
if [ -z "$cpu" ]; then
	cpu=$(sed -n 's/^model name[[:space:]]*: *//p' /proc/cpuinfo 2>/dev/null | head -n 1)
fi

# write_section rewrites section $1 of BENCHMARKS.md (its title: $2) from
# the rounds' files, with the load average measured before them.
write_section() {
	"$work/report" -only "$1" -load "$load" -out "$root/BENCHMARKS.md" -cmd "ONLY=$1 ROUNDS=$ROUNDS BENCHTIME=$BENCHTIME sh benchmarks/run.sh" \
		-cpu "${cpu:-unknown CPU}" -cores "$(nproc 2>/dev/null || echo '?')" \
		-go "$(go env GOVERSION)" -date "$(date -u '+%Y-%m-%d %H:%M UTC')" \
		-benchtime "$BENCHTIME" "$work"/round*.txt
	echo "rewrote the $2 section of $root/BENCHMARKS.md" >&2
}

if [ "$ONLY" = load ]; then
	# The gRPC interceptors' benchmarks live in their own module.
	(cd "$root/loadreport/grpcreport" && go test -c -o "$work/grpcreport.test" .)
	load=$(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null || true)
	i=1
	while [ "$i" -le "$ROUNDS" ]; do
		echo "round $i of $ROUNDS" >&2
		"$work/compare.test" -test.run '^$' -test.benchtime "$BENCHTIME" \
			-test.bench 'ServerLoad|Compare/reported' >"$work/round$i.txt"
		(cd "$root/loadreport/grpcreport" && "$work/grpcreport.test" -test.run '^$' -test.benchtime "$BENCHTIME" \
			-test.bench '^Benchmark(UnaryInterceptor|Server)$') >>"$work/round$i.txt"
		i=$((i + 1))
	done
	write_section load "server-reported load"
	exit 0
fi

if [ "$ONLY" = probe ]; then
	# The gRPC probe's benchmarks live in grpcreport's module, the Prequal
	# picker's (if any) in the root module.
	(cd "$root/loadreport/grpcreport" && go test -c -o "$work/grpcreport.test" .)
	prequal=
	if grep -qs '^func BenchmarkPrequal' "$root"/*_test.go; then
		(cd "$root" && go test -c -o "$work/root.test" .)
		prequal=1
	fi
	load=$(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null || true)
	i=1
	while [ "$i" -le "$ROUNDS" ]; do
		echo "round $i of $ROUNDS" >&2
		"$work/compare.test" -test.run '^$' -test.benchtime "$BENCHTIME" \
			-test.bench '^BenchmarkProbe$' >"$work/round$i.txt"
		(cd "$root/loadreport/grpcreport" && "$work/grpcreport.test" -test.run '^$' -test.benchtime "$BENCHTIME" \
			-test.bench '^BenchmarkProbeService$') >>"$work/round$i.txt"
		if [ -n "$prequal" ]; then
			(cd "$root" && "$work/root.test" -test.run '^$' -test.benchtime "$BENCHTIME" \
				-test.bench '^BenchmarkPrequal') >>"$work/round$i.txt"
		fi
		i=$((i + 1))
	done
	write_section probe "probes"
	exit 0
fi

if [ "$ONLY" = guards ]; then
	# The guards' benchmarks live in the root module.
	(cd "$root" && go test -c -o "$work/root.test" .)
	load=$(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null || true)
	i=1
	while [ "$i" -le "$ROUNDS" ]; do
		echo "round $i of $ROUNDS" >&2
		(cd "$root" && "$work/root.test" -test.run '^$' -test.benchtime "$BENCHTIME" \
			-test.bench '^BenchmarkGuard') >"$work/round$i.txt"
		i=$((i + 1))
	done
	write_section guards "guards"
	exit 0
fi

if [ "$ONLY" = fastest ]; then
	load=$(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null || true)
	i=1
	while [ "$i" -le "$ROUNDS" ]; do
		echo "round $i of $ROUNDS" >&2
		"$work/compare.test" -test.run '^$' -test.benchtime "$BENCHTIME" \
			-test.bench 'Compare/feedback[^/]*/(lbgo.FastestFirst|lbgo.P2CPeakEWMA|kratos.p2c)/|Warmup/(lbgo.FastestFirst|lbgo.P2CPeakEWMA|kratos.p2c)/' >"$work/round$i.txt"
		i=$((i + 1))
	done
	write_section fastest "FastestFirst"
	exit 0
fi

i=1
while [ "$i" -le "$ROUNDS" ]; do
	echo "round $i of $ROUNDS" >&2
	"$work/compare.test" -test.run '^$' -test.bench . -test.benchtime "$BENCHTIME" >"$work/round$i.txt"
	# The parallel picks of the lock-free and feedback pickers again, on
	# one core and on every core, for the report's table of cores.
	"$work/compare.test" -test.run '^$' -test.cpu "1,$(nproc 2>/dev/null || echo 2)" -test.benchtime "$BENCHTIME" \
		-test.bench 'Compare/(smooth|feedback|consistent)/(lbgo|kratos|kitex)[^/]*/peers=(10|1000|10000)/parallel' >"$work/cores$i.txt"
	i=$((i + 1))
done

cmd="sh benchmarks/run.sh"
if [ "$ROUNDS" != 7 ] || [ "$BENCHTIME" != 100ms ]; then
	cmd="ROUNDS=$ROUNDS BENCHTIME=$BENCHTIME $cmd"
fi
"$work/report" -out "$root/BENCHMARKS.md" -cmd "$cmd" \
	-cpu "${cpu:-unknown CPU}" -cores "$(nproc 2>/dev/null || echo '?')" \
	-go "$(go env GOVERSION)" -date "$(date -u '+%Y-%m-%d %H:%M UTC')" \
	-benchtime "$BENCHTIME" -cores-rounds "$(ls "$work"/cores*.txt | tr '\n' ',')" "$work"/round*.txt
echo "wrote $root/BENCHMARKS.md" >&2
