#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# spdx.sh SOURCE_DIR: every source file git tracks (C, headers, op tables,
# shell and Python scripts, CMake files, .ci/run) names its license in an
# SPDX-License-Identifier line among its first three lines (LICENSE: Apache-2.0).
# Skips (77) outside a git checkout.
src=$1
cd "$src" || exit 1
git rev-parse --git-dir >/dev/null 2>&1 || { echo "spdx: not a git checkout: skipped"; exit 77; }
bad=$(git ls-files -- '*.c' '*.h' '*.def' '*.py' '*.sh' '*.cmake' '*.cmake.in' '*.pc.in' \
        'CMakeLists.txt' '*/CMakeLists.txt' .ci/run |
      while read -r f; do
        [ -f "$f" ] || continue
        head -n 3 "$f" | grep -q 'SPDX-License-Identifier: Apache-2.0' || echo "$f"
      done)
if [ -n "$bad" ]; then
  echo "spdx: these files lack an 'SPDX-License-Identifier: Apache-2.0' line in their first 3 lines:"
  echo "$bad" | sed 's/^/  /'
  exit 1
fi
echo "spdx: every source file carries its SPDX line"
