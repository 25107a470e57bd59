#!/usr/bin/env bash
# Integration: it_rspill.sh with the atomic mode (no lock: units move between shards
# and orders draw from them in scripts alone).
RSPILL_LOCK=atomic exec "$(dirname "$0")/it_rspill.sh" "$@"
