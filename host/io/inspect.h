// inspect.h — `carousel inspect DIR`: what a checkpoint holds and whether it is intact.
//
// DIR is a checkpoint step directory (<run>/checkpoints/<step>), a run directory (its newest
// step directory is inspected, usable or not: the point is to see what is wrong with it) or the
// checkpoints directory itself. The report (stdout) gives the step, the format version, each
// file of the manifest, and every tensor of model.safetensors and optimizer.safetensors with its
// shape, dtype and the CRC32 of its bytes; it ends with "manifest: verified" or
// "manifest: FAILED: <the problem>", the same check a resume makes (verify_checkpoint), plus the
// index's (verify_checkpoint_index).
#pragma once

#include <ostream>
#include <string>

namespace carousel {

// The step directory `path` names: itself when it holds a checkpoint's files, else the newest
// numeric step directory under path/checkpoints or path. Throws carousel::Error when there is
// none (not a checkpoint).
std::string resolve_checkpoint_directory(const std::string& path);

// The checkpoint's Hugging Face index (model.safetensors.index.json, written with a model in
// parts; transformers follows it to load the directory), checked like the manifest: when the
// index is there it must be a regular file the manifest lists (so its bytes are verified), and
// every file its weight_map names a model file inside the directory (a plain name, not a symlink
// or a path out of it) that the manifest lists and that holds the tensor; every tensor of the
// listed model files must be in weight_map. Nothing to check without an index. Throws
// carousel::Error naming the entry. Expects the manifest verified (verify_checkpoint) first.
void verify_checkpoint_index(const std::string& directory);

// Writes the report of the checkpoint at `path` to `out`; returns 0 when the manifest verifies
// and every file could be read, 2 otherwise. Throws carousel::Error when `path` is not a
// checkpoint (nor a run or checkpoints directory holding one).
int inspect_checkpoint(const std::string& path, std::ostream& out);

}  // namespace carousel
