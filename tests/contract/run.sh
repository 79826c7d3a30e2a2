#!/usr/bin/env bash
# The API contract, as a frontend team meets it (issue 13): validates the
# committed openapi/openapi.json as OpenAPI 3.1, generates a Python client
# (openapi-python-client) and a TypeScript client (openapi-typescript +
# openapi-fetch, type-checked by tsc) from it with no warnings, walks the
# README through each against a real `serve`, and runs schemathesis (every
# check, a fixed seed, a bounded number of examples) against `serve` on
# SQLite and on PostgreSQL.
#
# Usage: tests/contract/run.sh [path/to/qiwu-scheduler]
# The binary defaults to $CARGO_TARGET_DIR/debug/qiwu-scheduler. Tools are
# installed by tools.sh into QIWU_CONTRACT_TOOLS (outside the clone).
# Prints one line per check and, last, "contract: N passed, M failed".
set -uo pipefail
cd "$(dirname "$0")/../.."

TOOLS="${QIWU_CONTRACT_TOOLS:-${HOME:-/root}/.cache/qiwu-scheduler/contract-tools}"
BIN="${1:-${CARGO_TARGET_DIR:-target}/debug/qiwu-scheduler}"
POSTGRES="${QIWU_TEST_POSTGRES_URL:-postgres://postgres@127.0.0.1:5432}"
# Examples per operation and the seed: enough to reach every operation's
# edges in about a minute per database, the same cases on every run.
EXAMPLES="${QIWU_CONTRACT_EXAMPLES:-50}"
SEED="${QIWU_CONTRACT_SEED:-20261201}"
SECRET="contract-secret-0123456789abcdef"

passed=0
failed=0
ok() { echo "contract: ok: $*"; passed=$((passed + 1)); }
bad() { echo "contract: FAILED: $*" >&2; failed=$((failed + 1)); }

[[ -x "$BIN" ]] || { echo "contract: no binary at $BIN (build it first)" >&2; exit 1; }
BIN="$(cd "$(dirname "$BIN")" && pwd)/$(basename "$BIN")"
bash tests/contract/tools.sh || { echo "contract: cannot install the tools" >&2; exit 1; }
PY="$TOOLS/venv/bin"
NODE_BIN="$TOOLS/npm/node_modules/.bin"

WORK="$(mktemp -d)"
SERVER_PID=""
DATABASE=""
cleanup() {
  stop_serve
  [[ -n "$DATABASE" ]] && psql "$POSTGRES/postgres" -qc "DROP DATABASE IF EXISTS $DATABASE WITH (FORCE)" >/dev/null 2>&1
  rm -rf "$WORK"
}
trap cleanup EXIT

# Starts `serve` on the database URL $1 in its own directory; sets API
# and TOKEN.
start_serve() {
  local dir="$WORK/serve-$RANDOM"
  mkdir -p "$dir"
  (cd "$dir" && exec env QIWU_LISTEN=127.0.0.1:0 QIWU_DATABASE_URL="$1" \
    QIWU_JWT_SECRET="$SECRET" QIWU_TIMEZONE=UTC RUST_LOG=warn \
    "$BIN" serve >"$dir/stdout" 2>"$dir/stderr") &
  SERVER_PID=$!
  API=""
  for _ in $(seq 300); do
    API="$(grep -o 'listening on http://[0-9.:]*' "$dir/stdout" 2>/dev/null | head -n1 | sed 's/listening on //')"
    [[ -n "$API" ]] && break
    sleep 0.1
  done
  if [[ -z "$API" ]]; then
    echo "contract: serve did not start:" >&2
    cat "$dir/stderr" >&2
    return 1
  fi
  TOKEN="$(QIWU_JWT_SECRET="$SECRET" "$BIN" token --sub contract --super-admin)"
}

stop_serve() {
  if [[ -n "$SERVER_PID" ]]; then
    kill "$SERVER_PID" 2>/dev/null
    wait "$SERVER_PID" 2>/dev/null
    SERVER_PID=""
  fi
}

# Fails when a generator's output mentions a warning or an error.
quiet() { ! grep -Eiq '\bwarn(ing)?s?\b|\berrors?\b|⚠' "$1"; }

# 1. The committed document is valid OpenAPI 3.1.
if "$PY/openapi-spec-validator" openapi/openapi.json; then
  ok "openapi/openapi.json is valid OpenAPI 3.1 (openapi-spec-validator $("$PY/python" -c 'import importlib.metadata as m; print(m.version("openapi-spec-validator"))'))"
else
  bad "openapi-spec-validator"
