#!/usr/bin/env bash
# The layers of trainer/ (trainer/README.md). The rules live in one place, the guard of each folder
# (trainer/<folder>/layer.h: "trainer/G/ must not include trainer/F/"); this test checks
#   1. every header of a folder includes its folder's guard;
#   2. no file of a folder includes a header of a folder whose guard bars it (a .cpp included);
#   3. the guard really stops the build: a file compiled as trainer/run/ or trainer/checkpoint/
#      that includes a trainer/cli/ header fails with the guard's message, and the same file
#      compiled as trainer/cli/ builds (so the failure is the guard's, not a broken header).
# Usage: check_trainer_layers.sh CXX_COMPILER. Prints what is wrong; exits 1 if anything is.
set -uo pipefail
cxx=${1:?usage: check_trainer_layers.sh CXX_COMPILER}
cd "$(dirname "$0")/../.."
folders=$(cd trainer && for d in */; do [ -f "$d/layer.h" ] && echo "${d%/}"; done)
status=0

for f in $folders; do
  for h in trainer/"$f"/*.h; do
    [ "$h" = "trainer/$f/layer.h" ] && continue
    grep -q "#include \"trainer/$f/layer.h\"" "$h" || { echo "$h: does not include trainer/$f/layer.h"; status=1; }
  done
done

barred() {  # barred F G: whether trainer/F/'s guard bars trainer/G/
  grep -q "trainer/$2/ must not include trainer/$1/" "trainer/$1/layer.h"
}
for g in $folders; do
  while IFS=: read -r file line text; do
    f=$(sed -n 's|.*#include "trainer/\([a-z_]*\)/.*|\1|p' <<<"$text")
    [ -n "$f" ] && [ "$f" != "$g" ] && barred "$f" "$g" &&
      { echo "$file:$line: trainer/$g/ must not include trainer/$f/: $text"; status=1; }
  done < <(grep -n '#include "trainer/' trainer/"$g"/*.h trainer/"$g"/*.cpp)
done

probe=$(mktemp -d)
trap 'rm -rf "$probe"' EXIT
echo '#include "trainer/cli/train_command.h"' >"$probe/probe.cpp"
compile() { "$cxx" -std=c++20 -fsyntax-only -I. "$@" "$probe/probe.cpp" 2>&1; }
if ! out=$(compile -DPIPELANE_LAYER_CLI=1); then
  echo "the probe does not compile as trainer/cli/ itself:"; echo "$out"; status=1
fi
for g in run checkpoint; do
  up=$(tr a-z A-Z <<<"$g")
  if out=$(compile "-DPIPELANE_LAYER_$up=1"); then
    echo "a trainer/cli/ header compiled as trainer/$g/ built: the guard does not work"; status=1
  elif ! grep -q "trainer/$g/ must not include trainer/cli/" <<<"$out"; then
    echo "compiled as trainer/$g/, the probe failed without the guard's message:"; echo "$out"; status=1
  fi
done

[ $status -eq 0 ] && echo "trainer layers: clean ($(echo $folders))"
exit $status
