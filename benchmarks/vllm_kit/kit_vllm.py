#!/usr/bin/env python3
"""Offline vLLM for the lent GPU machine, installed next to the SGLang kit's install (CPU side).

  kit_vllm.py pins VERSION OUT --cache DIR      resolve vllm==VERSION for the GPU image on top of the
                                               SGLang kit's pins and write a pins file (needs PyPI; uv)
  kit_vllm.py stage PINS --cache DIR --stage DIR
  kit_vllm.py pack STAGE OUTDIR --cap MIB --installer FILE
  kit_vllm.py abi PINS --cache DIR              torch ABI check: vLLM's extensions against the torch
                                               vLLM pins and the torch the SGLang kit carries

Pins file, one wheel a line:   ROLE  NAME==VERSION  [--hash=sha256:HEX]  [# note]
  vllm      the vLLM wheel itself: files off the Llama/EAGLE-3/FA3 path left out (TRIM below), CUDA
            fatbins cut to sm_90, LZMA; installed into the vLLM site
  wheel     carried, installed into the vLLM site (first on a vLLM process's PYTHONPATH)
  sglang    not carried: the SGLang kit's site (/tmp/site) has this exact version (shared; e.g. torch
            2.14.1, which vLLM's extensions load against: `abi`)
  fallback  carried, installed only where the image's copy violates a requirement of a carried wheel
  image     on the GPU image, not carried (documentation only; 'reused' notes say why an older or
            newer copy than the pin is used)
  drop      in vLLM's closure but left out on purpose (documentation only)

The SGLang kit (../shared/gpu-sglang, or $SGLANG_KIT) is imported for its wheel repacker (LZMA,
fatbin pruning: tools/kit.py) and read for its pins and the image's package list.
"""
from __future__ import annotations

import argparse
import glob
import hashlib
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import zipfile

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
SGLANG_KIT = os.environ.get("SGLANG_KIT") or os.path.join(os.path.dirname(REPO), "shared", "gpu-sglang")
SGLANG_PINS = os.path.join(SGLANG_KIT, "pins-0.5.23.txt")  # the SGLang install the vLLM site sits beside
if not os.path.isdir(os.path.join(SGLANG_KIT, "tools")):
    sys.exit("kit_vllm.py: the SGLang kit is not at %s; set SGLANG_KIT" % SGLANG_KIT)
sys.path.insert(0, os.path.join(SGLANG_KIT, "tools"))
import kit as sgl  # noqa: E402  (the SGLang kit: repack_wheel, fetch, fatbin helpers)

ROLES = ("vllm", "wheel", "sglang", "fallback", "image", "drop")
CARRIED = ("vllm", "wheel", "fallback")
# The SGLang kit's roles whose wheels are installed into its site unconditionally.
SGLANG_INSTALLED = ("wheel", "shadow", "kernel", "tf")

