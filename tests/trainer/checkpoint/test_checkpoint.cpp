// Checkpoint format, resharding on load, bad input, pruning, and the numerical-fault guard —
// in-process, without launching pipelane.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <random>

#include "model/gpt_model.h"
#include "parallel/pipeline_executor.h"
#include "parallel/topology.h"
#include "tests/datasets/test_files.h"
#include "trainer/checkpoint/checkpoint.h"
#include "trainer/run/step_guard.h"
#include "tests/support/cpu_backend_fixture.h"
#include "tests/trainer/checkpoint/test_checkpoint_mutations.h"

namespace pipelane {
namespace {

namespace fs = std::filesystem;
using test_support::TempDir;
using test_support::write_file;

GptConfig tiny_config() {
  GptConfig c;
  c.layers = 4;
  c.d_model = 32;
  c.heads = 4;
  c.max_seq_len = 16;
  c.vocab_size = 100;  // padded to 128
  return c;
}

// The whole model's tensors, with distinct values per group so a mix-up shows.
struct FullModel {
  ParamLayout layout;
  std::vector<float> p, m, v;
  explicit FullModel(const GptConfig& c) : layout(c, StageRange::whole(c)) {
    const std::size_t n = layout.total_floats();
    p.resize(n);
    m.resize(n);
    v.resize(n);
    GptStage::init_parameters(layout, p.data(), 5);
    for (std::size_t i = 0; i < n; ++i) {
      m[i] = 0.001f * static_cast<float>(i % 997);
      v[i] = 1e-6f * static_cast<float>(i % 389 + 1);
    }
  }
  const float* full(const std::vector<float>& buf, const std::string& name) const {
    return buf.data() + layout.find(name)->offset;
  }
};

// Writes `full` as a checkpoint saved on a pp x tp grid (one chunk per stage), like save_checkpoint.
void write_sharded(const std::string& dir, const FullModel& full, int pp, int tp, int step = 7) {
  fs::create_directories(dir);
  const GptConfig& c = full.layout.config();
  const auto ranges = split_layers(c.layers, pp, 1, "");
  std::vector<ShardRecord> records;
  TrainingProgress progress;
  progress.step = step;
  progress.sampler = {"test", {1, 2}};
  progress.guard.skipped_nonfinite = 3;
  progress.guard.loss_mean = 1.25;
  for (int s = 0; s < pp; ++s)
    for (int r = 0; r < tp; ++r) {
      ParamLayout layout(c, ranges[s], {r, tp});
      std::vector<float> p(layout.total_floats()), m(p.size()), v(p.size());
      for (const ParamEntry& e : layout.entries()) {
        slice_from_full(e, full.full(full.p, e.name), p.data() + e.offset);
        slice_from_full(e, full.full(full.m, e.name), m.data() + e.offset);
        slice_from_full(e, full.full(full.v, e.name), v.data() + e.offset);
      }
      ChunkState cs{&layout, s, p.data(), nullptr, m.data(), v.data()};
      records.push_back(write_shard(dir, s, r, TrainingMemory{{cs}, testing::cpu_backend(), testing::cpu_stream()},
                                    progress));
    }
  write_manifest(dir, make_manifest(step, c, [&] { CheckpointTopology t; t.tp = tp; t.pp = pp; return t; }(), "[model]\n", records));
}

void expect_loads_exactly(const std::string& dir, const FullModel& full, int pp, int tp) {
  CheckpointReader reader(dir);
  const GptConfig& c = full.layout.config();
  const auto ranges = split_layers(c.layers, pp, 1, "");
  for (int s = 0; s < pp; ++s)
    for (int r = 0; r < tp; ++r) {
      ParamLayout layout(c, ranges[s], {r, tp});
      std::vector<float> p(layout.total_floats(), -1.f), m(p.size(), -1.f), v(p.size(), -1.f);
      reader.load_into(layout, p.data(), m.data(), v.data());
      for (const ParamEntry& e : layout.entries()) {
        std::vector<float> want(e.numel);
        slice_from_full(e, full.full(full.p, e.name), want.data());
        ASSERT_EQ(0, std::memcmp(want.data(), p.data() + e.offset, e.numel * 4)) << e.name << " pp" << s << " tp" << r;
        slice_from_full(e, full.full(full.v, e.name), want.data());
        ASSERT_EQ(0, std::memcmp(want.data(), v.data() + e.offset, e.numel * 4)) << e.name;
        slice_from_full(e, full.full(full.m, e.name), want.data());
        ASSERT_EQ(0, std::memcmp(want.data(), m.data() + e.offset, e.numel * 4)) << e.name;
      }
    }
}

TEST(Checkpoint, RoundTripKeepsProgressAndTensors) {
  TempDir tmp;
  const FullModel full(tiny_config());
  write_sharded(tmp.file("ck"), full, 1, 1);
  CheckpointReader reader(tmp.file("ck"));
  EXPECT_EQ(reader.step(), 7);
  const TrainingProgress p = reader.progress();
  EXPECT_EQ(p.step, 7);
  EXPECT_EQ(p.sampler.kind, "test");
  EXPECT_EQ(p.sampler.words, (std::vector<std::uint64_t>{1, 2}));
  EXPECT_EQ(p.guard.skipped_nonfinite, 3);
  EXPECT_EQ(p.guard.loss_mean, 1.25);
  expect_loads_exactly(tmp.file("ck"), full, 1, 1);
  // The shard holds the reserved lanes group and the manifest lists versions and checksums.
  const auto& files = reader.manifest()["files"];
  ASSERT_EQ(files.size(), 1u);
  EXPECT_EQ(files[0]["file"], "model_pp00_tp00.h5");
  EXPECT_TRUE(reader.manifest()["versions"].contains("hdf5"));
  EXPECT_FALSE(fs::exists(tmp.file("ck/model_pp00_tp00.h5.tmp")));
}

TEST(Checkpoint, ReshardsBetweenAnyPpAndTp) {
  const FullModel full(tiny_config());
  const std::pair<int, int> grids[] = {{1, 1}, {2, 1}, {1, 2}, {2, 2}, {4, 1}, {1, 4}};
  for (auto [spp, stp] : grids) {
    TempDir tmp;
    write_sharded(tmp.file("ck"), full, spp, stp);
    for (auto [lpp, ltp] : grids) {
      SCOPED_TRACE("saved pp" + std::to_string(spp) + " tp" + std::to_string(stp) + ", loaded pp" +
                   std::to_string(lpp) + " tp" + std::to_string(ltp));
      expect_loads_exactly(tmp.file("ck"), full, lpp, ltp);
    }
  }
}

TEST(Checkpoint, WteWithDifferentVocabPaddingKeepsRealRows) {
  GptConfig c = tiny_config();
  c.heads = 3;  // tp 3: padded vocab 192 instead of 128
  c.d_model = 24;
  const FullModel full(c);
  TempDir tmp;
  write_sharded(tmp.file("ck"), full, 1, 1);
  CheckpointReader reader(tmp.file("ck"));
  ParamLayout l3(c, StageRange::whole(c), {1, 3});
  std::vector<float> p(l3.total_floats());
  reader.load_into(l3, p.data(), nullptr, nullptr);
  const ParamEntry& e = *l3.find("wte");
  ASSERT_EQ(e.full_shape[0], 192);
  std::vector<float> wide(e.full_numel(), 0.f);
  std::copy(full.full(full.p, "wte"), full.full(full.p, "wte") + 128 * 24, wide.begin());
  std::vector<float> want(e.numel);
  slice_from_full(e, wide.data(), want.data());
  EXPECT_EQ(0, std::memcmp(want.data(), p.data() + e.offset, e.numel * 4));
}

template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const CheckpointError& e) {
    return e.what();
  }
  return "";
}

