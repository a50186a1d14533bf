// Small string utilities shared by the layers: edit distance for "did you mean" and joining.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace tsp {

/// Levenshtein distance between a and b.
int editDistance(std::string_view a, std::string_view b);

/// The candidate closest to word when it is close enough to be a likely typo, else "".
std::string closestMatch(std::string_view word, const std::vector<std::string>& candidates);

/// Joins parts with sep.
std::string join(const std::vector<std::string>& parts, std::string_view sep);

}  // namespace tsp
