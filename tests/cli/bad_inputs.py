#!/usr/bin/env python3
"""A catalogue of bad inputs: each case writes its files into a fresh directory, runs tsp-sim on them
and checks the exit code, that stderr holds exactly one error line matching the case's pattern (its
location included), and that the run left nothing behind (no trace, no NAME.tmp, no partial trace).

usage: bad_inputs.py TSP_SIM GROUP [CASE...]      (GROUP: one of GROUPS below, or 'list')

In a file's text, '@@' marks where the error must point: '{at}' in the pattern becomes that
FILE:LINE:COL. ONNX files are built here with onnx.helper.
"""
import os
import re
import shutil
import subprocess
import sys
import tempfile

MARK = "@@"
# scripts/test.sh --sanitize scales the time a run may take (the sanitizers slow it several times).
TIMEOUT_SCALE = float(os.environ.get("TSP_TEST_TIMEOUT_SCALE", "1"))
BASE_CLUSTER = "cluster:\n  topology: {kind: ring, chips: 2}\n"
BASE_MODEL = "model: {builtin: mlp, params: {layers: 2, hidden: 64, batch: 4}}\n"
BASE = BASE_CLUSTER + BASE_MODEL


class Case:
    def __init__(self, group, name, code, pattern, files=None, args=None, config=None, out=True):
        self.group, self.name, self.code, self.pattern, self.out = group, name, code, pattern, out
        self.files = dict(files or {})
        if config is not None:
            self.files["c.yaml"] = config
        self.args = args if args is not None else ["--config", "c.yaml"]


CASES = []


def case(*a, **k):
    CASES.append(Case(*a, **k))


# ---------------------------------------------------------------- YAML structure
def yaml_cases():
    g = "yaml"
    case(g, "syntax_unclosed_flow", 1, r"c.yaml:3:\d+: YAML syntax error in the config file",
         config="cluster:\n  topology: {kind: ring, chips: 2\nmodel: {builtin: mlp}\n")
    case(g, "syntax_tab_indent", 1, r"c.yaml:\d+:\d+: YAML syntax error in the config file",
         config="cluster:\n\ttopology: {kind: ring}\n")
    case(g, "syntax_bad_indent", 1, r"c.yaml:\d+:\d+: YAML syntax error in the config file",
         config="cluster:\n  topology:\n    kind: ring\n   chips: 2\n")
    case(g, "syntax_unclosed_quote", 1, r"c.yaml:\d+:\d+: YAML syntax error in the config file",
         config="cluster:\n  topology: {kind: \"ring, chips: 2}\n")
    case(g, "syntax_undefined_alias", 1, r"c.yaml:\d+:\d+: YAML syntax error in the config file",
         config=BASE + "simulation: *nothing\n")
    case(g, "duplicate_top_key", 1, r"{at}: duplicate key 'model'",
         config=BASE + "@@model: {builtin: gpt}\n")
    case(g, "duplicate_cluster_key", 1, r"{at}: duplicate key 'topology'",
         config="cluster:\n  topology: {kind: ring, chips: 2}\n  @@topology: {kind: ring, chips: 4}\n" + BASE_MODEL)
    case(g, "duplicate_flow_key", 1, r"{at}: duplicate key 'chips'",
         config="cluster:\n  topology: {kind: ring, chips: 2, @@chips: 3}\n" + BASE_MODEL)
    case(g, "duplicate_param_key", 1, r"{at}: duplicate key 'layers'",
         config=BASE_CLUSTER + "model: {builtin: mlp, params: {layers: 2, @@layers: 3}}\n")
    case(g, "duplicate_link_key", 1, r"{at}: duplicate key 'b'",
         config="cluster:\n  topology:\n    kind: explicit\n    chips: 2\n    links: [{a: 0, b: 1, @@b: 0}]\n" + BASE_MODEL)
    case(g, "two_documents", 1, r"{at}: the config file holds 2 YAML documents, expected one",
         config=BASE + "---\n@@cluster: {}\n")
    case(g, "three_documents", 1, r"c.yaml:\d+:\d+: the config file holds 3 YAML documents, expected one",
         config=BASE + "---\na: 1\n---\nb: 2\n")
    # yaml-cpp 0.7's LoadAll looped forever, allocating, on these (found by config_fuzzer).
    case(g, "leading_comma", 1, r"c.yaml:1:1: the config must be a mapping with a 'cluster' section", config=",\n")
    case(g, "leading_comma_mapping", 1, r"c.yaml:1:1: the config must be a mapping with a 'cluster' section",
         config=",cluster:\n  topology: {kind: ring, chips: 4}\n")
    case(g, "mapping_key", 1, r"{at}: a key in the config file must be a scalar, not a mapping",
         config=BASE + "? @@{a: 1}\n: 2\n")
    case(g, "sequence_key", 1, r"{at}: a key in the config file must be a scalar, not a list",
         config="cluster:\n  ? @@[1, 2]\n  : x\n" + BASE_MODEL)
    case(g, "flow_mapping_key_in_params", 1, r"{at}: a key in the config file must be a scalar, not a mapping",
         config=BASE_CLUSTER + "model:\n  builtin: mlp\n  params: {? @@{x: 1} : 2}\n")
    case(g, "root_is_list", 1, r"c.yaml:1:1: the config must be a mapping", config="- cluster\n- model\n")
    case(g, "root_is_scalar", 1, r"c.yaml:1:1: the config must be a mapping", config="hello\n")
    case(g, "empty_file", 1, r"c.yaml:1:1: the config must be a mapping", config="")
    case(g, "only_comment", 1, r"c.yaml:1:1: the config must be a mapping", config="# nothing\n")
    case(g, "missing_cluster", 1, r"c.yaml: missing 'cluster' section", config=BASE_MODEL)
    case(g, "null_cluster", 1, r"c.yaml: missing 'cluster' section", config="cluster:\n" + BASE_MODEL)
    case(g, "missing_model", 1, r"c.yaml: missing 'model' section", config=BASE_CLUSTER)
    case(g, "cluster_is_list", 1, r"{at}: 'cluster' must be a mapping", config="cluster: @@[1, 2]\n" + BASE_MODEL)
    case(g, "topology_is_scalar", 1, r"{at}: 'cluster.topology' must be a mapping with a 'kind'",
         config="cluster:\n  topology: @@ring\n" + BASE_MODEL)
    # Nine levels of nine aliases (9^9 leaves when expanded) after an unknown key: the anchors are walked once.
    laughs = "".join(f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}" if i else "'x'"] * 9) + "]\n" for i in range(9))
    case(g, "billion_laughs", 1, r"{at}: unknown key 'lol' in 'config'", config=BASE + "@@lol: 1\n" + laughs)
    case(g, "deep_nesting", 1, r"c.yaml:\d+:\d+: (YAML syntax error|unknown key 'deep')",
         config=BASE + "deep: " + "[" * 5000 + "]" * 5000 + "\n")
    for section, parent, bad in [
            ("config", "", "clster"), ("cluster", "cluster:\n  topology: {kind: ring, chips: 2}\n  ", "lnk"),
            ("cluster.chip", "cluster:\n  topology: {kind: ring, chips: 2}\n  chip: {", "lanes"),
            ("cluster.chip.mem", "cluster:\n  topology: {kind: ring, chips: 2}\n  chip: {mem: {", "slice"),
            ("cluster.chip.vxm", "cluster:\n  topology: {kind: ring, chips: 2}\n  chip: {vxm: {", "alus"),
            ("cluster.chip.mxm", "cluster:\n  topology: {kind: ring, chips: 2}\n  chip: {mxm: {", "plane"),
            ("cluster.chip.sxm", "cluster:\n  topology: {kind: ring, chips: 2}\n  chip: {sxm: {", "unit"),
            ("cluster.chip.c2c", "cluster:\n  topology: {kind: ring, chips: 2}\n  chip: {c2c: {", "port"),
            ("cluster.chip.energy", "cluster:\n  topology: {kind: ring, chips: 2}\n  chip: {energy: {", "watts"),
            ("cluster.link", "cluster:\n  topology: {kind: ring, chips: 2}\n  link: {", "lane"),
            ("cluster.topology", "cluster:\n  topology: {kind: ring, chips: 2, ", "chip"),
    ]:
        closers = "}" * (parent.count("{") - parent.count("}"))
        if section == "config":
            text = BASE + "@@" + bad + ": 1\n"
        elif section == "cluster":
            text = parent + "@@" + bad + ": 1\n" + BASE_MODEL
        else:
            text = parent + "@@" + bad + ": 1" + closers + "\n" + BASE_MODEL
        case(g, "unknown_key_" + section.replace(".", "_"), 1, r"{at}: unknown key '" + bad + "' in '" + section + "'",
             config=text)
    for section, text in [
            ("model", BASE_CLUSTER + "model: {builtin: mlp, @@param: {}}\n"),
            ("model.precision", BASE_CLUSTER + "model: {builtin: mlp, precision: {@@weight: fp16}}\n"),
            ("parallelism", BASE + "parallelism: {@@plans: auto}\n"),
            ("parallelism.plan", BASE + "parallelism: {plan: {@@pipeline: 2}}\n"),
            ("simulation", BASE + "simulation: {@@modes: timing}\n"),
            ("simulation.faults", BASE + "simulation: {faults: {@@stall: 1}}\n"),
            ("training", BASE + "training: {@@optimiser: adam}\n"),
            ("output", BASE + "output: {@@traces: t.h5}\n"),
            ("cluster.topology.links[]", "cluster:\n  topology: {kind: explicit, chips: 2, links: [{a: 0, b: 1, @@c: 2}]}\n" + BASE_MODEL),
    ]:
        case(g, "unknown_key_" + section.replace(".", "_").replace("[]", "_entry"), 1,
             r"{at}: unknown key '\w+' in '" + re.escape(section) + "'", config=text)


