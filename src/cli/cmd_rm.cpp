// `hearth rm ORG/NAME[@REV] [--yes]`: removes a model from the Hugging Face hub cache (its
// snapshot, the blobs no other snapshot uses, the refs naming it), after showing what goes
// and asking unless --yes. Names in Ollama's or LM Studio's stores and paths are refused:
// those files belong to another tool (or to the user).
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <string>

#include "cli/commands.h"
#include "core/error.h"
#include "store/hf_cache.h"
#include "store/hf_remove.h"
#include "store/locations.h"
#include "store/resolver.h"

namespace hearth::cli {
namespace {

void remove_model(const std::string& name, bool yes) {
  if (store::looks_like_path(name)) {
    fail(ErrorKind::kInvalidInput, "rm",
         name + " is a path: hearth rm removes models of the Hugging Face hub cache only "
                "(delete your own files yourself)");
  }
  const store::Locations loc = store::locations_from_env();
  const auto ref = store::parse_hf_ref(name);
  const std::string repo =
      ref ? loc.hf_hub + "/models--" + ref->org + "--" + ref->name : std::string();
  if (!ref || !std::filesystem::is_directory(repo)) {
    // Another store's name: say which tool owns it.
    std::string owner;
    try {
      const store::Resolution r = store::resolve_model(name, loc);
      if (r.entry.store == store::kStoreOllama) owner = "Ollama's store: remove it with `ollama rm " + name + "`";
      if (r.entry.store == store::kStoreLmStudio)
        owner = "LM Studio's models folder: remove it in LM Studio (or `lms rm`)";
    } catch (const Error&) {
    }
    if (!owner.empty()) fail(ErrorKind::kInvalidInput, "rm", name + " is in " + owner);
    fail(ErrorKind::kNotFound, "rm",
         name + " is not in the Hugging Face hub cache (" + loc.hf_hub + ")");
  }
  if (!ref->quant.empty()) {
    std::fprintf(stderr, "hearth: rm removes the whole snapshot of %s/%s, every quant in it\n",
                 ref->org.c_str(), ref->name.c_str());
  }
  const store::HfRemoval plan = store::plan_hf_remove(loc.hf_hub, *ref);
  std::fprintf(stderr, "hearth: %s: %s\n", name.c_str(),
               plan.whole_repo ? ("the whole folder " + plan.repo_dir).c_str()
                               : ("snapshot " + plan.commit + " of " + plan.repo_dir).c_str());
  std::fprintf(stderr, "hearth: frees %.1f MiB (%zu blob%s)\n", plan.bytes / 1048576.0,
               plan.blobs.size(), plan.blobs.size() == 1 ? "" : "s");
  if (!yes) {
    std::fprintf(stderr, "Remove it? [y/N] ");
    std::string answer;
    if (!std::getline(std::cin, answer) || (answer != "y" && answer != "Y" && answer != "yes")) {
      fail(ErrorKind::kInvalidInput, "rm", "not confirmed: nothing removed (--yes skips the question)");
    }
  }
  store::apply_hf_remove(plan);
  std::printf("removed %s\n", name.c_str());
}

}  // namespace

void add_rm_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("rm", "Remove a model from the Hugging Face hub cache");
  static std::string name;
  static bool yes = false;
  cmd->add_option("name", name, "ORG/NAME[@REV] in the hub cache")->required();
  cmd->add_flag("-y,--yes", yes, "Remove without asking");
  cmd->callback([]() { remove_model(name, yes); });
}

}  // namespace hearth::cli
