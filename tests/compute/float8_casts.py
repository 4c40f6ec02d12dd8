#!/usr/bin/env python3
"""float8_casts.py — carousel's float8 casts against ml_dtypes, bit for bit.

ml_dtypes (PyPI; an implementation independent of carousel's compute/float8/float8.h) is the
reference: float8_e4m3fn and float8_e5m2. Its casts overflow to NaN (E4M3) or infinity (E5M2)
where carousel saturates (Transformer Engine's and PTX's satfinite rule), so the reference is
ml_dtypes' cast of the value clamped to +-max first (np.clip keeps NaN; +-inf clamps to +-max).

Inputs: every bfloat16 bit pattern (65536, as float32) and 10^6 random float32 values — random
bit patterns (NaNs with payloads, infinities, float32 subnormals, huge values), values spread
over the float8 ranges, and exact ties halfway between float8 neighbours (ties to even) — plus
zeros of both signs and the saturation edges. Checked: float8_encode to E4M3 and E5M2 (bytes
equal), the CPU backend's quantize_float8 op (scale 1 into float32; scale 0.37 into bfloat16),
float8_decode of all 256 patterns of each format, and Backend::amax with float8_scale on random
tensors (zero, tiny, huge and non-finite amax included) against NumPy.

usage: float8_casts.py FLOAT8_CAST_DUMP WORK_DIR   (exit 0: equal; 1: a difference; 77: no
ml_dtypes here nor in the project's .venv, where scripts/setup.sh installs it)
"""
import os
import subprocess
import sys

try:
    import ml_dtypes
    import numpy as np
except ImportError:
    venv = os.path.join(os.path.dirname(os.path.abspath(__file__)), "../../.venv/bin/python")
    if os.path.exists(venv) and os.path.realpath(sys.executable) != os.path.realpath(venv):
        os.execv(venv, [venv] + sys.argv)  # the project's interpreter, which setup.sh fills
    print("SKIP: no ml_dtypes in this python or the project's .venv (scripts/setup.sh installs it)")
    sys.exit(77)

FORMATS = [("e4m3", ml_dtypes.float8_e4m3fn, 448.0), ("e5m2", ml_dtypes.float8_e5m2, 57344.0)]
TENSOR = 4096


def inputs(rng):
    bf16_patterns = (np.arange(65536, dtype=np.uint32) << 16).view(np.float32)
    random_bits = rng.integers(0, 2**32, size=400_000, dtype=np.uint64).astype(np.uint32)
    spread = (rng.standard_normal(400_000) * np.exp2(rng.uniform(-28, 20, 400_000)))
    ties = []
    for _, dtype, _ in FORMATS:  # midpoints between neighbouring finite float8 values
        grid = np.unique(np.arange(256, dtype=np.uint8).view(dtype).astype(np.float32))
        grid = grid[np.isfinite(grid)]
        ties.append((grid[:-1].astype(np.float64) + grid[1:]) / 2)
    ties = np.concatenate(ties)
    ties = rng.choice(ties, size=200_000 - 8)
    edges = np.array([0.0, -0.0, 448.0, -448.0, 464.0, 57344.0, 61440.0, -61440.0])
    randoms = np.concatenate([random_bits.view(np.float32), spread.astype(np.float32),
                              ties.astype(np.float32), edges.astype(np.float32)])
    assert randoms.size == 1_000_000
    return np.concatenate([bf16_patterns, randoms]).astype(np.float32)


def scale_tensors(rng):
    tensors = []
    for k in range(16):
        tensors.append((rng.standard_normal(TENSOR) * 10.0 ** rng.uniform(-6, 6)).astype(np.float32))
    tensors.append(np.zeros(TENSOR, np.float32))                      # amax 0: scale 1
    tiny = np.zeros(TENSOR, np.float32)
    tiny[7] = -1e-40                                                    # max / amax overflows
    tensors.append(tiny)
    inf = tensors[0].copy()
    inf[100] = -np.inf                                                  # non-finite: NaN scale
    tensors.append(inf)
    nan = tensors[1].copy()
    nan[5] = np.nan
    tensors.append(nan)
    return np.concatenate(tensors)


