// Simulated annealing: a permutation of the placement order is the state; the decoder is list scheduling.
#include "compile/schedule/annealer.h"

#include <cmath>
#include <random>
#include <set>

#include "support/cancel.h"

namespace tsp::schedule {

double utilisation(const Problem& problem, const Schedule& schedule) {
  if (schedule.makespan <= 0) return 0.0;
  std::set<int> used(schedule.unitOf.begin(), schedule.unitOf.end());
  double busy = 0;
  const auto& tasks = problem.tasks();
  for (size_t t = 0; t < tasks.size(); ++t)
    for (size_t k = 0; k < tasks[t].steps.size(); ++k)
      busy += static_cast<double>(problem.unitEnd(static_cast<int>(t), static_cast<int>(k)) - tasks[t].steps[k].offset);
  return busy / (static_cast<double>(used.size()) * static_cast<double>(schedule.makespan));
}

namespace {

// A uniform integer in [0, n) from the 64-bit stream; mt19937_64 is fully specified, so the
// sequence is the same on every platform (std::uniform_int_distribution is not).
std::int64_t draw(std::mt19937_64& rng, std::int64_t n) { return static_cast<std::int64_t>(rng() % static_cast<std::uint64_t>(n)); }
double unit(std::mt19937_64& rng) { return static_cast<double>(rng() >> 11) * 0x1.0p-53; }

}  // namespace

Expected<AnnealResult> anneal(const Problem& problem, const Schedule& list, const Options& options) {
  AnnealResult result;
  result.schedule = list;
  result.listMakespan = list.makespan;
  const std::int64_t n = static_cast<std::int64_t>(problem.tasks().size());
  const std::int64_t moves = std::min(options.annealMoves, options.annealWork / std::max<std::int64_t>(1, n));
  if (moves <= 0 || n < 2) return result;

  auto energy = [&](const Schedule& s) {
    return static_cast<double>(s.makespan) +
           options.lambda * (1.0 - utilisation(problem, s)) * static_cast<double>(list.makespan);
  };
  // order[i] = the task placed i-th when ready; rank is its inverse.
  std::vector<std::int64_t> rank = priorityRank(problem, options);
  std::vector<int> order(n);
  for (std::int64_t t = 0; t < n; ++t) order[rank[t]] = static_cast<int>(t);

  std::mt19937_64 rng(options.seed * 0x9E3779B97F4A7C15ULL + 0x2545F4914F6CDD1DULL);
  double current = energy(list), best = current;
  double temperature = std::max(1.0, 0.02 * static_cast<double>(list.makespan));
  // UCB over the two neighbourhoods: reward 1 when the move was accepted with lower energy.
  double reward[2] = {0, 0};
  std::int64_t tries[2] = {0, 0};

  for (std::int64_t move = 0; move < moves && !support::cancelRequested(); ++move) {
    int arm = 0;
    if (tries[0] == 0) arm = 0;
    else if (tries[1] == 0) arm = 1;
    else {
      const double total = std::log(static_cast<double>(tries[0] + tries[1]));
      double score[2];
      for (int a = 0; a < 2; ++a)
        score[a] = reward[a] / static_cast<double>(tries[a]) + std::sqrt(2.0 * total / static_cast<double>(tries[a]));
      arm = score[1] > score[0] ? 1 : 0;
    }
    ++tries[arm];
    std::vector<int> candidate = order;
    const std::int64_t i = draw(rng, n);
    std::int64_t j = draw(rng, n - 1);
    if (j >= i) ++j;
    if (arm == 0) {
      std::swap(candidate[i], candidate[j]);
    } else {
      const int task = candidate[i];
      candidate.erase(candidate.begin() + i);
      candidate.insert(candidate.begin() + j, task);
    }
    std::vector<std::int64_t> candidateRank(n);
    for (std::int64_t p = 0; p < n; ++p) candidateRank[candidate[p]] = p;
    auto decoded = scheduleInOrder(problem, candidateRank, options);
    ++result.moves;
    if (decoded.ok()) {
      const double e = energy(*decoded);
      const double delta = e - current;
      if (delta < 0 || unit(rng) < std::exp(-delta / temperature)) {
        ++result.accepted;
        if (delta < 0) reward[arm] += 1;
        order = std::move(candidate);
        current = e;
        if (e < best && decoded->makespan <= result.schedule.makespan) {
          best = e;
          ++result.improved;
          result.schedule = std::move(*decoded);
        }
      }
    }
    if ((move + 1) % std::max<std::int64_t>(1, options.movesPerTemperature) == 0) temperature *= 0.95;
  }
  return result;
}

}  // namespace tsp::schedule
