// A fixture of partition.include_cycle_found, never compiled: cost uses nothing in its header.
#pragma once