# ---------------------------------------------------------------- chip fields: type and range
CHIP_FIELDS = [
    # (path, key, lo, hi, kind)
    ("", "clock_mhz", 1, 1e5, "number"), ("", "superlanes", 1, 1024, "int"), ("", "lanes_per_superlane", 1, 1024, "int"),
    ("", "vector_bytes", 8, 1 << 20, "int"), ("", "icu_queues", 1, 4096, "int"),
    ("", "streams_per_direction", 1, 1024, "int"), ("", "ripple_cycles", 0, 1 << 16, "int"),
    ("mem", "slices", 2, 4096, "int"), ("mem", "banks_per_slice", 1, 64, "int"),
    ("mem", "addresses_per_slice", 1, 1 << 30, "int"), ("mem", "bank_prime", 2, 1 << 30, "int"),
    ("mem", "read_cycles", 0, 1 << 16, "int"), ("mem", "write_cycles", 0, 1 << 16, "int"),
    ("vxm", "alu_groups", 1, 1024, "int"), ("vxm", "cycles", 1, 1 << 16, "int"),
    ("mxm", "planes", 2, 64, "int"), ("mxm", "plane_dim", 1, 1 << 16, "int"),
    ("mxm", "weight_install_cycles", 1, 1 << 20, "int"), ("mxm", "fp16_rate_divisor", 1, 64, "int"),
    ("mxm", "cycles", 1, 1 << 16, "int"), ("sxm", "units", 1, 1024, "int"), ("sxm", "cycles", 1, 1 << 16, "int"),
    ("c2c", "ports", 1, 1024, "int"), ("c2c", "send_cycles", 0, 1 << 16, "int"),
    ("c2c", "receive_cycles", 0, 1 << 16, "int"), ("c2c", "forward_cycles", 0, 1 << 16, "int"),
    ("c2c", "framing_overhead", 0, 0.99, "number"), ("c2c", "lanes_per_link", 1, 64, "int"),
    ("c2c", "gbps_per_lane", 1e-3, 1e4, "number"), ("c2c", "cabled_gbps_per_lane", 1e-3, 1e4, "number"),
    ("energy", "static_watts", 0, 1e12, "number"), ("energy", "mem_read_pj", 0, 1e12, "number"),
]


def chip_config(path, key, value):
    inner = f"{key}: @@{value}"
    if path:
        inner = f"{path}: {{{inner}}}"
    return "cluster:\n  topology: {kind: ring, chips: 2}\n  chip: {" + inner + "}\n" + BASE_MODEL


def chip_cases():
    g = "chip"
    for path, key, lo, hi, kind in CHIP_FIELDS:
        name = (path + "_" if path else "") + key
        below = lo - 1 if kind == "int" else -1
        case(g, name + "_below", 1, r"{at}: '" + key + r"' is -?[0-9.e+]+, out of range", config=chip_config(path, key, below))
        above = hi + 1 if kind == "int" else hi * 10
        case(g, name + "_above", 1, r"{at}: '" + key + r"' is [0-9.e+]+, out of range", config=chip_config(path, key, above))
        want = "an integer" if kind == "int" else "a number"
        case(g, name + "_text", 1, r"{at}: '" + key + "' must be " + want, config=chip_config(path, key, "lots"))
    case(g, "preset_unknown", 1, r"{at}: 'preset' is 'groq-tsp-v9', expected one of",
         config=chip_config("", "preset", "groq-tsp-v9"))
    case(g, "bank_mapping_unknown", 1, r"{at}: 'bank_mapping' is 'random', expected one of",
         config=chip_config("mem", "bank_mapping", "random"))
    case(g, "queues_mismatch", 1, r"c.yaml:3:9: cluster.chip: the units need \d+ ICU queues",
         config="cluster:\n  topology: {kind: ring, chips: 2}\n  chip: {icu_queues: 100}\n" + BASE_MODEL)
    case(g, "mem_is_list", 1, r"{at}: 'cluster.chip.mem' must be a mapping",
         config="cluster:\n  topology: {kind: ring, chips: 2}\n  chip: {mem: @@[1]}\n" + BASE_MODEL)