TEST(CheckpointBadInput, TruncatedShardIsAClearError) {
  TempDir tmp;
  write_sharded(tmp.file("ck"), FullModel(tiny_config()), 2, 1);
  const std::string f = tmp.file("ck/model_pp01_tp00.h5");
  fs::resize_file(f, fs::file_size(f) / 2);
  const std::string e = error_of([&] { CheckpointReader r(tmp.file("ck")); });
  EXPECT_NE(e.find("model_pp01_tp00.h5: truncated or damaged"), std::string::npos) << e;
}

TEST(CheckpointBadInput, DamagedShardFailsItsChecksum) {
  TempDir tmp;
  write_sharded(tmp.file("ck"), FullModel(tiny_config()), 1, 1);
  const std::string f = tmp.file("ck/model_pp00_tp00.h5");
  {
    std::fstream io(f, std::ios::in | std::ios::out | std::ios::binary);
    io.seekp(static_cast<std::streamoff>(fs::file_size(f) - 100));
    io.put('\x5a');
  }
  CheckpointReader r(tmp.file("ck"));
  const std::string e = error_of([&] { r.full_tensor("params", "wpe"); });
  EXPECT_NE(e.find("checksum mismatch"), std::string::npos) << e;
}

TEST(CheckpointBadInput, MissingShardIsAClearError) {
  TempDir tmp;
  write_sharded(tmp.file("ck"), FullModel(tiny_config()), 1, 2);
  fs::remove(tmp.file("ck/model_pp00_tp01.h5"));
  const std::string e = error_of([&] { CheckpointReader r(tmp.file("ck")); });
  EXPECT_NE(e.find("shard model_pp00_tp01.h5 is missing"), std::string::npos) << e;
}

