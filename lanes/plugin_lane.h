// The C++ Lane adapter around a plugin's C ABI (lanes/pipelane_lane.h). The plugin's errors become
// LaneError, an allocation past the arena quota becomes ArenaQuotaError, so the gap scheduler
// quarantines a plugin lane exactly like a built-in one.
#pragma once
#include <memory>
#include <string>

#include "lanes/lane.h"
#include "lanes/pipelane_lane.h"

namespace pipelane {

class PluginLane : public Lane {
 public:
  // `library` keeps the shared library loaded for as long as the lane exists; `path` names it in
  // messages.
  PluginLane(const pipelane_lane_plugin* plugin, std::shared_ptr<void> library, std::string path);
  ~PluginLane() override;

  std::string name() const override;
  std::string work_unit() const override;
  void setup(LaneContext& ctx) override;
  double step(LaneContext& ctx) override;
  bool finished() const override;
  std::string save() const override;
  void load(const std::string& state) override;
  nlohmann::json report() const override;  // the last report survives teardown
  void teardown(LaneContext& ctx) override;

 private:
  void destroy_handle();
  void throw_pending_quota_error();
  [[noreturn]] void fail(const std::string& what, const char* err) const;
  static void* allocate_trampoline(void* context, std::size_t bytes, const char* what);

  const pipelane_lane_plugin* plugin_;
  std::shared_ptr<void> library_;
  std::string path_;
  void* handle_ = nullptr;
  Arena* arena_ = nullptr;
  std::string pending_quota_error_;
  mutable nlohmann::json last_report_ = nlohmann::json::object();
};

}  // namespace pipelane
