#include "common/json_output.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>

namespace ts {

Json JsonNumber(double value) {
  if (!std::isfinite(value)) return nullptr;
  // Below 2^53 every whole double is an exact integer.
  if (value == std::trunc(value) && std::fabs(value) < 9007199254740992.0) {
    return static_cast<std::int64_t>(value);
  }
  return value;  // nlohmann writes the shortest text that reads back to the same double
}

Json JsonFloat(float value) {
  if (!std::isfinite(value)) return nullptr;
  char buffer[32];
  for (int precision = 1; precision <= 9; ++precision) {
    std::snprintf(buffer, sizeof(buffer), "%.*g", precision, static_cast<double>(value));
    if (std::strtof(buffer, nullptr) == value) break;
  }
  // The double nearest those digits prints as them.
  return JsonNumber(std::strtod(buffer, nullptr));
}

Json JsonMilliseconds(double milliseconds) {
  if (!std::isfinite(milliseconds)) return nullptr;
  return JsonNumber(std::round(milliseconds * 1e3) / 1e3);
}

Json ProbabilitiesJson(const std::vector<ClassProbability>& probabilities) {
  Json list = Json::array();
  for (const ClassProbability& entry : probabilities) {
    list.push_back(Json{{"label", entry.label},
                        {"index", entry.index},
                        {"probability", JsonFloat(entry.probability)}});
  }
  return list;
}

std::string DumpJson(const Json& value) {
  return value.dump(/*indent=*/-1, ' ', /*ensure_ascii=*/false, Json::error_handler_t::replace);
}

}  // namespace ts