# ---------------------------------------------------------------- topology
def topology_cases():
    g = "topology"
    t = lambda body: "cluster:\n  topology: " + body + "\n" + BASE_MODEL
    case(g, "kind_missing", 1, r"{at}: 'cluster.topology' needs a 'kind'", config=t("@@{chips: 2}"))
    case(g, "kind_unknown", 1, r"{at}: 'kind' is 'star', expected one of", config=t("{kind: @@star, chips: 2}"))
    case(g, "kind_list", 1, r"{at}: 'kind' must be a string", config=t("{kind: @@[ring], chips: 2}"))
    case(g, "ring_without_chips", 1, r"{at}: a 'ring' topology needs 'chips'", config=t("@@{kind: ring}"))
    case(g, "ring_chips_null", 1, r"{at}: a 'ring' topology needs 'chips'", config=t("@@{kind: ring, chips: }"))
    case(g, "ring_chips_tilde", 1, r"{at}: a 'ring' topology needs 'chips'", config=t("@@{kind: ring, chips: ~}"))
    case(g, "fully_connected_without_chips", 1, r"{at}: a 'fully-connected' topology needs 'chips'",
         config=t("@@{kind: fully-connected}"))
    case(g, "explicit_without_chips", 1, r"{at}: a 'explicit' topology needs 'chips'", config=t("@@{kind: explicit}"))
    case(g, "ring_chips_zero", 1, r"{at}: 'chips' is 0, out of range", config=t("{kind: ring, chips: @@0}"))
    case(g, "ring_chips_negative", 1, r"{at}: 'chips' is -3, out of range", config=t("{kind: ring, chips: @@-3}"))
    case(g, "ring_chips_float", 1, r"{at}: 'chips' must be an integer", config=t("{kind: ring, chips: @@2.5}"))
    case(g, "ring_chips_huge", 1, r"{at}: 'chips' must be an integer", config=t("{kind: ring, chips: @@99999999999999999999}"))
    case(g, "ring_too_many", 1, r"{at}: 'chips' is 1048577, out of range", config=t("{kind: ring, chips: @@1048577}"))
    case(g, "mesh_without_dims", 1, r"{at}: 'dims' must list 1 to 3 sizes", config=t("@@{kind: mesh}"))
    case(g, "mesh_dims_empty", 1, r"{at}: 'dims' must list 1 to 3 sizes", config=t("{kind: mesh, dims: @@[]}"))
    case(g, "mesh_four_dims", 1, r"{at}: 'dims' must list 1 to 3 sizes", config=t("{kind: mesh, dims: @@[2, 2, 2, 2]}"))
    case(g, "mesh_dim_zero", 1, r"{at}: 'dims' entry 0 is out of range", config=t("{kind: mesh, dims: [2, @@0]}"))
    case(g, "mesh_dims_scalar", 1, r"{at}: 'dims' must be a list of integers", config=t("{kind: mesh, dims: @@4}"))
    case(g, "mesh_dims_text", 1, r"{at}: 'dims' must be a list of integers", config=t("{kind: torus, dims: [2, @@x]}"))
    case(g, "mesh_too_many", 1, r"{at}: the 'mesh' topology has 2097152 chips, more than the 1048576",
         config=t("@@{kind: mesh, dims: [1024, 1024, 2]}"))
    case(g, "torus_too_many", 1, r"{at}: the 'torus' topology has 4294967296 chips, more than the 1048576",
         config=t("@@{kind: torus, dims: [65536, 65536]}"))
    case(g, "dragonfly_too_many", 1, r"{at}: the 'dragonfly' topology has \d+ chips, more than the \d+",
         config=t("@@{kind: dragonfly, chips_per_node: 1024, nodes_per_rack: 1024, racks: 4, global_links_per_chip: 0}"))
    case(g, "fully_connected_ports", 1, r"{at}: the 'fully-connected' topology gives chip 0 19 links",
         config=t("@@{kind: fully-connected, chips: 20}"))
    ex = lambda links, chips=3: t("{kind: explicit, chips: %d, links: %s}" % (chips, links))
    case(g, "link_without_b", 1, r"{at}: a link needs both 'a' and 'b'", config=ex("[{a: 0, b: 1}, @@{a: 1}]"))
    case(g, "link_b_null", 1, r"{at}: a link needs both 'a' and 'b'", config=ex("[@@{a: 0, b: }]"))
    case(g, "link_without_a", 1, r"{at}: a link needs both 'a' and 'b'", config=ex("[@@{b: 2}]"))
    case(g, "link_b_out", 1, r"{at}: link endpoint 'b' is chip 5, but the cluster has chips 0 to 2", config=ex("[{a: 0, b: @@5}]"))
    case(g, "link_a_negative", 1, r"{at}: 'a' is -1, out of range", config=ex("[{a: @@-1, b: 1}]"))
    case(g, "link_self", 1, r"{at}: link joins chip 2 to itself", config=ex("[{a: 0, b: 1}, @@{a: 2, b: 2}]"))
    case(g, "links_not_list", 1, r"{at}: 'links' must be a list of \{a, b\} entries", config=ex("@@{a: 0, b: 1}"))
    case(g, "link_entry_scalar", 1, r"{at}: 'cluster.topology.links\[\]' must be a mapping", config=ex("[@@7]"))
    case(g, "explicit_disconnected", 1, r"{at}: the cluster is not connected",
         config="cluster:\n  topology: @@{kind: explicit, chips: 3, links: [{a: 0, b: 1}]}\n" + BASE_MODEL)
    case(g, "link_lanes_zero", 1, r"{at}: 'lanes' is 0, out of range", config=ex("[{a: 0, b: 1, lanes: @@0}, {a: 1, b: 2}]"))
    case(g, "link_latency_short", 1, r"{at}: link 0 \(0 - 1\) is shorter than one cycle",
         config="cluster:\n  topology: {kind: ring, chips: 2}\n  link: @@{latency_ns: 0.1}\n" + BASE_MODEL)
    case(g, "link_latency_negative", 1, r"{at}: 'latency_ns' is -5, out of range",
         config="cluster:\n  topology: {kind: ring, chips: 2}\n  link: {latency_ns: @@-5}\n" + BASE_MODEL)
    case(g, "link_gbps_text", 1, r"{at}: 'gbps_per_lane' must be a number",
         config="cluster:\n  topology: {kind: ring, chips: 2}\n  link: {gbps_per_lane: @@fast}\n" + BASE_MODEL)
    # 2^20 chips, the most this build supports: their simulation state (about 24 KiB a chip) is refused
    # before anything is built on a machine with less than 48 GiB per rank (the CI machines have 24).
    if os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") < 48 << 30:
        case(g, "chip_state_too_large", 1, r"c.yaml: the cluster's 1048576 chips need [0-9.]+ GiB of simulation state on "
             r"each of 1 rank\(s\) \(1048576 chips each\), more than half of the [0-9.]+ GiB",
             config=t("{kind: mesh, dims: [1024, 1024]}"))
    case(g, "dragonfly_uneven", 1, r"{at}: dragonfly: global_links_per_chip x chips_per_node",
         config=t("@@{kind: dragonfly, chips_per_node: 8, nodes_per_rack: 4, racks: 2, global_links_per_chip: 4}"))
    case(g, "dragonfly_tier_key", 1, r"{at}: unknown key 'speed' in 'cluster.topology.node_link'",
         config=t("{kind: dragonfly, node_link: {@@speed: 1}}"))