fi

# 2. The generated clients: no warnings, and the TypeScript one type-checks.
python_client=false
if "$PY/openapi-python-client" generate --path openapi/openapi.json \
  --output-path "$WORK/python/qiwu_client" --meta none \
  --config tests/contract/openapi-python-client.yaml >"$WORK/python-gen.log" 2>&1 &&
  quiet "$WORK/python-gen.log"; then
  python_client=true
else
  cat "$WORK/python-gen.log" >&2
  bad "openapi-python-client generated with warnings or errors"
fi

ts_client=false
mkdir -p "$WORK/ts"
cp tests/contract/walkthrough.ts tests/contract/tsconfig.json "$WORK/ts/"
printf '{"name":"qiwu-contract","private":true,"type":"module"}\n' >"$WORK/ts/package.json"
ln -s "$TOOLS/npm/node_modules" "$WORK/ts/node_modules"
if "$NODE_BIN/openapi-typescript" openapi/openapi.json -o "$WORK/ts/schema.d.ts" >"$WORK/ts-gen.log" 2>&1 &&
  quiet "$WORK/ts-gen.log"; then
  if (cd "$WORK/ts" && "$NODE_BIN/tsc" --noEmit -p . && "$NODE_BIN/tsc" -p .) >"$WORK/tsc.log" 2>&1; then
    ts_client=true
  else
    cat "$WORK/tsc.log" >&2
    bad "tsc --noEmit on the TypeScript client"
  fi
else
  cat "$WORK/ts-gen.log" >&2
  bad "openapi-typescript generated with warnings or errors"
fi

# 3. The README walk-through through each client, against `serve`.
if start_serve "sqlite://$WORK/walkthrough.db"; then
  if $python_client; then
    if PYTHONPATH="$WORK/python" "$PY/python" tests/contract/walkthrough.py "$API" "$TOKEN"; then
      ok "README walk-through through the Python client (openapi-python-client $("$PY/openapi-python-client" --version | grep -o '[0-9.]*$'))"
    else
      bad "README walk-through through the Python client"
    fi
  fi
  if $ts_client; then
    if (cd "$WORK/ts" && QIWU_API="$API" QIWU_TOKEN="$TOKEN" node out/walkthrough.js); then
      ok "README walk-through through the TypeScript client (openapi-typescript $(node -p "require('$TOOLS/npm/node_modules/openapi-typescript/package.json').version"), openapi-fetch $(node -p "require('$TOOLS/npm/node_modules/openapi-fetch/package.json').version"), tsc $("$NODE_BIN/tsc" --version | grep -o '[0-9.]*$'))"
    else
      bad "README walk-through through the TypeScript client"
    fi
  fi
  stop_serve
else
  bad "serve for the walk-throughs"
fi

# 4. schemathesis against `serve` on each database.
schemathesis() { # name, database URL
  local name=$1 log="$WORK/schemathesis-$1.log"
  if ! start_serve "$2"; then
    bad "serve on $name for schemathesis"
    return
  fi
  "$PY/st" --config-file tests/contract/schemathesis.toml run "$API/openapi.json" \
    --header "Authorization: Bearer $TOKEN" \
    --seed "$SEED" --max-examples "$EXAMPLES" --workers 1 \
    --request-timeout 30 --no-color >"$log" 2>&1
  local status=$?
  stop_serve
  local cases failures
  cases="$(grep -Eo '[0-9]+ generated' "$log" | grep -Eo '[0-9]+' | tail -n1)"
  failures="$(grep -Eo '[0-9]+ (unique )?failures?' "$log" | grep -Eo '^[0-9]+' | tail -n1)"
  if [[ $status -eq 0 ]]; then
    ok "schemathesis $("$PY/st" --version | grep -o '[0-9.]*$') on $name: ${cases:-?} cases, ${failures:-0} failures (seed $SEED, at most $EXAMPLES examples per operation)"
  else
    cat "$log" >&2
    bad "schemathesis on $name: ${cases:-?} cases, ${failures:-?} failures"
  fi
}
schemathesis sqlite "sqlite://$WORK/schemathesis.db"
DATABASE="qiwu_contract_$$_$RANDOM"
if psql "$POSTGRES/postgres" -qc "CREATE DATABASE $DATABASE" >/dev/null; then
  schemathesis postgresql "$POSTGRES/$DATABASE"
else
  bad "PostgreSQL at $POSTGRES (QIWU_TEST_POSTGRES_URL) is not reachable"
fi

echo "contract: $passed passed, $failed failed"
[[ $failed -eq 0 ]]
