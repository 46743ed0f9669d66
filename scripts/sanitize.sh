#!/usr/bin/env bash
# The sanitizer suite and bounded fuzzing: builds the `asan` preset (Clang, AddressSanitizer +
# UndefinedBehaviorSanitizer, the libFuzzer harnesses of fuzz/) into build-asan/, runs the test
# suite under it (minus the exhaustive sweeps listed below), then each fuzz harness for
# MXSIM_FUZZ_SECONDS (default 60) from a copy of its seed corpus. Any sanitizer report, failing
# test, or harness finding fails the script; a harness's failing input is left in
# build-asan/fuzz-findings/ (add it to fuzz/regress/<harness>/ once fixed: it is then replayed
# by the test suite). `MXSIM_SANITIZE=1 scripts/test.sh` runs this after the normal suite.
# Extra arguments go to ctest.
set -euo pipefail
cd "$(dirname "$0")/.."
secs="${MXSIM_FUZZ_SECONDS:-60}"
jobs="$(nproc)"

# Reports are fatal; leaks are reported (LSan). The HDF5 calls are checked by the bounds shim
# (cmake/sanitize.cmake) since Debian's libhdf5 itself is not instrumented.
export ASAN_OPTIONS="abort_on_error=1:detect_leaks=1:strict_string_checks=1:check_initialization_order=1:detect_stack_use_after_return=1"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
export LSAN_OPTIONS="suppressions=$PWD/fuzz/lsan.supp:print_suppressions=0"

t0=$SECONDS
cmake --preset asan >/dev/null
cmake --build build-asan -j"$jobs"
t1=$SECONDS
echo "sanitize: asan build $((t1 - t0)) s"

# Exhaustive sweeps (every BF16/FP16/FP32-tie encode, every exponent of every scale rule, the
# 65536-pattern quantizer blocks): pure arithmetic the normal suite checks bit for bit; under
# the sanitizers they would take most of the budget. Also Install.DownstreamFindPackage: it
# installs this build and compiles a consumer with the default compiler and flags, which cannot
# link sanitizer-instrumented libraries (a packaging check, no parser; the normal suite runs
# it). The asan preset builds no Python module (an instrumented extension needs the ASan runtime
# preloaded into an uninstrumented python; the C++ under it is what the suites here cover). And
# the tests labelled `large` (tensors of more than 2^31 elements quantized end to end: several GiB
# of memory, minutes each in a release build; the same streaming code runs here on small tensors
# forced into many slices, test_cli_quantize_stream). Everything else runs.
exclude='^(FormatsExhaustive\.|QuantizeFast\.EveryBf16PatternInBlocks|ScaleRules\.EveryRuleEveryFormatEveryExponent'
exclude+='|Install\.DownstreamFindPackage)'
ctest --test-dir build-asan --output-on-failure -j"$jobs" -E "$exclude" -LE large "$@"
t2=$SECONDS
echo "sanitize: suite under ASan + UBSan $((t2 - t1)) s"

findings=build-asan/fuzz-findings
mkdir -p "$findings"
status=0
for h in npy safetensors safetensors_index meta_json toml_config idx trace checkpoint; do
  work="$(mktemp -d)"
  cp fuzz/corpus/"$h"/* "$work"/
  if ! build-asan/fuzz/fuzz_"$h" -max_total_time="$secs" -timeout=20 -rss_limit_mb=2048 -max_len=65536 \
      -print_final_stats=1 -artifact_prefix="$findings/$h-" "$work" >"$findings/$h.log" 2>&1; then
    echo "sanitize: fuzz_$h FAILED (input and log in $findings/):" >&2
    tail -40 "$findings/$h.log" >&2
    status=1
  else
    echo "sanitize: fuzz_$h ${secs} s: $(grep -m1 -o 'stat::number_of_executed_units: *[0-9]*' "$findings/$h.log" | grep -o '[0-9]*$') inputs, no finding"
  fi
  rm -rf "$work"
done
echo "sanitize: fuzzing $((SECONDS - t2)) s; total $((SECONDS - t0)) s"
exit $status
