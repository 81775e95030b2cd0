#!/usr/bin/env bash
# Runs tools/test_openai_client.py (the official `openai` client, from PyPI into a venv) against a `tensorfold serve`
# of the tiny fixture on 127.0.0.1, then stops the server. Exits non-zero on any failure.
#   TENSORFOLD_BIN=path  use this binary (default: cargo build [--release] -p tensorfold)
#   --release            build and use the release binary
set -euo pipefail
cd "$(dirname "$0")/.."

profile=debug
if [ "${1:-}" = "--release" ]; then profile=release; fi

venv="${OPENAI_TEST_VENV:-target/openai-venv}"
if [ ! -x "$venv/bin/python" ]; then
  python3 -m venv "$venv"
fi
if ! "$venv/bin/python" -c "import openai" 2>/dev/null; then
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check "openai>=1.40,<3"
fi

bin="${TENSORFOLD_BIN:-}"
if [ -z "$bin" ]; then
  if [ "$profile" = release ]; then cargo build --quiet --release -p tensorfold; else cargo build --quiet -p tensorfold; fi
  bin="${CARGO_TARGET_DIR:-target}/$profile/tensorfold"
fi

log="$(mktemp)"
key="openai-client-test-key"
"$bin" serve --model fixtures/tiny-wrapper-bf16 --host 127.0.0.1 --port 0 --name tiny --api-key "$key" \
  --threads 2 >"$log" 2>&1 &
pid=$!
cleanup() {
  kill -TERM "$pid" 2>/dev/null || true
  # Graceful shutdown finishes in-flight work; do not wait forever.
  for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  kill -KILL "$pid" 2>/dev/null || true
  rm -f "$log"
}
trap cleanup EXIT

url=""
for _ in $(seq 1 600); do
  url="$(grep -o 'http://127\.0\.0\.1:[0-9]*' "$log" | head -n1 || true)"
  [ -n "$url" ] && break
  if ! kill -0 "$pid" 2>/dev/null; then
    echo "the server exited before listening:" >&2
    cat "$log" >&2
    exit 1
  fi
  sleep 0.1
done
if [ -z "$url" ]; then
  echo "the server did not start listening within 60 s:" >&2
  cat "$log" >&2
  exit 1
fi
echo "+ openai client tests against $url ($bin)"
timeout 120 "$venv/bin/python" tools/test_openai_client.py --base-url "$url/v1" --api-key "$key" --model tiny
