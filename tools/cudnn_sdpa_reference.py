#!/usr/bin/env python3
"""PyTorch's cuDNN SDPA at handgrad's layout, with cuDNN's logs: the reference graphs.

handgrad keeps q, k and v packed as (B, T, 3, NH, hs) and writes O as (B, T, NH, hs).
This runs torch's scaled_dot_product_attention on strided views of exactly that layout
(causal, bf16, forward and backward) with only the cuDNN backend allowed, so that cuDNN's
backend API log (CUDNN_LOGINFO_DBG / CUDNN_LOGDEST_DBG, set by the caller) and
cudnn-frontend's graph log (CUDNN_FRONTEND_LOG_INFO / CUDNN_FRONTEND_LOG_FILE) record
every descriptor attribute PyTorch sets. The C graph builder (src/backend/cuda/cudnn_attention.c)
is written to match them. It also prints where the loaded libcudnn lives and its version,
and checks the result against SDPA's math backend in float32.

With --deviceprop FILE it also writes cuDNN's JSON description of the GPU
(CUDNN_BACKEND_DEVICEPROP_DESCRIPTOR), which a cuDNN that has it can use to finalize and
plan graphs on a machine without that GPU.

Runs on the GPU machine (scripts/gpu_session.sh cudnn-ref). Not on any test path.
Usage: tools/cudnn_sdpa_reference.py [--shapes B,T,NH,hs;...] [--deviceprop FILE]
"""
import argparse
import ctypes
import os
import sys


def loaded_libs(pattern):
    """Paths of the shared objects mapped into this process whose name contains pattern."""
    paths = set()
    with open("/proc/self/maps") as f:
        for line in f:
            parts = line.split()
            if len(parts) >= 6 and pattern in os.path.basename(parts[5]):
                paths.add(parts[5])
    return sorted(paths)


def write_deviceprop(path):
    """cuDNN's JSON representation of device 0, through the backend API by ctypes."""
    lib = ctypes.CDLL(loaded_libs("libcudnn.so")[0])
    c = ctypes
    lib.cudnnGetErrorString.restype = c.c_char_p
    handle = c.c_void_p()
    st = lib.cudnnCreate(c.byref(handle))
    if st:
        print("deviceprop: cudnnCreate:", lib.cudnnGetErrorString(st))
        return
    DEVICEPROP, ATTR_HANDLE, ATTR_DEVICE_ID, ATTR_JSON = 38, 2701, 2700, 2702
    TYPE_HANDLE, TYPE_INT64, TYPE_INT32, TYPE_CHAR = 0, 3, 23, 24
    desc = c.c_void_p()
    st = lib.cudnnBackendCreateDescriptor(DEVICEPROP, c.byref(desc))
    if st:
        print("deviceprop: create:", lib.cudnnGetErrorString(st))
        return
    tries = ((ATTR_HANDLE, TYPE_HANDLE, c.byref(handle)), (ATTR_DEVICE_ID, TYPE_INT32, c.byref(c.c_int32(0))),
             (ATTR_DEVICE_ID, TYPE_INT64, c.byref(c.c_int64(0))))
    for attr, typ, ptr in tries:
        st = lib.cudnnBackendSetAttribute(desc, attr, typ, c.c_int64(1), ptr)
        print(f"deviceprop: set attribute {attr} type {typ}:", lib.cudnnGetErrorString(st))
    st = lib.cudnnBackendFinalize(desc)
    print("deviceprop: finalize:", lib.cudnnGetErrorString(st))
    if st:
        return
    n = c.c_int64(0)
    buf = c.create_string_buffer(1 << 20)
    st = lib.cudnnBackendGetAttribute(desc, ATTR_JSON, TYPE_CHAR, c.c_int64(len(buf)), c.byref(n), buf)
    print("deviceprop: json:", lib.cudnnGetErrorString(st), n.value, "chars")
    if not st:
        with open(path, "wb") as f:
            f.write(buf.raw[:n.value].rstrip(b"\0"))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shapes", default="2,1024,12,64;1,1024,8,128",
                    help="B,T,NH,hs;... (default GPT-2 small's heads and a head width of 128)")
    ap.add_argument("--deviceprop", help="write cuDNN's JSON description of the GPU here")
    args = ap.parse_args()
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    print("torch", torch.__version__, "cuda", torch.version.cuda, "cudnn", torch.backends.cudnn.version())
    print("device", torch.cuda.get_device_name(0))
    torch.manual_seed(0)
    ok = True
    for spec in args.shapes.split(";"):
        B, T, NH, hs = (int(x) for x in spec.split(","))
        qkv = (torch.rand(B, T, 3, NH, hs, device="cuda") * 2 - 1).to(torch.bfloat16)
        qkv.requires_grad_(True)
        # (B, NH, T, hs) views of the packed buffer: strides (T*3*NH*hs, hs, 3*NH*hs, 1)
        q, k, v = (qkv[:, :, i].transpose(1, 2) for i in range(3))
        print(f"shape B={B} T={T} NH={NH} hs={hs}: q strides {q.stride()}")
        with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
            o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        do = (torch.rand_like(o, dtype=torch.float32) * 2 - 1).to(torch.bfloat16)
        o.backward(do)
        torch.cuda.synchronize()
        grad = qkv.grad.float()
        # float32 reference through the math backend on the same rounded inputs
        ref_in = qkv.detach().float().requires_grad_(True)
        rq, rk, rv = (ref_in[:, :, i].transpose(1, 2) for i in range(3))
        with sdpa_kernel(SDPBackend.MATH):
            ro = F.scaled_dot_product_attention(rq, rk, rv, is_causal=True)
        ro.backward(do.float())
        eo = ((o.float() - ro).abs().max() / ro.abs().max()).item()
        eg = ((grad - ref_in.grad).abs().max() / ref_in.grad.abs().max()).item()
        print(f"  O rel err {eo:.2e}, dQKV rel err {eg:.2e} (against fp32 math)")
        ok = ok and eo < 2e-2 and eg < 5e-2
        qkv.grad = None
    print("libcudnn loaded from:", *loaded_libs("libcudnn"), sep="\n  ")
    if args.deviceprop:
        try:
            write_deviceprop(args.deviceprop)
        except (OSError, IndexError, AttributeError) as e:
            print("deviceprop:", e)
    try:
        lib = ctypes.CDLL("libcudnn.so.9")
        lib.cudnnGetVersion.restype = ctypes.c_size_t
        print("cudnnGetVersion", lib.cudnnGetVersion())
    except OSError as e:
        print("libcudnn.so.9 not loadable by soname alone:", e)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
