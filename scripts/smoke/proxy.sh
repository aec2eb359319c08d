#!/usr/bin/env bash
# End-to-end checks of `opledger proxy` (the Idempotency-Key proxy) in front of upstream.py.
#
#   proxy.sh BIN DB
#
# DB: a SQLite file path (or sqlite:PATH) or a PostgreSQL DSN with search_path=SCHEMA,
#     prepared and cleaned up as serve.sh does (KEEP=1 keeps them).
# Ports: the first two free ones in 18970-18999 (or UP_PORT / PROXY_PORT), at 127.0.0.1.
#
# Prints `ok N desc` / `FAIL N desc (got ...)`, then `PASS x/y`; exits 1 on any failure.
set -u

if [ $# -ne 2 ]; then
	echo "usage: $0 BIN DB" >&2
	exit 2
fi
BIN=$1 DB=$2
HERE=$(cd "$(dirname "$0")" && pwd)
. "$HERE/lib.sh"
case $BIN in /*) ;; *) BIN=$PWD/$BIN ;; esac
[ -x "$BIN" ] || { echo "$0: $BIN is not an executable" >&2; exit 2; }
for tool in curl jq python3; do command -v $tool >/dev/null || { echo "$0: needs $tool" >&2; exit 2; }; done

WORK=$(mktemp -d /tmp/e2e-proxy.XXXXXX)
smoke_store "$DB"

free_port() { # free_port FROM TO [EXCEPT]
	python3 - "$@" <<'EOF'
import socket, sys
lo, hi = int(sys.argv[1]), int(sys.argv[2])
skip = int(sys.argv[3]) if len(sys.argv) > 3 else -1
for p in range(lo, hi + 1):
    if p == skip:
        continue
    s = socket.socket()
    try:
        s.bind(("127.0.0.1", p))
    except OSError:
        continue
    finally:
        s.close()
    print(p)
    break
EOF
}
UP_PORT=${UP_PORT:-$(free_port 18970 18999)}
PROXY_PORT=${PROXY_PORT:-$(free_port 18970 18999 "$UP_PORT")}
[ -n "$UP_PORT" ] && [ -n "$PROXY_PORT" ] || { echo "$0: no free port in 18970-18999" >&2; exit 2; }
UP=http://127.0.0.1:$UP_PORT
PX=http://127.0.0.1:$PROXY_PORT

UPID= PPID_=
cleanup() {
	for pid in $PPID_ $UPID; do
		if kill -0 "$pid" 2>/dev/null; then
			kill -TERM "$pid" 2>/dev/null
			wait "$pid" 2>/dev/null
		fi
	done
	smoke_cleanup_store
}
trap cleanup EXIT

hdr() { tr -d '\r' <"$1" | sed -n "s/^$2: //Ip" | head -1; }
AUTH='Authorization: Bearer sk_test_e2e'
# post NAME PATH BODY [KEY]: POST through the proxy; $WORK/NAME.body, $WORK/NAME.headers; sets CODE
post() {
	: >"$WORK/$1.body"
	: >"$WORK/$1.headers"
	local args=(-s -m 20 -o "$WORK/$1.body" -D "$WORK/$1.headers" -w '%{http_code}' -X POST -H "$AUTH" -H 'Content-Type: application/json' --data-binary "$3")
	[ -n "${4:-}" ] && args+=(-H "Idempotency-Key: $4")
	CODE=$(curl "${args[@]}" "$PX$2")
}
upcount() { curl -s -m 10 "$UP/count" | jq -r .count 2>/dev/null; }

echo "# store $STORE: $DSN; upstream $UP; proxy $PX; binary $BIN"

# 1. upstream
python3 "$HERE/upstream.py" "$UP_PORT" >"$WORK/up.out" 2>"$WORK/up.log" &
UPID=$!
for _ in $(seq 1 50); do grep -q listening "$WORK/up.out" 2>/dev/null && break; sleep 0.1; done
C=$(upcount)
if [ "$C" = 0 ]; then ok "upstream upstream.py answers GET /count 0"; else fail "upstream upstream.py answers GET /count 0" "'$C' $(short "$WORK/up.log")"; fi

# 2. proxy
"$BIN" proxy --listen "127.0.0.1:$PROXY_PORT" --upstream "$UP" --owner e2e-team --db "$DSN" >"$WORK/proxy.log" 2>&1 &
PPID_=$!
for _ in $(seq 1 100); do
	curl -s -m 2 -o /dev/null "$PX/count" && break
	kill -0 "$PPID_" 2>/dev/null || break
	sleep 0.1
done
C=$(curl -s -m 10 "$PX/count" | jq -r .count 2>/dev/null)
if [ "$C" = 0 ]; then ok "proxy up: GET passes straight through (GET /count 0)"; else fail "proxy up: GET passes straight through (GET /count 0)" "'$C' $(tail -5 "$WORK/proxy.log" | tr '\n' ' ')"; fi

# 3. first POST with a key
post first /invoices '{"amount":120}' order-17-invoice
if [ "$CODE" = 201 ] && [ "$(jq -r .count "$WORK/first.body")" = 1 ] && [ -z "$(hdr "$WORK/first.headers" Idempotent-Replayed)" ]; then ok "first POST with Idempotency-Key 201, forwarded (count 1)"; else fail "first POST with Idempotency-Key 201, forwarded (count 1)" "$CODE: $(short "$WORK/first.body")"; fi

# 4. its repeat: the saved answer, byte for byte
post repeat /invoices '{"amount":120}' order-17-invoice
if [ "$CODE" = 201 ] && cmp -s "$WORK/first.body" "$WORK/repeat.body" && [ "$(hdr "$WORK/repeat.headers" Idempotent-Replayed)" = true ] &&
	[ "$(hdr "$WORK/repeat.headers" Content-Type)" = "$(hdr "$WORK/first.headers" Content-Type)" ]; then
	ok "repeat replayed byte for byte: 201, identical body and Content-Type, Idempotent-Replayed: true"
else
	fail "repeat replayed byte for byte: 201, identical body and Content-Type, Idempotent-Replayed: true" "$CODE replayed='$(hdr "$WORK/repeat.headers" Idempotent-Replayed)': $(short "$WORK/repeat.body") vs $(short "$WORK/first.body")"
fi

# 5. same key, other body
post changed /invoices '{"amount":121}' order-17-invoice
if [ "$CODE" = 422 ] && jq -r .type "$WORK/changed.body" | grep -q fingerprint_mismatch; then ok "same key, changed body 422 fingerprint_mismatch"; else fail "same key, changed body 422 fingerprint_mismatch" "$CODE: $(short "$WORK/changed.body")"; fi

# 6. no key on a protected method
post nokey /invoices '{"amount":5}'
if [ "$CODE" = 400 ] && jq -r .type "$WORK/nokey.body" | grep -q idempotency_key_required; then ok "POST without Idempotency-Key 400 idempotency_key_required"; else fail "POST without Idempotency-Key 400 idempotency_key_required" "$CODE: $(short "$WORK/nokey.body")"; fi

# 7. a second key
post second /invoices '{"amount":300}' order-18-invoice
if [ "$CODE" = 201 ] && [ "$(jq -r .count "$WORK/second.body")" = 2 ]; then ok "second key 201, forwarded (count 2)"; else fail "second key 201, forwarded (count 2)" "$CODE: $(short "$WORK/second.body")"; fi

# 8. the upstream saw exactly two POSTs
C=$(upcount)
if [ "$C" = 2 ]; then ok "upstream received exactly 2 POSTs"; else fail "upstream received exactly 2 POSTs" "$C"; fi

# 9. the ledger holds them
"$BIN" ops list --db "$DSN" --json >"$WORK/list.out" 2>"$WORK/list.err"
rc=$?
SUMMARY=$(jq -rs '[.[] | .state + ":" + .destination + ":" + .owner] | sort | join(",")' "$WORK/list.out" 2>/dev/null)
if [ $rc = 0 ] && [ "$SUMMARY" = "succeeded:proxy:upstream:e2e-team,succeeded:proxy:upstream:e2e-team" ]; then ok "ops list --db shows the 2 operations (succeeded, proxy:upstream, owner e2e-team)"; else fail "ops list --db shows the 2 operations (succeeded, proxy:upstream, owner e2e-team)" "exit $rc: '$SUMMARY' $(short "$WORK/list.err")"; fi
"$BIN" ops list --db "$DSN" >"$WORK/list.txt" 2>&1
rc=$?
if [ $rc = 0 ] && [ "$(grep -c 'proxy:upstream:' "$WORK/list.txt")" = 2 ]; then ok "ops list --db (text) exit 0, 2 proxy:upstream: keys"; else fail "ops list --db (text) exit 0, 2 proxy:upstream: keys" "exit $rc: $(short "$WORK/list.txt")"; fi

# 10. SIGTERM
expect_sigterm_exit0 "proxy exits 0 on SIGTERM" "$PPID_" proxy
PPID_=

echo "PASS $PASSED/$N"
[ "$PASSED" = "$N" ]
