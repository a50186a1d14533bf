// A fixture of partition.include_cycle_found, never compiled: plan uses cost.
#pragma once
#include "fixture/cost.h"
