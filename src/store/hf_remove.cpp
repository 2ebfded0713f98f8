#include "store/hf_remove.h"

#include <filesystem>
#include <fstream>
#include <set>

#include "core/error.h"

namespace fs = std::filesystem;

namespace hearth::store {
namespace {

std::string read_ref(const fs::path& p) {
  std::ifstream in(p);
  std::string s;
  std::getline(in, s);
  while (!s.empty() && (s.back() == '\r' || s.back() == ' ')) s.pop_back();
  return s;
}

// The blob file names the snapshot's links point at (../../blobs/<name>).
std::set<std::string> blobs_of(const fs::path& snapshot) {
  std::set<std::string> out;
  std::error_code ec;
  for (fs::recursive_directory_iterator it(snapshot, ec), end; !ec && it != end; it.increment(ec)) {
    if (!it->is_symlink(ec)) continue;
    const fs::path target = fs::read_symlink(it->path(), ec);
    if (!ec && target.parent_path().filename() == "blobs") out.insert(target.filename().string());
  }
  return out;
}

}  // namespace

HfRemoval plan_hf_remove(const std::string& hub, const HfRef& ref) {
  const fs::path repo = fs::path(hub) / ("models--" + ref.org + "--" + ref.name);
  std::error_code ec;
  if (!fs::is_directory(repo, ec)) {
    fail(ErrorKind::kNotFound, "rm",
         ref.org + "/" + ref.name + " is not in the Hugging Face hub cache (" + repo.string() + ")");
  }
  HfRemoval plan;
  plan.repo_dir = repo.string();
  const fs::path ref_file = repo / "refs" / ref.revision;
  plan.commit = fs::is_regular_file(ref_file, ec) ? read_ref(ref_file) : ref.revision;
  const fs::path snap = repo / "snapshots" / plan.commit;
  if (plan.commit.empty() || !fs::is_directory(snap, ec)) {
    fail(ErrorKind::kNotFound, "rm",
         ref.org + "/" + ref.name + ": no snapshot for revision '" + ref.revision + "' in " +
             (repo / "snapshots").string());
  }
  std::set<std::string> others;
  bool other_snapshots = false;
  for (fs::directory_iterator it(repo / "snapshots", ec), end; !ec && it != end; it.increment(ec)) {
    if (it->path().filename() == plan.commit) continue;
    other_snapshots = true;
    for (const auto& b : blobs_of(it->path())) others.insert(b);
  }
  plan.whole_repo = !other_snapshots;
  for (const auto& b : blobs_of(snap)) {
    if (others.count(b)) continue;
    const fs::path p = repo / "blobs" / b;
    if (!fs::exists(p, ec)) continue;
    plan.bytes += fs::file_size(p, ec);
    plan.blobs.push_back(p.string());
  }
  for (fs::recursive_directory_iterator it(repo / "refs", ec), end; !ec && it != end;
       it.increment(ec)) {
    if (it->is_regular_file(ec) && read_ref(it->path()) == plan.commit)
      plan.refs.push_back(it->path().string());
  }
  return plan;
}

void apply_hf_remove(const HfRemoval& plan) {
  std::error_code ec;
  auto remove = [&](const fs::path& p) {
    fs::remove_all(p, ec);
    if (ec) fail(ErrorKind::kIo, "rm", "cannot remove " + p.string() + ": " + ec.message());
  };
  if (plan.whole_repo) {
    remove(plan.repo_dir);
    return;
  }
  remove(fs::path(plan.repo_dir) / "snapshots" / plan.commit);
  for (const auto& b : plan.blobs) remove(b);
  for (const auto& r : plan.refs) remove(r);
}

}  // namespace hearth::store
