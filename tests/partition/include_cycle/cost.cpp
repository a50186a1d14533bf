// A fixture of partition.include_cycle_found, never compiled: cost's source uses profile, which uses plan.
#include "fixture/cost.h"
#include "fixture/profile.h"
