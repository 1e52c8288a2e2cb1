"""Name and category rules: which events are device work, which are communication, memory or compute.

The kernel-name patterns follow Holistic Trace Analysis' published grouping (communication: names
starting `nccl`/`hip`/`hccl` or containing `ncclKernel`; memory: `Memcpy`/`Memset`/`dma`; compute:
everything not matching its exclusion list), so that `--hta-compatible` agrees with it; the host-side
collective names (`gloo:all_reduce`, `c10d::allreduce_`, `nccl:all_to_all`) are stride's own rule for
CPU-only traces, where the collective runs on a host thread.

CPU operators are further sorted by what bounds them (`cpu_op_class`), as a GPU trace's kernels are not: a CPU
trace's "device" is the host, whose operators are either arithmetic-bound (matmul, convolution, attention) or
memory-bandwidth-bound (elementwise, reductions, copies, norms, pooling, optimizer updates: about one FLOP per
element moved). A pointwise chain on 64 MB tensors ran at 0.6 GFLOP/s and 4.8 GB/s, near a bare copy's 6.6 GB/s:
bandwidth, not arithmetic, set its pace, and calling it compute-bound led to bf16 advice autocast cannot honour
(it leaves pointwise ops in fp32).
"""

from __future__ import annotations

import re

# Categories of events that run on an accelerator (Kineto names, old and new).
DEVICE_CATS = frozenset(
    {"kernel", "Kernel", "gpu_memcpy", "Memcpy", "gpu_memset", "Memset", "cuda_sync", "mtia_ccp_events"}
)
MEMORY_CATS = frozenset({"gpu_memcpy", "Memcpy", "gpu_memset", "Memset"})
# Categories of host events kept: operators, annotations, runtime/driver calls (kernel launches).
HOST_CATS = frozenset({"cpu_op", "Operator", "user_annotation", "cuda_runtime", "Runtime", "cuda_driver", "hip_runtime",
                       "mtia_runtime", "xpu_runtime", "privateuse1_runtime"})
RUNTIME_CATS = frozenset({"cuda_runtime", "Runtime", "cuda_driver", "hip_runtime", "mtia_runtime", "xpu_runtime",
                          "privateuse1_runtime"})
OPERATOR_CATS = frozenset({"cpu_op", "Operator"})
ANNOTATION_CATS = frozenset({"user_annotation"})

_COMM_KERNEL = re.compile(r"(^nccl.*)|(^hip)|(^hccl)|(.*ncclKernel.*)")
_MEMORY_KERNEL = re.compile(r"(^(hip)?Memcpy)|(^(hip)?Memset)|(^dma)")
_NOT_COMPUTE = re.compile(
    r"(^nccl)|(.*Memcpy)|(.*Memset)|(.*dma)|(^.*Sync)|(^Stream Wait Event)|(cuda.*LaunchKernel)|(^runFunction)"
    r"|(^hip)|(^job_exe)|(^packet)|(^pe_exe)|(^cpum_exe_subgraph)|(^hccl)|(^collective_subgraph_execution)"
)
# Host-side collectives: the record_function names c10d and its backends emit.
_HOST_COMM = re.compile(r"^(gloo|nccl|rccl|hccl|mpi|ucc|xccl):|^c10d::|^record_param_comms$")
PROFILER_STEP = re.compile(r"^ProfilerStep\s*#\s*(\d+)")

COMPUTE, COMM, MEMORY, OTHER, DATA = 0, 1, 2, 3, 4
# DATA: a CPU operator run by the data loader on the training thread (under a data-loading annotation)
KIND_NAMES = ("compute", "communication", "memory", "other", "data loading")


def device_kind(name: str) -> int:
    """HTA's kernel type of a device event, by name alone: COMM, MEMORY, COMPUTE or OTHER."""
    if _COMM_KERNEL.match(name):
        return COMM
    if _MEMORY_KERNEL.match(name):
        return MEMORY
    if not _NOT_COMPUTE.match(name):
        return COMPUTE
    return OTHER


def is_host_comm(name: str) -> bool:
    """A host event that is a collective (gloo work on its own thread, or a c10d call)."""
    return _HOST_COMM.match(name) is not None