# Files of the vLLM wheel left out (prefix -> why).  Each was read in vLLM 0.33.0's source: its import
# is guarded or lives on another feature's path (file:line in the note).
TRIM = {
    "vllm/vllm_flash_attn/_vllm_fa2_C.abi3.so":
        "FlashAttention 2 (293 MiB, sm_80 cubins + compute_80 PTX only): imported under try/except ImportError "
        "(vllm_flash_attn/flash_attn_interface.py:13); on sm90 vLLM picks FA3 (v1/attention/backends/fa_utils.py:98)",
    "vllm/vllm_flash_attn/cute/":
        "FlashAttention 4 (CuTe-DSL, dropped): without it FA4_AVAILABLE is False (flash_attn_interface.py:32), so "
        "vLLM never upgrades FA3 -> FA4; FA4 is chosen on sm90 only for head_size > 256, diff-KV sinks, diffusion",
    "vllm/vllm-rs": "Rust frontend binary (58 MiB): only with VLLM_USE_RUST_FRONTEND=1 (envs.py:585)",
    "vllm/_deepselect_C.abi3.so": "sm_100 cubins only; DSA indexer top-k of sparse-attention models "
                                  "(layers/indexer_topk.py:31)",
    "vllm/_qutlass_C.abi3.so": "sm_100 cubins only; imported under contextlib.suppress(ImportError) "
                               "(platforms/cuda.py:25)",
    "vllm/_flashmla_C.abi3.so": "FlashMLA (MLA models); imported under try (v1/attention/ops/flashmla.py:14)",
    "vllm/_flashmla_extension_C.abi3.so": "FlashMLA sparse (MLA models); imported under try "
                                          "(v1/attention/ops/flashmla.py:24)",
    "vllm/_flashkda_C.abi3.so": "Kimi delta attention, imported inside functions of kimi_k3 / glm5next only",
    "vllm/third_party/fmha_sm100/": "Blackwell FMHA sources (MiniMax-M3 only, function-level imports)",
    "vllm/third_party/tml_fa4/": "FA4 relative attention (Inkling only, function-level import)",
    "vllm/third_party/deep_gemm/": "DeepGEMM (fp8 GEMMs; 28 MiB library + JIT headers): found by importlib "
                                   "(utils/deep_gemm.py:207, import_utils.py:519); env_vllm.sh sets "
                                   "VLLM_USE_DEEP_GEMM=0 (the SGLang site's own deep_gemm is on the path)",
    "vllm/_moe_C_stable_libtorch.abi3.so": "MoE kernels (31 MiB LZMA): imported under contextlib.suppress(ImportError) "
                                           "(platforms/cuda.py:247), probed with hasattr (_custom_ops.py:2478); "
                                           "Llama is dense",
    "vllm/entrypoints/serve/instrumentator/static/": "Swagger UI assets of the OpenAI server",
}
# In vLLM's closure, left out (name -> why).  None is imported at module level on the path from
# vllm.LLM through the engine core, the GPU worker, Llama / EAGLE-3 and the FA3 backend
# (tools: `check_imports.py` of the SGLang kit with this kit's entries; README "Checking").
DROP = {
    "tilelang": "TileLang kernels: imported inside functions only (tilelang_utils), not on the Llama path (48 MiB)",
    "z3-solver": "tilelang only (28 MiB)",
    "torch-c-dlpack-ext": "tilelang / quack only",
    "nvidia-cutlass-dsl": "CuTe-DSL (FA4, quack, flashinfer cute kernels): function-level or other models' imports",
    "nvidia-cutlass-dsl-libs-base": "CuTe-DSL runtime",
    "nvidia-cutlass-dsl-libs-core": "CuTe-DSL runtime",
    "nvidia-cutlass-dsl-libs-cu12": "CuTe-DSL runtime (84 MiB)",
    "nvidia-cutlass-dsl-libs-cu13": "CuTe-DSL runtime (84 MiB)",
    "quack-kernels": "CuTe-DSL kernels (Blackwell GEMMs, norms): behind other backends",
    "tokenspeed-mla": "Blackwell-only MLA kernels",
    "tokenspeed-triton": "triton fork of tokenspeed-mla (90 MiB)",
    "humming-kernels": "quantization kernels of the humming method only",
    "nvidia-cuda-nvcc": "CUDA compiler wheel for humming-kernels; the image has nvcc",
    "nvidia-cuda-crt": "part of nvidia-cuda-nvcc",
    "nvidia-nvvm": "part of nvidia-cuda-nvcc (72 MiB)",
    "nvidia-cuda-cccl": "CUDA C++ headers for humming-kernels; the image's CUDA has them",
    "torchcodec": "video / audio decoding for multimodal inputs; built against torch's C++ ABI",
    "pynvvideocodec": "NVIDIA video decoding for multimodal inputs",
    "nvidia-cudnn-frontend": "cuDNN frontend: flashinfer / vLLM import it under try or inside functions",
    "fastsafetensors": "alternative weight loader (load_format=fastsafetensors)",
    "instanttensor": "alternative weight loader (load_format=instanttensor)",
    "cuda-tile": "optional in flashinfer",
    "cuda-python": "metapackage without modules (cuda.bindings is on the image)",
    "nccl-extensions": "flashinfer's MoE expert parallel only (21.5 MiB)",
    "nccl4py": "flashinfer's MoE expert parallel only",
    "mistral-common": "Mistral tokenizer mode and Voxtral: vllm.tokenizers.mistral is imported only for "
                      "tokenizer_mode=mistral",
    "mcp": "MCP tool server of the OpenAI Responses API",
    "mcp-types": "mcp only",
    "sse-starlette": "mcp only",
    "pyjwt": "mcp only",
    "cryptography": "pyjwt only",
    "model-hosting-container-standards": "SageMaker server hooks of the OpenAI server",
    "supervisor": "model-hosting-container-standards only",
    "jmespath": "model-hosting-container-standards only",
    "opentelemetry-sdk": "request tracing (--otlp-traces-endpoint), imported inside vllm.tracing functions",
    "opentelemetry-exporter-otlp": "request tracing",
    "opentelemetry-exporter-otlp-common": "request tracing",
    "opentelemetry-exporter-otlp-proto-common": "request tracing",
    "opentelemetry-exporter-otlp-proto-grpc": "request tracing",
    "opentelemetry-exporter-otlp-proto-http": "request tracing",
    "opentelemetry-exporter-http-transport": "request tracing",
    "opentelemetry-proto": "request tracing",
    "opentelemetry-semantic-conventions": "request tracing",
    "opentelemetry-semantic-conventions-ai": "request tracing",
    "googleapis-common-protos": "opentelemetry exporters only",
    "fastapi-cli": "fastapi[standard]'s CLI",
    "fastapi-cloud-cli": "fastapi[standard]'s cloud CLI",
    "sentry-sdk": "fastapi-cloud-cli only",
    "rignore": "fastapi-cloud-cli only",
    "fastar": "fastapi-cloud-cli only",
    "agent-detector": "fastapi-cloud-cli only",
    "detect-installer": "fastapi-cloud-cli only",
    "rich-toolkit": "fastapi-cli only",
}
# Small packages on the image whose version there is unknown: carried, installed only where the image's
# copy violates a requirement of a carried wheel (the SGLang kit's list, and vLLM's lower bounds).
FALLBACK = ["typing-extensions", "anyio", "h11", "idna", "attrs", "annotated-doc", "click", "packaging",
            "pygments", "urllib3", "requests", "tqdm", "filelock", "httpx", "prometheus-client", "psutil",
            "pyyaml", "certifi", "charset-normalizer", "cachetools", "six", "py-cpuinfo", "multidict",
            "regex", "cloudpickle", "einops", "setuptools"]
