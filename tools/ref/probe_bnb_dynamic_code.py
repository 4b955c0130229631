"""Probes bitsandbytes' CPU quantize_blockwise (the 8-bit dynamic-map coder behind double quant).

Calls its C kernel through ctypes on 40,101 values, compares each code with the nearest map entry
and with a replay of the 65,536-bin table rule loom implements (src/ops/bnb_double_quant.cc), and
prints values where the kernel departs from nearest (the table in
tests/unit/bnb_dynamic_code_test.cc). Each chunk is quantized with 1.0 prepended so its block
absmax is 1 and a value is its own normalized form.

    PYTHONPATH=/work/pkgs-nf4 .venv-ref/bin/python tools/ref/probe_bnb_dynamic_code.py
"""
import ctypes as ct

import numpy as np
import torch
from bitsandbytes.cextension import lib
from bitsandbytes.functional import create_dynamic_map, get_ptr

f32 = np.float32
code = create_dynamic_map(signed=True).float().contiguous()
c = code.numpy().copy()
BINS = 65536


def kernel_codes(vals):
    out_all = []
    for i in range(0, len(vals), 4095):  # one 4096-block per call: 1.0 sets its absmax
        a = torch.tensor(np.concatenate([[1.0], vals[i:i + 4095]]).astype(np.float32))
        n = a.numel()
        absmax = torch.empty((1,), dtype=torch.float32)
        out = torch.empty(n, dtype=torch.uint8)
        cc = code.clone()  # held: a temporary's pointer would dangle during the call
        lib.cquantize_blockwise_cpu_fp32(get_ptr(cc), get_ptr(a), get_ptr(absmax),
                                         get_ptr(out), ct.c_longlong(4096), ct.c_longlong(n))
        out_all.append(out.numpy()[1:])
    return np.concatenate(out_all)


mid = np.array([f32(f32(0.5) * f32(c[i] + c[i + 1])) for i in range(255)], dtype=np.float32)
bin_values = (f32(-1.0) + (f32(2.0) * np.arange(BINS, dtype=np.float32)) / f32(BINS - 1)).astype(np.float32)
table = np.searchsorted(mid, bin_values, side="left")  # first entry whose midpoint is not below


def table_code(z):
    v = min(max(f32(z), f32(-1.0)), f32(1.0))
    t = f32(f32(f32(f32(v + f32(1.0)) * f32(0.5)) * f32(BINS - 1)) + f32(0.5))
    return int(table[int(t)])


rng = np.random.default_rng(0)
zs = np.concatenate([rng.uniform(-1, 1, 20000), rng.uniform(-1e-3, 1e-3, 20000),
                     np.linspace(c[133], c[134], 101)]).astype(np.float32)
got = kernel_codes(zs)
nearest = np.array([int(np.argmin(np.abs(c - z))) for z in zs])
replay = np.array([table_code(z) for z in zs])
print(f"{len(zs)} values: kernel != nearest on {(got != nearest).sum()}, "
      f"kernel != table replay on {(got != replay).sum()}")
differ = np.nonzero(got != nearest)[0]
for i in differ[np.argsort(zs[differ])][::75][:20]:
    print("{0x%08x, %d, %d}," % (zs[i].view(np.uint32), got[i], nearest[i]))