# ---------------------------------------------------------------- model, parallelism, simulation, output
def section_cases():
    g = "sections"
    m = lambda body: BASE_CLUSTER + "model: " + body + "\n"
    case(g, "model_both", 1, r"{at}: 'model' needs exactly one of 'builtin' and 'onnx'", config=m("@@{builtin: mlp, onnx: m.onnx}"))
    case(g, "model_neither", 1, r"{at}: 'model' needs exactly one of 'builtin' and 'onnx'", config=m("@@{params: {}}"))
    case(g, "model_builtin_unknown", 1, r"{at}: 'builtin' is 'gpt5', expected one of", config=m("{builtin: @@gpt5}"))
    case(g, "model_params_list", 1, r"{at}: 'model.params' must be a mapping", config=m("{builtin: mlp, params: @@[1]}"))
    case(g, "model_param_list_value", 1, r"{at}: 'model.params.layers' must be a scalar",
         config=m("{builtin: mlp, params: {layers: @@[1]}}"))
    case(g, "model_param_unknown", 2, r"{at}: node 'builtin:mlp': unknown parameter 'hiden'",
         config=m("{builtin: mlp, params: {@@hiden: 8}}"))
    case(g, "model_param_range", 2, r"{at}: node 'builtin:mlp': parameter 'layers' is 0, out of range",
         config=m("{builtin: mlp, params: {@@layers: 0}}"))
    case(g, "model_param_text", 2, r"{at}: node 'builtin:mlp': parameter 'hidden' must be an integer, got 'wide'",
         config=m("{builtin: mlp, params: {@@hidden: wide}}"))
    case(g, "model_param_choice", 2, r"{at}: node 'builtin:mlp': parameter 'dtype' is 'fp8', expected one of",
         config=m("{builtin: mlp, params: {@@dtype: fp8}}"))
    case(g, "model_param_batch_huge", 2, r"{at}: node 'builtin:mlp': parameter 'batch' is 1099511627776, out of range",
         config=m("{builtin: mlp, params: {@@batch: 1099511627776}}"))
    case(g, "gpt_heads", 2, r"{at}: node 'builtin:gpt': hidden 100 is not a multiple of heads 3",
         config=m("{builtin: gpt, params: {layers: 1, @@hidden: 100, heads: 3}}"))
    case(g, "llama_kv_heads", 2, r"{at}: node 'builtin:llama': heads 4 is not a multiple of kv_heads 3",
         config=m("{builtin: llama, params: {layers: 1, hidden: 64, @@heads: 4, kv_heads: 3}}"))
    case(g, "gpt_context_prefill", 2, r"{at}: node 'builtin:gpt': parameter 'context' applies to phase=decode only",
         config=m("{builtin: gpt, params: {layers: 1, @@context: 4}}"))
    case(g, "collective_one_chip", 2, r"{at}: node 'builtin:collective': parameter 'chips' must be 0 \(all\) or at least 2",
         config=m("{builtin: collective, params: {@@chips: 1}}"))
    case(g, "bert_heads", 2, r"{at}: node 'builtin:bert': hidden 100 is not a multiple of heads 3",
         config=m("{builtin: bert, params: {layers: 1, @@hidden: 100, heads: 3}}"))
    case(g, "overrides_zero", 1, r"{at}: 'batch' is 0, out of range", config=m("{builtin: mlp, overrides: {batch: @@0}}"))
    case(g, "overrides_text", 1, r"{at}: 'batch' must be an integer", config=m("{builtin: mlp, overrides: {batch: @@many}}"))
    case(g, "overrides_list", 1, r"{at}: 'model.overrides' must be a mapping", config=m("{builtin: mlp, overrides: @@[1]}"))
    case(g, "precision_unknown", 1, r"{at}: 'weights' is 'fp8', expected one of", config=m("{builtin: mlp, precision: {weights: @@fp8}}"))
    case(g, "precision_mismatch", 1, r"{at}: model.precision: int8 weights accumulate in int32",
         config=m("{builtin: mlp, precision: @@{weights: int8}}"))
    case(g, "onnx_missing_file", 2, r"node '[^']*missing.onnx': cannot open the ONNX file", config=m("{onnx: missing.onnx}"))
    p = lambda body: BASE + "parallelism: " + body + "\n"
    case(g, "plan_pp_zero", 1, r"{at}: 'pp' is 0, out of range", config=p("{plan: {pp: @@0}}"))
    case(g, "plan_dp_text", 1, r"{at}: 'dp' must be an integer", config=p("{plan: {dp: @@two}}"))
    case(g, "plan_split_none", 1, r"{at}: parallelism.plan.split: 'none' goes with tp 1", config=p("{plan: {tp: 2, split: @@none}}"))
    case(g, "plan_split_unknown", 1, r"{at}: 'split' is 'diagonal', expected one of", config=p("{plan: {tp: 2, split: @@diagonal}}"))
    case(g, "plan_pp_too_large", 1, r"{at}: parallelism.plan.pp is 4 but the model has only 2 layers",
         config=p("{plan: @@{pp: 4}}"))
    case(g, "plan_file_missing", 1, r"nope.plan.yaml: cannot open the plan file", config=p("{plan: nope.plan.yaml}"))
    case(g, "objective_unknown", 1, r"{at}: 'objective' is 'speed', expected one of", config=p("{objective: @@speed}"))
    case(g, "search_budget_zero", 1, r"{at}: 'search_budget' is 0, out of range", config=p("{search_budget: @@0}"))
    case(g, "max_tp_big", 1, r"{at}: 'max_tp' is 5000, out of range", config=p("{max_tp: @@5000}"))
    s = lambda body: BASE + "simulation: " + body + "\n"
    case(g, "mode_unknown", 1, r"{at}: 'mode' is 'emulation', expected one of", config=s("{mode: @@emulation}"))
    case(g, "iterations_two", 1, r"{at}: 'iterations' is 2, out of range", config=s("{iterations: @@2}"))
    case(g, "seed_negative", 1, r"{at}: 'seed' is -5, out of range", config=s("{seed: @@-5}"))
    case(g, "rank_mapping_unknown", 1, r"{at}: 'rank_mapping' is 'random', expected one of", config=s("{rank_mapping: @@random}"))
    case(g, "faults_chip_out", 1, r"{at}: 'stall_chip' is 2, out of range", config=s("{faults: {stall_chip: @@2}}"))
    case(g, "faults_unit_out", 1, r"{at}: 'stall_unit' is 144, out of range", config=s("{faults: {stall_unit: @@144}}"))
    case(g, "faults_jitter_negative", 1, r"{at}: 'link_jitter_cycles' is -1, out of range",
         config=s("{faults: {link_jitter_cycles: @@-1}}"))
    case(g, "faults_functional", 1, r"{at}: simulation.faults: functional mode runs without injected faults",
         config=s("{mode: functional, faults: @@{link_jitter_cycles: 2}}"))
    o = lambda body: BASE + "output: " + body + "\n"
    case(g, "output_level_unknown", 1, r"{at}: 'level' is 'all', expected one of", config=o("{level: @@all}"))
    case(g, "output_instruction_chip_out", 1, r"{at}: 'instruction_chips' entry 5 is out of range",
         config=o("{instruction_chips: [0, @@5]}"))
    case(g, "output_buffer_rows_zero", 1, r"{at}: 'event_buffer_rows' is 0, out of range", config=o("{event_buffer_rows: @@0}"))
    case(g, "output_trace_list", 1, r"{at}: 'trace' must be a string", config=o("{trace: @@[a]}"))
    tr = lambda body: BASE + "training: " + body + "\n"
    case(g, "training_schedule_unknown", 1, r"{at}: 'schedule' is 'pipedream', expected one of",
         config=tr("{schedule: @@pipedream}"))
    case(g, "training_shard_text", 1, r"{at}: 'shard_optimizer' must be true or false", config=tr("{shard_optimizer: @@maybe}"))
    case(g, "training_optimizer_unknown", 1, r"{at}: 'optimizer' is 'lamb', expected one of", config=tr("{optimizer: @@lamb}"))


# ---------------------------------------------------------------- plan files
PLAN_CONFIG = "cluster:\n  topology: {kind: ring, chips: 4}\n" \
              "model: {builtin: mlp, params: {layers: 4, hidden: 64, batch: 8}}\n"


