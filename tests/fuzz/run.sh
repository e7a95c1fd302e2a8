#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# run.sh FUZZ_BUILD_DIR SECONDS [TARGET...]: runs the libFuzzer targets of a
# -DCASTOR_FUZZ=ON build (tests/fuzz/README.md) one after the other, each for
# SECONDS, with its dictionary, on a corpus FUZZ_BUILD_DIR/fuzz/corpus/TARGET
# (kept between runs) seeded from the test inputs, seeds/TARGET and
# regress/TARGET. Prints the executions of each target; a finding goes to
# FUZZ_BUILD_DIR/fuzz/artifacts/ and makes the script exit 1 after the rest ran.
# Targets: the names of tests/fuzz/fuzz_NAME.c (default: all of them). With FUZZ_RUNS=N
# in the environment a target also stops after N executions (long runs).
set -u
bld=$1 secs=$2
shift 2
src=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$src/../.." && pwd)
targets=${*:-$(cd "$src" && ls fuzz_*.c | sed 's/^fuzz_//; s/\.c$//' | tr '\n' ' ')}
out=$bld/fuzz
mkdir -p "$out/artifacts"
status=0
# allocator_may_return_null: out-of-memory is the error the release build gives
export ASAN_OPTIONS="${ASAN_OPTIONS:-allocator_may_return_null=1:detect_leaks=1}"
for t in $targets; do
  bin=$out/fuzz_$t
  [ -x "$bin" ] || { echo "fuzz $t: no $bin (configure with -DCASTOR_FUZZ=ON)"; status=1; continue; }
  seeds=$out/seeds/$t
  rm -rf "$seeds"
  mkdir -p "$seeds" "$out/corpus/$t"
  case $t in
    cast|cast_train|train) for f in "$root"/samples/*.cast "$root"/tests/golden/*/*.cast; do cp "$f" "$seeds/$(basename "$(dirname "$f")")_$(basename "$f")"; done ;;
    ir|passes|grad) for f in "$root"/tests/golden/*/*.cir; do cp "$f" "$seeds/$(basename "$(dirname "$f")")_$(basename "$f")"; done ;;
  esac
  for d in "$src/seeds/$t" "$src/regress/$t"; do [ -d "$d" ] && cp "$d"/* "$seeds"/ 2>/dev/null; done
  # inputs as large as the largest seeds (libFuzzer's default is 4 KB): deep
  # graphs and long chains (onnx), the size and recursion paths of the
  # containers (keras, zip, hdf5) are past it
  case $t in onnx) maxlen=262144 ;; keras|zip) maxlen=131072 ;; hdf5) maxlen=65536 ;; *) maxlen= ;; esac
  log=$out/$t.log
  t0=$(date +%s)
  "$bin" "$out/corpus/$t" "$seeds" -dict="$src/dict/$(case $t in passes) echo ir;; train) echo cast_train;; *) echo "$t";; esac).dict" \
    -max_total_time="$secs" ${FUZZ_RUNS:+-runs=$FUZZ_RUNS} ${maxlen:+-max_len=$maxlen} -timeout=20 -rss_limit_mb=2560 -malloc_limit_mb=2048 -close_fd_mask=3 \
    -print_final_stats=1 -artifact_prefix="$out/artifacts/$t-" >"$log" 2>&1
  rc=$?
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n 1)
  if [ $rc = 0 ]; then
    echo "fuzz $t: ${execs:-?} executions in $(($(date +%s) - t0)) s, no finding"
  else
    echo "fuzz $t: FINDING after ${execs:-?} executions (exit $rc); log $log:"
    grep -E "ERROR|SUMMARY|invariant|internal error|runtime error|Test unit written" "$log" | head -n 10
    # the stack of the first report, and the input itself (base64, when small): a
    # CI log is then enough to replay the finding on another machine
    grep -E "^ +#[0-9]+ " "$log" | head -n 16
    art=$(sed -n 's/.*Test unit written to //p' "$log" | head -n 1)
    if [ -n "$art" ] && [ -f "$art" ] && [ "$(wc -c <"$art")" -le 8192 ]; then
      echo "fuzz $t: the input, base64 (base64 -d > input; $bin input):"
      base64 "$art"
    fi
    status=1
  fi
done
exit $status
