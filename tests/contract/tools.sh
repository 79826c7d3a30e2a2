#!/usr/bin/env bash
# Installs the pinned contract-test tools into a cache outside the clone
# (a Python venv and an npm prefix) and prints nothing else but progress.
# Re-runs are free: a stamp naming the pins skips an install that matches.
set -euo pipefail

TOOLS="${QIWU_CONTRACT_TOOLS:-${HOME:-/root}/.cache/qiwu-scheduler/contract-tools}"

# The pins: mainstream generators and testers that no one here wrote.
PY_PINS=(
  "openapi-python-client==0.29.1"
  "openapi-spec-validator==0.9.0"
  "schemathesis==4.32.5"
)
NPM_PINS=(
  "openapi-typescript@7.13.0"
  "openapi-fetch@0.17.0"
  "typescript@5.9.3"
)

stamp="$(printf '%s\n' "${PY_PINS[@]}" "${NPM_PINS[@]}")"
mkdir -p "$TOOLS"

if [[ "$(cat "$TOOLS/venv.stamp" 2>/dev/null)" != "$stamp" ]]; then
  echo "contract: installing Python tools into $TOOLS/venv"
  rm -rf "$TOOLS/venv"
  python3 -m venv "$TOOLS/venv"
  "$TOOLS/venv/bin/pip" install --quiet --disable-pip-version-check "${PY_PINS[@]}"
  printf '%s' "$stamp" >"$TOOLS/venv.stamp"
fi

if [[ "$(cat "$TOOLS/npm.stamp" 2>/dev/null)" != "$stamp" ]]; then
  echo "contract: installing npm tools into $TOOLS/npm"
  rm -rf "$TOOLS/npm"
  mkdir -p "$TOOLS/npm"
  # A private package.json so that npm resolves exactly these versions.
  printf '{"name":"qiwu-contract-tools","private":true}\n' >"$TOOLS/npm/package.json"
  (cd "$TOOLS/npm" && npm install --no-audit --no-fund --loglevel=error --save-exact "${NPM_PINS[@]}")
  printf '%s' "$stamp" >"$TOOLS/npm.stamp"
fi
