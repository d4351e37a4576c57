"""Compile a policy for this machine: tensor-only sub-engines, their transforms, backends and artifacts.

- `pi_engines`: the pi0 / pi0.5 sub-engine interface (`PiEngineShape`, `SubEngine`, `build_pi_subengines`,
  `PiPipeline`); its docstring is the contract the backends, artifact and planner code against.
- `pi_blocks`: tensor-only decoder blocks the engines are made of; `precompute`: the float32 tables
  (time conditioning per step, masks and RoPE per observation) fed to them as inputs.
- `backends/`: one protocol, one module per backend, chosen through one table; `export`: ONNX export.
- `validate`: agreement with the fp32 reference; `planner`, `pi_plan`, `onnx_plan`: candidates checked,
  measured and chosen; `artifact`: manifest + files + hashes; `cpu_features`: what a plan needs.
- `commands`: `hotloop compile` and `hotloop profile`.

Heavy modules are imported where used: `import hotloop.compile` stays light.
"""
