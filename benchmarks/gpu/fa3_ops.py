"""SGLang's FlashAttention 3 kernels for the GPU kit, which leaves them out.

The gpu-sglang kit (``../shared/gpu-sglang``) trims sglang-kernel to what the Triton-attention path
loads, so every GPU figure before this script ran SGLang on Triton attention, while FA3
(``sgl_kernel/flash_ops.abi3.so``) is SGLang's default on Hopper and what a user there runs, and what
vLLM runs. sglang-kernel 0.4.10 (SGLang 0.5.23) ships it at 1,070 MiB: 372 fatbin containers, each with
sm_80, sm_86 and sm_90 cubins. Kept to sm_90 (474 MiB) and xz-packed it is 120 MiB, carried in three
device calls of at most 48 MiB each (``OUT_DIR/p1`` ... ``p3``, one folder a call).

    python3 benchmarks/gpu/fa3_ops.py pack WHEEL OUT_DIR   # CPU: -> OUT_DIR/pN/flash_ops.abi3.so.xz.N, .sha256
    python3 benchmarks/gpu/fa3_ops.py install DIR SITE      # GPU: DIR holds every part -> SITE/sgl_kernel/...

``install`` joins the parts and unpacks (the unpacked bytes' SHA-256 must equal the one ``pack`` wrote),
puts the library beside the kit's ``sgl_kernel`` (atomically), checks the kernel on the GPU (causal varlen
attention with grouped query heads against PyTorch's scaled-dot-product attention in float32; a library
that fails is taken out again), then adds ``SGLANG_USE_SGL_FA3_KERNEL=1`` to ``SITE/env.sh`` (SGLang 0.5.23
otherwise first asks the Hugging Face hub for its FA3 kernels, ``kernels/ops/attention/flash_attention_v3.py:34``,
and falls back to sgl_kernel's with a warning). Then ``--attention-backend fa3`` works.

The fatbin pruning is the SGLang kit's (``tools/kit.py``: ``prune_fatbins``), as ``vllm_kit`` uses it.
"""

from __future__ import annotations

import argparse
import hashlib
import lzma
import os
import pathlib
import sys
import zipfile

from results_file import save_bytes  # beside this script: python3 puts its folder first on the path

MEMBER = "sgl_kernel/flash_ops.abi3.so"
PACKED = "flash_ops.abi3.so.xz"
ARCH = 90  # Hopper: the lent H100 and H200
PART_BYTES = 48 * 2**20  # one device call carries 64 MiB, the checkout and the kit's last bundle included
ENV_LINE = "export SGLANG_USE_SGL_FA3_KERNEL=1  # fa3_ops.py: sgl_kernel's FA3, no hub lookup\n"


def sglang_kit_tools():
    here = os.path.dirname(os.path.abspath(__file__))
    kit = os.environ.get("SGLANG_KIT") or os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(here))),
                                                       "shared", "gpu-sglang")
    tools = os.path.join(kit, "tools")
    if not os.path.isdir(tools):
        sys.exit(f"fa3_ops.py: the SGLang kit is not at {kit}; set SGLANG_KIT")
    sys.path.insert(0, tools)
    import kit as sglang_kit

    return sglang_kit


def pack(wheel: str, out_dir: str) -> None:
    kit = sglang_kit_tools()
    with zipfile.ZipFile(wheel) as archive:
        library = archive.read(MEMBER)
    pruned, stats = kit.prune_fatbins(library, ARCH)
    if not stats["pruned"] or stats["pruned"] != stats["containers"]:
        sys.exit(f"fa3_ops.py: {wheel}: {stats['pruned']} of {stats['containers']} fatbin containers have an "
                 f"sm_{ARCH} cubin; expected all")
    packed = lzma.compress(pruned, preset=6)
    parts = range(0, len(packed), PART_BYTES)
    for number, start in enumerate(parts, 1):
        os.makedirs(os.path.join(out_dir, f"p{number}"), exist_ok=True)
        save_bytes(os.path.join(out_dir, f"p{number}", f"{PACKED}.{number}"), packed[start:start + PART_BYTES])
    save_bytes(os.path.join(out_dir, f"p{len(parts)}", PACKED + ".sha256"),
                     f"{hashlib.sha256(pruned).hexdigest()}  {len(parts)} parts  {os.path.basename(wheel)}\n".encode())
    print(f"{MEMBER}: {len(library) / 2**20:.0f} MiB, sm_{ARCH} cubins {stats['kept'] / 2**20:.0f} MiB of "
          f"{(stats['kept'] + stats['zeroed']) / 2**20:.0f}; packed {len(packed) / 2**20:.1f} MiB in "
          f"{len(parts)} parts")


