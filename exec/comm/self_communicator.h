// A communicator of one rank: every collective is a copy. Lets a single
// process run the executor (and its tests) without a launcher.
#pragma once

#include <memory>

#include "exec/comm/communicator.h"

namespace loom::exec {

std::unique_ptr<Communicator> make_self_communicator(const std::string& name = "self");

}  // namespace loom::exec
