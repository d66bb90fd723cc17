"""Smoke test of the offline vLLM install (run by install_vllm.sh, with env_vllm.sh sourced).

Checks that a vLLM process gets vLLM's own pins from the vLLM site and the shared ones (torch 2.14.1,
transformers, triton) from the SGLang site; that vLLM's extensions load against the SGLang kit's
torch; that every module on the path vllm.LLM -> engine core -> GPU worker -> Llama / EAGLE-3 ->
FlashAttention 3 backend imports; and, on a GPU, that a custom op (rms_norm), FA3 and a Triton
kernel run and agree with PyTorch.  Without a GPU (the CPU rehearsal) the GPU checks are skipped.
Exit 3 when anything failed.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
import time
import traceback

FAILS: list[str] = []

# The modules on the measured path (vLLM 0.33.0 names).  Imported after vllm.platforms resolves the
# platform, so CUDA branches are taken on the GPU.
PATH_MODULES = [
    "vllm.entrypoints.llm", "vllm.engine.arg_utils", "vllm.v1.engine.llm_engine", "vllm.v1.engine.core",
    "vllm.v1.engine.core_client", "vllm.v1.executor.uniproc_executor", "vllm.v1.worker.gpu_worker",
    "vllm.v1.worker.gpu_model_runner", "vllm.model_executor.models.llama", "vllm.model_executor.models.llama_eagle3",
    "vllm.v1.spec_decode.eagle", "vllm.v1.spec_decode.metadata", "vllm.v1.sample.sampler",
    "vllm.v1.sample.rejection_sampler", "vllm.v1.attention.backends.flash_attn", "vllm.v1.attention.backends.fa_utils",
    "vllm.transformers_utils.configs.speculators", "vllm.transformers_utils.configs.eagle", "vllm.v1.metrics.reader",
    "vllm.compilation.backends", "vllm.v1.structured_output",
]
# where each module must come from: "vllm" (the vLLM site) or "sglang" (the SGLang site)
ORIGIN = {"vllm": "vllm", "xgrammar": "vllm", "openai": "vllm", "lark": "vllm", "fastapi": "vllm",
          "compressed_tensors": "vllm", "outlines_core": "vllm", "llguidance": "vllm",
          "torch": "sglang", "triton": "sglang", "transformers": "sglang", "tokenizers": "sglang",
          "pydantic": "sglang", "msgspec": "sglang", "zmq": "sglang"}


def check(label, fn):
    try:
        result = fn()
        print("[smoke]   ok    %s%s" % (label, (": %s" % result) if result is not None else ""), flush=True)
    except Exception as exc:
        FAILS.append(label)
        message = next((line.strip() for line in str(exc).splitlines() if line.strip()), "")
        print("[smoke]   FAIL  %s -> %s: %s" % (label, type(exc).__name__, message[:300]), flush=True)
        if os.environ.get("SMOKE_TRACEBACK") == "1":
            traceback.print_exc()


def origin(name, sites):
    module = importlib.import_module(name)
    path = os.path.realpath(getattr(module, "__file__", "") or "")
    want = sites[ORIGIN[name]]
    if not path.startswith(want + os.sep):
        raise RuntimeError("%s from %s, not from %s (PYTHONPATH order?)" % (name, path, want))
    return "%s %s" % (getattr(module, "__version__", "?"), os.path.dirname(path))


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sglang-site", default="/tmp/site")
    parser.add_argument("--cpu", action="store_true", help="the CPU rehearsal: no GPU checks")
    parser.add_argument("--force-cuda-platform", action="store_true",
                        help="CPU rehearsal: make vLLM's current platform CUDA (vllm/platforms/__init__.py:330 "
                             "accepts an assignment), so the path modules take their CUDA branches at import")
    args = parser.parse_args()
    started = time.time()
    sites = {"vllm": os.path.realpath(os.environ.get("VLLM_KIT_SITE", "/tmp/site_vllm")),
             "sglang": os.path.realpath(args.sglang_site)}
    import torch

    gpu = torch.cuda.is_available() and not args.cpu
    print("[smoke] torch %s cuda %s, gpu %s" % (torch.__version__, torch.version.cuda,
                                              torch.cuda.get_device_name(0) if gpu else "none"), flush=True)
    want_torch = os.environ.get("VLLM_KIT_TORCH")
    if want_torch and torch.__version__.split("+")[0] != want_torch:
        FAILS.append("torch version")
        print("[smoke]   FAIL  torch %s imported, the kit shares %s" % (torch.__version__, want_torch))
    for name in ORIGIN:
        check("%s from the %s site" % (name, ORIGIN[name]), lambda name=name: origin(name, sites))

    def extension():
        import vllm._C_stable_libtorch  # noqa: F401  (loads against libtorch*.so of the SGLang site)

        ops = [op for op in ("_C.rms_norm", "_C.fused_add_rms_norm", "_C.rotary_embedding", "_C.silu_and_mul",
                             "_C_cache_ops.reshape_and_cache_flash")
               if not hasattr(getattr(torch.ops, op.split(".")[0]), op.split(".")[1])]
        if ops:
            raise RuntimeError("torch.ops lacks %s" % ops)
        return "registers rms_norm, rotary_embedding, silu_and_mul, reshape_and_cache_flash (_custom_ops.py:246, 2623)"

    check("vllm._C_stable_libtorch loads", extension)

    def fa3():
        from vllm.vllm_flash_attn import flash_attn_interface as fa

        if not fa.FA3_AVAILABLE:
            raise RuntimeError("FA3 not available: %s" % fa.FA3_UNAVAILABLE_REASON)
        return "FA3 loads; FA2 %s, FA4 %s (left out of the kit)" % (
            "available" if fa.FA2_AVAILABLE else "absent", "available" if fa.FA4_AVAILABLE else "absent")

    check("vllm.vllm_flash_attn", fa3)

    def platform():
        import vllm.platforms

        if args.force_cuda_platform:
            from vllm.platforms.cuda import CudaPlatform
            from vllm.platforms.interface import DeviceCapability

            # no driver here: the device queries some modules make at import answer as an H100 would
            CudaPlatform.get_device_capability = classmethod(lambda cls, device_id=0: DeviceCapability(9, 0))
            CudaPlatform.get_device_name = classmethod(lambda cls, device_id=0: "NVIDIA H100 (CPU rehearsal)")
            torch.cuda.get_device_capability = lambda device=None: (9, 0)
            vllm.platforms.current_platform = CudaPlatform()
        from vllm.platforms import current_platform

        name = type(current_platform).__name__
        if gpu and not current_platform.is_cuda():
            raise RuntimeError("platform %s on a GPU machine" % name)
        return name

    check("vllm platform", platform)
    for module in PATH_MODULES:
        check("import " + module, lambda module=module: importlib.import_module(module) and None)
    check("from vllm import LLM, SamplingParams", lambda: (importlib.import_module("vllm").LLM,
                                                           importlib.import_module("vllm").SamplingParams) and None)
    # vLLM imports flashinfer where has_flashinfer() holds (nvcc and ninja found), to register optional ops
    # under try/except (compilation/passes/fusion/rms_quant_fusion.py:98); FA3 and the PyTorch sampler use none
    fi = sys.modules.get("flashinfer")
    print("[smoke]   info  flashinfer imported: %s" % (("%s from %s" % (getattr(fi, "__version__", "?"), fi.__file__))
                                                     if fi else "no"), flush=True)
    if gpu:
        def rms_norm():
            from vllm import _custom_ops as ops

            x = torch.randn(8, 576, device="cuda", dtype=torch.bfloat16)
            w = torch.rand(576, device="cuda", dtype=torch.bfloat16) + 0.5
            out = torch.empty_like(x)
            ops.rms_norm(out, x, w, 1e-6)
            ref = x.float() * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + 1e-6) * w.float()
            err = (out.float() - ref).abs().max().item()
            if err > 5e-2:
                raise RuntimeError("max abs err %.3g" % err)
            return "bf16 max abs err %.2g" % err

        check("vLLM rms_norm (bf16) on GPU", rms_norm)

        def fa3_run():
            from vllm.vllm_flash_attn import flash_attn_varlen_func

            torch.manual_seed(0)
            lengths = [5, 17]
            heads, kv_heads, dim = 9, 3, 64  # SmolLM2's attention geometry
            total = sum(lengths)
            q = torch.randn(total, heads, dim, device="cuda", dtype=torch.bfloat16)
            k = torch.randn(total, kv_heads, dim, device="cuda", dtype=torch.bfloat16)
            v = torch.randn(total, kv_heads, dim, device="cuda", dtype=torch.bfloat16)
            cu = torch.tensor([0, lengths[0], total], device="cuda", dtype=torch.int32)
            out = flash_attn_varlen_func(q, k, v, max(lengths), cu, max(lengths), cu_seqlens_k=cu, causal=True,
                                         fa_version=3)
            err, start = 0.0, 0
            for length in lengths:
                sl = slice(start, start + length)
                qh, kh, vh = (t[sl].transpose(0, 1).float() for t in (q, k, v))
                kh, vh = kh.repeat_interleave(heads // kv_heads, 0), vh.repeat_interleave(heads // kv_heads, 0)
                ref = torch.nn.functional.scaled_dot_product_attention(qh, kh, vh, is_causal=True)
                err = max(err, (out[sl].transpose(0, 1).float() - ref).abs().max().item())
                start += length
            if err > 5e-2:
                raise RuntimeError("max abs err %.3g against SDPA" % err)
            return "varlen causal GQA 9/3 heads, head_dim 64: max abs err %.2g against SDPA" % err

        check("FlashAttention 3 on GPU", fa3_run)

        def triton_run():
            import triton
            import triton.language as tl

            @triton.jit
            def add_one(x_ptr, y_ptr, n, block: tl.constexpr):
                i = tl.program_id(0) * block + tl.arange(0, block)
                tl.store(y_ptr + i, tl.load(x_ptr + i, mask=i < n) + 1, mask=i < n)

            x = torch.arange(1000, device="cuda", dtype=torch.float32)
            y = torch.empty_like(x)
            add_one[(triton.cdiv(1000, 256),)](x, y, 1000, block=256)
            if not torch.equal(y, x + 1):
                raise RuntimeError("wrong result")
            return "triton %s compiled and ran a kernel" % triton.__version__

        check("triton kernel on GPU", triton_run)
    print("[smoke] %d problem(s) in %.1fs%s" % (len(FAILS), time.time() - started,
                                                (": " + ", ".join(FAILS)) if FAILS else ""), flush=True)
    return 3 if FAILS else 0


if __name__ == "__main__":
    sys.exit(main())