# Image packages used although the pin differs (name -> why).
REUSE = {
    "numba": "vLLM pins numba==0.65.0 (for its numpy bound); the image's newer numba is built for the image's numpy, "
             "which vLLM's ngram proposer (v1/spec_decode/ngram_proposer.py:7, imported on the engine path) uses as is",
    "llvmlite": "numba's; the image's matches the image's numba",
    "numpy": "the image's (numba and every compiled wheel on the image are built for it)",
    "torchaudio": "the image's 2.11.0 is vLLM's pin; audio models only",
    "opencv-python-headless": "the image's copy; multimodal image/video processing only (imported inside functions)",
}
# vLLM's pins replaced by the SGLang kit's versions (name -> why); the pins file keeps the reason.
SHARED_OVERRIDES = {
    "torch": "vLLM pins torch==2.14.0; `kit_vllm.py abi`: every torch symbol vLLM's carried extensions import is "
             "exported by 2.14.1 (the two export the same 97,817 symbols but 3 file-local nvshmem ones)",
    "torchvision": "vLLM pins torchvision==0.29.0; 0.29.2 is the build for torch 2.14.1 (multimodal only)",
    "flashinfer-python": "vLLM pins 0.7.2.post1 (48 MiB carried: one more bundle); on the measured path (FA3 "
                         "attention, VLLM_USE_FLASHINFER_SAMPLER=0 in env_vllm.sh) vLLM only imports flashinfer to "
                         "register optional fused ops under try/except ImportError "
                         "(compilation/passes/fusion/rms_quant_fusion.py:98) and runs none of its kernels; its "
                         "attention backend and sampler are not covered",
}
PREFER_IMAGE_SEEN = True  # prefer the versions seen on the image when resolving (image-packages.txt)
LZMA_MIN = 1 << 20
FATBIN = 90


