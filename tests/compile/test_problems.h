// Tiny purpose-built scheduling problems and graphs shared by the compiler tests.
#pragma once

#include <random>
#include <string>

#include "compile/frontend/builtin_models.h"
#include "compile/problem/problem.h"

namespace tsp::testing {

/// An MLP from the built-in generator.
inline ir::Graph mlp(int layers, int hidden, int batch, const char* dtype = "fp16") {
  frontend::ModelSpec spec;
  spec.builtin = "mlp";
  spec.params = {{"layers", std::to_string(layers)}, {"hidden", std::to_string(hidden)},
                 {"batch", std::to_string(batch)}};
  spec.precision.weights = spec.precision.activations = *ir::parseDType(dtype);
  if (std::string(dtype) == "int8") spec.precision.accumulate = ir::DType::kI32;
  return *frontend::buildBuiltinModel(spec);
}

/// A MEM read -> VXM op -> MEM write chain on the given MEM slices.
inline schedule::Task chainTask(const topology::ChipSpec& chip, int readSlice, int writeSlice, int rows,
                                const std::string& name) {
  schedule::Task t;
  t.name = name;
  schedule::Step read, alu, write;
  read.inst.unit = chip.firstUnit(topology::UnitKind::kMem) + readSlice;
  read.inst.op = isa::Opcode::kMemRead;
  read.inst.address = 0;
  read.inst.stride = 1;
  read.inst.repeat = rows;
  alu.inst.unit = chip.firstUnit(topology::UnitKind::kVxm);
  alu.inst.op = isa::Opcode::kVxmUnary;
  alu.inst.func = isa::VxmFunc::kRelu;
  alu.inst.repeat = rows;
  alu.producer = 0;
  write.inst.unit = chip.firstUnit(topology::UnitKind::kMem) + writeSlice;
  write.inst.op = isa::Opcode::kMemWrite;
  write.inst.address = 100;
  write.inst.stride = 1;
  write.inst.repeat = rows;
  write.producer = 1;
  t.steps = {read, alu, write};
  return t;
}

/// A random DAG of chain tasks over a few MEM slices (so that they compete), with random data
/// dependences from earlier to later tasks and random releases.
inline schedule::Problem randomProblem(const topology::ChipSpec& chip, std::uint64_t seed, int tasks) {
  std::mt19937_64 rng(seed);
  schedule::Problem p(chip);
  const int slices = 6;
  for (int i = 0; i < tasks; ++i) {
    const int a = static_cast<int>(rng() % slices);
    int b = static_cast<int>(rng() % (slices - 1));
    if (b >= a) ++b;
    // Half the tasks read from the east hemisphere so both stream directions are used.
    const int readSlice = (rng() % 2) ? a : chip.memSlices - 1 - a;
    auto t = chainTask(chip, readSlice, b, 1 + static_cast<int>(rng() % 40), std::string("t").append(std::to_string(i)));
    t.release = (rng() % 4 == 0) ? static_cast<Cycle>(rng() % 200) : 0;
    p.addTask(t);
    for (int j = 0; j < i; ++j)
      if (rng() % 8 == 0) p.addDataDependence(j, 2, i, 0);
  }
  p.finalize();
  return p;
}

}  // namespace tsp::testing
