// Diagnostics: formatting of user-facing errors.
#include "support/diagnostic.h"

namespace tsp {

std::string Diagnostic::format() const {
  std::string out;
  if (!where.file.empty()) {
    out = where.file;
    if (where.line > 0) {
      out.append(":").append(std::to_string(where.line));
      if (where.column > 0) out.append(":").append(std::to_string(where.column));
    }
    out += ": ";
  }
  if (!where.node.empty()) out.append("node '").append(where.node).append("': ");
  out.append(message);
  return out;
}

Diagnostic configError(SourceLocation where, std::string message) {
  return Diagnostic{ExitCode::kConfig, std::move(where), std::move(message)};
}

Diagnostic modelError(std::string node, std::string message) {
  SourceLocation where;
  where.node = std::move(node);
  return Diagnostic{ExitCode::kModel, std::move(where), std::move(message)};
}

Diagnostic makeError(ExitCode code, std::string message) {
  return Diagnostic{code, {}, std::move(message)};
}

}  // namespace tsp
