"""Every field of the v1 SLA document: accepted values, defaults and every refusal."""

from __future__ import annotations

import pytest

from nri_plugin.sla import (
    CpuSla,
    GpuSla,
    IoMaxRule,
    IoSla,
    MemorySla,
    NumaSla,
    Sla,
    parse_sla_document,
)

POD = "sla.nri.io/pod"
GI = 2**30
MI = 2**20

FULL = """
enforcement: soft
cpu:
  limit: 2.5
  period: 50ms
  rt-runtime: 5ms
  rt-period: 1s
  exclusive: 4
numa:
  nodes: "0-1"
  memory-policy: interleave
memory:
  high: 8Gi
  max: 10Gi
io:
  weight: 500
  max:
    - device: /dev/nvme0n1
      read-bps: 500Mi
      write-bps: 200Mi
      read-iops: 20000
      write-iops: 10k
    - device: "8:0"
      write-bps: 1G
gpu:
  ids: [0, GPU-8f6e1a2b-0000-1111-2222-333344445555, "0000:3b:00.0"]
  topology: numa
  align: false
  from: plugin
"""


def test_full_document():
    sla = parse_sla_document(POD, FULL)
    assert sla == Sla(
        enforcement="soft",
        cpu=CpuSla(
            limit=2.5, period_us=50_000, rt_runtime_us=5000, rt_period_us=1_000_000, exclusive=4
        ),
        numa=NumaSla(nodes=(0, 1), auto=False, memory_policy="interleave"),
        memory=MemorySla(high=8 * GI, max=10 * GI),
        io=IoSla(
            weight=500,
            max=(
                IoMaxRule("/dev/nvme0n1", 500 * MI, 200 * MI, 20000, 10000),
                IoMaxRule("8:0", None, 10**9, None, None),
            ),
        ),
        gpu=GpuSla(
            count=None,
            ids=("0", "GPU-8f6e1a2b-0000-1111-2222-333344445555", "0000:3b:00.0"),
            mig=None,
            topology="numa",
            align=False,
            source="plugin",
        ),
        keys=(POD,),
    )
    assert sla.cpu.quota_us == 125_000


def test_defaults():
    sla = parse_sla_document(POD, "cpu: {limit: 2, rt-runtime: 10ms}\ngpu: {count: 1}\n")
    assert sla.enforcement == "hard"
    assert sla.cpu == CpuSla(
        limit=2.0, period_us=100_000, rt_runtime_us=10_000, rt_period_us=1_000_000, exclusive=None
    )
    assert sla.gpu == GpuSla(count=1, ids=(), mig=None, topology="any", align=True, source="plugin")
    assert sla.numa is sla.memory is sla.io is None
    soft = parse_sla_document(POD, "memory: {max: 1Gi}", default_enforcement="soft")
    assert soft.enforcement == "soft"
    assert soft.cpu is None and soft.memory == MemorySla(None, GI)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("numa: {nodes: auto}", NumaSla(None, True, None)),
        ("numa: {nodes: 0}", NumaSla((0,), False, None)),
        ("numa: {nodes: '1'}", NumaSla((1,), False, None)),
        ("numa: {nodes: '0,2'}", NumaSla((0, 2), False, None)),
        ("numa: {nodes: '0-1,4'}", NumaSla((0, 1, 4), False, None)),
        ("numa: {nodes: [1, 0]}", NumaSla((0, 1), False, None)),
        ("numa: {memory-policy: bind}", NumaSla(None, False, "bind")),
        ("numa: {memory-policy: preferred}", NumaSla(None, False, "preferred")),
        ("numa: {memory-policy: none}", NumaSla(None, False, "none")),
        ("numa: {}", None),
    ],
)
def test_numa_forms(text, expected):
    assert parse_sla_document(POD, text).numa == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("gpu: {count: 2, topology: nvlink}", GpuSla(2, (), None, "nvlink", True, "plugin")),
        ("gpu: {mig: 1g.10gb}", GpuSla(None, (), "1g.10gb", "any", True, "plugin")),
        ("gpu: {mig: 1g.5gb+me}", GpuSla(None, (), "1g.5gb+me", "any", True, "plugin")),
        ("gpu: {mig: 1c.3g.40gb}", GpuSla(None, (), "1c.3g.40gb", "any", True, "plugin")),
        ("gpu: {ids: '0,1'}", GpuSla(None, ("0", "1"), None, "any", True, "plugin")),
        ("gpu: {from: runtime}", GpuSla(None, (), None, "any", True, "runtime")),
        (
            "gpu: {from: runtime, align: true, topology: any}",
            GpuSla(None, (), None, "any", True, "runtime"),
        ),
        ("gpu: {count: 1, ids: []}", GpuSla(1, (), None, "any", True, "plugin")),
        # a requirement on the grant: gpu.from (either value) and no request are fine since
        # (no request: whatever was granted, at least one GPU, aligned to)
        ("gpu: {from: runtime, count: 1}", GpuSla(1, (), None, "any", True, "runtime")),
        ("gpu: {topology: nvlink}", GpuSla(None, (), None, "nvlink", True, "plugin")),
        ("gpu: {ids: []}", GpuSla(None, (), None, "any", True, "plugin")),
    ],
)
def test_gpu_forms(text, expected):
    assert parse_sla_document(POD, text).gpu == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("cpu: {limit: 2500m}", 2.5),
        ("cpu: {limit: '0.5'}", 0.5),
        ("cpu: {limit: 4096}", 4096.0),
        ("cpu: {limit: 10m, period: 100ms}", 0.01),
    ],
)
def test_cpu_limit_forms(text, expected):
    assert parse_sla_document(POD, text).cpu.limit == expected


