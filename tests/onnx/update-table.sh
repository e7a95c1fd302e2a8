#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# update-table.sh BUILD_DIR: reruns ONNX's test data through BUILD_DIR's
# onnx_conformance and writes the per-op table into docs/onnx.md between its
# markers (the onnx_conformance ctest compares the two). Run it after a
# change that makes more tests pass, and commit docs/onnx.md with it.
set -eu
bld=$1
root=$(cd "$(dirname "$0")/../.." && pwd)
data=${CASTOR_ONNX_TESTDATA:-/usr/share/libonnx-testdata/data}
tmp=$(mktemp)
"$bld/tests/onnx_conformance" --table "$tmp" "$data/node" "$data/pytorch-converted" | tail -n 1
awk -v table="$tmp" '
  /<!-- onnx-table-begin -->/ { print; while ((getline line < table) > 0) print line; skip = 1; next }
  /<!-- onnx-table-end -->/ { skip = 0 }
  !skip { print }
' "$root/docs/onnx.md" >"$tmp.doc"
mv "$tmp.doc" "$root/docs/onnx.md"
rm -f "$tmp"