TEST(CheckpointBadInput, WrongModelShapeNamesTheKey) {
  TempDir tmp;
  write_sharded(tmp.file("ck"), FullModel(tiny_config()), 1, 1);
  CheckpointReader r(tmp.file("ck"));
  GptConfig other = tiny_config();
  other.d_model = 64;
  const std::string e = error_of([&] { r.check_model(other); });
  EXPECT_NE(e.find("saved with d_model = 32 but [model] d_model = 64"), std::string::npos) << e;
  // And tensor by tensor, for a reader that skips the config check.
  ParamLayout wide(other, StageRange::whole(other));
  std::vector<float> p(wide.total_floats());
  const std::string e2 = error_of([&] { r.load_into(wide, p.data(), nullptr, nullptr); });
  EXPECT_NE(e2.find("but the model expects"), std::string::npos) << e2;
}

TEST(CheckpointBadInput, TruncatedManifestAndIncompleteDirectories) {
  TempDir tmp;
  const FullModel full(tiny_config());
  const std::string root = tmp.file("run/checkpoints");
  write_sharded(root + "/step_00000004", full, 1, 1, 4);
  write_sharded(root + "/step_00000008", full, 1, 1, 8);
  // An interrupted save: shards but no manifest; a manifest cut short.
  write_sharded(root + "/step_00000012", full, 1, 1, 12);
  fs::remove(root + "/step_00000012/manifest.json");
  EXPECT_EQ(newest_complete_checkpoint(root), root + "/step_00000008");
  const std::string m = root + "/step_00000008/manifest.json";
  fs::resize_file(m, fs::file_size(m) / 2);
  EXPECT_EQ(newest_complete_checkpoint(root), root + "/step_00000004");
  EXPECT_NE(error_of([&] { CheckpointReader r(root + "/step_00000008"); }).find("not valid JSON"), std::string::npos);
  const auto entries = list_checkpoints(root);
  ASSERT_EQ(entries.size(), 3u);
  EXPECT_EQ(entries[0].state, CheckpointState::Complete);
  EXPECT_EQ(entries[1].state, CheckpointState::Damaged);
  EXPECT_EQ(entries[2].state, CheckpointState::Interrupted);
  EXPECT_NE(error_of([&] { decide_resume({tmp.file("run"), root + "/step_00000012"}); }).find("not a complete checkpoint"),
            std::string::npos);
  EXPECT_NE(error_of([&] { decide_resume({tmp.file("run"), tmp.file("nope")}); }).find("no such checkpoint"),
            std::string::npos);
  EXPECT_FALSE(decide_resume({tmp.file("empty"), "auto"}).dir);
  EXPECT_FALSE(decide_resume({tmp.file("empty"), "none"}).dir);
}

