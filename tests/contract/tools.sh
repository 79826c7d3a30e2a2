#!/usr/bin/env bash
# Installs the pinned contract-test tools into a cache outside the clone: a
# Python venv from requirements.txt (openapi-python-client 0.29.1,
# openapi-spec-validator 0.9.0, schemathesis 4.32.5 and what they pull in)
# and an npm prefix from npm/package-lock.json (openapi-typescript 7.13.0,
# openapi-fetch 0.17.0, typescript 5.9.3). A stamp of the pin files makes
# a re-run free when nothing changed.
set -euo pipefail
cd "$(dirname "$0")"

TOOLS="${QIWU_CONTRACT_TOOLS:-${HOME:-/root}/.cache/qiwu-scheduler/contract-tools}"
mkdir -p "$TOOLS"

py_stamp="$(cat requirements.txt)"
if [[ "$(cat "$TOOLS/venv.stamp" 2>/dev/null)" != "$py_stamp" ]]; then
  echo "contract: installing Python tools into $TOOLS/venv"
  rm -rf "$TOOLS/venv" "$TOOLS/venv.stamp"
  python3 -m venv "$TOOLS/venv"
  "$TOOLS/venv/bin/pip" install --quiet --disable-pip-version-check -r requirements.txt
  printf '%s' "$py_stamp" >"$TOOLS/venv.stamp"
fi

npm_stamp="$(cat npm/package.json npm/package-lock.json)"
if [[ "$(cat "$TOOLS/npm.stamp" 2>/dev/null)" != "$npm_stamp" ]]; then
  echo "contract: installing npm tools into $TOOLS/npm"
  rm -rf "$TOOLS/npm" "$TOOLS/npm.stamp"
  mkdir -p "$TOOLS/npm"
  cp npm/package.json npm/package-lock.json "$TOOLS/npm/"
  (cd "$TOOLS/npm" && npm ci --no-audit --no-fund --loglevel=error)
  printf '%s' "$npm_stamp" >"$TOOLS/npm.stamp"
fi
