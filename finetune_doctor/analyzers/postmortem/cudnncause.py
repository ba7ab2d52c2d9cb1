"""A cuDNN graph descriptor that could not be finalized (``ev.crash.cause`` kind ``cudnn-finalize``).

torch's convolutions on cuDNN 8/9 build a cuDNN-frontend graph (aten/src/ATen/native/cudnn/Conv_v8.cpp); when the
backend cannot finalize one of its descriptors the frontend's check raises a RuntimeError whose text names it:
"CUDNN_BACKEND_TENSOR_DESCRIPTOR cudnnFinalize failedptrDesc->finalize() cudnn_status: CUDNN_STATUS_..." (often
cut to "ptrDesc->finalize()" in a paste). The status most reported with it is CUDNN_STATUS_SUBLIBRARY_LOADING_FAILED:
the cuDNN library loaded is not the one the torch build expects (a separately installed nvidia-cudnn-cu12 beside
torch's own pin; modelscope/ms-swift#6931: uninstalling it fixed F.conv3d), or a torch release whose bundled cuDNN
fails on that convolution (a 3-D convolution of a vision tower's patch embedding; moving torch to another release
with its matching torch-bound packages).
"""

from __future__ import annotations

import re

_FINALIZE = re.compile(r"ptrDesc->finalize\(\)|cudnnFinalize failed|CUDNN_BACKEND_\w+_DESCRIPTOR")


def cudnn_finalize(cls: str, msg: str) -> str | None:
    """Words for a RuntimeError (`cls`) whose message (`msg`) is the cuDNN frontend's failed descriptor finalize
    (`_FINALIZE`); None otherwise."""
    if cls != "RuntimeError" or not _FINALIZE.search(msg):
        return None
    return ("cuDNN could not finalize a descriptor of the convolution torch built (the cuDNN frontend's "
            "ptrDesc->finalize() check, aten/src/ATen/native/cudnn): the cuDNN loaded does not work with this torch "
            "build — compare `pip show nvidia-cudnn-cu12` with the cuDNN the torch release pins (a cuDNN installed "
            "beside torch's own is the usual cause: modelscope/ms-swift#6931), or move torch to another release "
            "and reinstall the packages built against it (apex, flash-attn, Megatron); "
            "torch.backends.cudnn.enabled = False confirms it at the cost of speed")