TEST(CheckpointBadInput, ManifestFileNamesStayInsideTheCheckpointDirectory) {
  TempDir tmp;
  write_sharded(tmp.file("ck"), FullModel(tiny_config()), 1, 1);
  write_file(tmp.file("outside.h5"), "not for a checkpoint to read");
  const nlohmann::json good = test_support::read_json_file(tmp.file("ck/manifest.json"));
  for (const std::string& name : {tmp.file("outside.h5"), std::string("../outside.h5"), std::string("../../x"),
                                 std::string(".."), std::string("."), std::string("a/b.h5"), std::string("")}) {
    nlohmann::json m = good;
    m["files"][0]["file"] = name;
    test_support::write_json_file(tmp.file("ck/manifest.json"), m);
    const std::string e = error_of([&] { CheckpointReader r(tmp.file("ck")); });
    EXPECT_NE(e.find("is not a plain name inside the checkpoint directory"), std::string::npos) << name << ": " << e;
    EXPECT_EQ(e.find('\n'), std::string::npos) << e;
    // The lane file list is held to the same rule.
    m = good;
    m["lane_files"] = {{{"file", name}, {"rank", 0}, {"bytes", 1}, {"crc32", "00000000"}, {"lanes", {"x"}}}};
    test_support::write_json_file(tmp.file("ck/manifest.json"), m);
    EXPECT_NE(error_of([&] { CheckpointReader r(tmp.file("ck")); }).find("not a plain name"), std::string::npos) << name;
  }
  // A plain name that is a link to a file elsewhere is refused too.
  test_support::write_json_file(tmp.file("ck/manifest.json"), good);
  const std::string shard = tmp.file("ck/model_pp00_tp00.h5");
  fs::rename(shard, tmp.file("moved.h5"));
  fs::create_symlink(tmp.file("moved.h5"), shard);
  EXPECT_NE(error_of([&] { CheckpointReader r(tmp.file("ck")); }).find("not a regular file"), std::string::npos);
}

// A checkpoint whose HDF5 attributes lie, with the manifest's size and CRC updated so the lie gets
// past the checksums: every case is one CheckpointError naming the file and tensor, before any
// copy (the hostile test found a SIGFPE and an out-of-bounds write in place_into_full here).
TEST(CheckpointBadInput, LyingTensorMetadataIsRefusedBeforeAnyCopy) {
  const GptConfig c = tiny_config();
  struct Lie {
    const char* attribute;
    std::vector<std::int64_t> values;
    const char* expect;
  };
  const Lie lies[] = {
      {"shard_blocks", {0}, "shard_blocks"},           // was a division by zero (SIGFPE)
      {"tp_size", {0}, "tp_size"},
      {"tp_size", {1}, "outside [0, 0]"},              // claims whole: its tp_rank 1 cannot be
      {"tp_rank", {5}, "tp_rank"},
      {"shard_dim", {3}, "shard_dim"},
      {"shard_dim", {-1}, "do not fit its shape"},
      {"full_shape", {1 << 30, 32}, "do not fit its shape"},  // was a write far past the buffer
      {"full_shape", {128, 32, 2}, "do not fit its shape"},
      {"full_shape", {}, "do not fit its shape"},
      {"full_shape", {-128, 32}, "do not fit its shape"},
      {"shard_blocks", {3}, "do not fit its shape"},
  };
  for (const Lie& lie : lies) {
    TempDir tmp;
    test_support::write_model_checkpoint(tmp.file("ck"), c, 1, 2);
    const std::string shard = tmp.file("ck/model_pp00_tp01.h5");
    test_support::set_int_attribute(shard, "/params/wte", lie.attribute, lie.values);
    test_support::refresh_manifest_record(tmp.file("ck"), "model_pp00_tp01.h5");
    CheckpointReader r(tmp.file("ck"));
    ParamLayout layout(c, StageRange::whole(c));
    std::vector<float> p(layout.total_floats());
    const std::string e = error_of([&] { r.load_into(layout, p.data(), nullptr, nullptr); });
    SCOPED_TRACE(std::string(lie.attribute) + " lies");
    EXPECT_NE(e.find(shard + ": /params/wte: "), std::string::npos) << e;
    EXPECT_NE(e.find(lie.expect), std::string::npos) << e;
    EXPECT_EQ(e.find('\n'), std::string::npos) << e;
  }
  // A dataset declaring a huge shape it never stored, attributes in line with it.
  TempDir tmp;
  test_support::write_model_checkpoint(tmp.file("ck"), c, 1, 1);
  const std::string shard = tmp.file("ck/model_pp00_tp00.h5");
  test_support::replace_dataset(shard, "/adam_v/wpe", {1u << 28, 32}, H5T_IEEE_F32LE, false);
  test_support::set_int_attribute(shard, "/adam_v/wpe", "full_shape", {1 << 28, 32});
  test_support::refresh_manifest_record(tmp.file("ck"), "model_pp00_tp00.h5");
  CheckpointReader r(tmp.file("ck"));
  const std::string e = error_of([&] { r.full_tensor("adam_v", "wpe"); });
  EXPECT_NE(e.find("the file stores 0 of its"), std::string::npos) << e;
}

