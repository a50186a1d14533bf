// A fixture of partition.include_cycle_found, never compiled: profile uses plan (the cycle's last edge).
#pragma once
#include "fixture/plan.h"
