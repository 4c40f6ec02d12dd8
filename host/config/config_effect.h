// config_effect.h — keys set where this config would ignore them (MaxText's habit: a setting that
// does nothing is a mistake). Each finding names the key, the keys that take its effect away and
// what would give it effect: `dataset_path` with `dataset_type=synthetic`, a bias update rate
// without `routed_bias`, MoE keys on a dense model, FSDP weight modes without FSDP, ...
//
// A key counts as set when a file or the command line gave it a value other than its default (a
// config file that spells out a default sets nothing). The finding is an error when the key was
// given in the same source as, or a later one than, the keys that disable it (the user asked for
// an effect that cannot happen); when a later source disabled it (`configs/demo.yml
// ici_fsdp_parallelism=1` turns off the file's FSDP weight mode; on the command line each
// argument is a source of its own, so `checkpoint_period=5 ... enable_checkpointing=false` turns
// saving off) it is a warning that names both.
#pragma once

#include <map>
#include <string>

#include "host/config/config.h"

namespace carousel {

// Where a key the user gave came from.
struct GivenKey {
  int layer = 0;      // 1 for the first source (a base file, then files, the command line last)
  std::string where;  // "command line" | "config file 'PATH' line N"
};

// Throws carousel::Error for the first key that has no effect in `cfg` (a validated config) and
// was given with or after what disables it; logs a warning for each one disabled later.
void check_keys_have_effect(const Config& cfg, const std::map<std::string, GivenKey>& given);

}  // namespace carousel