TEST(CheckpointBadInput, GatherRefusesEntriesThatDoNotDescribeTheirSlices) {
  const GptConfig c = tiny_config();
  ParamLayout l0(c, StageRange::whole(c), {0, 2}), l1(c, StageRange::whole(c), {1, 2});
  ParamEntry a = *l0.find("wte"), b = *l1.find("wte");
  std::vector<float> da(a.numel, 1.f), db(b.numel, 2.f), full(a.full_numel());
  gather_full_tensor({&a, &b}, {da.data(), db.data()}, full.data());
  EXPECT_EQ(full.front(), 1.f);
  EXPECT_EQ(full.back(), 2.f);
  ParamEntry lying = b;
  lying.shape[0] *= 4;  // claims more rows than the full tensor has room for from this rank
  lying.numel *= 4;
  std::vector<float> big(lying.numel);
  EXPECT_THROW(gather_full_tensor({&a, &lying}, {da.data(), big.data()}, full.data()), std::invalid_argument);
  lying = b;
  lying.shard_blocks = 0;
  EXPECT_THROW(gather_full_tensor({&a, &lying}, {da.data(), db.data()}, full.data()), std::invalid_argument);
  EXPECT_THROW(place_into_full(lying, db.data(), full.data()), std::invalid_argument);
  lying = b;
  lying.tp_rank = 2;
  EXPECT_THROW(slice_from_full(lying, full.data(), db.data()), std::invalid_argument);
}

