#!/usr/bin/env bash
# Llama-2-70B decode on 576 TSPs: the ranked plans, then one decode step of the best executable plan
# simulated, with the predicted and simulated tokens/s per user. Usage: examples/llama2-70b-576/run.sh
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
exec "$here/../study.sh" "$here/config.yaml" "$here/../../out/examples/llama2-70b-576" 0,4,8,12