def test_io_weight_only_and_empty_io_max():
    assert parse_sla_document(POD, "io: {weight: 1}").io == IoSla(1, ())
    assert parse_sla_document(POD, "io: {weight: 10000, max: []}").io == IoSla(10000, ())
    assert parse_sla_document(POD, "io: {max: []}").io is None
    assert parse_sla_document(POD, "io: {max: [{device: /dev/sda, read-iops: 1}]}").io == IoSla(
        None, (IoMaxRule("/dev/sda", None, None, 1, None),)
    )


def test_empty_mapping_and_null_sections():
    assert parse_sla_document(POD, "{}") == Sla(keys=(POD,))
    assert parse_sla_document(POD, "cpu:\nmemory: {}\n") == Sla(keys=(POD,))


# (document, field, fragments that must appear: the allowed values / range / the value)
FIELD_ERRORS = [
    ("enforcement: strict", "enforcement", "must be one of hard, soft", "strict"),
    ("enforcement: Hard", "enforcement", "must be one of hard, soft"),
    (
        "cpus: {limit: 2}",
        "cpus",
        "not a known field",
        "did you mean cpu?",
        "enforcement, cpu, numa, memory, io, gpu",
    ),
    ("cpu: 2", "cpu", "must be a mapping with fields limit, period, rt-runtime"),
    ("cpu: {limt: 2}", "cpu.limt", "did you mean limit?", "limit, period, rt-runtime"),
    ("cpu: {rt_runtime: 5ms}", "cpu.rt_runtime", "did you mean rt-runtime?"),
    ("cpu: {rtPeriod: 1s}", "cpu.rtPeriod", "did you mean rt-period?"),
    ("cpu: {limit: 0}", "cpu.limit", "between 0.001 and 4096 CPUs", "got 0"),
    ("cpu: {limit: 5000}", "cpu.limit", "between 0.001 and 4096 CPUs", "5000"),
    ("cpu: {limit: -1}", "cpu.limit", "must not be negative"),
    ("cpu: {limit: two}", "cpu.limit", "CPUs like 2.5 or 2500m", "two"),
    ("cpu: {limit: true}", "cpu.limit", "CPUs like 2.5 or 2500m"),
    ("cpu: {limit: 1.0005}", "cpu.limit", "finer than 1m"),
    ("cpu: {limit: 1, period: 500us}", "cpu.period", "between 1ms and 1s", "500us"),
    ("cpu: {limit: 1, period: 2s}", "cpu.period", "between 1ms and 1s", "2s"),
    ("cpu: {limit: 1, period: 100}", "cpu.period", "needs a unit: us, ms or s", "100ms"),
    ("cpu: {limit: 1, period: 100m}", "cpu.period", "a duration with a unit: us, ms or s"),
    ("cpu: {rt-runtime: 0us}", "cpu.rt-runtime", "between 1us and 1s"),
    ("cpu: {rt-runtime: 2s}", "cpu.rt-runtime", "between 1us and 1s", "2s"),
    ("cpu: {rt-runtime: 1ms, rt-period: 999us}", "cpu.rt-period", "between 1ms and 1s"),
    ("cpu: {rt-runtime: 1ms, rt-period: 5s}", "cpu.rt-period", "between 1ms and 1s"),
    ("cpu: {exclusive: 0}", "cpu.exclusive", "from 1 to 4096", "got 0"),
    ("cpu: {exclusive: 2.5}", "cpu.exclusive", "whole number of CPUs from 1 to 4096"),
    ("cpu: {exclusive: '4'}", "cpu.exclusive", "from 1 to 4096", "remove the quotes"),
    ("cpu: {exclusive: true}", "cpu.exclusive", "from 1 to 4096", "true"),
    ("numa: {nodes: any}", "numa.nodes", "auto, a node list like 0, 0-1 or 0,2", "any"),
    ("numa: {nodes: '1-0'}", "numa.nodes", "reversed range", "0-1"),
    ("numa: {nodes: '0,0'}", "numa.nodes", "names an id twice"),
    ("numa: {nodes: -1}", "numa.nodes", "must not be negative"),
    ("numa: {nodes: '0-5000'}", "numa.nodes", "from 0 to 1023"),
    ("numa: {nodes: '0-99999999'}", "numa.nodes", "from 0 to 1023"),
    ("numa: {nodes: [0, x]}", "numa.nodes", "list of NUMA node numbers"),
    ("numa: {nodes: []}", "numa.nodes", "at least one"),
    ("numa: {nodes: true}", "numa.nodes", "auto, a node list"),
    ("numa: {nodes: {a: 1}}", "numa.nodes", "auto, a node list"),
    (
        "numa: {memory-policy: strict}",
        "numa.memory-policy",
        "one of bind, preferred, interleave, none",
        "strict",
    ),
    ("memory: {max: 10GB}", "memory.max", "a size like 512Mi", "10GB"),
    ("memory: {max: 512}", "memory.max", "at least 1Mi", "512"),
    ("memory: {high: 100m}", "memory.high", "whole bytes", "did you mean 100Mi?"),
    ("memory: {max: -1Gi}", "memory.max", "must not be negative"),
    ("memory: {max: 16Ei}", "memory.max", "too large", "9223372036854775807"),
    ("memory: {hihg: 1Gi}", "memory.hihg", "did you mean high?", "high, max"),
    ("io: {weight: 0}", "io.weight", "from 1 to 10000", "got 0"),
    ("io: {weight: 10001}", "io.weight", "from 1 to 10000", "10001"),
    ("io: {weight: high}", "io.weight", "a whole number from 1 to 10000", "high"),
    ("io: {max: {device: /dev/sda}}", "io.max", "must be a list of rules"),
    ("io: {max: [/dev/sda]}", "io.max[0]", "must be a mapping with device and limits"),
    ("io: {max: [{read-bps: 1Mi}]}", "io.max[0].device", "is required", "/dev/nvme0n1 or MAJ:MIN"),
    (
        "io: {max: [{device: /dev/sda}]}",
        "io.max[0]",
        "needs at least one limit: read-bps, write-bps, read-iops or write-iops",
    ),
    (
        "io: {max: [{device: sda, read-bps: 1Mi}]}",
        "io.max[0].device",
        "block device path like /dev/nvme0n1 or MAJ:MIN like 259:0",
        "sda",
    ),
    (
        "io: {max: [{device: /dev/../etc/passwd, read-bps: 1Mi}]}",
        "io.max[0].device",
        "block device path",
    ),
    (
        "io: {max: [{device: 259, read-bps: 1Mi}]}",
        "io.max[0].device",
        "block device path like /dev/nvme0n1 or MAJ:MIN like 259:0",
        "259",
    ),
    (
        "io: {max: [{device: '5000:0', read-bps: 1Mi}]}",
        "io.max[0].device",
        "major 0..4095, minor 0..1048575",
    ),
    ("io: {max: [{device: /dev/sda, read-bps: 0}]}", "io.max[0].read-bps", "at least 1"),
    ("io: {max: [{device: /dev/sda, read-bps: fast}]}", "io.max[0].read-bps", "a size like 512Mi"),
    ("io: {max: [{device: /dev/sda, write-iops: 1.5}]}", "io.max[0].write-iops", "whole number"),
    ("io: {max: [{device: /dev/sda, readbps: 1}]}", "io.max[0].readbps", "did you mean read-bps?"),
    (
        "io: {max: [{device: /dev/sda, read-bps: 1}, {device: /dev/sda, write-bps: 1}]}",
        "io.max[1].device",
        "names device /dev/sda twice",
    ),
    (
        "io: {max: [" + ",".join(["{device: /dev/sda, read-iops: 1}"] * 9) + "]}",
        "io.max",
        "has 9 rules; at most 8",
    ),
    ("gpu: {count: 0}", "gpu.count", "from 1 to 256", "got 0"),
    ("gpu: {count: 300}", "gpu.count", "from 1 to 256"),
    ("gpu: {count: two}", "gpu.count", "whole number of GPUs from 1 to 256"),
    ("gpu: {ids: [0, 0]}", "gpu.ids", "names a GPU twice"),
    ("gpu: {ids: [0, 'bad id']}", "gpu.ids[1]", "GPU index, UUID or PCI bus id"),
    ("gpu: {ids: [-1]}", "gpu.ids[0]", "GPU index, UUID or PCI bus id"),
    ("gpu: {ids: {a: 1}}", "gpu.ids", "list of GPU indexes, UUIDs or PCI bus ids"),
    (
        "gpu: {ids: '" + ",".join(str(i) for i in range(257)) + "'}",
        "gpu.ids",
        "names 257 GPUs; at most 256",
    ),
    ("gpu: {ids: [10000]}", "gpu.ids[0]", "GPU index, UUID or PCI bus id", "10000"),
    ("gpu: {ids: [1.5]}", "gpu.ids[0]", "GPU index, UUID or PCI bus id"),
    ("gpu: {mig: 10gb}", "gpu.mig", "MIG profile like 1g.10gb or 3g.40gb", "10gb"),
    ("gpu: {count: 1, topology: ring}", "gpu.topology", "one of any, numa, nvlink", "ring"),
    ("gpu: {count: 1, align: 1}", "gpu.align", "true or false", "1"),
    ("gpu: {count: 1, from: kubelet}", "gpu.from", "one of plugin, runtime", "kubelet"),
    (
        "gpu: {count: 1, source: plugin}",
        "gpu.source",
        "not a known field",
        "count, ids, mig, topology, align, from",
    ),
]