// save_checkpoint through a real single-process executor: pruning, never touching the newest
// complete checkpoint, and clearing interrupted saves.
TEST(CheckpointSave, PrunesOnlyAfterANewerOneIsComplete) {
  TempDir tmp;
  Topology topo = Topology::single_process();
  ExecutorOptions o;
  o.model = tiny_config();
  o.schedule.kind = ScheduleKind::OneFOneB;
  o.schedule.pp = 1;
  o.schedule.microbatches = 1;
  o.seq_len = 16;
  PipelineExecutor exec(o, topo, testing::cpu_backend());
  const std::string root = tmp.file("checkpoints");
  TrainingProgress prog;
  prog.sampler = {"test", {0, 0}};
  auto save = [&](int step) {
    prog.step = step;
    return save_checkpoint(root, step, exec, topo, prog, o.model, CheckpointTopology{}, "", 2);
  };
  save(1);
  save(2);
  // Leftovers of an interrupted save of step 3 (no manifest) are replaced by the real one.
  fs::create_directories(root + "/step_00000003");
  write_file(root + "/step_00000003/model_pp00_tp00.h5.tmp", "partial");
  const std::string d3 = save(3);
  EXPECT_FALSE(fs::exists(d3 + "/model_pp00_tp00.h5.tmp"));
  auto all = complete_checkpoints(root);
  ASSERT_EQ(all.size(), 2u);
  EXPECT_EQ(all[0].first, 2);
  EXPECT_EQ(all[1].first, 3);
  // A save never skips: a complete checkpoint of the same step is replaced by the new state.
  float* params = exec.chunk_states()[0].params;
  params[0] += 1.0f;
  save(3);
  EXPECT_EQ(CheckpointReader(d3).full_tensor("params", exec.chunk_states()[0].layout->entries()[0].name)[0], params[0]);
  // A damaged checkpoint of the same step is moved aside, never removed.
  write_file(d3 + "/manifest.json", "{ cut short");
  save(3);
  EXPECT_TRUE(fs::exists(d3 + ".damaged/model_pp00_tp00.h5"));
  EXPECT_NO_THROW(CheckpointReader r(d3));
  EXPECT_FALSE(fs::exists(root + "/" + staging_dir_name(3)));
  // An interrupted save older than the newest complete one is removed by the next save.
  fs::create_directories(root + "/step_00000000");
  save(4);
  EXPECT_FALSE(fs::exists(root + "/step_00000000"));
  all = complete_checkpoints(root);
  ASSERT_EQ(all.size(), 2u);
  EXPECT_EQ(all[1].first, 4);
  CheckpointReader r(all[1].second);
  ParamLayout whole(o.model, StageRange::whole(o.model));
  std::vector<float> p(whole.total_floats());
  r.load_into(whole, p.data(), nullptr, nullptr);
  EXPECT_EQ(0, std::memcmp(p.data(), exec.chunk_states()[0].params, p.size() * 4));
}

TEST(StepGuardTest, SkipsNonFiniteAndStopsAfterNInARow) {
  StepGuard g(StepGuardOptions{3, 0});
  EXPECT_EQ(g.judge(2.0, 1.0), StepVerdict::Apply);
  EXPECT_EQ(g.judge(NAN, 1.0), StepVerdict::SkipNonFinite);
  EXPECT_EQ(g.judge(2.0, INFINITY), StepVerdict::SkipNonFinite);
  EXPECT_NO_THROW(g.check_stop(3));
  EXPECT_EQ(g.judge(1.9, 1.0), StepVerdict::Apply);  // the run recovers: the count restarts
  EXPECT_EQ(g.state.consecutive_bad, 0);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(g.judge(-INFINITY, NAN), StepVerdict::SkipNonFinite);
  EXPECT_EQ(g.state.skipped_nonfinite, 5);
  try {
    g.check_stop(8);
    FAIL() << "expected NumericalFaultError";
  } catch (const NumericalFaultError& e) {
    EXPECT_NE(std::string(e.what()).find("3 steps in a row were skipped"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("max_bad_steps"), std::string::npos) << e.what();
  }
}

TEST(StepGuardTest, SkipsLossSpikesByZScoreWhenOn) {
  StepGuard off(StepGuardOptions{5, 0});
  StepGuard on(StepGuardOptions{5, 4.0});
  std::mt19937 rng(3);
  std::normal_distribution<double> noise(0.0, 0.01);
  for (int i = 0; i < 40; ++i) {
    const double loss = 3.0 + noise(rng);
    EXPECT_EQ(on.judge(loss, 1.0), StepVerdict::Apply) << i;
    off.judge(loss, 1.0);
  }
  EXPECT_EQ(on.judge(3.5, 1.0), StepVerdict::SkipSpike);
  EXPECT_EQ(off.judge(3.5, 1.0), StepVerdict::Apply);
  EXPECT_EQ(on.judge(3.0, 1.0), StepVerdict::Apply);
  EXPECT_EQ(on.state.skipped_spike, 1);
  EXPECT_EQ(on.judge(2.0, 1.0), StepVerdict::Apply);  // a drop is never a spike
}

}  // namespace
}  // namespace pipelane