def die(msg):
    sys.stderr.write("kit_vllm.py: %s\n" % msg)
    sys.exit(1)


norm = sgl.norm


class Pin(sgl.Pin):
    """A pins line; the SGLang kit's class with this kit's roles."""


def read_pins(path):
    pins = []
    for raw in open(path):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        body, _, note = line.partition("#")
        f = body.split()
        if len(f) < 2 or f[0] not in ROLES or "==" not in f[1]:
            die("bad pins line: %r" % raw)
        name, version = f[1].split("==", 1)
        digest = next((x.split(":", 1)[1] for x in f[2:] if x.startswith("--hash=sha256:")), None)
        pins.append(Pin(f[0], name, version, digest, note.strip()))
    return pins


def write_pins(path, pins, header):
    order = {r: i for i, r in enumerate(ROLES)}
    with open(path, "w") as f:
        f.write(header)
        for p in sorted(pins, key=lambda p: (order[p.role], p.name)):
            f.write(p.line() + "\n")


def sglang_pins():
    """{name: (role, version, sha256)} of the SGLang kit's pins."""
    return {p.name: (p.role, p.version, p.digest) for p in sgl.read_pins(SGLANG_PINS)}


def image_seen():
    """{name: version} of the image's packages whose version was read on the device."""
    out = {}
    for raw in open(os.path.join(SGLANG_KIT, "image-packages.txt")):
        body, _, note = raw.partition("#")
        if "==" in body and "seen" in note:
            n, v = body.strip().split("==")
            out[norm(n)] = v
    return out


# ---------------------------------------------------------------- pins
def ensure_uv(cache):
    uv = shutil.which("uv")
    if uv:
        return uv
    venv = os.path.join(cache, "uv-venv")
    uv = os.path.join(venv, "bin", "uv")
    if not os.path.exists(uv):
        subprocess.check_call([sys.executable, "-m", "venv", venv])
        subprocess.check_call([os.path.join(venv, "bin", "pip"), "install", "-q", "uv"])
    return uv


def resolve(uv, version, prefer, overrides):
    """uv pip compile vllm==VERSION (CPython 3.12, manylinux_2_34 x86_64, wheels only): ({name: version},
    {name: set of names that want it}).  `prefer` seeds the output file, which uv treats as preferred
    versions (so the SGLang kit's and the image's versions are kept wherever vLLM accepts them)."""
    with tempfile.TemporaryDirectory() as d:
        open(os.path.join(d, "req.in"), "w").write("vllm==%s\n" % version)
        open(os.path.join(d, "over.txt"), "w").write("".join("%s==%s\n" % kv for kv in sorted(overrides.items())))
        out = os.path.join(d, "out.txt")
        open(out, "w").write("".join("%s==%s\n" % kv for kv in sorted(prefer.items())))
        cmd = [uv, "pip", "compile", os.path.join(d, "req.in"), "--python-version", "3.12",
               "--python-platform", "x86_64-manylinux_2_34", "--only-binary", ":all:", "--no-header",
               "--annotation-style", "line", "--override", os.path.join(d, "over.txt"), "-o", out]
        r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        if r.returncode != 0:
            sys.stdout.write(r.stdout)
            die("uv pip compile failed")
        res, via = {}, {}
        for line in open(out):
            body, _, comment = line.partition("#")
            if "==" not in body:
                continue
            n, v = body.strip().split("==", 1)
            n = norm(n.split("[")[0])
            res[n] = v.strip()
            comment = comment.strip()
            if comment.startswith("via "):
                via[n] = {norm(x.strip()) for x in comment[4:].split(",")
                          if x.strip() and not x.strip().startswith(("-r", "--override"))}
        return res, via