# DDP's reducer on the main thread: copies gradients into and out of the buckets and averages them. It runs only
# because the step syncs (absent under no_sync) and memory-bound advice cannot touch it, so it is communication:
# 22 % of a gloo DDP step was `reducer::mul_out` and `copy_bucket_to_grad`, read as bandwidth-bound (audit 17, H1b).
_DDP_REDUCER = re.compile(r"^torch(::|\.)distributed(::|\.)(ddp(::|\.))?reducer::")


def is_ddp_reducer(name: str) -> bool:
    """An operator of DDP's reducer (`torch::distributed::reducer::mul_out` / `copy_`,
    `torch.distributed.ddp.reducer::copy_bucket_to_grad`): communication, though not a collective."""
    return _DDP_REDUCER.match(name) is not None


def step_number(name: str) -> int | None:
    m = PROFILER_STEP.match(name)
    return int(m.group(1)) if m else None


def annotation_label(name: str) -> str:
    """`## forward ##` -> `forward`; other names unchanged."""
    s = name.strip()
    if s.startswith("##") and s.endswith("##") and len(s) > 4:
        return s[2:-2].strip()
    return s


# -- data-loading annotations --------------------------------------------------------------------------------------
# Whole labels or words, not any label containing "data": `DistributedDataParallel.forward` (DDP's forward) and
# TorchRec's `## all2all_data:kjt lengths ##` (an all-to-all of sparse features) load nothing, and matching them made
# a Python-heavy forward in DDP "data-bound, raise num_workers".
_DATA_LOADER = re.compile(r"dataloader|data_loader|data loader")  # torch's `enumerate(DataLoader)#...__next__`
_DATA_WORDS = re.compile(
    r"(^|\.)data$"  # `data`, `## data ##`, `stride.data`
    r"|(?<![a-z0-9])data[ _-]?(load|loading|loader|fetch|prefetch|read|reading|wait|iter|next|prep|preprocess\w*"
    r"|augment\w*|collate|time)(?![a-z])"  # data_load, data_loading, data_wait, data_prep
    r"|(?<![a-z0-9])(load|loading|fetch|prefetch|read|get|next|wait_for|wait for)[ _-]?(data|batch)(?![a-z])"
)
_NOT_DATA = re.compile(r"all2all|alltoall|all_to_all|allreduce|all_reduce|allgather|all_gather|reduce_scatter"
                       r"|broadcast|parallel|distributed|ddp|fsdp")
DATA_ANNOTATIONS_DOC = ("`enumerate(DataLoader)#...` (torch's DataLoader), `stride.data`, or a record_function "
                        "named `data`, `data_load`, `load_batch`, `wait_for_batch` and the like")


def is_data_annotation(name: str) -> bool:
    """A host annotation that marks data loading (time under it is data time), by whole words of its label."""
    label = annotation_label(name).lower()
    if is_host_comm(name) or _NOT_DATA.search(label):
        return False
    return bool(_DATA_LOADER.search(label) or _DATA_WORDS.search(label))


# -- what bounds a CPU operator ----------------------------------------------------------------------------------
OP_MATH, OP_MEMORY, OP_OTHER, OP_COMPILED = 0, 1, 2, 3
OP_CLASS_NAMES = ("math", "bandwidth", "other", "compiled")

# torch.compile's regions: the generated C++ kernels inside run without profiler records unless
# torch._inductor.config.cpp.enable_kernel_profile is set, so their time is the regions' own
_COMPILED = re.compile(r"^Torch-Compiled Region|^CompiledFunction|CompiledFxGraph|^TorchDynamo|^Pregraph bytecode"
                       r"|^AOTDispatcher")