def reference(x, dtype, fmax):
    with np.errstate(invalid="ignore"):
        return np.clip(x, -fmax, fmax).astype(dtype).view(np.uint8)


def expected_scale(amax, fmax):
    if not np.isfinite(amax):
        return np.float32(np.nan)
    if amax == 0:
        return np.float32(1.0)
    s = fmax / abs(float(amax))
    return np.float32(min(s, float(np.finfo(np.float32).max)))


def same_floats(a, b):
    """Equal bits, or both NaN (decoded NaNs: NumPy's and carousel's payloads may differ)."""
    return (a.view(np.uint32) == b.view(np.uint32)) | (np.isnan(a) & np.isnan(b))


def main():
    dump, work = sys.argv[1], sys.argv[2]
    os.makedirs(work, exist_ok=True)
    rng = np.random.default_rng(20260401)
    x, t = inputs(rng), scale_tensors(rng)
    values, tensors, out = (os.path.join(work, n) for n in ("values.bin", "scales.bin", "out.bin"))
    x.tofile(values)
    t.tofile(tensors)
    subprocess.run([dump, values, tensors, out], check=True)
    raw = np.fromfile(out, np.uint8)
    n, failures = x.size, []
    at = 0

    def take(count, dtype):
        nonlocal at
        size = count * np.dtype(dtype).itemsize
        chunk = raw[at:at + size].view(dtype)
        at += size
        return chunk

    for name, dtype, fmax in FORMATS:
        got, want = take(n, np.uint8), reference(x, dtype, fmax)
        bad = np.flatnonzero(got != want)
        print(f"encode {name}: {n - bad.size} of {n} equal")
        for i in bad[:5]:
            failures.append(f"encode {name}: {x[i]!r} (0x{x.view(np.uint32)[i]:08x}) gave "
                            f"0x{got[i]:02x}, ml_dtypes 0x{want[i]:02x}")
    for name, dtype, fmax, scale in [("e4m3 scale 1 -> float32", FORMATS[0][1], 448.0, 1.0),
                                     ("e5m2 scale 0.37 -> bfloat16", FORMATS[1][1], 57344.0, 0.37)]:
        got = take(n, np.float32)
        with np.errstate(invalid="ignore", over="ignore"):
            scaled = x * np.float32(scale)
        want = reference(scaled, dtype, fmax).view(dtype).astype(np.float32)
        bad = np.flatnonzero(~same_floats(got, want))
        print(f"quantize_float8 {name}: {n - bad.size} of {n} equal")
        for i in bad[:5]:
            failures.append(f"quantize_float8 {name}: {x[i]!r} gave {got[i]!r}, expected {want[i]!r}")
    for name, dtype, _ in FORMATS:
        got = take(256, np.float32)
        want = np.arange(256, dtype=np.uint8).view(dtype).astype(np.float32)
        bad = np.flatnonzero(~same_floats(got, want))
        print(f"decode {name}: {256 - bad.size} of 256 equal")
        for i in bad[:5]:
            failures.append(f"decode {name}: 0x{i:02x} gave {got[i]!r}, ml_dtypes {want[i]!r}")
    scales = take(t.size // TENSOR * 3, np.float32).reshape(-1, 3)
    for k, (amax, s4, s5) in enumerate(scales):
        part = t[k * TENSOR:(k + 1) * TENSOR]
        want_amax = np.float32(np.nan) if np.isnan(part).any() else np.max(np.abs(part))
        for what, g, w in [("amax", amax, want_amax), ("e4m3 scale", s4, expected_scale(want_amax, 448.0)),
                           ("e5m2 scale", s5, expected_scale(want_amax, 57344.0))]:
            if not same_floats(np.array([g], np.float32), np.array([w], np.float32))[0]:
                failures.append(f"tensor {k}: {what} {g!r}, NumPy {w!r}")
    print(f"amax and scales: {scales.shape[0]} tensors")
    assert at == raw.size, f"read {at} of {raw.size} bytes"
    for f in failures:
        print("FAIL", f)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