def cmd_pins(a):
    cache = os.path.abspath(a.cache)
    sgl_pins = sglang_pins()
    seen = image_seen() if PREFER_IMAGE_SEEN else {}
    image = sgl.read_image(os.path.join(SGLANG_KIT, "image-packages.txt"))
    prefer = {n: v for n, (role, v, _) in sgl_pins.items() if role not in ("drop",)}
    prefer.update({n: v for n, v in seen.items() if sgl_pins.get(n, ("",))[0] not in SGLANG_INSTALLED})
    # the SGLang kit's torch / torchvision (vLLM pins torch 2.14.0, torchvision 0.29.0): see `abi`
    overrides = {n: sgl_pins[n][1] for n in SHARED_OVERRIDES if sgl_pins.get(n, ("",))[0] in SGLANG_INSTALLED}
    closure, via = resolve(ensure_uv(cache), a.version, prefer, overrides)
    dropped = {n for n in closure if n in DROP}
    only_for = {}
    grew = True
    while grew:  # what only dropped packages want is not needed either
        grew = False
        for n in sorted(closure):
            parents = via.get(n, set()) & set(closure)
            if n in dropped or n == "vllm" or not parents or not parents <= dropped:
                continue
            only_for[n] = sorted(parents)
            dropped.add(n)
            grew = True
    pins = []
    for n, v in sorted(closure.items()):
        srole, sver, sdigest = sgl_pins.get(n, (None, None, None))
        if n == "vllm":
            pins.append(Pin("vllm", n, v, note="trimmed (kit_vllm.py TRIM), fatbins cut to sm_%d, LZMA" % FATBIN))
        elif n in DROP:
            pins.append(Pin("drop", n, v, note=DROP[n]))
        elif n in only_for:
            pins.append(Pin("drop", n, v, note="only needed by dropped %s" % ", ".join(only_for[n])))
        elif srole in SGLANG_INSTALLED and sgl.same_version(sver, v):
            note = "SGLang kit's %s" % srole
            if n in overrides:
                note += "; " + SHARED_OVERRIDES[n]
            pins.append(Pin("sglang", n, v, sdigest, note=note))
        elif n in REUSE and (n in image or srole == "image"):
            pins.append(Pin("image", n, v, note="reused: " + REUSE[n] + (
                " (image has %s)" % image[n] if image.get(n) else "")))
        elif n in FALLBACK and (n in image or srole in ("image", "fallback")):
            pins.append(Pin("fallback", n, v, note="image has %s" % (image.get(n) or "a copy")))
        elif n in image or srole == "image":
            have = image.get(n)
            pins.append(Pin("image", n, v, note=("image has %s" % have) if have and not sgl.same_version(have, v)
                            else "" if have else "image has a copy (version not read on the device)"))
        else:
            note = ("SGLang kit has %s: vLLM's own pin shadows it in vLLM processes" % sver
                    if srole in SGLANG_INSTALLED else "")
            pins.append(Pin("wheel", n, v, note=note))
    sgl.fetch(pins, cache, roles=CARRIED)
    header = (
        "# vllm {v} for the lent GPU image (CPython 3.12, x86_64), next to the SGLang kit's install ({s}).\n"
        "# Made by `benchmarks/vllm_kit/kit_vllm.py pins {v}` on {d} (uv pip compile, python 3.12,\n"
        "# manylinux_2_34 x86_64, wheels only, the SGLang kit's and the image's versions preferred,\n"
        "# overridden by the SGLang kit's versions: {o}).\n"
        "# ROLE NAME==VERSION [--hash=sha256:...]; roles are explained in kit_vllm.py.\n"
    ).format(v=a.version, s=os.path.basename(SGLANG_PINS), d=time.strftime("%Y-%m-%d"),
             o=", ".join("%s==%s" % kv for kv in sorted(overrides.items())))
    write_pins(a.out, pins, header)
    counts = {r: sum(p.role == r for p in pins) for r in ROLES}
    print("[pins] wrote %s: %s" % (a.out, ", ".join("%d %s" % (counts[r], r) for r in ROLES)))


# ---------------------------------------------------------------- stage
def link_or_copy(src, dst):
    os.makedirs(os.path.dirname(dst), exist_ok=True)
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)