_INDUCTOR_POINTWISE = re.compile(r"cpp_fused_|triton_(poi|red|per)_")  # inductor's generated (fused) kernels
_INDUCTOR_MATH = re.compile(r"cpp_template|triton_tem_|triton_mm")
_AUTOGRAD_NODE = re.compile(r"^autograd::engine::evaluate_function|^[A-Za-z0-9]+Backward\d*$")
# matmul, convolution, attention, recurrent cells, linear algebra: arithmetic per element moved grows with size
_MATH = re.compile(
    r"(mm|bmm|addmm|addbmm|baddbmm|addmv|addr|mv|dot|vdot|inner|outer|ger|matmul|linear\w*|bilinear|einsum"
    r"|tensordot|chain_matmul|kron|int_mm|scaled_mm|addmm_activation|\w*_mm|mm_\w+|\w*gemm\w*|\w*conv(?!ert)\w*"
    r"|\w*scaled_dot_product\w*|\w*attention\w*|\w*lstm\w*|\w*gru\w*|\w*rnn\w*"
    r"|linalg_(?!vector_norm|matrix_norm|norm)\w+|cholesky\w*|\w*svd\w*|qr|geqrf|eig\w*|\w*solve\w*|inverse"
    r"|lu_\w+|\w*fft\w*|cdist)"
)
# about one operation per element read or written: elementwise maths and comparisons, fills and copies, gathers,
# concatenation, reductions, softmax, norms, pooling, dropout, losses, optimizer updates, their backwards
_MEMORY = re.compile(
    r"(add|sub|rsub|mul|div|true_divide|floor_divide|remainder|fmod|neg|abs|sign|sgn|relu6?|leaky_relu|elu|selu"
    r"|celu|gelu|silu|mish|hardswish|hardsigmoid|hardtanh|softplus|softshrink|hardshrink|sigmoid|logsigmoid|tanh"
    r"|exp2?|expm1|log|log2|log10|log1p|pow|float_power|sqrt|rsqrt|reciprocal|square|sin|cos|tan|asin|acos|atan"
    r"|atan2|sinh|cosh|erf|erfc|erfinv|floor|ceil|round|trunc|frac|clamp|clamp_min|clamp_max|clip|threshold|where"
    r"|masked_fill|masked_scatter|masked_select|lerp|addcmul|addcdiv|maximum|minimum|fmax|fmin|eq|ne|lt|le|gt|ge"
    r"|logical_\w+|bitwise_\w+|isnan|isinf|isfinite|nan_to_num|copysign|hypot|xlogy|fill|zero|zeros|zeros_like"
    r"|ones|ones_like|full|full_like|new_zeros|new_ones|new_full|copy\w*|clone|to_copy|cat|concat|concatenate|stack"
    r"|hstack|vstack|index\w*|gather|scatter\w*|take|put|embedding\w*|repeat\w*|tile|flip|roll|tril|triu|pad"
    r"|constant_pad_nd|\w+_pad\d?d|upsample\w*|pixel_(un)?shuffle|one_hot|narrow_copy|\w+_scatter|sum|nansum"
    r"|mean|nanmean|prod|max|min|amax|amin|aminmax|argmax|argmin|norm|linalg_vector_norm|var|std|var_mean|std_mean"
    r"|logsumexp|cumsum|cumprod|all|any|count_nonzero|softmax|log_softmax|\w*softmax_backward_data"
    r"|\w*layer_norm\w*|\w*batch_norm\w*|\w*group_norm\w*|\w*rms_norm\w*|instance_norm|weight_norm\w*"
    r"|norm_except_dim|\w*dropout\w*|masked_scale|\w*pool\d?d\w*|\w*_loss\w*|binary_cross_entropy\w*|kl_div"
    r"|foreach_\w+|fused_(adam|adamw|sgd|adagrad)\w*|\w+_backward)"
)


# GPU compute kernels by what bounds them, from their names (HTA's kernel type calls them all "compute"): matmul,
# convolution, attention and FFT kernels do many operations per byte; PyTorch's elementwise, reduction, norm, softmax,
# indexing, concatenation and optimizer kernels, and inductor's pointwise/reduction kernels, about one, so memory
# bandwidth sets their pace. A step of vectorized_elementwise_kernel alone read "compute-bound: fewer, larger
# matmuls" (outside audit of `stride analyze`). The kernel's own name is read, not its template arguments (an
# elementwise kernel's functor may be named anything). Names matching neither are OP_OTHER: no opinion.
_GPU_MATH = re.compile(
    r"gemm|gemv|splitkreduce|cutlass|cublas|xmma|nvjet|mma|conv(?!ert)|fprop|dgrad|wgrad|winograd|scudnn|fft"
    r"|flash|fmha|attention|attn|triton_tem_|triton_mm|bmm")
