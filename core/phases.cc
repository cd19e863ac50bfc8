// Step phases (core/phases.h): arithmetic, flattening and JSON.
#include "core/phases.h"

#include "core/json_util.h"

namespace loom {

StepPhases& StepPhases::operator+=(const StepPhases& o) {
  for (const PhaseField& f : kPhaseFields) this->*f.member += o.*f.member;
  return *this;
}

StepPhases StepPhases::operator/(double d) const {
  StepPhases p = *this;
  for (const PhaseField& f : kPhaseFields) p.*f.member /= d;
  return p;
}

PhaseArray flatten(const StepPhases& p) {
  PhaseArray a{};
  for (size_t i = 0; i < kPhaseFields.size(); ++i) a[i] = p.*kPhaseFields[i].member;
  return a;
}

StepPhases unflatten(const PhaseArray& a) {
  StepPhases p;
  for (size_t i = 0; i < kPhaseFields.size(); ++i) p.*kPhaseFields[i].member = a[i];
  return p;
}

std::string phases_to_json(const StepPhases& p) {
  OrderedJson j = OrderedJson::object();
  for (const PhaseField& f : kPhaseFields) {
    const double v = p.*f.member;
    if (std::isfinite(v)) j[f.key] = v;
    else j[f.key] = nullptr;
  }
  return j.dump();
}

Result<StepPhases> parse_phases(const std::string& text, const std::string& what, const std::string& fix) {
  LOOM_ASSIGN_OR_RETURN(Json j, parse_json(text, what));
  if (!j.is_object()) return invalid_argument(what + " must be an object of phase times; " + fix);
  StepPhases p;
  for (const PhaseField& f : kPhaseFields) {
    if (!j.contains(f.key))
      return invalid_argument(what + "." + f.key + " is missing; " + fix);
    const Json& v = j[f.key];
    if (v.is_null()) {
      p.*f.member = kNotMeasured;
    } else if (v.is_number()) {
      p.*f.member = v.get<double>();
    } else {
      return invalid_argument(what + "." + f.key + " must be a number of seconds (null: not measured), got " +
                              v.dump() + "; " + fix);
    }
  }
  return p;
}

}  // namespace loom