def cmd_stage(a):
    pins = read_pins(a.pins)
    cache = os.path.abspath(a.cache)
    have = sgl.fetch(pins, cache, roles=CARRIED)
    version = next(p.version for p in pins if p.role == "vllm")
    if os.path.exists(a.stage):
        shutil.rmtree(a.stage)
    st = os.path.join(a.stage, "wh")
    os.makedirs(st)
    dirs = {"vllm": "vllm", "wheel": "wheels", "fallback": "fallback"}
    staged = {}
    for p in pins:
        if p.role not in dirs:
            continue
        src = have[p.name]
        drop = tuple(sorted(TRIM)) if p.role == "vllm" else ()
        if p.role == "vllm" or (p.role == "wheel" and os.path.getsize(src) >= LZMA_MIN):
            key = hashlib.sha256(repr((sgl.REPACK_FORMAT, sgl.sha256(src), drop, FATBIN, sgl.LZMA_PRESET)).encode())
            out = os.path.join(cache, "repack", key.hexdigest()[:16], os.path.basename(src))
            if not os.path.exists(out):
                sgl.repack_wheel(src, out, drop=drop, fatbin=FATBIN)
            else:
                print("[repack] cached %s (%.1f MiB)" % (os.path.basename(out), os.path.getsize(out) / 2**20))
            src = out
        dst = os.path.join(st, dirs[p.role], os.path.basename(src))
        link_or_copy(src, dst)
        staged[p.name] = (p.role, dst)
    for n, (role, path) in staged.items():  # .pth files do not run from a --target folder on PYTHONPATH
        with zipfile.ZipFile(path) as z:
            pth = [m for m in z.namelist() if "/" not in m and m.endswith(".pth")]
        if pth:
            print("[stage] WARNING: %s ships %s, which a --target install will not run" % (n, pth))
    # what the carried wheels want from packages they do not carry (the SGLang site's and the image's)
    carried = {n for n, (role, _) in staged.items() if role in ("vllm", "wheel")}
    dropped = {p.name for p in pins if p.role == "drop"}
    lines = set()
    for n, (role, path) in staged.items():
        if role not in ("vllm", "wheel"):
            continue
        for r in sgl.requires_dist(path):
            rn = norm(r.name)
            if rn not in carried and rn not in dropped:
                lines.add("%s%s\t# %s" % (rn, r.specifier, n))
    open(os.path.join(st, "requirements_outside.txt"), "w").write("\n".join(sorted(lines)) + "\n")
    with open(os.path.join(st, "sglang_site.txt"), "w") as f:  # what the installer checks in the SGLang site
        for p in pins:
            if p.role == "sglang":
                f.write("%s %s\n" % (p.name, p.version))
    with open(os.path.join(st, "deviations.txt"), "w") as f:  # the installer reports these as expected
        for name in sorted(set(SHARED_OVERRIDES) | set(REUSE)):
            f.write("%s %s\n" % (name, "shared" if name in SHARED_OVERRIDES else "reused"))
    with open(os.path.join(st, "kit.env"), "w") as f:
        f.write("KIT_VLLM_VERSION=%s\n" % version)
        f.write("KIT_TORCH_VERSION=%s\n" % next((p.version for p in pins if p.name == "torch"), ""))
        f.write("KIT_SGLANG_PINS=%s\n" % os.path.basename(SGLANG_PINS))
    shutil.copy2(a.pins, os.path.join(st, "PINS.txt"))
    shutil.copy2(os.path.join(HERE, "smoke_vllm.py"), os.path.join(st, "smoke_vllm.py"))
    total = sum(os.path.getsize(os.path.join(dp, fn)) for dp, _, fns in os.walk(st) for fn in fns)
    print("[stage] %s: %d wheels (%s), %.1f MiB" % (st, len(staged), ", ".join(
        "%d %s" % (sum(r == k for r, _ in staged.values()), k) for k in dirs), total / 2**20), flush=True)


# ---------------------------------------------------------------- pack
def tar_size(name, size):
    """Bytes a member takes in a GNU tar: header, data in 512-byte blocks, a long-name entry if needed."""
    n = 512 + (size + 511) // 512 * 512
    if len(name.encode()) >= 100:
        n += 512 + (len(name.encode()) + 1 + 511) // 512 * 512
    return n


