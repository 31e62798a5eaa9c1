#!/usr/bin/env bash
# fetch_text.sh - prints the path of the perplexity text (default: Jane Austen's "Persuasion",
# 1818, public domain), taken from the Debian package r-cran-janeaustenr (Jane Austen's complete
# novels as R data). apt-get download fetches the .deb (no install), dpkg -x unpacks it, and
# tools/extract_austen.py turns the R data into plain text. Idempotent; cache as fetch_model.sh.
#   usage: fetch_text.sh [emma|mansfieldpark|northangerabbey|persuasion|prideprejudice|sensesensibility]
set -euo pipefail

novel=${1:-persuasion}
here=$(cd "$(dirname "$0")" && pwd)
cache=${SMOLLM2_CACHE:-${XDG_CACHE_HOME:-${HOME:-/tmp}/.cache}/kvq-smollm2}
out=$cache/austen/$novel.txt
fail() { echo "fetch_text.sh: $*" >&2; exit 1; }

if [ ! -s "$out" ]; then
  mkdir -p "$cache" || fail "cannot create $cache"
  tmp=$(mktemp -d "$cache/text.XXXXXX")
  trap 'rm -rf "$tmp"' EXIT
  (cd "$tmp" && apt-get download r-cran-janeaustenr >&2) ||
    fail "apt-get download r-cran-janeaustenr failed (run apt-get update first?)"
  dpkg -x "$tmp"/r-cran-janeaustenr_*.deb "$tmp/x" || fail "dpkg -x failed"
  python3 "$here/tools/extract_austen.py" "$tmp/x/usr/lib/R/site-library/janeaustenr" "$tmp/austen" >&2 ||
    fail "could not extract the novels"
  mkdir -p "$cache/austen"
  for f in "$tmp"/austen/*.txt; do mv -f "$f" "$cache/austen/"; done
  [ -s "$out" ] || fail "no novel named '$novel'"
fi
echo "$out"