def check_on_gpu(site: str) -> float:
    """Largest |FA3 - float32 SDPA| over a causal varlen batch (lengths 1, 37, 300; 32 query and 8 KV heads),
    with the ``sgl_kernel`` of ``site`` (the image has one of its own, which the site shadows only when it
    comes first on the path)."""
    sys.path.insert(0, site)
    import sgl_kernel
    import torch
    from sgl_kernel.flash_attn import flash_attn_varlen_func

    if not os.path.abspath(sgl_kernel.__file__).startswith(os.path.abspath(site) + os.sep):
        sys.exit(f"fa3_ops.py: sgl_kernel came from {sgl_kernel.__file__}, not {site}: not checked")
    generator = torch.Generator(device="cuda").manual_seed(0)
    lengths, heads, kv_heads, dim = [1, 37, 300], 32, 8, 128
    total = sum(lengths)
    q, k, v = (torch.randn(total, h, dim, device="cuda", generator=generator, dtype=torch.bfloat16)
               for h in (heads, kv_heads, kv_heads))
    starts = torch.tensor([0] + lengths, device="cuda").cumsum(0).to(torch.int32)
    out = flash_attn_varlen_func(q, k, v, starts, starts, max(lengths), max(lengths), causal=True)
    out = out[0] if isinstance(out, tuple) else out
    worst = 0.0
    for begin, length in zip(starts.tolist(), lengths):
        part = slice(begin, begin + length)
        reference = torch.nn.functional.scaled_dot_product_attention(
            *(t[part].float().transpose(0, 1) for t in (q, k, v)), is_causal=True, enable_gqa=True)
        worst = max(worst, (out[part].float() - reference.transpose(0, 1)).abs().max().item())
    return worst


def install(directory: str, site: str) -> None:
    with open(os.path.join(directory, PACKED + ".sha256"), encoding="utf-8") as handle:
        expected, count = handle.read().split()[:2]
    names = [os.path.join(directory, f"{PACKED}.{number}") for number in range(1, int(count) + 1)]
    missing = [name for name in names if not os.path.exists(name)]
    if missing:
        sys.exit(f"fa3_ops.py: {', '.join(missing)} missing: copy every part's folder into {directory}")
    library = lzma.decompress(b"".join(pathlib.Path(name).read_bytes() for name in names))
    if hashlib.sha256(library).hexdigest() != expected:
        sys.exit(f"fa3_ops.py: the parts in {directory} do not unpack to the library pack wrote (SHA-256 differs)")
    target = os.path.join(site, "sgl_kernel")
    if not os.path.isdir(target):
        sys.exit(f"fa3_ops.py: {target} is missing: install the SGLang kit into {site} first")
    installed = os.path.join(target, os.path.basename(MEMBER))
    save_bytes(installed, library)
    worst = check_on_gpu(site)
    if not worst < 0.05:  # taken out again: --attention-backend fa3 then fails at start, never serves this
        os.remove(installed)
        sys.exit(f"fa3_ops.py: FA3 disagrees with SDPA beyond bf16 rounding (max |error| {worst:.4f}): not installed")
    env = os.path.join(site, "env.sh")
    with open(env, encoding="utf-8") as handle:
        text = handle.read()
    if ENV_LINE not in text:
        save_bytes(env, (text + ("" if text.endswith("\n") or not text else "\n") + ENV_LINE).encode())
    print(f"FA3 installed into {target}: max |FA3 - float32 SDPA| {worst:.4f} (bf16 inputs)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    packing = commands.add_parser("pack", help="CPU: the sm_90 library, xz-packed")
    packing.add_argument("wheel")
    packing.add_argument("out_dir")
    installing = commands.add_parser("install", help="GPU: into the kit's site, then checked")
    installing.add_argument("directory")
    installing.add_argument("site")
    args = parser.parse_args()
    if args.command == "pack":
        pack(args.wheel, args.out_dir)
    else:
        install(args.directory, args.site)


if __name__ == "__main__":
    main()
