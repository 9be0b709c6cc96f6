#!/bin/sh
# Runs the side-by-side benchmarks and writes BENCHMARKS.md at the root of
# the repository. From the root of a clean clone:
#
#	sh benchmarks/run.sh
#
# ROUNDS (default 7) is how many times the whole suite runs; BENCHTIME
# (default 100ms) is each benchmark's -benchtime. The benchmark binary is
# built once, so every round times the same code; report/ takes the medians.
set -eu

ROUNDS=${ROUNDS:-7}
BENCHTIME=${BENCHTIME:-100ms}
here=$(cd "$(dirname "$0")" && pwd)
root=$(dirname "$here")
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

cd "$here"
go test -c -o "$work/compare.test" .
go build -o "$work/report" ./report

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
cpu=$(lscpu 2>/dev/null | sed -n 's/^Model name: *//p' | head -n 1)
if [ -z "$cpu" ]; then
	cpu=$(sed -n 's/^model name[[:space:]]*: *//p' /proc/cpuinfo 2>/dev/null | head -n 1)
fi
"$work/report" -out "$root/BENCHMARKS.md" -cmd "$cmd" \
	-cpu "${cpu:-unknown CPU}" -cores "$(nproc 2>/dev/null || echo '?')" \
	-go "$(go env GOVERSION)" -date "$(date -u '+%Y-%m-%d %H:%M UTC')" \
	-benchtime "$BENCHTIME" -cores-rounds "$(ls "$work"/cores*.txt | tr '\n' ',')" "$work"/round*.txt
echo "wrote $root/BENCHMARKS.md" >&2
