// Where a prediction reads a measured table beyond the shapes it measured:
// the GEMM efficiency table, the attention table and the cross-entropy
// vocabularies of a profile (loom calibrate's, or a datasheet profile's
// published points). Outside the measured range a lookup holds the nearest
// end's value, which is an extrapolation the user should see: each note names
// the shape, the measured range and what the prediction assumed.
#pragma once

#include <string>
#include <vector>

#include "core/hw_profile.h"
#include "core/layout.h"
#include "core/model_spec.h"
#include "core/train_spec.h"

namespace loom {

std::vector<std::string> outside_measured(const ModelSpec& m, const HwProfile& hw, const TrainSpec& train,
                                          const Layout& l);

}  // namespace loom
