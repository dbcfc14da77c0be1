#!/usr/bin/env bash
# session 17 call 15: the wheel a user installs, now with the cubins in one xz pack per
# kernel family (nvfp4_aot/cubin_pack.py; 435 KB), installed into an empty directory and
# run from outside the repository as session 13's call 5 did: `nvfp4-aot info`, `verify`
# of the shapes file, MoE verify of both layouts with the plan's own choice (the routed
# GEMMs up to 256 experts) and BF16 + alpha, the quantizer against the numpy reference,
# `bench`. Then the GPU suite (-m gpu, require-GPU on) but for the MoE / torch / JAX /
# quantizer GPU tests, which call 12 ran on these cubins.
set -u
OUT=${OUT:-out}; mkdir -p "$OUT"; OUT=$(cd "$OUT" && pwd); rm -rf "$OUT"/e64t2048* "$OUT"/table_* 2>/dev/null
date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
SHAPES=$PWD/tests/data/shapes.json; REPO=$PWD; export NVFP4_AOT_SHAPES=$SHAPES
rm -rf /tmp/site && python3 -m pip install -q --no-index --no-deps --target /tmp/site .carry/wheel/*.whl
ls /tmp/site/nvfp4_aot/artifacts | head -3; ls /tmp/site/nvfp4_aot/artifacts | wc -l
cd /tmp && export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
{
  python3 -c 'import nvfp4_aot, sys; print("nvfp4_aot", nvfp4_aot.__version__, "from", nvfp4_aot.__file__); print("DSL or torch imported:", [m for m in sys.modules if m.split(".")[0] in ("cutlass", "torch")])'
  echo "\$ nvfp4-aot info"; /tmp/site/bin/nvfp4-aot info
  python3 -c 'import nvfp4_aot; print(nvfp4_aot.MoeGemmPlan(128, 1536, 2048, capacity=8)); print(nvfp4_aot.MoeGemmPlan(128, 1536, 2048, capacity=8, routed=False))'
  for section in tests benchmarks; do
    echo "\$ nvfp4-aot verify --shapes shapes.json --section $section"; /tmp/site/bin/nvfp4-aot verify --shapes "$SHAPES" --section $section | tail -3
  done
  for t in 1 16 64 512; do
    echo "\$ nvfp4-aot verify --moe 128,1536,2048 --moe 256,2048,768 --tokens $t --top-k 8 --layout contiguous --layout masked --out-dtype bfloat16 --alpha --routings 3"
    /tmp/site/bin/nvfp4-aot verify --moe 128,1536,2048 --moe 256,2048,768 --tokens $t --top-k 8 --layout contiguous \
      --layout masked --out-dtype bfloat16 --alpha --routings 3 | tail -2
  done
  echo "\$ python3 (QuantizePlan from the installed wheel vs nvfp4_aot.quantize.quantize)"
  python3 - <<'PY'
import numpy as np, torch
import nvfp4_aot
from nvfp4_aot.quantize import quantize
rng = np.random.default_rng(5)
for rows, k in ((1, 64), (300, 2080), (1024, 7168)):
    x = (rng.standard_normal((rows, k)) * 10.0 ** rng.uniform(-3, 3, (rows, 1))).astype(np.float32)
    xt = torch.tensor(x, device="cuda").to(torch.bfloat16)
    ref = quantize(xt.float().cpu().numpy(), global_scale=0.75)
    plan = nvfp4_aot.QuantizePlan(k, rows=rows, dtype="bfloat16")
    out = torch.full((rows, k // 2), 0xA5, dtype=torch.uint8, device="cuda")
    sf = torch.full((plan.scale_bytes,), 0xA5, dtype=torch.uint8, device="cuda")
    g = torch.tensor([0.75], dtype=torch.float32, device="cuda")
    plan.run(xt, out, sf, g)
    torch.cuda.synchronize()
    same = np.array_equal(out.cpu().numpy(), ref.packed) and np.array_equal(sf.cpu().numpy(), ref.scales_blocked)
    print(f"quantize {rows} x {k}: bytes equal the reference: {same}")
PY
  echo "\$ nvfp4-aot bench --shapes shapes.json"; /tmp/site/bin/nvfp4-aot bench --shapes "$SHAPES" | tail -8
} > "$OUT/wheel_transcript.txt" 2>&1
echo "transcript exit $?"; cat "$OUT/wheel_transcript.txt" | cut -c1-220 | tail -40
cd "$REPO"
echo "=== GPU suite $(date -u +%T)"
NVFP4_AOT_REQUIRE_GPU=1 timeout 300 python3 -m pytest -q -m gpu tests/ -p no:cacheprovider \
  --ignore=tests/test_jax_gpu.py --ignore=tests/test_quantizer_gpu.py --ignore=tests/test_torch_gpu.py \
  --ignore=tests/test_moe_gpu.py --ignore=tests/test_torch_ops.py --ignore=tests/test_examples_gpu.py > "$OUT/suite.log" 2>&1
echo "pytest exit code: $?"; grep FAILED "$OUT/suite.log" | head; tail -1 "$OUT/suite.log"
date -u
cd "$OUT" && tar czf ../call15_out.tgz . && rm -rf ./* && mv ../call15_out.tgz .
