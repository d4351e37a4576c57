"""Compression: make a policy fit its hardware before it is compiled, judged by action error.

One concept per module: `calibration` (observations sampled from recorded episodes, with a hash for the
manifest), `fake_quant` (simulated quantization of single layers, shared by sensitivity and QAT),
`quantize` (post-training quantization per sub-engine on OpenVINO + NNCF, ONNX Runtime and torchao),
`sensitivity` (per-layer effect on final actions, automatic mixed precision), `qat` (quantization-aware
fine-tuning). Pruning, distillation, fewer steps and recipes live beside them.
"""