def cmd_pack(a):
    stage = os.path.abspath(a.stage)
    cap = int(a.cap * 2**20)
    budget = cap - 10240 - 1024  # the end-of-archive blocks, record padding
    st = os.path.join(stage, "wh")
    rels = sorted(os.path.relpath(os.path.join(dp, fn), stage) for dp, _, fns in os.walk(st) for fn in fns
                  if fn != "MANIFEST.sha256")
    with open(os.path.join(st, "MANIFEST.sha256"), "w") as m:
        for rel in rels:
            m.write("%s  %s\n" % (sgl.sha256(os.path.join(stage, rel)), os.path.relpath(rel, "wh")))
    rels.append("wh/MANIFEST.sha256")
    pieces = []  # (name in the tar, file, offset, length); files larger than a bundle travel in parts
    part = budget - 4096
    for rel in rels:
        size = os.path.getsize(os.path.join(stage, rel))
        if tar_size(rel, size) <= budget:
            pieces.append((rel, rel, 0, size))
        else:
            for k, off in enumerate(range(0, size, part)):
                pieces.append(("%s.part%03d" % (rel, k), rel, off, min(part, size - off)))
    pieces.sort(key=lambda x: (-x[3], x[0]))
    bins = []
    for pc in pieces:  # first fit, largest first
        need = tar_size(pc[0], pc[3])
        for b in bins:
            if b["size"] + need <= budget:
                b["items"].append(pc)
                b["size"] += need
                break
        else:
            bins.append({"items": [pc], "size": need})
    out = os.path.abspath(a.outdir)
    for d in glob.glob(os.path.join(out, "b[0-9]*")):
        shutil.rmtree(d)
    summary = []
    for i, b in enumerate(bins, 1):
        tp = os.path.join(out, "b%d" % i, "vllm-bundle-%d.tar" % i)
        os.makedirs(os.path.dirname(tp))
        with tarfile.open(tp, "w", format=tarfile.GNU_FORMAT) as t:
            for arc, rel, off, length in sorted(b["items"]):
                ti = tarfile.TarInfo(arc)
                ti.size, ti.mode, ti.mtime = length, 0o644, 1767225600  # fixed: same pins, same bytes
                with open(os.path.join(stage, rel), "rb") as f:
                    f.seek(off)
                    t.addfile(ti, f)
        if os.path.getsize(tp) > cap:
            die("%s is over the cap" % tp)
        summary.append((i, tp, os.path.getsize(tp), sorted(x[0] for x in b["items"])))
    last = os.path.join(out, "b%d" % len(bins))
    shutil.copy2(a.installer, os.path.join(last, os.path.basename(a.installer)))
    env = dict(line.strip().split("=", 1) for line in open(os.path.join(st, "kit.env")) if "=" in line)
    with open(os.path.join(last, "vllm-bundle-info.env"), "w") as f:
        f.write("KIT_VLLM_VERSION=%s\nKIT_VLLM_BUNDLES=%d\n" % (env["KIT_VLLM_VERSION"], len(bins)))
        for i, tp, _, _ in summary:
            f.write("KIT_VLLM_BUNDLE_%d_SHA256=%s\n" % (i, sgl.sha256(tp)))
    with open(os.path.join(out, "manifest.txt"), "w") as f:
        f.write("vllm %s: %d bundle(s), cap %.1f MiB each\n" % (env["KIT_VLLM_VERSION"], len(bins), a.cap))
        for i, tp, size, items in summary:
            f.write("\nb%d/vllm-bundle-%d.tar  %d bytes (%.2f MiB)  sha256 %s\n" % (i, i, size, size / 2**20,
                                                                                 sgl.sha256(tp)))
            f.writelines("    %s\n" % it for it in items)
        f.write("\nb%d/%s, b%d/vllm-bundle-info.env\n" % (len(bins), os.path.basename(a.installer), len(bins)))
    for i, tp, size, items in summary:
        print("[pack] b%d/vllm-bundle-%d.tar  %.2f MiB  (%d entries)" % (i, i, size / 2**20, len(items)))
    print("[pack] total %.2f MiB in %d bundle(s); installer in b%d/" % (
        sum(s for _, _, s, _ in summary) / 2**20, len(bins), len(bins)))


