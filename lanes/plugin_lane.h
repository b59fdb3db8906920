// The C++ Lane adapter around a plugin's C ABI (lanes/pipelane_lane.h). The plugin's errors become
// LaneError, an allocation past the arena quota becomes ArenaQuotaError, so the gap scheduler
// quarantines a plugin lane exactly like a built-in one. Plugins of every ABI version this
// pipelane speaks go through one PluginDescription; version-1 plugins get version-1 create
// arguments (no device, no instance count: they run on the host CPU).
#pragma once
#include <cstdint>
#include <memory>
#include <string>

#include "lanes/lane.h"
#include "lanes/pipelane_lane.h"

namespace pipelane {

// A plugin's description in this header's layout, whatever version the plugin was built for.
struct PluginDescription {
  std::uint32_t abi_version = 0;
  pipelane_lane_plugin fields{};  // fields the plugin did not have are zero
};

// Reads what a plugin's entry point returned. LaneError naming `path` for NULL, an ABI version
// outside [PIPELANE_LANE_ABI_OLDEST, PIPELANE_LANE_ABI_VERSION] ("built for lane ABI 7, this
// pipelane speaks 1 to 2"; nothing past abi_version is read then), or a description that lacks a
// name or a required function.
PluginDescription read_plugin_description(const pipelane_lane_plugin* raw, const std::string& path);

class PluginLane : public Lane {
 public:
  // `library` keeps the shared library loaded for as long as the lane exists; `path` names it in
  // messages.
  PluginLane(PluginDescription plugin, std::shared_ptr<void> library, std::string path);
  ~PluginLane() override;

  std::string name() const override;
  std::string work_unit() const override;
  void setup(LaneContext& ctx) override;
  double step(LaneContext& ctx) override;
  bool finished() const override;  // false before setup; after teardown, what it was then
  std::string save() const override;
  void load(const std::string& state) override;
  nlohmann::json report() const override;  // the last report survives teardown
  void teardown(LaneContext& ctx) override;

 private:
  void* create(const LaneContext& ctx, const char* const* keys, const char* const* values, std::size_t count,
               char* err, std::size_t errlen);
  void destroy_handle();
  void throw_pending_quota_error();
  [[noreturn]] void fail(const std::string& what, const char* err) const;
  static void* allocate_trampoline(void* context, std::size_t bytes, const char* what);

  const pipelane_lane_plugin& abi() const { return plugin_.fields; }

  PluginDescription plugin_;
  std::shared_ptr<void> library_;
  std::string path_;
  void* handle_ = nullptr;
  bool finished_at_teardown_ = false;
  Arena* arena_ = nullptr;
  std::string pending_quota_error_;
  mutable nlohmann::json last_report_ = nlohmann::json::object();
};

}  // namespace pipelane
