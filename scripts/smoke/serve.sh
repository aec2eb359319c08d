#!/usr/bin/env bash
# End-to-end checks of an opledger binary: CLI + `opledger serve` HTTP API.
#
#   serve.sh BIN DB PORT
#
# DB: a SQLite file path (/tmp/x/ledger.db, or sqlite:/tmp/x/ledger.db) or a
#     PostgreSQL DSN (postgres://postgres@127.0.0.1:5432/test?sslmode=disable&search_path=e2eh_x).
#     A SQLite file (and its -wal/-shm) is removed first: the run needs a fresh ledger.
#     A PostgreSQL schema (search_path) is dropped and created with psql first and
#     dropped at the end (KEEP=1 keeps it, and keeps the SQLite file anyway).
# PORT: the port `opledger serve` listens on, at 127.0.0.1.
#
# Prints `ok N desc` / `FAIL N desc (got ...)`, then `PASS x/y`; exits 1 on any failure.
set -u

if [ $# -ne 3 ]; then
	echo "usage: $0 BIN DB PORT" >&2
	exit 2
fi
BIN=$1 DB=$2 PORT=$3
. "$(cd "$(dirname "$0")" && pwd)/lib.sh"
case $BIN in /*) ;; *) BIN=$PWD/$BIN ;; esac
[ -x "$BIN" ] || { echo "$0: $BIN is not an executable" >&2; exit 2; }
for tool in curl jq; do command -v $tool >/dev/null || { echo "$0: needs $tool" >&2; exit 2; }; done

WORK=$(mktemp -d /tmp/e2e-run.XXXXXX)
smoke_store "$DB"

BASE=http://127.0.0.1:$PORT
SPID=
cleanup() {
	if [ -n "$SPID" ] && kill -0 "$SPID" 2>/dev/null; then
		kill -TERM "$SPID" 2>/dev/null
		wait "$SPID" 2>/dev/null
	fi
	smoke_cleanup_store
}
trap cleanup EXIT


# req METHOD PATH [BODY] [noauth]: sets CODE, writes the body to $WORK/body, headers to $WORK/headers
req() {
	: >"$WORK/body"
	: >"$WORK/headers"
	local args=(-s -m 20 -o "$WORK/body" -D "$WORK/headers" -w '%{http_code}' -X "$1")
	[ "${4:-}" = noauth ] || args+=(-H "Authorization: Bearer $TOKEN")
	[ -n "${3:-}" ] && args+=(-H 'Content-Type: application/json' --data-binary "$3")
	CODE=$(curl "${args[@]}" "$BASE$2")
	BODY=$(cat "$WORK/body")
}
# reqcheck DESC WANT METHOD PATH [BODY] [noauth]
reqcheck() {
	local desc=$1 want=$2
	shift 2
	req "$@"
	if [ "$CODE" = "$want" ]; then ok "$desc"; else fail "$desc" "$CODE: $(short "$WORK/body")"; fi
}
# jqbody FILTER: the filter applied to the last body
jqbody() { jq -r "$1" "$WORK/body" 2>/dev/null; }

echo "# store $STORE: $DSN; port $PORT; binary $BIN"

# 1. tokens create through the CLI
TOKEN=$("$BIN" tokens create --db "$DSN" --tenant acme --name e2e 2>"$WORK/tok.err")
rc=$?
if [ $rc = 0 ] && printf '%s' "$TOKEN" | grep -Eq '^opl_[A-Za-z0-9_-]+$'; then ok "tokens create --db prints a token"; else fail "tokens create --db prints a token" "exit $rc, '$TOKEN' $(short "$WORK/tok.err")"; fi

# 2. serve in the background, /readyz 200
"$BIN" serve --db "$DSN" --addr "127.0.0.1:$PORT" >"$WORK/serve.log" 2>&1 &
SPID=$!
for _ in $(seq 1 100); do
	curl -s -m 2 -o /dev/null "$BASE/healthz" && break
	kill -0 "$SPID" 2>/dev/null || break
	sleep 0.1
done
reqcheck "GET /readyz 200" 200 GET /readyz "" noauth
if [ "$CODE" != 200 ]; then echo "# serve log:"; sed 's/^/#   /' "$WORK/serve.log" | tail -20; fi

# 3. intents
INTENT='{"action":"crm.create_inquiry","destination":"crm","payload":{"submission":"847"}}'
reqcheck "PUT /v1/operations/K intent 201" 201 PUT /v1/operations/intake:I17:create "$INTENT"
req PUT /v1/operations/intake:I17:create "$INTENT"
if [ "$CODE" = 200 ] && [ "$(jqbody .state)" = pending ]; then ok "same PUT again 200 (state pending)"; else fail "same PUT again 200 (state pending)" "$CODE: $(short "$WORK/body")"; fi
req PUT /v1/operations/intake:I17:create '{"action":"crm.create_inquiry","destination":"crm","payload":{"submission":"848"}}'
if [ "$CODE" = 422 ] && jqbody .type | grep -q fingerprint_mismatch; then ok "PUT same key, changed payload 422 fingerprint_mismatch"; else fail "PUT same key, changed payload 422 fingerprint_mismatch" "$CODE: $(short "$WORK/body")"; fi

# 4. claims
req POST /v1/operations/intake:I17:create/claim '{"worker":"sh-1","lease_seconds":60,"dispatch":true}'
ATT=$(jqbody .attempt_id) FT=$(jqbody .fencing_token)
if [ "$CODE" = 201 ] && [ -n "$ATT" ] && [ "$ATT" != null ] && [ "$(jqbody .operation.dispatched)" = true ]; then ok "claim with dispatch 201 (attempt $ATT, token $FT, dispatched)"; else fail "claim with dispatch 201" "$CODE: $(short "$WORK/body")"; fi
req POST /v1/operations/intake:I17:create/claim '{"worker":"sh-2"}'
if [ "$CODE" = 409 ] && [ "$(jqbody .state)" = in_progress ]; then ok "second claim 409 (state in_progress)"; else fail "second claim 409 (state in_progress)" "$CODE: $(short "$WORK/body")"; fi
reqcheck "lease renewal 200" 200 POST "/v1/operations/intake:I17:create/attempts/$ATT/lease" "{\"fencing_token\":$FT,\"lease_seconds\":120}"
req POST "/v1/operations/intake:I17:create/attempts/$ATT/dispatch" "{\"fencing_token\":$((FT + 41))}"
if [ "$CODE" = 409 ] && grep -q 'it was issued token' "$WORK/body" && jqbody .type | grep -q stale_fencing_token; then ok "dispatch with a wrong fencing token 409 stale_fencing_token, 'it was issued token'"; else fail "dispatch with a wrong fencing token 409 stale_fencing_token, 'it was issued token'" "$CODE: $(short "$WORK/body")"; fi
req POST "/v1/operations/intake:I17:create/attempts/$ATT/outcome" "{\"fencing_token\":$FT,\"outcome\":\"succeeded\",\"destination_ref\":\"H42\"}"
if [ "$CODE" = 200 ] && [ "$(jqbody .state)" = succeeded ]; then ok "report outcome succeeded 200 (state succeeded)"; else fail "report outcome succeeded 200 (state succeeded)" "$CODE: $(short "$WORK/body")"; fi
req POST /v1/operations/intake:I17:create/claim '{"worker":"sh-3"}'
if [ "$CODE" = 200 ] && [ "$(jqbody .replayed)" = true ] && [ "$(jqbody .operation.destination_ref)" = H42 ]; then ok "claim after success 200 replayed (ref H42)"; else fail "claim after success 200 replayed (ref H42)" "$CODE: $(short "$WORK/body")"; fi

# 5. strict queries, authentication, keys
req GET '/v1/operations?bogus=1'
if [ "$CODE" = 400 ] && jqbody .detail | grep -q bogus; then ok "list with ?bogus=1 400 naming the parameter"; else fail "list with ?bogus=1 400 naming the parameter" "$CODE: $(short "$WORK/body")"; fi
reqcheck "list with ?state=done 400" 400 GET '/v1/operations?state=done'
req GET '/v1/operations?state=succeeded'
if [ "$CODE" = 200 ] && [ "$(jqbody '.items | length')" = 1 ]; then ok "list ?state=succeeded 200 with 1 item"; else fail "list ?state=succeeded 200 with 1 item" "$CODE: $(short "$WORK/body")"; fi
req GET /v1/operations "" noauth
if [ "$CODE" = 401 ] && jqbody .type | grep -q unauthorized; then ok "request without a token 401 unauthorized"; else fail "request without a token 401 unauthorized" "$CODE: $(short "$WORK/body")"; fi
req PUT /v1/operations/ana%40example.invalid "$INTENT"
if [ "$CODE" = 400 ] && jqbody .type | grep -q invalid_key && ! grep -qi -e 'ana' -e 'example\.invalid' -e '%40' "$WORK/body" && [ "$(jqbody 'has("instance")')" = false ]; then ok "e-mail key 400 invalid_key, no instance, address not echoed"; else fail "e-mail key 400 invalid_key, no instance, address not echoed" "$CODE: $(short "$WORK/body")"; fi

# 6. cancel (resolve)
reqcheck "PUT a second intent 201" 201 PUT /v1/operations/intake:I18:create '{"action":"crm.create_inquiry","destination":"crm","payload":{"submission":"900"}}'
req POST /v1/operations/intake:I18:create/resolve '{"decision":"cancel","destination_ref":"H43","reason":"not needed","operator":"e2e"}'
if [ "$CODE" = 400 ]; then ok "cancel with a destination_ref 400"; else fail "cancel with a destination_ref 400" "$CODE: $(short "$WORK/body")"; fi
req POST /v1/operations/intake:I18:create/resolve '{"decision":"cancel","reason":"not needed","operator":"e2e"}'
if [ "$CODE" = 200 ] && [ "$(jqbody .state)" = failed ]; then ok "plain cancel 200 (state failed)"; else fail "plain cancel 200 (state failed)" "$CODE: $(short "$WORK/body")"; fi

# 7. stats
req GET /v1/stats
if [ "$CODE" = 200 ] && [ "$(jqbody .operations_by_state.succeeded)" = 1 ] && [ "$(jqbody .operations_by_state.failed)" = 1 ] && [ "$(jqbody .confirmed_effects)" = 1 ]; then ok "GET /v1/stats 200 (1 succeeded, 1 failed, 1 confirmed effect)"; else fail "GET /v1/stats 200 (1 succeeded, 1 failed, 1 confirmed effect)" "$CODE: $(short "$WORK/body")"; fi

# 8. workflow
WF='{"owner":"e2e-team","steps":[{"name":"a","action":"crm.create_task","destination":"crm","payload":{"n":1}},{"name":"b","action":"email.send","destination":"email","payload":{"task":"{steps.a.ref}"}}]}'
reqcheck "PUT /v1/workflows/W 201" 201 PUT /v1/workflows/W "$WF"
reqcheck "same workflow PUT again 200" 200 PUT /v1/workflows/W "$WF"
req GET /v1/workflows/W
STEPS=$(jqbody '[.steps[] | .name + "=" + .state] | join(",")')
if [ "$CODE" = 200 ] && [ "$STEPS" = "a=pending,b=waiting" ]; then ok "GET /v1/workflows/W 200 (steps $STEPS)"; else fail "GET /v1/workflows/W 200 (steps a=pending,b=waiting)" "$CODE: steps '$STEPS' $(short "$WORK/body")"; fi
req POST /v1/workflows/W/resume
if [ "$CODE" = 200 ] && [ "$(jqbody .key)" = W ]; then ok "POST /v1/workflows/W/resume 200 (the workflow, status $(jqbody .status))"; else fail "POST /v1/workflows/W/resume 200" "$CODE: $(short "$WORK/body")"; fi
req PUT /v1/operations/W%2Fb '{"action":"email.send","destination":"email","payload":{"task":"x"}}'
if [ "$CODE" = 409 ] && jqbody .type | grep -q invalid_state; then ok "PUT of a waiting step's key W%2Fb 409 invalid_state"; else fail "PUT of a waiting step's key W%2Fb 409 invalid_state" "$CODE: $(short "$WORK/body")"; fi

# 9. metrics, OpenAPI, console
req GET /metrics "" noauth
if [ "$CODE" = 200 ] && grep -q '^opledger_operations{' "$WORK/body" && grep -q '^opledger_store_up 1' "$WORK/body"; then ok "GET /metrics 200 with opledger_ metrics (store_up 1)"; else fail "GET /metrics 200 with opledger_ metrics" "$CODE: $(grep -m3 opledger_ "$WORK/body" | tr '\n' ' ')"; fi
req GET /v1/openapi.json "" noauth
if [ "$CODE" = 200 ] && jqbody .openapi | grep -q '^3\.'; then ok "GET /v1/openapi.json 200 (OpenAPI $(jqbody .openapi))"; else fail "GET /v1/openapi.json 200" "$CODE: $(short "$WORK/body")"; fi
req GET / "" noauth
LOC=$(tr -d '\r' <"$WORK/headers" | sed -n 's/^[Ll]ocation: //p')
if [ "$CODE" = 303 ] && printf '%s' "$LOC" | grep -q '^/login'; then ok "console / 303 to $LOC"; else fail "console / 303 to /login" "$CODE Location '$LOC'"; fi

# 10. CLI against the store
"$BIN" ops list --db "$DSN" --tenant acme >"$WORK/list.out" 2>"$WORK/list.err"
rc=$?
if [ $rc = 0 ] && grep -q 'intake:I17:create' "$WORK/list.out" && grep -q 'intake:I18:create' "$WORK/list.out"; then ok "ops list --db --tenant acme exit 0, lists both operations"; else fail "ops list --db --tenant acme exit 0, lists both operations" "exit $rc: $(short "$WORK/list.out") $(short "$WORK/list.err")"; fi
"$BIN" ops show intake:I17:create --db "$DSN" --tenant acme >"$WORK/show.out" 2>"$WORK/show.err"
rc=$?
if [ $rc = 0 ] && grep -q succeeded "$WORK/show.out" && grep -q H42 "$WORK/show.out"; then ok "ops show KEY --db exit 0 (succeeded, H42)"; else fail "ops show KEY --db exit 0 (succeeded, H42)" "exit $rc: $(short "$WORK/show.out") $(short "$WORK/show.err")"; fi
"$BIN" ops show no:such:key --db "$DSN" --tenant acme >"$WORK/show2.out" 2>"$WORK/show2.err"
rc=$?
expect "ops show of an unknown key exits 1" 1 "$rc"
if [ "$STORE" = sqlite ]; then
	MISSING=$WORK/no-such-dir-ledger.db
	"$BIN" ops list --db "sqlite:$MISSING" >"$WORK/miss.out" 2>"$WORK/miss.err"
	rc=$?
	if [ $rc = 2 ] && [ ! -e "$MISSING" ]; then ok "ops list on a missing ledger file exits 2 and creates nothing"; else fail "ops list on a missing ledger file exits 2 and creates nothing" "exit $rc, exists: $([ -e "$MISSING" ] && echo yes || echo no) $(short "$WORK/miss.err")"; fi
else
	echo "skip - ops list on a missing ledger file exits 2 (SQLite only)"
fi
"$BIN" ops list --db "$DSN" --no-such-flag >"$WORK/flag.out" 2>"$WORK/flag.err"
expect "unknown flag exits 2" 2 $?

# 11. SIGTERM
expect_sigterm_exit0 "serve exits 0 on SIGTERM" "$SPID" serve
SPID=

echo "PASS $PASSED/$N"
[ "$PASSED" = "$N" ]
