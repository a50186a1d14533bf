// Diagnostics: a user-facing error that says where (file:line:col or model node) and which exit code it maps to.
#pragma once

#include <string>

namespace tsp {

/// Exit codes of the tsp-sim command (docs/getting-started.md, section 8); a diagnostic carries the one it maps to.
enum class ExitCode : int {
  kSuccess = 0,
  kConfig = 1,
  kModel = 2,
  kDoesNotFit = 3,
  kHazard = 4,
  kInternal = 5,
  kFunctionalMismatch = 6,
  kInterrupted = 7,
};

/// Where a diagnostic points: a position in a text file, or a node of the model graph.
struct SourceLocation {
  std::string file;
  int line = 0;    ///< 1-based; 0 when unknown.
  int column = 0;  ///< 1-based; 0 when unknown.
  std::string node;  ///< model node or op name, when the error is about a model.
};

/// One error for the user. Library code returns these; only main() prints them.
struct Diagnostic {
  ExitCode code = ExitCode::kInternal;
  SourceLocation where;
  std::string message;

  /// "FILE:LINE:COL: message", "node 'N': message" or just the message.
  std::string format() const;
};

/// Convenience constructors.
Diagnostic configError(SourceLocation where, std::string message);
Diagnostic modelError(std::string node, std::string message);
Diagnostic makeError(ExitCode code, std::string message);

}  // namespace tsp
