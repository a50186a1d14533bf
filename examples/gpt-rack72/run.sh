#!/usr/bin/env bash
# A 1.3 B-parameter GPT on a 72-chip GroqRack: the searched plan, simulated.
# Usage: examples/gpt-rack72/run.sh
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
exec "$here/../study.sh" "$here/config.yaml" "$here/../../out/examples/gpt-rack72" 0,1,2,3
