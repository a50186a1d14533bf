#!/usr/bin/env bash
# BERT-base in FP16 on a node of 8 TSPs: which split does the search pick, and what does it do?
# Usage: examples/bert-base-node8/run.sh
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
exec "$here/../study.sh" "$here/config.yaml" "$here/../../out/examples/bert-base-node8" 0,1
