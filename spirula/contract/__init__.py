"""What every kernel promises, read from its shader: the layer below both runtime/ and backends/.

:mod:`~spirula.contract.kernel` (the :class:`~spirula.contract.kernel.Kernel`
contract: bindings, constants, workgroup; parsed from preprocessed GLSL),
:mod:`~spirula.contract.preprocess` (the shader preprocessed without glslang),
:mod:`~spirula.contract.std430` (numpy dtypes of the structs the GPU reads)
:mod:`~spirula.contract.headers` (each CUDA kernel's contract header) and
:mod:`~spirula.contract.cuda_entry` (the CUDA entry points of the single-source kernels).
"""