@pytest.mark.parametrize(
    ("text", "field", "fragments"),
    [(t, f, fr) for t, f, *fr in FIELD_ERRORS],
    ids=[row[1] + ":" + row[0][:40] for row in FIELD_ERRORS],
)
def test_field_errors(check, text, field, fragments):
    check.assert_error(check.error_of(text), POD, field, *fragments)


CROSS_ERRORS = [
    (
        "memory: {high: 12Gi, max: 10Gi}",
        "memory.high",
        "sla.nri.io/pod: memory.high (12Gi) must be below memory.max (10Gi)",
    ),
    ("memory: {high: 10Gi, max: 10Gi}", "memory.high", "must be below memory.max (10Gi)"),
    (
        "cpu: {rt-runtime: 20ms, rt-period: 10ms}",
        "cpu.rt-runtime",
        "(20ms) must not exceed cpu.rt-period (10ms)",
    ),
    ("cpu: {period: 50ms}", "cpu.period", "(50ms) is set but cpu.limit is not"),
    ("cpu: {rt-period: 1s}", "cpu.rt-period", "is set but cpu.rt-runtime is not"),
    ("cpu: {limit: 1m, period: 100ms}", "cpu.limit", "quota of 100us; the kernel's minimum is 1ms"),
    ("cpu: {limit: 6, exclusive: 4}", "cpu.limit", "(6) must not exceed cpu.exclusive (4)"),
    (
        "gpu: {count: 1, ids: [0]}",
        "gpu.ids",
        "sets count and ids; these are alternatives: set exactly one of gpu.count, gpu.ids",
    ),
    ("gpu: {count: 1, mig: 1g.10gb}", "gpu.mig", "alternatives"),
]


