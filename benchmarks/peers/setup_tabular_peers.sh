#!/usr/bin/env bash
# Creates the peers' own venvs (python3.11) for benchmarks/tabular_benchmark.py, which drives them
# through benchmarks/peers/tabular_peer_worker.py. They are kept out of privlake's environment:
#   benchmarks/.venv-datasynthesizer  DataSynthesizer 0.1.13 (PrivBayes; needs numpy < 2)
#   benchmarks/.venv-smartnoise       smartnoise-synth 1.0.8 (MST over private-pgm's mbi)
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
benchmarks="$(dirname "$here")"

datasynthesizer="$benchmarks/.venv-datasynthesizer"
python3.11 -m venv "$datasynthesizer"
"$datasynthesizer/bin/pip" install --quiet -r "$here/requirements-tabular.txt"
"$datasynthesizer/bin/python" -c "import DataSynthesizer.DataDescriber, DataSynthesizer.DataGenerator"
echo "DataSynthesizer ready in $datasynthesizer"

smartnoise="$benchmarks/.venv-smartnoise"
python3.11 -m venv "$smartnoise"
"$smartnoise/bin/pip" install --quiet -r "$here/requirements-tabular-mst.txt"
"$smartnoise/bin/pip" install --quiet --no-deps smartnoise-synth==1.0.8
"$smartnoise/bin/python" -c "import snsynth.mst"
echo "smartnoise-synth (MST) ready in $smartnoise"
