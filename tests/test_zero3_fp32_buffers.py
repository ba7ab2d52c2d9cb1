"""DeepSpeed's "half-precision" buffers are in its model dtype, fp32 when neither fp16 nor bf16 is enabled
(analyzers/memory/zero3.py `ds_model_bytes`: engine.py ``get_data_types``, stage3.py ``grad_partitions_flat_buffer``
and the IPG buffer). Every expected figure is a hand count of Llama-3-8B's shapes (config.json: hidden 4096, 32
layers, 8 KV heads, intermediate 14336, vocabulary 128256, untied head) on 8 ranks, full fine-tuning, no bucket
key in the DeepSpeed config (DeepSpeed's reduce_bucket_size 5e8)."""

from __future__ import annotations

from test_zero3_linear_retain import BASE, HEAD, _run

from finetune_doctor.analyzers.memory import compute_terms
from finetune_doctor.analyzers.memory.params import count_params
from finetune_doctor.analyzers.memory.zero3 import (ds_model_bytes, output_layer_gathered_bytes,
                                                    persistent_elements, reduce_scatter_bytes)

PART = BASE // 8        # 1,003,782,656 elements of the flat gradient partition per rank


def test_model_dtype_follows_the_precision_flags():
    assert ds_model_bytes(_run()) == 2.0                                # bf16: true
    assert ds_model_bytes(_run(bf16=False, fp16=True)) == 2.0
    fp32 = _run(bf16=False)                                              # no flag: LF and DeepSpeed run fp32
    assert fp32.compute_dtype == "float32" and ds_model_bytes(fp32) == 4.0


def test_flat_gradient_partition_and_ipg_buffer_in_fp32():
    assert BASE == 8_030_261_248 and PART == 1_003_782_656
    bf16, fp32 = _run(), _run(bf16=False)
    tb, tf = compute_terms(bf16, count_params(bf16)), compute_terms(fp32, count_params(fp32))
    # stage3.py grad_partitions_flat_buffer: this rank's partition of every trainable parameter
    assert tb.grads_always == 2.0 * PART == 2_007_565_312
    assert tf.grads_always == 4.0 * PART == 4_015_130_624
    # contiguous_gradients (DeepSpeed's default): one IPG buffer of reduce_bucket_size elements
    assert tb.buffers == 2.0 * 5e8 and tf.buffers == 4.0 * 5e8


def test_gathered_and_reduced_tensors_in_fp32():
    fp32 = _run(bf16=False)
    c = count_params(fp32)
    # the output layer (128256 x 4096) is larger than the 5e8-element bucket: its whole gradient is held
    assert HEAD == 525_336_576 > 5e8
    assert reduce_scatter_bytes(fp32, c.trainable, float(HEAD)) == 4.0 * HEAD == 2_101_346_304
    assert reduce_scatter_bytes(_run(), c.trainable, float(HEAD)) == 2.0 * HEAD
    assert output_layer_gathered_bytes(fp32) == 4.0 * HEAD
    # 65 RMSNorm weights of 4096 stay whole; 7/8 of them beyond this rank's own partition
    assert persistent_elements(fp32) == 65 * 4096


def test_zero2_buckets_in_fp32():
    bf16, fp32 = _run(zo={"stage": 2}), _run(bf16=False, zo={"stage": 2})
    tb, tf = compute_terms(bf16, count_params(bf16)), compute_terms(fp32, count_params(fp32))
    # ZeRO-2: the reduced gradient partition and the buckets (one IPG, no overlap_comm, plus the all-gather
    # bucket of 5e8 on 8 ranks) in the parameters' dtype
    assert tf.gradients == 2 * tb.gradients == 4.0 * BASE / 8
    assert tb.buffers == 2.0 * 5e8 + 2.0 * 5e8 and tf.buffers == 2 * tb.buffers


def test_fp32_step_holds_the_flat_gradient_once():
    import dataclasses

    fp32 = _run(bf16=False)
    c = count_params(fp32)
    # partition 1,003,782,656 > sub_group_size 1e9: the step works on 1e9 elements; flatten + .to(fp32) is one
    # fp32 tensor, so a fused optimizer holds the fp32 gradient (4e9 B) and no flat half copy beside it
    fused = compute_terms(dataclasses.replace(fp32, optimizer_impl="fused"), c)
    assert fused.grads_step == 4.0 * 1e9 and fused.step_temp == 0.0
    # under bf16 the bf16 flat copy (2e9 B) exists while the fp32 cast is made
    bf16 = _run()
    assert compute_terms(dataclasses.replace(bf16, optimizer_impl="fused"), count_params(bf16)).step_temp == 2.0 * 1e9
