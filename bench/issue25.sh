#!/usr/bin/env bash
# Runs issue 25's whole set of benchmarks in one go and prints their reports, each with PASS or
# FAIL against the issue's targets:
#
#   bench/gateway     Parley (SQLite, PostgreSQL) beside the fake model and a bare reverse proxy:
#                     streams/s, TTFT, PostgreSQL backends per 100 chats; with a CPU, mutex,
#                     block and allocation profile of Parley on SQLite at 32 in flight
#   bench/fanout      10,000 idle WebSockets + 1,000 SSE streams: memory per connection, broadcast
#   bench/fanout      50,000 idle WebSockets: total server memory
#   bench/longstream  1,000 streams at once, a chunk every 5 ms: store errors, resume from the
#                     database after a restart; then 2,000-chunk answers: memory per active stream
#
# Run it from anywhere in the repository; it needs PostgreSQL on 127.0.0.1:5432 (database test,
# trust auth) for the gateway's PostgreSQL path, and an open files hard limit (`ulimit -Hn`) above
# 50,000 to hold 50,000 connections (below it, the 50,000 figure is extrapolated from what fits). Everything goes into OUT (default: a new directory under /tmp), the
# reports into OUT/report.md. Environment: CHATS and ROUNDS (gateway: chats per loop, default
# 400, and rounds, default 3), WS and SSE (the first fanout, default 10000 and 1000), WS50K (the
# second, default 50000; 0 skips it), STREAMS (longstream, default 1000). About 15 minutes on the
# shared 2-core machine with the baseline code (its long streams then run into their 3-minute bound).
set -u
cd "$(dirname "$0")/.."
out=${OUT:-$(mktemp -d /tmp/issue25-XXXXXX)}
mkdir -p "$out"
echo "issue25: results in $out" >&2
go build -o "$out/parley" ./cmd/parley || exit 1
status=0
step() { # step NAME COMMAND...: runs a benchmark, its report to OUT/NAME.md, its log to OUT/NAME.log
	local name=$1
	shift
	echo "issue25: $name: $*" >&2
	if ! "$@" >"$out/$name.md" 2>"$out/$name.log"; then
		echo "issue25: $name failed; the end of its log:" >&2
		tail -n 20 "$out/$name.log" >&2
		status=1
	fi
}
step gateway go run ./bench/gateway -parley "$out/parley" -chats "${CHATS:-400}" -rounds "${ROUNDS:-3}" -profile "$out/profile"
step fanout-10k go run ./bench/fanout -parley "$out/parley" -ws "${WS:-10000}" -sse "${SSE:-1000}"
ws50k=${WS50K:-50000}
if [ "$ws50k" -gt 0 ]; then
	# Each side of a connection is a file: the server (and the client process) need ws50k + 512
	# open files. Where the hard limit is lower and cannot be raised (no CAP_SYS_RESOURCE, as on
	# the development machine: 20,000), hold what fits and extrapolate, saying so in the report.
	hard=$(ulimit -Hn)
	if [ "$hard" != unlimited ] && [ "$hard" -lt $((ws50k + 512)) ] && ! (ulimit -Hn $((ws50k + 512))) 2>/dev/null; then
		fits=$(((hard - 1000) / 1000 * 1000))
		echo "issue25: open files hard limit $hard: holding $fits WebSockets and extrapolating to $ws50k" >&2
		step fanout-50k go run ./bench/fanout -parley "$out/parley" -ws "$fits" -sse 0 -runs 0 -project "$ws50k"
	else
		step fanout-50k go run ./bench/fanout -parley "$out/parley" -ws "$ws50k" -sse 0 -runs 0
	fi
fi
step longstream go run ./bench/longstream -parley "$out/parley" -streams "${STREAMS:-1000}"
{
	echo "# issue 25 benchmarks, $(date -u '+%Y-%m-%d %H:%M UTC'), commit $(git rev-parse --short HEAD)$(git diff --quiet || echo ' (with uncommitted changes)')"
	for f in gateway fanout-10k fanout-50k longstream; do
		[ -f "$out/$f.md" ] || continue
		printf '\n## %s\n\n' "$f"
		cat "$out/$f.md"
	done
	printf '\n## verdicts\n'
	for f in gateway fanout-10k fanout-50k longstream; do
		[ -f "$out/$f.md" ] || continue
		printf '\n%s:\n\n| target | measured | verdict |\n|---|---|---|\n' "$f"
		grep -E '\| (PASS|FAIL)[^|]* \|$' "$out/$f.md"
	done
} >"$out/report.tmp" && mv "$out/report.tmp" "$out/report.md"
cat "$out/report.md"
exit $status
