// Tests of the progress line: silent at first, an ETA from the rate so far, one line per 10 s in a log.
#include "runtime/progress.h"

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace tsp::runtime {
namespace {

using namespace std::chrono_literals;

// A FILE* whose contents the test reads back, and a clock the test moves.
struct Capture {
  char* buffer = nullptr;
  size_t size = 0;
  std::FILE* file = open_memstream(&buffer, &size);
  PhaseProgress::Clock::time_point now{};
  ~Capture() {
    std::fclose(file);
    std::free(buffer);
  }
  std::string text() {
    std::fflush(file);
    return std::string(buffer, size);
  }
  std::function<PhaseProgress::Clock::time_point()> clock() {
    return [this] { return now; };
  }
};

std::vector<std::string> lines(const std::string& text) {
  std::vector<std::string> out;
  size_t start = 0;
  for (size_t end; (end = text.find('\n', start)) != std::string::npos; start = end + 1)
    out.push_back(text.substr(start, end - start));
  return out;
}

// A log (not a terminal): nothing in the first 2 s, then a line at most every 10 s, however often it is asked.
TEST(PhaseProgress, LogGetsALineAtMostEveryTenSecondsAfterTwo) {
  Capture c;
  {
    PhaseProgress progress("compile", true, false, c.file, c.clock());
    for (int tenth = 1; tenth <= 300; ++tenth) {  // 30 s, asked every 100 ms
      c.now += 100ms;
      progress.update(tenth, 300, "segments");
    }
  }
  const auto printed = lines(c.text());
  ASSERT_EQ(printed.size(), 3u) << c.text();  // at 2 s, 12 s and 22 s
  EXPECT_EQ(printed[0], "tsp-sim: compile: 20 of 300 segments (6%), ETA 28 s");
  EXPECT_EQ(printed[1], "tsp-sim: compile: 120 of 300 segments (40%), ETA 18 s");
  EXPECT_EQ(printed[2], "tsp-sim: compile: 220 of 300 segments (73%), ETA 8 s");
  EXPECT_EQ(c.text().find('\r'), std::string::npos);
}

// The first line's ETA rests on the rate so far: 10 of 100 in 2 s leaves 90 at 5 per second.
TEST(PhaseProgress, FirstEtaIsTheRateSoFar) {
  Capture c;
  PhaseProgress progress("simulate", true, false, c.file, c.clock());
  c.now += 2s;
  progress.update(10, 100, "instructions", "cycle 500 of ~5000");
  EXPECT_EQ(c.text(), "tsp-sim: simulate: 10 of 100 instructions (10%), cycle 500 of ~5000, ETA 18 s\n");
}

TEST(PhaseProgress, NoWorkDoneHasNoEta) {
  Capture c;
  PhaseProgress progress("search", true, false, c.file, c.clock());
  c.now += 3s;
  progress.update(0, 40, "layers");
  EXPECT_EQ(c.text(), "tsp-sim: search: 0 of 40 layers (0%), ETA unknown\n");
}

// A phase of two steps: the second step's ETA rests on its own rate, not on the time of the first.
TEST(PhaseProgress, EachStepHasItsOwnRate) {
  Capture c;
  PhaseProgress progress("search", true, true, c.file, c.clock());
  c.now += 1s;
  progress.update(3, 3, "layers");
  c.now += 1s;  // the second step starts 2 s into the phase: a line, but no rate measured yet
  progress.update(1, 40, "candidates");
  c.now += 2s;  // 10 of 40 in 2 s
  progress.update(10, 40, "candidates");
  EXPECT_EQ(c.text(), "\rtsp-sim: search: 1 of 40 candidates (2%), ETA unknown\x1b[K"
                      "\rtsp-sim: search: 10 of 40 candidates (25%), ETA 6 s\x1b[K");
}

// A phase made of many short steps (the search's candidate lists) still shows it is working.
TEST(PhaseProgress, ShortStepsStillPrintAfterTwoSeconds) {
  Capture c;
  PhaseProgress progress("search", true, false, c.file, c.clock());
  for (int list = 0; list < 8; ++list) {
    for (int done = 1; done <= 4; ++done) {
      c.now += 100ms;
      progress.update(done, 4, "candidates evaluated");
    }
  }
  EXPECT_EQ(lines(c.text()), std::vector<std::string>{"tsp-sim: search: 4 of 4 candidates evaluated (100%), ETA unknown"});
}

// Work whose total is not known ahead (a sharded plan's distinct segments): a count, no ETA.
TEST(PhaseProgress, UnknownTotalHasNoPercentageNorEta) {
  Capture c;
  PhaseProgress progress("compile", true, false, c.file, c.clock());
  c.now += 2s;
  progress.update(7, 0, "segments");
  EXPECT_EQ(c.text(), "tsp-sim: compile: 7 segments so far, ETA unknown\n");
}

// A phase shorter than 2 s prints nothing; a disabled line (--quiet, --json, ranks but 0) never prints.
TEST(PhaseProgress, ShortPhasesAndQuietRunsPrintNothing) {
  Capture c;
  {
    PhaseProgress shortPhase("compile", true, false, c.file, c.clock());
    c.now += 1900ms;
    shortPhase.update(5, 10, "segments");
    EXPECT_FALSE(shortPhase.due());
  }
  {
    PhaseProgress quiet("compile", false, true, c.file, c.clock());
    c.now += 60s;
    EXPECT_FALSE(quiet.due());
    quiet.update(5, 10, "segments");
  }
  EXPECT_EQ(c.text(), "");
}

// A terminal: the line is rewritten in place (carriage return, clear to the end) and ended once.
TEST(PhaseProgress, TerminalRewritesOneLine) {
  Capture c;
  {
    PhaseProgress progress("compile", true, true, c.file, c.clock());
    c.now += 2s;
    progress.update(1, 4, "segments");
    c.now += 100ms;
    progress.update(2, 4, "segments");  // under 250 ms after the last: not yet
    c.now += 200ms;
    progress.update(3, 4, "segments");
  }
  EXPECT_EQ(c.text(),
            "\rtsp-sim: compile: 1 of 4 segments (25%), ETA 6 s\x1b[K"
            "\rtsp-sim: compile: 3 of 4 segments (75%), ETA 1 s\x1b[K\n");
}

}  // namespace
}  // namespace tsp::runtime
