#!/usr/bin/env bash
# The GPU check's stage logic (scripts/gpu/lib.sh) without a GPU and without a build: a gtest run
# that ran no test is a failure (a filter matching nothing exits 0), so is a cut-short or crashed
# one and a library that did not load; each command's stage limits add up to less than 540 s; and
# a command run here leaves exactly report.json and gpu.log in $OUT, the GPU stages "skipped: no
# GPU". Exits 1 at the first check that does not hold.
set -uo pipefail
cd "$(dirname "$0")/../.."
root=$PWD
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fails=0
check() {  # DESCRIPTION WANT GOT
  if [ "$2" = "$3" ]; then echo "ok: $1"; else echo "FAILED: $1: want '$2', got '$3'"; fails=1; fi
}

# ---- gtest_status on the outputs gtest prints ----
(
  GPU_COMMAND=unit OUT=$tmp/unit GPU_WORK=$tmp/unit-work
  declare -A STAGE_TIMEOUTS=([zero]=5 [lib]=5)
  source scripts/gpu/lib.sh
  none=$'Note: Google Test filter = */cuda\n[==========] Running 0 tests from 0 test suites.\n[==========] 0 tests from 0 test suites ran. (0 ms total)\n[  PASSED  ] 0 tests.'
  some=$'[==========] Running 3 tests from 1 test suite.\n[==========] 3 tests from 1 test suite ran. (5 ms total)\n[  PASSED  ] 3 tests.'
  skipped=$'[==========] 2 tests from 1 test suite ran. (1 ms total)\n[  PASSED  ] 0 tests.\n[  SKIPPED ] 2 tests, listed below:'
  one=$'[==========] 1 test from 1 test suite ran. (1 ms total)\n[  PASSED  ] 1 test.'
  echo "zero tests, exit 0: $(gtest_status 0 "$none")"
  echo "three tests passed: $(gtest_status 0 "$some")"
  echo "one test passed: $(gtest_status 0 "$one")"
  echo "all skipped: $(gtest_status 0 "$skipped")"
  echo "a failure: $(gtest_status 1 "$some")"
  echo "past its limit: $(gtest_status 124 "$some")"
  echo "crashed before its summary: $(gtest_status 139 '[ RUN      ] A.b')"
  # A whole stage: an executable whose filter matched nothing.
  printf '#!/bin/sh\nprintf "%%s\\n" "[==========] Running 0 tests from 0 test suites." "[==========] 0 tests from 0 test suites ran. (0 ms total)" "[  PASSED  ] 0 tests."\n' >"$tmp/zero_tests"
  chmod +x "$tmp/zero_tests"
  gtest_stage zero "a filter that matches nothing" "$tmp/zero_tests" >/dev/null
  echo "report: $(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["stages"][0]["status"])' "$OUT/report.json")"
  echo "failed flag: $failed"
  # A library that did not load: pipelane devices says so (exit 0).
  mkdir -p "$tmp/bin"
  printf '#!/bin/sh\necho "cpu:0: host"\necho "cuda: unavailable: cannot load the CUDA backend: libcudnn.so.9: cannot open shared object file"\n' >"$tmp/bin/pipelane"
  chmod +x "$tmp/bin/pipelane"
  GPU_BIN=$tmp/bin
  library_load_stage >/dev/null
  echo "library not loaded: $(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["stages"][1]["status"])' "$OUT/report.json")"
) >"$tmp/unit.txt" 2>&1
got() { sed -n "s/^$1: //p" "$tmp/unit.txt"; }
check "a gtest run of zero tests is a failure" fail "$(got 'zero tests, exit 0')"
check "three passing tests pass" pass "$(got 'three tests passed')"
check "one passing test passes" pass "$(got 'one test passed')"
check "every test skipped is skipped" skipped "$(got 'all skipped')"
check "a failing test fails" fail "$(got 'a failure')"
check "a run past its limit fails" fail "$(got 'past its limit')"
check "a crash before gtest's summary fails" fail "$(got 'crashed before its summary')"
check "the zero-test stage is reported failed in report.json" fail "$(got report)"
check "the zero-test stage makes the command fail" 1 "$(got 'failed flag')"
check "a backend library that did not load fails library_load" fail "$(got 'library not loaded')"

# ---- each command's stage limits ----
for c in command1 command2; do
  sum=$(sed -n '/^declare -A STAGE_TIMEOUTS=(/,/^)/p' "scripts/gpu/$c.sh" | grep -o '\]=[0-9]*' | tr -d ']=' | awk '{s += $1} END {print s}')
  check "$c's stage limits add up to less than 540 s ($sum s)" yes "$([ "${sum:-999}" -lt 540 ] && echo yes || echo no)"
  # Every stage the command records has a declared limit.
  undeclared=$(grep -v '^ *#' "scripts/gpu/$c.sh" | grep -oE '(^|[ ;{(&|])(run_stage|gtest_stage|stage|mfu_stage) [a-z0-9_]+ ' |
    awk '{print $2}' | sort -u |
    while read -r s; do grep -q "\[$s\]=" "scripts/gpu/$c.sh" || echo "$s"; done | tr '\n' ' ')
  check "$c: every stage has a limit" "" "$undeclared"
done

# ---- a command end to end without a GPU: $OUT holds report.json and gpu.log only ----
mkdir -p "$tmp/fake-bin"
printf '#!/bin/sh\necho "cpu:0: host"\necho "cuda: unavailable: no device (cudaGetDeviceCount: cudaErrorInsufficientDriver)"\n' >"$tmp/fake-bin/pipelane"
chmod +x "$tmp/fake-bin/pipelane"
for c in command1 command2; do
  out=$tmp/out-$c
  GPU_CHECK_ASSUME_NO_GPU=1 PATH=/usr/bin:/bin OUT=$out GPU_WORK=$tmp/work-$c GPU_PREFIX=$tmp/prefix-$c GPU_BIN_OVERRIDE=1 GPU_BIN=$tmp/fake-bin GPU_LIB= \
    bash "scripts/gpu/$c.sh" >"$tmp/$c.txt" 2>&1
  check "$c without a GPU exits 0" 0 "$?"
  check "$c leaves report.json and gpu.log in \$OUT, nothing else" "gpu.log report.json" "$(ls -A "$out" | tr '\n' ' ' | sed 's/ $//')"
  statuses=$(python3 -c '
import json, sys
r = json.load(open(sys.argv[1]))
print(" ".join(s["status"] for s in r["stages"][:2]), "|", sorted({(s["status"], s["note"]) for s in r["stages"][2:]}))' "$out/report.json")
  check "$c: environment ok, library_load pass, the rest skipped: no GPU" "ok pass | [('skipped', 'skipped: no GPU')]" "$statuses"
  check "$c prints one line per stage" "$(python3 -c 'import json,sys; print(len(json.load(open(sys.argv[1]))["stages"]))' "$out/report.json")" \
    "$(grep -cE '^[a-z0-9_]+ +(ok|pass|fail|error|skipped) ' "$tmp/$c.txt")"
done
exit $fails