@pytest.mark.parametrize(("text", "field", "fragment"), CROSS_ERRORS)
def test_cross_field_errors(check, text, field, fragment):
    check.assert_error(check.error_of(text), POD, field, fragment)


def test_incomplete_document_skips_cross_field_rules():
    sla = parse_sla_document(POD, "gpu: {topology: nvlink}\ncpu: {period: 50ms}", complete=False)
    assert sla.gpu.topology == "nvlink" and sla.cpu.period_us == 50_000


def test_all_problems_are_reported_together(check):
    err = check.error_of("cpu: {limit: x, period: 5}\nmemory: {max: 1}\nfoo: 1\n")
    assert [e.field for e in err.errors] == ["cpu.limit", "cpu.period", "memory.max", "foo"]
    text = str(err)
    assert text.count("sla.nri.io/pod: ") == 4 and "; " in text
    assert err.field == "cpu.limit"  # the aggregate answers as its first problem


def test_errors_pickle_and_compare():
    import pickle

    from nri_plugin.sla import SlaError, SlaErrors

    one = SlaError(POD, "memory.max", "must be a size")
    again = pickle.loads(pickle.dumps(one))
    assert str(again) == str(one) and again.field == "memory.max"
    many = SlaErrors([one, SlaError(POD, "", "is empty")])
    assert str(pickle.loads(pickle.dumps(many))) == str(many)
    assert isinstance(many, ValueError) and isinstance(many, SlaError)


def test_no_problems_are_no_errors():
    from nri_plugin.errors import ProgrammingError
    from nri_plugin.sla import SlaErrors

    with pytest.raises(ProgrammingError, match="at least one error"):
        SlaErrors([])
