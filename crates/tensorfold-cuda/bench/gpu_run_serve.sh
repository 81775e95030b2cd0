#!/bin/bash
# gpu_run_serve.sh BIN OUT: `run --device cuda` against `run` on the CPU (token_sha), then `serve --device cuda`
# answering a chat request, on the built-in model.
BIN=${1:?binary}; OUT=${2:?out dir}
mkdir -p "$OUT"; export TENSORFOLD_CACHE_DIR=/tmp/tfcache
"$BIN" run --device cuda --prompt "def fibonacci(n):" --max-tokens 48 --json 2>&1 | tail -4
"$BIN" run --prompt "def fibonacci(n):" --max-tokens 48 --json 2>/dev/null | tail -1 | grep -o '"token_sha":"[0-9a-f]*"' | sed 's/^/cpu /'
"$BIN" serve --device cuda --port 8321 > "$OUT/serve.log" 2>&1 &
for i in $(seq 1 60); do curl -s localhost:8321/health >/dev/null 2>&1 && break; sleep 0.5; done
curl -s localhost:8321/v1/chat/completions -H 'content-type: application/json' \
  -d '{"messages":[{"role":"user","content":"Write a function that reverses a string."}],"max_tokens":48,"temperature":0}'
echo; kill %1; wait; tail -3 "$OUT/serve.log"
