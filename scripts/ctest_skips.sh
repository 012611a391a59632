#!/usr/bin/env bash
# scripts/ctest_skips.sh BUILD_DIR CTEST_OUTPUT [WHAT]: the tests a ctest run skipped, each with
# its reason, and the SKIP lines of tests that passed with a part skipped (a test file of
# several tests, tests/test_server_lib.run_tests). CTEST_OUTPUT is what ctest printed (its
# "did not run ... (Skipped)" list names the skipped tests); the reasons come from the run's
# BUILD_DIR/Testing/Temporary/LastTest.log, which keeps every test's output (ctest logs an exit
# 77 there as "Test Passed."). Prints one line per test, prefixed with WHAT (e.g. "release");
# prints nothing when nothing was skipped. scripts/test.sh runs it after each ctest.
set -euo pipefail
[ $# -ge 2 ] || { echo "usage: scripts/ctest_skips.sh BUILD_DIR CTEST_OUTPUT [WHAT]" >&2; exit 2; }
log=$1/Testing/Temporary/LastTest.log
what=${3:-ctest}
[ -f "$log" ] || { echo "$what: no $log"; exit 0; }
awk -v what="$what" '
  FNR == NR { # ctest output: "	 12 - test_tok_unit (Skipped)"
    if (match($0, /^[ \t]*[0-9]+ - .* \(Skipped\)$/)) {
      name = $0
      sub(/^[ \t]*[0-9]+ - /, "", name)
      sub(/ \(Skipped\)$/, "", name)
      skipped[name] = 1
      order[++n] = name
    }
    next
  }
  /^[0-9]+\/[0-9]+ Test: / { test = $0; sub(/^[0-9]+\/[0-9]+ Test: /, "", test); out = 0; next }
  /^Output:$/ { out = 1; getline; next } # the dashes after it
  /^<end of output>$/ { out = 0; next }
  out && test in skipped && !(test in reason) && NF { reason[test] = $0 }
  out && test in skipped && /SKIP/ && reason[test] !~ /SKIP/ { reason[test] = $0 }
  out && !(test in skipped) && /^SKIP: / { part[test] = part[test] (part[test] ? "; " : "") $0 }
  END {
    for (i = 1; i <= n; i++)
      printf "%s: %s: %s\n", what, order[i], (order[i] in reason) ? reason[order[i]] : "(no output)"
    for (t in part)
      printf "%s: %s (passed, a part skipped): %s\n", what, t, part[t]
  }
' "$2" "$log"
