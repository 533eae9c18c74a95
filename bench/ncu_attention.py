"""One launch each of tcomp's attention (bf16 B4 H32 S4096 D128, the defaults) and SDPA's cuDNN
kernel, for ncu (results/2026-12-03_ncu_attention_vs_cudnn*.txt):

    ncu --clock-control none --kernel-name regex:"attention|cudnn" --launch-skip 2 --launch-count 2 \\
        --metrics sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active,... \\
        python3 bench/ncu_attention.py
"""
import torch, torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
from tcomp.kernels.attention_sm90 import AttentionConfig, attention_sm90
B, H, S, D = 4, 32, 4096, 128
q, k, v = (torch.randn(B, H, S, D, device="cuda").bfloat16() for _ in range(3))
kern = attention_sm90(AttentionConfig(), {"D": D, "E": D})
qz, kz, vz = (x.reshape(B * H, S, D) for x in (q, k, v))
for _ in range(2):
    kern(qz, kz, vz)
    with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
        F.scaled_dot_product_attention(q, k, v)
torch.cuda.synchronize()
