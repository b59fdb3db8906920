#include "lanes/builtin/cnn/cnn_lane.h"

#include <chrono>
#include <cstring>
#include <fstream>
#include <limits>
#include <stdexcept>

#include "lanes/builtin/cnn/cnn_models.h"
#include "lanes/builtin/cnn/cnn_random.h"
#include "lanes/builtin/cnn/cnn_trainer.h"
#include "lanes/builtin/cnn/image_source.h"
#include "runtime/backend_registry.h"

namespace pipelane {
namespace {

using namespace cnn;

constexpr char kStateMagic[8] = {'P', 'L', 'C', 'N', 'N', 'L', 'N', '1'};

struct CnnLaneSettings {
  CnnModelConfig model;
  SgdSettings sgd;
  std::int64_t steps = 1000;
  double step_mflop = 50;
  std::string input_dir;
  std::int64_t images = 1024;
  std::int64_t decode_mb = 16;
  std::uint64_t seed = 0;
};

class CnnLane final : public Lane {
 public:
  explicit CnnLane(std::string arch) : arch_(std::move(arch)) {}
  std::string name() const override { return arch_; }
  std::string work_unit() const override { return "images"; }
  // Every op through the backend, the arena touched only by its copies (cnn_trainer.h).
  bool runs_on_device() const override { return true; }

  void setup(LaneContext& ctx) override {
    s_ = read_settings(ctx);
    output_dir_ = ctx.output_dir;
    // Every op goes through a backend, on buffers in its memory. The rank's backend when it can run
    // them: a device backend (the arena is then device memory), or the CPU's in fp32. A CPU
    // backend in bf16 compute would round the convolutions' GEMMs: the lane makes a one-thread fp32
    // CPU backend of its own for its host arena instead, as it always did.
    Backend* backend = &ctx.backend;
    Stream* stream = &ctx.stream;
    const bool host_arena = ctx.arena.kind() == MemoryKind::Host || ctx.arena.kind() == MemoryKind::PinnedHost;
    if (ctx.backend.kind() == DeviceKind::Cpu && ctx.backend.compute_precision() != DType::F32) {
      own_backend_ = BackendRegistry::with_builtins().create("cpu", BackendOptions{1});
      own_stream_ = own_backend_->create_stream(StreamPriority::Low);
      backend = own_backend_.get();
      stream = own_stream_.get();
    }
    using BackendOp = ::pipelane::OpKind;
    for (BackendOp op : {BackendOp::CnnIm2col, BackendOp::BatchNormForward, BackendOp::MaxPoolForward, BackendOp::SgdMomentum})
      if (!backend->supports(op, DType::F32))
        throw LaneError(arch_ + ": backend " + backend->name() + " has no " + op_kind_name(op));
    try {
      net_ = build_cnn(s_.model);
    } catch (const std::invalid_argument& e) {
      throw LaneError(ctx.options.source() + ": [lane." + arch_ + "] " + e.what());
    }
    // Decoding reads and writes its block on the host: from the arena when that is host memory,
    // else a host block of its own beside the device arena.
    const std::size_t decode_bytes = static_cast<std::size_t>(s_.decode_mb) << 20;
    const bool decode_in_arena = !s_.input_dir.empty() && host_arena;
    BufferPlan plan;
    net_->plan_buffers(plan);
    const double load_cost = s_.input_dir.empty() ? synthetic_cost_per_image(s_.model.image_size)
                                                  : folder_cost_per_image(s_.model.image_size);
    trainer_ = std::make_unique<CnnTrainer>(
        *net_, *backend, *stream, s_.sgd, s_.step_mflop * 1e6, load_cost,
        [this](std::int64_t position, float* pixels, std::int32_t* label) { source_->load(position, pixels, label); },
        s_.seed);
    trainer_->plan_buffers(plan);
    arena_bytes_ = plan.bytes(ctx.arena.alignment()) + (decode_in_arena ? decode_bytes : 0);
    const std::size_t free_bytes = ctx.arena.capacity() - ctx.arena.used();
    if (arena_bytes_ > free_bytes)
      throw LaneError(arch_ + ": the model needs " + std::to_string(arena_bytes_ >> 20) + " MiB of arena (" +
                      std::to_string(net_->parameter_count()) + " parameters x3 with gradients and momenta, " +
                      "activations of a batch of " + std::to_string(s_.model.batch) + " at " +
                      std::to_string(s_.model.image_size) + "x" + std::to_string(s_.model.image_size) + "), arena '" +
                      ctx.arena.name() + "' has " + std::to_string(free_bytes >> 20) +
                      " MiB free: raise [lanes] memory_mb or lower batch, image_size or raise width_divisor");
    plan.allocate(ctx.arena);
    net_->initialise(s_.seed, *backend, *stream);
    if (!s_.input_dir.empty() && !decode_in_arena) decode_arena_ = std::make_unique<Arena>("image decoding", decode_bytes);
    if (s_.input_dir.empty())
      source_ = make_synthetic_source(s_.model.image_size, s_.model.classes, s_.images, s_.seed);
    else
      source_ = make_folder_source(s_.input_dir, s_.model.image_size, s_.model.classes, s_.seed,
                                   decode_in_arena ? ctx.arena : *decode_arena_, decode_bytes);
    device_ = backend->kind() == DeviceKind::Cpu ? "cpu" : backend->name();
  }