def plan_cases():
    g = "plan"
    def pc(name, code, pattern, plan):
        case(g, name, code, pattern, config=PLAN_CONFIG, files={"p.plan.yaml": plan},
             args=["--config", "c.yaml", "--plan", "p.plan.yaml"])
    st = "stages:\n  - {first_layer: 0, chip: 0}\n"
    pc("not_mapping", 1, r"p.plan.yaml:1:1: the plan file must be a mapping", "- 1\n")
    pc("empty", 1, r"p.plan.yaml:1:1: the plan needs a 'stages' list", "{}\n")
    pc("no_stages", 1, r"{at}: the plan needs a 'stages' list", "@@dp: 1\n")
    pc("stages_scalar", 1, r"{at}: the plan needs a 'stages' list", "stages: @@3\n")
    pc("stages_count", 1, r"{at}: 'stages' has 1 entries but pp is 2", "pp: 2\nstages:\n  @@- {first_layer: 0, chip: 0}\n")
    pc("stage_no_chip", 1, r"{at}: a stage needs 'first_layer' and 'chip'", "stages:\n  - @@{first_layer: 0}\n")
    pc("stage_first_nonzero", 1, r"{at}: stage 0: first_layer 1 must be 0", "stages:\n  - {first_layer: @@1, chip: 0}\n")
    pc("stage_first_decreasing", 1, r"{at}: stage 1: first_layer 0 must be 0 for the first stage and grow",
       "pp: 2\nstages:\n  - {first_layer: 0, chip: 0}\n  - {first_layer: @@0, chip: 1}\n")
    pc("stage_chip_out", 1, r"{at}: plan stage 1: chip 9 is not in the cluster \(chips 0 to 3\)",
       "pp: 2\nstages:\n  - {first_layer: 0, chip: 0}\n  - {first_layer: 2, chip: @@9}\n")
    pc("stage_layer_out", 1, r"{at}: plan stage 1 starts at layer 7 but the model has 4 layers",
       "pp: 2\nstages:\n  - {first_layer: 0, chip: 0}\n  - {first_layer: @@7, chip: 1}\n")
    pc("stage_key", 1, r"{at}: unknown key 'chips' in 'plan.stages'", "stages:\n  - {first_layer: 0, @@chips: 0}\n")
    pc("unknown_key", 1, r"{at}: unknown key 'stage' in 'plan' \(did you mean 'stages'\?\)", st + "@@stage: 1\n")
    pc("duplicate_key", 1, r"{at}: duplicate key 'pp'", "pp: 1\n@@pp: 1\n" + st)
    pc("two_documents", 1, r"{at}: the plan file holds 2 YAML documents", st + "---\n@@" + st)
    pc("dp_zero", 1, r"{at}: 'dp' is 0, out of range", "dp: @@0\n" + st)
    pc("tp_text", 1, r"{at}: 'tp' must be an integer", "tp: @@x\n" + st)
    pc("split_unknown", 1, r"{at}: 'split' is 'rows', expected one of", "split: @@rows\n" + st)
    pc("placement_size", 1, r"{at}: 'placement' has 3 chips but dp x tp x pp is 2", "dp: 2\n" + st + "placement: @@[0, 1, 2]\n")
    pc("placement_duplicate", 1, r"{at}: 'placement' gives chip 1 to ranks 0 and 1", "dp: 2\n" + st + "placement: [1, @@1]\n")
    pc("placement_out", 1, r"{at}: plan placement: chip 8 is not in the cluster", "dp: 2\n" + st + "placement: [0, @@8]\n")
    pc("placement_negative", 1, r"{at}: 'placement' entry -1 is out of range", "dp: 2\n" + st + "placement: [0, @@-1]\n")
    pc("tp_without_placement", 1, r"{at}: the plan has dp x tp = 2 ranks per stage and needs a 'placement'",
       "@@tp: 2\nsplit: megatron\n" + st)
    pc("dp_without_placement", 1, r"{at}: the plan has dp x tp = 4 ranks per stage and needs a 'placement'",
       "@@dp: 4\n" + st)
    pc("layer_chunk_out", 1, r"{at}: layer_chunk entry 2 is chunk 5, but pp x interleave is 2 chunks",
       "pp: 2\nstages:\n  - {first_layer: 0, chip: 0}\n  - {first_layer: 2, chip: 1}\nlayer_chunk: [0, 0, @@5, 1]\n")
    pc("layer_chunk_count", 1, r"{at}: plan layer_chunk has 2 entries but the model has 4 layers",
       "pp: 2\nstages:\n  - {first_layer: 0, chip: 0}\n  - {first_layer: 2, chip: 1}\nlayer_chunk: [@@0, 1]\n")
    pc("layer_chunk_text", 1, r"{at}: 'layer_chunk' must be a list of integers",
       "stages:\n  - {first_layer: 0, chip: 0}\nlayer_chunk: [0, @@a, 0, 0]\n")
    pc("syntax", 1, r"p.plan.yaml:\d+:\d+: YAML syntax error in the plan file", "stages: [\n")
    case(g, "plan_directory", 1, r"pdir: the plan file is not a regular file", config=PLAN_CONFIG,
         files={"pdir/": None}, args=["--config", "c.yaml", "--plan", "pdir"])
    case(g, "plan_fifo", 1, r"pfifo: the plan file is not a regular file", config=PLAN_CONFIG,
         files={"pfifo": "fifo"}, args=["--config", "c.yaml", "--plan", "pfifo"])
    case(g, "plan_missing", 1, r"nope.plan.yaml: cannot open the plan file", config=PLAN_CONFIG,
         args=["--config", "c.yaml", "--plan", "nope.plan.yaml"])


# ---------------------------------------------------------------- ONNX files
def onnx_model(nodes, inputs, outputs, inits=(), opset=13, raw=None):
    """Builds a ModelProto's bytes from helper pieces (imported lazily: only this group needs onnx)."""
    from onnx import helper
    graph = helper.make_graph(list(nodes), "g", list(inputs), list(outputs), list(inits))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    if raw:
        raw(model)
    return model.SerializeToString()


