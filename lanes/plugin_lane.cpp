#include "lanes/plugin_lane.h"

#include <vector>

namespace pipelane {
namespace {
constexpr std::size_t kErrLen = 1024;
}

PluginLane::PluginLane(const pipelane_lane_plugin* plugin, std::shared_ptr<void> library, std::string path)
    : plugin_(plugin), library_(std::move(library)), path_(std::move(path)) {}

PluginLane::~PluginLane() { destroy_handle(); }

std::string PluginLane::name() const { return plugin_->name ? plugin_->name : "?"; }
std::string PluginLane::work_unit() const { return plugin_->work_unit ? plugin_->work_unit : "units"; }

void PluginLane::fail(const std::string& what, const char* err) const {
  std::string message = "lane '" + name() + "' (" + path_ + "): " + what;
  if (err && *err) message += ": " + std::string(err);
  throw LaneError(message);
}

void* PluginLane::allocate_trampoline(void* context, std::size_t bytes, const char* what) {
  auto* self = static_cast<PluginLane*>(context);
  try {
    return self->arena_->allocate(bytes, what ? what : "plugin allocation");
  } catch (const ArenaQuotaError& error) {
    // Exceptions must not cross the C boundary: remember it, raise it when the call returns.
    if (self->pending_quota_error_.empty()) self->pending_quota_error_ = error.what();
    return nullptr;
  }
}

void PluginLane::throw_pending_quota_error() {
  if (pending_quota_error_.empty()) return;
  const std::string message = "lane '" + name() + "': " + pending_quota_error_;
  pending_quota_error_.clear();
  throw ArenaQuotaError(message);
}

void PluginLane::setup(LaneContext& ctx) {
  if (handle_) throw LaneError("lane '" + name() + "': setup() called twice");
  if (plugin_->option_keys) {
    // Let LaneOptions produce the standard "file: [lane.NAME] key: unknown key" message.
    for (const char* const* key = plugin_->option_keys; *key; ++key) (void)ctx.options.get_string(*key, "");
    ctx.options.reject_unknown();
  }
  std::vector<const char*> keys, values;
  for (const auto& [key, value] : ctx.options.values()) {
    keys.push_back(key.c_str());
    values.push_back(value.c_str());
  }
  arena_ = &ctx.arena;
  pipelane_lane_create_args args{};
  args.option_count = keys.size();
  args.option_keys = keys.data();
  args.option_values = values.data();
  args.output_dir = ctx.output_dir.c_str();
  args.rank = ctx.rank;
  args.seed = ctx.seed;
  args.allocator = {&PluginLane::allocate_trampoline, this};
  char err[kErrLen] = {0};
  handle_ = plugin_->create(&args, err, sizeof err);
  if (!pending_quota_error_.empty()) {
    destroy_handle();
    throw_pending_quota_error();
  }
  if (!handle_) fail("create failed", err);
}

double PluginLane::step(LaneContext&) {
  if (!handle_) throw LaneError("lane '" + name() + "': step() without a successful setup()");
  char err[kErrLen] = {0};
  const double units = plugin_->step(handle_, err, sizeof err);
  throw_pending_quota_error();
  if (!(units >= 0)) fail("step failed", err);  // also catches NaN
  return units;
}

bool PluginLane::finished() const { return !handle_ || plugin_->finished(handle_) != 0; }

std::string PluginLane::save() const {
  if (!handle_) throw LaneError("lane '" + name() + "': save() without a successful setup()");
  char* data = nullptr;
  std::size_t size = 0;
  char err[kErrLen] = {0};
  if (plugin_->save(handle_, &data, &size, err, sizeof err) != 0) fail("save failed", err);
  std::string state(data ? data : "", data ? size : 0);
  if (data && plugin_->free_buffer) plugin_->free_buffer(data);
  return state;
}

void PluginLane::load(const std::string& state) {
  if (!handle_) throw LaneError("lane '" + name() + "': load() without a successful setup()");
  char err[kErrLen] = {0};
  if (plugin_->load(handle_, state.data(), state.size(), err, sizeof err) != 0) fail("load failed", err);
  throw_pending_quota_error();
}

nlohmann::json PluginLane::report() const {
  if (handle_ && plugin_->report_json) {
    const char* text = plugin_->report_json(handle_);
    if (text) {
      nlohmann::json parsed = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
      last_report_ = parsed.is_discarded() ? nlohmann::json{{"invalid_report", text}} : parsed;
    }
  }
  return last_report_;
}

void PluginLane::teardown(LaneContext&) {
  if (handle_) (void)report();
  destroy_handle();
}

void PluginLane::destroy_handle() {
  if (handle_ && plugin_->destroy) plugin_->destroy(handle_);
  handle_ = nullptr;
}

}  // namespace pipelane
