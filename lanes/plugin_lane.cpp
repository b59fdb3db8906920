#include "lanes/plugin_lane.h"

#include <cstring>
#include <vector>

namespace pipelane {
namespace {

constexpr std::size_t kErrLen = 1024;

// The version-1 layouts, as lanes/pipelane_lane.h declared them at ABI 1 (without struct_size
// and the fields version 2 appended). Read and written only here.
struct PluginV1 {
  std::uint32_t abi_version;
  const char* name;
  const char* work_unit;
  const char* const* option_keys;
  void* (*create)(const void* args, char* err, std::size_t errlen);
  double (*step)(void* handle, char* err, std::size_t errlen);
  int (*finished)(const void* handle);
  int (*save)(const void* handle, char** data, std::size_t* size, char* err, std::size_t errlen);
  void (*free_buffer)(char* data);
  int (*load)(void* handle, const char* data, std::size_t size, char* err, std::size_t errlen);
  const char* (*report_json)(void* handle);
  void (*destroy)(void* handle);
};

struct CreateArgsV1 {
  std::size_t option_count;
  const char* const* option_keys;
  const char* const* option_values;
  const char* output_dir;
  int rank;
  std::uint64_t seed;
  pipelane_lane_allocator allocator;
};

// A version-2 description ends at least with `destroy`; later versions append.
constexpr std::size_t kV2DescriptionSize = offsetof(pipelane_lane_plugin, destroy) + sizeof(void (*)(void*));

PluginDescription from_v1(const pipelane_lane_plugin* raw) {
  PluginV1 v1;
  std::memcpy(&v1, raw, sizeof v1);
  PluginDescription d;
  d.abi_version = 1;
  pipelane_lane_plugin& f = d.fields;
  f.abi_version = 1;
  f.name = v1.name;
  f.work_unit = v1.work_unit;
  f.option_keys = v1.option_keys;
  // The v1 create() takes CreateArgsV1; PluginLane::create() hands it exactly that.
  f.create = reinterpret_cast<decltype(f.create)>(v1.create);
  f.step = v1.step;
  f.finished = v1.finished;
  f.save = v1.save;
  f.free_buffer = v1.free_buffer;
  f.load = v1.load;
  f.report_json = v1.report_json;
  f.destroy = v1.destroy;
  return d;
}

// The lane's device as the plugin sees it. The CPU device has no index and no native stream.
pipelane_lane_device device_descriptor(const LaneContext& ctx) {
  pipelane_lane_device device{};
  device.kind = ctx.backend.kind() == DeviceKind::Cuda ? PIPELANE_LANE_DEVICE_CUDA : PIPELANE_LANE_DEVICE_CPU;
  device.index = 0;
  device.stream = nullptr;
  return device;
}

}  // namespace

PluginDescription read_plugin_description(const pipelane_lane_plugin* raw, const std::string& path) {
  if (!raw) throw LaneError(path + ": " PIPELANE_LANE_PLUGIN_SYMBOL "() returned NULL");
  const std::uint32_t version = raw->abi_version;  // the one field every version has in place
  if (version < PIPELANE_LANE_ABI_OLDEST || version > PIPELANE_LANE_ABI_VERSION)
    throw LaneError(path + ": built for lane ABI " + std::to_string(version) + ", this pipelane speaks " +
                    std::to_string(PIPELANE_LANE_ABI_OLDEST) + " to " + std::to_string(PIPELANE_LANE_ABI_VERSION));
  PluginDescription d;
  if (version == 1) {
    d = from_v1(raw);
  } else {
    if (raw->struct_size < kV2DescriptionSize)
      throw LaneError(path + ": lane ABI " + std::to_string(version) + " description of " +
                      std::to_string(raw->struct_size) + " bytes (struct_size), at least " +
                      std::to_string(kV2DescriptionSize) + " expected");
    d.abi_version = version;
    // Fields this pipelane knows, up to what the plugin has; later fields of a newer header stay unread.
    std::memcpy(&d.fields, raw, std::min<std::size_t>(raw->struct_size, sizeof d.fields));
  }
  const pipelane_lane_plugin& f = d.fields;
  std::string missing;
  if (!f.name || !*f.name) missing += " name";
  if (!f.create) missing += " create";
  if (!f.step) missing += " step";
  if (!f.finished) missing += " finished";
  if (!f.save) missing += " save";
  if (!f.load) missing += " load";
  if (!f.destroy) missing += " destroy";
  if (!missing.empty()) throw LaneError(path + ": lane plugin description lacks:" + missing);
  return d;
}

PluginLane::PluginLane(PluginDescription plugin, std::shared_ptr<void> library, std::string path)
    : plugin_(plugin), library_(std::move(library)), path_(std::move(path)) {}

PluginLane::~PluginLane() { destroy_handle(); }

std::string PluginLane::name() const { return abi().name ? abi().name : "?"; }
std::string PluginLane::work_unit() const { return abi().work_unit ? abi().work_unit : "units"; }

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

void* PluginLane::create(const LaneContext& ctx, const char* const* keys, const char* const* values,
                         std::size_t count, char* err, std::size_t errlen) {
  const pipelane_lane_allocator allocator{&PluginLane::allocate_trampoline, this};
  if (plugin_.abi_version == 1) {
    const CreateArgsV1 args{count, keys, values, ctx.output_dir.c_str(), ctx.rank, ctx.seed, allocator};
    return abi().create(reinterpret_cast<const pipelane_lane_create_args*>(&args), err, errlen);
  }
  pipelane_lane_create_args args{};
  args.struct_size = sizeof args;
  args.option_count = count;
  args.option_keys = keys;
  args.option_values = values;
  args.output_dir = ctx.output_dir.c_str();
  args.rank = ctx.rank;
  args.seed = ctx.seed;
  args.allocator = allocator;
  args.device = device_descriptor(ctx);
  args.world_size = ctx.world_size;
  args.instance_index = ctx.instance_index;
  args.instance_count = ctx.instance_count;
  return abi().create(&args, err, errlen);
}

void PluginLane::setup(LaneContext& ctx) {
  if (handle_) throw LaneError("lane '" + name() + "': setup() called twice");
  if (abi().option_keys) {
    // Let LaneOptions produce the standard "file: [lane.NAME] key: unknown key" message.
    for (const char* const* key = abi().option_keys; *key; ++key) (void)ctx.options.get_string(*key, "");
    ctx.options.reject_unknown();
  }
  std::vector<const char*> keys, values;
  for (const auto& [key, value] : ctx.options.values()) {
    keys.push_back(key.c_str());
    values.push_back(value.c_str());
  }
  arena_ = &ctx.arena;
  char err[kErrLen] = {0};
  handle_ = create(ctx, keys.data(), values.data(), keys.size(), err, sizeof err);
  if (!pending_quota_error_.empty()) {
    destroy_handle();
    throw_pending_quota_error();
  }
  if (!handle_) fail("create failed", err);
}

double PluginLane::step(LaneContext&) {
  if (!handle_) throw LaneError("lane '" + name() + "': step() without a successful setup()");
  char err[kErrLen] = {0};
  const double units = abi().step(handle_, err, sizeof err);
  throw_pending_quota_error();
  if (!(units >= 0)) fail("step failed", err);  // also catches NaN
  return units;
}

bool PluginLane::finished() const { return handle_ ? abi().finished(handle_) != 0 : finished_at_teardown_; }

std::string PluginLane::save() const {
  if (!handle_) throw LaneError("lane '" + name() + "': save() without a successful setup()");
  char* data = nullptr;
  std::size_t size = 0;
  char err[kErrLen] = {0};
  if (abi().save(handle_, &data, &size, err, sizeof err) != 0) fail("save failed", err);
  std::string state(data ? data : "", data ? size : 0);
  if (data && abi().free_buffer) abi().free_buffer(data);
  return state;
}

void PluginLane::load(const std::string& state) {
  if (!handle_) throw LaneError("lane '" + name() + "': load() without a successful setup()");
  char err[kErrLen] = {0};
  if (abi().load(handle_, state.data(), state.size(), err, sizeof err) != 0) fail("load failed", err);
  throw_pending_quota_error();
}

nlohmann::json PluginLane::report() const {
  if (handle_ && abi().report_json) {
    const char* text = abi().report_json(handle_);
    if (text) {
      nlohmann::json parsed = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
      last_report_ = parsed.is_discarded() ? nlohmann::json{{"invalid_report", text}} : parsed;
    }
  }
  return last_report_;
}

void PluginLane::teardown(LaneContext&) {
  if (handle_) {
    (void)report();
    finished_at_teardown_ = abi().finished(handle_) != 0;
  }
  destroy_handle();
}

void PluginLane::destroy_handle() {
  if (handle_ && abi().destroy) abi().destroy(handle_);
  handle_ = nullptr;
}

}  // namespace pipelane