def onnx_cases():
    from onnx import TensorProto, helper, numpy_helper
    import numpy as np
    g = "onnx"
    F = TensorProto.FLOAT
    vi = helper.make_tensor_value_info
    x = vi("x", F, [2, 4])
    y = vi("y", F, [2, 4])
    w = numpy_helper.from_array(np.ones((4, 4), np.float32), "w")
    conf = BASE_CLUSTER + "model: {onnx: m.onnx}\n"

    def raw_tensor(name, dtype, dims, floats=(), raw=b""):
        """A TensorProto as written, without onnx.helper's consistency checks."""
        t = TensorProto()
        t.name, t.data_type = name, dtype
        t.dims.extend(dims)
        t.float_data.extend(floats)
        if raw:
            t.raw_data = raw
        return t

    def oc(name, code, pattern, data, extra=None, args=None):
        files = {"m.onnx": data}
        files.update(extra or {})
        case(g, name, code, pattern, config=conf, files=files, args=args)

    def node(op, ins, outs, **attrs):
        return helper.make_node(op, ins, outs, name="n0", **attrs)

    oc("not_protobuf", 2, r"node '[^']*m.onnx': not a valid ONNX model", b"\x08\x07garbage" * 10)
    oc("empty_file", 2, r"node '[^']*m.onnx': not a valid ONNX model", b"")
    oc("text_file", 2, r"node '[^']*m.onnx': not a valid ONNX model", b"ir_version: 7\n")
    oc("no_opset", 2, r"node '[^']*m.onnx': the model imports no ONNX opset",
       onnx_model([node("Relu", ["x"], ["y"])], [x], [y], raw=lambda m: m.ClearField("opset_import")))
    # ONNX's version converter (opsets below 11) crashed on names nothing defines (found by onnx_fuzzer).
    oc("upgrade_output_without_producer", 2, r"node '[^']*m.onnx': graph output 'y' is produced by no node",
       onnx_model([node("Relu", ["x"], ["z"])], [x], [y], opset=10))
    oc("upgrade_undefined_input", 2,
       r"node 'n0': input 'q' is not a graph input, an initializer or an earlier node's output",
       onnx_model([node("Add", ["x", "q"], ["y"])], [x], [y], opset=10))
    oc("opset_new", 2, r"node '[^']*m.onnx': opset 99 is not supported", onnx_model([node("Relu", ["x"], ["y"])], [x], [y], opset=99))
    oc("unsupported_op", 2, r"node '[^']*m.onnx': opset 13: 1 unsupported op kind: Hardmax x 1 \(first node 'n0'\)", onnx_model([node("Hardmax", ["x"], ["y"])], [x], [y]))
    oc("op_domain", 2, r"node '[^']*m.onnx': opset 13: 1 unsupported op kind: com.example::Relu x 1 \(first node 'n0'\)",
       onnx_model([helper.make_node("Relu", ["x"], ["y"], name="n0", domain="com.example")], [x], [y]))
    # Nodes with fewer inputs than the op needs.
    for op, ins, need in [("MatMul", ["x"], 2), ("Gemm", ["x"], 2), ("Add", ["x"], 2), ("Sub", ["x"], 2),
                          ("Mul", ["x"], 2), ("Div", ["x"], 2), ("Pow", ["x"], 2), ("Equal", ["x"], 2),
                          ("Where", ["x", "x"], 3), ("Reshape", ["x"], 2), ("Expand", ["x"], 2), ("Slice", ["x", "x"], 3),
                          ("Gather", ["x"], 2), ("Range", ["x", "x"], 3), ("BatchNormalization", ["x", "x"], 5),
                          ("LayerNormalization", ["x"], 2), ("Conv", ["x"], 2), ("Relu", [], 1), ("Softmax", [], 1),
                          ("Transpose", [], 1), ("Concat", [], 1), ("Split", [], 1), ("Cast", [], 1),
                          ("Shape", [], 1), ("MaxPool", [], 1), ("Identity", [""], 1)]:
        oc("too_few_inputs_" + op.lower() + "_" + str(len(ins)), 2,
           r"node 'n0': " + op + r" \(opset 13\): takes at least %d inputs?, got %d" % (need, len(ins)),
           onnx_model([node(op, ins, ["y"])], [x], [y]))
    for op, ins in [("Relu", ["x"]), ("MatMul", ["x", "w"]), ("Split", ["x"]), ("Add", ["x", "x"]), ("Conv", ["x", "w"]),
                    ("Shape", ["x"]), ("Identity", ["x"])]:
        oc("no_output_" + op.lower(), 2, r"node 'n0': " + op + r" \(opset 13\): needs an output",
           onnx_model([node(op, ins, [])], [x], [y], inits=[w]))
    oc("empty_output_name", 2, r"node 'n0': Relu \(opset 13\): needs an output", onnx_model([node("Relu", ["x"], [""])], [x], [y]))
    oc("constant_no_output", 2, r"node 'n0': Constant \(opset 13\): needs exactly 1 output",
       onnx_model([node("Constant", [], [], value=numpy_helper.from_array(np.ones(2, np.float32)))], [x], [y]))
    oc("constant_no_value", 2, r"node 'n0': Constant \(opset 13\): needs exactly one value attribute",
       onnx_model([node("Constant", [], ["c"])], [x], [y]))
    oc("cast_to_string", 2, r"node 'n0': Cast \(opset 13\): cast to STRING is not supported",
       onnx_model([node("Cast", ["x"], ["y"], to=TensorProto.STRING)], [x], [y]))
    oc("cast_to_text", 2, r"node 'n0': Cast \(opset 13\): needs an integer 'to' attribute",
       onnx_model([node("Cast", ["x"], ["y"], to="FLOAT16")], [x], [y]))
    oc("cast_without_to", 2, r"node 'n0': Cast \(opset 13\): needs an integer 'to' attribute",
       onnx_model([node("Cast", ["x"], ["y"])], [x], [y]))
    oc("cast_to_huge", 2, r"node 'n0': Cast \(opset 13\): cast to type 4294967297 is not supported",
       onnx_model([node("Cast", ["x"], ["y"], to=4294967297)], [x], [y]))
    xi = vi("x", F, [1, 2, 8, 8])
    yi = vi("y", F, [1, 2, 8, 8])
    wc = numpy_helper.from_array(np.ones((2, 2, 3, 3), np.float32), "wc")
    oc("conv_auto_pad_stride_zero", 2, r"node 'n0': Conv \(opset 13\): kernel_shape, strides and dilations must be >= 1",
       onnx_model([node("Conv", ["x", "wc"], ["y"], auto_pad="SAME_UPPER", strides=[0, 0])], [xi], [yi], inits=[wc]))
    oc("conv_auto_pad_dilation_negative", 2, r"node 'n0': Conv \(opset 13\): kernel_shape, strides and dilations must be >= 1",
       onnx_model([node("Conv", ["x", "wc"], ["y"], auto_pad="SAME_LOWER", dilations=[-1, 1])], [xi], [yi], inits=[wc]))
    oc("maxpool_auto_pad_stride_zero", 2, r"node 'n0': MaxPool \(opset 13\): kernel_shape, strides and dilations must be >= 1",
       onnx_model([node("MaxPool", ["x"], ["y"], auto_pad="SAME_UPPER", kernel_shape=[2, 2], strides=[1, 0])], [xi], [yi]))
    oc("conv_stride_zero", 2, r"node 'n0': Conv \(opset 13\): .*Conv strides and dilations must be >= 1",
       onnx_model([node("Conv", ["x", "wc"], ["y"], strides=[0, 1])], [xi], [yi], inits=[wc]))
    oc("two_producers", 2, r"node 'n1': Tanh \(opset 13\): output 'y' is already produced by node 'n0'",
       onnx_model([node("Relu", ["x"], ["y"]), helper.make_node("Tanh", ["x"], ["y"], name="n1")], [x], [y]))
    oc("output_overwrites_initializer", 2, r"node 'n0': Relu \(opset 13\): output 'w' is already produced by a graph input or initializer",
       onnx_model([node("Relu", ["x"], ["w"]), helper.make_node("MatMul", ["x", "w"], ["y"], name="n1")], [x], [y], inits=[w]))
    oc("output_overwrites_input", 2, r"node 'n0': Relu \(opset 13\): output 'x' is already produced by a graph input or initializer",
       onnx_model([node("Relu", ["x"], ["x"])], [x], [y]))
    oc("undefined_input", 2, r"node 'n0': Relu \(opset 13\): input 'q' is not defined", onnx_model([node("Relu", ["q"], ["y"])], [x], [y]))
    oc("cycle", 2, r"node '[^']*m.onnx': the graph has a cycle",
       onnx_model([node("Add", ["x", "b"], ["a"]), helper.make_node("Relu", ["a"], ["b"], name="n1"),
                   helper.make_node("Relu", ["a"], ["y"], name="n2")], [x], [y]))
    oc("output_not_produced", 2, r"node 'z': graph output is not produced by any node",
       onnx_model([node("Relu", ["x"], ["y"])], [x], [vi("z", F, [2, 4])]))
    oc("negative_dim", 2, r"node 'x': dimension 1 of input 'x' is -4, a negative size",
       onnx_model([node("Relu", ["x"], ["y"])], [vi("x", F, [2, -4])], [y]))
    oc("huge_dims", 2, r"node 'x': input 'x' of shape \[4294967296, 4294967296\] holds more than 2\^48 bytes",
       onnx_model([node("Relu", ["x"], ["y"])], [vi("x", F, [1 << 32, 1 << 32])], [y]))
    oc("large_dims", 2, r"node 'x': input 'x' of shape \[1099511627776, 1048576\] holds more than 2\^48 bytes",
       onnx_model([node("Relu", ["x"], ["y"])], [vi("x", F, [1 << 40, 1 << 20])], [y]))
    sym = onnx_model([node("Relu", ["x"], ["y"])], [vi("x", F, ["batch", 8])], [vi("y", F, ["batch", 8])])
    oc("override_batch_past_cluster", 3, r"node 'x': tensor 'x' of shape \[1099511627776, 8\] holds 1.759e\+13 bytes, "
       r"more than the 4.614e\+08 bytes of SRAM of all 2 chips", sym, args=["--config", "c.yaml", "--override", "batch=1099511627776"])
    oc("override_batch_past_tensor_limit", 2, r"node 'x': input 'x' of shape \[70368744177664, 8\] holds more than 2\^48 bytes",
       sym, args=["--config", "c.yaml", "--override", "batch=70368744177664"])
    oc("dynamic_dim", 2, r"node 'x': dimension 0 of input 'x' is dynamic \('n'\) and has no value",
       onnx_model([node("Relu", ["x"], ["y"])], [vi("x", F, ["n", 4])], [y]))
    oc("input_not_tensor", 2, r"node 'x': graph input is not a tensor",
       onnx_model([node("Relu", ["x"], ["y"])], [helper.make_empty_tensor_value_info("x")], [y]))
    oc("input_type_string", 2, r"node 'x': graph input type STRING is not supported",
       onnx_model([node("Relu", ["x"], ["y"])], [vi("x", TensorProto.STRING, [2])], [y]))
    oc("initializer_string", 2, r"node 's': initializer type STRING is not supported",
       onnx_model([node("Relu", ["x"], ["y"])], [x], [y], inits=[helper.make_tensor("s", TensorProto.STRING, [1], [b"a"])]))
    oc("initializer_negative_dim", 2, r"node 'w': tensor shape \[-1, 4\] has a negative dimension",
       onnx_model([node("MatMul", ["x", "w"], ["y"])], [x], [y], inits=[raw_tensor("w", F, [-1, 4])]))
    oc("initializer_short", 2, r"node 'w': tensor has 3 values, its shape needs 16",
       onnx_model([node("MatMul", ["x", "w"], ["y"])], [x], [y], inits=[raw_tensor("w", F, [4, 4], floats=[1, 2, 3])]))
    oc("initializer_raw_short", 2, r"node 'w': tensor data has 4 bytes, its shape needs 64",
       onnx_model([node("MatMul", ["x", "w"], ["y"])], [x], [y],
                  inits=[raw_tensor("w", F, [4, 4], raw=b"\0\0\0\0")]))

    def external(name, entries, dims=(2,)):
        t = raw_tensor(name, TensorProto.INT64, dims)
        t.data_location = TensorProto.EXTERNAL
        for k, v in entries:
            e = t.external_data.add()
            e.key, e.value = k, v
        return t
    shape_model = lambda t: onnx_model([node("Reshape", ["x", "s"], ["y"])], [x], [y], inits=[t])
    oc("external_offset_text", 2, r"node 's': external data offset 'ten' is not a byte count",
       shape_model(external("s", [("location", "d.bin"), ("offset", "ten")])), extra={"d.bin": b"\0" * 64})
    oc("external_length_text", 2, r"node 's': external data length '16x' is not a byte count",
       shape_model(external("s", [("location", "d.bin"), ("length", "16x")])), extra={"d.bin": b"\0" * 64})
    oc("external_offset_negative", 2, r"node 's': external data offset '-8' is not a byte count",
       shape_model(external("s", [("location", "d.bin"), ("offset", "-8")])), extra={"d.bin": b"\0" * 64})
    oc("external_offset_past_end", 2, r"node 's': external data .*d.bin is shorter than offset 60 \+ length 16",
       shape_model(external("s", [("location", "d.bin"), ("offset", "60")])), extra={"d.bin": b"\0" * 64})
    oc("external_length_wrong", 2, r"node 's': external data length 8 differs from the 16 bytes of its shape",
       shape_model(external("s", [("location", "d.bin"), ("length", "8")])), extra={"d.bin": b"\0" * 64})
    oc("external_length_huge", 2, r"node 's': external data length 9223372036854775807 differs",
       shape_model(external("s", [("location", "d.bin"), ("length", "9223372036854775807")])), extra={"d.bin": b"\0" * 64})
    oc("external_missing", 2, r"node 's': external data file '[^']*gone.bin' cannot be read",
       shape_model(external("s", [("location", "gone.bin")])))
    oc("external_directory", 2, r"node 's': external data file '[^']*ddir' is not a regular file",
       shape_model(external("s", [("location", "ddir")])), extra={"ddir/": None})
    oc("reshape_runtime_shape", 2, r"node 'n0': Reshape \(opset 13\): input 1 \('x'\) must be a constant",
       onnx_model([node("Reshape", ["x", "x"], ["y"])], [x], [y]))
    oc("split_sizes", 2, r"node 'n0': Split \(opset 12\): Split sizes \[1,1\] do not add up to dimension 4",
       onnx_model([node("Split", ["x"], ["y", "z"], axis=1, split=[1, 1])], [x], [y], opset=12))
    oc("softmax_axis", 2, r"node 'n0': Softmax \(opset 11\): axis 7 is out of range for rank 2",
       onnx_model([node("Softmax", ["x"], ["y"], axis=7)], [x], [y], opset=11))
    oc("attribute_graph", 2, r"node 'n0': Relu \(opset 13\): attribute 'body' has an unsupported type",
       onnx_model([node("Relu", ["x"], ["y"], body=helper.make_graph([], "b", [], []))], [x], [y]))
    oc("batchnorm_training", 2, r"node 'n0': BatchNormalization \(opset 13\): training_mode is not supported",
       onnx_model([node("BatchNormalization", ["x", "w", "w", "w", "w"], ["y"], training_mode=1)], [xi], [yi], inits=[w]))
    oc("onnx_fifo", 2, r"node '[^']*mf.onnx': the ONNX file is not a regular file", b"", extra={"mf.onnx": "fifo"},
       args=["--config", "c.yaml", "--model", "mf.onnx"])
    oc("onnx_directory", 2, r"node '[^']*md.onnx': the ONNX file is not a regular file", b"", extra={"md.onnx/": None},
       args=["--config", "c.yaml", "--model", "md.onnx"])