  double step(LaneContext&) override {
    if (finished()) return 0;
    const auto t0 = std::chrono::steady_clock::now();
    const std::int64_t before = trainer_->steps_done();
    double images = 0;
    try {
      images = trainer_->run(s_.step_mflop * 1e6);
    } catch (const LaneError& e) {
      throw LaneError(arch_ + ": " + e.what());
    }
    seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    images_run_ += images;
    if (trainer_->steps_done() > before) append_metrics();
    return images;
  }

  bool finished() const override { return trainer_ && trainer_->steps_done() >= s_.steps; }

  std::string save() const override {
    if (!trainer_) throw LaneError(arch_ + ": save() before setup()");
    StateWriter w;
    w.bytes(kStateMagic, sizeof kStateMagic);
    w.put<std::uint64_t>(fingerprint());
    trainer_->save(w);
    return w.take();
  }

  void load(const std::string& state) override {
    if (!trainer_) throw LaneError(arch_ + ": load() before setup()");
    StateReader r(state, arch_);
    char magic[sizeof kStateMagic];
    r.bytes(magic, sizeof magic);
    if (std::memcmp(magic, kStateMagic, sizeof magic) != 0) throw LaneError(arch_ + ": saved state is not a CNN lane's");
    if (r.get<std::uint64_t>() != fingerprint())
      throw LaneError(arch_ + ": saved state was made with other options (arch, batch, image_size, classes, "
                      "width_divisor, step_mflop, seed, dropout, zero_init_residual or data)");
    try {
      trainer_->load(r);
    } catch (const LaneError& e) {
      throw LaneError(arch_ + ": " + e.what());
    }
    if (!r.at_end()) throw LaneError(arch_ + ": saved state has trailing bytes");
    metrics_append_ = true;
  }

  nlohmann::json report() const override {
    nlohmann::json j;
    j["arch"] = arch_;
    j["batch"] = s_.model.batch;
    j["image_size"] = s_.model.image_size;
    j["width_divisor"] = s_.model.width_divisor;
    j["classes"] = s_.model.classes;
    j["target_steps"] = s_.steps;
    j["device"] = device_ + ": every op through the backend (im2col + its GEMM for convolutions)";
    if (!trainer_) return j;
    const std::vector<double>& losses = trainer_->losses();
    j["steps"] = trainer_->steps_done();
    j["images"] = trainer_->images_done();
    if (!losses.empty()) {
      j["first_loss"] = losses.front();
      j["last_loss"] = losses.back();
    }
    // Over this process's steps (work redone after a resume included).
    j["images_per_second"] = seconds_ > 0 ? images_run_ / seconds_ : 0.0;
    j["parameters"] = net_->parameter_count();
    j["arena_bytes"] = arena_bytes_;
    j["blocks_per_step"] = trainer_->program().ops.size();
    j["next_block"] = trainer_->cursor();  // in the step in progress
    j["update_blocks_from"] = trainer_->program().first_update;
    j["step_mflop"] = s_.step_mflop;
    j["data"] = source_->describe();
    return j;
  }

