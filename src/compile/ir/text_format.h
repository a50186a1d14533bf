// The IR's text form: Graph::print writes it, parseGraph reads it back (docs/ir.md describes it).
#pragma once

#include <string>

#include "compile/ir/graph.h"
#include "support/expected.h"

namespace tsp::ir {

/// Parses the text form; errors are model errors at file:line:col. Weight values are not part of
/// the text form, so parsed weights have no data; constants keep theirs.
Expected<Graph> parseGraph(const std::string& text, const std::string& file = "<ir>");

}  // namespace tsp::ir
