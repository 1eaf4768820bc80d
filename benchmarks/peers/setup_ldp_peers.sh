#!/usr/bin/env bash
# Creates benchmarks/.venv-ldp-peers (python3.11) with the peer LDP libraries that
# benchmarks/ldp_peers.py drives through benchmarks/peers/ldp_peer_worker.py.
# They are kept out of privlake's own environment on purpose.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
venv="$(dirname "$here")/.venv-ldp-peers"
python3.11 -m venv "$venv"
"$venv/bin/pip" install --quiet --upgrade pip
"$venv/bin/pip" install --quiet -r "$here/requirements-ldp.txt"
"$venv/bin/python" -c "import multi_freq_ldpy, pure_ldp.frequency_oracles" && echo "ldp peers ready in $venv"