# ---------------------------------------------------------------- command-line values and input files
def argument_cases():
    g = "args"
    a = lambda *extra: ["--config", "c.yaml", *extra]
    case(g, "seed_negative", 1, r"--seed", config=BASE, args=a("--seed", "-5"))
    case(g, "seed_text", 1, r"--seed", config=BASE, args=a("--seed", "x"))
    case(g, "override_huge_batch", 2, r"node 'builtin:mlp': parameter 'batch' is 1099511627776, out of range",
         config=BASE_CLUSTER + "model: {builtin: mlp, params: {layers: 2, hidden: 64}}\n",
         args=a("--override", "batch=1099511627776"))
    case(g, "override_zero", 1, r"--override: 'batch=0' is not name=positive-integer", config=BASE, args=a("--override", "batch=0"))
    case(g, "override_text", 1, r"--override: 'batch=x' is not name=positive-integer", config=BASE, args=a("--override", "batch=x"))
    case(g, "override_overflow", 1, r"--override: 'batch=99999999999999999999' is not name=positive-integer",
         config=BASE, args=a("--override", "batch=99999999999999999999"))
    case(g, "override_no_name", 1, r"--override: '=4' is not name=positive-integer", config=BASE, args=a("--override", "=4"))
    case(g, "override_exponent", 1, r"--override: 'batch=2\^40' is not name=positive-integer", config=BASE,
         args=a("--override", "batch=2^40"))
    case(g, "model_unknown_builtin", 1, r"--model: unknown built-in model 'gpt5'", config=BASE, args=a("--model", "builtin:gpt5"))
    case(g, "model_bad_pair", 1, r"--model: 'layers' is not key=value", config=BASE, args=a("--model", "builtin:mlp,layers"))
    case(g, "model_param_range", 2, r"node 'builtin:mlp': parameter 'layers' is 0, out of range", config=BASE,
         args=a("--model", "builtin:mlp,layers=0"))
    case(g, "model_param_huge", 2, r"node 'builtin:mlp': parameter 'hidden' must be an integer, got '1e99'", config=BASE,
         args=a("--model", "builtin:mlp,hidden=1e99"))
    case(g, "model_missing_onnx", 2, r"node 'nope.onnx': cannot open the ONNX file", config=BASE, args=a("--model", "nope.onnx"))
    case(g, "trace_level", 1, r"--trace-level: everything not in", config=BASE, args=a("--trace-level", "everything"))
    case(g, "describe", 1, r"--describe: weights not in", config=BASE, args=a("--describe", "weights"))
    case(g, "unknown_option", 1, r"The following argument was not expected: --frobnicate", config=BASE, args=a("--frobnicate"))
    case(g, "compile_only", 1, r"--compile-only: needs --emit-programs DIR", config=BASE, args=a("--compile-only"))
    case(g, "passes_unknown", 1, r"unknown pass 'fold2'", config=BASE, args=a("--passes", "fold2"))
    case(g, "dump_ir_unknown", 1, r"--dump-ir-after: 'fuse' is not 'import' or a pass of the pipeline", config=BASE,
         args=a("--dump-ir-after", "fuse"))
    case(g, "inputs_need_functional", 1, r"--inputs and --expect need functional mode", config=BASE, args=a("--inputs", "d"))
    case(g, "config_missing", 1, r"nope.yaml: cannot open the config file", args=["--config", "nope.yaml"])
    case(g, "config_directory", 1, r"cdir: the config file is not a regular file", files={"cdir/": None},
         args=["--config", "cdir"])
    case(g, "config_fifo", 1, r"cfifo: the config file is not a regular file", files={"cfifo": "fifo"},
         args=["--config", "cfifo"])
    case(g, "config_dev_zero", 1, r"/dev/zero: the config file is not a regular file", args=["--config", "/dev/zero"])
    case(g, "config_missing_option", 1, r"--config is required", args=[])
    case(g, "out_directory", 1, r"odir: cannot write the trace: the path is a directory", config=BASE, files={"odir/": None},
         args=a("--out", "odir"))
    case(g, "out_parent_is_file", 1, r"afile/t.h5: cannot write the trace: afile is not a directory", config=BASE,
         files={"afile": "x"}, args=a("--out", "afile/t.h5"))
    case(g, "out_proc", 1, r"/proc/nope/t.h5: cannot write the trace: cannot create the directory /proc/nope", config=BASE,
         args=a("--out", "/proc/nope/t.h5"))
    case(g, "out_in_config_directory", 1, r"odir: cannot write the trace: the path is a directory",
         config=BASE + "output: {trace: odir}\n", files={"odir/": None}, out=False)
    case(g, "programs_missing", 1, r"pdir/manifest.json: cannot open the program manifest", config=BASE,
         args=a("--programs", "pdir"))