_GPU_BANDWIDTH = re.compile(
    r"elementwise|reduce|catarray|multi_tensor_apply|norm|softmax|dropout|pool|index|gather|scatter|embedding"
    r"|copy|fill|nchwtonhwc|nhwctonchw|transpose|triton_poi_|triton_red_|triton_per_|cross_entropy|nll"
    r"|rowwisemoments|computefusedparams|gammabeta|adam|sgd|distribution|bernoulli|cumsum|scan|upsample|where"
    r"|bn_fw|bn_bw|batchnorm|radixsort|sort|bounds_check|scalepackedtensor")
_GPU_BANDWIDTH_FIRST = re.compile(r"(^|::)triton_(poi|red|per)_|gammabeta")
_ANON_NS = re.compile(r"\(anonymous namespace\)::")
_ENABLE_IF = re.compile(r"^std::enable_if<.*?>::type\s+")  # a templated return type before the kernel's name


def gpu_kernel_base(name: str) -> str:
    """`void at::native::(anonymous namespace)::cunn_SoftMaxForward<4, float>(float*, ...)` -> `at::native::
    cunn_softmaxforward`: the kernel's own (lower-case) name without return type, template or call arguments."""
    s = _ENABLE_IF.sub("", _ANON_NS.sub("", name).strip().removeprefix("void ").strip())
    cut = min((i for i in (s.find("<"), s.find("(")) if i >= 0), default=len(s))
    return s[:cut].lower()


def gpu_kernel_class(name: str) -> int:
    """What bounds a GPU compute kernel, by its own name: OP_MATH (matmul/conv/attention/FFT), OP_MEMORY
    (elementwise, reductions, norms, indexing, copies: bandwidth-bound) or OP_OTHER (not recognised)."""
    base = gpu_kernel_base(name)
    if base.startswith(("cudnn::ops::nchwtonhwc", "cudnn::ops::nhwctonchw")):  # cuDNN's layout copies
        return OP_MEMORY
    if _GPU_BANDWIDTH_FIRST.search(base):  # inductor's pointwise/reduction kernels are named after the ops they fuse
        # (triton_poi_fused_convolution_relu_0 is the relu after a convolution); LayerNorm's backward GammaBeta kernel
        # holds "mma": both read as matmul before (review of the session's diff)
        return OP_MEMORY
    if _GPU_MATH.search(base):
        return OP_MATH
    if _GPU_BANDWIDTH.search(base):
        return OP_MEMORY
    return OP_OTHER


def is_compiled_code(name: str) -> bool:
    """A compiled region (torch.compile's wrappers) or a kernel inductor generated: time inside it is compiled code."""
    return bool(_COMPILED.search(name) or _INDUCTOR_POINTWISE.search(name) or _INDUCTOR_MATH.search(name))


def cpu_op_class(name: str) -> int:
    """What bounds a CPU operator's own time, by its name: OP_MATH, OP_MEMORY (bandwidth), OP_COMPILED (a compiled
    graph whose operators the trace does not show) or OP_OTHER (autograd and framework wrappers, views, allocation,
    random number generation, names not recognised). DDP's reducer operators are communication (`is_ddp_reducer`),
    whatever this says of them."""
    if _COMPILED.search(name):
        return OP_COMPILED
    if _INDUCTOR_MATH.search(name):
        return OP_MATH
    if _INDUCTOR_POINTWISE.search(name):
        return OP_MEMORY
    if _AUTOGRAD_NODE.match(name):
        return OP_OTHER
    base = name.rsplit("::", 1)[-1].strip().lower().lstrip("_")
    base = base.removesuffix("_out").removesuffix(".out").rstrip("_")
    if _MATH.fullmatch(base):
        return OP_MATH
    if _MEMORY.fullmatch(base):
        return OP_MEMORY
    return OP_OTHER


# -- collectives that every rank must enter before any rank can leave ----------------------------------------------
# gloo runs them on its own thread, where the event spans the work; NCCL's kernels on the device. A broadcast's root,
# a reduce's non-roots and a send may finish before their peers start, so they are left out.
_MEETING_COLLECTIVE = re.compile(
    r"^gloo:(all_?reduce|all_?gather|reduce_?scatter|all_?to_?all|barrier)"
    r"|^nccl(Dev)?Kernel_(AllReduce|AllGather|ReduceScatter|AllToAll)", re.IGNORECASE)


def is_meeting_collective(name: str) -> bool:
    """A collective that ends on no rank before every rank has entered it (all-reduce, all-gather, barrier ...)."""
    return _MEETING_COLLECTIVE.match(name) is not None