# ---------------------------------------------------------------- abi
def torch_libs(wheel):
    from check_abi import Elf

    with zipfile.ZipFile(wheel) as z:
        return {n.rsplit("/", 1)[1]: Elf(z.read(n)) for n in z.namelist()
                if n.startswith("torch/lib/") and ".so" in n.rsplit("/", 1)[1]}


def cmd_abi(a):
    """Can vLLM's extensions (built against the torch vLLM pins) run on the SGLang kit's torch?"""
    from check_abi import Elf

    cache = os.path.abspath(a.cache)
    pins = read_pins(a.pins)
    vllm_pin = next(p for p in pins if p.role == "vllm")
    carried = next(p for p in pins if p.name == "torch")
    have = sgl.fetch([vllm_pin], cache, roles=("vllm",))
    meta = sgl.requires_dist(have["vllm"])
    wanted = next(str(r.specifier).lstrip("=") for r in meta if norm(r.name) == "torch")
    ref = Pin("wheel", "torch", wanted)
    got = sgl.fetch([ref, Pin("wheel", "torch", carried.version, carried.digest)], cache, roles=("wheel",))
    paths = sorted(glob.glob(os.path.join(cache, "wheels", "torch-*.whl")))
    ref_path = next(p for p in paths if sgl.wheel_dist(p)[1] == wanted)
    new_path = got["torch"] if sgl.wheel_dist(got["torch"])[1] == carried.version else next(
        p for p in paths if sgl.wheel_dist(p)[1] == carried.version)
    old, new = torch_libs(ref_path), torch_libs(new_path)
    old_def = set().union(*(e.defined for e in old.values()))
    new_def = set().union(*(e.defined for e in new.values()))
    print("torch %s: %d libraries, %d exported symbols; torch %s: %d libraries, %d exported symbols" % (
        wanted, len(old), len(old_def), carried.version, len(new), len(new_def)))
    print("  sonames only in one of them: %s" % (sorted(set(old) ^ set(new)) or "none"))
    gone, added = sorted(old_def - new_def), sorted(new_def - old_def)
    print("  exported by %s only: %d %s" % (wanted, len(gone), [s[0][:90] for s in gone[:4]]))
    print("  exported by %s only: %d" % (carried.version, len(added)))
    bad = 0
    trimmed = tuple(TRIM)
    with zipfile.ZipFile(have["vllm"]) as z:
        for n in sorted(z.namelist()):
            if not n.endswith(".so"):
                continue
            e = Elf(z.read(n))
            from_torch = {s for s in e.undefined if s in old_def}
            miss = sorted(s for s in from_torch if s not in new_def)
            bad += bool(miss) and not n.startswith(trimmed)
            left_out = " (left out of the kit)" if n.startswith(trimmed) else ""
            print("  %-52s imports %3d torch symbols; missing from %s: %d%s%s" % (
                n, len(from_torch), carried.version, len(miss), left_out,
                (" " + ", ".join(s[0][:80] for s in miss[:3])) if miss else ""))
    print("abi: %s" % ("OK" if not bad else "%d carried extension(s) miss torch symbols" % bad))
    return 1 if bad else 0


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sp = ap.add_subparsers(dest="cmd", required=True)
    p = sp.add_parser("pins")
    p.add_argument("version")
    p.add_argument("out")
    p.add_argument("--cache", required=True)
    p = sp.add_parser("stage")
    p.add_argument("pins")
    p.add_argument("--cache", required=True)
    p.add_argument("--stage", required=True)
    p = sp.add_parser("pack")
    p.add_argument("stage")
    p.add_argument("outdir")
    p.add_argument("--cap", type=float, default=50.0)
    p.add_argument("--installer", required=True)
    p = sp.add_parser("abi")
    p.add_argument("pins")
    p.add_argument("--cache", required=True)
    a = ap.parse_args()
    sys.exit({"pins": cmd_pins, "stage": cmd_stage, "pack": cmd_pack, "abi": cmd_abi}[a.cmd](a) or 0)


if __name__ == "__main__":
    main()
