"""Text-proto XSpace traces (TPU- and GPU-shaped) that hostile tests mutate.

Their lines start at epoch-scale timestamps, as real traces' do: ``XLine.timestamp_ns``
counts from the UNIX epoch (~1.7e18 ns), so a line's start in picoseconds (~1.7e21) does
not fit int64.
"""

from __future__ import annotations

#: A line start as real traces write it: nanoseconds since the UNIX epoch (2024-04-05).
EPOCH_NS = 1_712_345_678_901_234_567
assert EPOCH_NS * 1000 > 2**63  # in picoseconds, past int64

TPU_TRACE = """
planes {
  id: 1 name: "/device:TPU:0"
  stats { metadata_id: 10 double_value: 197.0 }
  stats { metadata_id: 11 double_value: 819.0 }
  lines { id: 1 name: "XLA Ops" timestamp_ns: START_NS
    events { metadata_id: 1 offset_ps: 0 duration_ps: 4000000 }
    events { metadata_id: 2 offset_ps: 5000000 duration_ps: 1000000 }
    events { metadata_id: 3 offset_ps: 7000000 duration_ps: 2000000 }
    events { metadata_id: 1 offset_ps: 10000000 duration_ps: 6000000 }
    events { metadata_id: 4 offset_ps: 17000000 duration_ps: 1000000 }
  }
  event_metadata { key: 1 value { id: 1 name: "custom-call.1"
    stats { metadata_id: 1 str_value: "jit(step)/jaxtune[lib.mm#0123456789]/tiled_matmul/pallas_call" }
    stats { metadata_id: 2 str_value: "custom-call" } } }
  event_metadata { key: 2 value { id: 2 name: "fusion.2"
    stats { metadata_id: 1 str_value: "jit(step)/tanh" }
    stats { metadata_id: 3 double_value: 2048 } stats { metadata_id: 4 double_value: 8192 } } }
  event_metadata { key: 3 value { id: 3 name: "custom-call.3"
    stats { metadata_id: 1 str_value: "jit(step)/no_cost/pallas_call" } } }
  event_metadata { key: 4 value { id: 4 name: "fusion.4"
    stats { metadata_id: 1 str_value: "jit(step)/jaxtune[lib.norm#abcdefabcd]/mul" } } }
  stat_metadata { key: 1 value { id: 1 name: "tf_op" } }
  stat_metadata { key: 2 value { id: 2 name: "hlo_category" } }
  stat_metadata { key: 3 value { id: 3 name: "flops" } }
  stat_metadata { key: 4 value { id: 4 name: "bytes_accessed" } }
  stat_metadata { key: 10 value { id: 10 name: "peak_teraflops_per_second" } }
  stat_metadata { key: 11 value { id: 11 name: "peak_hbm_bw_gigabytes_per_second" } }
}
""".replace("START_NS", str(EPOCH_NS))

GPU_TRACE = """
planes {
  id: 2 name: "/device:GPU:0"
  lines { id: 7 name: "Stream #7" timestamp_ns: START_NS
    events { metadata_id: 1 offset_ps: 0 duration_ps: 3000000
             stats { metadata_id: 1 str_value: "custom-call.5" }
             stats { metadata_id: 2 str_value: "jit_step" } }
    events { metadata_id: 2 offset_ps: 4000000 duration_ps: 1000000
             stats { metadata_id: 1 str_value: "loop_fusion" }
             stats { metadata_id: 2 str_value: "jit_step" } }
  }
  event_metadata { key: 1 value { id: 1 name: "softmax_kernel"
    stats { metadata_id: 3 str_value: "jit(step)/softmax/pallas_call" } } }
  event_metadata { key: 2 value { id: 2 name: "loop_fusion_kernel" } }
  stat_metadata { key: 1 value { id: 1 name: "hlo_op" } }
  stat_metadata { key: 2 value { id: 2 name: "hlo_module" } }
  stat_metadata { key: 3 value { id: 3 name: "tf_op" } }
}
""".replace("START_NS", str(EPOCH_NS + 2_345))
