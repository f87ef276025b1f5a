#!/usr/bin/env bash
# Peers for the benchmarks, in their own venv (never project dependencies).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
python3 -m venv "$here/.peers"
"$here/.peers/bin/pip" install -q dvc polygraphy onnxconverter-common onnx onnxruntime numpy
echo "peers installed in $here/.peers"
