// Checkpoints: one HDF5 file per (pp, tp) shard, one lane file per rank that runs lanes, and a JSON
// manifest, written crash-safely and read back at any (pp, tp) by tensor name. This header gathers
// the parts; each lives in its own file:
//
//   checkpoint_error.h   CheckpointError, CheckpointSaveError
//   progress.h           TrainingProgress (step, LR schedule, sampler, fault counters) and its JSON
//   manifest.h           manifest.json: file names, sizes, CRC-32s; written last, read distrustfully
//   shard_file.h         the HDF5 shard file of one (pp, tp) rank
//   lane_file.h          the lane file of one world rank
//   staging.h            the one place tensor data moves between training memory and a checkpoint
//   reader.h             reading tensors by name, reassembled and sliced again for any grid
//   catalog.h            what a checkpoints root holds; cleaning up after killed saves
//   save.h               the collective save (its gathers: parallel/checkpoint_gather.h)
//   resume.h             [run] resume / overwrite: fresh start, auto, auto-skip-damaged, a path
//   durable_file.h       checked, fsync'd writes and zlib's CRC-32
//
// A checkpoint is a directory <run dir>/checkpoints/step_00000120/ holding
//   model_pp00_tp00.h5 ...   one per (pp, tp) rank of the saving grid (dp rank 0 writes it)
//   lanes_rank0003.bin ...   one per world rank that runs side-task lanes (that rank writes it)
//   manifest.json            written last: config, topology, versions, every file's size + CRC-32
// A save writes everything into step_00000120.saving/, fsyncs it, writes the manifest and renames
// the directory into place, so a crash leaves either no new checkpoint or a complete one. A failed
// save removes its directory; leftovers of a killed one are removed at the next start or save.
// Older checkpoints are pruned (keep_last) only after a newer one is in place; a checkpoint whose
// manifest does not read is never removed (a save of its step moves it aside to .damaged).
//
// Shard file (HDF5), format version 1:
//   /            attributes format = "pipelane-checkpoint", version = 1, step, pp_rank, tp_rank
//   /params/NAME, /adam_m/NAME, /adam_v/NAME
//                float32 datasets, this rank's slice, NAME as in model/gpt_layout.h
//                ("h.3.attn.c_attn.weight"); attributes full_shape, shard_dim, shard_blocks,
//                tp_rank, tp_size (the ParamEntry fields, so any reader can reassemble the full
//                tensor with gather_full_tensor). A tensor held by two chunks of one rank (the tied
//                wte) is stored once. The distributed optimizer's moments are gathered from the dp
//                ranks' shards first: the same layout, so a checkpoint resumes at any dp.
//   /state       attribute progress: JSON of TrainingProgress
//   /lanes       reserved, empty: lane state is per world rank (dp replicas run their own lanes),
//                so it lives in the lane files (trainer/checkpoint/lane_file.h), not in the shards.
// The manifest lists lane files under "lane_files" ({file, rank, bytes, crc32, lanes}); rank 0
// writes it only after every rank reported its files durable, so a complete checkpoint has all of
// them. Checkpoints without "lane_files" (older, or saved with lanes off) carry no lane state. On
// restore a rank loads its own file (same world rank) only when the grid (tp, pp, dp) and its
// configured lane names equal the saving run's; otherwise its lanes start fresh with one line.
#pragma once
#include "trainer/checkpoint/layer.h"  // trainer/README.md: the layers

#include "trainer/checkpoint/catalog.h"
#include "trainer/checkpoint/checkpoint_error.h"
#include "trainer/checkpoint/lane_file.h"
#include "trainer/checkpoint/manifest.h"
#include "trainer/checkpoint/model_json.h"
#include "trainer/checkpoint/progress.h"
#include "trainer/checkpoint/reader.h"
#include "trainer/checkpoint/resume.h"
#include "trainer/checkpoint/save.h"
#include "trainer/checkpoint/shard_file.h"
#include "trainer/checkpoint/staging.h"
#include "trainer/checkpoint/durable_file.h"
