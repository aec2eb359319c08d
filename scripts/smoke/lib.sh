# Shared by serve.sh and proxy.sh, which source it; not run on its own.

# smoke_store DB: prepares a fresh store for the run and sets STORE (sqlite
# or pg), DSN, and for PostgreSQL SCHEMA and PSQL. A SQLite file (and its
# -wal/-shm) is removed; a PostgreSQL schema (the DSN's search_path) is
# dropped and created with psql.
smoke_store() {
	SCHEMA=
	case $1 in
	postgres://* | postgresql://*)
		STORE=pg
		DSN=$1
		SCHEMA=$(printf '%s' "$1" | sed -n 's/.*[?&]search_path=\([^&]*\).*/\1/p')
		if [ -z "$SCHEMA" ]; then echo "$0: the PostgreSQL DSN needs search_path=SCHEMA" >&2; exit 2; fi
		if ! printf '%s' "$SCHEMA" | grep -Eq '^[a-z_][a-z0-9_]*$'; then echo "$0: schema name $SCHEMA: use [a-z0-9_]" >&2; exit 2; fi
		PSQL=(psql -X -q -v ON_ERROR_STOP=1 -h 127.0.0.1 -U postgres test)
		"${PSQL[@]}" -c "SET client_min_messages = warning; DROP SCHEMA IF EXISTS $SCHEMA CASCADE; CREATE SCHEMA $SCHEMA" >/dev/null || { echo "$0: cannot create schema $SCHEMA" >&2; exit 2; }
		;;
	*)
		STORE=sqlite
		FILE=${1#sqlite:}
		mkdir -p "$(dirname "$FILE")"
		rm -f "$FILE" "$FILE-wal" "$FILE-shm"
		DSN=sqlite:$FILE
		;;
	esac
}

# smoke_cleanup_store: drops the PostgreSQL schema and removes $WORK,
# unless KEEP=1.
smoke_cleanup_store() {
	if [ "$STORE" = pg ] && [ "${KEEP:-0}" != 1 ]; then
		"${PSQL[@]}" -c "SET client_min_messages = warning; DROP SCHEMA IF EXISTS $SCHEMA CASCADE" >/dev/null 2>&1
	fi
	[ "${KEEP:-0}" = 1 ] && echo "# kept: $WORK ($DSN)" || rm -rf "$WORK"
}

N=0 PASSED=0
ok() { N=$((N + 1)); PASSED=$((PASSED + 1)); echo "ok $N $1"; }
fail() { N=$((N + 1)); echo "FAIL $N $1 (got $2)"; }
# expect DESC WANT GOT
expect() {
	if [ "$3" = "$2" ]; then ok "$1"; else fail "$1" "$3"; fi
}
short() { head -c 300 "$1" | tr '\n' ' '; }

# expect_sigterm_exit0 DESC PID WHAT: sends SIGTERM to the process PID
# (WHAT names it) and checks that it exits 0; one that had exited already
# fails the check.
expect_sigterm_exit0() {
	local rc
	if kill -0 "$2" 2>/dev/null; then
		kill -TERM "$2"
		wait "$2"
		rc=$?
		expect "$1" 0 "$rc"
	else
		wait "$2"
		rc=$?
		fail "$1" "$3 had already exited with $rc"
	fi
}