 private:
  CnnLaneSettings read_settings(const LaneContext& ctx) const {
    const LaneOptions& o = ctx.options;
    CnnLaneSettings s;
    s.model.arch = arch_;
    s.model.batch = static_cast<int>(o.get_int("batch", 8, 1, 4096));
    s.model.image_size = static_cast<int>(o.get_int("image_size", 64, 32, 1024));
    s.model.classes = static_cast<int>(o.get_int("classes", 10, 1, 1 << 20));
    s.model.width_divisor = static_cast<int>(o.get_int("width_divisor", 1, 1, 64));
    if (64 % s.model.width_divisor != 0)
      throw LaneError(o.source() + ": [lane." + arch_ + "] width_divisor = " + std::to_string(s.model.width_divisor) +
                      ": expected a divisor of 64 (1, 2, 4, 8, 16, 32 or 64)");
    if (arch_ == "vgg19") s.model.dropout = static_cast<float>(o.get_double("dropout", 0.5, 0.0, 0.99));
    else s.model.zero_init_residual = o.get_bool("zero_init_residual", false);
    s.sgd.lr = static_cast<float>(o.get_double("lr", 0.01, 0.0, 10.0));
    s.sgd.momentum = static_cast<float>(o.get_double("momentum", 0.9, 0.0, 0.999));
    s.sgd.weight_decay = static_cast<float>(o.get_double("weight_decay", 1e-4, 0.0, 1.0));
    s.steps = o.get_int("steps", 1000, 1, std::numeric_limits<std::int32_t>::max());
    s.step_mflop = o.get_double("step_mflop", 50, 1e-3, 1e9);
    s.input_dir = o.get_string("input_dir", "");
    if (s.input_dir.empty()) s.images = o.get_int("images", 1024, 1, std::int64_t{1} << 40);
    else s.decode_mb = o.get_int("decode_mb", 16, 1, 1 << 16);
    s.seed = static_cast<std::uint64_t>(
        o.get_int("seed", static_cast<std::int64_t>(ctx.seed + static_cast<std::uint64_t>(ctx.rank)), 0,
                  std::numeric_limits<std::int64_t>::max()));
    o.reject_unknown();
    return s;
  }

  // What a saved state is only valid for (the bits depend on every one of these).
  std::uint64_t fingerprint() const {
    std::uint64_t h = name_key(arch_ + "|" + s_.input_dir);
    for (double v : {double(s_.model.batch), double(s_.model.image_size), double(s_.model.classes),
                     double(s_.model.width_divisor), double(s_.model.dropout), double(s_.model.zero_init_residual), s_.step_mflop, double(s_.images)})
      h = mix64(h ^ name_key(std::to_string(v)));
    return mix64(h ^ s_.seed);
  }

  void append_metrics() {
    if (output_dir_.empty()) return;
    const std::string path = output_dir_ + "/metrics.jsonl";
    std::ofstream out(path, metrics_opened_ || metrics_append_ ? std::ios::app : std::ios::trunc);
    metrics_opened_ = true;
    if (!out) throw LaneError(arch_ + ": cannot write " + path);
    out << nlohmann::json{{"step", trainer_->steps_done()}, {"loss", trainer_->losses().back()}, {"images", trainer_->images_done()}}.dump()
        << "\n";
  }

  std::string arch_;
  CnnLaneSettings s_;
  std::string output_dir_;
  std::unique_ptr<Backend> own_backend_;
  std::unique_ptr<Stream> own_stream_;
  std::unique_ptr<Arena> decode_arena_;  // a folder's decoding on a device backend (host memory)
  std::string device_;
  std::unique_ptr<CnnNetwork> net_;
  std::unique_ptr<ImageSource> source_;
  std::unique_ptr<CnnTrainer> trainer_;
  std::size_t arena_bytes_ = 0;
  double images_run_ = 0, seconds_ = 0;
  bool metrics_append_ = false, metrics_opened_ = false;
};

}  // namespace

std::unique_ptr<Lane> make_cnn_lane(const std::string& arch) { return std::make_unique<CnnLane>(arch); }

}  // namespace pipelane