# ---------------------------------------------------------------- program directories
def program_cases():
    g = "programs"
    two = "cluster:\n  topology: {kind: ring, chips: 2}\n" + BASE_MODEL
    def pc(name, pattern, manifest, extra=None):
        files = {"pd/manifest.json": manifest}
        files.update(extra or {})
        case(g, name, 1, pattern, config=two, files=files, args=["--config", "c.yaml", "--programs", "pd"])
    run = '{"model": "builtin:mlp,batch=4,hidden=64,layers=2", "inputs": [["x", [4, 64]]], "chips": 2}'
    fmt = '{"format": "tsp-programs", "version": 1, "run": ' + run + ', "chips": %s}'
    entries = '[{"chip": 0, "program": "p.json"}, {"chip": 1, "program": "p.json"}]'
    other = lambda old, new: fmt.replace(old, new) % entries
    pc("run_missing", r"pd/manifest.json: it does not record the run its programs were compiled for",
       fmt.replace('"run": ' + run + ', ', '') % entries)
    pc("run_other_model", r'pd/manifest.json: its programs were compiled for model "builtin:gpt", this run.s model is '
       r'"builtin:mlp,batch=4,hidden=64,layers=2"', other('"builtin:mlp,batch=4,hidden=64,layers=2"', '"builtin:gpt"'))
    pc("run_other_shapes", r'pd/manifest.json: its programs were compiled for the inputs \[\["x",\[8,64\]\]\], this run.s are',
       other('[4, 64]', '[8, 64]'))
    pc("run_other_chips", r"pd/manifest.json: its programs were compiled for 4 chips, this run.s cluster has 2",
       other('"chips": 2}', '"chips": 4}'))
    pc("not_json", r"pd/manifest.json: not a tsp-sim program manifest", "{not json")
    pc("json_list", r"pd/manifest.json: not a tsp-sim program manifest", "[1, 2]")
    pc("format_number", r"pd/manifest.json: not a tsp-sim program manifest", '{"format": 7, "chips": []}')
    pc("chips_object", r"pd/manifest.json: not a tsp-sim program manifest", '{"format": "tsp-programs", "chips": {}}')
    pc("wrong_count", r"pd/manifest.json: lists 1 chips, the cluster has 2", fmt % '[{"chip": 0, "program": "p.json"}]')
    pc("chip_text", r"pd/manifest.json: an entry needs a chip in \[0, 2\) and a program file",
       fmt % '[{"chip": "zero", "program": "p.json"}, {"chip": 1, "program": "p.json"}]')
    pc("chip_float", r"pd/manifest.json: an entry needs a chip in \[0, 2\) and a program file",
       fmt % '[{"chip": 0.5, "program": "p.json"}, {"chip": 1, "program": "p.json"}]')
    pc("chip_huge", r"pd/manifest.json: an entry needs a chip in \[0, 2\) and a program file",
       fmt % '[{"chip": 99999999999999, "program": "p.json"}, {"chip": 1, "program": "p.json"}]')
    pc("program_number", r"pd/manifest.json: an entry needs a chip in \[0, 2\) and a program file",
       fmt % '[{"chip": 0, "program": 5}, {"chip": 1, "program": "p.json"}]')
    pc("entry_scalar", r"pd/manifest.json: an entry needs a chip in \[0, 2\) and a program file", fmt % '[3, 4]')
    pc("chip_twice", r"pd/manifest.json: lists chip 1 twice",
       fmt % '[{"chip": 1, "program": "p.json"}, {"chip": 1, "program": "p.json"}]')
    pc("program_missing", r"pd/gone.json: cannot open the program file",
       fmt % '[{"chip": 0, "program": "gone.json"}, {"chip": 1, "program": "gone.json"}]')
    pc("program_not_json", r"pd/p.json", fmt % '[{"chip": 0, "program": "p.json"}, {"chip": 1, "program": "p.json"}]',
       {"pd/p.json": "{oops"})
    pc("program_directory", r"pd/sub: the program file is not a regular file",
       fmt % '[{"chip": 0, "program": "sub"}, {"chip": 1, "program": "sub"}]', {"pd/sub/": None})
    pc("manifest_directory", r"pd/manifest.json: the program manifest is not a regular file", None,
       {"pd/manifest.json/": None})


GROUPS = {"yaml": yaml_cases, "chip": chip_cases, "topology": topology_cases, "sections": section_cases,
          "plan": plan_cases, "onnx": onnx_cases, "args": argument_cases, "programs": program_cases}


def write_files(directory, files):
    """Writes the case's files; returns {name: (line, col)} of each '@@' mark."""
    marks = {}
    for name, content in files.items():
        path = os.path.join(directory, name.rstrip("/"))
        os.makedirs(os.path.dirname(path), exist_ok=True)
        if name.endswith("/"):
            os.makedirs(path, exist_ok=True)
        elif content == "fifo":
            os.mkfifo(path)
        elif content is None:
            continue
        elif isinstance(content, bytes):
            with open(path, "wb") as f:
                f.write(content)
        else:
            if MARK in content:
                before = content[:content.index(MARK)]
                marks[name] = (before.count("\n") + 1, len(before) - (before.rfind("\n") + 1) + 1)
                content = content.replace(MARK, "", 1)
            with open(path, "w") as f:
                f.write(content)
    return marks


def listing(directory):
    out = set()
    for root, dirs, names in os.walk(directory):
        for n in dirs + names:
            out.add(os.path.relpath(os.path.join(root, n), directory))
    return out


def run_case(tsp_sim, c):
    directory = tempfile.mkdtemp(prefix="tsp-bad-")
    try:
        marks = write_files(directory, c.files)
        before = listing(directory)
        pattern = c.pattern
        if "{at}" in pattern:
            (name, (line, col)), = marks.items()
            pattern = pattern.replace("{at}", re.escape(name) + f":{line}:{col}")
        args = list(c.args)
        if "--out" not in args and c.out:
            args += ["--out", "t.h5"]
        command = [tsp_sim, "--quiet", *args]
        try:
            result = subprocess.run(command, cwd=directory, capture_output=True, text=True, timeout=120 * TIMEOUT_SCALE,
                                    stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired:
            return f"timed out: {' '.join(command)}"
        errors = [l for l in result.stderr.splitlines() if l.startswith("tsp-sim: error:")]
        problems = []
        if result.returncode != c.code:
            problems.append(f"exit {result.returncode}, want {c.code}")
        if len(errors) != 1 or not re.search(pattern, errors[0]):
            problems.append(f"want one error line matching {pattern!r}")
        left = listing(directory) - before
        if left:
            problems.append(f"left behind: {sorted(left)}")
        if problems:
            return "; ".join(problems) + f"\n    command: {' '.join(command)}\n    stderr: {result.stderr.strip()[:2000]}"
        return None
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def main():
    tsp_sim, group = os.path.abspath(sys.argv[1]), sys.argv[2]
    only = set(sys.argv[3:])
    for name, build in GROUPS.items():
        if group in (name, "list", "all"):
            build()
    if group == "list":
        for c in CASES:
            print(c.group, c.name)
        print(len(CASES), "cases")
        return 0
    failed = 0
    ran = 0
    for c in CASES:
        if only and c.name not in only:
            continue
        ran += 1
        problem = run_case(tsp_sim, c)
        if problem:
            failed += 1
            print(f"FAIL {c.group}.{c.name}: {problem}")
        else:
            print(f"ok   {c.group}.{c.name}")
    print(f"{ran - failed} of {ran} cases pass")
    return 1 if failed or ran == 0 else 0


if __name__ == "__main__":
    sys.exit(main())
